"""Filter encoders against libhdf5 (h5py + hdf5plugin) as the oracle.

For every filter, h5py creates two chunked datasets with the same pipeline: libhdf5 writes the
data into the first; h5fs encodes the same chunks (`encode_chunk`) and writes them into the
second with `write_direct_chunk`. h5py must read the second back as the data (lossy
scale-offset: as it reads the first), each chunk's filter mask must be libhdf5's, and h5fs must
decode both its own chunks and libhdf5's.
"""

from __future__ import annotations

import concurrent.futures
import math
from dataclasses import dataclass

import h5py
import hdf5plugin
import numpy as np
import pytest
from h5py import h5d, h5p, h5s, h5t, h5z
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import pipeline

from h5fs.errors import CannotWrite, Unsupported
from h5fs.format.messages.filter_pipeline import FilterSpec
from h5fs.storage.filters import ChunkInfo
from h5fs.storage.filters._msgpack import Reader
from h5fs.storage.filters.pipeline import DECODERS, ENCODERS, decode_chunk, encode_chunk

SHAPE, CHUNKS = (40, 30), (16, 16)  # 3 x 2 chunks, the last row and column partial
RNG = np.random.default_rng(20240707)
ALL = ("u1", "<i2", ">i4", "<f4", ">f8")
INTS, FLOATS = ("u1", "<i2", ">i4", "<i8", ">u2"), ("<f4", ">f4", "<f8", ">f8")


def sample(kind: str, dtype: str, shape=SHAPE) -> np.ndarray:
    """random: uniformly random bytes (incompressible); smooth: a random walk (compressible);
    constant: one value."""
    dt = np.dtype(dtype)
    if kind == "random":
        return RNG.integers(0, 256, math.prod(shape) * dt.itemsize, np.uint8).view(dt).reshape(shape)
    if kind == "smooth":
        return (np.cumsum(RNG.normal(size=shape), axis=-1) * 10).astype(dt)
    return np.full(shape, 7, dt)


@dataclass(frozen=True)
class Case:
    kw: dict
    dtypes: tuple[str, ...] = ALL
    shape: tuple[int, ...] = SHAPE
    chunks: tuple[int, ...] = CHUNKS
    lossy: bool = False      # h5py reads back what libhdf5 itself stores, not the data
    exact: bool = False      # a filter of ours to the bit: libhdf5's stored bytes exactly
    fill: float | None = None
    sized: bool = False      # fails when its output would outgrow its input (codec-dependent)
    kinds: tuple[str, ...] = ("random", "smooth", "constant")


