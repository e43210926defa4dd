"""Numbers NumPy cannot hold as stored: non-IEEE / VAX floats, integers with padding bits.

Oracle: libhdf5 (through h5py's low-level API). Element bit patterns are written as stored
(memory type = file type, so libhdf5 copies them unconverted), then read back by libhdf5 into a
native double / int64: its conversion (H5T__conv_f_f, H5T__conv_i_i) is the reference, and our
`.npy` values must match it bit for bit (NaN payloads included). The raw view must be exactly
the bytes written. Values written from float64 through libhdf5's own conversion are checked the
same way.

VAX order, as libhdf5 2.0 behaves: its datatype decoder honours the VAX flag only in version-3
messages (a VAX-flagged float in a version-1 message, which is how H5Tset_order(VAX) types are
stored, reads as big-endian); from version 3 it reverses the 16-bit words. Its conversion *to*
VAX order does not produce that layout, so VAX data is checked on the read side only (the
"written by libhdf5" case compares reads of whatever libhdf5 stored).
"""

from __future__ import annotations

import struct

import h5py
import numpy as np
import pytest
from h5py import h5t

from h5fs.format.codec import Reader, Sizes
from h5fs.format.messages import datatype as D
from h5fs.model.dtypes import describe, needs_conversion, npy_dtype
from h5fs.model.file import H5File
from h5fs.model.numeric_conversion import convert
from h5fs.model.values import to_npy
from h5fs.model.varlen_views import needs_decoding

# ------------------------------------------------------------------------------------- types


VAX3 = "vax3"   # VAX order in a version-3 datatype message (libhdf5 honours the flag from version 3)


def message_version_3(tid):
    """The same type, as libhdf5 decodes it from a version-3 datatype message. libhdf5 2.0 encodes
    H5Tset_order(VAX) types in version-1 messages, where its decoder ignores the VAX bit."""
    enc = bytearray(tid.encode())
    enc[2] = (3 << 4) | (enc[2] & 0x0F)
    return h5t.decode(bytes(enc))


def float_type(spos, epos, esize, mpos, msize, size, bias, norm=h5t.NORM_IMPLIED, order=h5t.ORDER_LE,
               precision=None, offset=0):
    """A libhdf5 float type with the given layout (fields are bit positions in the element)."""
    t = (h5t.IEEE_F64LE if size > 4 else h5t.IEEE_F32LE).copy()
    if size > t.get_size():
        t.set_size(size)
        t.set_precision(8 * size)
    t.set_fields(spos, epos, esize, mpos, msize)
    if size < t.get_size():
        t.set_size(size)
    if precision is not None:
        t.set_offset(offset)
        t.set_precision(precision)
    t.set_ebias(bias)
    t.set_norm(norm)
    t.set_order(h5t.ORDER_VAX if order == VAX3 else order)
    return message_version_3(t) if order == VAX3 else t


