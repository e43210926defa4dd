"""The writeback engine without FUSE: random writes into stored (filtered) chunks, held as
patches and flushed in the background under a small budget, against a NumPy model and h5py."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from h5fs.model.file import H5File
from h5fs.model.writeback import Writeback
from write_support import verify_file


@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_random_writes_with_background_flushes(tmp_path, libver):
    path = tmp_path / f"wb-{libver}.h5"
    model = np.arange(2000 * 64, dtype="<f4").reshape(2000, 64)
    with h5py.File(path, "w", libver=libver) as f:
        f.create_dataset("d", data=model, chunks=(16, 64), compression="gzip", shuffle=True)
    raw = bytearray(model.tobytes())
    rng = np.random.default_rng(3)
    with H5File.open(str(path), writable=True) as f:
        wb = Writeback(f, dirty_limit=64 * 1024)   # flushes (in the background too) every few writes
        for i in range(2000):
            at = int(rng.integers(0, len(raw) - 300))
            data = rng.integers(0, 256, int(rng.integers(1, 300)), dtype=np.uint8).tobytes()
            wb.write(f.resolve("/d"), at, data)
            raw[at:at + len(data)] = data
            if i % 25 == 0:   # reads see the writes at once, patches and flushes in flight included
                start = int(rng.integers(0, len(raw) - 50000))
                assert wb.read(f.resolve("/d"), start, 50000) == bytes(raw[start:start + 50000])
        wb.close()
    data = verify_file(path, h5dump=libver == "earliest")
    assert data["d"].tobytes() == bytes(raw)


def test_a_flush_rewriting_every_chunk_reuses_the_space_it_frees(tmp_path):
    """Small writes into every stored chunk are held as patches (a few bytes each against the
    budget); the flush that rewrites all the chunks commits them in parts of at most the budget,
    each reusing the space the previous parts freed: the file grows by about one part, not by
    the whole dataset."""
    path = tmp_path / "parts.h5"
    rng = np.random.default_rng(5)
    model = rng.standard_normal((256 * 64, 256)).astype("<f4")   # 256 chunks of 64 KiB
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("d", data=model, chunks=(64, 256), compression="gzip", compression_opts=1)
    before = path.stat().st_size
    raw = bytearray(model.tobytes())
    budget = 16 * 64 * 1024   # 16 chunks a part: 16 parts
    with H5File.open(str(path), writable=True) as f:
        wb = Writeback(f, dirty_limit=budget)
        for chunk in range(256):
            at = chunk * 64 * 1024 + int(rng.integers(0, 60000)) // 4 * 4
            data = rng.standard_normal(8).astype("<f4").tobytes()
            wb.write(f.resolve("/d"), at, data)
            raw[at:at + len(data)] = data
        wb.close()
    # one whole rewrite held at once would add `before`; a part adds at most 16 of 256 chunks
    assert path.stat().st_size < before * 1.25
    assert verify_file(path, h5dump=False)["d"].tobytes() == bytes(raw)


@pytest.mark.parametrize("layout", ["implicit", "gzip", "contiguous"])
def test_commits_left_in_the_journal_replay_whole(tmp_path, layout):
    """Writes committed without a group commit (`land`, as at a file's close) and the process
    gone before one (a `kill -9`): the .h5 file still holds the last group commit, and the next
    open replays every commit, also where a later one rewrote the same storage in place (an
    implicit index's chunk slots, contiguous data: no check can describe those bytes)."""
    path = tmp_path / "f.h5"
    with h5py.File(path, "w", libver="latest") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        if layout == "contiguous":
            f.create_dataset("d", data=np.zeros(4096, "<f4"))
        elif layout == "gzip":
            f.create_dataset("d", data=np.zeros(4096, "<f4"), chunks=(512,), compression="gzip")
        else:   # fixed size, allocated early, no filters: libhdf5's implicit chunk index
            dcpl.set_chunk((512,))
            dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
            h5py.h5d.create(f.id, b"d", h5py.h5t.IEEE_F32LE, h5py.h5s.create_simple((4096,)), dcpl=dcpl)
    model = np.zeros(4096, "<f4")
    f = H5File.open(str(path), writable=True, lock=False)
    wb = Writeback(f)
    for k in range(1, 4):   # the same chunks written again and again, each committed
        model[100:1500] = k
        wb.write(f.resolve("/d"), 400, model[100:1500].tobytes())
        wb.land([f.resolve("/d").address])
    with h5py.File(path, "r") as h:   # the file alone: a group commit's state (reused space makes one), sound
        assert h["d"].shape == (4096,)
    H5File.open(str(path), writable=True, lock=False).close()   # the next open replays
    with h5py.File(path, "r") as h:
        assert np.array_equal(h["d"][()], model)


def test_pending_until_the_flush_settles_writes_and_edits(tmp_path):
    """`pending` (what the mount's flusher asks) holds while dirty data or a committed edit is
    not yet durable in the file itself, and the flush settles both."""
    from h5fs.model.tree_edit import TreeEditor
    path = tmp_path / "pending.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("d", data=np.zeros((64, 64), "<f4"), chunks=(16, 64))
    with H5File.open(str(path), writable=True) as f:
        wb = Writeback(f, dirty_limit=1 << 20)
        assert not wb.pending and not f.store.unsettled_changes
        wb.write(f.resolve("/d"), 0, np.ones(64, "<f4").tobytes())
        assert wb.pending
        wb.flush()
        assert not wb.pending and not f.store.unsettled_changes
        TreeEditor(f, wb).mkdir(f.root, "g")   # a journal record, its pages in the batch
        assert f.store.unsettled_changes and wb.pending and not wb.dirty
        wb.flush()
        assert not wb.pending and not f.store.unsettled_changes
        wb.close()
    with h5py.File(path, "r") as f:
        assert "g" in f and f["d"][0, 0] == 1


def test_a_crash_inside_the_group_commit_replays_every_record(tmp_path, monkeypatch):
    """Chunks committed with checks, their dataset removed, its space reused by new groups; the
    group commit then dies half-way through writing the batch over that space (a kill -9): the
    next open replays every record, the checks of data made durable before the batch was
    written not standing in the way (the journal's marker)."""
    from h5fs.model.tree_edit import TreeEditor
    from h5fs.storage.page_overlay import PageOverlay
    path = tmp_path / "f.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("d", data=np.zeros(65536, "<f4"), chunks=(4096,), compression="gzip")
    f = H5File.open(str(path), writable=True, lock=False)
    wb, ed = Writeback(f), TreeEditor(f, Writeback(f))
    wb.write(f.resolve("/d"), 0, np.arange(65536, dtype="<f4").tobytes())
    wb.land([f.resolve("/d").address])          # chunks written, records check them
    ed.unlink(f.root, "d")                      # their space freed in the batch...
    for i in range(300):                        # ...and reused by new headers
        ed.mkdir(f.root, f"g{i}")
    real = PageOverlay.write_to

    def half(self, writer):                     # the group commit killed part-way
        numbers = self._numbers[:len(self._numbers) // 2]
        for p in numbers:
            lo, hi = self._spans[p]
            writer.pwrite(p * 4096 + lo, self.pages[p][lo:hi])
        raise KeyboardInterrupt
    monkeypatch.setattr(PageOverlay, "write_to", half)
    with pytest.raises(KeyboardInterrupt):
        f.store.group_commit()
    monkeypatch.setattr(PageOverlay, "write_to", real)
    H5File.open(str(path), writable=True, lock=False).close()   # the next open replays
    with h5py.File(path, "r") as h:
        assert sorted(h) == sorted(f"g{i}" for i in range(300))


def test_new_contiguous_storage_in_space_the_batch_freed_reads_its_fill(tmp_path):
    """Groups made and removed (their headers' space freed in the batch), then a contiguous
    dataset's storage allocated there and written in part: the rest reads as zeros (the fill),
    not as the freed headers' bytes the batch still held."""
    from h5fs.model.tree_edit import TreeEditor
    path = tmp_path / "f.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("c", shape=(100,), dtype="<f4")   # storage not allocated yet
    f = H5File.open(str(path), writable=True, lock=False)
    wb = Writeback(f)
    ed = TreeEditor(f, wb)
    for i in range(20):
        ed.mkdir(f.root, f"g{i}")
    for i in range(20):
        ed.rmdir(f.root, f"g{i}")
    wb.write(f.resolve("/c"), 0, np.arange(4, dtype="<f4").tobytes())
    wb.close()
    f.close()
    with h5py.File(path, "r") as h:
        assert np.array_equal(h["c"][()], np.concatenate([np.arange(4, dtype="<f4"), np.zeros(96, "<f4")]))
