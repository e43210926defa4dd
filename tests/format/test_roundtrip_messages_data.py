"""Lossless round trips of the messages that describe a dataset's data: datatype (every class,
message versions 1-5, also inside attribute messages and committed datatypes), dataspace
(versions 1-2), data layout (versions 3-5: compact, contiguous, every chunk index, virtual),
filter pipeline (versions 1-2), fill value (old message, versions 2-3) and external data files.

Against libhdf5: files h5py writes (earliest/v110/v114/latest bounds, 2-, 4- and 8-byte offsets
and lengths), every instance the whole-file walk finds through h5fs's engine (object headers,
the datatype and dataspace inside attribute messages, dense attribute heaps, the SOHM heap; every
other structure of those files is checked too), decoded and encoded again: the bytes are
equal (a version-1 object header pads each message to 8 bytes: the encoding is a prefix and the
rest zeros); one field changed survives encode -> decode. Against themselves: Hypothesis
strategies of valid records (layout versions 1-2 and fill value version 1, which libhdf5 no longer
writes, included) encode, decode back to the record, and encode again to the same bytes.
"""

from __future__ import annotations

import ctypes

import h5py
import hdf5plugin
import numpy as np
import pytest
from h5py import h5t
from hypothesis import given
from hypothesis import strategies as st
from roundtrip_support import (FILE_SIZES, HID, HYP, PLAIN, SIZES, address, bfloat16, c_call, check_encoder, checked,
                               codec, custom_float, libhdf5, names, new_file, objects, opaque, partial_int, py,
                               sohm_fcpl, text, uint, vax_float)

from h5fs.format.codec import Sizes
from h5fs.format.messages import dataspace as S
from h5fs.format.messages import datatype as D
from h5fs.format.messages import external_files as E
from h5fs.format.messages import fill_value as F
from h5fs.format.messages import filter_pipeline as P
from h5fs.format.messages import layout as L
from h5fs.model import messages as M
from h5fs.model.file import H5File
from h5fs.storage.btree_v2 import reader as bt
from h5fs.storage.index.extensible_array import reader as ea
from h5fs.storage.index import fixed_array as fa


# -- files: every variant libhdf5 writes -------------------------------------------------------

def revised_reference() -> h5t.TypeID:
    """H5T_STD_REF (a revised reference, datatype message version 4), which h5py does not wrap."""
    copy = getattr(libhdf5(), "H5Tcopy")
    copy.argtypes, copy.restype = [HID], HID
    return h5py.h5i.wrap_identifier(copy(HID.in_dll(libhdf5(), "H5T_STD_REF_g").value))


def padded_int() -> h5t.TypeID:
    t = partial_int(4, 20, 6)
    t.set_pad(h5t.PAD_ONE, h5t.PAD_ONE)
    return t


BIG = np.dtype({"names": ["a", "b"], "formats": ["<i4", "<f8"], "offsets": [0, 300], "itemsize": 308})
TYPES = {label: factory for label, factory, _ in PLAIN} | {
    "vax": vax_float, "custom float": custom_float, "bfloat16": bfloat16, "padded int": padded_int,
    "time 32 BE": lambda: h5t.UNIX_D32BE, "time 64": lambda: h5t.UNIX_D64LE, "revised reference": revised_reference,
    "opaque empty tag": lambda: opaque(2, b""), "big compound": lambda: py(BIG),
    "compound vstr": lambda: py(np.dtype([("n", "<i4"), ("s", h5py.string_dtype())])),
    "bool": lambda: py(np.dtype("?")), "array 3d": lambda: py(np.dtype((">u2", (2, 1, 3)))),
}


def add_types(f: h5py.File) -> None:
    """A dataset of every datatype with an attribute of it; committed datatypes, used by both."""
    for i, (label, factory) in enumerate(TYPES.items()):
        tid = factory()
        ds = h5py.h5d.create(f.id, f"t{i:02d} {label}".encode(), tid, h5py.h5s.create_simple((2,)))
        h5py.h5a.create(ds, label.encode(), tid, h5py.h5s.create(h5py.h5s.SCALAR))
    f["committed"] = np.dtype([("x", "<i2"), ("y", ">f8", (2,))])
    f["committed enum"] = h5py.enum_dtype({"A": 1, "B": 2}, basetype="i2")
    f.create_dataset("typed", (3,), dtype=f["committed"]).attrs.create("typed", 1, dtype=f["committed enum"])


