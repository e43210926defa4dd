"""A small edit runs on the trio thread (fuse/offload.py `run_unless_busy`), but a landing of
deferred edits never does: an edit that meets one there (a transaction landing new groups
first) raises WouldBlock before it changed anything, and runs again, whole, in a worker."""

from __future__ import annotations

import threading

import h5py
import pytest
import trio

from h5fs.fuse import offload
from h5fs.model.file import H5File
from h5fs.model.tree_edit import TreeEditor
from h5fs.model.writeback import Writeback
from h5fs.storage.byte_source import WouldBlock, inline


@pytest.fixture
def edited(tmp_path):
    path = tmp_path / "f.h5"
    with h5py.File(path, "w", libver="latest") as h:
        h.create_group("g")
    f = H5File.open(str(path), writable=True)
    wb = Writeback(f, 1 << 20)
    ed = TreeEditor(f, wb)
    ed.mkdir(f.resolve("/g"), "new")   # waits to land
    assert f.store.pending.fresh
    yield f, ed
    wb.close()
    f.close()
    with h5py.File(path, "r") as h:
        assert list(h["g"]) == ["moved"]


def test_a_landing_inline_raises_before_it_changes_anything(edited):
    f, ed = edited
    commits = f.store.commits
    with inline(), pytest.raises(WouldBlock):
        ed.rename(f.resolve("/g"), "new", f.resolve("/g"), "moved")   # a transaction: lands first
    assert f.store.commits == commits and f.store.pending.fresh
    ed.rename(f.resolve("/g"), "new", f.resolve("/g"), "moved")


def test_run_unless_busy_sends_such_an_edit_to_a_worker(edited):
    f, ed = edited
    threads = []

    def rename() -> None:
        threads.append(threading.current_thread())
        ed.rename(f.resolve("/g"), "new", f.resolve("/g"), "moved")

    trio.run(offload.run_unless_busy, threading.RLock(), rename)
    assert threads[0] is threading.main_thread() and threads[-1] is not threading.main_thread()
    assert not f.store.pending.fresh and f.resolve("/g/moved") is not None
