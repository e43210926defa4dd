"""Object header edits (h5fs.storage.object_header: placement, create) against libhdf5 through h5py.

Files come from h5py (libver "earliest": version 1 headers; "latest": version 2; groups and
datasets, with attribute creation order tracked, with times; 2-, 4- and 8-byte offsets). The
engine adds attribute messages (encoded with h5fs's attribute encoder) until continuation blocks
appear, removes and replaces them with larger and smaller bodies, sets reference counts and makes
new headers, one transaction a step. The attribute bookkeeping is what libhdf5 does for compact
storage (H5O__attr_create, H5O__attr_remove_update; `Attributes` below). After each commit h5py
reads every attribute as the model says, `h5fs check` finds the file sound and h5fs's own decoder
agrees; then h5py opens the file r+ and adds and deletes attributes of its own, and the engine goes
on editing what libhdf5 left.

Where libhdf5 makes the same change, the results are compared as libhdf5 reads them: the same
messages (bytes equal) after libhdf5 adds and deletes the same attributes, and new headers laid out
exactly as libhdf5 lays out a new group's or dataset's header. Placement after edits differs by
design: libhdf5 extends a block into free space after it when it can (H5O__alloc_extend_chunk) where
the engine makes a continuation block.
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from h5fs.check import check
from h5fs.errors import CannotWrite
from h5fs.format import object_header as OH
from h5fs.format.codec import Reader
from h5fs.format.messages import attribute as A
from h5fs.format.messages import dataspace as DS
from h5fs.format.messages import datatype as D
from h5fs.format.messages import link as LK
from h5fs.format.messages import link_info as LI
from h5fs.format.messages import small
from h5fs.format.messages.attribute_info import AttributeInfo
from h5fs.model import messages as M
from h5fs.model.file import H5File
from h5fs.storage import symbol_table as stw
from h5fs.storage.object_header.create import create_header
from h5fs.storage.object_header.edit import HeaderEdit
from h5fs.storage.object_header.placement import NoRoom
from h5fs.storage.object_header.reader import read as read_header
from roundtrip_support import LIBVERS, c_call, new_file

U8 = D.FixedPoint(1, 1, "<", False, 0, 0, 0, 8)


@dataclass(frozen=True)
class Case:
    libver: str = "latest"
    sizes: tuple[int, int] = (8, 8)
    kind: str = "dataset"
    track_order: bool = False
    track_times: bool = False

    @property
    def attr_version(self) -> int:
        return 1 if self.libver == "earliest" else 3

    def __str__(self) -> str:
        return (f"{self.libver}-{self.sizes[0]}{self.sizes[1]}-{self.kind}"
                f"{'-order' if self.track_order else ''}{'-times' if self.track_times else ''}")


CASES = [Case("earliest"), Case("earliest", (4, 4), "group"), Case("earliest", (2, 4)),
         Case("earliest", kind="group"), Case("earliest", track_times=True), Case("earliest", track_order=True),
         Case("latest"), Case("latest", (4, 4)), Case("latest", (2, 4), "group"), Case("latest", kind="group"),
         Case("latest", track_order=True, track_times=True), Case("latest", (4, 4), "group", track_order=True)]


def make(path: Path, case: Case) -> None:
    with new_file(path, case.libver, case.sizes) as f:
        if case.kind == "group":
            f.create_group("obj", track_order=case.track_order)
        else:
            f.create_dataset("obj", data=np.arange(5), track_order=case.track_order, track_times=case.track_times)
        f.create_group("other")


def value(n: int, seed: int = 0) -> np.ndarray:
    return ((np.arange(n) * 7 + seed) % 251).astype(np.uint8)


def attribute_body(name: str, data: np.ndarray, version: int, sizes) -> bytes:
    space = DS.Dataspace(DS.SIMPLE, data.shape, data.shape, version=1 if version == 1 else 2)
    return M.encode(M.ATTRIBUTE, A.AttributeMessage(name, M.encode(M.DATATYPE, U8, sizes),
                                                    M.encode(M.DATASPACE, space, sizes), data.tobytes(),
                                                    version=version), sizes)


@contextmanager
def editing(path: Path, name: str = "/obj"):
    """A HeaderEdit of object `name` in a transaction, committed when the block ends."""
    with H5File.open(str(path), writable=True) as f:
        txn = f.store.begin()
        edit = HeaderEdit(txn, read_header(txn.reader, f.resolve(name).address, name))
        yield edit
        txn.commit()


class Attributes:
    """Compact attributes edited through a HeaderEdit as libhdf5 edits them: a v2 header keeps an
    attribute info message (added before its first attribute, flag "do not share", its creation
    index counting up when the header tracks creation order, removed with the last attribute);
    each attribute message carries its creation order where the header tracks it."""

    def __init__(self, edit: HeaderEdit, version: int):
        self.edit, self.version = edit, version
        self.sizes = edit.txn.sizes

    def messages(self) -> dict[str, OH.RawMessage]:
        return {A.decode(Reader(m.data, 0, self.sizes, "attribute")).name: m for m in self.edit.header.find(M.ATTRIBUTE)}

    def _info(self) -> tuple[OH.RawMessage | None, AttributeInfo | None]:
        raw = self.edit.header.first(M.ATTRIBUTE_INFO)
        return raw, raw and M.DECODERS[M.ATTRIBUTE_INFO](Reader(raw.data, 0, self.sizes, "attribute info"))

    def add(self, name: str, data: np.ndarray) -> None:
        order = 0
        if self.edit.header.version == 2:
            raw, info = self._info()
            if info is None:
                tracked = bool(self.edit.header.flags & OH.HDR_TRACK_ORDER)
                info = AttributeInfo(tracked, bool(self.edit.header.flags & OH.HDR_INDEX_ORDER), 0 if tracked else None,
                                     None, None, None)
            if info.track_order:
                order = info.max_creation_index
                info = replace(info, max_creation_index=order + 1)
            body = M.encode(M.ATTRIBUTE_INFO, info, self.sizes)
            if raw is None:
                self.edit.add(M.ATTRIBUTE_INFO, body, OH.FLAG_DONT_SHARE)
            else:
                self.edit.replace(raw, body)
        self.edit.add(M.ATTRIBUTE, attribute_body(name, data, self.version, self.sizes), creation_order=order)

    def remove(self, name: str) -> None:
        self.edit.remove(self.messages()[name])
        raw, _ = self._info()
        if raw is not None and not self.edit.header.find(M.ATTRIBUTE):
            self.edit.remove(raw)

    def replace(self, name: str, data: np.ndarray) -> None:
        self.edit.replace(self.messages()[name], attribute_body(name, data, self.version, self.sizes))

    def rename(self, old: str, new: str) -> None:
        """H5O__attr_rename_mod_cb: relocated (flag "do not share" added) when the name's length
        changes, else rewritten in place."""
        raw = self.messages()[old]
        msg = A.decode(Reader(raw.data, 0, self.sizes, "attribute"))
        moved = len(new) != len(old)
        self.edit.replace(raw, M.encode(M.ATTRIBUTE, replace(msg, name=new), self.sizes),
                          raw.flags | (OH.FLAG_DONT_SHARE if moved else 0), relocate=moved)


def h5py_attributes(path: Path, name: str = "obj") -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as f:
        return {k: np.asarray(v) for k, v in f[name].attrs.items()}


def verify(path: Path, model: dict[str, np.ndarray], name: str = "obj") -> None:
    """h5py reads the attributes the model holds, h5fs's decoder too, and the file is sound."""
    for got in (h5py_attributes(path, name), ours(path, name)):
        assert sorted(got) == sorted(model)
        for k, v in model.items():
            assert np.array_equal(got[k], v), k
    report = check(str(path))
    assert report.sound, report.problems
    header = header_of(path, name)
    assert_shape(header)