FLOATS = {
    # name: (spos, epos, esize, mpos, msize, size, bias, norm, order, precision, offset)
    "bfloat16": (15, 7, 8, 0, 7, 2, 127, h5t.NORM_IMPLIED, h5t.ORDER_LE, None, 0),
    "bfloat16_be": (15, 7, 8, 0, 7, 2, 127, h5t.NORM_IMPLIED, h5t.ORDER_BE, None, 0),
    "e4m3": (7, 3, 4, 0, 3, 1, 7, h5t.NORM_IMPLIED, h5t.ORDER_LE, None, 0),
    "float24": (23, 16, 7, 0, 16, 3, 63, h5t.NORM_IMPLIED, h5t.ORDER_LE, None, 0),
    "float24_be": (23, 16, 7, 0, 16, 3, 63, h5t.NORM_IMPLIED, h5t.ORDER_BE, None, 0),
    "float24_in_32": (31, 24, 7, 8, 16, 4, 63, h5t.NORM_IMPLIED, h5t.ORDER_LE, 24, 8),
    "f32_bias100": (31, 23, 8, 0, 23, 4, 100, h5t.NORM_IMPLIED, h5t.ORDER_LE, None, 0),
    "f32_norm_none": (31, 23, 8, 0, 23, 4, 127, h5t.NORM_NONE, h5t.ORDER_LE, None, 0),
    "f64_exp15": (63, 48, 15, 0, 48, 8, 16383, h5t.NORM_IMPLIED, h5t.ORDER_LE, None, 0),
    "f64_exp15_be": (63, 48, 15, 0, 48, 8, 16383, h5t.NORM_IMPLIED, h5t.ORDER_BE, None, 0),
    "f64_mant60": (63, 60, 3, 0, 60, 8, 3, h5t.NORM_IMPLIED, h5t.ORDER_LE, None, 0),
    "vax_f": (31, 23, 8, 0, 23, 4, 129, h5t.NORM_IMPLIED, VAX3, None, 0),
    "vax_g": (63, 52, 11, 0, 52, 8, 1025, h5t.NORM_IMPLIED, VAX3, None, 0),
    "vax_h": (127, 112, 15, 0, 112, 16, 16385, h5t.NORM_IMPLIED, VAX3, None, 0),
    "vax_flag_v1": (63, 52, 11, 0, 52, 8, 1025, h5t.NORM_IMPLIED, h5t.ORDER_VAX, None, 0),
    "vax_flag_v1_ieee": (31, 23, 8, 0, 23, 4, 127, h5t.NORM_IMPLIED, h5t.ORDER_VAX, None, 0),
    "x87_in_10": (79, 64, 15, 0, 64, 10, 16383, h5t.NORM_NONE, h5t.ORDER_LE, None, 0),
    "binary128": (127, 112, 15, 0, 112, 16, 16383, h5t.NORM_IMPLIED, h5t.ORDER_LE, None, 0),
    "binary128_be": (127, 112, 15, 0, 112, 16, 16383, h5t.NORM_IMPLIED, h5t.ORDER_BE, None, 0),
    "f96_exp20": (95, 75, 20, 3, 72, 12, 500000, h5t.NORM_IMPLIED, h5t.ORDER_LE, None, 0),
}




def make_float(name):
    spos, epos, esize, mpos, msize, size, bias, norm, order, prec, off = FLOATS[name]
    return float_type(spos, epos, esize, mpos, msize, size, bias, norm, order, prec, off)


def stored_bytes(value: int, size: int, order: int) -> bytes:
    """An element's bits (bit 0 least significant) -> its stored bytes."""
    le = value.to_bytes(size, "little")
    if order in (h5t.ORDER_BE, h5t.ORDER_VAX):          # VAX flag in a version-1 message: big-endian
        return le[::-1]
    if order == VAX3 and size % 4 == 0:                 # 16-bit words in reverse order
        words = [le[i:i + 2] for i in range(0, size, 2)]
        return b"".join(reversed(words))
    return le


