"""The filter pipeline against libhdf5 (h5py + hdf5plugin) as the oracle.

Every test writes its own file with h5py, takes each stored chunk as it is on disk
(`read_direct_chunk`), decodes it with h5fs and compares with what h5py reads for that chunk.
"""

from __future__ import annotations

import zlib

import h5py
import hdf5plugin
import imagecodecs
import numpy as np
import pytest
from h5py import h5d, h5p, h5s, h5t, h5z

from h5fs.errors import ChecksumError, FormatError, Unsupported
from h5fs.format.messages.filter_pipeline import FilterSpec
from h5fs.storage.filters import ChunkInfo
from h5fs.storage.filters.fletcher32 import fletcher32
from h5fs.storage.filters.pipeline import decode_chunk
from h5fs.storage.filters.shuffle import unshuffle
from oracle import pipeline

SHAPE, CHUNKS = (50, 70), (16, 32)  # 4 x 3 chunks, the last row and column partial
RNG = np.random.default_rng(20240601)


def walk(shape=SHAPE, dtype="f4") -> np.ndarray:
    """Random-walk data: compressible like real measurements, unlike noise."""
    return (np.cumsum(RNG.normal(size=shape), axis=-1) * 100).astype(dtype)


def raw_read(ds: h5py.Dataset) -> np.ndarray:
    """The dataset's bytes in its file datatype, as libhdf5 decodes them."""
    size = ds.id.get_type().get_size()
    out = np.empty(ds.shape, f"V{size}")
    ds.id.read(h5s.ALL, h5s.ALL, out, mtype=ds.id.get_type())
    return out


def check_all_chunks(ds: h5py.Dataset) -> int:
    """Reopen the file first: libhdf5's chunk cache would otherwise serve the chunks as they were
    written, before a lossy filter (scale-offset with too few bits) changed them."""
    filename, name = ds.file.filename, ds.name
    ds.file.close()
    with h5py.File(filename, "r") as f:
        return _check_all_chunks(f[name])


def _check_all_chunks(ds: h5py.Dataset) -> int:
    filters = pipeline(ds)
    size = ds.id.get_type().get_size()
    expected = raw_read(ds)
    nbytes = int(np.prod(ds.chunks)) * size
    count = 0
    for sel in ds.iter_chunks():
        mask, stored = ds.id.read_direct_chunk(tuple(s.start for s in sel))
        out = decode_chunk(filters, stored, mask, ChunkInfo(nbytes, size, ds.name))
        assert isinstance(out, bytes) and len(out) == nbytes
        got = np.frombuffer(out, f"V{size}").reshape(ds.chunks)
        valid = tuple(slice(0, s.stop - s.start) for s in sel)
        assert got[valid].tobytes() == expected[sel].tobytes(), f"{ds.name} chunk {sel}"
        count += 1
    assert count > 1
    return count


@pytest.fixture
def h5(tmp_path):
    with h5py.File(tmp_path / "f.h5", "w", libver="latest") as f:
        yield f


# --- libhdf5's own filters -------------------------------------------------------------------

@pytest.mark.parametrize("level", [1, 4, 9])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("dtype", ["<f4", ">f8", "<i2", "u1"])
def test_deflate_shuffle(h5, level, shuffle, dtype):
    ds = h5.create_dataset("d", data=walk(dtype=dtype), chunks=CHUNKS, compression="gzip",
                           compression_opts=level, shuffle=shuffle)
    check_all_chunks(ds)


@pytest.mark.parametrize("kw", [dict(), dict(shuffle=True, compression="gzip")])
def test_fletcher32(h5, kw):
    ds = h5.create_dataset("d", data=walk(), chunks=CHUNKS, fletcher32=True, **kw)
    check_all_chunks(ds)


@pytest.mark.parametrize("opts", [("nn", 16), ("ec", 8), ("nn", 32), ("ec", 32)])
@pytest.mark.parametrize("dtype", ["<i4", ">i2", "<u1", "<f4", ">f8"])
def test_szip(h5, opts, dtype):
    ds = h5.create_dataset("d", data=walk(dtype=dtype), chunks=CHUNKS, compression="szip",
                           compression_opts=opts)
    check_all_chunks(ds)


