"""Lossless round trips of the index and heap structures: v2 B-trees (every record type libhdf5
writes), fractal heaps (blocks and heap IDs), fixed and extensible arrays (blocks, pages,
elements), VDS mapping blocks and dataspace selections.

Against libhdf5: files written by h5py, each structure found through h5fs's engine, its bytes
read from the file, decoded and encoded again: the bytes are equal, checksums included; one
field changed survives encode -> decode. Against themselves: Hypothesis strategies of valid
records encode, decode back to the record, and encode again to the same bytes.
"""

from __future__ import annotations

import ctypes
from dataclasses import replace

import h5py
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from roundtrip_support import (HYP, SIZES, address, addresses, btree_records, check, check_all, chunk_index, exactly,
                               libhdf5, new_file, roundtrip, sohm_table, structures, uint, vds_mappings)
from roundtrip_support import Seen, check_bytes, check_changed  # noqa: F401 - other test modules import them from here

from h5fs.format import btree_v2 as bt
from h5fs.format import extensible_array as ea
from h5fs.format import fixed_array as fa
from h5fs.format import fractal_heap as fh
from h5fs.format import selection as S
from h5fs.format import vds_mapping
from h5fs.format.checksum import lookup3
from h5fs.format.codec import Reader, Sizes, Writer
from h5fs.format.messages import layout as L
from h5fs.model.file import H5File
from h5fs.storage.index import IndexContext, open_index
from h5fs.storage.readers.fractal_heap import FractalHeap


def data(shape, seed=0):
    return np.random.default_rng(seed).integers(0, 50, size=shape).astype("i4")


def checked(found) -> set[tuple]:
    """The kinds of the structures checked against libhdf5's bytes."""
    return set(check_all(found)[0])


# -- chunk indexes ------------------------------------------------------------------------------


def check_chunk_index(hf, path, seen: set) -> None:
    """The dataset's chunk index structures round trip; the chunks they hold are the index's."""
    ds = hf.resolve(path)
    lay, space = ds.layout, ds.dataspace
    ctx = IndexContext(hf.reader, lay, space.dims, space.maxdims, bool(ds.filters), path)
    allocated = len(list(open_index(ctx).records()))
    seen.add(("index", lay.index.index_type, bool(ds.filters), lay.version))
    held = 0
    for s in chunk_index(hf.reader, ds):
        record = check(s)
        seen.add(s.kind)
        if s.kind[0] == "elements":
            held += sum(e.address is not None for e in record)
        elif s.kind[0] == "btree records":
            held += len(record)
    if lay.index.index_type in (L.FIXED_ARRAY, L.EXTENSIBLE_ARRAY, L.BTREE_V2) and lay.index.address is not None:
        assert held == allocated, path


def _implicit(f, name, shape, maxshape, chunks):
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk(chunks)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    h5py.h5d.create(f.id, name.encode(), h5py.h5t.NATIVE_INT32, h5py.h5s.create_simple(shape, maxshape), dcpl=dcpl)
    f[name][...] = data(shape)


def chunked_datasets(f, unlimited: bool) -> None:
    """Every chunk index, filtered and not: single, implicit, fixed array (unpaged and paged),
    extensible array (super blocks, paged data blocks), v2 B-tree (several levels)."""
    for comp in (None, "gzip"):
        sfx = comp or "raw"
        f.create_dataset(f"single_{sfx}", data=data((20, 30)), chunks=(20, 30), compression=comp)
        f.create_dataset(f"fa_{sfx}", data=data((40, 50)), chunks=(10, 10), compression=comp)
        p = f.create_dataset(f"fapaged_{sfx}", (5001,), "i2", chunks=(2,), compression=comp)
        p[0:100] = 7
        p[4200:5001] = np.arange(801)
        if not unlimited:
            continue
        e = f.create_dataset(f"ea_{sfx}", data=data((600, 7)), chunks=(2, 7), maxshape=(None, 7), compression=comp)
        e.resize((650, 7))
        e[640:650] = 5
        ep = f.create_dataset(f"eapaged_{sfx}", (200000,), "u1", chunks=(1,), maxshape=(None,), compression=comp)
        for i in (0, 3, 250, 131055, 131061, 160000, 199999):
            ep[i] = 1 + i % 200
        b = f.create_dataset(f"bt_{sfx}", (120, 90), "i4", chunks=(1, 1), maxshape=(None, None), compression=comp)
        b[...] = data((120, 90))
        f.create_dataset(f"btsmall_{sfx}", data=data((20, 25)), chunks=(3, 4), maxshape=(None, None),
                         compression=comp)
    _implicit(f, "implicit", (10, 11), (25, 30), (3, 4))