CASES = {
    "deflate-9": Case(dict(compression="gzip", compression_opts=9)),
    "shuffle-deflate-4": Case(dict(compression="gzip", compression_opts=4, shuffle=True)),
    "fletcher32-deflate": Case(dict(compression="gzip", fletcher32=True)),
    "shuffle-fletcher32": Case(dict(shuffle=True, fletcher32=True)),
    "lzf": Case(dict(compression="lzf"), sized=True),
    "shuffle-lzf": Case(dict(compression="lzf", shuffle=True), sized=True),
    "szip-nn": Case(dict(compression="szip", compression_opts=("nn", 16)), sized=True),
    "szip-ec": Case(dict(compression="szip", compression_opts=("ec", 8)), sized=True),
    "bitshuffle": Case(hdf5plugin.Bitshuffle(cname="none")),
    "bitshuffle-lz4": Case(hdf5plugin.Bitshuffle(cname="lz4")),
    "bitshuffle-zstd": Case(hdf5plugin.Bitshuffle(nelems=64, cname="zstd", clevel=5)),
    "blosc-lz4": Case(hdf5plugin.Blosc(cname="lz4", shuffle=hdf5plugin.Blosc.SHUFFLE), sized=True),
    "blosc-zstd": Case(hdf5plugin.Blosc(cname="zstd", clevel=3, shuffle=hdf5plugin.Blosc.BITSHUFFLE),
                       sized=True),
    "blosc-blosclz": Case(hdf5plugin.Blosc(cname="blosclz", clevel=9, shuffle=hdf5plugin.Blosc.NOSHUFFLE),
                          sized=True),
    "blosc2-b2nd": Case(hdf5plugin.Blosc2(cname="lz4", filters=hdf5plugin.Blosc2.SHUFFLE)),
    "blosc2-zstd": Case(hdf5plugin.Blosc2(cname="zstd", clevel=3, filters=hdf5plugin.Blosc2.BITSHUFFLE),
                        shape=(1000,), chunks=(300,)),
    "lz4": Case(hdf5plugin.LZ4()),
    "lz4-blocks": Case(hdf5plugin.LZ4(nbytes=100)),
    "zstd": Case(hdf5plugin.Zstd(clevel=5)),
    "shuffle-zstd": Case(dict(shuffle=True, **hdf5plugin.Zstd())),
    "bzip2": Case(hdf5plugin.BZip2(blocksize=5)),
    "scaleoffset-int": Case(dict(scaleoffset=0), dtypes=INTS, exact=True),
    "scaleoffset-int-fill": Case(dict(scaleoffset=0), dtypes=INTS, exact=True, fill=7,
                                 kinds=("smooth", "constant")),
    "scaleoffset-int-5bits": Case(dict(scaleoffset=5), dtypes=INTS, lossy=True, exact=True),
    "scaleoffset-deflate": Case(dict(scaleoffset=0, compression="gzip"), dtypes=INTS),
    "scaleoffset-float": Case(dict(scaleoffset=2), dtypes=FLOATS, lossy=True, exact=True,
                              kinds=("smooth", "constant")),
    "scaleoffset-float-fill": Case(dict(scaleoffset=3), dtypes=FLOATS, lossy=True, exact=True,
                                   fill=-999.0, kinds=("smooth", "constant")),
}


def chunk_of(data: np.ndarray, sel: tuple[slice, ...], chunks, fill) -> np.ndarray:
    """The whole chunk at `sel` as libhdf5 fills it: the part outside the dataset holds the fill value."""
    out = np.full(chunks, fill or 0, data.dtype)
    out[tuple(slice(0, s.stop - s.start) for s in sel)] = data[sel]
    return out


def write_both(f: h5py.File, name: str, case: Case, dtype: str, data: np.ndarray) -> list:
    """libhdf5 writes `data` into name/a, h5fs's chunks go into name/b; returns per chunk
    (selection, our stored bytes, our mask, libhdf5's stored bytes, libhdf5's mask)."""
    kw = dict(case.kw, fillvalue=case.fill) if case.fill is not None else case.kw
    a = f.create_dataset(f"{name}/a", data=data, chunks=case.chunks, **kw)
    b = f.create_dataset(f"{name}/b", shape=data.shape, dtype=dtype, chunks=case.chunks, **kw)
    filters = pipeline(b)
    info = ChunkInfo(math.prod(case.chunks) * data.itemsize, data.itemsize, name)
    out = []
    for sel in b.iter_chunks():
        offset = tuple(s.start for s in sel)
        stored, mask = encode_chunk(filters, chunk_of(data, sel, case.chunks, case.fill).tobytes(), info)
        b.id.write_direct_chunk(offset, stored, mask)
        out.append((sel, stored, mask, *reversed(a.id.read_direct_chunk(offset))))
    return out


