"""Write side of the version 1 B-tree (layout index type 0) and version 2 B-tree (type 5) chunk
indexes, against libhdf5 through h5py.

h5py creates the dataset; h5fs's engine writes chunks and puts, replaces and removes their records
batch by batch (one transaction each, the layout message rewritten when the index moves); then
h5py reads the dataset, lists its chunks and keeps writing to it. A twin file that h5py grows
chunk by chunk in the same order holds the same chunks with the same contents. Small B-tree nodes
(K = 2 for v1, 200-byte nodes for v2, the same in the twin) make trees of three and more levels
from a hundred chunks; h5dump (Debian's 1.10.8) reads the libver="earliest" files.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import tempfile
import zlib
from dataclasses import replace
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from h5fs.format import btree_v2 as bt2
from h5fs.format.codec import Reader
from h5fs.format.messages import layout as L
from h5fs.model import messages as M
from h5fs.model.file import H5File
from h5fs.storage.index import ChunkRecord, IndexContext, open_index
from h5fs.storage.btree_v1 import read_node as read_v1
from h5fs.storage.btree_v2.reader import read_header, read_node as read_v2
from roundtrip_support import btree_k_fcpl, new_file
from index_support import CHUNK, Engine, Spy, chunk_values, our_records, region, write_layout

V1_K = 2            # 4 children a node
V2_NODE = 200       # bytes a node (libhdf5 makes 2048; it fails on its own trees below ~200)
SIZES = [(8, 8), (4, 8)]
GRIDS = {1: (64,), 2: (10, 10), 3: (5, 5, 5)}   # chunks along each dimension
# -- files ---------------------------------------------------------------------------------------

def create(path: Path, kind: str, rank: int, comp: str | None, sizes=(8, 8), grid=None, libver=None,
           node_size: int | None = V2_NODE) -> tuple[int, ...]:
    """A file with an empty chunked dataset "d" of int16 whose last chunk of each dimension is a
    partial edge chunk; its shape."""
    grid = grid or GRIDS[rank]
    shape = tuple(g * CHUNK - 1 for g in grid)
    if kind == "v1":
        f = new_file(path, libver or "earliest", sizes, btree_k_fcpl(16, 4, V1_K))
    else:
        f = new_file(path, "latest", sizes)
    with f:
        f.create_dataset("d", shape=shape, maxshape=(None,) * rank, chunks=(CHUNK,) * rank, dtype="i2",
                         compression=comp)
    if kind == "v2" and node_size is not None:
        set_node_size(path, node_size)
    return shape


def set_node_size(path: Path, size: int) -> None:
    """Give the (not yet created) v2 B-tree index this node size: libhdf5 creates it with the
    layout message's parameters, and so does h5fs."""
    with H5File.open(str(path), writable=True) as f:
        ds = f.resolve("/d")
        assert ds.layout.index.index_type == L.BTREE_V2 and ds.layout.index.address is None
        txn = f.store.begin()
        write_layout(f, ds, txn, replace(ds.layout, index=replace(ds.layout.index, node_size=size)))
        txn.commit()


# -- what libhdf5 and h5fs see -------------------------------------------------------------------