@pytest.mark.parametrize("libver,sizes", [("latest", (8, 8)), ("v114", (8, 8)), ("v110", (8, 8)),
                                          ("latest", (4, 8)), ("latest", (4, 4)), ("latest", (2, 2)),
                                          ("latest", (8, 4))])
def test_chunk_indexes(tmp_path, libver, sizes):
    p = tmp_path / "c.h5"
    # libhdf5 2.0 cannot reopen its unlimited dataspaces when `size of lengths` is not 8
    unlimited = sizes[1] == 8
    with new_file(p, libver, sizes) as f:
        chunked_datasets(f, unlimited)
    seen: set[tuple] = set()
    with H5File.open(str(p)) as hf:
        assert (hf.sizes.offset, hf.sizes.length) == sizes
        for path in addresses(p):
            check_chunk_index(hf, path, seen)
    kinds = {k[1:3] for k in seen if k[0] == "index"}
    want = {L.SINGLE, L.IMPLICIT, L.FIXED_ARRAY} | ({L.EXTENSIBLE_ARRAY, L.BTREE_V2} if unlimited else set())
    assert {k for k, _ in kinds} == want
    assert ("fixed array", 1, "paged") in seen and ("fixed array", 0, "unpaged") in seen
    if unlimited:
        assert {("ea dblock", "paged"), ("ea page",), ("ea sblock", "bitmap"), ("btree", bt.CHUNK, 2),
                ("btree", bt.CHUNK_FILTERED, 2)} <= seen


# -- dense groups and attributes, shared messages: fractal heaps and their B-trees --------------


def set_deflate(plist, level=6) -> None:
    fn = libhdf5("H5Pset_deflate")
    fn.argtypes = [ctypes.c_int64, ctypes.c_uint]
    assert fn(plist.id, level) >= 0


def filtered_group(f, name: str, targets: dict[str, str]) -> None:
    """A group whose link heap is deflated (h5py does not expose H5Pset_deflate on a gcpl)."""
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    set_deflate(gcpl)
    h5py.h5g.create(f.id, name.encode(), gcpl=gcpl)
    for link, target in targets.items():
        f[name][link] = h5py.SoftLink(target)


def dense_file(path, sizes) -> None:
    """Dense links (name and creation-order indexes, child indirect blocks, a huge link), dense
    attributes (a huge one, creation order), deflated link heaps (root direct block and
    indirect blocks, filtered huge objects)."""
    small = sizes[0] == 2                     # a 64 KiB file
    n, tlen = (60, 90) if small else (400, 200)
    if sizes == (8, 8):                       # enough for child indirect blocks
        n, tlen = 3000, 1
    with new_file(path, "latest", sizes) as f:
        f.create_dataset("x", data=[1])
        g = f.create_group("g", track_order=True)
        for i in range(n):
            g[f"link{i:05d}" + "x" * (i % 37)] = h5py.SoftLink("/" + "t" * (i % tlen or 200))
        g["huge"] = h5py.SoftLink("/" + "h" * 5000)
        d = f.create_dataset("d", data=[1.0])
        for i in range(30):
            d.attrs[f"attr{i:02d}"] = np.full(i + 1, i, dtype="<i8")
        d.attrs["huge"] = np.arange(3000 if small else 50000, dtype="<i4")
        o = f.create_group("o", track_order=True)
        for i in range(20):
            o.attrs[f"z{20 - i:02d}"] = i
        filtered_group(f, "fsmall", {f"s{i}": "/q" for i in range(9)} | {"huge": "/" + "w" * 5000})
        if not small:
            big = {f"l{i:05d}" + "y" * (i % 50): "/" + "q" * (100 + i % 300) for i in range(600)}
            big["huge1"] = "/" + "".join(chr(97 + (i * 7) % 26) for i in range(6000))
            filtered_group(f, "fbig", big)