def float_patterns(name, n=3000, seed=0) -> list[int]:
    """Element bit patterns: random fields with the edge cases over-represented."""
    spos, epos, esize, mpos, msize, size, bias, norm, order, prec, off = FLOATS[name]
    rng = np.random.default_rng(seed)
    emax = (1 << esize) - 1
    exps = [0, 1, 2, emax - 1, emax, bias, bias - 1, bias + 1, emax // 2]
    exps += [(bias + d) for d in (-1022, -1023, -1074, -1075, -1076, -1100, 1023, 1024, 1025)]
    exps = [e for e in exps if 0 <= e <= emax]
    mones = (1 << msize) - 1
    mants = [0, mones, 1, 1 << (msize - 1), (1 << (msize - 1)) | 1, mones >> 1, mones - 1]
    if msize > 53:
        # around float64's rounding point: the first dropped bit and the bits next to it
        cut = msize - 53
        mants += [1 << cut, (1 << cut) - 1, mones ^ ((1 << cut) - 1), mones ^ (1 << cut), 3 << (cut - 1)]
    out = []
    for i in range(n):
        r = rng.random()
        e = int(rng.choice(exps)) if r < 0.5 else int(rng.integers(0, emax + 1))
        r = rng.random()
        m = int(rng.choice(mants)) if r < 0.4 else int.from_bytes(rng.bytes((msize + 7) // 8), "little") & mones
        s = int(rng.integers(0, 2))
        v = (s << spos) | (e << epos) | (m << mpos)
        # padding bits (outside the fields) random: they must be ignored
        used = (1 << spos) | (emax << epos) | (mones << mpos)
        v |= int.from_bytes(rng.bytes(size), "little") & ~used & ((1 << 8 * size) - 1)
        out.append(v)
    return out


def write_raw(parent, name: str, tid, data: bytes, count: int, chunks=None, compression=False):
    """A dataset of type tid holding `data` as stored (no conversion: memory type = file type)."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    if chunks:
        dcpl.set_chunk(chunks)
        if compression:
            dcpl.set_deflate(4)
    ds = h5py.h5d.create(parent.id, name.encode(), tid, h5py.h5s.create_simple((count,)), dcpl=dcpl)
    buf = np.frombuffer(data, f"V{tid.get_size()}", count).copy()
    ds.write(h5py.h5s.ALL, h5py.h5s.ALL, buf, mtype=tid)
    return ds


def oracle(path, name, mtype, dtype, count):
    with h5py.File(path, "r") as f:
        out = np.empty(count, dtype)
        f[name].id.read(h5py.h5s.ALL, h5py.h5s.ALL, out, mtype=mtype)
    return out


def engine(path, name):
    ds = H5File.open(str(path)).resolve(name)
    return ds, ds.read_array(), ds.read_raw(0, ds.raw_size)


def same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype
    bad = np.flatnonzero(a.view("u8") != b.view("u8")) if a.dtype == np.float64 else np.flatnonzero(a != b)
    assert bad.size == 0, f"{bad.size} differ, first at {bad[:5]}: ours {a[bad[:5]]} libhdf5 {b[bad[:5]]}"


# ------------------------------------------------------------------------------------ floats

@pytest.mark.parametrize("name", list(FLOATS))
def test_float_bit_patterns_match_libhdf5(tmp_path, name):
    """Every stored pattern (zeros, denormals, inf, NaN, rounding edges, out of float64's range)
    reads as libhdf5 converts it to a native double."""
    tid = make_float(name)
    size, order = tid.get_size(), FLOATS[name][8]
    pats = float_patterns(name)
    data = b"".join(stored_bytes(v, size, order) for v in pats)
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        write_raw(f, "contig", tid, data, len(pats))
        write_raw(f, "chunked", tid, data, len(pats), chunks=(500,), compression=True)
    expected = oracle(path, "contig", h5t.NATIVE_DOUBLE, "f8", len(pats))
    for dname in ("contig", "chunked"):
        ds, got, raw = engine(path, dname)
        assert ds.npy_dtype == np.dtype("<f8") and got.shape == (len(pats),)
        same_bits(got, expected)
        assert raw == data                         # the raw view: the stored bytes
        assert ds.raw_size == len(data)


def random_layout(rng):
    """A random float layout: 1-16 bytes, sign/exponent/mantissa in any order with gaps."""
    size = int(rng.integers(1, 17))
    bits = 8 * size
    esize = int(rng.integers(2, min(bits - 2, 20) + 1))
    msize = int(rng.integers(1, bits - esize))
    free = bits - esize - msize - 1
    gaps = sorted(int(g) for g in rng.integers(0, free + 1, 3))
    order = list(rng.permutation(["s", "e", "m"]))
    width = {"s": 1, "e": esize, "m": msize}
    pos, cur = {}, gaps[0]
    for k, part in enumerate(order):
        pos[part] = cur
        cur += width[part] + (gaps[k + 1] - gaps[k] if k < 2 else 0)
    bias = int(rng.integers(0, 1 << esize))
    norm = h5t.NORM_IMPLIED if rng.random() < 0.6 else h5t.NORM_NONE
    byte_order = h5t.ORDER_BE if rng.random() < 0.5 else h5t.ORDER_LE
    return float_type(pos["s"], pos["e"], esize, pos["m"], msize, size, bias, norm, byte_order)


@pytest.mark.parametrize("seed", range(4))
def test_random_layouts_match_libhdf5(tmp_path, seed):
    """Random layouts, random stored bytes: libhdf5's reads and ours agree bit for bit."""
    rng = np.random.default_rng(100 + seed)
    path = tmp_path / "r.h5"
    for _ in range(8):
        tid = random_layout(rng)
        n = 500
        data = rng.bytes(n * tid.get_size())
        with h5py.File(path, "w") as f:
            write_raw(f, "x", tid, data, n)
        expected = oracle(path, "x", h5t.NATIVE_DOUBLE, "f8", n)
        _, got, raw = engine(path, "x")
        same_bits(got, expected)
        assert raw == data


@pytest.mark.parametrize("name", ["bfloat16", "bfloat16_be", "float24", "f64_exp15", "vax_f",
                                               "vax_g", "x87_in_10", "binary128", "f32_norm_none",
                                               "float24_in_32"])
def test_values_written_by_libhdf5(tmp_path, name):
    """float64 values converted by libhdf5 on write, read back by libhdf5 and by us."""
    tid = make_float(name)
    rng = np.random.default_rng(5)
    vals = np.concatenate([
        [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.140625, -1.5, 1e-3, 65504.0, 1e30, -1e-30, 1e-300, 1e300,
         np.inf, -np.inf, np.nan, 5e-324, 2.2250738585072014e-308, np.finfo("f8").max],
        rng.normal(0, 1e4, 500), rng.normal(0, 1, 500) * 10.0 ** rng.integers(-40, 40, 500)])
    path = tmp_path / "w.h5"
    with h5py.File(path, "w") as f:
        ds = h5py.h5d.create(f.id, b"x", tid, h5py.h5s.create_simple(vals.shape))
        ds.write(h5py.h5s.ALL, h5py.h5s.ALL, vals, mtype=h5t.NATIVE_DOUBLE)
        stored = f["x"].id.get_offset()
    expected = oracle(path, "x", h5t.NATIVE_DOUBLE, "f8", len(vals))
    ds, got, raw = engine(path, "x")
    same_bits(got, expected)
    with open(path, "rb") as fh:
        fh.seek(stored)
        assert raw == fh.read(len(vals) * tid.get_size())
    if name in ("binary128", "x87_in_10"):
        # wider than float64 in range and precision: every value reads back exactly
        finite = np.isfinite(vals)
        assert np.array_equal(got[finite], vals[finite])
        assert np.array_equal(np.isnan(got), np.isnan(vals))


def test_bfloat16_exact_values(tmp_path):
    """bfloat16 holds the top 16 bits of a float32: every pattern has a known float64 value."""
    pats = np.arange(1 << 16, dtype="<u2")
    path = tmp_path / "bf.h5"
    with h5py.File(path, "w") as f:
        write_raw(f, "x", make_float("bfloat16"), pats.tobytes(), pats.size)
    _, got, raw = engine(path, "x")
    with np.errstate(invalid="ignore"):             # signalling NaNs
        as_f32 = (pats.astype("<u4") << 16).view("<f4").astype("<f8")
    finite = np.isfinite(as_f32)
    assert np.array_equal(got[finite], as_f32[finite])
    assert np.array_equal(np.isinf(got), np.isinf(as_f32)) and np.array_equal(np.isnan(got), np.isnan(as_f32))
    assert np.array_equal(np.signbit(got), np.signbit(as_f32))
    assert raw == pats.tobytes()


def test_converted_numbers_are_served_per_range(tmp_path):
    """No whole-dataset decode: the .npy view converts only the elements each read covers, and
    reads at odd offsets agree with the whole view (chunked + gzip, several chunks)."""
    pats = np.arange(1 << 16, dtype="<u2")
    path = tmp_path / "bf_chunked.h5"
    with h5py.File(path, "w") as f:
        write_raw(f, "x", make_float("bfloat16"), pats.tobytes(), pats.size, chunks=(1000,), compression=True)
    ds = H5File.open(str(path)).resolve("x")
    assert ds.materialized is None and ds.converted
    whole = ds.read_npy_body(0, ds.npy_body_size)
    assert len(whole) == pats.size * 8
    rng = np.random.default_rng(5)
    for _ in range(50):
        a = int(rng.integers(0, len(whole)))
        n = int(rng.integers(0, 20000))
        assert ds.read_npy_body(a, n) == whole[a:a + n]


def test_msb_set_normalization(tmp_path):
    """libhdf5 does not convert MSB-set mantissas; the explicit leading bit is decoded as stored:
    value = M * 2**(e - bias + 1 - msize)."""
    tid = float_type(31, 23, 8, 0, 23, 4, 127, norm=h5t.NORM_MSBSET)
    cases = {  # (sign, exponent, mantissa) -> value
        (0, 127, 0b11 << 21): 1.5, (1, 127, 1 << 22): -1.0, (0, 130, 1 << 22): 8.0,
        (0, 0, 0): 0.0, (1, 0, 0): -0.0, (0, 255, 0): np.inf, (1, 255, 1 << 22): -np.inf,
        (0, 255, 3): np.nan, (0, 127, (1 << 23) - 1): 2.0 - 2.0 ** -22,
    }
    data = b"".join(stored_bytes((s << 31) | (e << 23) | m, 4, h5t.ORDER_LE) for s, e, m in cases)
    path = tmp_path / "msb.h5"
    with h5py.File(path, "w") as f:
        write_raw(f, "x", tid, data, len(cases))
    ds, got, raw = engine(path, "x")
    expected = np.array(list(cases.values()))
    np.testing.assert_array_equal(got, expected)
    assert np.array_equal(np.signbit(got), np.signbit(expected))
    assert raw == data
    assert "MSB set" in ds.facts()["dtype"]


def test_descriptions(tmp_path):
    cases = {
        "bfloat16": "float(16 bits: sign 15, exponent 8@7 bias 127, mantissa 7@0)",
        "bfloat16_be": "float(16 bits, big-endian: sign 15, exponent 8@7 bias 127, mantissa 7@0)",
        "vax_f": "float(32 bits, VAX order: sign 31, exponent 8@23 bias 129, mantissa 23@0)",
        "vax_flag_v1": "float(64 bits, big-endian (VAX flag in a version-1 message, read as libhdf5 reads it): "
                       "sign 63, exponent 11@52 bias 1025, mantissa 52@0)",
        "x87_in_10": "float(80 bits: sign 79, exponent 15@64 bias 16383, mantissa 64@0, no normalization)",
    }
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        for name in cases:
            write_raw(f, name, make_float(name), bytes(make_float(name).get_size()), 1)
    hf = H5File.open(str(path))
    for name, text in cases.items():
        assert hf.resolve(name).facts()["dtype"] == text, name


def test_complex_of_half_floats(tmp_path):
    """Complex numbers NumPy has no type for: each part converted, complex128."""
    parts = np.array([1.5, -2.0, 0.0, np.inf, 65504.0, -6e-8, 1 / 3, 7.0], "<f2")
    path = tmp_path / "c.h5"
    with h5py.File(path, "w") as f:
        write_raw(f, "c", h5t.COMPLEX_IEEE_F16LE, parts.tobytes(), parts.size // 2)
    ds, got, raw = engine(path, "c")
    assert got.dtype == np.dtype("<c16")
    expected = np.empty(parts.size // 2, "c16")
    expected.real, expected.imag = parts[0::2], parts[1::2]
    np.testing.assert_array_equal(got, expected)
    assert raw == parts.tobytes()


# ---------------------------------------------------------------------------------- integers

def int_type(base, precision, offset, size=None, order=None):
    t = base.copy()
    if size is not None and size > t.get_size():
        t.set_size(size)
    t.set_offset(0)
    t.set_precision(precision)
    t.set_offset(offset)
    if size is not None and size < t.get_size():
        t.set_size(size)
    if order is not None:
        t.set_order(order)
    return t


INTS = {
    "i32_12at4": (h5t.STD_I32LE, 12, 4, None, None),
    "u32_12at4": (h5t.STD_U32LE, 12, 4, None, None),
    "i32_12at4_be": (h5t.STD_I32BE, 12, 4, None, None),
    "u32_12at4_be": (h5t.STD_U32BE, 12, 4, None, None),
    "i16_9at0": (h5t.STD_I16LE, 9, 0, None, None),
    "u16_12at0": (h5t.STD_U16LE, 12, 0, None, None),
    "i8_3at5": (h5t.STD_I8LE, 3, 5, None, None),
    "i24": (h5t.STD_I32LE, 24, 0, 3, None),
    "u24_be": (h5t.STD_U32BE, 24, 0, 3, None),
    "i64_63at1": (h5t.STD_I64BE, 63, 1, None, None),
    "u64_60at3": (h5t.STD_U64LE, 60, 3, None, None),
    "i128_60at50": (h5t.STD_I64LE, 60, 50, 16, None),
}
INT_NPY = {"i32_12at4": "<i4", "u32_12at4": "<u4", "i32_12at4_be": ">i4", "u32_12at4_be": ">u4",
           "i16_9at0": "<i2", "u16_12at0": "<u2", "i8_3at5": "|i1", "i24": "<i4", "u24_be": ">u4",
           "i64_63at1": ">i8", "u64_60at3": "<u8", "i128_60at50": "<i8"}


@pytest.mark.parametrize("name", list(INTS))
def test_integers_with_padding_match_libhdf5(tmp_path, name):
    base, prec, off, size, order = INTS[name]
    tid = int_type(base, prec, off, size, order)
    size = tid.get_size()
    rng = np.random.default_rng(2)
    n = 2000
    data = rng.bytes(n * size)                       # random values and random padding bits
    path = tmp_path / "i.h5"
    with h5py.File(path, "w") as f:
        write_raw(f, "x", tid, data, n)
        write_raw(f, "chunked", tid, data, n, chunks=(300,))
    signed = tid.get_sign() == h5t.SGN_2
    expected = oracle(path, "x", h5t.NATIVE_INT64 if signed else h5t.NATIVE_UINT64, "i8" if signed else "u8", n)
    for dname in ("x", "chunked"):
        ds, got, raw = engine(path, dname)
        assert got.dtype == np.dtype(INT_NPY[name]) == ds.npy_dtype
        np.testing.assert_array_equal(got.astype("i8" if signed else "u8"), expected)
        assert raw == data
    assert f"({prec}-bit at offset {off})" in ds.facts()["dtype"] or size not in (1, 2, 4, 8)


def test_integers_written_by_libhdf5(tmp_path):
    tid = int_type(h5t.STD_I32LE, 12, 4)
    vals = np.array([0, 1, -1, 2047, -2048, 100, -100], "i8")
    path = tmp_path / "iw.h5"
    with h5py.File(path, "w") as f:
        ds = h5py.h5d.create(f.id, b"x", tid, h5py.h5s.create_simple(vals.shape))
        ds.write(h5py.h5s.ALL, h5py.h5s.ALL, vals, mtype=h5t.NATIVE_INT64)
    _, got, raw = engine(path, "x")
    np.testing.assert_array_equal(got, vals.astype("<i4"))
    assert np.frombuffer(raw, "<i4").tolist() == [(int(v) & 0xFFF) << 4 for v in vals]


def test_bitfields_stay_raw(tmp_path):
    tid = h5t.STD_B16LE.copy()
    path = tmp_path / "b.h5"
    with h5py.File(path, "w") as f:
        write_raw(f, "x", tid, np.array([1, 0xFFFF, 0x1234], "<u2").tobytes(), 3)
    ds, got, _ = engine(path, "x")
    assert ds.materialized is None and got.tolist() == [1, 0xFFFF, 0x1234]


# -------------------------------------------------------------------- compounds, arrays, attrs

def test_compound_and_array_members(tmp_path):
    bf = make_float("bfloat16")
    i12 = int_type(h5t.STD_I32LE, 12, 4)
    arr = h5t.array_create(bf, (2, 3))
    cmp = h5t.create(h5t.COMPOUND, 2 + 4 + 8 + 12)
    cmp.insert(b"b", 0, bf)
    cmp.insert(b"i", 2, i12)
    cmp.insert(b"d", 6, h5t.IEEE_F64LE)
    cmp.insert(b"a", 14, arr)
    n = 50
    rng = np.random.default_rng(9)
    recs = []
    for k in range(n):
        b = rng.integers(0, 1 << 16)
        i = int(rng.integers(0, 1 << 32))
        d = float(rng.normal())
        a = rng.integers(0, 1 << 16, 6)
        recs.append(struct.pack("<HIdHHHHHH", b, i, d, *a))
    data = b"".join(recs)
    path = tmp_path / "cmp.h5"
    with h5py.File(path, "w") as f:
        write_raw(f, "c", cmp, data, n)
        write_raw(f, "a", arr, b"".join(r[14:] for r in recs), n)
        mem = h5t.create(h5t.COMPOUND, 8 + 8 + 8 + 48)
        mem.insert(b"b", 0, h5t.NATIVE_DOUBLE)
        mem.insert(b"i", 8, h5t.NATIVE_INT64)
        mem.insert(b"d", 16, h5t.NATIVE_DOUBLE)
        mem.insert(b"a", 24, h5t.array_create(h5t.NATIVE_DOUBLE, (2, 3)))
        out = np.empty(n, [("b", "f8"), ("i", "i8"), ("d", "f8"), ("a", "f8", (2, 3))])
        f["c"].id.read(h5py.h5s.ALL, h5py.h5s.ALL, out, mtype=mem)
        aout = np.empty((n, 2, 3), "f8")
        f["a"].id.read(h5py.h5s.ALL, h5py.h5s.ALL, aout, mtype=h5t.array_create(h5t.NATIVE_DOUBLE, (2, 3)))
    ds, got, raw = engine(path, "c")
    assert raw == data
    assert got.dtype == np.dtype([("b", "<f8"), ("i", "<i4"), ("d", "<f8"), ("a", "<f8", (2, 3))])
    assert ds.npy_dtype == got.dtype
    for field in ("b", "i", "d", "a"):
        np.testing.assert_array_equal(got[field], out[field])
    ds = H5File.open(str(path)).resolve("a")
    raw = ds.read_raw(0, ds.raw_size)
    # an array datatype's view: its dims follow the dataspace's, as h5py reads it
    got = ds.read_array()
    assert (ds.npy_dtype, ds.npy_shape, ds.npy_element_dtype) == (np.dtype("<f8"), (n, 2, 3), np.dtype(("<f8", (2, 3))))
    np.testing.assert_array_equal(got, aout)
    assert raw == b"".join(r[14:] for r in recs)


def test_attributes(tmp_path):
    bf = make_float("bfloat16")
    i12 = int_type(h5t.STD_I32LE, 12, 4)
    vals = np.array([1.0, -2.5, 3.140625, 1e-3])
    path = tmp_path / "attr.h5"
    with h5py.File(path, "w") as f:
        g = f.create_group("g")
        a = h5py.h5a.create(g.id, b"bf", bf, h5py.h5s.create_simple(vals.shape))
        a.write(vals, mtype=h5t.NATIVE_DOUBLE)
        s = h5py.h5a.create(g.id, b"i12", i12, h5py.h5s.create(h5py.h5s.SCALAR))
        s.write(np.array(-7, "i8"), mtype=h5t.NATIVE_INT64)
        expected = np.empty(vals.shape, "f8")
        h5py.h5a.open(g.id, b"bf").read(expected, mtype=h5t.NATIVE_DOUBLE)
    attrs = {a.name: a.value for a in H5File.open(str(path)).resolve("g").attributes()}
    same_bits(attrs["bf"], expected)
    assert attrs["i12"].shape == () and attrs["i12"].dtype == np.dtype("<i4") and int(attrs["i12"]) == -7


# ------------------------------------------------------------------------- types and wiring

def _dec(tid) -> D.Datatype:
    return D.decode(Reader(tid.encode()[2:], 0, Sizes(), "datatype"))


def test_wiring_and_dtypes():
    bf = _dec(make_float("bfloat16"))
    assert needs_conversion(bf) and needs_decoding(bf)
    assert npy_dtype(bf) == np.dtype("<f8")
    assert not needs_conversion(_dec(h5t.IEEE_F32LE)) and not needs_decoding(_dec(h5t.IEEE_F32LE))
    assert not needs_conversion(_dec(h5t.STD_I32BE))
    assert not needs_conversion(_dec(h5t.IEEE_F16LE))          # NumPy holds IEEE half exactly
    assert needs_conversion(_dec(h5t.COMPLEX_IEEE_F16LE))
    assert npy_dtype(_dec(int_type(h5t.STD_U32BE, 24, 0, 3))) == np.dtype(">u4")
    assert describe(bf) == "float(16 bits: sign 15, exponent 8@7 bias 127, mantissa 7@0)"


def test_vlen_sequence_of_converted_floats():
    """A variable-length sequence of bfloat16: converted element by element through to_npy."""
    bf = _dec(make_float("bfloat16"))
    vl = D.VarLen(1, 16, D.VLEN_SEQUENCE, 0, 0, bf)
    seqs = {1: np.array([1.0, -2.0, 0.5], "<f4"), 2: np.array([], "<f4")}

    class Heap:
        def get(self, addr, index):
            return (seqs[index].view("<u4") >> 16).astype("<u2").tobytes()

    raw = b"".join(struct.pack("<IQI", len(seqs[k]), 4096, k) for k in (1, 2))
    out = to_npy(raw, vl, Heap(), Sizes())
    assert out["length"].tolist() == [3, 0]
    assert out["values"][0].tolist() == [1.0, -2.0, 0.5]


def test_convert_block_boundaries():
    """Conversion in blocks gives the same result as one pass."""
    from h5fs.model import numeric_conversion as NC
    dt = _dec(make_float("float24"))
    pats = float_patterns("float24", n=5000, seed=3)
    data = b"".join(v.to_bytes(3, "little") for v in pats)
    whole = convert(data, dt, len(pats))
    old = NC.BLOCK
    try:
        NC.BLOCK = 333
        blocks = convert(data, dt, len(pats))
    finally:
        NC.BLOCK = old
    assert np.array_equal(whole.view("u8"), blocks.view("u8"))
