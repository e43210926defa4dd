"""Structured chunk structures, byte for byte: vectors assembled by hand from the spec 3.0 tables
(and the RFC's, where it is the later decision), decoded and re-encoded; section 0's dataspace
encoding checked against libhdf5's own H5Sencode/H5Sdecode (through h5py)."""

from __future__ import annotations

import struct

import h5py
import numpy as np
import pytest

from h5fs.errors import FormatError, Unsupported
from h5fs.format import btree_v2 as bt
from h5fs.format import dataspace_encoding as E
from h5fs.format import selection as S
from h5fs.format.checksum import lookup3
from h5fs.format.codec import Reader, Sizes, Writer
from h5fs.format.fixed_array import ChunkElement, chunk_element_decoder, chunk_element_encoder
from h5fs.format.messages import filter_pipeline as FP
from h5fs.format.messages import layout as L
from h5fs.format.structured_chunk import Composition, SectionMeta, join, seal, split, unseal
from h5fs.format.messages.filter_pipeline import FilterPipeline, FilterSpec
from h5fs.storage.sparse_chunk import SparseCodec
from h5fs.storage.sparse_selection import positions, smallest

SIZES = Sizes(8, 8)
ADDR = 0x1234
COMP = Composition(8, 2, (0,))


def u(fmt: str, *v) -> bytes:
    return struct.pack("<" + fmt, *v)


def roundtrip_layout(raw: bytes) -> L.DataLayout:
    lay = L.decode(Reader(raw, 0, SIZES))
    w = Writer(SIZES)
    L.encode(w, lay)
    assert w.getvalue() == raw
    return lay


# -- data layout message, version 5, class 4 ---------------------------------------------------

def _head(flags: int = 0) -> bytes:
    # version 5, class 4 | property version 0, sparse type (bit 0) | flags, 3 dims of 1 byte: 10 x 20, 4-byte elements
    return u("BB", 5, 4) + u("BH", 0, 1) + u("BBB", flags, 3, 1) + bytes([10, 20, 4])


COMPOSITION = u("BBBB", 8, 2, 1, 0)   # offset size 8, 2 sections, 1 with metadata: section 0


def test_layout_fixed_array_in_the_rfc_order():
    raw = _head() + COMPOSITION + u("B", 3) + u("B", 10) + u("Q", ADDR)
    lay = roundtrip_layout(raw)
    assert (lay.layout_class, lay.chunk_dims, lay.element_size) == (L.STRUCTURED, (10, 20), 4)
    assert lay.composition == COMP and lay.structured_type == 1 and not lay.spec_order
    assert (lay.index.index_type, lay.index.page_bits, lay.index.address) == (L.FIXED_ARRAY, 10, ADDR)


def test_layout_in_the_spec_order_reads_and_keeps_its_order():
    raw = _head() + u("B", 4) + bytes([32, 4, 4, 16, 10]) + u("Q", ADDR) + COMPOSITION
    lay = roundtrip_layout(raw)
    assert lay.spec_order and lay.composition == COMP
    assert (lay.index.index_type, lay.index.max_bits, lay.index.min_elements) == (L.EXTENSIBLE_ARRAY, 32, 16)


def test_layout_btree_v2_and_undefined_address():
    raw = _head() + COMPOSITION + u("B", 5) + u("IBB", 2048, 100, 40) + b"\xff" * 8
    lay = roundtrip_layout(raw)
    assert (lay.index.node_size, lay.index.split_percent, lay.index.merge_percent) == (2048, 100, 40)
    assert lay.index.address is None


