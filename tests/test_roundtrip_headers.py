"""Lossless round trips of object headers (v1 and v2, every block), the superblock (versions 0-3,
the driver information block) and the old-format structures: symbol table entries and nodes,
local heaps, global heap collections and version 1 B-tree nodes (group and chunk keys).

Against libhdf5: files h5py writes (earliest/v108/latest bounds, superblock 1 with small B-tree K
values, a user block, family and split drivers, 2-, 4- and 8-byte offsets and lengths), every
instance found through h5fs's engine, its bytes read from the file, decoded and encoded again:
the bytes are equal, checksums included; one field changed survives encode -> decode. Against
themselves: Hypothesis strategies of valid records encode, decode back to the record, and encode
again to the same bytes.
"""

from __future__ import annotations

import ctypes
import os
import random
from dataclasses import replace

import h5py
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from roundtrip_support import (HYP, SIZES, Seen, address, check_bytes, check_changed, exactly, libhdf5, new_file,
                               roundtrip, uint)

from h5fs.format import btree_v1 as B1
from h5fs.format import global_heap as GH
from h5fs.format import local_heap as LH
from h5fs.format import object_header as OH
from h5fs.format import superblock as SB
from h5fs.format import symbol_table_entry as STE
from h5fs.format import symbol_table_node as SNOD
from h5fs.format.codec import Reader, Sizes, Writer
from h5fs.format.messages import layout as L
from h5fs.format.messages.datatype import VarLen
from h5fs.model import messages as M
from h5fs.model.dataset import Dataset
from h5fs.model.file import H5File
from h5fs.model.group import Group
from h5fs.storage.blockio import BlockReader
from h5fs.storage.metadata_cache import MetadataCache
from h5fs.storage.readers import btree_v1, global_heap, local_heap, superblock, symbol_table_node

# 2-byte lengths only in the earliest format: in the latest, dense link storage uses a fractal heap
# whose maximum direct block size (65536) libhdf5 writes into a 2-byte field as 0; it cannot read
# such a group back itself ("invalid fractal heap object size")
FILE_SIZES = {"earliest": [(8, 8), (4, 4), (2, 2), (4, 8), (8, 4)], "latest": [(8, 8), (4, 4), (2, 4), (4, 8), (8, 4)]}


# -- files libhdf5 writes ----------------------------------------------------------------------