def add_spaces(f: h5py.File, unlimited: bool) -> None:
    g = f.create_group("spaces")
    g["scalar"] = 1.5
    g.create_dataset("null", data=h5py.Empty("<i4"))
    g.create_dataset("empty", (0, 3), "u1")
    g.create_dataset("fixed", (3, 4), "u1")
    g.attrs["scalar"] = 5
    g.attrs["null"] = h5py.Empty("<f4")
    g.attrs["simple"] = np.arange(6).reshape(2, 3)
    if unlimited:
        g.create_dataset("grow", (2, 3, 4), "u1", maxshape=(5, None, 4), chunks=(1, 1, 4))


def dcpl(chunks=None, alloc=None, fill_time=None, layout=None):
    plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    if chunks:
        plist.set_chunk(chunks)
    if alloc is not None:
        plist.set_alloc_time(alloc)
    if fill_time is not None:
        plist.set_fill_time(fill_time)
    if layout is not None:
        plist.set_layout(layout)
    return plist


def add_layouts(f: h5py.File, unlimited: bool) -> None:
    g = f.create_group("layouts")
    g.create_dataset("compact", data=np.arange(6, dtype="<i2"), dcpl=dcpl(layout=h5py.h5d.COMPACT))
    g.create_dataset("contiguous", data=np.arange(6, dtype="<i2"))
    g.create_dataset("unallocated", (6,), "<i2")
    g.create_dataset("early", (6,), "<i2", dcpl=dcpl(alloc=h5py.h5d.ALLOC_TIME_EARLY))
    g.create_dataset("single", data=np.arange(12, dtype="<i4").reshape(3, 4), chunks=(3, 4))
    g.create_dataset("single filtered", data=np.arange(12, dtype="<i4").reshape(3, 4), chunks=(3, 4),
                     compression="gzip")
    g.create_dataset("fixed array", data=np.arange(40, dtype="<i4").reshape(4, 10), chunks=(2, 3),
                     compression="gzip")
    g.create_dataset("implicit", (6, 6), "<i4", dcpl=dcpl((2, 3), h5py.h5d.ALLOC_TIME_EARLY))
    g.create_dataset("wide dims", (70000,), "u1", chunks=(70000,))           # 3-byte dimension sizes
    g.create_dataset("wide element", (2,), np.dtype(("u1", (300,))), chunks=(1,))
    partial = dcpl((4,))
    c_call("H5Pset_chunk_opts", partial.id, 0x0002)                  # H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS
    c_call("H5Pset_deflate", partial.id, 1)
    g.create_dataset("partial", data=np.arange(10, dtype="<i4"), dcpl=partial)
    g.create_dataset("external", (10,), "<i4", external=[("ext1.bin", 0, 16), ("ext2.bin", 8, h5py.h5f.UNLIMITED)])
    if unlimited:
        g.create_dataset("extensible array", data=np.arange(10, dtype="<i4"), chunks=(3,), maxshape=(None,),
                         compression="gzip")
        g.create_dataset("btree v2", data=np.arange(12, dtype="<i4").reshape(3, 4), chunks=(2, 2),
                         maxshape=(None, None), compression="gzip")
    layout = h5py.VirtualLayout((2, 6), "<i2")
    layout[0] = h5py.VirtualSource(".", "/layouts/contiguous", shape=(6,))
    g.create_virtual_dataset("virtual", layout, fillvalue=-1)