@pytest.mark.parametrize("sizes", [(8, 8), (4, 4), (2, 4), (2, 8)])
def test_dense_groups_and_attributes(tmp_path, sizes):
    p = tmp_path / "dense.h5"
    dense_file(p, sizes)
    seen = checked(structures(p))
    types = {k[1] for k in seen if k[0] == "btree"}
    huge = {bt.HUGE_INDIRECT_FILTERED, bt.HUGE_DIRECT if sizes == (2, 4) else bt.HUGE_INDIRECT}
    assert types == {bt.LINK_NAME, bt.LINK_CORDER, bt.ATTR_NAME, bt.ATTR_CORDER} | huge
    assert {("heap", "filtered", "direct root"), ("heap", "plain", "indirect root"), ("heap iblock", "root"),
            ("heap dblock", "checksummed"), ("heap id", "ManagedId", None)} <= seen
    if sizes[0] != 2:
        assert ("heap", "filtered", "indirect root") in seen
    if sizes == (8, 8):
        assert ("heap iblock", "child") in seen
    assert ("heap id", "HugeId", sizes == (2, 4)) in seen


def shared_messages_fcpl():
    """A file creation property list that shares every message type through one v2 B-tree
    index (no list phase), however small the message."""
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    for name, args in (("H5Pset_shared_mesg_nindexes", (1,)), ("H5Pset_shared_mesg_index", (0, 0x182A, 0)),
                       ("H5Pset_shared_mesg_phase_change", (0, 0))):
        fn = libhdf5(name)
        fn.argtypes = [ctypes.c_int64] + [ctypes.c_uint] * len(args)
        assert fn(fcpl.id, *args) >= 0
    return fcpl


@pytest.mark.parametrize("sizes", [(8, 8), (4, 4)])
def test_shared_messages(tmp_path, sizes):
    """SOHM: the index is a v2 B-tree of type 7 over a fractal heap holding managed and tiny
    messages (a scalar dataspace fits in a heap ID)."""
    p = tmp_path / "sohm.h5"
    with new_file(p, "latest", sizes, shared_messages_fcpl()) as f:
        for i in range(40):
            d = f.create_dataset(f"d{i}", data=np.arange(i % 5 + 1, dtype="<f4" if i % 2 else "<i8"),
                                 compression="gzip" if i % 3 == 0 else None, chunks=(1,) if i % 3 == 0 else None)
            d.attrs["scalar"] = np.int32(i)
            d.attrs["text"] = "shared " * (i % 4)
    with H5File.open(str(p)) as hf:
        (index,) = hf.sohm_indexes
        assert index.index_type == 1
        seen = checked(sohm_table(hf))
        assert {k[1] for k in seen if k[0] == "btree"} == {bt.SOHM}
        heap = FractalHeap(hf.reader, index.heap_address)
        recs = btree_records(hf.reader, index.index_address)
        assert recs and all(r.location == 0 for r in recs)
        # each record's hash is lookup3 of the message its heap ID names, seeded with its type
        # (dataspace, datatype, fill value, filter pipeline or attribute)
        assert all(any(r.hash == lookup3(heap.get(r.heap_id), t) for t in (1, 3, 5, 11, 12)) for r in recs)
    assert {("sohm table",), ("heap id", "TinyId", None), ("heap id", "ManagedId", None)} <= seen


# -- virtual dataset mappings and region references: selections in the global heap --------------


def select(space, how: str):
    """Select on a 2-D (10, 12) dataspace: all, none, points, a regular or irregular hyperslab."""
    if how == "all":
        space.select_all()
    elif how == "none":
        space.select_none()
    elif how == "points":
        space.select_elements(np.array([(1, 2), (9, 11), (0, 0), (4, 7)], dtype="u8"))
    elif how == "regular":
        space.select_hyperslab((1, 2), (3, 2), (2, 3), (1, 2))
    else:
        space.select_hyperslab((0, 0), (2, 3))
        space.select_hyperslab((5, 6), (3, 1), op=h5py.h5s.SELECT_OR)
    return space


