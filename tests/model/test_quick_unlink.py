"""Unlinks without a transaction (model/quick_unlink.py): a link removed from a group whose link
edits wait (dense, or a symbol table) is one journal record of the removal and its object's
countdown; reads lose the name at once; the object is freed when they land, kept while a link
or an open file holds it; a kill leaves them to the next read-write open. libhdf5 (h5py) judges
every file, `h5fs check` each."""

from __future__ import annotations

from types import SimpleNamespace

import h5py
import numpy as np
import pytest
from conftest import run_h5fs
from crash_support import edit_then_kill

from h5fs.model import fresh_groups
from h5fs.model.file import H5File
from h5fs.model.tree_edit import TreeEditor
from h5fs.model.writeback import Writeback
from h5fs.storage.journal import deferred, journal_path, records
from h5fs.storage.pending_links import REMOVE, UNREF

COUNT = 20   # past libhdf5's 8 compact links: the group's links are dense (or a symbol table)


def _file(path, libver: str = "latest", times: bool = False) -> None:
    with h5py.File(path, "w", libver=libver) as f:
        gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
        gcpl.set_obj_track_times(times)
        g = h5py.Group(h5py.h5g.create(f.id, b"g", gcpl=gcpl))
        for i in range(COUNT):
            g.create_dataset(f"d{i:02d}", data=np.arange(i, i + 100, dtype="<f4"), chunks=(100,), maxshape=(None,))
        g["soft"] = h5py.SoftLink("/g/d00")


def _transactions(f: H5File, monkeypatch) -> list:
    begun, real = [], f.store.transaction
    monkeypatch.setattr(f.store, "transaction", lambda *a, **k: begun.append(1) or real(*a, **k))
    return begun


@pytest.mark.parametrize("libver", ["latest", "earliest"])
def test_unlinks_in_a_waiting_group_take_no_transaction_and_free_when_they_land(tmp_path, monkeypatch, libver):
    """Every removal is a journal record (no transaction); reads lose the names at once; a hard
    link elsewhere keeps its object (one link left); the landing frees the rest, and their
    space takes new data again."""
    path = tmp_path / "f.h5"
    _file(path, libver)
    with H5File.open(str(path), writable=True) as f:
        wb = Writeback(f, 1 << 20)
        ed = TreeEditor(f, wb)
        ed.hard_link(f.resolve("/g/d01").address, f.root, "kept")
        begun = _transactions(f, monkeypatch)
        lefts = {name: ed.unlink(f.resolve("/g"), name) for name in ["soft"] + [f"d{i:02d}" for i in range(COUNT)]}
        assert begun == [] and lefts["soft"] is None and lefts["d01"] == 1
        assert all(left == 0 for name, left in lefts.items() if name not in ("soft", "d01"))
        kinds = [op[0] for op in deferred(records(open(journal_path(str(path)), "rb").read()))]
        assert kinds.count(REMOVE) == COUNT + 1 and kinds.count(UNREF) == COUNT
        assert f.resolve("/g").links() == [] and f.resolve("/g").link("d05") is None
        with pytest.raises(FileNotFoundError):
            ed.unlink(f.resolve("/g"), "d05")
        wb.flush()
        assert not f.store.pending
        before = f.store.allocator.eoa
        ed.create_dataset(f.resolve("/g"), "new", np.dtype("<f4"), (100,))
        assert f.store.allocator.eoa == before   # in the space the removals freed
        wb.close()
    with h5py.File(path, "r") as h:
        assert list(h["g"]) == ["new"] and list(h["kept"][:3]) == [1, 2, 3]
        assert h5py.h5o.get_info(h["kept"].id).rc == 1
    run_h5fs("check", path, check=True)


def test_a_group_whose_times_change_unlinks_in_a_transaction(tmp_path, monkeypatch):
    """A group keeping times (that say another second): the removal sets them, in a transaction."""
    path = tmp_path / "f.h5"
    _file(path, times=True)
    with H5File.open(str(path), writable=True) as f:
        wb = Writeback(f, 1 << 20)
        ed = TreeEditor(f, wb)
        mtime = f.resolve("/g").header.times[1]
        begun = _transactions(f, monkeypatch)
        monkeypatch.setattr(fresh_groups, "time", SimpleNamespace(time_ns=lambda: (mtime + 5) * 10**9))
        ed.unlink(f.resolve("/g"), "d03")
        assert begun
        wb.close()
    with h5py.File(path, "r") as h:
        assert "d03" not in h["g"] and h5py.h5o.get_info(h["g"].id).mtime >= mtime
    run_h5fs("check", path, check=True)


def test_an_open_object_whose_last_link_goes_waits_for_its_close(tmp_path):
    """Unlinked while open (`in_use`): an orphan, kept past the landing until `free_orphan`."""
    path = tmp_path / "f.h5"
    _file(path)
    with H5File.open(str(path), writable=True) as f:
        wb = Writeback(f, 1 << 20)
        address = f.resolve("/g/d07").address
        ed = TreeEditor(f, wb, in_use=lambda a: a == address)
        assert ed.unlink(f.resolve("/g"), "d07") == 0
        assert address in ed.orphans
        wb.flush()
        assert list(f.get(address, "/g/d07 (open)").read_array()[:2]) == [7, 8]
        ed.in_use = lambda a: False
        assert ed.free_orphan(address)
        wb.close()
    with h5py.File(path, "r") as h:
        assert "d07" not in h["g"] and len(h["g"]) == COUNT   # the soft link and 19 datasets
    run_h5fs("check", path, check=True)


def test_unlinks_a_kill_left_waiting_land_at_the_next_open(tmp_path, caplog):
    """Killed with removals waiting: a read-only open shows them gone and writes nothing; the
    read-write open lands them, and libhdf5 agrees."""
    path = tmp_path / "f.h5"
    _file(path)
    edit_then_kill(path, f"""
        for i in range(0, {COUNT}, 2):
            ed.unlink(f.resolve("/g"), f"d{{i:02d}}")
    """)
    before = path.read_bytes()
    kept = [f"d{i:02d}" for i in range(1, COUNT, 2)]
    with H5File.open(str(path)) as f:
        assert sorted(ln.name for ln in f.resolve("/g").links()) == kept + ["soft"]
    assert path.read_bytes() == before
    with H5File.open(str(path), writable=True):
        pass
    assert f"landed {COUNT} link edits" in caplog.text   # 10 removals, 10 countdowns
    with h5py.File(path, "r") as h:
        assert sorted(h["g"]) == kept + ["soft"]
        assert [h[f"g/{name}"][0] for name in kept] == list(range(1, COUNT, 2))
    run_h5fs("check", path, check=True)