def add_pipelines(f: h5py.File) -> None:
    g = f.create_group("filters")
    opts = {
        "gzip shuffle fletcher32": dict(compression="gzip", shuffle=True, fletcher32=True),
        "scaleoffset": dict(scaleoffset=3, dtype="<f4"),
        "lzf": dict(compression="lzf"), "szip": dict(compression="szip", compression_opts=("nn", 4)),
        "blosc": dict(**hdf5plugin.Blosc()), "zstd": dict(**hdf5plugin.Zstd()), "lz4": dict(**hdf5plugin.LZ4()),
        "bitshuffle": dict(**hdf5plugin.Bitshuffle()), "bzip2": dict(**hdf5plugin.BZip2()),
        "unregistered": dict(compression=40000, compression_opts=(1, 2, 3), allow_unknown_filter=True),
    }
    for name, kw in opts.items():
        g.create_dataset(name, (8,), kw.pop("dtype", "<i4"), chunks=(4,), **kw)
    mandatory = dcpl((4,))
    mandatory.set_filter(h5py.h5z.FILTER_DEFLATE, h5py.h5z.FLAG_MANDATORY, (5,))
    g.create_dataset("mandatory", (8,), "<i4", dcpl=mandatory)
    nbit = dcpl((4,))
    nbit.set_filter(h5py.h5z.FILTER_NBIT)
    g.create_dataset("nbit", (8,), "<i4", dcpl=nbit)


def add_fills(f: h5py.File) -> None:
    g = f.create_group("fills")
    g.create_dataset("value", (4,), "<i4", fillvalue=7)
    g.create_dataset("chunked value", (4,), "<f8", chunks=(2,), fillvalue=-1.5)
    undefined = dcpl()
    c_call("H5Pset_fill_value", undefined.id, h5t.NATIVE_INT32.id, None, types=[HID, HID, ctypes.c_void_p])
    g.create_dataset("undefined", (4,), "<i4", dcpl=undefined)
    for name, alloc, when in [("early never", h5py.h5d.ALLOC_TIME_EARLY, h5py.h5d.FILL_TIME_NEVER),
                              ("late alloc", h5py.h5d.ALLOC_TIME_LATE, h5py.h5d.FILL_TIME_ALLOC),
                              ("incremental", h5py.h5d.ALLOC_TIME_INCR, h5py.h5d.FILL_TIME_IFSET)]:
        g.create_dataset(name, (4,), "<i4", dcpl=dcpl((2,), alloc, when))


def build_types(path, libver: str, sizes) -> None:
    with new_file(path, libver, sizes) as f:
        add_types(f)


def build_storage(path, libver: str, sizes) -> None:
    # libhdf5 2.0 rejects 2-byte offsets for the unlimited datasets
    unlimited = sizes[0] > 2
    with new_file(path, libver, sizes) as f:
        add_spaces(f, unlimited)
        add_layouts(f, unlimited)
        add_pipelines(f)
        add_fills(f)


# -- what the tests cover -------------------------------------------------------------------

def variant(mtype: int, r) -> tuple:
    """What distinguishes the encodings of one message type (what the tests mean to cover)."""
    if mtype == M.DATATYPE:
        return tuple((t.class_id, t.version) for t in D.walk(r))
    if mtype == M.DATASPACE:
        return (r.version, r.kind, r.stores_maxdims, None in r.maxdims)
    if mtype == M.LAYOUT:
        return (r.version, r.layout_class, r.index and r.index.index_type, r.flags)
    if mtype == M.FILTERS:
        return (r.version,) + tuple((f.id, f.name, f.flags) for f in r.filters)
    if mtype == M.FILL:
        return (r.version, r.defined, r.value is not None, r.alloc_time, r.write_time)
    if mtype == M.EXTERNAL:
        return (len(r.slots),)
    return ()


def messages(path) -> list[tuple]:
    """Every structure of the file checked against libhdf5's bytes; the messages met: (structure,
    record)."""
    return [(s, record) for s, record in checked(path) if s.kind[0] == "message"]


def seen_variants(found) -> set[tuple]:
    """What kinds of messages there were."""
    return {(s.kind[1],) + variant(s.kind[1], record) for s, record in found}


def classes(seen: set[tuple]) -> set[tuple[int, int]]:
    """(class, version) of every datatype seen, nested ones included."""
    return {cv for s in seen if s[0] == M.DATATYPE for cv in s[1:]}