def vds_file(path, libver) -> None:
    """Virtual datasets whose mappings use all, regular and irregular hyperslab selections,
    several source files, the file itself (".") and an unlimited mapping."""
    with new_file(path.parent / "src.h5", libver) as f:
        f["data"] = np.arange(120, dtype="<i4").reshape(10, 12)
    with new_file(path, libver) as f:
        f["s"] = np.arange(120, dtype="<i4").reshape(10, 12)
        lay = h5py.VirtualLayout((4, 10, 12), "<i4")
        lay[0] = h5py.VirtualSource("src.h5", "data", shape=(10, 12))
        lay[1] = h5py.VirtualSource(".", "s", shape=(10, 12))
        lay[2, 0:5, ::3] = h5py.VirtualSource("src.h5", "data", shape=(10, 12))[::2, 0:4]
        f.create_virtual_dataset("v", lay, fillvalue=-1)
        same = h5py.VirtualLayout((3, 10, 12), "<i4")
        for i in range(3):
            same[i] = h5py.VirtualSource(".", "s", shape=(10, 12))
        f.create_virtual_dataset("x", same)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        for how in ("irregular", "regular"):   # libhdf5 refuses point selections in mappings
            vspace = select(h5py.h5s.create_simple((10, 12)), how)
            dcpl.set_virtual(vspace, b"src.h5", b"data", select(h5py.h5s.create_simple((10, 12)), how))
        h5py.h5d.create(f.id, b"w", h5py.h5t.STD_I32LE, h5py.h5s.create_simple((10, 12)), dcpl=dcpl)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        vspace = h5py.h5s.create_simple((3, 5), (3, h5py.h5s.UNLIMITED))
        vspace.select_hyperslab((0, 0), (1, h5py.h5s.UNLIMITED), (1, 5), (3, 5))
        sspace = h5py.h5s.create_simple((3, 5), (3, h5py.h5s.UNLIMITED))
        sspace.select_hyperslab((0, 0), (1, h5py.h5s.UNLIMITED), (1, 5), (3, 5))
        dcpl.set_virtual(vspace, b"src.h5", b"grow", sspace)
        h5py.h5d.create(f.id, b"u", h5py.h5t.STD_I32LE, vspace, dcpl=dcpl)


@pytest.mark.parametrize("libver", ["earliest", "v110", "latest"])
def test_vds_mapping_blocks(tmp_path, libver):
    p = tmp_path / "vds.h5"
    vds_file(p, libver)
    kinds = set()
    with H5File.open(str(p)) as hf:
        for name in ("/v", "/w", "/u", "/x"):
            block = check(vds_mappings(hf, hf.resolve(name)))
            kinds.add(("block", block.version))
            for m in block.entries:
                for sel in (m.source_selection, m.virtual_selection):
                    kinds.add((sel.kind, sel.regular is not None, sel.version,
                               any(v is None for v in sel.regular[2]) if sel.regular else False))
    want = {("all", False, 1, False), ("block", 0)}
    if libver == "latest":   # mapping block version 1 where it saves space (source file ".")
        want |= {("block", 1), ("hyperslab", False, 3, False), ("hyperslab", True, 3, True)}
    else:
        want |= {("hyperslab", False, 1, False), ("hyperslab", True, 2, True)}
    assert want <= kinds


@pytest.mark.parametrize("libver,sizes", [("earliest", (8, 8)), ("latest", (8, 8)), ("latest", (4, 4))])
def test_region_reference_selections(tmp_path, libver, sizes):
    """Region references keep an object address and a selection in the global heap."""
    p = tmp_path / "refs.h5"
    hows = ("all", "none", "points", "regular", "irregular")
    with new_file(p, libver, sizes) as f:
        d = f.create_dataset("d", data=np.arange(120).reshape(10, 12))
        refs = f.create_dataset("refs", (len(hows),), dtype=h5py.regionref_dtype)
        for i, how in enumerate(hows):
            refs[i] = h5py.h5r.create(f.id, b"d", h5py.h5r.DATASET_REGION, select(d.id.get_space(), how))
    kinds = []
    with H5File.open(str(p)) as hf:
        lay = hf.resolve("/refs").layout          # contiguous: the stored (address, index) pairs
        s = hf.sizes
        raw = hf.reader.read(lay.address, len(hows) * (s.offset + 4))
        for i in range(len(hows)):
            addr, index = s.layout("OI").unpack_from(raw, i * (s.offset + 4))
            blob = bytes(hf.global_heap.get(addr, index))
            c = Reader(blob, s.offset, s, "t")
            sel = S.decode(c)
            assert c.pos == len(blob)
            w = Writer(s)
            S.encode(w, sel)
            assert w.getvalue() == blob[s.offset:]
            kinds.append((sel.kind, sel.version, sel.regular is not None))
    point_v, hyper_v = (1, 1) if libver == "earliest" else (2, 3)
    assert kinds == [("all", 1, False), ("none", 1, False), ("points", point_v, False),
                     ("hyperslab", hyper_v if hyper_v == 3 else 1, hyper_v == 3), ("hyperslab", hyper_v, False)]


