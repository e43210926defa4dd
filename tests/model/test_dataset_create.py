"""A new dataset's header messages (h5fs.model.dataset_create, dtype_encode, filter_spec) against
the ones libhdf5 writes when h5py creates the same dataset, and the `.npy` header parser
(h5fs.model.npy_header) against files NumPy writes.

For every case and format bound, h5py creates the dataset in a file; the engine reads that
header's messages back, and so does the builder's output: the lists are equal message for
message (type, flags, order, decoded record), and so are the bytes, except where a message holds
what must differ: an address (libhdf5 allocated early storage; ours is undefined until the caller
allocates) and the time (a modification time message's value; a version-2 header's times).
"""

from __future__ import annotations

import dataclasses
import errno
import io
import struct

import h5py
import hdf5plugin
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h5fs.errors import InvalidWrite, TooLarge
from h5fs.format.codec import Reader, Sizes
from h5fs.format.messages import datatype as D
from h5fs.format.object_header import HDR_TIMES
from h5fs.model import messages as M
from h5fs.model.dataset_create import (
    MAX_COMPACT, NPY_CHUNK_BYTES, LayoutError, NewDataset, dataset_messages, guess_chunks, npy_storage)
from h5fs.model.dtype_encode import DtypeError, datatype_of
from h5fs.model.file import H5File
from h5fs.model.filter_spec import FilterSpecError, parse_filters
from h5fs.model.libver import libver_for_superblock
from h5fs.model.npy_header import MAX_HEADER_BYTES, NpyHeaderError, parse_npy_header

LIBVERS = ("earliest", "v108", "v110", "v112", "v114", "latest")

# -- what the engine reads back -----------------------------------------------------------------


def decoded(mtype: int, body: bytes, sizes: Sizes):
    value = M.DECODERS[mtype](Reader(body, 0, sizes))
    if mtype == M.LAYOUT:   # allocated early by libhdf5, undefined in ours
        index = value.index and dataclasses.replace(value.index, address=None)
        value = dataclasses.replace(value, address=None, index=index)
    return 0.0 if mtype == M.MTIME else value


def libhdf5_messages(path, name: str) -> tuple[list, list[bytes], int, bool, Sizes]:
    """(type, flags, record) of each message of dataset `name`, the bodies, the header version,
    whether the header holds times, and the file's sizes."""
    with H5File.open(str(path)) as f:
        header = f.resolve(name).header
        msgs = [(m.type, m.flags, decoded(m.type, m.data, f.sizes)) for m in header.messages]
        return msgs, [m.data for m in header.messages], header.version, bool(header.flags & HDR_TIMES), f.sizes


def our_messages(new: NewDataset, sizes: Sizes) -> list:
    return [(m.type, m.flags, decoded(m.type, m.body, sizes)) for m in new.messages]


def assert_same(path, name: str, new: NewDataset) -> None:
    theirs, bodies, version, times, sizes = libhdf5_messages(path, name)
    assert our_messages(new, sizes) == theirs
    assert (new.header_version, new.header_times) == (version, times)
    for ours, body, (mtype, _, value) in zip(new.messages, bodies, theirs):
        allocated = mtype == M.LAYOUT and ours.body != body[:len(ours.body)]
        if mtype != M.MTIME and not allocated:   # v1 headers pad each message to 8 bytes
            assert body == ours.body.ljust(len(body), b"\0"), M.NAMES[mtype]
    # the records returned are the ones encoded
    records = {M.DATASPACE: new.dataspace, M.DATATYPE: new.datatype, M.FILL: new.fill, M.FILTERS: new.pipeline,
               M.LAYOUT: new.layout}
    for m in new.messages:
        if m.type in records:
            assert M.DECODERS[m.type](Reader(m.body, 0, sizes)) == records[m.type]


def new_file(path, libver: str) -> h5py.File:
    return h5py.File(path, "w", libver=libver)


# -- datatypes -------------------------------------------------------------------------------------