# -- against libhdf5 ---------------------------------------------------------------------------

LIBVER_PARAMS = pytest.mark.parametrize("libver", ["earliest", "v110", "v114", "latest"])


@pytest.mark.parametrize("sizes", FILE_SIZES)
@LIBVER_PARAMS
def test_datatypes_against_libhdf5(tmp_path, libver, sizes):
    p = tmp_path / "types.h5"
    build_types(p, libver, sizes)
    found = messages(p)
    seen = classes(seen_variants(found))
    # compound, enum, array (and variable-length sequences of them) take the version of the
    # format bounds: earliest 1 (2 with an array member), v110 3, v114 4, latest 5; revised
    # references need version 4, complex numbers 5; other classes stay at 1
    structured = {"earliest": 1, "v110": 3, "v114": 4, "latest": 5}[libver]
    assert {(cls, 1) for cls in (D.FIXED, D.FLOAT, D.TIME, D.STRING, D.BITFIELD, D.OPAQUE, D.REFERENCE, D.VLEN)} \
        | {(D.REFERENCE, 4), (D.COMPLEX, 5), (D.COMPOUND, structured), (D.ENUM, structured)} <= seen
    assert {(D.COMPOUND, 2), (D.ARRAY, 2)} <= seen if libver == "earliest" else \
        {(D.ARRAY, structured), (D.VLEN, structured)} <= seen
    where = {(s.kind[1], s.where) for s, _ in found}    # /typed's attribute: of a committed type
    assert {(M.DATATYPE, "/committed"), (M.DATATYPE, "/committed enum"), (M.DATASPACE, "/typed @typed"),
            (M.DATATYPE, f"/t00 {PLAIN[0][0]} @{PLAIN[0][0]}")} <= where


@pytest.mark.parametrize("sizes", FILE_SIZES)
@LIBVER_PARAMS
def test_storage_messages_against_libhdf5(tmp_path, libver, sizes):
    p = tmp_path / "storage.h5"
    build_storage(p, libver, sizes)
    seen = seen_variants(messages(p))
    old = libver == "earliest"
    unlimited = sizes[0] > 2
    space = 1 if old else 2          # a null extent needs version 2
    assert {(M.DATASPACE, space, S.SCALAR, False, False), (M.DATASPACE, space, S.SIMPLE, True, False),
            (M.DATASPACE, 2, S.NULL, False, False)} <= seen
    assert not unlimited or (M.DATASPACE, space, S.SIMPLE, True, True) in seen
    # layouts: version 3 for compact and contiguous data, chunked data every index type; with
    # chunk options or virtual data, version 4 even under the earliest bounds
    chunked = {s[1:] for s in seen if s[0] == M.LAYOUT and s[2] == L.CHUNKED}
    filtered = 5 if libver == "latest" else 4
    assert {(M.LAYOUT, 3, L.COMPACT, None, 0), (M.LAYOUT, 3, L.CONTIGUOUS, None, 0),
            (M.LAYOUT, 4, L.VIRTUAL, None, 0)} <= seen
    assert (filtered, L.CHUNKED, L.FIXED_ARRAY, L.DONT_FILTER_PARTIAL_BOUND_CHUNKS) in chunked
    if old:
        assert (3, L.CHUNKED, L.BTREE_V1, 0) in chunked
    else:
        assert {(4, L.CHUNKED, L.SINGLE, 0), (filtered, L.CHUNKED, L.SINGLE, L.SINGLE_INDEX_WITH_FILTER),
                (4, L.CHUNKED, L.IMPLICIT, 0), (filtered, L.CHUNKED, L.FIXED_ARRAY, 0)} <= chunked
        assert not unlimited or {(filtered, L.CHUNKED, L.EXTENSIBLE_ARRAY, 0),
                                 (filtered, L.CHUNKED, L.BTREE_V2, 0)} <= chunked
    # filter pipelines: version 1 names every filter, version 2 only ids >= 256 (mandatory and
    # optional filters; an unregistered one without a name)
    pipe = 1 if old else 2
    name = (lambda n: n) if old else (lambda n: "")
    assert {(32000, "lzf"), (40000, ""), (4, name("szip")), (5, name("nbit")), (6, name("scaleoffset"))} <= \
        {s[2][:2] for s in seen if s[0] == M.FILTERS}
    assert {(M.FILTERS, pipe, (1, name("deflate"), 0)),            # mandatory; optional ones
            (M.FILTERS, pipe, (2, name("shuffle"), 1), (1, name("deflate"), 1), (3, name("fletcher32"), 0))} <= seen
    # fill values: with and without a value, undefined, every allocation and write time
    late, ifset = F.ALLOC_LATE, F.WRITE_IF_SET
    assert {(M.FILL, 2 if old else 3, *v) for v in [
        (True, False, late, ifset), (True, True, late, ifset), (False, False, late, ifset),
        (True, False, F.ALLOC_EARLY, F.WRITE_NEVER), (True, False, late, F.WRITE_ON_ALLOC),
        (True, True, F.ALLOC_INCREMENTAL, ifset)]} <= seen
    assert (M.EXTERNAL, 2) in seen
    assert ((M.FILL_OLD,) in seen) == old       # the old message beside a value, for libhdf5 < 1.6
    assert check_index_parameters(p) == {L.FIXED_ARRAY} | ({L.EXTENSIBLE_ARRAY, L.BTREE_V2} if unlimited and not old
                                                         else set())
    with H5File.open(str(p)) as hf:             # dimension sizes: minimal widths, the element size too
        wide = [hf.resolve(f"/layouts/{name}").layout for name in ("wide dims", "wide element")]
        assert [lay.encoded_dim_width for lay in wide] == ([4, 4] if old else [3, 2])