def ours(path: Path, name: str = "obj") -> dict[str, np.ndarray]:
    with H5File.open(str(path)) as f:
        return {a.name: np.asarray(a.value) for a in f.resolve("/" + name).attributes()}


def header_of(path: Path, name: str = "obj") -> OH.ObjectHeader:
    with H5File.open(str(path)) as f:
        return read_header(f.reader, f.resolve("/" + name).address, name)


def assert_shape(header: OH.ObjectHeader) -> None:
    """What libhdf5 relies on when it loads a header: no gap in a block holding a NIL message,
    v1 messages 8-byte aligned, the v1 message count exact."""
    for b in header.blocks:
        assert not (b.gap and any(m.type == OH.NIL for m in b.messages))
        if header.version == 1:
            assert all(m.size % 8 == 0 and m.offset % 8 == 0 for m in b.messages)
    if header.version == 1:
        assert header.nmesgs == sum(len(b.messages) for b in header.blocks)


def h5py_edits(path: Path, model: dict[str, np.ndarray], add: dict[str, np.ndarray], remove: list[str]) -> None:
    with h5py.File(path, "r+") as f:
        for k, v in add.items():
            f["obj"].attrs[k] = v
            model[k] = v
        for k in remove:
            del f["obj"].attrs[k]
            del model[k]


