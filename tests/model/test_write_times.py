"""The time of a dataset's last write lands in its header with its data, in the same
transaction (model/writeback.py `_stamp`): a flush (an fsync) is one commit, not one for the
times and one for the data; a close's commit carries the time too; a dataset with nothing left
to write (a truncation) is stamped in the flush's last transaction. h5py reads the times."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import h5py
import numpy as np
import pytest
from conftest import run_h5fs

from h5fs.model.file import H5File
from h5fs.model.tree_edit import TreeEditor
from h5fs.model.writeback import Writeback

WHEN = 1_700_000_000


def _file(path, chunked: bool) -> None:
    with h5py.File(path, "w", libver="latest") as h:
        extra = dict(chunks=(100,), maxshape=(None,), compression="gzip") if chunked else {}
        h.create_dataset("d", data=np.arange(1000, dtype="<i4"), track_times=True, **extra)
        h.create_dataset("other", data=np.arange(10, dtype="<i4"), chunks=(10,), maxshape=(None,), track_times=True)


@contextmanager
def _written(path, monkeypatch, name: str, edit) -> Iterator[tuple[Writeback, list]]:
    """The file open with a writeback, `edit(wb, dataset)` made and the dataset stamped WHEN;
    yields the writeback and the transactions begun from then on."""
    with H5File.open(str(path), writable=True) as f:
        wb = Writeback(f, 1 << 20)
        TreeEditor(f, wb)
        ds = f.resolve(name)
        edit(wb, ds)
        wb.stamp(ds.address, WHEN)
        yield wb, _transactions(f, monkeypatch)
        wb.close()


def _transactions(f, monkeypatch) -> list:
    begun, real = [], f.store.transaction
    monkeypatch.setattr(f.store, "transaction", lambda *a, **k: begun.append(1) or real(*a, **k))
    return begun


def _mtime(path, name: str) -> int:
    with h5py.File(path, "r") as h:
        return h5py.h5o.get_info(h[name].id).mtime


@pytest.mark.parametrize("chunked", [True, False])
def test_a_flush_commits_the_data_and_its_time_at_once(tmp_path, monkeypatch, chunked):
    path = tmp_path / "f.h5"
    _file(path, chunked)
    with _written(path, monkeypatch, "/d", lambda wb, ds: wb.write(ds, 40, np.full(10, -1, "<i4").tobytes())) \
            as (wb, begun):
        wb.flush()
        assert len(begun) == 1 and not wb.stamps
    assert _mtime(path, "d") == WHEN and _mtime(path, "other") != WHEN
    with h5py.File(path, "r") as h:
        want = np.arange(1000, dtype="<i4")
        want[10:20] = -1
        assert np.array_equal(h["d"][:], want)
    run_h5fs("check", path, check=True)


def test_a_close_commit_carries_the_time(tmp_path, monkeypatch):
    path = tmp_path / "f.h5"
    _file(path, True)
    with _written(path, monkeypatch, "/d", lambda wb, ds: wb.write(ds, 0, np.full(5, 7, "<i4").tobytes())) \
            as (wb, begun):
        wb.closed(wb.f.resolve("/d").address)
        assert len(begun) == 1 and not wb.stamps
        wb.f.store.group_commit()
        assert _mtime(path, "d") == WHEN
    run_h5fs("check", path, check=True)


def test_a_dataset_with_nothing_to_write_is_stamped_in_the_flush(tmp_path, monkeypatch):
    path = tmp_path / "f.h5"
    _file(path, True)
    with _written(path, monkeypatch, "/other", lambda wb, ds: wb.truncate(ds, 20)) as (wb, begun):   # committed at once
        wb.flush()
        assert len(begun) == 1 and not wb.stamps
    assert _mtime(path, "other") == WHEN
    with h5py.File(path, "r") as h:
        assert list(h["other"][:]) == [0, 1, 2, 3, 4]
    run_h5fs("check", path, check=True)
