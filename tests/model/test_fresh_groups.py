"""New groups that wait to land (model/fresh_groups.py, storage/pending_objects.py): `mkdir` in a
new-style group (its links compact or dense), and `setfattr` / `setfattr -x` on the new group,
are journal records without a transaction; reads show the groups and their attributes at once;
they land, attributes built in, at the flush or before any other edit; a kill leaves them to the
next read-write open (a read-only one shows them and writes nothing); every record prefix of a
power loss opens to a state the edits went through. libhdf5 (h5py) is the judge of every file,
`h5fs check` of each."""

from __future__ import annotations

import random
import shutil
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
import roundtrip_support as R
from conftest import run_h5fs
from crash_support import edit_then_kill, rebuild_writes, recover, replayed_prefixes
from write_support import verify_file

from h5fs.check import check
from h5fs.errors import H5fsError, InvalidWrite
from h5fs.model import attributes, free_space, fresh_groups, namespace, tree_edit
from h5fs.model.file import H5File
from h5fs.model.tree_edit import TreeEditor
from h5fs.model.writeback import Writeback
from h5fs.storage import transaction
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
    return (info.rc, info.mtime, info.ctime, type(g).__name__.lower(), list(g),
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


def _snapshot(path, everything: bool = False) -> dict[str, dict]:
    """The new groups of /g (`everything`: all of them) with their attributes, as libhdf5 reads them."""
    with h5py.File(path, "r") as h:
        return {name: dict(h["g"][name].attrs) for name in h["g"]
                if name != "ext" and (everything or not name.startswith("old"))}


# none; one (it fits in the header's room: built in); three (more than the room holds)
ATTRS = {"n0": [], "n1": [("one", "1")], "n2": [("zeta", "z"), ("alpha", "température"), ("mid", "")]}


@pytest.mark.parametrize("layout, times, children", [
    ("latest", False, SEED_LINKS), ("latest", True, SEED_LINKS), ("earliest", False, SEED_LINKS),
    ("latest", False, 3),    # compact, and still compact once they land
    ("latest", False, 7),    # compact: the landing takes its links dense
], ids=["dense", "dense-times", "dense-v1", "compact", "compact-to-dense"])
def test_mkdir_and_setfattr_in_a_new_style_group_wait_and_read_as_they_land(tmp_path, monkeypatch, layout, times,
                                                                            children):
    """mkdir in a new-style group whose times stay (none, or they say now) and setfattr on the
    new group begin no transaction: the journal holds them and reads show the group (stat
    numbers, no links, its attributes) as the flush lands it, and as libhdf5 reads it then."""
    path = tmp_path / "f.h5"
    _make(path, layout, times=times, children=children)
    f, wb, ed = _open(path)
    if times:   # the parent's times say now: a new link leaves them as they are
        _clock_at(monkeypatch, f.resolve("/g").header.times[1])
    begun = _transactions(f, monkeypatch)
    made = {name: ed.mkdir(f.resolve("/g"), name) for name in ATTRS}
    for name, attrs in ATTRS.items():
        for key, text in attrs:
            ed.set_attribute(f.resolve(f"/g/{name}"), key, text.encode())
    assert begun == [] and set(made.values()) <= set(f.store.pending.fresh)
    kinds = {op[0] for op in deferred(records(Path(journal_path(str(path))).read_bytes()))}
    assert {NEW, SETATTR} <= kinds
    assert namespace.lookup(f, f.resolve("/g"), "/g", b"n2").kind == namespace.DIR
    assert len(f.resolve("/g").links()) == children + len(ATTRS) + (layout == "earliest")
    before = {name: _view(f, f"/g/{name}") for name in ATTRS}
    facts = {name: namespace.facts(f.resolve(f"/g/{name}")) for name in ATTRS}   # user.h5fs.*
    assert before["n2"][5] == sorted(ATTRS["n2"])   # by name: no creation order
    wb.flush()
    assert not f.store.pending and 1 <= len(begun) <= 2   # all of them landed together
    if layout == "latest":   # past libhdf5's 8 links a group's are dense, as one by one they would be
        want = "dense" if children + len(ATTRS) > 8 else "compact"
        assert f.resolve("/g").facts()["storage"] == want
    assert {name: f.resolve(f"/g/{name}").address for name in ATTRS} == made
    assert {name: _view(f, f"/g/{name}") for name in ATTRS} == before
    assert {name: namespace.facts(f.resolve(f"/g/{name}")) for name in ATTRS} == facts
    _close(f, wb)
    with h5py.File(path, "r") as h:
        assert sorted(h["g"]) == sorted([f"old{i:02d}" for i in range(children)] + list(ATTRS)
                                        + ["ext"] * (layout == "earliest"))
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
    shown = []
    for target in ("/g/new", "/old"):   # the new group's edits wait; the stored group's land it
        for name, text in edits:
            if text is None:
                ed.remove_attribute(f.resolve(target), name)
            else:
                ed.set_attribute(f.resolve(target), name, text)
        shown.append(_view(f, target)[5])
        assert (fresh in f.store.pending.fresh) == (target == "/g/new")
    assert shown[0] == shown[1] == [("b", "3"), ("c", "4"), ("d", "5"), ("a", "6")]
    errors = []
    for target in ("/old", "/g/new"):
        with pytest.raises(H5fsError) as info:
            ed.remove_attribute(f.resolve(target), "never")
        errors.append((type(info.value), info.value.errno))
    assert errors[0] == errors[1]
    _close(f, wb)
    with h5py.File(path, "r") as h:
        assert list(h["g/new"].attrs.items()) == list(h["old"].attrs.items())
        assert [(k, str(v)) for k, v in h["g/new"].attrs.items()] == shown[0]
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


@pytest.mark.parametrize("layout, attr_order", [("latest", False), ("latest", True), ("earliest", False)])
def test_an_attribute_of_any_name_length_lands_as_reads_showed_it(tmp_path, layout, attr_order):
    """New groups given one attribute named with 1 to 89 characters (some a second, empty one):
    those that fit in the header's room are built in, the others added past it; whatever the
    length, libhdf5 reads what reads showed before the landing, and `h5fs check` passes."""
    path = tmp_path / "f.h5"
    _make(path, layout, attr_order=attr_order)
    f, wb, ed = _open(path)
    for n in range(1, 90):
        ed.mkdir(f.resolve("/g"), f"r{n:02d}")
        ed.set_attribute(f.resolve(f"/g/r{n:02d}"), "a" * n, b"v" * n)
        if n % 7 == 0:
            ed.set_attribute(f.resolve(f"/g/r{n:02d}"), "b", b"")
    shown = {n: _view(f, f"/g/r{n:02d}")[5] for n in range(1, 90)}
    _close(f, wb)
    with h5py.File(path, "r") as h:
        assert {n: [(k, str(v)) for k, v in h[f"g/r{n:02d}"].attrs.items()] for n in range(1, 90)} == shown
    verify_file(path, h5dump=False)


@pytest.mark.parametrize("layout", ["latest", "earliest"])
def test_values_of_every_size_built_in_share_the_global_heap_soundly(tmp_path, layout):
    """Groups each given one value (empty, small, about a heap collection, larger than one, many
    alike) land built in, their strings stored together: libhdf5 reads each, then removes and
    rewrites some, and `h5fs check` passes after both."""
    path = tmp_path / "f.h5"
    _make(path, layout)
    sizes = [0, 1, 0, 4000, 4096, 4080, 100_000, 0, 3] + [3000] * 40
    f, wb, ed = _open(path)
    for i, n in enumerate(sizes):
        ed.mkdir(f.resolve("/g"), f"h{i}")
        ed.set_attribute(f.resolve(f"/g/h{i}"), "v", b"z" * n)
    _close(f, wb)
    with h5py.File(path, "r") as h:
        assert [h[f"g/h{i}"].attrs["v"] for i in range(len(sizes))] == ["z" * n for n in sizes]
    verify_file(path, h5dump=False)
    with h5py.File(path, "r+") as h:
        for i in range(0, len(sizes), 2):
            del h[f"g/h{i}"].attrs["v"]
        for i in range(1, len(sizes), 4):
            h[f"g/h{i}"].attrs["v"] = "new"
    verify_file(path, h5dump=False)


@pytest.mark.parametrize("fcpl", ["lists", "btree"])
def test_new_groups_land_sound_in_a_file_sharing_messages(tmp_path, fcpl):
    """A file whose attributes, datatypes and dataspaces go through shared-message indexes (a
    list, a B-tree): new groups land with their attributes (built in, compact, dense), libhdf5
    reads them and goes on removing them, and `h5fs check` passes after both."""
    path = tmp_path / "f.h5"
    with R.new_file(path, "latest", (8, 8), R.sohm_fcpl(50, 40) if fcpl == "lists" else R.shared_messages_fcpl()) as h:
        for i in range(SEED_LINKS):
            h.create_group(f"g/old{i:02d}")
        h["g/old00"].attrs["a0"] = "shared text"   # a message the table holds
    f, wb, ed = _open(path)
    counts = (0, 1, 3, 10)
    for n in counts:
        ed.mkdir(f.resolve("/g"), f"n{n}")
        for k in range(n):
            ed.set_attribute(f.resolve(f"/g/n{n}"), f"a{k}", b"shared text")
    assert len(f.store.pending.fresh) == len(counts)
    _close(f, wb)
    with h5py.File(path, "r") as h:
        assert {n: dict(h[f"g/n{n}"].attrs) for n in counts} == \
            {n: {f"a{k}": "shared text" for k in range(n)} for n in counts}
    verify_file(path, h5dump=False)
    with h5py.File(path, "r+") as h:
        for n in counts:
            for k in range(n):
                del h[f"g/n{n}"].attrs[f"a{k}"]
            del h[f"g/n{n}"]
    verify_file(path, h5dump=False)


@pytest.mark.parametrize("case", ["times not now", "link order", "symbol table", "new parent"])
def test_mkdir_takes_a_transaction_where_the_group_cannot_wait(tmp_path, monkeypatch, case):
    """A parent whose times a new link changes, whose links are numbered (creation order), in a
    symbol table, or a new group itself: mkdir takes a transaction (a new parent lands first),
    and the file holds the group as libhdf5 lists it."""
    path = tmp_path / "f.h5"
    if case == "symbol table":
        with h5py.File(path, "w", libver="earliest") as h:
            for i in range(SEED_LINKS):
                h.create_group(f"g/old{i:02d}")
    else:
        _make(path, times=case == "times not now", link_order=case == "link order")
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
        old = [] if case == "new parent" else [f"old{i:02d}" for i in range(SEED_LINKS)]
        # h5py lists by creation order where the group numbers its links, else by name
        assert list(h[parent]) == (old + ["new"] if case == "link order" else sorted(old + ["new"]))
        assert isinstance(h[f"{parent}/new"], h5py.Group)
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
    elif kind == "other group":   # (an rmdir waits to land too: model/quick_unlink.py)
        ed.rename(g, "old00", g, "old00b")


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
        assert ("new" in h["g"]) == (where == "g/new")
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
            assert "old00" not in h["g"] and isinstance(h["g/old00b"], h5py.Group)
    verify_file(path, h5dump=False)


def test_setfattr_refused_on_a_new_group_leaves_it_waiting_as_it_was(tmp_path):
    """A name HDF5 cannot hold, or a value that is not UTF-8 or holds a NUL, is refused (EINVAL)
    before the journal holds anything: the group still waits, with the attributes it had."""
    path = tmp_path / "f.h5"
    _make(path)
    f, wb, ed = _open(path)
    ed.mkdir(f.resolve("/g"), "new")
    ed.set_attribute(f.resolve("/g/new"), "kept", b"yes")
    journal = f.store.journal.size
    for name, text in (("", b"v"), ("a\0b", b"v"), ("bad", b"\xff\xfe"), ("nul", b"a\0b")):
        with pytest.raises(InvalidWrite):
            ed.set_attribute(f.resolve("/g/new"), name, text)
    assert f.store.journal.size == journal and f.store.pending.fresh
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


@pytest.mark.parametrize("limit", ["edits", "journal bytes"])
def test_past_a_limit_new_groups_land_in_the_background(tmp_path, monkeypatch, limit):
    """New groups count among the deferred edits LAND_LIMIT bounds, and their records among the
    journal's bytes: past either a background flush lands them with their attributes."""
    if limit == "edits":
        monkeypatch.setattr(tree_edit, "LAND_LIMIT", 5)
    else:
        monkeypatch.setattr(transaction, "JOURNAL_LIMIT", 4096)
    path = tmp_path / "f.h5"
    _make(path)
    f, wb, ed = _open(path)
    for i in range(3):   # a group and its link each; a record of more than 1 kB each
        ed.mkdir(f.resolve("/g"), f"n{i}")
        ed.set_attribute(f.resolve(f"/g/n{i}"), "i", str(i).encode() * 1500)
    wb._background.result(timeout=30)
    assert not f.store.pending
    _close(f, wb)
    with h5py.File(path, "r") as h:
        assert [dict(h[f"g/n{i}"].attrs) for i in range(3)] == [{"i": str(i) * 1500} for i in range(3)]
    verify_file(path, h5dump=False)


def test_the_free_space_walk_lands_new_groups_and_counts_those_made_under_it(tmp_path, monkeypatch):
    """The walk for unused space lands the new groups waiting before it; one made while it runs
    keeps its space (the allocator saw it go): datasets made after it take freed space, never a
    header's, and libhdf5 reads every group, attribute and dataset."""
    path = tmp_path / "f.h5"
    _make(path)
    f, wb, ed = _open(path)
    free_space.hold_freed_space(f)
    for i in range(6):   # space to find: their removals land before the walk
        ed.rmdir(f.resolve("/g"), f"old{i:02d}")
    ed.mkdir(f.resolve("/g"), "before")
    ed.set_attribute(f.resolve("/g/before"), "when", b"before")
    walk = free_space.walk

    def walk_under_a_mkdir(*args, **kwargs):
        ed.mkdir(f.resolve("/g"), "during")
        ed.set_attribute(f.resolve("/g/during"), "when", b"during")
        return walk(*args, **kwargs)

    monkeypatch.setattr(free_space, "walk", walk_under_a_mkdir)
    free_space.find_free_space(f)
    assert [fresh.address for fresh in f.store.pending.fresh.values()] == [f.resolve("/g/during").address]
    monkeypatch.setattr(free_space, "walk", walk)
    free_space.find_free_space(f)
    for i in range(12):
        ed.create_dataset(f.root, f"d{i}", np.dtype("<i8"), (i + 1,))
    _close(f, wb)
    with h5py.File(path, "r") as h:
        assert {n: dict(h["g"][n].attrs) for n in ("before", "during")} == \
            {"before": {"when": "before"}, "during": {"when": "during"}}
        assert [h[f"d{i}"].shape for i in range(12)] == [(i + 1,) for i in range(12)]
        assert sorted(h["g"]) == sorted([f"old{i:02d}" for i in range(6, SEED_LINKS)] + ["before", "during"])
    verify_file(path, h5dump=False)


def test_a_name_removed_and_made_again_waits_and_survives_a_kill(tmp_path):
    """rmdir of a stored group, then mkdir of its name (a removal, its countdown and a new group
    waiting): the file and journal as a kill leaves them open to the new group with its attribute,
    read-only and once replayed, as the live file lands it; libhdf5 agrees, `h5fs check` passes."""
    path = tmp_path / "f.h5"
    _make(path)
    f, wb, ed = _open(path)
    old = f.resolve("/g/old05").address
    assert ed.rmdir(f.resolve("/g"), "old05") == 0
    new = ed.mkdir(f.resolve("/g"), "old05")
    ed.set_attribute(f.resolve("/g/old05"), "made", b"again")
    assert new in f.store.pending.fresh and new != old
    killed = tmp_path / "killed.h5"
    shutil.copy(path, killed)
    shutil.copy(journal_path(str(path)), journal_path(str(killed)))
    _close(f, wb)
    with H5File.open(str(killed)) as k:
        assert _view(k, "/g/old05")[4:] == ([], [("made", "again")])
    H5File.open(str(killed), writable=True).close()
    for landed in (path, killed):
        with h5py.File(landed, "r") as h:
            assert len(h["g"]) == SEED_LINKS and dict(h["g/old05"].attrs) == {"made": "again"}
            assert len(h["g/old05"]) == 0
        verify_file(landed, h5dump=False)


def _shown(f: H5File) -> dict[str, dict[str, str]]:
    """The groups of /g with their attributes, as reads show them."""
    return {ln.name: {a.name: str(a.value) for a in f.resolve(f"/g/{ln.name}").attributes()}
            for ln in f.resolve("/g").links()}


def _random_edit(rng: random.Random, f: H5File, wb: Writeback, ed: TreeEditor, model: dict, made: list) -> None:
    """One edit of /g, most often to the groups made last (mkdir, setfattr and setfattr -x that
    wait), sometimes one that lands them (rmdir, mv, setfattr on a stored group), a checkpoint
    or a flush; `model` follows."""
    names, recent = sorted(model), [n for n in made[-3:] if n in model]
    r = rng.random()
    if r < 0.3:
        made.append(f"n{len(made)}")
        ed.mkdir(f.resolve("/g"), made[-1])
        model[made[-1]] = {}
    elif r < 0.6:
        name = rng.choice(recent) if recent and rng.random() < 0.8 else rng.choice(names)
        key, text = rng.choice("abcdefghijk"), rng.choice(["", "x", "é", "yy" * rng.randrange(40)])
        ed.set_attribute(f.resolve(f"/g/{name}"), key, text.encode())
        model[name][key] = text
    elif r < 0.7 and any(model[n] for n in recent):
        name = rng.choice([n for n in recent if model[n]])
        key = rng.choice(sorted(model[name]))
        ed.remove_attribute(f.resolve(f"/g/{name}"), key)
        del model[name][key]
    elif r < 0.76:
        name = rng.choice(names)
        ed.rmdir(f.resolve("/g"), name)
        del model[name]
    elif r < 0.82:
        name = rng.choice(names)
        made.append(f"n{len(made)}")
        ed.rename(f.resolve("/g"), name, f.resolve("/g"), made[-1])
        model[made[-1]] = model.pop(name)
    elif r < 0.9:
        f.store.group_commit()
    else:
        wb.flush()


@pytest.mark.parametrize("seed", range(3))
def test_random_edits_read_and_survive_a_kill_as_a_model_says(tmp_path, seed):
    """Random mkdir, setfattr, setfattr -x, rmdir and mv in a dense group (new groups waiting, and
    landed by the edits that need it), checkpoints and flushes: reads follow a model of the edits;
    the file and journal as a kill leaves them at random instants show it read-only, and hold it
    once replayed (libhdf5 reads it, `h5fs check` passes); so does the file after its close."""
    rng = random.Random(seed)
    path = tmp_path / "f.h5"
    _make(path, attr_order=seed == 1)
    model = {f"old{i:02d}": {} for i in range(SEED_LINKS)}
    made: list[str] = []
    waiting = []   # the new groups waiting at each kill
    f, wb, ed = _open(path)
    for step in range(120):
        _random_edit(rng, f, wb, ed, model, made)
        assert _shown(f) == model, step
        if rng.random() < 0.06:
            waiting.append(len(f.store.pending.fresh))
            killed = tmp_path / f"killed{step}.h5"
            shutil.copy(path, killed)
            if Path(journal_path(str(path))).exists():
                shutil.copy(journal_path(str(path)), journal_path(str(killed)))
            with H5File.open(str(killed)) as k:
                assert _shown(k) == model, step
            H5File.open(str(killed), writable=True).close()
            assert _snapshot(killed, everything=True) == model, step
            report = check(str(killed))
            assert report.sound, report.problems
    assert len(made) > 20 and any(waiting)
    _close(f, wb)
    assert _snapshot(path, everything=True) == model
    verify_file(path, h5dump=False)


def test_a_read_of_a_new_groups_attributes_while_another_thread_sets_one(tmp_path, monkeypatch):
    """The mount reads attribute tables on its trio thread while a setfattr whose commit lock was
    busy runs in a worker (fuse/editing.py `quick`, offload.run_unless_busy): a read of a new
    group's attributes that the worker's setfattr overtakes halfway (made deterministic here: the
    other thread runs while the read builds its first message) answers the attributes before or
    after the edit, as Group.links takes the deferred links at once (`list(pending.of(...))`)."""
    path = tmp_path / "f.h5"
    _make(path)
    f, wb, ed = _open(path)
    ed.mkdir(f.resolve("/g"), "new")
    ed.set_attribute(f.resolve("/g/new"), "a", b"1")
    new = f.resolve("/g/new")
    build, overtaken = attributes.new_string_attribute, []

    def overtaken_halfway(*args, **kwargs):
        if not overtaken:
            worker = threading.Thread(target=ed.set_attribute, args=(new, "b", b"2"))
            worker.start()
            worker.join(30)
            overtaken.append(not worker.is_alive())
        return build(*args, **kwargs)

    monkeypatch.setattr(attributes, "new_string_attribute", overtaken_halfway)
    f.invalidate(new.address)
    try:
        names = [a.name for a in f.resolve("/g/new").attributes()]
    finally:
        monkeypatch.setattr(attributes, "new_string_attribute", build)
        _close(f, wb)
    assert overtaken == [True] and names in (["a"], ["a", "b"])
    with h5py.File(path, "r") as h:
        assert dict(h["g/new"].attrs) == {"a": "1", "b": "2"}


BURST = 30

def _kill_mid_burst(path) -> None:
    """BURST new groups in /g with attributes (some set, some removed, some past the header's
    room; a checkpoint halfway: the journal holds them again), then a kill."""
    edit_then_kill(path, f"""
        for i in range({BURST}):
            ed.mkdir(f.resolve("/g"), f"new{{i:02d}}")
            new = f.resolve(f"/g/new{{i:02d}}")
            ed.set_attribute(new, "i", str(i).encode())
            ed.set_attribute(new, "gone", b"soon")
            ed.remove_attribute(f.resolve(f"/g/new{{i:02d}}"), "gone")
            if i % 3 == 0:
                for k in range(10):
                    ed.set_attribute(f.resolve(f"/g/new{{i:02d}}"), f"k{{k}}", b"v" * k)
            if i == {BURST} // 2:
                f.store.group_commit()
    """)


def _killed_attrs(i: int) -> dict[str, str]:
    """The attributes `_kill_mid_burst` leaves on its group `i`."""
    return {"i": str(i)} | ({f"k{k}": "v" * k for k in range(10)} if i % 3 == 0 else {})


@pytest.mark.parametrize("layout, userblock", [("latest", 0), ("latest", 512), ("earliest", 0)])
def test_new_groups_a_kill_left_waiting_are_shown_read_only_and_landed_read_write(tmp_path, caplog, layout,
                                                                                  userblock):
    """A process killed with new groups waiting (a checkpoint among them): a read-only open shows
    every group and attribute and writes nothing; `h5fs check` names the deferred edits; the next
    read-write open lands them, their headers where its allocator says, and libhdf5 reads them."""
    path = tmp_path / "f.h5"
    _make(path, layout, userblock=userblock)
    _kill_mid_burst(path)
    journal = Path(journal_path(str(path)))
    report = run_h5fs("check", path)
    assert report.returncode != 0 and f"{BURST} new groups" in report.stdout + report.stderr
    before = (path.read_bytes(), journal.read_bytes())
    with H5File.open(str(path)) as f:
        names = [ln.name for ln in f.resolve("/g").links() if not ln.name.startswith(("old", "ext"))]
        assert sorted(names) == [f"new{i:02d}" for i in range(BURST)]
        shown = {i: {a.name: str(a.value) for a in f.resolve(f"/g/new{i:02d}").attributes()} for i in range(BURST)}
        assert all(f.resolve(f"/g/new{i:02d}").links() == [] for i in range(BURST))
    assert shown == {i: _killed_attrs(i) for i in range(BURST)}
    assert (path.read_bytes(), journal.read_bytes()) == before
    with H5File.open(str(path), writable=True) as f:
        landed = {i: {a.name: str(a.value) for a in f.resolve(f"/g/new{i:02d}").attributes()} for i in range(BURST)}
    assert landed == shown
    assert f"landed {BURST} link edits, {BURST} new groups" in caplog.text and not journal.exists()
    with h5py.File(path, "r") as h:
        assert {i: dict(h[f"g/new{i:02d}"].attrs) for i in range(BURST)} == shown
        assert all(len(h[f"g/new{i:02d}"]) == 0 for i in range(BURST))
    verify_file(path, h5dump=False)


def _sound_state(out: str, states: list[dict]) -> dict:
    """The state the file at `out` (its journal replayed) holds, one of `states`, `h5fs check` passing."""
    got = _snapshot(out)
    assert got in states, got
    report = check(out)
    assert report.sound, report.problems
    return got


@pytest.mark.parametrize("layout", ["latest", "earliest"])
def test_every_prefix_of_a_burst_opens_to_a_state_it_went_through(tmp_path, monkeypatch, layout):
    """New groups and their attributes made with checkpoints between them, the writes and fsyncs
    recorded: the file rebuilt from every prefix of the writes (the last one torn, too), and from
    each barrier with the later writes (some, in any order, or none), opens, its journal replayed,
    to one of the states the burst went through, sound; each count of new groups is among them,
    and all of the writes give the last state."""
    original = tmp_path / "original.h5"
    _make(original, layout)
    path = tmp_path / "live.h5"
    shutil.copy(original, path)
    recording = tmp_path / "writes.rec"
    monkeypatch.setenv("H5FS_RECORD", str(recording))
    f, wb, ed = _open(path)
    model: dict[str, dict] = {}
    states = [model]
    for i in range(12):
        name = f"n{i:02d}"
        ed.mkdir(f.resolve("/g"), name)
        model = model | {name: {}}
        states.append(model)
        more = [(f"k{k}", "v") for k in range(9)] if i == 5 else []   # past the header's room
        for key, text in [("i", str(i)), ("x", "first"), ("x", "again")] + more:
            ed.set_attribute(f.resolve(f"/g/{name}"), key, text.encode())
            model = model | {name: model[name] | {key: text}}
            states.append(model)
        if i % 4 == 3:
            f.store.group_commit()
    _close(f, wb)
    monkeypatch.delenv("H5FS_RECORD")
    assert _snapshot(path) == model
    out = str(tmp_path / "replayed.h5")
    ops = read_recording(str(recording))
    prefixes = [ops[:stop] for stop in range(len(ops) + 1)]
    prefixes += [ops[:stop] + [(op, tag, offset, data[:len(data) // 2])]   # the last write torn
                 for stop, (op, tag, offset, data) in enumerate(ops) if op == b"W" and len(data) > 1]
    seen = set()
    for prefix in prefixes:
        rebuild_writes(str(original), prefix, out, list(range(len(prefix))))
        recover(out)
        seen.add(len(_sound_state(out, states)))
    assert seen == set(range(len(model) + 1))
    for _ in replayed_prefixes(str(original), str(recording), out, seed=1):
        _sound_state(out, states)
    rebuild_writes(str(original), ops, out, list(range(len(ops))))
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
    assert all(start <= t <= end for t in shown.values())
    _close(f, wb)
    with h5py.File(path, "r") as h:
        assert start <= h5py.h5o.get_info(h["g"].id).mtime <= end
        assert {i: float(h5py.h5o.get_info(h[f"g/n{i}"].id).mtime) for i in range(10)} == shown
    verify_file(path, h5dump=False)
