"""Filtering ahead of the commit (model/writeback.py `_write_chunks`): a sequential writer's
chunks are filtered in the pool as soon as the writer is done with them, the one it left for
the next, and the last one once it reached the end of the data (a copied `.npy` file's close
then finds its chunk filtered, or being filtered, instead of filtering it then). What lands is
what h5py reads."""

from __future__ import annotations

import h5py
import numpy as np
from conftest import run_h5fs

from h5fs.model.file import H5File
from h5fs.model.tree_edit import TreeEditor
from h5fs.model.writeback import Writeback


def _dataset(path, n: int, chunk: int) -> tuple[H5File, Writeback, object]:
    with h5py.File(path, "w", libver="latest") as h:
        h.create_group("g")
    f = H5File.open(str(path), writable=True)
    wb = Writeback(f, 64 << 20)
    ed = TreeEditor(f, wb)
    address = ed.create_dataset(f.resolve("/g"), "d", np.dtype("<f4"), (n,), maxshape=(None,), chunks=(chunk,),
                                filters="gzip:4,shuffle")
    return f, wb, f.get(address, "/g/d")


def test_the_last_chunk_is_filtered_once_the_writer_reaches_the_end(tmp_path):
    data = np.round(np.cumsum(np.random.default_rng(0).normal(0, 0.01, 2500)), 2).astype("<f4")
    f, wb, ds = _dataset(tmp_path / "f.h5", data.size, 1000)
    raw = data.tobytes()
    try:
        for off in range(0, len(raw), 1200):   # pieces across chunk boundaries, as cp and tar write
            assert wb.write_now(ds, off, raw[off:off + 1200]) or wb.write(ds, off, raw[off:off + 1200])
            st = wb.dirty[ds.address]
            ahead = set(st.encoded)
            if off + 1200 < 4000:
                assert ahead == set()           # still in the first chunk
            elif off + 1200 < len(raw):
                assert (2,) not in ahead        # the last chunk is not whole yet
        assert set(wb.dirty[ds.address].encoded) == {(0,), (1,), (2,)}
        wb.closed(ds.address)
        assert ds.address not in wb.dirty
        wb.close()
    finally:
        f.close()
    with h5py.File(tmp_path / "f.h5", "r") as h:
        assert np.array_equal(h["g/d"][:], data) and h["g/d"].compression == "gzip"
    run_h5fs("check", tmp_path / "f.h5", check=True)


def test_a_chunk_written_again_after_it_was_filtered_ahead_lands_as_written_last(tmp_path):
    """A writer that comes back to the end (a random writer): the filtering done ahead is of
    an older version, not used."""
    f, wb, ds = _dataset(tmp_path / "f.h5", 100, 100)
    try:
        wb.write(ds, 0, np.arange(100, dtype="<f4").tobytes())
        assert (0,) in wb.dirty[ds.address].encoded
        wb.write(ds, 40, np.full(10, -1, "<f4").tobytes())
        wb.flush()
        wb.close()
    finally:
        f.close()
    want = np.arange(100, dtype="<f4")
    want[10:20] = -1
    with h5py.File(tmp_path / "f.h5", "r") as h:
        assert np.array_equal(h["g/d"][:], want)
    run_h5fs("check", tmp_path / "f.h5", check=True)