def test_layout_single_chunk_unfiltered_and_filtered():
    # chunk of 10*20*4 = 800 bytes: the size field is 1 + (log2(800) + 8) // 8 = 3 bytes wide
    raw = _head() + COMPOSITION + u("B", 1) + (500).to_bytes(3, "little") + u("Q", 120) + u("Q", ADDR)
    lay = roundtrip_layout(raw)
    assert lay.index.filtered_size == 500 and lay.index.sections == SectionMeta((120,))
    raw = (_head(L.SINGLE_INDEX_WITH_FILTER) + COMPOSITION + u("B", 1) + (300).to_bytes(3, "little")
           + u("Q", 40) + u("QQ", 140, 800) + u("II", 0, 2) + u("Q", ADDR))
    lay = roundtrip_layout(raw)
    assert lay.index.sections == SectionMeta((40,), (140, 800), (0, 2)) and lay.index.filtered_size == 300
    spec = (_head(L.SINGLE_INDEX_WITH_FILTER) + u("B", 1) + (300).to_bytes(3, "little")
            + u("Q", 40) + u("QQ", 140, 800) + u("II", 0, 2) + u("Q", ADDR) + COMPOSITION)
    lay = roundtrip_layout(spec)
    assert lay.spec_order and lay.index.sections == SectionMeta((40,), (140, 800), (0, 2))


def test_layout_single_chunk_padded_as_in_a_version_1_header():
    raw = _head() + COMPOSITION + u("B", 1) + (500).to_bytes(3, "little") + u("Q", 120) + u("Q", ADDR)
    lay = L.decode(Reader(raw + bytes(-len(raw) % 8), 0, SIZES))
    assert lay.index.filtered_size == 500 and lay.index.sections == SectionMeta((120,)) and lay.index.address == ADDR


@pytest.mark.parametrize("bad, error", [
    (_head() + COMPOSITION + u("B", 2) + u("Q", ADDR), Unsupported),          # implicit index
    (_head() + COMPOSITION + u("B", 0) + u("Q", ADDR), Unsupported),          # v1 B-tree
    (u("BB", 5, 4) + u("BH", 1, 1) + u("BBB", 0, 3, 1) + bytes([10, 20, 4]) + COMPOSITION + u("BB", 3, 10)
     + u("Q", ADDR), Unsupported),                                            # property version 1
    (_head() + u("BBBB", 8, 2, 1, 5) + u("BB", 3, 10) + u("Q", ADDR), FormatError),  # metadata section 5 of 2
    (_head() + COMPOSITION + u("B", 3), FormatError),                         # truncated
])
def test_layout_refusals(bad, error):
    with pytest.raises(error):
        L.decode(Reader(bad, 0, SIZES))


# -- filter pipeline message, version 3 --------------------------------------------------------

def test_filter_pipeline_version_3():
    deflate1 = u("HHH", 1, 1, 1) + u("I", 1)                   # deflate, optional, level 1
    shuffle = u("HHH", 2, 1, 1) + u("I", 4)
    deflate4 = u("HHH", 1, 1, 1) + u("I", 4)
    named = u("HHHH", 32015, 5, 1, 1) + b"zstd\0" + u("I", 3)   # id >= 256: name stored, unpadded
    raw = (u("BB", 3, 2) + u("BBH", 0, 1, len(deflate1)) + deflate1
           + u("BBH", 1, 3, len(shuffle + deflate4 + named)) + shuffle + deflate4 + named)
    pipe = FP.decode(Reader(raw, 0, SIZES))
    assert pipe.version == 3 and pipe.filters == ()
    assert [f.id for f in pipe.section(0)] == [1] and [f.id for f in pipe.section(1)] == [2, 1, 32015]
    assert pipe.section(1)[2].name == "zstd" and pipe.section(2) == ()
    w = Writer(SIZES)
    FP.encode(w, pipe)
    assert w.getvalue() == raw
    with pytest.raises(FormatError):   # a section's list overruns the message
        FP.decode(Reader(raw[:8], 0, SIZES))


# -- index records -----------------------------------------------------------------------------

def test_array_elements_of_structured_clients():
    unfiltered = u("Q", ADDR) + (700).to_bytes(3, "little") + u("Q", 96)
    dec = chunk_element_decoder(SIZES, False, 3, COMP)
    el = dec(unfiltered)
    assert el == ChunkElement(ADDR, 700, 0, SectionMeta((96,)))
    assert chunk_element_encoder(SIZES, False, 3, COMP)(el) == unfiltered
    filtered = u("Q", ADDR) + (300).to_bytes(3, "little") + u("Q", 40) + u("QQ", 140, 800) + u("II", 0, 1)
    el = chunk_element_decoder(SIZES, True, 3, COMP)(filtered)
    assert el.sections == SectionMeta((40,), (140, 800), (0, 1)) and el.size == 300
    assert chunk_element_encoder(SIZES, True, 3, COMP)(el) == filtered
    # a slot without a chunk: the undefined address, zeros
    assert chunk_element_encoder(SIZES, True, 3, COMP)(ChunkElement(None)) == b"\xff" * 8 + bytes(3 + 8 + 16 + 8)


