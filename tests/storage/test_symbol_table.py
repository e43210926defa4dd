"""Write side of old-style groups (local heap, v1 B-tree of group nodes, symbol table nodes),
against libhdf5 through h5py.

Every test keeps twins: file A, edited through h5fs's engine (one transaction a batch), and file
B, where h5py does the same link edits. libhdf5's algorithms are deterministic, so both groups
must end up with the same B-tree (levels, keys as names and heap offsets, sibling chains), the
same symbol table nodes (entries, heap offsets, cached addresses), and the same local heap (size,
free list, the strings at every offset an entry names). After each step h5py lists A's group as the model
says, `h5fs check` finds A sound, and h5py goes on editing A (r+) while the engine reads and
edits what libhdf5 left. Small K values (set with H5Pset_sym_k) make deep trees from a few
hundred names; 2-, 4- and 8-byte offsets and lengths.

A's hard links come from the engine, which leaves reference counts to its caller: the test sets
them from the model (a raw write of the v1 header's count) so that h5py's removals stay right.
"""

from __future__ import annotations

import errno
import random
import struct
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from roundtrip_support import btree_k_fcpl, new_file
from write_support import verify_file

from h5fs.check import check
from h5fs.errors import NotFound
from h5fs.format import btree_v1 as B1
from h5fs.format.codec import Writer
from h5fs.format.messages import symbol_table as stab_msg
from h5fs.format.symbol_table_entry import CACHE_SOFTLINK, CACHE_STAB
from h5fs.model import messages as M
from h5fs.model.file import H5File
from h5fs.storage import symbol_table as stw
from h5fs.storage.object_header.edit import rewrite_message
from h5fs.storage import btree_v1 as b1_reader
from h5fs.storage import local_heap as lh_reader

GROUP = "/g"
TARGETS = ("d", "sub")           # a dataset and an old-style group every hard link points to


# -- files and twins ---------------------------------------------------------------------------------


def make(path: Path, sizes=(8, 8), k=(16, 4)) -> None:
    with new_file(path, "earliest", sizes, btree_k_fcpl(*k)) as f:
        f.create_group("g")
        f.create_dataset("d", data=np.arange(3))
        f.create_group("sub")
        f.create_group("e")


def stab_of(f: H5File, path: str):
    return f.resolve(path).message(M.SYMBOL_TABLE)


def shape(path: Path, group: str = GROUP):
    """The group's tree, nodes and heap as libhdf5 would compare them (no node addresses)."""
    with H5File.open(str(path)) as f:
        stab, r = stab_of(f, group), f.reader
        heap = lh_reader.read(r, stab.heap_address, group)
        chains: dict[int, list[B1.Node]] = {}
        entries = []

        def node(address):
            n = b1_reader.read_node(r, address, B1.GROUP, 0, group)
            chains.setdefault(n.level, []).append(n)
            keys = [(heap.string(k), k) for k in n.keys] if n.children else []
            if n.level == 0:
                kids = [stw.node_entries(r, c, group) for c in n.children]
                entries.extend(e for kid in kids for e in kid)
                kids = [[(heap.string(e.name_offset), e) for e in kid] for kid in kids]
            else:
                kids = [node(c) for c in n.children]
            return n.level, keys, kids

        tree = node(stab.btree_address)
        for level in chains.values():      # each level a chain of siblings, left to right
            assert [n.left for n in level] == [None] + [n.address for n in level[:-1]]
            assert [n.right for n in level] == [n.address for n in level[1:]] + [None]
        # the heap's defined bytes: the strings entries name (padding, free and lost bytes are
        # undefined: libhdf5 leaves there what it wrote last, which depends on when it flushed)
        data = bytearray(len(heap.data))
        for offset in [0] + [e.name_offset for e in entries] + [e.softlink_offset for e in entries
                                                                if e.cache_type == CACHE_SOFTLINK]:
            string = heap.string(offset) + b"\0"
            data[offset:offset + len(string)] = string
        return tree, len(heap.data), heap.free, bytes(data)