# -- Hypothesis: valid records -> encode -> decode -> the record, and the same bytes again -------


@st.composite
def btree_headers(draw, sizes=None):
    s = sizes or draw(SIZES)
    node_size = draw(st.sampled_from([512, 1024, 4096]))
    record_size = draw(st.integers(1, 64))
    depth = draw(st.integers(0, 3))
    try:
        max_nrec_size, levels = bt._levels(node_size, record_size, depth, s, "t")
    except Exception:  # noqa: BLE001 - too deep for these sizes
        depth = 0
        max_nrec_size, levels = bt._levels(node_size, record_size, 0, s, "t")
    root = draw(address(s))
    nrec = draw(st.integers(0, levels[depth].max_nrec)) if root is not None else 0
    total = draw(uint(s.length)) if root is not None else 0
    return bt.BTreeV2Header(0, draw(st.sampled_from([0, 1])), draw(st.integers(1, 11)), node_size, record_size,
                            depth, draw(uint(1)), draw(uint(1)), root, nrec, total, s, max_nrec_size, levels)


@HYP
@given(btree_headers())
def test_btree_header_encoder(hdr):
    roundtrip(hdr, bt.encode_header, lambda b: bt.decode_header(b, 0, hdr.sizes))


@HYP
@given(btree_headers(), st.data())
def test_btree_node_encoder(hdr, data):
    depth = data.draw(st.integers(0, hdr.depth))
    nrec = data.draw(st.integers(0, min(8, hdr.levels[depth].max_nrec)))
    records = tuple(data.draw(exactly(hdr.record_size)) for _ in range(nrec))
    children = ()
    if depth:
        child = hdr.levels[depth - 1]

        def pointer(n):
            total = data.draw(st.integers(n, child.cum_max_nrec)) if depth > 1 else n
            return bt.ChildPointer(data.draw(st.integers(0, hdr.sizes.undefined - 1)), n, total)

        children = tuple(pointer(data.draw(st.integers(0, child.max_nrec))) for _ in range(nrec + 1))
    node = bt.Node(4096, depth, records, children)
    roundtrip(node, lambda n: bt.encode_node(hdr, n), lambda b: bt.decode_node(b, hdr, 4096, nrec, depth))


def record_cases(s: Sizes):
    """(type, record, encode, decode) for every record type, chunk records of any rank/width."""
    L = uint(s.length)
    heap_id = {7: exactly(7), 8: exactly(8)}
    huge = {
        bt.HUGE_INDIRECT: st.builds(bt.HugeObjectRecord, address(s), L, id=L),
        bt.HUGE_INDIRECT_FILTERED: st.builds(bt.HugeObjectRecord, address(s), L, id=L, filter_mask=uint(4),
                                             memory_size=L),
        bt.HUGE_DIRECT: st.builds(bt.HugeObjectRecord, address(s), L),
        bt.HUGE_DIRECT_FILTERED: st.builds(bt.HugeObjectRecord, address(s), L, filter_mask=uint(4), memory_size=L),
    }
    fixed = huge | {
        bt.LINK_NAME: st.builds(bt.LinkNameRecord, uint(4), heap_id[7]),
        bt.LINK_CORDER: st.builds(bt.LinkCorderRecord, uint(8), heap_id[7]),
        bt.SOHM: st.builds(bt.SharedMessageRecord, st.just(0), uint(4), refcount=uint(4), heap_id=heap_id[8])
        | st.builds(bt.SharedMessageRecord, st.just(1), uint(4), msg_type=uint(1), oh_index=uint(2),
                    oh_address=address(s)),
        bt.ATTR_NAME: st.builds(bt.AttrNameRecord, heap_id[8], uint(1), uint(4), uint(4)),
        bt.ATTR_CORDER: st.builds(bt.AttrCorderRecord, heap_id[8], uint(1), uint(4)),
    }
    plain = st.sampled_from(sorted(fixed)).flatmap(
        lambda t: fixed[t].map(lambda r: (t, r, bt.record_encoder(t), bt.record_decoder(t))))

    @st.composite
    def chunks(draw):
        rank, width = draw(st.integers(1, 4)), draw(st.integers(1, 8))
        filtered = draw(st.booleans())
        t = bt.CHUNK_FILTERED if filtered else bt.CHUNK
        scaled = tuple(draw(st.lists(uint(8), min_size=rank, max_size=rank)))
        extra = (draw(uint(width)), draw(uint(4))) if filtered else ()
        rec = bt.ChunkRecordV2(draw(address(s)), scaled, *extra)
        return t, rec, bt.record_encoder(t, rank, width), bt.record_decoder(t, rank, width)

    return plain | chunks()