def check_index_parameters(path) -> set[int]:
    """The index parameters of chunked layouts are those of the indexes libhdf5 built, and a
    filtered chunk's size field is as wide as `filtered_size_width` says. The index types seen."""
    seen = set()
    with H5File.open(str(path)) as hf:
        for _, obj in objects(hf):
            header = obj.header
            raw = header.first(M.LAYOUT)
            lay = raw and codec(M.LAYOUT, hf.sizes, whole=False)[0](raw.data)
            if not lay or lay.layout_class != L.CHUNKED or lay.index.address is None:
                continue
            info, filtered = lay.index, header.first(M.FILTERS) is not None
            seen.add(info.index_type)
            width = lay.filtered_size_width(hf.sizes) if filtered else 0
            if info.index_type == L.FIXED_ARRAY:
                h = fa.read_header(hf.reader, info.address)
                assert (h.page_bits, h.element_size) == (info.page_bits, hf.sizes.offset + (width + 4) * filtered)
            elif info.index_type == L.EXTENSIBLE_ARRAY:
                h = ea.read_header(hf.reader, info.address)
                assert (h.max_nelmts_bits, h.idx_blk_elmts, h.sup_blk_min_data_ptrs, h.data_blk_min_elmts,
                        h.max_dblk_page_nelmts_bits, h.element_size) == \
                    (info.max_bits, info.index_elements, info.min_pointers, info.min_elements, info.page_bits,
                     hf.sizes.offset + (width + 4) * filtered)
            elif info.index_type == L.BTREE_V2:
                h = bt.read_header(hf.reader, info.address)
                assert (h.node_size, h.split_percent, h.merge_percent, h.record_size) == \
                    (info.node_size, info.split_percent, info.merge_percent,
                     hf.sizes.offset + 8 * len(lay.chunk_dims) + (width + 4) * filtered)
    return seen - {L.BTREE_V1, L.SINGLE, L.IMPLICIT}