def compact_limit(case: Case) -> int:
    """Attributes one header may hold compactly: libhdf5 goes dense at 8 in v2 headers."""
    return 8 if case.libver == "latest" or case.track_order else 40


# -- grow, shrink, replace ----------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=str)
def test_grow_shrink_replace(tmp_path, case):
    path = tmp_path / "f.h5"
    make(path, case)
    model: dict[str, np.ndarray] = {}
    blocks0 = len(header_of(path).blocks)
    # grow until continuation blocks appear (each attribute its own transaction, then a batch)
    n = min(compact_limit(case), 12)
    for i in range(n // 2):
        with editing(path) as e:
            model[f"a{i:02d}"] = value(20 + 9 * i, i)
            Attributes(e, case.attr_version).add(f"a{i:02d}", model[f"a{i:02d}"])
    with editing(path) as e:
        for i in range(n // 2, n):
            model[f"a{i:02d}"] = value(20 + 9 * i, i)
            Attributes(e, case.attr_version).add(f"a{i:02d}", model[f"a{i:02d}"])
    verify(path, model)
    grown = header_of(path)
    assert len(grown.blocks) > blocks0
    # remove every other one: emptied blocks are freed with their continuation messages
    with editing(path) as e:
        for k in sorted(model)[::2]:
            Attributes(e, case.attr_version).remove(k)
            del model[k]
    verify(path, model)
    assert len(header_of(path).blocks) <= len(grown.blocks)
    # replace: one larger, one smaller, one the same size
    with editing(path) as e:
        keys = sorted(model)
        for k, size in zip(keys, (300, 3, model[keys[2]].size)):
            model[k] = value(size, 99)
            Attributes(e, case.attr_version).replace(k, model[k])
    verify(path, model)
    # libhdf5 edits what the engine left, and the engine what libhdf5 left
    h5py_edits(path, model, {"lib0": value(50, 5), "lib1": np.arange(4.0)}, [min(model)])
    verify(path, model)
    with editing(path) as e:
        attrs = Attributes(e, case.attr_version)
        attrs.remove("lib0")
        del model["lib0"]
        model["z"] = value(200, 1)
        attrs.add("z", model["z"])
    verify(path, model)
    # everything removed: back to one block
    with editing(path) as e:
        for k in list(model):
            Attributes(e, case.attr_version).remove(k)
    model.clear()
    verify(path, model)
    assert len(header_of(path).blocks) == 1


def test_freed_blocks_reused(tmp_path):
    """Blocks freed by a removal are space the allocator hands out again."""
    case = Case("latest")
    path = tmp_path / "f.h5"
    make(path, case)
    with editing(path) as e:
        for i in range(6):
            Attributes(e, 3).add(f"a{i}", value(120, i))
    before = header_of(path)
    conts = {b.address: b.length for b in before.blocks[1:]}
    assert conts
    with H5File.open(str(path), writable=True) as f:
        txn = f.store.begin()
        e = HeaderEdit(txn, read_header(txn.reader, before.address, "obj"))
        for name in list(Attributes(e, 3).messages()):
            Attributes(e, 3).remove(name)
        assert set(txn.freed) == set(conts.items())
        txn.commit()
        free = f.store.allocator.extents()
        for address, length in conts.items():
            assert any(a <= address and address + length <= a + n for a, n in free)
    verify(path, {})


# -- the same edits by libhdf5 ------------------------------------------------------------------------


def message_set(header: OH.ObjectHeader) -> list[tuple[int, int, bytes]]:
    return sorted((m.type, m.flags, m.data) for m in header.messages)


@pytest.mark.parametrize("case", [Case("earliest"), Case("latest"), Case("latest", kind="group", track_order=True),
                                  Case("earliest", (4, 4), "group")], ids=str)
def test_same_messages_as_libhdf5(tmp_path, case):
    """Twins: the engine and libhdf5 add, then delete, the same attributes; both headers hold the
    same messages, byte for byte (libhdf5 reopens the file each time: its message table is then
    the one the engine starts from)."""
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    make(a, case)
    make(b, case)
    names = [f"attr{i}" for i in range(min(compact_limit(case), 10))]
    for i, name in enumerate(names):
        with editing(a) as e:
            Attributes(e, case.attr_version).add(name, value(10 + 13 * i, i))
        with h5py.File(b, "r+", libver=case.libver) as f:   # the bound decides the attribute's version
            f["obj"].attrs[name] = value(10 + 13 * i, i)
    assert message_set(header_of(a)) == message_set(header_of(b))
    for name in names[1::3] + names[::4]:
        if name in h5py_attributes(b):
            with editing(a) as e:
                Attributes(e, case.attr_version).remove(name)
            with h5py.File(b, "r+", libver=case.libver) as f:
                del f["obj"].attrs[name]
    assert message_set(header_of(a)) == message_set(header_of(b))
    verify(a, h5py_attributes(b))


def lib_open(path: Path, libver: str) -> h5py.File:
    """h5py on `path` with libhdf5 unable to extend a header block into free space: no metadata
    or small-data aggregation blocks (the caller also puts data at the end of the file)."""
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(LIBVERS[libver], h5py.h5f.LIBVER_LATEST)
    fapl.set_meta_block_size(0)
    c_call("H5Pset_small_data_block_size", fapl.id, 0)
    return h5py.File(h5py.h5f.open(str(path).encode(), h5py.h5f.ACC_RDWR, fapl=fapl))


MTIME = 0x12   # the twins' clocks: the two files are made and edited a moment apart


def placement(header: OH.ObjectHeader) -> list:
    """Blocks in libhdf5's order: lengths, gaps, messages (type, size, offset, flags, and bytes
    but of NIL and continuation messages: libhdf5 leaves stale flags and bytes in those; and
    but of modification times, which can fall in different seconds)."""
    return [(b.length, b.gap, [(m.type, m.size, m.offset) + ((m.flags, m.data) if m.type not in (OH.NIL, OH.CONTINUATION)
                                                             else ()) if m.type != MTIME else (m.type, m.size, m.offset)
                               for m in b.messages]) for b in header.blocks]


@pytest.mark.parametrize("case", CASES[::2] + [CASES[9], CASES[11]], ids=str)
def test_placement_as_libhdf5(tmp_path, case):
    """Twins again, with random adds, removals and renames, libhdf5 unable to extend a block
    (H5O__alloc_extend_chunk): then it makes continuation blocks as the engine does, and every
    block, message and gap lands where libhdf5 puts it, step after step."""
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    make(a, case)
    make(b, case)
    rnd = random.Random(str(case))
    names: list[str] = []
    for step in range(30):
        op = rnd.choice(["add", "add", "remove", "rename"]) if names else "add"
        if op == "add" and len(names) >= compact_limit(case):
            op = "remove"
        new = f"s{step}" + "x" * rnd.randint(0, 12)
        data = value(rnd.randint(1, 300), step)
        with editing(a) as e, lib_open(b, case.libver) as f:
            attrs = Attributes(e, case.attr_version)
            if op == "add":
                attrs.add(new, data)
                f["obj"].attrs[new] = data
                names.append(new)
            else:
                old = names.pop(rnd.randrange(len(names)))
                if op == "remove":
                    attrs.remove(old)
                    del f["obj"].attrs[old]
                else:
                    attrs.rename(old, new)
                    h5py.h5a.rename(f["obj"].id, old.encode(), new.encode())
                    names.append(new)
            # data at the end of the file: no block of the header ends there
            f.create_dataset(f"pad{step}", data=np.zeros(4096 if case.sizes[0] > 2 else 300, np.uint8))
        assert placement(header_of(a)) == placement(header_of(b)), (step, op)
    verify(a, h5py_attributes(b))


@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_shrink_as_libhdf5(tmp_path, libver):
    """A block libhdf5 grew to 88 KiB for four attributes; removing three merges NIL messages past
    the 64 KiB a message can hold, and the block shrinks (H5O__alloc_shrink_chunk, its end freed)
    as libhdf5 shrinks it."""
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    with new_file(a, libver) as f:
        f.create_dataset("d", data=np.arange(5))
        g = f.create_group("obj")
        for i in range(4):
            g.attrs[f"a{i}"] = value(22000 + i, i)
    b.write_bytes(a.read_bytes())
    lengths = [blk.length for blk in header_of(a).blocks]
    assert max(lengths) > 2 * OH.MESSAGE_MAX // 2
    for step, name in enumerate(["a1", "a0", "a3"]):
        with editing(a) as e, lib_open(b, libver) as f:
            Attributes(e, 1 if libver == "earliest" else 3).remove(name)
            del f["obj"].attrs[name]
            f.create_dataset(f"pad{step}", data=np.zeros(4096, np.uint8))
        assert placement(header_of(a)) == placement(header_of(b)), name
    assert max(blk.length for blk in header_of(a).blocks) < OH.MESSAGE_MAX
    verify(a, {"a2": value(22002, 2)})


@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_messages_moved_out_as_libhdf5(tmp_path, libver):
    """A full block 0 of small messages (a named datatype and eight 3-byte messages of unknown
    types, made by create_header): no NIL message takes a continuation message, so libhdf5 moves
    one message out (v1: the datatype), or, none being large enough (v2), every message of the
    last block; both engine and libhdf5 add the same attribute and lay the header out alike."""
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    make(a, Case(libver))
    with H5File.open(str(a), writable=True) as f:
        txn = f.store.begin()
        version = 2 if libver == "latest" else 1
        messages = [(M.DATATYPE, M.encode(M.DATATYPE, U8, txn.sizes), OH.FLAG_CONSTANT)]
        messages += [(0x40 + i, bytes([i]) * 3, 0) for i in range(8)]
        address = create_header(txn, txn.sizes, version, messages)
        if version == 2:
            HeaderEdit(txn, read_header(txn.reader, f.root_address, "/")).add(M.LINK, link_body("t", address, txn.sizes))
        else:
            stw.insert(txn, f.root.message(M.SYMBOL_TABLE), b"t", stw.Link(address))
        txn.commit()
    with h5py.File(a, "r+") as f:
        assert isinstance(f["t"], h5py.Datatype)
        f.create_dataset("after", data=np.zeros(4096, np.uint8))   # block 0 no longer ends the file
    b.write_bytes(a.read_bytes())
    before = header_of(a, "t")
    assert len(before.blocks) == 1 and not before.free_space()
    with editing(a, "/t") as e, lib_open(b, libver) as f:
        Attributes(e, 1 if libver == "earliest" else 3).add("x", value(5))
        f["t"].attrs["x"] = value(5)
    assert placement(header_of(a, "t")) == placement(header_of(b, "t"))
    verify(a, {"x": value(5)}, "t")


# -- reference counts ----------------------------------------------------------------------------------


def link_body(name: str, address: int, sizes) -> bytes:
    return M.encode(M.LINK, LK.Link(name, LK.HARD, address=address), sizes)


def rc(path: Path, name: str) -> int:
    with h5py.File(path, "r") as f:
        return h5py.h5o.get_info(f[name].id).rc


@pytest.mark.parametrize("sizes", [(8, 8), (2, 4)])
def test_refcount_v2(tmp_path, sizes):
    """Hard links to a group whose count the engine keeps in a reference count message, as
    libhdf5 does (H5O__link_oh): added above 1, rewritten, removed at 1; libhdf5 then deletes links."""
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    for p in (a, b):
        with new_file(p, "latest", sizes) as f:
            f.create_group("g")
    with h5py.File(b, "r+") as f:
        f["g2"] = f["g"]           # libhdf5's own second link
    for count in (2, 3):
        with H5File.open(str(a), writable=True) as f:
            txn = f.store.begin()
            g = f.resolve("/g").address
            HeaderEdit(txn, read_header(txn.reader, f.root_address, "/")).add(M.LINK, link_body(f"g{count}", g, txn.sizes))
            edit = HeaderEdit(txn, read_header(txn.reader, g, "g"))
            edit.refcount = count
            assert edit.refcount == count
            txn.commit()
        assert rc(a, "g") == count
    refcount_msg = header_of(a, "g").first(M.REFCOUNT)
    libs = header_of(b, "g").first(M.REFCOUNT)
    assert (refcount_msg.flags, refcount_msg.size) == (libs.flags, libs.size)
    with h5py.File(a, "r+") as f:
        assert f["g2"] == f["g"] and f["g3"] == f["g"]
        del f["g2"], f["g3"]
    assert rc(a, "g") == 1
    assert header_of(a, "g").first(M.REFCOUNT) is None
    # and back: the message comes and goes, the header condensed as it was
    before = header_of(a, "g")
    for count in (4, 1):
        with editing(a, "/g") as e:
            e.refcount = count
    assert message_set(header_of(a, "g")) == message_set(before)
    assert check(str(a)).sound


def test_refcount_v1(tmp_path):
    """A version 1 header keeps its count in the prefix; a hard link the symbol-table engine adds."""
    path = tmp_path / "f.h5"
    with new_file(path, "earliest") as f:
        f.create_group("g")
    with H5File.open(str(path), writable=True) as f:
        txn = f.store.begin()
        g = f.resolve("/g").address
        root = f.root.message(M.SYMBOL_TABLE)
        stw.insert(txn, root, b"h", stw.Link(g, stw.cached_stab(txn, g)))
        edit = HeaderEdit(txn, read_header(txn.reader, g, "g"))
        edit.refcount = 2
        assert edit.header.refcount == 2 and len(edit.header.blocks[0].messages) == 1
        txn.commit()
    assert rc(path, "g") == 2
    with h5py.File(path, "r+") as f:
        assert f["h"] == f["g"]
        del f["g"]
    assert rc(path, "h") == 1
    assert header_of(path, "h").refcount == 1
    assert check(str(path)).sound


def test_times(tmp_path):
    """The times a v2 prefix stores: rewritten as libhdf5 reads them; a header storing none refuses."""
    path = tmp_path / "f.h5"
    make(path, Case("latest", track_times=True))
    with editing(path) as e:
        e.times = (1_000_000_001, 1_000_000_002, 1_000_000_003, 1_000_000_004)
    with h5py.File(path, "r") as f:
        info = h5py.h5o.get_info(f["obj"].id)
        assert (info.atime, info.mtime, info.ctime, info.btime) == (1_000_000_001, 1_000_000_002, 1_000_000_003,
                                                                    1_000_000_004)
    with editing(path, "/other") as e, pytest.raises(ValueError):
        e.times = (1, 2, 3, 4)
    assert check(str(path)).sound


# -- new headers --------------------------------------------------------------------------------------


def block_layout(header: OH.ObjectHeader) -> list:
    """A header's blocks as libhdf5 lays them out: lengths, messages (type, flags, size, offset, bytes)."""
    return [(b.length, b.gap, [(m.type, m.flags, m.size, m.offset, m.data) for m in b.messages]) for b in header.blocks]


def v2_group_hint(sizes, tracked: bool) -> int:
    """H5G__obj_create_real's header size for a new-format group: the link info and group info
    messages and four links of 8-byte names (each with its message header); `tracked`: creation
    order tracked and indexed."""
    head = 6 if tracked else 4
    linfo = 2 + (8 + sizes[0] if tracked else 0) + 2 * sizes[0] + head
    ginfo = 2 + head
    link = 1 + 1 + (8 if tracked else 0) + 1 + 8 + sizes[0] + head
    return linfo + ginfo + 4 * link


@pytest.mark.parametrize("sizes,tracked", [((8, 8), False), ((4, 4), True), ((2, 4), False)])
def test_create_group_v2(tmp_path, sizes, tracked):
    """A new-format group: link info and group info messages laid out as libhdf5 lays them out,
    linked from the root's compact links; h5py then fills it."""
    path = tmp_path / "f.h5"
    with new_file(path, "latest", sizes) as f:
        f.create_group("lib", track_order=tracked)
    lib = header_of(path, "lib")
    with H5File.open(str(path), writable=True) as f:
        txn = f.store.begin()
        linfo = LI.LinkInfo(tracked, tracked, 0 if tracked else None, None, None, None)
        messages = [(M.LINK_INFO, M.encode(M.LINK_INFO, linfo, txn.sizes), 0),
                    (M.GROUP_INFO, M.encode(M.GROUP_INFO, small.GroupInfo(None, None, None, None), txn.sizes), OH.FLAG_CONSTANT)]
        address = create_header(txn, txn.sizes, 2, messages, track_attr_order=tracked, min_size=v2_group_hint(sizes, tracked))
        HeaderEdit(txn, read_header(txn.reader, f.root_address, "/")).add(M.LINK, link_body("new", address, txn.sizes))
        txn.commit()
    new = header_of(path, "new")
    assert txn.headers[address] == new   # kept for the cache as a reader decodes it
    assert block_layout(new) == block_layout(lib)
    with h5py.File(path, "r+") as f:
        assert isinstance(f["new"], h5py.Group) and len(f["new"]) == 0
        for i in range(12):                     # past compact storage
            f["new"].create_group(f"sub{i}")
        f["new"].attrs["x"] = 1
    with h5py.File(path, "r") as f:
        assert sorted(f["new"]) == sorted(f"sub{i}" for i in range(12)) and f["new"].attrs["x"] == 1
    assert check(str(path)).sound


@pytest.mark.parametrize("sizes", [(8, 8), (4, 4), (2, 4)])
def test_create_group_v1(tmp_path, sizes):
    """An old-style group: a symbol table message in a header laid out as libhdf5's (hint of 4 +
    2 offsets), its heap and B-tree from the symbol-table engine, linked from the root."""
    path = tmp_path / "f.h5"
    with new_file(path, "earliest", sizes) as f:
        f.create_group("lib")
    lib = header_of(path, "lib")
    with H5File.open(str(path), writable=True) as f:
        txn = f.store.begin()
        stab = stw.create(txn)
        body = M.encode(M.SYMBOL_TABLE, stab, txn.sizes)
        address = create_header(txn, txn.sizes, 1, [(M.SYMBOL_TABLE, body, 0)], min_size=4 + 2 * sizes[0])
        stw.insert(txn, f.root.message(M.SYMBOL_TABLE), b"new", stw.Link(address, stab))
        txn.commit()
    new = header_of(path, "new")
    assert txn.headers[address] == new
    assert [(b.length, [(m.type, m.size, m.offset) for m in b.messages]) for b in new.blocks] == \
        [(b.length, [(m.type, m.size, m.offset) for m in b.messages]) for b in lib.blocks]
    with h5py.File(path, "r+") as f:
        assert isinstance(f["new"], h5py.Group) and len(f["new"]) == 0
        for i in range(40):
            f["new"].create_group(f"sub{i}")
        f["new"].attrs["x"] = 2
    with h5py.File(path, "r") as f:
        assert len(f["new"]) == 40 and f["new"].attrs["x"] == 2
    assert check(str(path)).sound


@pytest.mark.parametrize("libver,times", [("earliest", False), ("latest", False), ("latest", True)])
def test_create_dataset(tmp_path, libver, times):
    """A dataset header made from the messages of one libhdf5 made (compact data, so that the
    copy owns its data), with libhdf5's hint (256 bytes and the data): laid out as libhdf5's,
    linked into the file (v2: the root's links; v1: the symbol-table engine), h5py reads it."""
    path = tmp_path / "f.h5"
    data = np.arange(40, dtype="<i4").reshape(8, 5)
    with new_file(path, libver) as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        dcpl.set_obj_track_times(times)
        space = h5py.h5s.create_simple(data.shape)
        h5py.h5d.create(f.id, b"lib", h5py.h5t.STD_I32LE, space, dcpl=dcpl).write(h5py.h5s.ALL, h5py.h5s.ALL, data)
    lib = header_of(path, "lib")
    messages = [(m.type, m.data, m.flags) for m in lib.messages]
    with H5File.open(str(path), writable=True) as f:
        txn = f.store.begin()
        address = create_header(txn, txn.sizes, lib.version, messages, track_times=times, min_size=256 + data.nbytes)
        if lib.version == 2:
            HeaderEdit(txn, read_header(txn.reader, f.root_address, "/")).add(M.LINK, link_body("new", address, txn.sizes))
        else:
            stw.insert(txn, f.root.message(M.SYMBOL_TABLE), b"new", stw.Link(address))
        txn.commit()
    new = header_of(path, "new")
    assert txn.headers[address] == new
    assert block_layout(new) == block_layout(lib)
    assert (new.flags, new.times is None) == (lib.flags, lib.times is None)
    with h5py.File(path, "r+") as f:
        assert np.array_equal(f["new"][()], data)
        f["new"][0] = 7
        f["new"].attrs["a"] = np.arange(100)
    with h5py.File(path, "r") as f:
        assert f["new"][0, 0] == 7 and f["new"].attrs["a"].size == 100
    assert check(str(path)).sound


@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_create_hard_linked(tmp_path, libver):
    """A new group made with a link count of 2 (v2: a reference count message, as H5O__link_oh
    adds it) and linked twice: libhdf5 counts 2, and drops to 1 when h5py deletes a link."""
    path = tmp_path / "f.h5"
    with new_file(path, libver) as f:
        f.create_group("x")
    with H5File.open(str(path), writable=True) as f:
        txn = f.store.begin()
        if libver == "latest":
            messages = [(M.LINK_INFO, M.encode(M.LINK_INFO, LI.LinkInfo(False, False, None, None, None, None), txn.sizes), 0),
                        (M.GROUP_INFO, M.encode(M.GROUP_INFO, small.GroupInfo(None, None, None, None), txn.sizes),
                         OH.FLAG_CONSTANT)]
            address = create_header(txn, txn.sizes, 2, messages, refcount=2, track_times=True)
            root = HeaderEdit(txn, read_header(txn.reader, f.root_address, "/"))
            for name in ("one", "two"):
                root.add(M.LINK, link_body(name, address, txn.sizes))
        else:
            stab = stw.create(txn)
            address = create_header(txn, txn.sizes, 1, [(M.SYMBOL_TABLE, M.encode(M.SYMBOL_TABLE, stab, txn.sizes), 0)],
                                    refcount=2)
            for name in (b"one", b"two"):
                stw.insert(txn, f.root.message(M.SYMBOL_TABLE), name, stw.Link(address, stab))
        txn.commit()
    assert rc(path, "one") == 2
    with h5py.File(path, "r+") as f:
        assert f["one"] == f["two"]
        f["one"].create_group("inner")
        del f["two"]
    assert rc(path, "one") == 1 and header_of(path, "one").first(M.REFCOUNT) is None
    with h5py.File(path, "r") as f:
        assert list(f["one"]) == ["inner"]
    assert check(str(path)).sound


# -- limits -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_too_large(tmp_path, libver):
    """A message of 64 KiB cannot live in a header: NoRoom, nothing staged (the caller goes dense)."""
    path = tmp_path / "f.h5"
    make(path, Case(libver))
    before = header_of(path)
    with H5File.open(str(path), writable=True) as f:
        txn = f.store.begin()
        edit = HeaderEdit(txn, read_header(txn.reader, before.address, "obj"))
        with pytest.raises(NoRoom):
            edit.add(M.ATTRIBUTE, attribute_body("big", value(70000), 1 if libver == "earliest" else 3, txn.sizes))
        raw = edit.add(M.ATTRIBUTE, attribute_body("ok", value(60000), 1 if libver == "earliest" else 3, txn.sizes))
        with pytest.raises(NoRoom):
            edit.replace(raw, attribute_body("ok", value(65530), 3, txn.sizes))
        txn.commit()
    verify(path, {"ok": value(60000)})


@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_unknown_messages(tmp_path, libver):
    """A message of a type neither h5fs nor libhdf5 knows: flagged "mark if unknown", both mark it
    "was unknown" when they next write the header; flagged "fail if unknown and writing", both
    refuse to write the object (libhdf5 already refuses to open it for writing)."""
    a, b, c = tmp_path / "a.h5", tmp_path / "b.h5", tmp_path / "c.h5"
    make(a, Case(libver))
    with editing(a) as e:
        e.add(0x40, b"unknown!", OH.FLAG_MARK_UNKNOWN)
    b.write_bytes(a.read_bytes())
    with editing(a) as e:
        Attributes(e, 1 if libver == "earliest" else 3).add("x", value(3))
    with h5py.File(b, "r+") as f:
        f["obj"].attrs["x"] = value(3)
    for p in (a, b):
        assert header_of(p).first(0x40).flags == OH.FLAG_MARK_UNKNOWN | OH.FLAG_WAS_UNKNOWN
    verify(a, {"x": value(3)})
    make(c, Case(libver))
    with editing(c) as e:
        e.add(0x40, b"unknown!", OH.FLAG_FAIL_UNKNOWN_WRITE)
    with H5File.open(str(c), writable=True) as f:
        txn = f.store.begin()
        with pytest.raises(CannotWrite):
            HeaderEdit(txn, read_header(txn.reader, f.resolve("/obj").address, "obj"))
    with h5py.File(c, "r+") as f, pytest.raises(Exception, match="unknown"):
        f["obj"].attrs["x"] = 1
    assert h5py_attributes(c) == {}


# -- random edits -------------------------------------------------------------------------------------

OPS = st.lists(st.tuples(st.sampled_from(["add", "remove", "replace", "refcount", "commit"]),
                         st.integers(0, 600), st.integers(0, 1000)), min_size=10, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=st.sampled_from(CASES), ops=OPS)
def test_random_edits(tmp_path_factory, case, ops):
    """Random adds, removals, replacements (any size) and reference counts, several a transaction:
    h5py reads what the model says after every commit, and libhdf5 edits on at the end."""
    path = tmp_path_factory.mktemp("random") / "f.h5"
    make(path, case)
    model: dict[str, np.ndarray] = {}
    limit = compact_limit(case)
    rnd = random.Random(len(ops))
    serial = 0
    i = 0
    while i < len(ops):
        with editing(path) as e:
            attrs = Attributes(e, case.attr_version)
            while i < len(ops):
                op, size, pick = ops[i]
                i += 1
                if op == "commit":
                    break
                if op == "add" and len(model) < limit or op != "refcount" and not model:
                    name = f"n{serial}{'x' * (pick % 17)}"
                    serial += 1
                    model[name] = value(size, pick)
                    attrs.add(name, model[name])
                elif op == "remove":
                    name = sorted(model)[pick % len(model)]
                    attrs.remove(name)
                    del model[name]
                elif op == "replace" or op == "add":
                    name = sorted(model)[pick % len(model)]
                    model[name] = value(size, pick)
                    attrs.replace(name, model[name])
                elif e.header.version == 2:
                    e.refcount = 1 + pick % 3 if rnd.random() < 0.5 else 1
        # what the edit keeps of the header (the file's cache takes it) is what a reader decodes
        assert e.header == header_of(path)
        assert sorted(h5py_attributes(path)) == sorted(model)
    with editing(path) as e:   # the count again as the one link to the object says (h5fs check verifies it)
        e.refcount = 1
    verify(path, model)
    h5py_edits(path, model, {"lib": value(33)} if len(model) < limit else {}, sorted(model)[:2])
    verify(path, model)