def test_lzf(h5):
    ds = h5.create_dataset("d", data=walk(), chunks=CHUNKS, compression="lzf", shuffle=True)
    check_all_chunks(ds)


def _nbit_dataset(f: h5py.File, name: str, ftype, data: np.ndarray, extra=()) -> h5py.Dataset:
    dcpl = h5p.create(h5p.DATASET_CREATE)
    dcpl.set_chunk(CHUNKS)
    dcpl.set_filter(h5z.FILTER_NBIT, h5z.FLAG_OPTIONAL, ())
    for fid in extra:
        dcpl.set_filter(fid, h5z.FLAG_OPTIONAL, (4,) if fid == h5z.FILTER_DEFLATE else ())
    dsid = h5d.create(f.id, name.encode(), ftype, h5s.create_simple(data.shape), dcpl=dcpl)
    dsid.write(h5s.ALL, h5s.ALL, data)
    return h5py.Dataset(dsid)


@pytest.mark.parametrize("base,precision,offset", [
    (h5t.STD_I32LE, 12, 4), (h5t.STD_I32BE, 12, 4), (h5t.STD_U16LE, 9, 7),
    (h5t.STD_U16BE, 11, 2), (h5t.STD_I64LE, 40, 20), (h5t.STD_U8LE, 3, 2),
    (h5t.STD_I64BE, 63, 1), (h5t.STD_U32LE, 17, 15)])
def test_nbit_integers(h5, base, precision, offset):
    t = base.copy()
    t.set_precision(precision)
    t.set_offset(offset)
    signed = t.get_sign() == h5t.SGN_2
    lo, hi = (-(1 << precision - 1), 1 << precision - 1) if signed else (0, 1 << precision)
    data = RNG.integers(lo, hi, size=SHAPE)
    check_all_chunks(_nbit_dataset(h5, "d", t, data))


def test_nbit_float(h5):
    t = h5t.IEEE_F32LE.copy()  # a 24-bit float stored in 4 bytes at bit offset 4
    t.set_fields(27, 19, 8, 0, 19)
    t.set_offset(4)
    t.set_precision(24)
    check_all_chunks(_nbit_dataset(h5, "d", t, walk().astype("f4")))


def test_nbit_compound_with_array_and_deflate(h5):
    ti = h5t.STD_I32LE.copy()
    ti.set_precision(17)
    ti.set_offset(3)
    tb = h5t.STD_U16BE.copy()
    tb.set_precision(10)
    tb.set_offset(5)
    inner = h5t.create(h5t.COMPOUND, 3)  # a nested compound: another n-bit int and a byte
    tn = h5t.STD_U16LE.copy()
    tn.set_precision(7)
    inner.insert(b"x", 0, tn)
    inner.insert(b"y", 2, h5t.STD_U8LE)
    ct = h5t.create(h5t.COMPOUND, 4 + 8 + 6 + 1 + 3 + 3)
    ct.insert(b"a", 0, ti)
    ct.insert(b"f", 4, h5t.IEEE_F64LE)
    ct.insert(b"arr", 12, h5t.array_create(tb, (3,)))
    ct.insert(b"s", 18, h5t.STD_U8LE)
    ct.insert(b"in", 19, inner)
    st = h5t.C_S1.copy()
    st.set_size(3)
    ct.insert(b"str", 22, st)  # a string: packed whole ("no-op" type)
    mdt = np.dtype([("a", "<i4"), ("f", "<f8"), ("arr", "<u2", (3,)), ("s", "u1"),
                    ("in", [("x", "<u2"), ("y", "u1")]), ("str", "S3")])
    data = np.zeros(SHAPE, mdt)
    data["a"] = RNG.integers(-60000, 60000, SHAPE)
    data["f"] = RNG.normal(size=SHAPE)
    data["arr"] = RNG.integers(0, 1024, SHAPE + (3,))
    data["s"] = RNG.integers(0, 255, SHAPE)
    data["in"]["x"] = RNG.integers(0, 128, SHAPE)
    data["in"]["y"] = RNG.integers(0, 255, SHAPE)
    data["str"] = b"abc"
    mtype = h5t.py_create(mdt)
    dcpl = h5p.create(h5p.DATASET_CREATE)
    dcpl.set_chunk(CHUNKS)
    dcpl.set_filter(h5z.FILTER_NBIT, h5z.FLAG_OPTIONAL, ())
    dcpl.set_deflate(4)
    dsid = h5d.create(h5.id, b"c", ct, h5s.create_simple(SHAPE), dcpl=dcpl)
    dsid.write(h5s.ALL, h5s.ALL, data, mtype=mtype)
    check_all_chunks(h5py.Dataset(dsid))