@pytest.mark.parametrize("sizes", [(8, 8), (4, 4)])
def test_shared_messages_against_libhdf5(tmp_path, sizes):
    """Datatypes, dataspaces, fill values and filter pipelines shared in the SOHM heap."""
    p = tmp_path / "sohm.h5"
    with new_file(p, "latest", sizes, sohm_fcpl(50, 40)) as f:
        for i in range(3):
            d = f.create_dataset(f"d{i}", (20,), np.dtype([("a", "<i4"), ("b", "S3")]), chunks=(5,),
                                 compression="gzip", fillvalue=np.array((7, b"x"), dtype=[("a", "<i4"), ("b", "S3")]))
            d.attrs["shared"] = np.arange(10)
    found = messages(p)
    assert {M.DATATYPE, M.DATASPACE, M.FILL, M.FILTERS} <= {s.kind[1] for s, _ in found
                                                            if s.where.endswith("(SOHM heap)")}


# -- Hypothesis: valid records -> encode -> decode -> the record, and the same bytes again -------

VERSIONS = st.integers(1, 5)
BIT = st.integers(0, 1)
ORDER = st.sampled_from("<>")


@st.composite
def bit_range(draw, size: int):
    """(bit offset, precision) inside a `size`-byte element."""
    total = min(8 * size, 0xFFFF)
    prec = draw(st.integers(1, total))
    return draw(st.integers(0, total - prec)), prec


@st.composite
def integers(draw, cls=D.FixedPoint):
    size = draw(st.integers(1, 16))
    signed = (draw(st.booleans()),) if cls is D.FixedPoint else ()
    return cls(draw(VERSIONS), size, draw(ORDER), *signed, draw(BIT), draw(BIT), *draw(bit_range(size)))


@st.composite
def floats(draw):
    size = draw(st.integers(1, 16))
    off, prec = draw(bit_range(size))
    top = off + prec

    def field() -> tuple[int, int]:
        n = draw(st.integers(1, min(top, 255)))
        return draw(st.integers(0, min(top - n, 255))), n

    epos, esize = field()
    mpos, msize = field()
    return D.FloatingPoint(draw(VERSIONS), size, draw(st.sampled_from(["<", ">", "vax"])), draw(BIT), draw(BIT),
                           draw(BIT), draw(st.integers(0, 2)), draw(st.integers(0, min(top - 1, 255))), off, prec,
                           epos, esize, mpos, msize, draw(uint(4)))


@st.composite
def opaques(draw):
    tag = draw(names(0, 40))
    padded = (len(tag) + 7) & ~7
    tag_size = draw(st.none() | st.integers(len(tag), 255).filter(lambda n: n != padded))
    return D.Opaque(draw(VERSIONS), draw(st.integers(1, 64)), tag.decode("utf-8", "surrogateescape"), tag_size)


@st.composite
def references(draw):
    rtype = draw(st.integers(0, 4))
    return D.Reference(draw(VERSIONS), draw(st.integers(1, 64)), rtype,
                       1 if rtype >= D.REF_OBJECT2 else draw(st.integers(0, 15)))


ATOMIC = st.one_of(
    integers(), integers(D.Bitfield), floats(), opaques(), references(),
    st.builds(lambda v, size, order, prec: D.Time(v, size, order, min(prec, 8 * size)), VERSIONS,
              st.integers(1, 8), ORDER, st.integers(1, 64)),
    st.builds(D.String, VERSIONS, st.integers(1, 300), st.integers(0, 2), st.integers(0, 1)))


def array_of(base: D.Datatype, dims: tuple[int, ...], version: int, permutation=None) -> D.Array:
    n = 1
    for d in dims:
        n *= d
    return D.Array(version, n * base.size, dims, base, permutation)


DIMS = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)


@st.composite
def compounds(draw, children):
    version = draw(VERSIONS)
    members, end = [], 0
    for _ in range(draw(st.integers(1, 4))):
        mtype = draw(children)
        legacy = version == 1 and draw(st.booleans())
        if legacy:     # libhdf5 before 1.4: dimensions in the member entry
            dims = draw(st.lists(st.integers(1, 3), min_size=1, max_size=4).map(tuple))
            mtype = array_of(mtype, dims, mtype.version, tuple(range(len(dims))))
        offset = end + draw(st.integers(0, 4))
        members.append(D.Member(draw(text(1)), offset, mtype, legacy))
        end = max(end, offset + mtype.size)
    return D.Compound(version, end + draw(st.integers(0, 300)), tuple(members))