DTYPES = {
    "i1": "i1", "u1": "u1", "i2": "<i2", "i2be": ">i2", "u2be": ">u2", "i4": "<i4", "u4": "<u4", "i4be": ">i4",
    "i8": "<i8", "u8be": ">u8", "int_native": "=i8",
    "f2": "<f2", "f2be": ">f2", "f4": "<f4", "f4be": ">f4", "f8": "<f8", "f8be": ">f8", "f_native": "=f8",
    "longdouble": "g", "longdouble_be": ">g",
    "c8": "<c8", "c8be": ">c8", "c16": "<c16", "c16be": ">c16", "clongdouble": "G",
    "bool": "?", "S1": "S1", "S5": "S5", "S300": "S300", "V1": "V1", "V8": "V8",
    "struct": np.dtype([("a", "<i4"), ("b", ">f8"), ("c", "S3")]),
    "aligned": np.dtype([("a", "u1"), ("b", "<f8"), ("c", "<i2")], align=True),
    "offsets": np.dtype({"names": ["a", "b"], "formats": ["<i2", ">f4"], "offsets": [8, 0], "itemsize": 20}),
    "overlap": np.dtype({"names": ["a", "b"], "formats": ["<i4", "<i2"], "offsets": [0, 2]}),
    "tie": np.dtype({"names": ["a", "b", "c"], "formats": ["u1", "u1", "<i4"], "offsets": [4, 4, 0]}),
    "members": np.dtype([("c", "c8"), ("e", "?"), ("v", "V3"), ("s", "S2")]),
    "array_late": np.dtype([("c", "c8"), ("e", "?"), ("arr", ("<i2", (2,))), ("s", "S2")]),
    "array_first": np.dtype([("p", [("x", "<f4"), ("y", ("<i2", (3,)))]), ("q", "S3"), ("c", "c8"), ("t", "?")]),
    "subarray_2d": np.dtype([("a", ">f8", (2, 3)), ("b", "u1")]),
    "subarray_nested": np.dtype([("a", ("<f4", (2,)), (3,))]),
    "subarray_compound": np.dtype([("a", [("x", "u1"), ("y", ">i2")], (2, 2))]),
    "subarray_strings": np.dtype([("a", "S4", (3,))]),
    "subarray_bool": np.dtype([("a", "?", (5,))]),
    "subarray_big": np.dtype([("a", "u1", (70000,))]),
    "top_subarray": np.dtype(("<f4", (2, 3))),
    "top_subarray_compound": np.dtype(([("x", "<i2")], (4,))),
    "titles": np.dtype([(("Title", "a"), "<i4"), ("b", "u1")]),
    "unicode_names": np.dtype([("é", "u1"), ("名前", "<f4")]),
    "deep": np.dtype([("a", [("b", [("c", [("d", "u1"), ("e", ("<f4", (2,)))])])])]),
    "many_fields": np.dtype([(f"f{i}", "<i2" if i % 2 else "u1") for i in range(300)]),
    # h5py.opaque_dtype: an opaque type tagged "NUMPY:<str>" (h5py refuses datetimes unmarked)
    "datetime": h5py.opaque_dtype("<M8[s]"), "timedelta_be": h5py.opaque_dtype(">m8[ns]"),
    "datetime_generic": h5py.opaque_dtype("M8"), "opaque_f4": h5py.opaque_dtype("<f4"),
    "opaque_unicode": h5py.opaque_dtype("<U3"),
    "datetime_field": np.dtype([("t", h5py.opaque_dtype("<M8[D]")), ("x", "<i2")]),
    "datetime_array": np.dtype((h5py.opaque_dtype("<m8[ms]"), (2,))),
}

# h5py refuses these (TypeError or ValueError), and so do we
REFUSED = {"U5": "U5", "object": "O", "S0": "S0",
           "no_fields": np.dtype([]), "unicode_field": np.dtype([("a", "u1"), ("u", "U2")])}


def per_libver(tmp_path_factory, create) -> dict:
    """libver -> a file h5py made with that format bound, `create(f)` adding its datasets."""
    out = {}
    for libver in LIBVERS:
        path = tmp_path_factory.mktemp(libver) / "f.h5"
        with new_file(path, libver) as f:
            create(f)
        out[libver] = path
    return out


@pytest.fixture(scope="module")
def dtype_files(tmp_path_factory):
    def create(f: h5py.File) -> None:
        for name, dt in DTYPES.items():
            f.create_dataset(name, (3,), dt)
    return per_libver(tmp_path_factory, create)


@pytest.mark.parametrize("libver", LIBVERS)
@pytest.mark.parametrize("name", DTYPES)
def test_datatype_as_libhdf5_writes_it(dtype_files, libver, name):
    new = dataset_messages(DTYPES[name], (3,), libver=libver)
    assert new.datatype == datatype_of(DTYPES[name], libver)
    assert_same(dtype_files[libver], name, new)


@pytest.mark.parametrize("name", REFUSED)
def test_refused_dtypes(tmp_path, name):
    with new_file(tmp_path / "f.h5", "earliest") as f, pytest.raises((TypeError, ValueError)):
        f.create_dataset("d", (3,), REFUSED[name])
    with pytest.raises(DtypeError) as e:
        datatype_of(REFUSED[name])
    assert str(np.dtype(REFUSED[name])) in str(e.value)
    assert isinstance(e.value, InvalidWrite)