def attributes_one_by_one(f: h5py.File, obj, n: int, seed: int) -> None:
    """Attributes of random sizes added between other objects (libhdf5 cannot grow the header
    in place, so it adds continuation blocks), then some deleted (NIL messages) and some added
    again (moved messages leave gaps in v2 headers)."""
    rng = random.Random(seed)
    spacers = f.require_group("spacers")
    names = []
    for i in range(n):
        names.append(f"a{i:02}")
        obj.attrs[names[-1]] = np.arange(rng.randint(1, 12), dtype="u1")
        spacers.create_dataset(f"{obj.name.strip('/')}{i}", data=np.arange(3, dtype="u1"))
    for name in rng.sample(names, n // 2):
        del obj.attrs[name]
        if rng.random() < 0.5:
            obj.attrs[f"b{rng.randint(0, 999)}"] = np.arange(rng.randint(1, 12), dtype="u1")


def compact_group(f: h5py.File, name: str, track_order: bool) -> h5py.Group:
    """A group keeping up to 200 attributes in its header (phase change values in a v2 prefix)."""
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    gcpl.set_attr_phase_change(200, 100)
    if track_order:
        gcpl.set_attr_creation_order(h5py.h5p.CRT_ORDER_TRACKED)
    h5py.h5g.create(f.id, name.encode(), gcpl=gcpl)
    return f[name]


def fill(f: h5py.File, n: int) -> None:
    """Every structure under test; n scales the counts (2-byte offsets need a file under 64 KiB)."""
    many = f.create_group("many")
    for i in range(4 * n):
        name = f"e{i:03}"
        if i % 3 == 0:
            many.create_group(name)
        elif i % 3 == 1:
            many[name] = h5py.SoftLink("/many")
        else:
            many[name] = np.int16(i)
    f.create_dataset("chunked", data=np.arange(12 * n, dtype="i2"), chunks=(1,), maxshape=(None,))
    f.create_dataset("filtered", data=np.arange(16 * n, dtype="i4").reshape(4 * n, 4), chunks=(3, 2),
                     compression="gzip", shuffle=True)
    f.create_dataset("timed", data=np.arange(3), track_times=True)
    attributes_one_by_one(f, f.create_dataset("attrs", data=np.int8(0)), n, 0)
    attributes_one_by_one(f, compact_group(f, "compact", False), n, 0)
    attributes_one_by_one(f, compact_group(f, "ordered", True), n, 0)
    f.create_dataset("vlen", data=np.array([b"w" * (i % 40) for i in range(3 * n)], dtype=object),
                     dtype=h5py.string_dtype("ascii"))
    target = f["chunked"]
    f.create_dataset("refs", data=np.array([target.regionref[i:i + 3] for i in range(n)], dtype=h5py.regionref_dtype))
    ext = os.path.join(os.path.dirname(f.filename), "external.bin")
    f.create_dataset("external", shape=(4,), dtype="i4", external=[(ext, 0, 16)])


def scale(sizes) -> int:
    return 8 if sizes[0] == 2 else 40


@pytest.fixture(scope="module", params=[(lv, s) for lv, sizes in FILE_SIZES.items() for s in sizes],
                ids=lambda p: f"{p[0]}-{p[1][0]}{p[1][1]}")
def sized(request, tmp_path_factory):
    libver, sizes = request.param
    path = tmp_path_factory.mktemp(f"{libver}{sizes[0]}{sizes[1]}") / "f.h5"
    with new_file(path, libver, sizes) as f:
        fill(f, scale(sizes))
    return path, libver, sizes


def special_file(kind: str, tmp) -> str:
    path = str(tmp / "f.h5")
    if kind == "v108":
        f = new_file(path, "v108")
    elif kind == "userblock":
        f = h5py.File(path, "w", libver="earliest", userblock_size=1024)
    elif kind == "small-k":   # non-default K values: superblock version 1, deep trees from few entries
        fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
        assert libhdf5("H5Pset_sym_k")(ctypes.c_int64(fcpl.id), ctypes.c_uint(2), ctypes.c_uint(2)) >= 0
        assert libhdf5("H5Pset_istore_k")(ctypes.c_int64(fcpl.id), ctypes.c_uint(2)) >= 0
        f = new_file(path, "earliest", (8, 8), fcpl)
    elif kind == "family":
        f = h5py.File(str(tmp / "f%d.h5"), "w", driver="family", memb_size=1 << 24, libver="earliest")
        path = str(tmp / "f0.h5")
    else:
        f = h5py.File(path, "w", driver="split", libver="earliest")
        path = str(tmp / "f.h5-m.h5")
    with f:
        fill(f, 20)
    return path


SPECIALS = ["v108", "userblock", "small-k", "family", "split"]


@pytest.fixture(scope="module", params=SPECIALS)
def special(request, tmp_path_factory):
    return request.param, special_file(request.param, tmp_path_factory.mktemp(request.param))


# -- checkers ----------------------------------------------------------------------------------

def objects(hf: H5File) -> list:
    """Every object reachable by hard links, through h5fs's engine."""
    seen: dict[int, object] = {}
    stack = [hf.root]
    while stack:
        obj = stack.pop()
        if obj.address in seen:
            continue
        seen[obj.address] = obj
        if isinstance(obj, Group):
            stack += [hf.get(ln.address, f"{obj.path.rstrip('/')}/{ln.name}") for ln in obj.links()
                      if ln.address is not None]
    return list(seen.values())


def check_header(reader, header: OH.ObjectHeader, seen: Seen) -> None:
    s = reader.sizes
    raw = [reader.read(b.address, b.length) for b in header.blocks]
    for i, block in enumerate(header.blocks):
        assert OH.encode_block(header, i) == raw[i], (header.address, i)
        seen.add("header", header.version, "continuation" if i else "block 0")
        if block.gap:
            seen.add("header", header.version, "gap")
        for m in block.messages:
            assert raw[i][m.offset + OH.message_header_size(header.version, header.track_order):][:m.size] == m.data
            if m.type == OH.CONTINUATION:
                cont = OH.decode_continuation(m.data, s, "t")
                assert OH.encode_continuation(cont, s) == m.data[:s.layout("OL").size]
                seen.add("continuation message")
            elif m.type == OH.NIL:
                seen.add("header", header.version, "NIL")
            if m.creation_order is not None:
                seen.add("header", header.version, "creation order")
    if header.version == 2:
        seen.add("header flags", header.flags & ~OH.HDR_CHUNK0_WIDTH, header.chunk0_width)
    # pure decode from the blocks' bytes gives the same record
    blocks = {b.address: r for b, r in zip(header.blocks, raw)}

    def decode(block0: bytes) -> OH.ObjectHeader:
        return OH.decode(block0, header.address, s, "t", lambda a, n: blocks[a][:n])

    assert decode(raw[0]) == header
    # one field changed: a message's flags (and the refcount or the times where the prefix has them)
    first = header.blocks[0]
    msg = replace(first.messages[0], flags=first.messages[0].flags ^ OH.FLAG_CONSTANT)
    changed = replace(header, blocks=(replace(first, messages=(msg,) + first.messages[1:]),) + header.blocks[1:])
    if header.version == 1:
        changed = replace(changed, refcount=header.refcount + 3, nmesgs=header.nmesgs + 1)
    elif header.times:
        changed = replace(changed, times=tuple(t + 1 for t in header.times))
    assert decode(OH.encode_block(changed, 0)) == changed
    assert header.messages == tuple(m for m in header.all_messages() if m.type not in (OH.NIL, OH.CONTINUATION))
    for space in header.free_space():
        assert space.offset + space.size <= next(b.length for b in header.blocks if b.address == space.block)


def btree_nodes(reader, root: int, node_type: int, rank: int):
    """Every node of a v1 B-tree, parents first."""
    stack = [root]
    while stack:
        node = btree_v1.read_node(reader, stack.pop(), node_type, rank, "t")
        yield node
        if node.level:
            stack += node.children


def check_btree(reader, root: int, node_type: int, rank: int, k: int, seen: Seen) -> list[int]:
    """Every node of the tree round trips; the leaves' children are returned."""
    s = reader.sizes
    leaves = []
    for node in btree_nodes(reader, root, node_type, rank):
        raw = reader.read(node.address, B1.node_size(node_type, s, rank, k))
        sibling = {"left": 4096, "right": None} if node.left is None else {"left": None}
        check_bytes(raw, lambda b: B1.decode_node(b, node.address, node_type, rank, s), lambda n: B1.encode_node(n, s, k),
                    lambda n: sibling)
        assert B1.decode_node(raw, node.address, node_type, rank, s) == node
        seen.add("v1 B-tree", node_type, "level", node.level)
        if node.left is not None or node.right is not None:
            seen.add("v1 B-tree", node_type, "siblings")
        if node.level == 0:
            leaves += node.children
    return leaves


def check_local_heap(reader, address: int, seen: Seen) -> LH.LocalHeap:
    s = reader.sizes
    heap = local_heap.read(reader, address, "t")
    assert LH.encode_prefix(heap, s) == reader.read(address, LH.prefix_size(s))
    assert LH.encode_data(heap, s) == reader.read(heap.data_address, len(heap.data))
    seen.add("local heap", "free list" if heap.free else "full")
    if heap.data_address == address + LH.prefix_size(s):
        seen.add("local heap", "contiguous")

    def decode(pair: tuple[bytes, bytes]) -> LH.LocalHeap:
        return LH.decode(*pair, s)

    def encode(h: LH.LocalHeap) -> tuple[bytes, bytes]:
        return LH.encode_prefix(h, s), LH.encode_data(h, s)

    # another free list: the data segment holds its blocks' headers (encode_data writes them)
    free = heap.free[:-1] if heap.free else (LH.FreeBlock(len(heap.data) - 2 * s.length, 2 * s.length),)
    data = LH.encode_data(replace(heap, free=free), s)
    check_changed(heap, decode, encode, data_address=12345, free=free, data=data)
    return heap


def check_symbol_table(hf: H5File, btree: int, heap: int, seen: Seen) -> None:
    reader, sb, s = hf.reader, hf.superblock, hf.sizes
    check_local_heap(reader, heap, seen)
    for snod in check_btree(reader, btree, B1.GROUP, 0, sb.group_internal_k, seen):
        node = symbol_table_node.read_node(reader, snod, 2 * sb.group_leaf_k, "t")
        raw = reader.read(snod, SNOD.node_size(s, node.capacity))
        entries = node.entries[1:] + (replace(node.entries[0], header_address=777),)
        check_bytes(raw, lambda b: SNOD.decode(b, s, node.capacity), lambda n: SNOD.encode(n, s),
                    lambda n: {"entries": entries})
        assert list(node.entries) == symbol_table_node.read(reader, snod, "t")
        seen.add("symbol table node", len(node.entries) == node.capacity)
        for entry in node.entries:
            seen.add("symbol table entry", entry.cache_type)


def check_chunk_btree(hf: H5File, ds: Dataset, seen: Seen) -> None:
    lay = ds.layout
    if lay.layout_class != L.CHUNKED or lay.index is None or lay.index.index_type != L.BTREE_V1:
        return
    rank = len(lay.chunk_dims)
    check_btree(hf.reader, lay.index.address, B1.CHUNK, rank, hf.superblock.indexed_storage_k, seen)
    seen.add("chunk B-tree", "rank", rank, "filtered" if ds.header.first(M.FILTERS) else "plain")


def heap_ids(hf: H5File, ds: Dataset) -> list[GH.HeapID]:
    """The global heap IDs a contiguous vlen string or region reference dataset stores. A vlen
    element is its length and an ID. libhdf5 writes each region reference in 12 bytes whatever
    the size of offsets (an ID padded to 8 + 4), but sizes the storage at size of offsets + 4
    per element: with narrow offsets the IDs that fit are enough to find the collections."""
    raw = hf.reader.read(ds.layout.address, ds.layout.size)
    vlen = isinstance(ds.datatype, VarLen)
    stride, skip = (len(raw) // ds.shape[0], 4) if vlen else (12, 0)
    return [GH.decode_heap_id(Reader(raw, i + skip, hf.sizes, "t"))
            for i in range(0, len(raw) - skip - GH.heap_id_size(hf.sizes) + 1, stride)]


def check_global_heaps(hf: H5File, seen: Seen) -> None:
    s = hf.sizes
    ids = heap_ids(hf, hf.resolve("/vlen")) + heap_ids(hf, hf.resolve("/refs"))
    for hid in ids:
        w = Writer(s)
        GH.encode_heap_id(w, hid)
        assert GH.decode_heap_id(Reader(w.getvalue(), 0, s)) == hid
    for addr in {hid.address for hid in ids if not hid.is_nil}:
        col = hf.global_heap.collection(addr)
        assert hf.meta.peek(addr, "global heap collection") is col   # in the file's metadata cache
        raw = hf.reader.read(addr, col.size)
        obj = next(e for e in col.entries if isinstance(e, GH.HeapObject))
        entries = tuple(replace(e, refcount=e.refcount + 1) if e is obj else e for e in col.entries)
        check_bytes(raw, lambda b: GH.decode_collection(b, s, addr), GH.encode_collection, lambda c: {"entries": entries})
        seen.add("global heap", "free space" if any(isinstance(e, GH.FreeSpace) for e in col.entries) else "full")
    assert all(hf.global_heap.get_id(hid) is not None for hid in ids if not hid.is_nil)


def check_superblock(path: str, hf: H5File, seen: Seen) -> SB.Superblock:
    fd = os.open(path, os.O_RDONLY)
    try:
        sb = superblock.read(fd)
        raw = os.pread(fd, len(SB.encode(sb)), sb.location)
        if sb.driver_info is not None:
            drv = SB.encode_driver_info(sb.driver_info)
            assert os.pread(fd, len(drv), sb.location + sb.driver_info_address) == drv
            assert SB.decode_driver_info(drv) == sb.driver_info
            seen.add("driver info", sb.driver_info.driver_id)
    finally:
        os.close(fd)
    assert sb == hf.superblock
    bare = replace(sb, driver_info=None)   # decode reads the superblock alone
    assert SB.decode(raw, sb.location) == bare
    assert SB.encode(sb) == raw
    changes = {"eof_address": sb.eof_address + 4096}
    if sb.version >= 2:
        changes["root_header_address"] = sb.root_header_address + 8
    else:
        changes["root_entry"] = replace(sb.root_entry, heap_address=999)
    check_changed(bare, lambda b: SB.decode(b, sb.location), SB.encode, **changes)
    seen.add("superblock", sb.version, sb.location > 0)
    return sb


def check_file(path: str, global_heaps: bool = True) -> Seen:
    """Every structure of the file; `global_heaps` False where they live in another file (split)."""
    seen = Seen(set())
    with H5File.open(str(path)) as hf:
        sb = check_superblock(str(path), hf, seen)
        everything = objects(hf)
        for header in [o.header for o in everything] + ([hf.extension] if hf.extension else []):
            check_header(hf.reader, header, seen)
        tables = {(e.btree_address, e.heap_address) for e in [sb.root_entry] if e and e.cache_type == STE.CACHE_STAB}
        for obj in everything:
            stab = obj.message(M.SYMBOL_TABLE)
            if stab is not None:
                tables.add((stab.btree_address, stab.heap_address))
            efl = obj.message(M.EXTERNAL)
            if efl is not None:
                check_local_heap(hf.reader, efl.heap_address, seen)
            if isinstance(obj, Dataset):
                check_chunk_btree(hf, obj, seen)
        for btree, heap in tables:
            check_symbol_table(hf, btree, heap, seen)
        if global_heaps:
            check_global_heaps(hf, seen)
    return seen


def test_sized_files(sized):
    path, libver, sizes = sized
    kinds = check_file(path).kinds
    assert {("header", 2, "continuation"), ("header", 2, "NIL"), ("header", 2, "creation order"),
            ("continuation message",), ("global heap", "free space")} <= kinds
    assert any(k[0] == "header flags" and k[1] & OH.HDR_PHASE_CHANGE for k in kinds)
    if libver == "earliest":
        assert {("superblock", 0, False), ("header", 1, "continuation"), ("header", 1, "NIL"),
                ("v1 B-tree", 1, "level", 1), ("v1 B-tree", 1, "siblings"), ("symbol table entry", 0),
                ("symbol table entry", 1), ("symbol table entry", 2), ("local heap", "contiguous"),
                ("chunk B-tree", "rank", 2, "filtered")} <= kinds
        if sizes[0] > 2:   # enough links for two levels of group nodes
            assert {("v1 B-tree", 0, "level", 1), ("v1 B-tree", 0, "siblings")} <= kinds
    else:
        assert ("superblock", 3, False) in kinds
        assert any(k[0] == "header flags" and k[1] & OH.HDR_TIMES for k in kinds)


def test_gaps_in_v2_headers(tmp_path):
    """Moved messages leave gaps at the end of v2 blocks (found with libhdf5, kept and put back)."""
    kinds = set()
    for libver in ("earliest", "latest"):
        with new_file(tmp_path / f"{libver}.h5", libver) as f:
            attributes_one_by_one(f, compact_group(f, "ordered", True), 40, 0)
        kinds |= check_file(tmp_path / f"{libver}.h5", global_heaps=False).kinds
    assert ("header", 2, "gap") in kinds


def test_special_files(special):
    kind, path = special
    seen = check_file(path, global_heaps=kind != "split")   # the split driver keeps them with the raw data
    expected = {"v108": ("superblock", 2, False), "userblock": ("superblock", 0, True),
                "small-k": ("v1 B-tree", 1, "level", 2), "family": ("driver info", b"NCSAfami"),
                "split": ("driver info", b"NCSAmult")}[kind]
    assert expected in seen.kinds
    if kind == "small-k":
        assert ("superblock", 1, False) in seen.kinds and ("v1 B-tree", 0, "level", 2) in seen.kinds


def test_btree_v1_nodes_cached_in_the_metadata_cache(tmp_path):
    path = tmp_path / "c.h5"
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("d", data=np.arange(500), chunks=(1,))
    with H5File.open(str(path)) as hf:
        ds = hf.resolve("/d")
        assert ds.read_array().tolist() == list(range(500))
        root = ds.layout.index.address
        assert hf.meta.peek(root, ("v1 B-tree chunk node", 1)) is not None
        hf.meta.invalidate(root)
        assert hf.meta.peek(root, ("v1 B-tree chunk node", 1)) is None
        assert ds.read_raw(8 * 499, 8) == np.int64(499).tobytes()


def test_global_heap_collections_bounded_by_the_metadata_cache(tmp_path):
    """Collections are cached in the file's metadata cache (no private LRU): its budget bounds them."""
    path = tmp_path / "many.h5"
    with h5py.File(path, "w") as f:
        for k in range(6):   # each 5000-byte string gets a collection of its own
            f.create_dataset(f"s{k}", data=np.array(["z" * 5000], dtype=h5py.string_dtype()))
    with H5File.open(str(path)) as hf:
        addrs = [heap_ids(hf, hf.resolve(f"/s{k}"))[0].address for k in range(6)]
        assert len(set(addrs)) == 6
        meta = MetadataCache(budget=8000)   # room for one 5 KiB collection
        heap = global_heap.GlobalHeapReader(BlockReader(hf.fd, hf.reader.base, hf.sizes, meta))
        for a in addrs:
            assert heap.get(a, 1) == b"z" * 5000
        assert [a for a in addrs if meta.peek(a, "global heap collection")] == addrs[-1:]
        assert heap.collection(addrs[-1]) is heap.collection(addrs[-1])
        assert meta.used <= meta.budget


# -- Hypothesis: records -> bytes -> the same records -----------------------------------------

MESSAGE_TYPES = st.sampled_from([t for t in OH.KNOWN_TYPES if t != OH.CONTINUATION])


@st.composite
def object_headers(draw):
    s = draw(SIZES)
    version = draw(st.sampled_from([1, 2]))
    flags = draw(uint(1)) & 0x3F if version == 2 else 0
    track = version == 2 and bool(flags & OH.HDR_TRACK_ORDER)
    head = OH.message_header_size(version, track)
    nblocks = draw(st.integers(1, 3))
    addresses = draw(st.lists(st.integers(0, s.undefined - 1), min_size=nblocks, max_size=nblocks, unique=True))
    base = OH.ObjectHeader(addresses[0], version, draw(uint(4)) if version == 1 else 1, (), flags,
                           draw(st.tuples(*[uint(4)] * 4)) if flags & OH.HDR_TIMES else None,
                           *(draw(st.tuples(uint(2), uint(2))) if flags & OH.HDR_PHASE_CHANGE else (None, None)),
                           nmesgs=draw(uint(2)) if version == 1 else 0, reserved=draw(uint(1)) if version == 1 else 0)
    lengths = [0] * nblocks
    specs = []
    for i in range(nblocks):
        msgs = [(draw(MESSAGE_TYPES), draw(uint(1)) & 0x7F, draw(st.binary(max_size=24)),
                 draw(uint(2)) if track else None) for _ in range(draw(st.integers(1, 4)))]
        specs.append((msgs, draw(st.integers(0, head - 1))))
    # lengths first (a continuation message's size does not depend on the length it holds)
    cont_size = s.layout("OL").size
    for i, (msgs, gap) in enumerate(specs):
        start = base.prefix_size if i == 0 else (4 if version == 2 else 0)
        body = sum(head + len(m[2]) for m in msgs) + (head + cont_size if i + 1 < nblocks else 0)
        lengths[i] = start + body + gap + (4 if version == 2 else 0)
    blocks = []
    for i, (msgs, gap) in enumerate(specs):
        pos = base.prefix_size if i == 0 else (4 if version == 2 else 0)
        placed = []
        if i + 1 < nblocks:
            body = OH.encode_continuation(OH.Continuation(addresses[i + 1], lengths[i + 1]), s)
            msgs = msgs + [(OH.CONTINUATION, 0, body, 0 if track else None)]
        for mtype, mflags, data, order in msgs:
            placed.append(OH.RawMessage(mtype, mflags, data, order, addresses[i], pos))
            pos += head + len(data)
        blocks.append(OH.HeaderBlock(addresses[i], lengths[i], tuple(placed), gap))
    return s, replace(base, blocks=tuple(blocks))


@HYP
@given(object_headers())
def test_object_header_encoder(case):
    s, header = case
    raw = {b.address: OH.encode_block(header, i) for i, b in enumerate(header.blocks)}
    back = OH.decode(raw[header.address], header.address, s, "t", lambda a, n: raw[a])
    assert back == header
    assert [OH.encode_block(back, i) for i in range(len(back.blocks))] == list(raw.values())
    assert len(back.free_space()) == sum(m.type == OH.NIL for m in back.all_messages()) + sum(
        b.gap > 0 for b in back.blocks)


@HYP
@given(SIZES.flatmap(lambda s: st.tuples(st.just(s), st.integers(0, s.undefined - 1),
                                         st.integers(1, min(OH.MAX_HEADER_BYTES, (1 << 8 * s.length) - 1)))))
def test_continuation_encoder(case):
    s, addr, length = case
    roundtrip(OH.Continuation(addr, length), lambda c: OH.encode_continuation(c, s),
              lambda b: OH.decode_continuation(b, s, "t"))


def entries(s: Sizes):
    return st.one_of(
        st.builds(STE.SymbolTableEntry, uint(s.length), address(s), st.just(STE.CACHE_NONE)),
        st.builds(STE.SymbolTableEntry, uint(s.length), address(s), st.just(STE.CACHE_STAB), address(s), address(s)),
        st.builds(STE.SymbolTableEntry, uint(s.length), address(s), st.just(STE.CACHE_SOFTLINK),
                  softlink_offset=uint(4)))


def with_sizes(make):
    """A strategy of (sizes, record) where the record strategy depends on the sizes."""
    return SIZES.flatmap(lambda s: st.tuples(st.just(s), make(s)))


def encoded_entry(entry, s: Sizes) -> bytes:
    w = Writer(s)
    STE.encode(w, entry)
    return w.getvalue()


@HYP
@given(with_sizes(entries))
def test_symbol_table_entry_encoder(case):
    s, entry = case
    roundtrip(entry, lambda e: encoded_entry(e, s), lambda b: STE.decode(Reader(b, 0, s)))
    assert len(encoded_entry(entry, s)) == STE.size(s)


@HYP
@given(with_sizes(lambda s: st.integers(1, 8).flatmap(
    lambda k: st.builds(SNOD.SymbolTableNode, st.lists(entries(s), max_size=2 * k).map(tuple), st.just(2 * k)))))
def test_symbol_table_node_encoder(case):
    s, node = case
    roundtrip(node, lambda n: SNOD.encode(n, s), lambda b: SNOD.decode(b, s, node.capacity))


@st.composite
def local_heaps(draw, s: Sizes):
    size = draw(st.integers(0, 40)) * 8
    data = bytearray(draw(exactly(size)))
    cuts = sorted(set(draw(st.lists(st.integers(0, size // 8), max_size=6))))
    free = []   # disjoint blocks, each at least two lengths long, listed in any order
    for lo, hi in zip(cuts, cuts[1:]):
        if (hi - lo) * 8 >= 2 * s.length and draw(st.booleans()):
            free.append(LH.FreeBlock(lo * 8, (hi - lo) * 8))
    free = draw(st.permutations(free))
    heap = LH.LocalHeap(bytes(data), draw(address(s)), tuple(free))
    return replace(heap, data=LH.encode_data(heap, s))   # free block headers are part of the data


@HYP
@given(with_sizes(local_heaps))
def test_local_heap_encoder(case):
    s, heap = case
    roundtrip(heap, lambda h: LH.encode_prefix(h, s) + LH.encode_data(h, s),
              lambda b: LH.decode(b[:LH.prefix_size(s)], b[LH.prefix_size(s):], s))


@st.composite
def collections(draw, s: Sizes):
    indices = draw(st.lists(st.integers(1, 0xFFFF), unique=True, max_size=6))
    objects = [GH.HeapObject(i, draw(uint(2)), draw(st.binary(max_size=40))) for i in indices]
    used = GH.header_size(s) + sum(GH.entry_size(o, s) for o in objects)
    free = draw(st.sampled_from([0, 8, GH.object_header_size(s), GH.object_header_size(s) + 64]))
    entries = tuple(objects) + ((GH.FreeSpace(free),) if free >= GH.object_header_size(s) else ())
    return GH.Collection(draw(address(s)), used + free, entries, s)


@HYP
@given(with_sizes(collections))
def test_global_heap_encoder(case):
    s, col = case
    roundtrip(col, GH.encode_collection, lambda b: GH.decode_collection(b, s, col.address))
    assert GH.header_size(s) + sum(GH.entry_size(e, s) for e in col.entries if isinstance(e, GH.HeapObject)) \
        + col.free == col.size


@HYP
@given(with_sizes(lambda s: st.builds(GH.HeapID, address(s), uint(4))))
def test_heap_id_encoder(case):
    s, hid = case

    def encode(h):
        w = Writer(s)
        GH.encode_heap_id(w, h)
        return w.getvalue()

    roundtrip(hid, encode, lambda b: GH.decode_heap_id(Reader(b, 0, s)))


@st.composite
def btree_v1_nodes(draw, s: Sizes):
    node_type = draw(st.sampled_from([B1.GROUP, B1.CHUNK]))
    k = draw(st.integers(1, 8))
    used = draw(st.integers(0, 2 * k))
    rank = draw(st.integers(1, 4))
    if node_type == B1.GROUP:
        key = uint(s.length)
    else:
        key = st.builds(B1.ChunkKey, uint(4), uint(4), st.tuples(*[uint(8)] * rank, st.just(0)))
    children = st.integers(0, s.undefined - 1)
    node = B1.Node(node_type, draw(uint(1)), tuple(draw(key) for _ in range(used + 1)),
                   tuple(draw(children) for _ in range(used)), draw(address(s)), draw(address(s)), 0)
    return node, k, rank if node_type == B1.CHUNK else 0


@HYP
@given(with_sizes(btree_v1_nodes))
def test_btree_v1_node_encoder(case):
    s, (node, k, rank) = case
    roundtrip(node, lambda n: B1.encode_node(n, s, k), lambda b: B1.decode_node(b, 0, node.node_type, rank, s))
    assert len(B1.encode_node(node, s, k)) == B1.node_size(node.node_type, s, rank, k)


@st.composite
def superblocks(draw):
    s = draw(SIZES)
    version = draw(st.integers(0, 3))
    location = draw(st.sampled_from([0, 512, 4096]))
    root = draw(st.integers(0, s.undefined - 1))
    common = {"version": version, "location": location, "sizes": s, "base_address": draw(uint(s.offset)),
              "root_header_address": root, "eof_address": draw(uint(s.offset))}
    if version >= 2:
        return SB.Superblock(**common, extension_address=draw(address(s)), consistency_flags=draw(uint(1)))
    entry = draw(entries(s).map(lambda e: replace(e, header_address=root)))
    return SB.Superblock(**common, root_entry=entry, group_leaf_k=draw(st.integers(1, 0xFFFF)),
                         group_internal_k=draw(st.integers(1, 0xFFFF)),
                         indexed_storage_k=draw(st.integers(1, 0xFFFF)) if version == 1 else 32,
                         consistency_flags=draw(uint(4)), free_space_version=draw(uint(1)),
                         root_entry_version=draw(uint(1)), shared_header_version=draw(uint(1)),
                         free_space_address=draw(address(s)), driver_info_address=draw(address(s)))


@HYP
@given(superblocks())
def test_superblock_encoder(sb):
    roundtrip(sb, SB.encode, lambda b: SB.decode(b, sb.location))


@HYP
@given(st.builds(SB.DriverInfo, st.just(0), exactly(8), st.binary(max_size=64)))
def test_driver_info_encoder(info):
    roundtrip(info, SB.encode_driver_info, SB.decode_driver_info)