@st.composite
def enums(draw):
    base = draw(integers(draw(st.sampled_from([D.FixedPoint, D.Bitfield]))).filter(lambda t: t.size <= 8))
    signed = isinstance(base, D.FixedPoint) and base.signed
    bits = 8 * base.size
    values = draw(st.lists(st.integers(-(1 << bits - 1), (1 << bits - 1) - 1) if signed else uint(base.size),
                           max_size=5))
    order = "big" if base.order == ">" else "little"
    return D.Enum(draw(VERSIONS), base.size, base, tuple(draw(text()) for _ in values), tuple(values),
                  tuple(v.to_bytes(base.size, order, signed=signed) for v in values))


@st.composite
def varlens(draw, children):
    kind = draw(st.integers(0, 1))
    pad, cset = (draw(st.integers(0, 2)), draw(st.integers(0, 1))) if kind else \
        (draw(st.integers(0, 15)), draw(st.integers(0, 15)))     # sequences: not checked, kept
    return D.VarLen(draw(VERSIONS), draw(st.integers(1, 32)), kind, pad, cset, draw(children))


@st.composite
def arrays(draw, children):
    version, dims = draw(st.integers(2, 5)), draw(DIMS)
    perm = draw(st.lists(uint(4), min_size=len(dims), max_size=len(dims)).map(tuple)) if version < 3 else None
    return array_of(draw(children), dims, version, perm)


COMPLEX = st.builds(lambda v, form, base: D.Complex(v, 2 * base.size, True, form, base),
                    VERSIONS, st.integers(0, 2), floats())
DATATYPES = st.recursive(ATOMIC | enums() | COMPLEX,
                         lambda children: compounds(children) | varlens(children) | arrays(children), max_leaves=8)


@HYP
@given(DATATYPES)
def test_datatype_encoder(dt):
    check_encoder(M.DATATYPE, Sizes(), dt)


@st.composite
def dataspaces(draw, s: Sizes):
    version = draw(st.integers(1, 2))
    kind = draw(st.sampled_from([S.SCALAR, S.SIMPLE, S.NULL][:version + 1]))
    rank = draw(st.integers(1, 6)) if kind == S.SIMPLE else 0
    dims = tuple(draw(uint(s.length)) for _ in range(rank))
    stored = draw(st.booleans())
    unlimited = (1 << 8 * s.length) - 1
    maxdims = tuple(draw(st.none() | st.integers(0, unlimited - 1)) for _ in dims) if stored else dims
    perm = draw(st.none() | st.lists(uint(4), min_size=rank, max_size=rank).map(tuple)) if version == 1 else None
    return S.Dataspace(kind, dims, maxdims, version, None if stored == (kind == S.SIMPLE) else stored, perm)


@HYP
@given(st.data(), SIZES)
def test_dataspace_encoder(data, s):
    check_encoder(M.DATASPACE, s, data.draw(dataspaces(s)))


CHUNK_DIMS = st.lists(st.integers(1, (1 << 32) - 1), min_size=1, max_size=4).map(tuple)


@st.composite
def chunk_index(draw, s: Sizes, flags: int) -> L.ChunkIndexInfo:
    itype = draw(st.integers(L.SINGLE, L.BTREE_V2))
    info = {L.SINGLE: lambda: dict(filtered_size=draw(uint(s.length)), filter_mask=draw(uint(4)))
            if flags & L.SINGLE_INDEX_WITH_FILTER else {},
            L.IMPLICIT: dict,
            L.FIXED_ARRAY: lambda: dict(page_bits=draw(uint(1))),
            L.EXTENSIBLE_ARRAY: lambda: {k: draw(uint(1)) for k in ("max_bits", "index_elements", "min_pointers",
                                                                    "min_elements", "page_bits")},
            L.BTREE_V2: lambda: dict(node_size=draw(uint(4)), split_percent=draw(uint(1)),
                                     merge_percent=draw(uint(1)))}[itype]()
    return L.ChunkIndexInfo(itype, draw(address(s)), **info)