@pytest.mark.parametrize("dt", ["<M8[s]", ">m8[ns]", "M8", [("t", "<M8[D]"), ("x", "<i2")]])
def test_datetimes_are_stored_as_h5py_opaque_dtype_stores_them(dt):
    """A `.npy` cannot carry h5py's opaque marker: datetime64 and timedelta64 are stored as if
    marked (h5py refuses them otherwise), so h5py reads them back as they were."""
    dt = np.dtype(dt)
    mark = lambda t: h5py.opaque_dtype(t) if t.kind in "mM" else t   # noqa: E731
    marked = np.dtype([(n, mark(dt[n])) for n in dt.names]) if dt.names else mark(dt)
    assert datatype_of(dt) == datatype_of(marked)


@pytest.mark.parametrize("dt", [np.dtypes.StringDType(), np.dtype(">c32")])
def test_refused_where_h5py_stores_something_else(dt):
    """h5py stores NumPy strings as variable-length strings (not fixed elements a byte stream
    can fill) and a big-endian complex long double as native parts (misreading its bytes)."""
    with pytest.raises(DtypeError):
        datatype_of(dt)


def test_nesting_deeper_than_our_reader_is_refused():
    dt = np.dtype("u1")
    for _ in range(D.MAX_DEPTH + 1):
        dt = np.dtype([("x", dt)])
    with pytest.raises(DtypeError, match="nested"):
        datatype_of(dt)


# -- whole datasets: layouts, indexes, filters, fill values, times -------------------------------

CMP = np.dtype([("a", "<i4"), ("b", "S3")])
BIG = np.dtype([("a", "<f8", (40,))])      # 320 bytes: Blosc's type size falls back to 1


@dataclasses.dataclass(frozen=True)
class Case:
    ours: dict                       # dataset_messages keywords besides dtype and shape
    h5py: dict = dataclasses.field(default_factory=dict)   # create_dataset keywords besides those
    dtype: object = "<f4"
    shape: tuple = (10, 20)
    dcpl: tuple = ()                 # (method, args) applied to a DCPL h5py is given


ZSTD3, BLOSC_ZSTD = hdf5plugin.Zstd(clevel=3), hdf5plugin.Blosc(cname="zstd", clevel=3,
                                                                shuffle=hdf5plugin.Blosc.BITSHUFFLE)