@pytest.mark.parametrize("name", CASES)
def test_h5py_reads_our_chunks(tmp_path, name):
    case = CASES[name]
    written = {}
    with h5py.File(tmp_path / "f.h5", "w") as f:
        for dtype in case.dtypes:
            for kind in case.kinds:
                data = sample(kind, dtype, case.shape)
                if case.fill is not None:
                    data.flat[::7] = case.fill
                written[dtype, kind] = data, write_both(f, f"{dtype}-{kind}", case, dtype, data)
    with h5py.File(tmp_path / "f.h5", "r") as f:  # reopened: no chunk cache between write and read
        for (dtype, kind), (data, chunks) in written.items():
            ds_a, ds_b = f[f"{dtype}-{kind}/a"], f[f"{dtype}-{kind}/b"]
            theirs, ours = ds_a[...], ds_b[...]
            expected = theirs if case.lossy else data
            assert ours.tobytes() == expected.tobytes(), (dtype, kind)
            filters = pipeline(ds_b)
            info = ChunkInfo(math.prod(case.chunks) * data.itemsize, data.itemsize, name)
            for sel, stored, mask, ref, ref_mask in chunks:
                edge = any(s.stop - s.start < c for s, c in zip(sel, case.chunks))
                if not (case.sized and kind == "random" and edge):  # codec versions differ at the margin
                    assert mask == ref_mask, (dtype, kind, sel)
                if case.exact:
                    assert (stored, mask) == (ref, ref_mask), (dtype, kind, sel)
                if not case.lossy:
                    whole = chunk_of(data, sel, case.chunks, case.fill).tobytes()
                    assert decode_chunk(filters, stored, mask, info) == whole
                got = np.frombuffer(decode_chunk(filters, ref, ref_mask, info), data.dtype).reshape(case.chunks)
                assert got[tuple(slice(0, s.stop - s.start) for s in sel)].tobytes() == theirs[sel].tobytes()


# --- N-bit: datasets only the low-level API builds ------------------------------------------------

def _int_type(base, precision: int, offset: int):
    t = base.copy()
    t.set_precision(precision)
    t.set_offset(offset)
    return t


def _float24():
    t = h5t.IEEE_F32LE.copy()  # a 24-bit float stored in 4 bytes at bit offset 4
    t.set_fields(27, 19, 8, 0, 19)
    t.set_offset(4)
    t.set_precision(24)
    return t


def _compound():
    ct = h5t.create(h5t.COMPOUND, 4 + 8 + 6 + 3)
    ct.insert(b"a", 0, _int_type(h5t.STD_I32LE, 17, 3))
    ct.insert(b"f", 4, h5t.IEEE_F64LE)
    ct.insert(b"arr", 12, h5t.array_create(_int_type(h5t.STD_U16BE, 10, 5), (3,)))
    st3 = h5t.C_S1.copy()
    st3.set_size(3)
    ct.insert(b"s", 18, st3)  # a string: packed whole (a "no-op" type)
    return ct, np.dtype([("a", "<i4"), ("f", "<f8"), ("arr", "<u2", (3,)), ("s", "S3")])


def _compound_data(mdt: np.dtype) -> np.ndarray:
    data = np.zeros(SHAPE, mdt)
    data["a"] = RNG.integers(-60000, 60000, SHAPE)
    data["f"] = RNG.normal(size=SHAPE)
    data["arr"] = RNG.integers(0, 1024, SHAPE + (3,))
    data["s"] = b"abc"
    return data


NBIT = {
    "i32le-12@4": lambda: (_int_type(h5t.STD_I32LE, 12, 4), np.dtype("<i4"), RNG.integers(-2048, 2048, SHAPE)),
    "u16be-11@2": lambda: (_int_type(h5t.STD_U16BE, 11, 2), np.dtype(">u2"), RNG.integers(0, 2048, SHAPE)),
    "i64le-40@20": lambda: (_int_type(h5t.STD_I64LE, 40, 20), np.dtype("<i8"),
                            RNG.integers(-(1 << 39), 1 << 39, SHAPE)),
    "u8-3@2": lambda: (_int_type(h5t.STD_U8LE, 3, 2), np.dtype("u1"), RNG.integers(0, 8, SHAPE)),
    "f24": lambda: (_float24(), np.dtype("<f4"), np.cumsum(RNG.normal(size=SHAPE), axis=1)),
    "compound": lambda: (*_compound(), None),
}