@HYP
@given(SIZES.flatmap(lambda s: st.tuples(st.just(s), record_cases(s))))
def test_btree_record_encoders(case):
    s, (btype, rec, encode, decode) = case

    def enc(r):
        w = Writer(s)
        encode(w, r)
        return w.getvalue()

    roundtrip(rec, enc, lambda b: decode(Reader(b, 0, s, "t")))
    # packed into a node's records at a record size with room to spare
    hdr = bt.BTreeV2Header(0, 0, btype, 4096, len(enc(rec)) + 3, 0, 100, 40, 1, 1, 1, s, 1, bt._levels(
        4096, len(enc(rec)) + 3, 0, s, "t")[1])
    raw = bt.encode_records(hdr, encode, [rec, rec])
    assert bt.decode_records(hdr, bt.Node(0, 0, raw, ()), decode, "t") == [rec, rec]


@st.composite
def heap_headers(draw):
    """(sizes, header) of a valid heap (its geometry derives without error)."""
    s = draw(SIZES)
    L = uint(s.length)
    width = 1 << draw(st.integers(0, 2))
    start_bits = draw(st.integers(6, 12))
    max_direct_bits = draw(st.integers(start_bits, min(16, 8 * s.length - 1)))
    first_row_bits = start_bits + width.bit_length() - 1
    max_heap_bits = draw(st.integers(max(max_direct_bits + 1, first_row_bits), 64))
    max_root_rows = max_heap_bits - first_row_bits + 1
    filter_info = draw(st.sampled_from([b"", bytes(range(16))]))
    h = fh.FractalHeapHeader(
        0, draw(st.integers(5, 40)), len(filter_info), draw(st.integers(0, 3)), draw(uint(4)), draw(L),
        draw(address(s)), draw(L), draw(address(s)), draw(L), draw(L), draw(L), draw(L), draw(L), draw(L), draw(L),
        draw(L), width, 1 << start_bits, 1 << max_direct_bits, max_heap_bits, draw(st.integers(0, max_root_rows)),
        draw(address(s)), draw(st.integers(0, max_root_rows)), draw(L) if filter_info else 0,
        draw(uint(4)) if filter_info else 0, filter_info)
    return s, h


@HYP
@given(heap_headers())
def test_heap_header_encoder(case):
    s, h = case
    roundtrip(h, lambda r: fh.encode_header(r, s), lambda b: fh.decode_header(b, 0, s, "t"))


@HYP
@given(heap_headers(), st.data())
def test_heap_block_encoders(case, data):
    s, h = case
    g = fh.derive(h, s, "t")
    offset = uint(g.heap_off_size)
    db = fh.DirectBlock(data.draw(offset), data.draw(st.binary(max_size=200)))
    roundtrip(db, lambda r: fh.encode_direct(r, g), lambda b: fh.decode_direct(b, g, "t"))
    nrows = data.draw(st.integers(1, min(g.max_root_rows, 8)))
    ndirect = min(nrows, g.max_direct_rows) * g.width
    entry = st.builds(fh.DirectEntry, address(s), uint(s.length), uint(4)) if g.filtered else \
        st.builds(fh.DirectEntry, address(s))
    ib = fh.IndirectBlock(0, data.draw(offset), nrows, tuple(data.draw(entry) for _ in range(ndirect)),
                          tuple(data.draw(address(s)) for _ in range(nrows * g.width - ndirect)))
    roundtrip(ib, lambda r: fh.encode_indirect(r, g), lambda b: fh.decode_indirect(b, g, 0, nrows, "t"))