CASES = {
    "contiguous": Case({}),
    "contiguous_scalar": Case({}, shape=()),
    "contiguous_empty": Case({}, shape=(0, 5)),
    "contiguous_fill": Case(dict(fill=3.5), dict(fillvalue=3.5)),
    "contiguous_fill_zero": Case(dict(fill=0), dict(fillvalue=0), dtype="<f8"),
    "contiguous_bool_fill": Case(dict(fill=True), dict(fillvalue=True), dtype="?"),
    "contiguous_string_fill": Case(dict(fill=b"ab"), dict(fillvalue=b"ab"), dtype="S5"),
    "contiguous_compound_fill": Case(dict(fill=(5, b"ab")), dtype=CMP,
                                     dcpl=(("set_fill_value", (np.array((5, b"ab"), CMP),)),)),
    "contiguous_times": Case(dict(track_times=True), dict(track_times=True)),
    "contiguous_early": Case(dict(alloc_time=1), dcpl=(("set_alloc_time", (h5py.h5d.ALLOC_TIME_EARLY,)),)),
    "compact": Case(dict(layout="compact"), dcpl=(("set_layout", (h5py.h5d.COMPACT,)),)),
    "compact_scalar": Case(dict(layout="compact"), shape=(), dcpl=(("set_layout", (h5py.h5d.COMPACT,)),)),
    "compact_fill": Case(dict(layout="compact", fill=7), dict(fillvalue=7), dtype="<i2",
                         dcpl=(("set_layout", (h5py.h5d.COMPACT,)),)),
    "single": Case(dict(chunks=(10, 20)), dict(chunks=(10, 20))),
    "single_gzip": Case(dict(chunks=(10, 20), filters="gzip"), dict(chunks=(10, 20), compression="gzip")),
    "fixed_array": Case(dict(chunks=(5, 5)), dict(chunks=(5, 5))),
    "fixed_array_max": Case(dict(chunks=(5, 5), maxshape=(100, 20)), dict(chunks=(5, 5), maxshape=(100, 20))),
    "fixed_array_fletcher": Case(dict(chunks=(3, 7), filters="fletcher32"), dict(chunks=(3, 7), fletcher32=True)),
    "fixed_array_fill": Case(dict(chunks=(5, 5), fill=-1), dict(chunks=(5, 5), fillvalue=-1)),
    "implicit": Case(dict(chunks=(5, 5), alloc_time=1), dict(chunks=(5, 5)),
                     dcpl=(("set_alloc_time", (h5py.h5d.ALLOC_TIME_EARLY,)),)),
    "implicit_gzip_is_fixed_array": Case(dict(chunks=(5, 5), alloc_time=1, filters="gzip:1"),
                                         dict(chunks=(5, 5), compression="gzip", compression_opts=1),
                                         dcpl=(("set_alloc_time", (h5py.h5d.ALLOC_TIME_EARLY,)),)),
    "extensible_array": Case(dict(chunks=(5, 5), maxshape=(None, 20)), dict(chunks=(5, 5), maxshape=(None, 20))),
    "extensible_array_second": Case(dict(chunks=(4, 8), maxshape=(10, None), filters="lzf"),
                                    dict(chunks=(4, 8), maxshape=(10, None), compression="lzf")),
    "extensible_array_empty": Case(dict(chunks=(7,), maxshape=(None,)), dict(chunks=(7,), maxshape=(None,)),
                                   shape=(0,)),
    "btree2": Case(dict(chunks=(5, 5), maxshape=(None, None)), dict(chunks=(5, 5), maxshape=(None, None))),
    "btree2_zstd": Case(dict(chunks=(5, 5), maxshape=(None, None), filters="zstd:3"),
                        dict(chunks=(5, 5), maxshape=(None, None), **ZSTD3)),
    "btree2_3d": Case(dict(chunks=(2, 3, 4), maxshape=(None, 5, None)), dict(chunks=(2, 3, 4), maxshape=(None, 5, None)),
                      shape=(4, 5, 6)),
    "guessed_chunks": Case(dict(maxshape=(None, 20)), dict(maxshape=(None, 20)), shape=(1000, 20)),
    "guessed_chunks_empty": Case(dict(maxshape=(None, 300)), dict(maxshape=(None, 300)), shape=(0, 300), dtype="<f8"),
    "guessed_chunks_filters": Case(dict(filters="shuffle,gzip"), dict(compression="gzip", shuffle=True),
                                   shape=(512, 1024), dtype="<i8"),
    "chunked_times": Case(dict(chunks=(5, 5), track_times=True), dict(chunks=(5, 5), track_times=True)),
    "npy_copy": Case(dict(chunks=npy_storage((100, 300), 8)[0], maxshape=npy_storage((100, 300), 8)[1],
                          filters="gzip:4,shuffle"),
                     dict(chunks=(100, 300), maxshape=(None, 300), compression="gzip", shuffle=True),
                     dtype="<f8", shape=(100, 300)),
    "file_bytes": Case(dict(chunks=(NPY_CHUNK_BYTES,), maxshape=(None,)),
                       dict(chunks=(NPY_CHUNK_BYTES,), maxshape=(None,)), dtype="u1", shape=(0,)),
    # filters
    "gzip9_shuffle_fletcher": Case(dict(chunks=(5, 5), filters="fletcher32,gzip:9,shuffle"),
                                   dict(chunks=(5, 5), compression="gzip", compression_opts=9, shuffle=True,
                                        fletcher32=True), dtype=">i2"),
    "gzip0": Case(dict(chunks=(5, 5), filters="deflate:0"), dict(chunks=(5, 5), compression="gzip",
                                                                  compression_opts=0)),
    "lzf_shuffle": Case(dict(chunks=(5, 5), filters="lzf,shuffle"), dict(chunks=(5, 5), compression="lzf", shuffle=True),
                        dtype=CMP),
    "zstd_default": Case(dict(chunks=(5, 5), filters="zstd"), dict(chunks=(5, 5), **hdf5plugin.Zstd())),
    "zstd_22": Case(dict(chunks=(5, 5), filters="zstd:22"), dict(chunks=(5, 5), **hdf5plugin.Zstd(clevel=22))),
    "lz4": Case(dict(chunks=(5, 5), filters="lz4"), dict(chunks=(5, 5), **hdf5plugin.LZ4())),
    "lz4_blocks": Case(dict(chunks=(5, 5), filters="lz4:1024"), dict(chunks=(5, 5), **hdf5plugin.LZ4(nbytes=1024))),
    "bzip2": Case(dict(chunks=(5, 5), filters="bzip2"), dict(chunks=(5, 5), **hdf5plugin.BZip2())),
    "bzip2_3": Case(dict(chunks=(5, 5), filters="bzip2:3"), dict(chunks=(5, 5), **hdf5plugin.BZip2(blocksize=3))),
    "blosc": Case(dict(chunks=(5, 5), filters="blosc"), dict(chunks=(5, 5), **hdf5plugin.Blosc())),
    "blosc_zstd": Case(dict(chunks=(5, 5), filters="blosc:zstd:3:bitshuffle"), dict(chunks=(5, 5), **BLOSC_ZSTD),
                       dtype=">u8"),
    "blosc_array": Case(dict(chunks=(5,), filters="blosc:lz4hc:9:noshuffle"),
                        dict(chunks=(5,), **hdf5plugin.Blosc(cname="lz4hc", clevel=9, shuffle=0)),
                        dtype=np.dtype(("<i2", (3, 4))), shape=(10,)),
    "blosc_big_type": Case(dict(chunks=(5,), filters="blosc,shuffle"), dict(chunks=(5,), shuffle=True,
                                                                             **hdf5plugin.Blosc()),
                           dtype=BIG, shape=(10,)),
    "bitshuffle": Case(dict(chunks=(5, 5), filters="bitshuffle"), dict(chunks=(5, 5), **hdf5plugin.Bitshuffle())),
    "bitshuffle_zstd": Case(dict(chunks=(5, 5), filters="bitshuffle:zstd:5"),
                            dict(chunks=(5, 5), **hdf5plugin.Bitshuffle(cname="zstd", clevel=5))),
    "bitshuffle_none": Case(dict(chunks=(5, 5), filters="bitshuffle:none"),
                            dict(chunks=(5, 5), **hdf5plugin.Bitshuffle(cname="none")), dtype=CMP),
}