@pytest.mark.parametrize("name", NBIT)
@pytest.mark.parametrize("deflate", [False, True])
def test_nbit_like_libhdf5(tmp_path, name, deflate):
    ftype, mdt, values = NBIT[name]()
    data = _compound_data(mdt) if values is None else np.asarray(values).astype(mdt)
    mtype = h5t.py_create(mdt)
    dcpl = h5p.create(h5p.DATASET_CREATE)
    dcpl.set_chunk(CHUNKS)
    dcpl.set_filter(h5z.FILTER_NBIT, h5z.FLAG_OPTIONAL, ())
    if deflate:
        dcpl.set_deflate(4)
    with h5py.File(tmp_path / "n.h5", "w") as f:
        a, b = (h5d.create(f.id, n, ftype, h5s.create_simple(SHAPE), dcpl=dcpl) for n in (b"a", b"b"))
        a.write(h5s.ALL, h5s.ALL, data, mtype=mtype)
        raw = np.empty(SHAPE, f"V{ftype.get_size()}")  # the file's bytes for each element
        a.read(h5s.ALL, h5s.ALL, raw, mtype=ftype)
        ds = h5py.Dataset(b)
        info = ChunkInfo(math.prod(CHUNKS) * ftype.get_size(), ftype.get_size(), name)
        for sel in ds.iter_chunks():
            offset = tuple(s.start for s in sel)
            stored, mask = encode_chunk(pipeline(ds), chunk_of(raw, sel, CHUNKS, None).tobytes(), info)
            ref_mask, ref = a.read_direct_chunk(offset)
            if not deflate:  # n-bit is ours to the bit: libhdf5's bytes exactly
                assert (stored, mask) == (ref, ref_mask)
            b.write_direct_chunk(offset, stored, mask)
    with h5py.File(tmp_path / "n.h5", "r") as f:
        out = np.empty(SHAPE, mdt)
        f["b"].id.read(h5s.ALL, h5s.ALL, out, mtype=mtype)
        theirs = np.empty(SHAPE, mdt)
        f["a"].id.read(h5s.ALL, h5s.ALL, theirs, mtype=mtype)
    assert out.tobytes() == theirs.tobytes()


# --- optional filters skipped as libhdf5 skips them -----------------------------------------------

def _low_level(f: h5py.File, name: str, setup, data: np.ndarray) -> h5py.Dataset:
    dcpl = h5p.create(h5p.DATASET_CREATE)
    dcpl.set_chunk(CHUNKS)
    setup(dcpl)
    ds = h5d.create(f.id, name.encode(), h5t.IEEE_F32LE, h5s.create_simple(SHAPE), dcpl=dcpl)
    ds.write(h5s.ALL, h5s.ALL, data)
    return h5py.Dataset(ds)


SKIPPED = {
    "scaleoffset-escale": lambda d: d.set_scaleoffset(h5z.SO_FLOAT_ESCALE, 3),  # not implemented
    "deflate-level-12": lambda d: d.set_filter(h5z.FILTER_DEFLATE, h5z.FLAG_OPTIONAL, (12,)),
    "bzip2-level-12": lambda d: d.set_filter(307, h5z.FLAG_OPTIONAL, (12,)),
    "unknown-then-deflate": lambda d: (d.set_filter(31111, h5z.FLAG_OPTIONAL, (1,)), d.set_deflate(4)),
    "szip-random": lambda d: d.set_szip(h5z.SZIP_NN_OPTION_MASK, 8),
    "lzf-random": lambda d: d.set_filter(32000, h5z.FLAG_OPTIONAL, ()),
    "blosc-random": lambda d: d.set_filter(32001, h5z.FLAG_OPTIONAL, (0, 0, 0, 0, 5, 1, 1)),
}


@pytest.mark.parametrize("name", SKIPPED)
def test_optional_filter_skipped_like_libhdf5(tmp_path, name):
    data = sample("random" if name.endswith("random") else "smooth", "<f4")
    with h5py.File(tmp_path / "s.h5", "w") as f:
        ds = _low_level(f, name, SKIPPED[name], data)
        filters = pipeline(ds)
        info = ChunkInfo(math.prod(CHUNKS) * 4, 4, name)
        stored, mask = encode_chunk(filters, data[:16, :16].tobytes(), info)
        ref_mask, _ = ds.id.read_direct_chunk((0, 0))
        assert mask == ref_mask != 0
        assert decode_chunk(filters, stored, mask, info) == data[:16, :16].tobytes()