@pytest.mark.parametrize("dtype", ["<i1", "u1", "<i2", ">i2", "<u2", "<i4", ">u4", "<i8", ">u8"])
@pytest.mark.parametrize("fill", [None, 7])
@pytest.mark.parametrize("minbits", [0, 5])
def test_scaleoffset_integers(h5, dtype, fill, minbits):
    data = RNG.integers(-100, 100, size=SHAPE) + (100 if dtype[-2] == "u" else 0)
    data = data.astype(dtype)
    data[::7, ::3] = 7  # the fill value, which the filter encodes as all-ones
    kw = {} if fill is None else {"fillvalue": fill}
    ds = h5.create_dataset("d", data=data, chunks=CHUNKS, scaleoffset=minbits, **kw)
    check_all_chunks(ds)


@pytest.mark.parametrize("dtype", ["<f4", ">f4", "<f8", ">f8"])
@pytest.mark.parametrize("fill", [None, -999.0])
@pytest.mark.parametrize("factor", [0, 2, 5])
def test_scaleoffset_floats(h5, dtype, fill, factor):
    data = walk(dtype=dtype) / 100
    data[::5, ::4] = -999.0
    kw = {} if fill is None else {"fillvalue": fill}
    ds = h5.create_dataset("d", data=data, chunks=CHUNKS, scaleoffset=factor, **kw)
    check_all_chunks(ds)