def h5py_create(f: h5py.File, name: str, case: Case) -> None:
    """As h5py's create_dataset, with a DCPL; through its low-level API for a scalar dataset
    (create_dataset drops a scalar dataset's DCPL)."""
    dcpl = None
    if case.dcpl:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        for method, args in case.dcpl:
            getattr(dcpl, method)(*args)
    if dcpl is not None and case.shape == ():
        dcpl.set_obj_track_times(False)
        h5py.h5d.create(f.id, name.encode(), h5py.h5t.py_create(case.dtype, logical=True),
                        h5py.h5s.create(h5py.h5s.SCALAR), dcpl=dcpl)
        return
    f.create_dataset(name, case.shape, case.dtype, dcpl=dcpl, **case.h5py)


@pytest.fixture(scope="module")
def case_files(tmp_path_factory):
    def create(f: h5py.File) -> None:
        for name, case in CASES.items():
            h5py_create(f, name, case)
    return per_libver(tmp_path_factory, create)


@pytest.mark.parametrize("libver", LIBVERS)
@pytest.mark.parametrize("name", CASES)
def test_dataset_as_libhdf5_writes_it(case_files, libver, name):
    case = CASES[name]
    assert_same(case_files[libver], name, dataset_messages(case.dtype, case.shape, libver=libver, **case.ours))


@pytest.mark.parametrize("sizes", [(4, 4), (2, 4), (8, 4)])
@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_offset_and_length_widths(tmp_path, sizes, libver):
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fcpl.set_sizes(*sizes)
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(*{"earliest": (h5py.h5f.LIBVER_EARLIEST, h5py.h5f.LIBVER_LATEST),
                             "latest": (h5py.h5f.LIBVER_LATEST, h5py.h5f.LIBVER_LATEST)}[libver])
    path = tmp_path / "f.h5"
    with h5py.File(h5py.h5f.create(str(path).encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl)) as f:
        for name in ("contiguous", "extensible_array", "btree2_zstd", "contiguous_fill"):
            h5py_create(f, name, CASES[name])
    for name in ("contiguous", "extensible_array", "btree2_zstd", "contiguous_fill"):
        case = CASES[name]
        assert_same(path, name, dataset_messages(case.dtype, case.shape, libver=libver, sizes=Sizes(*sizes),
                                                 **case.ours))


def test_times_are_the_ones_given():
    new = dataset_messages("u1", (4,), track_times=True, mtime=1_700_000_000)
    (mtime,) = [m for m in new.messages if m.type == M.MTIME]
    assert M.DECODERS[M.MTIME](Reader(mtime.body)) == 1_700_000_000
    assert dataset_messages("u1", (4,), track_times=True, libver="v108").messages[-1].type != M.MTIME


@pytest.mark.parametrize("kw, match", [
    (dict(layout="contiguous", maxshape=(None, 20)), "cannot grow"),
    (dict(layout="compact", maxshape=(20, 20)), "cannot grow"),
    (dict(layout="contiguous", filters="gzip"), "chunked"),
    (dict(layout="compact", alloc_time=2), "early"),
    (dict(layout="striped"), "unknown layout"),
    (dict(layout="sparse", alloc_time=2), "defined"),
    (dict(layout="sparse", filters="values=gzip,pixels=gzip"), "unknown section"),
    (dict(chunks=(5,)), "rank"),
    (dict(chunks=(0, 5)), "chunks"),
    (dict(chunks=(11, 5)), "maximum shape"),
    (dict(chunks=(10, 5), maxshape=(10, 2)), "smaller than shape"),
    (dict(maxshape=(None,)), "rank"),
    (dict(fill="x"), "fill value"),
    (dict(fill=[1, 2]), "fill value"),
    (dict(chunks=(2.5, 5)), "not integers"),
    (dict(chunks=(5, 5), layout="compact"), "compact"),
    (dict(alloc_time=4), "allocation time"),
    (dict(filters="gzip:10"), "gzip level"),
])
def test_refused_parameters(kw, match):
    with pytest.raises(InvalidWrite, match=match):
        dataset_messages("<f4", (10, 20), **kw)