def test_btree_v2_records_of_types_12_and_13():
    rec12 = u("Q", ADDR) + (700).to_bytes(3, "little") + u("QQ", 2, 5) + u("Q", 96)
    r = Reader(rec12, 0, SIZES)
    got = bt.record_decoder(bt.STRUCTURED, 2, 3, COMP)(r)
    assert got == bt.ChunkRecordV2(ADDR, (2, 5), 700, 0, SectionMeta((96,)))
    w = Writer(SIZES)
    bt.record_encoder(bt.STRUCTURED, 2, 3, COMP)(w, got)
    assert w.getvalue() == rec12
    assert bt.chunk_record_size(SIZES, 2, False, 3, COMP) == len(rec12)
    rec13 = u("Q", ADDR) + (300).to_bytes(3, "little") + u("QQ", 2, 5) + u("Q", 40) + u("QQ", 140, 800) + u("II", 0, 1)
    got = bt.record_decoder(bt.STRUCTURED_FILTERED, 2, 3, COMP)(Reader(rec13, 0, SIZES))
    assert got.sections == SectionMeta((40,), (140, 800), (0, 1)) and got.scaled == (2, 5)
    w = Writer(SIZES)
    bt.record_encoder(bt.STRUCTURED_FILTERED, 2, 3, COMP)(w, got)
    assert w.getvalue() == rec13


def test_composition_of_four_byte_offsets_reads():
    comp = Composition(4, 2, (0,))
    raw = u("Q", ADDR) + (700).to_bytes(3, "little") + u("I", 96)
    assert chunk_element_decoder(SIZES, False, 3, comp)(raw).sections == SectionMeta((96,))


# -- the structured chunk's sections (Appendix E) ------------------------------------------------

def test_sections_split_join_and_checksums():
    body = b"selection bytes"
    sealed = seal(body)
    assert sealed == body + u("I", lookup3(body))
    data, offsets = join([sealed, b"values!!"])
    assert offsets == (len(sealed),)
    parts = split(data, SectionMeta(offsets), "t")
    assert bytes(unseal(parts[0], "t")) == body and bytes(parts[1]) == b"values!!"
    broken = bytearray(data)
    broken[3] ^= 1
    with pytest.raises(FormatError, match="checksum"):
        unseal(split(bytes(broken), SectionMeta(offsets), "t")[0], "t")
    with pytest.raises(FormatError):
        split(data, SectionMeta((len(data) + 1,)), "t")


# -- section 0: the H5Sencode description, against libhdf5 -------------------------------------

def _libhdf5_positions(buf: bytes, chunk) -> np.ndarray:
    space = h5py.h5s.decode(buf)
    assert space.shape == chunk
    mask = np.zeros(chunk, bool)
    kind = space.get_select_type()
    if kind == h5py.h5s.SEL_ALL:
        mask[...] = True
    elif kind == h5py.h5s.SEL_POINTS:
        for p in space.get_select_elem_pointlist():
            mask[tuple(p)] = True
    elif kind == h5py.h5s.SEL_HYPERSLABS:
        for lo, hi in space.get_select_hyper_blocklist():
            mask[tuple(slice(a, b + 1) for a, b in zip(lo, hi))] = True
    return np.flatnonzero(mask)


@pytest.mark.parametrize("case", ["none", "all", "points", "regular", "irregular", "strided"])
def test_section_zero_reads_in_libhdf5_as_written(case):
    chunk = (6, 9)
    mask = np.zeros(chunk, bool)
    if case == "all":
        mask[...] = True
    elif case == "points":
        mask[1, 2] = mask[4, 7] = mask[5, 0] = True
    elif case == "regular":
        mask[1:4, 2:8] = True
    elif case == "irregular":
        mask[0:2, 0:4] = mask[3:6, 5:9] = mask[2, :] = True
    elif case == "strided":
        mask[0::2, 1::3] = True
    pos = np.flatnonzero(mask)
    sel = smallest(pos, chunk)
    expect = {"none": "none", "all": "all", "points": "points", "regular": "hyperslab",
              "irregular": "hyperslab", "strided": "hyperslab"}[case]
    assert sel.kind == expect
    if case in ("regular", "strided"):
        assert sel.regular is not None
    buf = E.encode(chunk, sel)
    if case != "none":   # libhdf5 decodes a none selection without its extent's shape: compared below
        assert np.array_equal(_libhdf5_positions(buf, chunk), pos)
    assert np.array_equal(positions(E.decode(buf, "t").selection, chunk, "t"), pos)