class Twins:
    """A (the engine) and B (h5py) with the same group edits; `model`: name -> target, a target
    being "d", "sub" or ("soft", path)."""

    def __init__(self, tmp_path: Path, sizes=(8, 8), k=(16, 4), group: str = GROUP):
        self.a, self.b, self.group = tmp_path / "a.h5", tmp_path / "b.h5", group
        make(self.a, sizes, k)
        make(self.b, sizes, k)
        with h5py.File(self.a, "r") as f:
            self.model = {name: self._target(f[group], name) for name in f[group]}

    @staticmethod
    def _target(g, name):
        link = g.get(name, getlink=True)
        if isinstance(link, h5py.SoftLink):
            return "soft", link.path
        return next((t for t in TARGETS if g[name] == g.file[t]), name)

    # -- edits -------------------------------------------------------------------------------
    def engine(self, ops, batch: int = 50) -> None:
        with H5File.open(str(self.a), writable=True) as f:
            stab = stab_of(f, self.group)
            addresses = {t: f.resolve("/" + t).address for t in TARGETS}
            for i in range(0, len(ops), batch):
                txn = f.store.begin()
                for op in ops[i:i + batch]:
                    self._engine_op(txn, stab, addresses, op)
                txn.commit()
        self.fix_refcounts()

    def _engine_op(self, txn, stab, addresses, op) -> None:
        kind, name = op[0], op[1].encode()
        if kind == "add":
            target = op[2]
            if isinstance(target, tuple):
                link = stw.Link(soft_target=target[1].encode())
            else:
                link = stw.Link(addresses[target], stw.cached_stab(txn, addresses[target]))
            entry = stw.insert(txn, stab, name, link)
            assert (entry.cache_type == CACHE_STAB) == (target == "sub")
        elif kind == "del":
            stw.remove(txn, stab, name)
        else:
            stw.rename(txn, stab, name, op[2].encode())

    def h5py_ops(self, path: Path, ops) -> None:
        with h5py.File(path, "r+") as f:
            g = f[self.group]
            for op in ops:
                if op[0] == "add":
                    g[op[1]] = h5py.SoftLink(op[2][1]) if isinstance(op[2], tuple) else f[op[2]]
                elif op[0] == "del":
                    del g[op[1]]
                else:
                    g.move(op[1], op[2])

    def apply(self, ops, by_engine: bool = True, batch: int = 50) -> None:
        """`ops` on A (through the engine or h5py) and on B (h5py), and on the model."""
        if by_engine:
            self.engine(ops, batch)
        else:
            self.h5py_ops(self.a, ops)
        self.h5py_ops(self.b, ops)
        for op in ops:
            if op[0] == "add":
                self.model[op[1]] = op[2]
            elif op[0] == "del":
                del self.model[op[1]]
            else:
                self.model[op[2]] = self.model.pop(op[1])

    def fix_refcounts(self) -> None:
        """Each target's v1 header count = the hard links to it (its own one in / included)."""
        with h5py.File(self.a, "r") as f:
            counts = {t: sum(1 for g in (f, f["g"], f["e"]) for n in g
                             if not isinstance(g.get(n, getlink=True), h5py.SoftLink) and g[n] == f[t])
                      for t in TARGETS}
        with H5File.open(str(self.a)) as f:
            headers = {t: f.resolve("/" + t).header for t in TARGETS}
        with open(self.a, "r+b") as fh:
            for t, header in headers.items():
                assert header.version == 1
                fh.seek(header.address + 4)
                fh.write(struct.pack("<I", counts[t]))

    # -- checks ------------------------------------------------------------------------------
    def verify(self) -> None:
        with h5py.File(self.a, "r") as f:
            g = f[self.group]
            assert list(g) == sorted(self.model, key=str.encode)
            assert {name: self._target(g, name) for name in g} == self.model
        with H5File.open(str(self.a)) as f:    # h5fs's reader lists the same links
            assert [ln.name for ln in f.resolve(self.group).links()] == sorted(self.model, key=str.encode)
        report = check(str(self.a))
        assert report.sound, report.problems[:5]
        assert shape(self.a, self.group) == shape(self.b, self.group)