def test_mandatory_filter_failing_refuses_the_write():
    info = ChunkInfo(64, 4, "/m")
    with pytest.raises(CannotWrite, match="deflate"):
        encode_chunk((FilterSpec(1, 0, "", (12,)),), bytes(64), info)
    with pytest.raises(Unsupported, match="31111"):
        encode_chunk((FilterSpec(31111, 0, "", ()),), bytes(64), info)
    incompressible = RNG.integers(0, 256, 64, np.uint8).tobytes()
    with pytest.raises(CannotWrite, match="lzf"):
        encode_chunk((FilterSpec(32000, 0, "", ()),), incompressible, info)


def test_blosc2_frames_as_hdf5_blosc2_writes_them(tmp_path):
    """The frame's header fields and b2nd metalayer (chunk and block shapes chosen from the
    level, compressor and type size) are those HDF5-Blosc2 writes."""
    def frame_fields(raw: bytes):
        """Flags, sizes (uncompressed, type, block, chunk), filters and metalayers."""
        mv = memoryview(raw)
        header = Reader(mv).value()
        layers = {k: bytes(Reader(mv, at).value()) for k, at in header[-1][1].items()}
        return [header[i] for i in (0, 3, 4, 6, 7, 8)], bytes(header[12]), layers

    with h5py.File(tmp_path / "b.h5", "w") as f:
        for shape, chunks, dtype, kw in [((700, 900), (300, 700), "f4", {}),
                                         ((33, 45, 17), (10, 44, 17), "i2", dict(cname="zstd", clevel=1)),
                                         ((50, 50), (7, 13), "f8", dict(cname="blosclz", clevel=9)),
                                         ((1000,), (1000,), "u1", {})]:
            data = sample("smooth", dtype, shape)
            ds = f.create_dataset(f"{dtype}{chunks}", data=data, chunks=chunks, **hdf5plugin.Blosc2(**kw))
            chunk = np.ascontiguousarray(data[tuple(slice(0, c) for c in chunks)])
            ours, _ = encode_chunk(pipeline(ds), chunk.tobytes(), ChunkInfo(chunk.nbytes, chunk.itemsize, ""))
            assert frame_fields(ours) == frame_fields(ds.id.read_direct_chunk((0,) * len(shape))[1])


def test_encoders_in_threads_agree():
    """Encoders keep no shared state: chunks encoded by 4 threads at once come out as one by one."""
    cases = [(FilterSpec(2, 1, "", (4,)), FilterSpec(1, 1, "", (4,))),
             (FilterSpec(32026, 1, "", (1, 0, 4, 4096, 5, 1, 1, 2, 32, 32)),),
             (FilterSpec(6, 1, "", (0, 3, 1024, 1, 4, 0, 0, 0) + (0,) * 12),),
             (FilterSpec(32008, 1, "", (0, 4, 4, 0, 3, 5)),)]
    chunks = [sample("smooth", "<f4", (32, 32)).tobytes() for _ in range(12)]
    info = ChunkInfo(4096, 4, "/t")
    jobs = [(filters, chunk) for filters in cases for chunk in chunks]
    alone = [encode_chunk(filters, chunk, info) for filters, chunk in jobs]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert list(pool.map(lambda job: encode_chunk(*job, info), jobs)) == alone


# --- encode then decode, for any data ------------------------------------------------------------