@st.composite
def layouts(draw, s: Sizes):
    version = draw(st.integers(1, 5))
    classes = [L.COMPACT, L.CONTIGUOUS, L.CHUNKED] + ([L.VIRTUAL] if version >= 4 else [])
    cls = draw(st.sampled_from(classes))
    data = draw(st.binary(max_size=40))
    if cls == L.VIRTUAL:
        return L.DataLayout(version, cls, vds_heap_address=draw(address(s)), vds_heap_index=draw(uint(4)))
    if version < 3 and cls != L.CHUNKED:
        dims = draw(st.lists(uint(4), min_size=1, max_size=5).map(tuple))
        return L.DataLayout(version, cls, address=draw(address(s)) if cls else None, size=-1 if cls else 0,
                            compact_data=b"" if cls else data, dims=dims)
    if cls == L.COMPACT:
        return L.DataLayout(version, cls, compact_data=data)
    if cls == L.CONTIGUOUS:
        return L.DataLayout(version, cls, address=draw(address(s)), size=draw(uint(s.length)))
    if version < 4:
        dims = draw(CHUNK_DIMS)
        return L.DataLayout(version, cls, chunk_dims=dims, element_size=draw(st.integers(1, (1 << 32) - 1)),
                            index=L.ChunkIndexInfo(L.BTREE_V1, draw(address(s))))
    dims = draw(st.lists(st.integers(1, 1 << 40), min_size=2, max_size=5).map(tuple))
    minimal = L.minimal_dim_width(dims)
    width = draw(st.none() | st.integers(minimal + 1, 8)) if minimal < 8 else None
    flags = draw(uint(1))
    return L.DataLayout(version, cls, chunk_dims=dims[:-1], element_size=dims[-1], flags=flags,
                        index=draw(chunk_index(s, flags)), dim_width=width)


@HYP
@given(st.data(), SIZES)
def test_layout_encoder(data, s):
    check_encoder(M.LAYOUT, s, data.draw(layouts(s)))


@st.composite
def filters(draw, version: int) -> P.FilterSpec:
    fid = draw(uint(2))
    named = version == 1 or fid >= 256
    raw = draw(names(0, 30)) if named else b""
    usual = ((len(raw) + 8) & ~7 if version == 1 else len(raw) + 1) if raw else 0
    length = draw(st.none() | st.integers(len(raw), len(raw) + 20).filter(lambda n: n != usual)) if named else None
    return P.FilterSpec(fid, draw(uint(2)), raw.decode("latin-1"), tuple(draw(st.lists(uint(4), max_size=6))), length)


@st.composite
def pipelines(draw):
    version = draw(st.integers(1, 2))
    return P.FilterPipeline(tuple(draw(st.lists(filters(version), max_size=5))), version)


@HYP
@given(pipelines())
def test_filter_pipeline_encoder(pipe):
    check_encoder(M.FILTERS, Sizes(), pipe)


VALUES = st.none() | st.binary(min_size=1, max_size=40)


@st.composite
def fill_values(draw):
    version, defined = draw(st.integers(1, 3)), draw(st.booleans())
    value = draw(VALUES) if version == 3 or defined else None
    return F.FillValue(value, draw(st.integers(0, 3)), draw(st.integers(0, 3)), version, defined)


@HYP
@given(fill_values(), VALUES)
def test_fill_value_encoders(fv, old):
    check_encoder(M.FILL, Sizes(), fv)
    check_encoder(M.FILL_OLD, Sizes(), F.FillValue(old))


@st.composite
def external_files(draw, s: Sizes):
    slots = tuple(E.ExternalSlot(draw(uint(s.length)), draw(uint(s.length)), draw(uint(s.length)))
                  for _ in range(draw(st.integers(0, 5))))
    return E.ExternalFiles(draw(address(s)), slots, draw(st.none() | uint(2).filter(lambda n: n != len(slots))))


@HYP
@given(st.data(), SIZES)
def test_external_files_encoder(data, s):
    check_encoder(M.EXTERNAL, s, data.draw(external_files(s)))