def test_refused_sizes():
    with pytest.raises(LayoutError, match="compact"):
        dataset_messages("<f8", (100, 100), layout="compact")
    with pytest.raises(LayoutError, match="scalar"):
        dataset_messages("<f8", (), chunks=())
    with pytest.raises(LayoutError, match="4 GiB"):
        dataset_messages("<f8", (1 << 20, 1 << 20), chunks=(1 << 15, 1 << 15))
    with pytest.raises(LayoutError, match="lengths"):
        dataset_messages("<f8", (1 << 14,), sizes=Sizes(2, 2))
    with pytest.raises(ValueError, match="format bound"):
        dataset_messages("<f8", (3,), libver="v116")
    with pytest.raises(LayoutError, match="overlapping"):   # h5py moves the fields: no NumPy value fits
        dataset_messages(DTYPES["overlap"], (3,), fill=(1, 2))


@pytest.mark.parametrize("layout", ["contiguous", "chunked", "sparse"])
def test_refused_beyond_what_a_file_can_show(layout):
    """More bytes of data than st_size can hold (2**63-1): the mount could never show them."""
    chunks = None if layout == "contiguous" else (1000, 1000)
    with pytest.raises(TooLarge, match="more than a file can show") as exc:
        dataset_messages("<f4", (10**12, 10**12), layout=layout, chunks=chunks)
    assert exc.value.errno == errno.EFBIG
    dataset_messages("<f4", (2**61 - 1, 1), layout=layout, chunks=chunks and (1000, 1))   # 2**63-4 bytes fit


def test_libhdf5_refuses_what_we_refuse(tmp_path):
    """The refusals above mirror libhdf5's and h5py's own."""
    with new_file(tmp_path / "f.h5", "latest") as f:
        for kw in (dict(chunks=(11, 5), maxshape=(10, 20)), dict(chunks=(5,)), dict(compression="gzip", chunks=False)):
            with pytest.raises((ValueError, TypeError)):
                f.create_dataset(f"x{len(f)}", (10, 20), "<f4", **kw)
        for n in (MAX_COMPACT, MAX_COMPACT + 1):   # the largest compact dataset, and one byte more
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_layout(h5py.h5d.COMPACT)
            if n > MAX_COMPACT:
                with pytest.raises(ValueError, match="too large"):
                    f.create_dataset(f"c{n}", (n,), "u1", dcpl=dcpl)
                with pytest.raises(LayoutError, match="compact"):
                    dataset_messages("u1", (n,), layout="compact")
            else:
                f.create_dataset(f"c{n}", (n,), "u1", dcpl=dcpl)
                dataset_messages("u1", (n,), layout="compact")


@pytest.mark.parametrize("shape, dtype, maxshape", [
    ((10, 20), "<f4", None), ((1000, 20), "<f4", (None, 20)), ((0, 300), "<f8", (None, 300)),
    ((512, 1024), "<i8", None), ((7,), "u1", None), ((3, 4, 5, 6, 7), "<c16", None), ((1 << 20,), "<f8", None),
    ((100_000, 3), "<f4", (None, 3)), ((5, 0), "u1", (None, 0)),
])
def test_guess_chunks_is_h5pys(tmp_path, shape, dtype, maxshape):
    with new_file(tmp_path / "f.h5", "earliest") as f:
        try:
            ds = f.create_dataset("d", shape, dtype, maxshape=maxshape or shape)
        except ValueError:   # libhdf5 refuses a chunk longer than a fixed dimension of 0
            with pytest.raises(LayoutError):
                dataset_messages(dtype, shape, maxshape=maxshape or shape)
            return
        assert guess_chunks(shape, np.dtype(dtype).itemsize) == ds.chunks


@pytest.mark.parametrize("shape, itemsize, chunks", [
    ((0,), 1, (1 << 20,)),                      # a file of bytes still to come
    ((5,), 1, (5,)),                            # a small array: one small chunk
    ((3_000_000,), 8, (131072,)),
    ((100, 300), 8, (100, 300)),
    ((1000, 300), 8, (436, 300)),               # 436 rows of 2400 bytes
    ((10, 3_000_000), 4, (1, 262144)),          # rows larger than 1 MiB: cut the last dimension
    ((2, 3, 1000, 1000), 4, (1, 1, 262, 1000)),
    ((4, 5), 2 << 20, (1, 1)),                  # an element larger than 1 MiB
])
def test_npy_chunks(shape, itemsize, chunks):
    got, maxshape = npy_storage(shape, itemsize)
    assert got == chunks and maxshape == (None, *shape[1:])
    assert itemsize * np.prod(chunks) <= max(NPY_CHUNK_BYTES, itemsize)