@pytest.mark.parametrize("dtype", ["<i8", ">u8", "<i4"])
def test_scaleoffset_wide_values(h5, dtype):
    """Spans needing more than 57 bits (the 8-byte-window fast path) or the full width."""
    info = np.iinfo(dtype)
    data = RNG.integers(info.min // 4, info.max // 4, size=SHAPE, dtype=dtype.lstrip("<>"))
    data = data.astype(dtype)
    ds = h5.create_dataset("d", data=data, chunks=CHUNKS, scaleoffset=0)
    check_all_chunks(ds)


def test_scaleoffset_constant_chunk(h5):
    ds = h5.create_dataset("d", data=np.full(SHAPE, 5, "i4"), chunks=CHUNKS, scaleoffset=0)
    check_all_chunks(ds)


def test_scaleoffset_then_deflate(h5):
    ds = h5.create_dataset("d", data=walk(dtype="i4"), chunks=CHUNKS, scaleoffset=0,
                           compression="gzip")
    check_all_chunks(ds)


# --- registered third-party filters (hdf5plugin) ---------------------------------------------

PLUGINS = {
    "lz4": hdf5plugin.LZ4(),
    "lz4-small-blocks": hdf5plugin.LZ4(nbytes=512),
    "blosc-lz4": hdf5plugin.Blosc(cname="lz4", shuffle=hdf5plugin.Blosc.SHUFFLE),
    "blosc-zstd": hdf5plugin.Blosc(cname="zstd", shuffle=hdf5plugin.Blosc.BITSHUFFLE),
    "blosc-zlib": hdf5plugin.Blosc(cname="zlib", shuffle=hdf5plugin.Blosc.NOSHUFFLE),
    "blosc2-lz4": hdf5plugin.Blosc2(cname="lz4", filters=hdf5plugin.Blosc2.SHUFFLE),
    "blosc2-zstd": hdf5plugin.Blosc2(cname="zstd", clevel=9, filters=hdf5plugin.Blosc2.BITSHUFFLE),
    "bzip2": hdf5plugin.BZip2(),
    "bitshuffle-lz4": hdf5plugin.Bitshuffle(cname="lz4"),
    "bitshuffle-zstd": hdf5plugin.Bitshuffle(cname="zstd"),
    "bitshuffle-none": hdf5plugin.Bitshuffle(cname="none"),
    "bitshuffle-lz4-block": hdf5plugin.Bitshuffle(nelems=64, cname="lz4"),
    "zstd": hdf5plugin.Zstd(),
}


@pytest.mark.parametrize("name", PLUGINS)
@pytest.mark.parametrize("dtype", ["<f4", ">i8", "u1"])
def test_plugins(h5, name, dtype):
    data = walk(dtype=dtype)
    data[:16, :32] = 0  # an all-zero chunk (Blosc2 stores it as a special run)
    ds = h5.create_dataset("d", data=data, chunks=CHUNKS, **PLUGINS[name])
    check_all_chunks(ds)


@pytest.mark.parametrize("shape,chunks", [((700, 900), (300, 700)), ((33, 45, 17), (10, 44, 17)),
                                          ((100_000,), (30_000,))])
def test_blosc2_block_layouts(h5, shape, chunks):
    """Large chunks get b2nd blocks smaller than the chunk, padded at the edges."""
    data = walk(shape, "f8")
    data[: chunks[0] // 2] = np.nan
    ds = h5.create_dataset("d", data=data, chunks=chunks, **hdf5plugin.Blosc2(cname="lz4"))
    check_all_chunks(ds)


# --- hostile and odd chunks ------------------------------------------------------------------

INFO = ChunkInfo(16 * 32 * 4, 4, "dataset /x")
DEFLATE = FilterSpec(1, 0, "", (4,))
SHUFFLE = FilterSpec(2, 0, "", (4,))
FLETCHER = FilterSpec(3, 0, "", ())


def test_corrupt_fletcher32_raises(h5):
    ds = h5.create_dataset("d", data=walk(), chunks=CHUNKS, fletcher32=True, compression="gzip")
    mask, stored = ds.id.read_direct_chunk((0, 0))
    bad = bytearray(stored)
    bad[10] ^= 0x40
    with pytest.raises(ChecksumError, match="/d"):
        decode_chunk(pipeline(ds), bytes(bad), mask, ChunkInfo(16 * 32 * 4, 4, "/d"))


@pytest.mark.parametrize("n", [0, 1, 2, 3, 361, 720, 721, 65535 * 2 + 1, 200_001])
def test_fletcher32_matches_libhdf5(n):
    for data in (RNG.integers(0, 256, n, dtype=np.uint8).tobytes(), b"\xff" * n, b"\0" * n):
        assert fletcher32(data) == imagecodecs.h5checksum_fletcher32(data)


def test_garbage_into_deflate_is_format_error():
    with pytest.raises(FormatError, match=r"dataset /x: filter 'deflate' \(id 1\)"):
        decode_chunk((DEFLATE,), b"this is not a zlib stream", 0, INFO)


def test_truncated_deflate_is_format_error():
    stream = zlib.compress(walk(CHUNKS).tobytes())
    with pytest.raises(FormatError):
        decode_chunk((DEFLATE,), stream[:-20], 0, INFO)


def test_deflate_bomb_rejected_without_allocating(monkeypatch):
    """A stream inflating far past the chunk size is refused, and neither inflater is allowed to
    produce more than the chunk size (+1 byte to notice)."""
    bomb = zlib.compress(b"\0" * (256 << 20), 9)  # 256 MiB of zeros in ~250 KiB
    seen = []
    real = zlib.decompressobj

    class Spy:
        def __init__(self):
            self.d = real()

        def decompress(self, data, max_length=0):
            seen.append(max_length)
            return self.d.decompress(data, max_length)

    monkeypatch.setattr(zlib, "decompressobj", Spy)
    with pytest.raises(FormatError, match="more than"):
        decode_chunk((DEFLATE,), bomb, 0, INFO)
    assert seen and all(0 < m <= INFO.nbytes + 1 for m in seen)


def test_wrong_decoded_size_is_format_error():
    with pytest.raises(FormatError, match="dataset /x: chunk decodes to 100 bytes"):
        decode_chunk((DEFLATE,), zlib.compress(b"a" * 100), 0, INFO)


def test_codec_library_errors_become_format_errors():
    for spec in (FilterSpec(32015, 0, "", ()), FilterSpec(32000, 0, "", ()),
                 FilterSpec(32001, 0, "", ()), FilterSpec(307, 0, "", ())):
        with pytest.raises(FormatError, match=f"id {spec.id}"):
            decode_chunk((spec,), b"\x01" * 64, 0, INFO)


def test_unknown_filter_is_unsupported():
    spec = FilterSpec(12345, 0, "foo", ())
    with pytest.raises(Unsupported, match=r"dataset /x: unsupported filter 'foo' \(id 12345\)"):
        decode_chunk((DEFLATE, spec), b"", 0, INFO)


def test_unknown_filter_skipped_by_mask_is_fine():
    data = walk(CHUNKS).tobytes()
    spec = FilterSpec(12345, 1, "foo", ())
    assert decode_chunk((DEFLATE, spec), zlib.compress(data), 0b10, INFO) == data


def test_filter_mask_from_write_direct_chunk(h5):
    """A chunk written with shuffle skipped (mask bit 0) next to normal ones."""
    ds = h5.create_dataset("d", shape=SHAPE, dtype="f4", chunks=CHUNKS, shuffle=True,
                           compression="gzip")
    data = walk(CHUNKS, "f4")
    ds.id.write_direct_chunk((16, 32), zlib.compress(data.tobytes()), filter_mask=0b01)
    ds[:16, :32] = data
    for offset in [(16, 32), (0, 0)]:
        mask, stored = ds.id.read_direct_chunk(offset)
        assert mask == (0b01 if offset == (16, 32) else 0)
        out = decode_chunk(pipeline(ds), stored, mask, ChunkInfo(data.nbytes, 4, "/d"))
        assert out == data.tobytes()
    np.testing.assert_array_equal(ds[16:32, 32:64], data)


def test_optional_filter_skipped_by_libhdf5(h5):
    """LZF is optional: a chunk it cannot shrink is stored raw with its mask bit set."""
    data = RNG.integers(0, 256, size=SHAPE, dtype=np.uint8)  # incompressible
    ds = h5.create_dataset("d", data=data, chunks=CHUNKS, compression="lzf")
    masks = {ds.id.read_direct_chunk(tuple(s.start for s in sel))[0] for sel in ds.iter_chunks()}
    assert 1 in masks
    check_all_chunks(ds)


def test_unshuffle_remainder():
    """Bytes past the last whole element are stored unshuffled."""
    data = walk((10,), "<f4").tobytes()
    shuffled = np.frombuffer(data, np.uint8).reshape(10, 4).T.tobytes() + b"xyz"
    assert bytes(unshuffle(shuffled, 4)) == data + b"xyz"
    assert bytes(unshuffle(b"abc", 4)) == b"abc"


def test_bounded_plugin_outputs():
    """Headers claiming more than the chunk can hold are refused before decoding."""
    lz4 = imagecodecs.lz4h5_encode(b"\0" * (INFO.nbytes * 4))
    with pytest.raises(FormatError, match="more than"):
        decode_chunk((FilterSpec(32004, 0, "", ()),), lz4, 0, INFO)
    zst = imagecodecs.zstd_encode(b"\0" * (INFO.nbytes * 4))
    with pytest.raises(FormatError):
        decode_chunk((FilterSpec(32015, 0, "", ()),), zst, 0, INFO)
    bz = imagecodecs.bz2_encode(b"\0" * (INFO.nbytes * 4))
    with pytest.raises(FormatError, match="more than"):
        decode_chunk((FilterSpec(307, 0, "", ()),), bz, 0, INFO)


def test_malformed_nbit_parameters():
    spec = FilterSpec(5, 1, "", (8, 0, 512, 1, 4, 0, 40, 4))  # precision + offset > 32 bits
    with pytest.raises(FormatError, match="nbit"):
        decode_chunk((spec,), b"\0" * 4096, 0, ChunkInfo(2048, 4, "/n"))
    spec = FilterSpec(5, 1, "", (6, 0, 512, 1, 4, 0))  # stops short of the type it describes
    with pytest.raises(FormatError, match="shorter"):
        decode_chunk((spec,), b"\0" * 4096, 0, ChunkInfo(2048, 4, "/n"))