@HYP
@given(heap_headers(), st.data())
def test_heap_id_encoders(case, data):
    s, h = case
    g = fh.derive(h, s, "t")
    kinds = [st.builds(fh.TinyId, st.binary(min_size=1, max_size=g.tiny_max))] if g.tiny_max else []
    if 1 + g.heap_off_size + g.heap_len_size <= g.id_len:
        kinds.append(st.builds(fh.ManagedId, uint(g.heap_off_size), uint(g.heap_len_size)))
    if g.huge_direct:
        extra = {"filter_mask": uint(4), "memory_size": uint(s.length)} if g.filtered else {}
        kinds.append(st.builds(fh.HugeId, st.none(), address(s), uint(s.length), **extra))
    else:
        kinds.append(st.builds(fh.HugeId, uint(g.huge_id_size)))
    hid = data.draw(st.one_of(kinds))
    roundtrip(hid, lambda r: fh.encode_id(r, g), lambda b: fh.decode_id(b, g, "t"))
    assert len(fh.encode_id(hid, g)) == g.id_len


@st.composite
def fixed_array_headers(draw):
    s = draw(SIZES)
    h = fa.FixedArrayHeader(0, draw(st.sampled_from([0, 1])), draw(st.sampled_from([0, 1])),
                            draw(st.integers(1, 24)), draw(st.integers(0, 8)), draw(st.integers(0, 700)),
                            draw(address(s)))
    return s, h


