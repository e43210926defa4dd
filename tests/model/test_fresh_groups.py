"""New groups that wait to land (model/fresh_groups.py, storage/pending_objects.py): `mkdir` in a
dense group, and `setfattr` / `setfattr -x` on the new group, are journal records without a
transaction; reads show the groups and their attributes at once; they land, attributes built in,
at the flush or before any other edit; a kill leaves them to the next read-write open (a
read-only one shows them and writes nothing); every record prefix of a power loss opens to a
state the edits went through. libhdf5 (h5py) is the judge of every file, `h5fs check` of each."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
from conftest import REPO, run_h5fs
from crash_support import rebuild, replayed_prefixes
from write_support import verify_file

from h5fs.check import check
from h5fs.errors import H5fsError, InvalidWrite
from h5fs.model import fresh_groups, namespace, tree_edit
from h5fs.model.file import H5File
from h5fs.model.tree_edit import TreeEditor
from h5fs.model.writeback import Writeback
from h5fs.storage.file_writer import read_recording
from h5fs.storage.journal import deferred, journal_path, records
from h5fs.storage.pending_objects import NEW, SETATTR

SEED_LINKS = 20   # past libhdf5's 8 compact links: the group's links are dense


def _gcpl(times: bool = False, attr_order: bool = False, link_order: bool = False):
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    gcpl.set_obj_track_times(times)
    if attr_order:
        gcpl.set_attr_creation_order(h5py.h5p.CRT_ORDER_TRACKED | h5py.h5p.CRT_ORDER_INDEXED)
    if link_order:
        gcpl.set_link_creation_order(h5py.h5p.CRT_ORDER_TRACKED | h5py.h5p.CRT_ORDER_INDEXED)
    return gcpl


def _make(path, layout: str = "latest", times: bool = False, attr_order: bool = False, link_order: bool = False,
          children: int = SEED_LINKS, userblock: int = 0) -> None:
    """/g holding `children` groups, made with the group creation properties asked; "earliest": a
    v1 header whose links an external link took from a symbol table to dense storage, as libhdf5
    does. /old: a group of the same kind that exists (edits on it take transactions)."""
    kwargs = {"userblock_size": userblock} if userblock else {}
    with h5py.File(path, "w", libver=layout, **kwargs) as f:
        for name in ("g", "old"):
            h5py.h5g.create(f.id, name.encode(), gcpl=_gcpl(times, attr_order, link_order))
        for i in range(children):
            f["g"].create_group(f"old{i:02d}")
        if layout == "earliest":
            f["g"]["ext"] = h5py.ExternalLink("other.h5", "/x")


def _open(path) -> tuple[H5File, Writeback, TreeEditor]:
    f = H5File.open(str(path), writable=True)
    wb = Writeback(f, 1 << 20)
    return f, wb, TreeEditor(f, wb)


def _close(f: H5File, wb: Writeback) -> None:
    wb.close()
    f.close()


def _view(f: H5File, path: str) -> tuple:
    """What the mount shows of a group: its stat numbers, links and attributes (in the order read)."""
    obj = f.resolve(path)
    n = namespace.numbers(obj)
    return (n.nlink, n.mtime_ns, n.ctime_ns, obj.kind, [ln.name for ln in obj.links()],
            [(a.name, str(a.value)) for a in obj.attributes()])


def _h5py_view(h: h5py.File, path: str) -> tuple:
    """`_view` as libhdf5 reads the group (times it keeps none of: 0)."""
    g = h[path]
    info = h5py.h5o.get_info(g.id)
    return (info.rc, info.mtime, info.ctime, "group" if isinstance(g, h5py.Group) else "?", list(g),
            [(k, str(v)) for k, v in g.attrs.items()])


def _seconds(view: tuple) -> tuple:
    """`_view` with its times in seconds (0 when none), as h5py gives them."""
    return (view[0], (view[1] or 0) // 10**9, (view[2] or 0) // 10**9) + view[3:]


def _transactions(f: H5File, monkeypatch) -> list:
    """A list that grows by one for each transaction the store begins."""
    begun, real = [], f.store.transaction
    monkeypatch.setattr(f.store, "transaction", lambda *a, **k: begun.append(1) or real(*a, **k))
    return begun


def _clock_at(monkeypatch, seconds: int) -> None:
    """What the fast way takes for now (a parent's times say now or not), fixed at `seconds`."""
    monkeypatch.setattr(fresh_groups, "time", SimpleNamespace(time_ns=lambda: seconds * 10**9))


ATTRS = {"n0": [], "n1": [("one", "1")], "n2": [("zeta", "z"), ("alpha", "température"), ("mid", "")],
         "n3": [("k", "v")] * 1}


@pytest.mark.parametrize("layout, times", [("latest", False), ("latest", True), ("earliest", False)])
def test_mkdir_and_setfattr_in_a_dense_group_wait_and_read_as_they_land(tmp_path, monkeypatch, layout, times):
    """mkdir in a dense group whose times stay (none, or they say now) and setfattr on the new
    group begin no transaction: the journal holds them and reads show the group (stat numbers,
    no links, its attributes) as the flush lands it, and as libhdf5 reads it then."""
    path = tmp_path / "f.h5"
    _make(path, layout, times=times)
    f, wb, ed = _open(path)
    if times:   # the parent's times say now: a new link leaves them as they are
        _clock_at(monkeypatch, f.resolve("/g").header.times[1])
    begun = _transactions(f, monkeypatch)
    made = {name: ed.mkdir(f.resolve("/g"), name) for name in ATTRS}
    for name, attrs in ATTRS.items():
        for key, text in attrs:
            ed.set_attribute(f.resolve(f"/g/{name}"), key, text.encode())
    assert begun == [] and set(made.values()) <= set(f.store.pending.fresh)
    kinds = {op[0] for op in deferred(records(open(journal_path(str(path)), "rb").read()))}
    assert {NEW, SETATTR} <= kinds
    assert namespace.lookup(f, f.resolve("/g"), "/g", b"n2").kind == namespace.DIR
    assert len(f.resolve("/g").links()) == SEED_LINKS + len(ATTRS) + (layout == "earliest")
    before = {name: _view(f, f"/g/{name}") for name in ATTRS}
    assert [a for _, a in before["n2"][5:]] == [sorted(ATTRS["n2"])]   # by name: no creation order
    wb.flush()
    assert not f.store.pending and begun
    assert {name: f.resolve(f"/g/{name}").address for name in ATTRS} == made
    assert {name: _view(f, f"/g/{name}") for name in ATTRS} == before
    _close(f, wb)
    with h5py.File(path, "r") as h:
        assert {name: _h5py_view(h, f"/g/{name}") for name in ATTRS} == {n: _seconds(v) for n, v in before.items()}
        if times:
            assert all(h5py.h5o.get_info(h[f"/g/{name}"].id).mtime > 0 for name in ATTRS)
    verify_file(path, h5dump=False)


def test_setfattr_again_keeps_the_place_and_removals_act_as_on_a_stored_group(tmp_path):
    """On a new group whose attributes go by creation order: a value set again replaces the old
    one in its place, a removed one goes, set anew it comes last; the result is the one the same
    edits give on a stored group (transactions), as libhdf5 reads both. Removing a name never
    set raises the error a stored group's gives."""
    path = tmp_path / "f.h5"
    _make(path, attr_order=True)
    edits = [("b", b"1"), ("a", b"2"), ("b", b"3"), ("c", b"4"), ("a", None), ("d", b"5"), ("a", b"6")]
    f, wb, ed = _open(path)
    fresh = ed.mkdir(f.resolve("/g"), "new")
    for target in ("/g/new", "/old"):
        for name, text in edits:
            if text is None:
                ed.remove_attribute(f.resolve(target), name)
            else:
                ed.set_attribute(f.resolve(target), name, text)
    assert fresh in f.store.pending.fresh
    shown = _view(f, "/g/new")[5]
    assert shown == _view(f, "/old")[5]
    errors = []
    for target in ("/old", "/g/new"):
        with pytest.raises(H5fsError) as info:
            ed.remove_attribute(f.resolve(target), "never")
        errors.append((type(info.value), info.value.errno))
    assert errors[0] == errors[1]
    _close(f, wb)
    with h5py.File(path, "r") as h:
        assert list(h["g/new"].attrs.items()) == list(h["old"].attrs.items())
        assert [(k, str(v)) for k, v in h["g/new"].attrs.items()] == shown
    verify_file(path, h5dump=False)


@pytest.mark.parametrize("layout", ["latest", "earliest"])
def test_attributes_past_the_room_of_the_header_land_as_a_transaction_adds_them(tmp_path, layout):
    """Attributes that do not fit in the new header's room (more than 8: dense storage in a v2
    header; a long name; a large value) land as the attribute path adds them; libhdf5 reads every
    one as reads showed it before, and a new group given one small attribute lands built with it."""
    path = tmp_path / "f.h5"
    _make(path, layout)
    attrs = {"one": [("only", "x")], "many": [(f"a{i:02d}", f"value {i}") for i in range(12)],
             "large": [("long" * 50, "short"), ("huge", "é" * 50_000)]}
    f, wb, ed = _open(path)
    for name, items in attrs.items():
        ed.mkdir(f.resolve("/g"), name)
        for key, text in items:
            ed.set_attribute(f.resolve(f"/g/{name}"), key, text.encode())
    assert len(f.store.pending.fresh) == len(attrs)
    before = {name: _view(f, f"/g/{name}") for name in attrs}
    wb.flush()
    assert f.resolve("/g/many").dense_attributes == (layout == "latest")
    _close(f, wb)
    with h5py.File(path, "r") as h:
        for name, items in attrs.items():
            assert dict(h[f"g/{name}"].attrs) == dict(items)
            assert _h5py_view(h, f"/g/{name}") == _seconds(before[name])
    verify_file(path, h5dump=False)


@pytest.mark.parametrize("case", ["times not now", "compact", "link order", "symbol table", "new parent"])
def test_mkdir_takes_a_transaction_where_the_group_cannot_wait(tmp_path, monkeypatch, case):
    """A parent whose times a new link changes, whose links are compact (8 at most), numbered
    (creation order), in a symbol table, or a new group itself: mkdir takes a transaction (a new
    parent lands first), and the file holds the group as libhdf5 lists it."""
    path = tmp_path / "f.h5"
    if case == "symbol table":
        with h5py.File(path, "w", libver="earliest") as h:
            for i in range(SEED_LINKS):
                h.create_group(f"g/old{i:02d}")
    else:
        _make(path, times=case == "times not now", link_order=case == "link order",
              children=3 if case == "compact" else SEED_LINKS)
    f, wb, ed = _open(path)
    parent = "/g"
    if case == "times not now":   # a second after the parent's times: the new link changes them
        _clock_at(monkeypatch, f.resolve("/g").header.times[1] + 1)
    if case == "new parent":
        parent = "/g/fresh"
        assert ed.mkdir(f.resolve("/g"), "fresh") in f.store.pending.fresh
    begun = _transactions(f, monkeypatch)
    address = ed.mkdir(f.resolve(parent), "new")
    assert address not in f.store.pending.fresh and not f.store.pending.fresh and begun
    assert f.resolve(f"{parent}/new").address == address
    _close(f, wb)
    with h5py.File(path, "r") as h:
        assert list(h[parent]) == (["new"] if case == "new parent" else
                                   [f"old{i:02d}" for i in range(len(h["g"]) - 1)] + ["new"] if case == "link order" else
                                   sorted(list(h[parent])))
        assert "new" in h[parent] and isinstance(h[f"{parent}/new"], h5py.Group)
    verify_file(path, h5dump=False)


def _edit(ed: TreeEditor, f: H5File, kind: str) -> None:
    g, new = f.resolve("/g"), f.resolve("/g/new")
    if kind == "mkdir inside":
        ed.mkdir(new, "inner")
    elif kind == "rename":
        ed.rename(g, "new", g, "renamed")
    elif kind == "move":
        ed.rename(g, "new", f.root, "moved")
    elif kind == "rmdir":
        ed.rmdir(g, "new")
    elif kind == "hard link":
        ed.hard_link(new.address, f.root, "again")
    elif kind == "dataset":
        ed.create_dataset(new, "d", np.dtype("<i4"), (3,))
    elif kind == "typed attribute":
        ed.create_attribute(new, "typed", np.dtype("<i2"), b"[1, 2]")
    elif kind == "other group":
        ed.rmdir(g, "old00")


EDITS = ["mkdir inside", "rename", "move", "rmdir", "hard link", "dataset", "typed attribute", "other group"]


@pytest.mark.parametrize("kind", EDITS)
def test_every_other_edit_lands_the_new_groups_first(tmp_path, kind):
    """An edit other than mkdir in a dense group and setfattr on a new group lands the waiting new
    groups, with their attributes, before it: libhdf5 reads the result of both."""
    path = tmp_path / "f.h5"
    _make(path)
    f, wb, ed = _open(path)
    for name in ("new", "other"):
        ed.mkdir(f.resolve("/g"), name)
    for key in ("x", "y"):
        ed.set_attribute(f.resolve("/g/new"), key, f"{key}!".encode())
    ed.set_attribute(f.resolve("/g/other"), "z", b"zz")
    assert len(f.store.pending.fresh) == 2
    _edit(ed, f, kind)
    assert not f.store.pending.fresh
    _close(f, wb)
    attrs = {"x": "x!", "y": "y!"}
    with h5py.File(path, "r") as h:
        assert dict(h["g/other"].attrs) == {"z": "zz"}
        where = {"rename": "g/renamed", "move": "moved", "rmdir": None}.get(kind, "g/new")
        assert "new" not in h["g"] if where != "g/new" else "new" in h["g"]
        if where is not None:
            want = attrs | ({"typed": [1, 2]} if kind == "typed attribute" else {})
            assert {k: np.asarray(v).tolist() for k, v in h[where].attrs.items()} == want
        if kind == "typed attribute":
            assert h["g/new"].attrs["typed"].dtype == np.dtype("<i2")
        if kind == "mkdir inside":
            assert list(h["g/new"]) == ["inner"] and isinstance(h["g/new/inner"], h5py.Group)
        if kind == "hard link":
            assert h["again"] == h["g/new"] and h5py.h5o.get_info(h["again"].id).rc == 2
        if kind == "dataset":
            assert h["g/new/d"].dtype == np.dtype("<i4") and h["g/new/d"][()].tolist() == [0, 0, 0]
        if kind == "other group":
            assert "old00" not in h["g"]
    verify_file(path, h5dump=False)


def test_setfattr_refused_on_a_new_group_leaves_it_waiting_as_it_was(tmp_path):
    """A name HDF5 cannot hold or a value that is not UTF-8 is refused (EINVAL) before the journal
    holds anything: the group still waits, with the attributes it had."""
    path = tmp_path / "f.h5"
    _make(path)
    f, wb, ed = _open(path)
    ed.mkdir(f.resolve("/g"), "new")
    ed.set_attribute(f.resolve("/g/new"), "kept", b"yes")
    journal = os.path.getsize(journal_path(str(path)))
    for name, text in (("", b"v"), ("a\0b", b"v"), ("bad", b"\xff\xfe")):
        with pytest.raises(InvalidWrite):
            ed.set_attribute(f.resolve("/g/new"), name, text)
    assert os.path.getsize(journal_path(str(path))) == journal and f.store.pending.fresh
    assert _view(f, "/g/new")[5] == [("kept", "yes")]
    _close(f, wb)
    with h5py.File(path, "r") as h:
        assert dict(h["g/new"].attrs) == {"kept": "yes"}
    verify_file(path, h5dump=False)


def test_a_file_whose_library_keeps_text_otherwise_lands_the_group_for_setfattr(tmp_path):
    """In a PyTables file (its text attributes fixed-length strings) setfattr on a new group lands
    it and stores the text as on a stored group."""
    path = tmp_path / "f.h5"
    _make(path)
    with h5py.File(path, "a") as h:
        h.attrs["PYTABLES_FORMAT_VERSION"] = np.bytes_(b"2.1")
    f, wb, ed = _open(path)
    ed.mkdir(f.resolve("/g"), "new")
    for target in ("/g/new", "/old"):
        ed.set_attribute(f.resolve(target), "title", "naïve".encode())
    assert not f.store.pending.fresh
    _close(f, wb)
    with h5py.File(path, "r") as h:
        new, old = h["g/new"].attrs, h["old"].attrs
        assert new["title"] == old["title"] and new.get_id("title").dtype == old.get_id("title").dtype
        assert h5py.check_string_dtype(new.get_id("title").dtype).length is not None   # not h5py's vlen
    verify_file(path, h5dump=False)


def test_past_the_limit_new_groups_land_in_the_background(tmp_path, monkeypatch):
    """New groups count among the deferred edits LAND_LIMIT bounds: past it a background flush
    lands them with their attributes."""
    monkeypatch.setattr(tree_edit, "LAND_LIMIT", 5)
    path = tmp_path / "f.h5"
    _make(path)
    f, wb, ed = _open(path)
    for i in range(3):   # a group and its link each
        ed.mkdir(f.resolve("/g"), f"n{i}")
        ed.set_attribute(f.resolve(f"/g/n{i}"), "i", str(i).encode())
    wb._background.result(timeout=30)
    assert not f.store.pending
    _close(f, wb)
    with h5py.File(path, "r") as h:
        assert [dict(h[f"g/n{i}"].attrs) for i in range(3)] == [{"i": str(i)} for i in range(3)]
    verify_file(path, h5dump=False)


BURST = 30

_KILLED = """
import os, sys
sys.path.insert(0, {root!r})
from h5fs.model.file import H5File
from h5fs.model.tree_edit import TreeEditor
from h5fs.model.writeback import Writeback
f = H5File.open({path!r}, writable=True)
ed = TreeEditor(f, Writeback(f, 1 << 20))
for i in range({n}):
    ed.mkdir(f.resolve("/g"), f"new{{i:02d}}")
    new = f.resolve(f"/g/new{{i:02d}}")
    ed.set_attribute(new, "i", str(i).encode())
    ed.set_attribute(new, "gone", b"soon")
    ed.remove_attribute(f.resolve(f"/g/new{{i:02d}}"), "gone")
    if i % 3 == 0:
        for k in range(10):   # past the header's room
            ed.set_attribute(f.resolve(f"/g/new{{i:02d}}"), f"k{{k}}", b"v" * k)
    if i == {n} // 2:
        f.store.group_commit()   # a checkpoint: the journal holds them again
os.kill(os.getpid(), 9)
"""


def _killed_attrs(i: int) -> dict[str, str]:
    """The attributes `_KILLED` leaves on its group `i`."""
    return {"i": str(i)} | ({f"k{k}": "v" * k for k in range(10)} if i % 3 == 0 else {})


@pytest.mark.parametrize("userblock", [0, 512])
def test_new_groups_a_kill_left_waiting_are_shown_read_only_and_landed_read_write(tmp_path, caplog, userblock):
    """A process killed with new groups waiting (a checkpoint among them): a read-only open shows
    every group and attribute and writes nothing; `h5fs check` names the deferred edits; the next
    read-write open lands them, their headers where its allocator says, and libhdf5 reads them."""
    path = tmp_path / "f.h5"
    _make(path, userblock=userblock)
    proc = subprocess.run([sys.executable, "-c", _KILLED.format(root=str(REPO), path=str(path), n=BURST)])
    assert proc.returncode == -9
    journal = journal_path(str(path))
    report = run_h5fs("check", path)
    assert report.returncode != 0 and f"{BURST} new groups" in report.stdout + report.stderr
    before = (path.read_bytes(), open(journal, "rb").read())
    with H5File.open(str(path)) as f:
        names = [ln.name for ln in f.resolve("/g").links()]
        assert sorted(names) == sorted([f"old{i:02d}" for i in range(SEED_LINKS)] + [f"new{i:02d}" for i in range(BURST)])
        shown = {i: {a.name: str(a.value) for a in f.resolve(f"/g/new{i:02d}").attributes()} for i in range(BURST)}
        assert all(f.resolve(f"/g/new{i:02d}").links() == [] for i in range(BURST))
    assert shown == {i: _killed_attrs(i) for i in range(BURST)}
    assert (path.read_bytes(), open(journal, "rb").read()) == before
    with H5File.open(str(path), writable=True) as f:
        assert {i: {a.name: str(a.value) for a in f.resolve(f"/g/new{i:02d}").attributes()} for i in range(BURST)} == shown
    assert f"{BURST} new groups" in caplog.text and not os.path.exists(journal)
    with h5py.File(path, "r") as h:
        assert {i: dict(h[f"g/new{i:02d}"].attrs) for i in range(BURST)} == shown
        assert all(len(h[f"g/new{i:02d}"]) == 0 for i in range(BURST))
    verify_file(path, h5dump=False)


def _snapshot(path) -> dict[str, dict]:
    """The new groups of /g (those not made by h5py) with their attributes, as libhdf5 reads them."""
    with h5py.File(path, "r") as h:
        return {name: dict(h["g"][name].attrs) for name in h["g"] if not name.startswith("old")}


def test_every_power_loss_of_a_burst_opens_to_a_state_it_went_through(tmp_path, monkeypatch):
    """New groups and their attributes made with checkpoints between them, the writes and fsyncs
    recorded: the file rebuilt from each prefix at a barrier (with the later writes, some or none)
    opens, its journal replayed, to one of the states the burst went through, sound; all of it
    to the last."""
    original = tmp_path / "original.h5"
    _make(original)
    path = tmp_path / "live.h5"
    shutil.copy(original, path)
    recording = tmp_path / "writes.rec"
    monkeypatch.setenv("H5FS_RECORD", str(recording))
    f, wb, ed = _open(path)
    model: dict[str, dict] = {}
    states = [{}]
    for i in range(12):
        name = f"n{i:02d}"
        ed.mkdir(f.resolve("/g"), name)
        model = model | {name: {}}
        states.append(model)
        for key, text in [("i", str(i)), ("x", "first"), ("x", "again")] + [(f"k{k}", "v") for k in range(9 * (i == 5))]:
            ed.set_attribute(f.resolve(f"/g/{name}"), key, text.encode())
            model = model | {name: model[name] | {key: text}}
            states.append(model)
        if i % 4 == 3:
            f.store.group_commit()
    _close(f, wb)
    monkeypatch.delenv("H5FS_RECORD")
    assert _snapshot(path) == model
    out = str(tmp_path / "replayed.h5")
    seen = set()
    for _ in replayed_prefixes(str(original), str(recording), out, seed=1):
        got = _snapshot(out)
        assert got in states
        seen.add(len(got))
        report = check(out)
        assert report.sound, report.problems
    assert len(seen) > 2   # prefixes in the middle of the burst, not only its ends
    rebuild(str(original), str(recording), out, len(read_recording(str(recording))), [])
    assert _snapshot(out) == model


def test_a_burst_leaves_the_group_times_libhdf5_would_keep(tmp_path):
    """A parent keeping times, edited through a real clock: whether each mkdir took the fast way
    or a transaction, the parent's modification time after landing is one from the burst, and
    each new group's is its making's, as libhdf5 reads them."""
    path = tmp_path / "f.h5"
    _make(path, times=True)
    start = int(time.time())
    f, wb, ed = _open(path)
    for i in range(10):
        ed.mkdir(f.resolve("/g"), f"n{i}")
    shown = {i: f.resolve(f"/g/n{i}").mtime for i in range(10)}
    end = int(time.time())
    _close(f, wb)
    with h5py.File(path, "r") as h:
        assert start <= h5py.h5o.get_info(h["g"].id).mtime <= end
        assert {i: float(h5py.h5o.get_info(h[f"g/n{i}"].id).mtime) for i in range(10)} == shown
    verify_file(path, h5dump=False)