def names(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = sorted({"".join(rng.choice("abcfhijk") for _ in range(rng.randint(1, 12))) for _ in range(n)})
    rng.shuffle(out)
    return out


def adds(ns, seed: int = 0):
    rng = random.Random(seed)
    return [("add", n, rng.choice(["d", "d", "sub", ("soft", "/d/" + n)])) for n in ns]


# -- tests --------------------------------------------------------------------------------------


@pytest.mark.parametrize("sizes,k,n", [((8, 8), (16, 4), 1500), ((8, 8), (2, 2), 400), ((4, 4), (1, 1), 300),
                                       ((4, 8), (3, 2), 300), ((8, 4), (2, 1), 300), ((2, 2), (1, 1), 150)])
def test_inserts_and_removes_build_libhdf5s_tree(tmp_path, sizes, k, n):
    """Node splits, B-tree splits and new root levels (the root staying put), heap growth; then
    removals in random order emptying nodes, the heap shrinking; then the group refilled."""
    t = Twins(tmp_path, sizes, k)
    ns = names(n, n)
    t.apply(adds(ns), batch=max(1, n // 5))
    with H5File.open(str(t.a)) as f:
        root = stab_of(f, GROUP).btree_address
        assert b1_reader.read_node(f.reader, root, B1.GROUP, 0, "g").level >= 1
    t.verify()
    gone = ns[:]
    random.Random(1).shuffle(gone)
    t.apply([("del", x) for x in gone[:n // 2]], batch=7)
    t.verify()
    t.apply([("del", x) for x in gone[n // 2:]])
    t.verify()
    with H5File.open(str(t.a)) as f:    # libhdf5's emptied root: a leaf without children, in place
        assert stab_of(f, GROUP).btree_address == root
        assert b1_reader.read_node(f.reader, root, B1.GROUP, 0, "g").children == ()
    t.apply(adds(ns[:n // 3], 2))
    t.verify()


def test_renames_soft_links_and_group_entries(tmp_path):
    """Renames insert the new name before removing the old one (H5Lmove's order, which decides
    where names land in the heap); soft links keep their value in the heap; entries naming the
    group cache its B-tree and heap."""
    t = Twins(tmp_path, (8, 8), (2, 2))
    ns = names(200, 5)
    t.apply(adds(ns))
    renames = [("mv", x, x.upper()) for x in ns[:60]] + [("mv", x, "z" + x) for x in ns[60:80]]
    t.apply(renames, batch=9)
    t.verify()
    with H5File.open(str(t.a), writable=True) as f:
        sub = stab_of(f, "/sub")
        txn = f.store.begin()
        for name, target in t.model.items():
            entry = stw.lookup(txn, stab_of(f, GROUP), name.encode())
            assert entry is not None
            if target == "sub":
                assert (entry.btree_address, entry.heap_address) == (sub.btree_address, sub.heap_address)
        assert stw.lookup(txn, stab_of(f, GROUP), b"nothing here") is None


def test_h5py_and_engine_take_turns(tmp_path):
    """h5py edits what the engine left (r+, then reopened and read), the engine edits what
    libhdf5 left; the twin saw h5py do everything."""
    t = Twins(tmp_path, (8, 8), (2, 2))
    ns = names(600, 7)
    rng = random.Random(3)
    present: list[str] = []
    for turn in range(6):
        fresh = ns[turn * 100:(turn + 1) * 100]
        gone = rng.sample(present, len(present) // 3)
        ops = adds(fresh, turn) + [("del", x) for x in gone]
        present = [x for x in present if x not in gone] + fresh
        t.apply(ops, by_engine=turn % 2 == 0, batch=25)
        if turn % 2:
            t.fix_refcounts()
        t.verify()
    verify_file(t.a, h5dump=True)     # Debian's h5dump (1.10) reads it all too


def test_root_group(tmp_path):
    """Links in the root group: its symbol table (cached in the superblock) stays where it is."""
    t = Twins(tmp_path, (8, 8), (1, 1), group="/")
    with H5File.open(str(t.a)) as f:
        before = f.root_entry
    ns = names(120, 11)
    t.apply(adds(ns))
    t.apply([("del", x) for x in ns[::3]])
    t.verify()
    with H5File.open(str(t.a)) as f:
        assert f.root_entry == before


def test_new_group_as_libhdf5_lays_it_out(tmp_path):
    """`create` makes what H5G__stab_create makes: an empty root leaf (the same bytes) and an
    88-byte heap holding the empty name. Group "e" of A gets it (its old symbol table, holding
    links h5py made, deleted; its entry in / re-cached), then both sides fill it."""
    t = Twins(tmp_path, (8, 8), (2, 2), group="/e")
    held = names(80, 17)
    with h5py.File(t.a, "r+") as f:
        for x in held:
            f["e"][x] = f["d"]
    with H5File.open(str(t.a), writable=True) as f:
        e = f.resolve("/e")
        old = stab_of(f, "/e")
        root_stab = stab_of(f, "/")
        txn = f.store.begin()
        new = stw.create(txn)
        w = Writer(f.sizes)
        stab_msg.encode(w, new)
        rewrite_message(txn, e.header, e.header.first(M.SYMBOL_TABLE), w.getvalue())
        entry = stw.remove(txn, root_stab, b"e")
        assert entry.cache_type == CACHE_STAB and entry.btree_address == old.btree_address
        again = stw.insert(txn, root_stab, b"e", stw.Link(e.address, stw.cached_stab(txn, e.address)))
        assert (again.btree_address, again.heap_address) == (new.btree_address, new.heap_address)
        gone = stw.delete(txn, old)
        assert len(gone) == len(held) and {g.header_address for g in gone} == {f.resolve("/d").address}
        txn.commit()
    t.fix_refcounts()    # the caller's part: the deleted links' objects lose a reference each
    with H5File.open(str(t.a)) as a, H5File.open(str(t.b)) as b:
        na, nb = stab_of(a, "/e"), stab_of(b, "/e")
        size = B1.node_size(B1.GROUP, a.sizes, 0, 2)
        assert a.reader.read(na.btree_address, size) == b.reader.read(nb.btree_address, size)
    assert shape(t.a, "/e") == shape(t.b, "/e")
    t.verify()
    t.apply(adds(names(150, 13)))
    t.verify()


def test_errors_stage_nothing(tmp_path):
    make(tmp_path / "f.h5")
    with H5File.open(str(tmp_path / "f.h5"), writable=True) as f:
        stab = stab_of(f, GROUP)
        txn = f.store.begin()
        stw.insert(txn, stab, b"x", stw.Link(f.resolve("/d").address))
        txn.commit()
        txn = f.store.begin()
        with pytest.raises(FileExistsError) as info:
            stw.insert(txn, stab, b"x", stw.Link(f.resolve("/d").address))
        assert info.value.errno == errno.EEXIST
        with pytest.raises(NotFound):
            stw.remove(txn, stab, b"y")
        with pytest.raises(NotFound):
            stw.rename(txn, stab, b"y", b"z")
        for bad in (b"", b"a/b", b"a\0b"):
            with pytest.raises(ValueError):
                stw.insert(txn, stab, bad, stw.Link(f.resolve("/d").address))
        for link in ({}, {"address": 800, "soft_target": b"/d"}):
            with pytest.raises(ValueError):
                stw.Link(**link)
        assert txn.empty


NAME = st.text("abcdxyz", min_size=1, max_size=5)
OPS = st.lists(st.tuples(st.sampled_from(["add", "add", "del", "mv"]), NAME, NAME,
                         st.sampled_from(["d", "sub", "soft"]), st.booleans()), max_size=60)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, k=st.sampled_from([(1, 1), (2, 1), (1, 2)]))
def test_random_edits(tmp_path_factory, ops, k):
    t = Twins(tmp_path_factory.mktemp("t"), (8, 8), k)
    present: set[str] = set()
    todo = []
    for kind, name, other, target, cut in ops:
        if kind == "add" and name not in present:
            todo.append(("add", name, ("soft", "/" + other) if target == "soft" else target))
            present.add(name)
        elif kind == "del" and name in present:
            todo.append(("del", name))
            present.discard(name)
        elif kind == "mv" and name in present and other not in present:
            todo.append(("mv", name, other))
            present ^= {name, other}
        if cut:
            todo.append(None)    # a transaction ends here
    batches = [[]]
    for op in todo:
        batches[-1].append(op) if op else batches.append([])
    for batch in filter(None, batches):
        t.apply(batch, batch=len(batch))
    t.verify()