@HYP
@given(fixed_array_headers(), st.data())
def test_fixed_array_encoders(case, data):
    s, h = case
    roundtrip(h, lambda r: fa.encode_header(r, s), lambda b: fa.decode_header(b, 0, s, "t"))
    if h.paged:
        db = fa.FixedArrayDataBlock(64, data.draw(exactly((h.npages + 7) // 8)), b"")
    else:
        db = fa.FixedArrayDataBlock(64, b"", data.draw(exactly(h.nelmts * h.element_size)))
    roundtrip(db, lambda r: fa.encode_dblock(r, h, s), lambda b: fa.decode_dblock(b, h, s, 64, "t"))
    roundtrip(data.draw(st.binary(max_size=300)), fa.encode_page, lambda b: fa.decode_page(b, "t"))


@HYP
@given(SIZES, st.booleans(), st.integers(1, 8), st.data())
def test_chunk_element_encoders(s, filtered, width, data):
    el = data.draw(st.builds(fa.ChunkElement, address(s), uint(width), uint(4)) if filtered else
                   st.builds(fa.ChunkElement, address(s)))
    roundtrip(el, fa.chunk_element_encoder(s, filtered, width), fa.chunk_element_decoder(s, filtered, width))


@st.composite
def extensible_array_headers(draw):
    s = draw(SIZES)
    L = uint(s.length)
    bits = draw(st.integers(1, 64))
    h = ea.ExtensibleArrayHeader(
        0, draw(st.sampled_from([0, 1])), draw(st.sampled_from([0, 1])), draw(st.integers(1, 24)), bits,
        draw(st.integers(0, 40)), 1 << draw(st.integers(0, min(bits, 7))), 1 << draw(st.integers(1, 6)),
        draw(st.integers(0, bits)), draw(L), draw(L), draw(L), draw(L), draw(L), draw(L), draw(address(s)))
    return s, h


@HYP
@given(extensible_array_headers(), st.data())
def test_extensible_array_encoders(case, data):
    s, h = case
    roundtrip(h, lambda r: ea.encode_header(r, s), lambda b: ea.decode_header(b, 0, s, "t"))
    addrs = lambda n: tuple(data.draw(address(s)) for _ in range(n))  # noqa: E731
    nd, ns = data.draw(st.integers(0, 6)), data.draw(st.integers(0, 6))
    ib = ea.IndexBlock(h.iblock_address, data.draw(exactly(h.idx_blk_elmts * h.element_size)), addrs(nd), addrs(ns))
    roundtrip(ib, lambda r: ea.encode_index_block(r, h, s), lambda b: ea.decode_index_block(b, h, s, nd, ns, "t"))
    offset = uint(h.block_offset_size)
    bitmap = data.draw(st.binary(max_size=8))
    sb = ea.SuperBlock(128, data.draw(offset), bitmap, addrs(nd))
    roundtrip(sb, lambda r: ea.encode_super_block(r, h, s),
              lambda b: ea.decode_super_block(b, h, s, 128, len(bitmap), nd, "t"))
    nelmts = data.draw(st.integers(0, 20))
    db = ea.DataBlock(256, data.draw(offset), data.draw(exactly(nelmts * h.element_size)))
    roundtrip(db, lambda r: ea.encode_data_block(r, h, s), lambda b: ea.decode_data_block(b, h, s, 256, nelmts, "t"))


# -- selections and mapping blocks --


@st.composite
def selections(draw, rank=None):
    r = rank or draw(st.integers(1, 4))
    kind = draw(st.sampled_from(["all", "none", "points", "regular", "irregular", "auto"]))
    if kind in ("all", "none"):
        return S.Selection(kind, version=1)
    if kind == "points":
        version = draw(st.sampled_from([1, 2]))
        width = 4 if version == 1 else draw(st.sampled_from([2, 4, 8]))
        n = draw(st.integers(0, 6))
        top = min((1 << (8 * width)) - 1, (1 << 63) - 1)
        pts = np.array(draw(st.lists(st.integers(0, top), min_size=n * r, max_size=n * r)), dtype=np.int64)
        return S.Selection("points", r, points=pts.reshape(n, r), version=version, width=width)
    if kind == "irregular":
        version = draw(st.sampled_from([1, 2, 3]))
        width = {1: 4, 2: 8}.get(version) or draw(st.sampled_from([2, 4, 8]))
        n = draw(st.integers(0, 4))
        top = min((1 << (8 * width)) - 1, (1 << 63) - 1)
        corners = [sorted(draw(st.lists(st.integers(0, top), min_size=2, max_size=2))) for _ in range(n * r)]
        blocks = np.array(corners, dtype=np.int64).reshape(n, r, 2).transpose(0, 2, 1)
        return S.Selection("hyperslab", r, blocks=np.ascontiguousarray(blocks), version=version, width=width)
    version = draw(st.sampled_from([2, 3]))
    width = 8 if version == 2 else draw(st.sampled_from([2, 4, 8]))
    if kind == "auto":
        version, width = None, None
    top = (1 << (8 * (width or 2))) - 2
    unlimited = draw(st.sampled_from([None] + list(range(r))))
    dims = []
    for d in range(r):
        stride = draw(st.integers(1, top))
        block = draw(st.integers(0, stride))
        count = draw(st.integers(0, top))
        if d == unlimited:
            count, block = (None, block) if draw(st.booleans()) else (count, None)
        dims.append((draw(st.integers(0, top)), stride, count, block))
    regular = tuple(tuple(v) for v in zip(*dims))
    return S.Selection("hyperslab", r, regular=regular, version=version, width=width)


def encode_selection(sel: S.Selection) -> bytes:
    w = Writer()
    S.encode(w, sel)
    return w.getvalue()


@HYP
@given(selections())
def test_selection_encoder(sel):
    raw = encode_selection(sel)
    back = S.decode(Reader(raw, 0, Sizes(), "t"))
    if sel.version is None:   # chosen by the encoder: the smallest width holding every value
        assert back.version == 3 and back.width in (2, 4, 8)
        sel = replace(sel, version=back.version, width=back.width)
    assert back == sel
    assert encode_selection(back) == raw


@st.composite
def mapping_blocks(draw):
    s = draw(SIZES)
    version = draw(st.sampled_from([0, 1]))
    names = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=8)
    entries = []
    for i in range(draw(st.integers(0, 4))):
        flags = draw(st.sampled_from([0, vds_mapping.SAME_FILE, vds_mapping.FILE_SHARED, vds_mapping.DSET_SHARED,
                                      vds_mapping.SAME_FILE | vds_mapping.DSET_SHARED])) if version else 0
        if not i:
            flags &= vds_mapping.SAME_FILE
        file_index = draw(st.integers(0, i - 1)) if flags & vds_mapping.FILE_SHARED else None
        dset_index = draw(st.integers(0, i - 1)) if flags & vds_mapping.DSET_SHARED else None
        source_file = "." if flags & vds_mapping.SAME_FILE else \
            entries[file_index].source_file if file_index is not None else draw(names)
        source_dataset = entries[dset_index].source_dataset if dset_index is not None else draw(names)
        rank = draw(st.integers(1, 3))
        sels = [draw(selections(rank).filter(lambda x: x.version is not None)) for _ in range(2)]
        entries.append(vds_mapping.Mapping(source_file, source_dataset, *sels, flags, file_index, dset_index))
    return s, vds_mapping.MappingBlock(version, tuple(entries))


@HYP
@given(mapping_blocks())
def test_mapping_block_encoder(case):
    s, block = case
    roundtrip(block, lambda r: vds_mapping.encode(r, s), lambda b: vds_mapping.decode(b, s))