@pytest.mark.parametrize("shape", [(), (4, 0), (4, 5, 0)])
def test_npy_storage_contiguous(shape):
    chunks, maxshape = npy_storage(shape, 4)
    assert chunks is maxshape is None
    assert dataset_messages("<f4", shape, chunks=chunks, maxshape=maxshape).layout.class_name == "contiguous"


# -- filter specifications -------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "", "gzip,,shuffle", "gzip:x", "gzip:4:5", "zip", "none,gzip", "gzip,lzf", "shuffle,shuffle", "lzf:1",
    "zstd:0", "zstd:23", "bzip2:0", "blosc:lz5", "blosc:lz4:10", "blosc:lz4:5:byte", "bitshuffle:lz4:3",
    "bitshuffle:gzip", "fletcher32,fletcher32", "lz4:-1", "gzip:4.5",
])
def test_bad_filter_specs(text):
    with pytest.raises(FilterSpecError):
        parse_filters(text)


def test_filter_specs_order_and_case():
    assert parse_filters("none") == parse_filters(" NONE ") == ()
    assert [f.id for f in parse_filters("Fletcher32, GZIP:4, shuffle")] == [2, 1, 3]
    assert parse_filters("gzip") == parse_filters("deflate:4")


# -- superblock to format bound ------------------------------------------------------------------------

@pytest.mark.parametrize("libver, expected", [("earliest", "earliest"), ("v108", "v108"), ("v110", "v110"),
                                              ("latest", "v110")])
def test_libver_for_superblock(tmp_path, libver, expected):
    with new_file(tmp_path / "f.h5", libver):
        pass
    with H5File.open(str(tmp_path / "f.h5")) as f:
        assert libver_for_superblock(f.superblock.version) == expected


# -- .npy headers ------------------------------------------------------------------------------------------

ARRAYS = {
    "f4_2d": np.arange(12, dtype="<f4").reshape(3, 4),
    "f8be": np.arange(5, dtype=">f8"),
    "bool": np.array([True, False, True]),
    "c16": np.ones((2, 2), "<c16"),
    "bytes": np.array([b"ab", b"cdefg"]),
    "scalar": np.array(3.5),
    "empty": np.zeros((0,), "<i2"),
    "empty_3d": np.zeros((2, 0, 3), "u1"),
    "struct_padded": np.zeros(4, np.dtype([("a", "u1"), ("b", "<f8")], align=True)),
    "struct_nested": np.zeros((2, 3), np.dtype([("p", [("x", "<f4"), ("y", "<i2", (3,))]), ("c", "c8"), ("t", "?")])),
    "struct_gaps": np.zeros(3, np.dtype({"names": ["a", "b"], "formats": ["<i2", ">f4"], "offsets": [2, 8],
                                         "itemsize": 20})),
    "unicode_names": np.zeros(2, np.dtype([("é", "u1"), ("名前", "<f4")])),
    "opaque": np.zeros(3, "V6"),
    "rank_8": np.zeros((1, 2, 1, 2, 1, 2, 1, 2), "u1"),
}


def npy_bytes(arr: np.ndarray, version=None) -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array(out, arr, version=version, allow_pickle=False)
    return out.getvalue()


@pytest.mark.parametrize("version", [None, (1, 0), (2, 0), (3, 0)])
@pytest.mark.parametrize("name", ARRAYS)
def test_npy_headers_numpy_writes(name, version):
    arr = ARRAYS[name]
    if version in ((1, 0), (2, 0)) and name == "unicode_names":
        pytest.skip("formats 1.0 and 2.0 have no UTF-8 field names")
    data = npy_bytes(arr, version)
    header = parse_npy_header(data)
    assert (header.dtype, header.shape, header.fortran_order) == (arr.dtype, arr.shape, False)
    assert header.header_length == len(data) - arr.nbytes == len(data) - header.data_nbytes
    assert header.version == (version or header.version)
    assert parse_npy_header(data[:header.header_length], complete=True) == header
    for cut in range(0, header.header_length, 7):
        assert parse_npy_header(data[:cut]) is None
        with pytest.raises(NpyHeaderError, match="truncated"):
            parse_npy_header(data[:cut], complete=True)


def test_npy_header_of_a_large_structured_dtype():
    arr = np.zeros(2, np.dtype([(f"field_{i}", "<f8") for i in range(5000)]))   # numpy writes format 2.0
    data = npy_bytes(arr)
    header = parse_npy_header(data)
    assert header.version == (2, 0) and header.dtype == arr.dtype and header.header_length > 65536