def h5py_chunks(path: Path) -> dict[tuple, tuple[int, int, int]]:
    """h5py's chunk list {coords: (address, size, filter mask)}, checked against its lookup by
    coordinates of every chunk of the grid."""
    with h5py.File(path, "r") as f:
        ds = f["d"]
        out = {}

        def add(info) -> None:
            coords = tuple(o // c for o, c in zip(info.chunk_offset, ds.chunks))
            assert coords not in out
            out[coords] = (info.byte_offset, info.size, info.filter_mask)

        ds.id.chunk_iter(add)
        assert len(out) == ds.id.get_num_chunks()
        for coords in np.ndindex(*(-(-s // c) for s, c in zip(ds.shape, ds.chunks))):
            info = ds.id.get_chunk_info_by_coord(tuple(x * c for x, c in zip(coords, ds.chunks)))
            got = None if info.byte_offset is None else (info.byte_offset, info.size, info.filter_mask)
            assert got == out.get(tuple(coords)), coords
    return out


def decoded_chunks(path: Path, comp: str | None) -> dict[tuple, bytes]:
    with h5py.File(path, "r") as f:
        ds = f["d"]
        out = {}
        for coords in h5py_chunks(path):
            mask, data = ds.id.read_direct_chunk(tuple(c * CHUNK for c in coords))
            out[coords] = zlib.decompress(data) if comp and not mask else data
    return out


def check(path: Path, model: np.ndarray, kind: str, chunks: set, merged: bool = False) -> int:
    """h5py reads the model, lists exactly `chunks` as we do; the tree has libhdf5's shape (and
    with `merged`, no v2 node but the root is below libhdf5's merge share). Returns its depth
    (v1: the root's level)."""
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["d"][...], model)
    listed = h5py_chunks(path)
    assert set(listed) == chunks
    assert our_records(path) == listed
    return tree_depth(path, kind, merged)


def tree_depth(path: Path, kind: str, merged: bool = False) -> int:
    with H5File.open(str(path)) as f:
        ds = f.resolve("/d")
        lay = ds.layout
        if lay.index.address is None:
            return -1
        if kind == "v1":
            return v1_shape(f.reader, lay.index.address, len(lay.chunk_dims), 2 * file_k(f))
        return v2_shape(f.reader, lay.index.address, len(lay.chunk_dims), bool(ds.filters), merged)


def file_k(f: H5File) -> int:
    """K of the file's chunk B-trees: the superblock's, or (superblock 2 and 3) its extension's."""
    raw = f.extension.first(M.BTREE_K) if f.superblock.version >= 2 and f.extension is not None else None
    if raw is None:
        return f.superblock.indexed_storage_k
    return M.DECODERS[M.BTREE_K](Reader(raw.data, 0, f.sizes, "K")).indexed_storage_internal


def v1_shape(reader, root: int, rank: int, room: int) -> int:
    """The rules libhdf5's trees follow (H5B.c): per level, nodes linked left to right; each
    node's keys strictly increasing, its last key the next node's first; a parent's key i the
    first key of child i, its last key its last child's last; at most 2K children, none empty
    but an empty root. Returns the root's level."""
    levels = [[read_v1(reader, root, 1, rank, "check")]]
    while levels[-1][0].level > 0:
        below = []
        for node in levels[-1]:
            for i, addr in enumerate(node.children):
                child = read_v1(reader, addr, 1, rank, "check")
                assert child.level == node.level - 1
                assert child.keys[0].offsets == node.keys[i].offsets
                assert child.keys[-1].offsets == node.keys[i + 1].offsets
                below.append(child)
        levels.append(below)
    for nodes in levels:
        assert nodes[0].left is None and nodes[-1].right is None
        for a, b in zip(nodes, nodes[1:]):
            assert (a.right, b.left) == (b.address, a.address)
            assert a.keys[-1].offsets == b.keys[0].offsets
        for node in nodes:
            offsets = [k.offsets for k in node.keys]
            assert offsets == sorted(set(offsets)), offsets
            assert 0 < len(node.children) <= room or node.address == root
    return levels[0][0].level


def v2_shape(reader, address: int, rank: int, filtered: bool, merged: bool = False) -> int:
    """Every leaf at the header's depth, records in strictly increasing key order, no node over
    libhdf5's split share or (but the root) empty, or with `merged` below its merge share; counts
    in pointers and header right. Returns the depth."""
    hdr = read_header(reader, address)
    width = hdr.record_size - hdr.sizes.offset - 4 - 8 * rank if filtered else 0
    decode = bt2.chunk_record_decoder(rank, filtered, width)
    keys = []

    def walk(addr, nrec, depth, root) -> int:
        node = read_v2(reader, hdr, addr, nrec, depth)
        recs = bt2.decode_records(hdr, node, decode, "check")
        assert nrec <= hdr.levels[depth].max_nrec * hdr.split_percent // 100
        assert root or nrec >= (hdr.levels[depth].max_nrec * hdr.merge_percent // 100 if merged else 1)
        total = nrec
        for i, ch in enumerate(node.children):
            assert walk(ch.address, ch.nrecords, depth - 1, False) == ch.total_records
            total += ch.total_records
            keys.extend(r.scaled for r in recs[i:i + 1])
        if not depth:
            keys.extend(r.scaled for r in recs)
        return total

    if hdr.root_address is None:
        assert hdr.total_records == 0
    else:
        assert walk(hdr.root_address, hdr.root_nrecords, hdr.depth, True) == hdr.total_records
    assert keys == sorted(set(keys))
    return hdr.depth


def h5dump_ok(path: Path) -> None:
    if shutil.which("h5dump") is None:
        pytest.skip("no h5dump")
    proc = subprocess.run(["h5dump", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


# -- growth, replacement, removal ----------------------------------------------------------------

CASES = [("v1", rank, comp, sizes) for rank in (1, 2, 3) for comp in (None, "gzip") for sizes in SIZES] + \
        [("v2", rank, comp, sizes) for rank in (2, 3) for comp in (None, "gzip") for sizes in SIZES]


@pytest.mark.parametrize("kind,rank,comp,sizes", CASES)
def test_grow_replace_remove(tmp_path, kind, rank, comp, sizes):
    ours, twin = tmp_path / "ours.h5", tmp_path / "twin.h5"
    shape = create(ours, kind, rank, comp, sizes)
    create(twin, kind, rank, comp, sizes)
    rng = np.random.default_rng(rank)
    model = np.zeros(shape, "i2")
    cells = [tuple(int(x) for x in c) for c in np.ndindex(*GRIDS[rank])]
    random.Random(rank).shuffle(cells)
    engine = Engine(ours, comp)

    # batches of growing size in random order, then a batch replacing a third (and adding the rest)
    half = len(cells) // 2
    batches = [cells[:1], cells[1:4], cells[4:14], cells[14:half], cells[: half // 3] + cells[half:]]
    with h5py.File(twin, "r+") as tf:
        for batch in batches:
            puts = {}
            for c in batch:
                puts[c] = chunk_values(rng, c, shape)
                model[region(c, shape)] = puts[c][tuple(slice(0, r.stop - r.start) for r in region(c, shape))]
                tf["d"][region(c, shape)] = model[region(c, shape)]
            engine.batch(puts, unfiltered=set(batch[-3:]) if comp else set())
    depth = check(ours, model, kind, set(cells))
    if comp:
        assert {m for _, _, m in our_records(ours).values()} == {0, 1}
    assert depth >= 2, depth                  # three levels and more
    assert tree_depth(twin, kind) >= 2        # libhdf5's own tree follows the rules checked
    twin_chunks = decoded_chunks(twin, comp)
    assert decoded_chunks(ours, comp) == twin_chunks
    if kind == "v1":   # created, then a new root for every new level
        assert len(engine.layouts) >= 2 and len({lay.index.address for lay in engine.layouts}) == len(engine.layouts)
    else:              # created; afterwards the header's root pointer changes in place
        assert len(engine.layouts) == 1
    if kind == "v1":
        h5dump_ok(ours)

    # a shrink along the first dimension drops the chunks past the new extent, then scattered
    # ones go; in our tree and in the one libhdf5 grew
    cut = GRIDS[rank][0] // 2
    gone = [c for c in cells if c[0] >= cut]
    scattered = [c for c in cells if c[0] < cut][::3]
    for c in gone + scattered:
        model[region(c, shape)] = 0
    left = set(cells) - set(gone) - set(scattered)
    for path, edit in ((ours, engine), (twin, Engine(twin, comp))):
        edit.batch(removes=gone)
        edit.batch(removes=scattered)
        check(path, model, kind, left)
        if kind == "v1":
            h5dump_ok(path)

    # libhdf5 keeps writing into the tree we left
    with h5py.File(ours, "r+") as f:
        f["d"][...] = 7
        np.testing.assert_array_equal(f["d"][...], np.full(shape, 7, "i2"))
        assert f["d"].id.get_num_chunks() == len(cells)

    # everything removed: v1 keeps an empty root leaf, v2 a header without root; then grow again
    engine.batch(removes=cells)
    model[...] = 0
    assert check(ours, model, kind, set()) == 0
    again = {c: chunk_values(rng, c, shape) for c in cells[:5]}
    engine.batch(again)
    for c, v in again.items():
        model[region(c, shape)] = v[tuple(slice(0, r.stop - r.start) for r in region(c, shape))]
    check(ours, model, kind, set(again))


def test_superblock_extension_k(tmp_path):
    """A superblock 2 file keeps the chunk B-tree's K in the superblock extension (a B-tree 'K'
    values message): nodes are written with its room, libhdf5 reads and extends them."""
    path = tmp_path / "v108.h5"
    shape = create(path, "v1", 2, None, libver="v108")
    with H5File.open(str(path)) as f:
        assert f.superblock.version >= 2 and f.resolve("/d").layout.index.index_type == L.BTREE_V1
    rng = np.random.default_rng(0)
    cells = [tuple(int(x) for x in c) for c in np.ndindex(*GRIDS[2])]
    model = np.zeros(shape, "i2")
    puts = {c: chunk_values(rng, c, shape) for c in cells}
    Engine(path, None).batch(puts)
    for c, v in puts.items():
        model[region(c, shape)] = v[tuple(slice(0, r.stop - r.start) for r in region(c, shape))]
    assert check(path, model, "v1", set(cells)) >= 2
    with h5py.File(path, "r+") as f:
        f["d"].resize((shape[0] + 6, shape[1]))
        f["d"][shape[0]:] = 3
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["d"][:shape[0]], model)
        assert (f["d"][shape[0]:] == 3).all()


# -- efficiency ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["v1", "v2"])
def test_batch_touches_each_node_once(tmp_path, kind):
    """Libhdf5's default node sizes (K = 32, 2048-byte nodes); a batch of 1,000 new chunks and
    500 replacements into a tree of 2,000: every node read once (a v1 node: its head, then its
    used part) and written at most once."""
    path = tmp_path / "f.h5"
    if kind == "v1":
        with h5py.File(path, "w", libver="earliest") as f:
            f.create_dataset("d", shape=(60, 60), maxshape=(None, None), chunks=(1, 1), dtype="i1")
    else:
        with h5py.File(path, "w", libver="latest") as f:
            f.create_dataset("d", shape=(60, 60), maxshape=(None, None), chunks=(1, 1), dtype="i1")
    cells = [tuple(int(x) for x in c) for c in np.ndindex(60, 60)]
    random.Random(1).shuffle(cells)
    engine = Engine(path, None)
    one = np.ones((1, 1), "i1")
    engine.batch({c: one for c in cells[:2000]})
    spy = Spy()
    engine.batch({c: one * 2 for c in cells[1500:3000]}, spy=spy)
    assert max(spy.writes.values()) == 1
    assert max(spy.reads.values()) <= (2 if kind == "v1" else 1)
    model = np.zeros((60, 60), "i1")
    for c in cells[:3000]:
        model[c] = 2 if c in set(cells[1500:3000]) else 1
    assert check(path, model, kind, set(cells[:3000])) >= 1


def test_v2_removals_merge(tmp_path):
    """libhdf5's 2048-byte nodes, 3,000 records, 80% of them removed at random in one batch:
    emptied and underfull nodes merge with a sibling (splitting evenly again when the two do not
    fit one node), so no node but the root is left below the merge share at which libhdf5 merges."""
    path = tmp_path / "f.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("d", shape=(60, 60), maxshape=(None, None), chunks=(1, 1), dtype="i1")
    cells = [tuple(int(x) for x in c) for c in np.ndindex(60, 60)]
    random.Random(3).shuffle(cells)
    engine = Engine(path, None)
    engine.batch({c: np.ones((1, 1), "i1") for c in cells[:3000]})
    model = np.zeros((60, 60), "i1")
    for c in cells[:3000]:
        model[c] = 1
    assert check(path, model, "v2", set(cells[:3000])) == 1
    engine.batch(removes=cells[600:3000])
    for c in cells[600:3000]:
        model[c] = 0
    check(path, model, "v2", set(cells[:600]), merged=True)


@pytest.mark.parametrize("kind", ["v1", "v2"])
def test_ten_thousand_records(tmp_path, kind):
    """10,000 chunk records in one batch, into an empty index and again as replacements."""
    path = tmp_path / "f.h5"
    with h5py.File(path, "w", libver="earliest" if kind == "v1" else "latest") as f:
        f.create_dataset("d", shape=(100, 100), maxshape=(None, None), chunks=(1, 1), dtype="i1")
    cells = [tuple(int(x) for x in c) for c in np.ndindex(100, 100)]
    random.Random(2).shuffle(cells)
    with H5File.open(str(path), writable=True) as f:
        ds = f.resolve("/d")
        txn = f.store.begin()
        space = ds.dataspace
        idx = open_index(IndexContext(txn.reader, ds.layout, space.dims, space.maxdims, False, "/d"))
        base = txn.allocate(len(cells))
        txn.write_data(base, bytes(range(100)) * 100)
        records = [ChunkRecord(c, base + c[0] * 100 + c[1], 1) for c in cells]
        layout = idx.put(txn, records)
        assert idx.put(txn, records[::-1]) is None   # every record replaced: no new layout
        write_layout(f, ds, txn, layout)
        txn.commit()
    model = np.tile(np.arange(100, dtype="i1"), (100, 1))
    assert check(path, model, kind, set(cells)) >= 2


# -- random batches ------------------------------------------------------------------------------

GRID = (6, 6)
cells_st = st.tuples(st.integers(0, GRID[0] - 1), st.integers(0, GRID[1] - 1))
batch_st = st.tuples(st.dictionaries(cells_st, st.integers(1, 100), max_size=30), st.sets(cells_st, max_size=20))


@pytest.mark.parametrize("kind", ["v1", "v2"])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(batch_st, min_size=1, max_size=5))
def test_random_batches(kind, batches):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.h5"
        shape = create(path, kind, 2, None, grid=GRID, node_size=128)
        engine = Engine(path, None)
        model: dict[tuple, int] = {}
        for puts, removes in batches:
            engine.batch({c: np.full((CHUNK, CHUNK), v, "i2") for c, v in puts.items()}, sorted(removes))
            model.update(puts)
            for c in removes:
                model.pop(c, None)
        want = np.zeros(shape, "i2")
        for c, v in model.items():
            want[region(c, shape)] = v
        check(path, want, kind, set(model))
