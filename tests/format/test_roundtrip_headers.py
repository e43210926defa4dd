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

import os
import random
from dataclasses import replace

import h5py
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from roundtrip_support import (HYP, SIZES, Seen, address, btree_k_fcpl, check, checked, encoded, exactly,
                               global_heap_collection, new_file, objects, roundtrip, uint, with_sizes)

from h5fs.format import btree_v1 as B1
from h5fs.format import global_heap as GH
from h5fs.format import local_heap as LH
from h5fs.format import object_header as OH
from h5fs.format import superblock as SB
from h5fs.format import symbol_table_entry as STE
from h5fs.format import symbol_table_node as SNOD
from h5fs.format.codec import Reader, Sizes
from h5fs.format.messages import layout as L
from h5fs.format.messages.datatype import VarLen
from h5fs.model import messages as M
from h5fs.model.dataset import Dataset
from h5fs.model.file import H5File
from h5fs.storage.blockio import BlockReader
from h5fs.storage.metadata_cache import MetadataCache
from h5fs.storage import btree_v1, global_heap, local_heap, superblock, symbol_table

# 2-byte lengths only in the earliest format: in the latest, dense link storage uses a fractal heap
# whose maximum direct block size (65536) libhdf5 writes into a 2-byte field as 0; it cannot read
# such a group back itself ("invalid fractal heap object size")
SIZES_BY_LIBVER = {"earliest": [(8, 8), (4, 4), (2, 2), (4, 8), (8, 4)],
                   "latest": [(8, 8), (4, 4), (2, 4), (4, 8), (8, 4)]}


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


@pytest.fixture(scope="module", params=[(lv, s) for lv, sizes in SIZES_BY_LIBVER.items() for s in sizes],
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
        f = new_file(path, "earliest", (8, 8), btree_k_fcpl(2, 2, 2))
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

def check_file(path: str, global_heaps: bool = True) -> Seen:
    """Every structure of the file round trips (`roundtrip_support.checked`, which walks it, and
    the global heap collections /vlen and /refs name); the engine's storage readers give the
    records the decoders give; what kinds of them there were. `global_heaps` False where they
    live in another file (split)."""
    seen = Seen(set())
    nodes: set[int] = set()
    fd = os.open(path, os.O_RDONLY)
    try:
        with H5File.open(str(path)) as hf:
            # values=False: the walk would read region references, which libhdf5 stores wider
            # than their slots with narrow offsets (see `heap_ids`)
            for s, record in checked(path, values=False):
                kind = s.kind[0]
                if kind == "object header":
                    note_header(hf, s, record, seen)
                elif kind == "message" and s.kind[1] == OH.CONTINUATION:
                    seen.add("continuation message")
                elif kind in ("superblock", "driver info"):
                    note_superblock(fd, hf, s, record, seen)
                elif kind == "v1 B-tree":
                    rank = len(record.keys[0].offsets) - 1 if record.node_type == B1.CHUNK else 0
                    assert record == btree_v1.read_node(hf.reader, s.at[0], record.node_type, rank, "t")
                    seen.add("v1 B-tree", record.node_type, "level", record.level)
                    if record.left is not None or record.right is not None:
                        seen.add("v1 B-tree", record.node_type, "siblings")
                    nodes.add(s.at[0])
                elif kind == "symbol table node":
                    assert list(record.entries) == symbol_table.node_entries(hf.reader, s.at[0], "t")
                    seen.add("symbol table node", s.kind[1])
                    for entry in record.entries:
                        seen.add("symbol table entry", entry.cache_type)
                elif kind == "local heap":
                    assert record == local_heap.read(hf.reader, s.at[0], "t")
                    seen.add("local heap", s.kind[1])
                    if s.at[1] == s.at[0] + LH.prefix_size(hf.sizes):
                        seen.add("local heap", "contiguous")
            for _, obj in objects(hf):
                lay = obj.layout if isinstance(obj, Dataset) else None
                if lay and lay.layout_class == L.CHUNKED and lay.index.index_type == L.BTREE_V1:
                    assert lay.index.address in nodes
                    seen.add("chunk B-tree", "rank", len(lay.chunk_dims),
                             "filtered" if obj.header.first(M.FILTERS) else "plain")
            for addr in check_heap_ids(hf) if global_heaps else ():
                s = global_heap_collection(hf.reader, addr)
                check(s)
                seen.add("global heap", s.kind[1])
    finally:
        os.close(fd)
    return seen


def note_header(hf: H5File, s, header: OH.ObjectHeader, seen: Seen) -> None:
    """The engine's header is the decoded one; each message's bytes are where it says."""
    engine = hf.extension if s.where == "superblock extension" else hf.get(header.address, s.where).header
    assert header == engine
    pos = 0
    for i, block in enumerate(header.blocks):
        raw, pos = s.raw[pos:pos + block.length], pos + block.length
        seen.add("header", header.version, "continuation" if i else "block 0")
        if block.gap:
            seen.add("header", header.version, "gap")
        for m in block.messages:
            assert raw[m.offset + OH.message_header_size(header.version, header.track_order):][:m.size] == m.data
            if m.type == OH.NIL:
                seen.add("header", header.version, "NIL")
            if m.creation_order is not None:
                seen.add("header", header.version, "creation order")
    if header.version == 2:
        seen.add("header flags", header.flags & ~OH.HDR_CHUNK0_WIDTH, header.chunk0_width)
    assert header.messages == tuple(m for m in header.all_messages() if m.type not in (OH.NIL, OH.CONTINUATION))
    for space in header.free_space():
        assert space.offset + space.size <= next(b.length for b in header.blocks if b.address == space.block)


def note_superblock(fd: int, hf: H5File, s, record, seen: Seen) -> None:
    """The superblock (and driver information block) the storage reader reads from the file
    itself is the engine's, and the walk's bytes are the file's at its location."""
    sb = superblock.read(fd)
    assert sb == hf.superblock
    if s.kind[0] == "superblock":
        assert record == replace(sb, driver_info=None)   # decode reads the superblock alone
        assert os.pread(fd, len(s.raw), sb.location) == s.raw
        seen.add("superblock", sb.version, sb.location > 0)
    else:
        assert record == sb.driver_info
        assert os.pread(fd, len(s.raw), sb.location + sb.driver_info_address) == s.raw
        seen.add("driver info", record.driver_id)


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


def check_heap_ids(hf: H5File) -> set[int]:
    """The IDs /vlen and /refs hold round trip; the engine keeps the collections they name in the
    file's metadata cache. Their addresses."""
    s = hf.sizes
    ids = heap_ids(hf, hf.resolve("/vlen")) + heap_ids(hf, hf.resolve("/refs"))
    for hid in ids:
        roundtrip(hid, lambda h: encoded(GH.encode_heap_id, h, s), lambda b: GH.decode_heap_id(Reader(b, 0, s)))
    found = {hid.address for hid in ids if not hid.is_nil}
    for addr in found:
        col = hf.global_heap.collection(addr)
        assert hf.meta.peek(addr, "global heap collection") is col
    assert all(hf.global_heap.get_id(hid) is not None for hid in ids if not hid.is_nil)
    return found


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


@HYP
@given(with_sizes(entries))
def test_symbol_table_entry_encoder(case):
    s, entry = case
    roundtrip(entry, lambda e: encoded(STE.encode, e, s), lambda b: STE.decode(Reader(b, 0, s)))
    assert len(encoded(STE.encode, entry, s)) == STE.size(s)


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
    roundtrip(hid, lambda h: encoded(GH.encode_heap_id, h, s), lambda b: GH.decode_heap_id(Reader(b, 0, s)))


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