def crafted(text: str, version=(1, 0), length: int | None = None) -> bytes:
    raw = text.encode("latin-1" if version < (3, 0) else "utf-8")
    field = struct.pack("<H" if version == (1, 0) else "<I", len(raw) if length is None else length)
    return b"\x93NUMPY" + bytes(version) + field + raw


def test_npy_fortran_order():
    """Column-major only where two dimensions have more than one element: otherwise the bytes
    are the row-major ones; a subarray dtype in column-major order is refused."""
    header = parse_npy_header(npy_bytes(np.asfortranarray(np.zeros((3, 4)))))
    assert header.fortran_order and header.shape == (3, 4)
    for shape in ("(5,)", "(1, 7, 1)", "()", "(0, 3)"):
        header = parse_npy_header(crafted(f"{{'descr': '<i4', 'fortran_order': True, 'shape': {shape}, }}\n"))
        assert not header.fortran_order and header.shape == eval(shape)
    with pytest.raises(NpyHeaderError, match="Fortran"):
        parse_npy_header(crafted("{'descr': ('<f4', (2,)), 'fortran_order': True, 'shape': (3, 4), }\n"))


def test_npy_top_level_subarray_is_folded_into_the_shape():
    header = parse_npy_header(crafted("{'descr': ('<f4', (2, 3)), 'fortran_order': False, 'shape': (5,)}"))
    assert (header.dtype, header.shape, header.data_nbytes) == (np.dtype("<f4"), (5, 2, 3), 120)


@pytest.mark.parametrize("arr", [np.array([1, "a"], dtype=object), np.array(["abc"]),
                                 np.zeros(2, [("a", "u1"), ("b", "O")])])
def test_npy_dtypes_hdf5_cannot_hold(arr):
    out = io.BytesIO()
    np.save(out, arr, allow_pickle=True)
    with pytest.raises(DtypeError):
        parse_npy_header(out.getvalue())


@pytest.mark.parametrize("data, match", [
    (b"\x93NUMPX", "magic"), (b"PK\x03\x04", "magic"), (b"\x93NUMPY\x04\x00\x10\x00", "version"),
    (b"\x93NUMPY\x01\x01\x10\x00", "version"),
    (crafted("{'descr': '<f4'}", (2, 0), MAX_HEADER_BYTES + 1), "header of"),
    (crafted("[1, 2]"), "dict"),
    (crafted("{'descr': '<f4', 'fortran_order': False}"), "dict"),
    (crafted("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}"), "dict"),
    (crafted("{'descr': '<f4', 'fortran_order': False, 'shape': (-3,)}"), "shape"),
    (crafted("{'descr': '<f4', 'fortran_order': False, 'shape': [3]}"), "shape"),
    (crafted("{'descr': '<f4', 'fortran_order': False, 'shape': (True,)}"), "shape"),
    (crafted("{'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}"), "fortran_order"),
    (crafted("{'descr': '<q9', 'fortran_order': False, 'shape': (3,)}"), "descr"),
    (crafted("{'descr': [('a',)], 'fortran_order': False, 'shape': (3,)}"), "descr"),
    (crafted("{'descr': '<f4', 'fortran_order': False, 'shape': (3L,)}"), "literal"),
    (crafted("__import__('os').system('true')"), "literal"),
    (crafted("{'descr': '<f4', 'fortran_order': False, 'shape': " + "(" * 5000 + ")" * 5000 + "}"), "literal"),
    (crafted("{'descr': '<f8', 'fortran_order': False, 'shape': (1 << 62, 4)}"), "literal"),
    (crafted("{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 4)}"), "too large"),
    (crafted("{'descr': 'u1', 'fortran_order': False, 'shape': (1,) * 33}"), "literal|rank"),
    (crafted("{'descr': 'u1', 'fortran_order': False, 'shape': (" + "1, " * 33 + ")}"), "rank"),
    (crafted("{'descr': 'u1', 'fortran_order': False, 'shape': (1,)}", (3, 0))[:-3] + b"\xff\xfe}", "UTF-8"),
])
def test_malformed_npy_headers(data, match):
    with pytest.raises(NpyHeaderError, match=match):
        parse_npy_header(data)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(ARRAYS)), st.integers(0, 200), st.binary(min_size=1, max_size=4))
def test_npy_header_corruption_fails_cleanly(name, at, junk):
    data = bytearray(npy_bytes(ARRAYS[name]))
    data[at:at + len(junk)] = junk
    try:
        header = parse_npy_header(bytes(data), complete=True)
    except (NpyHeaderError, DtypeError):
        return
    assert header.header_length <= len(data) and header.data_nbytes >= 0
