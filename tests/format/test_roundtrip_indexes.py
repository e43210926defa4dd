"""Lossless round trips of the index and heap structures: v2 B-trees (every record type libhdf5
writes), fractal heaps (blocks and heap IDs), fixed and extensible arrays (blocks, pages,
elements), VDS mapping blocks and dataspace selections.

Against libhdf5: files written by h5py, each structure found through h5fs's engine, its bytes
read from the file, decoded and encoded again: the bytes are equal, checksums included; one
field changed survives encode -> decode. Against themselves: Hypothesis strategies of valid
records encode, decode back to the record, and encode again to the same bytes.
"""

from __future__ import annotations

from dataclasses import replace

import h5py
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from roundtrip_support import (HYP, SIZES, address, addresses, btree_records, check, check_all, chunk_index,
                               chunked_datasets, dense_file, encoded, exactly, new_file, roundtrip, select,
                               shared_messages_fcpl, sohm_table, structures, uint, vds_file, vds_mappings, with_sizes)

from h5fs.format import btree_v2 as bt
from h5fs.format import extensible_array as ea
from h5fs.format import fixed_array as fa
from h5fs.format import fractal_heap as fh
from h5fs.format import selection as S
from h5fs.format import vds_mapping
from h5fs.format.checksum import lookup3
from h5fs.format.codec import Reader, Sizes
from h5fs.format.messages import layout as L
from h5fs.model.file import H5File
from h5fs.storage.fractal_heap.reader import FractalHeap
from h5fs.storage.index import IndexContext, open_index


def checked_kinds(found) -> set[tuple]:
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


@pytest.mark.parametrize("sizes", [(8, 8), (4, 4), (2, 4), (2, 8)])
def test_dense_groups_and_attributes(tmp_path, sizes):
    p = tmp_path / "dense.h5"
    dense_file(p, sizes)
    seen = checked_kinds(structures(p))
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
        seen = checked_kinds(sohm_table(hf))
        assert {k[1] for k in seen if k[0] == "btree"} == {bt.SOHM}
        heap = FractalHeap(hf.reader, index.heap_address)
        recs = btree_records(hf.reader, index.index_address)
        assert recs and all(r.location == 0 for r in recs)
        # each record's hash is lookup3 of the message its heap ID names, seeded with its type
        # (dataspace, datatype, fill value, filter pipeline or attribute)
        assert all(any(r.hash == lookup3(heap.get(r.heap_id), t) for t in (1, 3, 5, 11, 12)) for r in recs)
    assert {("sohm table",), ("heap id", "TinyId", None), ("heap id", "ManagedId", None)} <= seen


# -- virtual dataset mappings and region references: selections in the global heap --------------


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
            assert encoded(S.encode, sel, s) == blob[s.offset:]
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
@given(with_sizes(record_cases))
def test_btree_record_encoders(case):
    s, (btype, rec, encode, decode) = case
    roundtrip(rec, lambda r: encoded(encode, r, s), lambda b: decode(Reader(b, 0, s, "t")))
    # packed into a node's records at a record size with room to spare
    size = len(encoded(encode, rec, s)) + 3
    hdr = bt.BTreeV2Header(0, 0, btype, 4096, size, 0, 100, 40, 1, 1, 1, s, 1, bt._levels(4096, size, 0, s, "t")[1])
    raw = bt.encode_records(hdr, encode, [rec, rec])
    assert bt.decode_records(hdr, bt.Node(0, 0, raw, ()), decode, "t") == [rec, rec]


@st.composite
def heap_header(draw, s: Sizes):
    """A valid heap header (its geometry derives without error)."""
    L = uint(s.length)
    width = 1 << draw(st.integers(0, 2))
    start_bits = draw(st.integers(6, 12))
    max_direct_bits = draw(st.integers(start_bits, min(16, 8 * s.length - 1)))
    first_row_bits = start_bits + width.bit_length() - 1
    max_heap_bits = draw(st.integers(max(max_direct_bits + 1, first_row_bits), 64))
    max_root_rows = max_heap_bits - first_row_bits + 1
    filter_info = draw(st.sampled_from([b"", bytes(range(16))]))
    return fh.FractalHeapHeader(
        0, draw(st.integers(5, 40)), len(filter_info), draw(st.integers(0, 3)), draw(uint(4)), draw(L),
        draw(address(s)), draw(L), draw(address(s)), draw(L), draw(L), draw(L), draw(L), draw(L), draw(L), draw(L),
        draw(L), width, 1 << start_bits, 1 << max_direct_bits, max_heap_bits, draw(st.integers(0, max_root_rows)),
        draw(address(s)), draw(st.integers(0, max_root_rows)), draw(L) if filter_info else 0,
        draw(uint(4)) if filter_info else 0, filter_info)


@HYP
@given(with_sizes(heap_header))
def test_heap_header_encoder(case):
    s, h = case
    roundtrip(h, lambda r: fh.encode_header(r, s), lambda b: fh.decode_header(b, 0, s, "t"))


@HYP
@given(with_sizes(heap_header), st.data())
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
@given(with_sizes(heap_header), st.data())
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
def fixed_array_header(draw, s: Sizes):
    return fa.FixedArrayHeader(0, draw(st.sampled_from([0, 1])), draw(st.sampled_from([0, 1])),
                               draw(st.integers(1, 24)), draw(st.integers(0, 8)), draw(st.integers(0, 700)),
                               draw(address(s)))


@HYP
@given(with_sizes(fixed_array_header), st.data())
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
def extensible_array_header(draw, s: Sizes):
    L = uint(s.length)
    bits = draw(st.integers(1, 64))
    return ea.ExtensibleArrayHeader(
        0, draw(st.sampled_from([0, 1])), draw(st.sampled_from([0, 1])), draw(st.integers(1, 24)), bits,
        draw(st.integers(0, 40)), 1 << draw(st.integers(0, min(bits, 7))), 1 << draw(st.integers(1, 6)),
        draw(st.integers(0, bits)), draw(L), draw(L), draw(L), draw(L), draw(L), draw(L), draw(address(s)))


@HYP
@given(with_sizes(extensible_array_header), st.data())
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


@HYP
@given(selections())
def test_selection_encoder(sel):
    raw = encoded(S.encode, sel)
    back = S.decode(Reader(raw, 0, Sizes(), "t"))
    if sel.version is None:   # chosen by the encoder: the smallest width holding every value
        assert back.version == 3 and back.width in (2, 4, 8)
        sel = replace(sel, version=back.version, width=back.width)
    assert back == sel
    assert encoded(S.encode, back) == raw


@st.composite
def mapping_block(draw, s: Sizes):
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
    return vds_mapping.MappingBlock(version, tuple(entries))


@HYP
@given(with_sizes(mapping_block))
def test_mapping_block_encoder(case):
    s, block = case
    roundtrip(block, lambda r: vds_mapping.encode(r, s), lambda b: vds_mapping.decode(b, s))