def _specs(esize: int, n: int, draw) -> list[FilterSpec]:
    """One spec per filter, with client data as libhdf5 / hdf5plugin set it for this chunk."""
    order = 0
    level = draw(st.integers(1, 9))
    return [
        FilterSpec(1, 1, "", (draw(st.integers(0, 9)),)),
        FilterSpec(2, 1, "", (esize,)),
        FilterSpec(3, 0, "", ()),
        FilterSpec(4, 1, "", (draw(st.sampled_from([4, 32])) | 128 | 8, 8, 8 * esize, min(n, 8 * 128))),
        FilterSpec(5, 1, "", (8, 0, n, 1, esize, order, draw(st.integers(1, 8 * esize)), 0)),
        FilterSpec(6, 1, "", (2, 0, n, 0, esize, draw(st.integers(0, 1)), order, 0) + (0,) * 12),
        FilterSpec(307, 1, "", (level,)),
        FilterSpec(32000, 1, "", ()),
        FilterSpec(32001, 1, "", (2, 2, esize, n * esize, level, draw(st.integers(0, 2)),
                                  draw(st.sampled_from([0, 1, 2, 4, 5])))),
        FilterSpec(32004, 1, "", (draw(st.sampled_from([0, 64, 1000])),)),
        FilterSpec(32008, 1, "", (0, 4, esize, draw(st.sampled_from([0, 8, 128])),
                                  draw(st.sampled_from([0, 2, 3])), level)),
        FilterSpec(32015, 1, "", (level,)),
        FilterSpec(32026, 1, "", (1, 0, esize, n * esize, level, draw(st.integers(0, 2)),
                                  draw(st.sampled_from([0, 1, 2, 4, 5])))),
        FilterSpec(32026, 1, "", (1, 0, esize, n * esize, level, 1, 1, 2, n // 8, 8)),
    ]


@settings(max_examples=60, deadline=None, database=None)
@given(st.data())
def test_round_trip(d):
    esize = d.draw(st.sampled_from([1, 2, 4, 8]))
    n = 8 * d.draw(st.integers(2, 64))  # whole rows of 8 for the 2-D Blosc2 chunk
    kind = d.draw(st.sampled_from(["random", "smooth", "constant"]))
    data = sample(kind, f"<u{esize}", (n,)).tobytes()
    info = ChunkInfo(len(data), esize, "/h")
    for spec in _specs(esize, n, d.draw):
        expected = data
        if spec.id == 5:  # n-bit keeps the low `precision` bits only
            kept = (1 << spec.client_data[6]) - 1
            expected = (np.frombuffer(data, f"<u{esize}") & kept).astype(f"<u{esize}").tobytes()
        for filters in [(spec,), (FilterSpec(2, 1, "", (esize,)), spec)][:1 if spec.id == 5 else 2]:
            stored, mask = encode_chunk(filters, data, info)
            assert decode_chunk(filters, stored, mask, info) == expected, (filters, mask)


@settings(max_examples=60, deadline=None, database=None)
@given(st.sampled_from(["<f4", ">f4", "<f8", ">f8"]), st.integers(0, 6), st.booleans())
def test_round_trip_scaleoffset_floats(dtype, factor, fill):
    """D-scaling keeps each value to within half a unit of its 10**-D place (plus the float's own
    rounding); the fill value comes back exactly."""
    data = (np.cumsum(RNG.normal(size=256)) * RNG.choice([0.01, 1, 100])).astype(dtype)
    data[::9] = -5.0
    fill_words = (int.from_bytes(np.array(-5.0, f"<{dtype[1:]}").tobytes(), "little") >> 32 * i & 0xFFFFFFFF
                  for i in range(np.dtype(dtype).itemsize // 4))
    cd = (0, factor, 256, 1, np.dtype(dtype).itemsize, 0, int(dtype[0] == ">"), int(fill), *fill_words)
    spec = FilterSpec(6, 1, "", cd + (0,) * (20 - len(cd)))
    info = ChunkInfo(data.nbytes, data.itemsize, "/s")
    stored, mask = encode_chunk((spec,), data.tobytes(), info)
    assert mask == 0
    got = np.frombuffer(decode_chunk((spec,), stored, mask, info), dtype)
    eps = np.finfo(dtype).eps * np.abs(data).max() * 4
    # Values within 10**-D of the fill value count as fill: they come back as it.
    assert np.all(np.abs(got - data) <= (1 if fill else 0.5) * 10.0 ** -factor + eps)
    if fill:
        assert np.all(got[::9] == -5.0)


def test_every_decoded_filter_has_an_encoder():
    assert ENCODERS.keys() == DECODERS.keys()