def test_libhdf5_encodings_read_here():
    chunk = (10, 20)
    space = h5py.h5s.create_simple(chunk)
    for select in (lambda s: s.select_all(), lambda s: s.select_none(),
                   lambda s: s.select_elements(np.array([[1, 2], [9, 19], [0, 0]])),
                   lambda s: s.select_hyperslab((0, 0), (2, 3), (4, 5), (1, 2))):
        select(space)
        buf = space.encode()
        enc = E.decode(buf, "libhdf5")
        assert enc.extent is not None and enc.extent.dims == chunk
        assert np.array_equal(positions(enc.selection, chunk, "t"), _libhdf5_positions(buf, chunk)
                              if space.get_select_type() != h5py.h5s.SEL_NONE else np.zeros(0, np.int64))


def test_bare_selection_reads_too():
    w = Writer()
    S.encode(w, S.Selection("points", 2, points=np.array([[1, 1], [0, 3]])))
    enc = E.decode(w.getvalue(), "bare")
    assert enc.extent is None and np.array_equal(positions(enc.selection, (4, 4), "t"), [3, 5])


@pytest.mark.parametrize("seed", range(40))
def test_smallest_selection_round_trips(seed):
    rng = np.random.default_rng(seed)
    chunk = tuple(int(x) for x in rng.integers(1, 12, size=int(rng.integers(1, 4))))
    mask = rng.random(chunk) < rng.choice([0.02, 0.3, 0.9])
    if seed % 3 == 0:
        mask[...] = False
        mask[tuple(slice(int(a), int(a) + int(b)) for a, b in zip(rng.integers(0, 3, len(chunk)),
                                                              rng.integers(1, 5, len(chunk))))] = True
    pos = np.flatnonzero(mask)
    sel = smallest(pos, chunk)
    assert np.array_equal(positions(sel, chunk, "t"), pos)
    sizes = []
    for other in (S.Selection("points", len(chunk), points=np.stack(np.unravel_index(pos, chunk), 1)),):
        w = Writer()
        S.encode(w, other)
        sizes.append(len(w.getvalue()))
    w = Writer()
    S.encode(w, sel)
    assert len(pos) == 0 or len(w.getvalue()) <= min(sizes)


# -- a whole sparse chunk ----------------------------------------------------------------------

@pytest.mark.parametrize("filtered", [False, True])
def test_sparse_chunk_round_trip(filtered):
    pipe = FilterPipeline((), 3, ((0, (FilterSpec(1, 1, "", (1,)),)),
                                  (1, (FilterSpec(2, 1, "", (4,)), FilterSpec(1, 1, "", (4,)))))) if filtered else None
    codec = SparseCodec((8, 8), 4, COMP, 1, pipe, np.float32(-1).tobytes(), "t", False)
    dense = np.full((8, 8), -1, np.float32)
    dense[2, 3], dense[7, 7], dense[0, 0] = 1.5, 2.5, 3.5
    data, meta = codec.encode(dense.tobytes(), False, "t")
    assert (meta.sizes is not None) == filtered
    pos, values = codec.decode(data, meta, False, "t")
    assert list(pos) == [0, 19, 63] and np.frombuffer(values, np.float32).tolist() == [3.5, 1.5, 2.5]
    assert codec.dense(pos, values) == dense.tobytes()
    assert codec.encode(np.full((8, 8), -1, np.float32).tobytes(), False, "t") is None
    if not filtered:
        broken = bytearray(data)
        broken[0] ^= 0xFF
        with pytest.raises(FormatError):
            codec.decode(bytes(broken), meta, False, "t")
