"""Stored numbers NumPy cannot hold as stored -> their values (vectorized bit-field decoding).

Which types need this, and the `.npy` dtypes they get, is decided in dtypes.py
(`needs_conversion`, `npy_dtype`). This module turns stored elements into those values:

`convert(raw, dt, count)`: `count` stored elements of dt (no variable-length data or references
  inside) -> a 1-D array of `dtypes.npy_dtype(dt)` (shape (count, *dims) for an array type, as
  np.frombuffer gives it). Compounds and arrays are converted member by member; members that
  need no conversion are copied as stored.

Floating point (`decode_float`): any layout of at most 16 bytes -> float64, following libhdf5's
  H5T__conv_f_f (the conversion h5py's reads into a native double run), so both give the same
  bits for every stored pattern:
  - bytes to little-endian order first: big-endian reversed; VAX order reverses the order of
    the 16-bit words of a 4- or 8-byte (any multiple of 4) element, as libhdf5 does (its loop
    leaves an element of 2, 6, 10... bytes as it is, and so does this one). A VAX flag in a
    datatype message older than version 3 means big-endian, as libhdf5 reads it
    (dtypes.float_byte_order);
  - mantissa all zeros: exponent all zeros -> +-0, exponent all ones -> +-inf. Exponent all ones
    with a non-zero mantissa -> NaN (float64 with every mantissa bit set, sign kept), except that
    a mantissa with an explicit leading bit (normalization none or MSB-set) holding only that
    bit is +-inf (the x87 convention). libhdf5 applies these rules to every layout, VAX included;
  - implied normalization and exponent e > 0: value = 1.mantissa * 2**(e - bias);
    otherwise (exponent 0, or normalization none / MSB-set): value = M * 2**(e - bias + 1 - msize)
    where M is the mantissa as an integer. Exponent 0 is not moved to 1 for denormals of
    explicit-bit layouts, and an all-zero mantissa with a non-zero exponent in such a layout
    reads as 2**(e - bias - msize): both are what libhdf5 computes. MSB-set normalization is
    decoded like "none" (the leading bit is stored): libhdf5 refuses to convert it;
  - to float64: exponents below float64's denormals -> +-0; above its range -> +-inf; extra
    mantissa bits are rounded on the first dropped bit alone (round half up, no sticky bit),
    never into infinity (the largest exponent with an all-ones mantissa is truncated), and a
    rounding carry out of a denormal (source or result) mantissa is dropped: libhdf5's rules.
Integers (`decode_int`): bytes to little-endian order, the `precision` bits from `bit_offset`,
  sign-extended when signed (libhdf5's H5T__conv_i_i), in dtypes.converted_int_dtype.
Complex numbers of such floats: each part decoded as a float -> complex128.

Work is done in blocks of BLOCK elements so temporaries stay bounded; 1- and 2-byte floats are
looked up in a table of all their stored patterns' values.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from ..errors import FormatError, Unsupported
from ..format.messages.datatype import (
    NORM_IMPLIED, Array, Complex, Compound, Datatype, Enum, FixedPoint, FloatingPoint)
from .dtypes import check_float_layout, converted_int_dtype, float_byte_order, needs_conversion, npy_dtype

BLOCK = 1 << 16

_U = np.uint64
_ZERO = _U(0)
_ONE = _U(1)
_F64_INF = _U(0x7FF0000000000000)
_F64_NAN = _U(0x7FFFFFFFFFFFFFFF)     # libhdf5 sets every mantissa bit of the NaN it writes


# ---------------------------------------------------------------------------------- structure

def convert(raw: bytes | memoryview | np.ndarray, dt: Datatype, count: int) -> np.ndarray:
    """`count` stored elements of dt -> array of npy_dtype(dt) (see the module docstring)."""
    b = np.frombuffer(raw, np.uint8, count * dt.size).reshape(count, dt.size)
    return _convert(b, dt)


def _convert(b: np.ndarray, dt: Datatype) -> np.ndarray:
    """b: (n, dt.size) uint8, one stored element per row -> (n, ...) values."""
    n = b.shape[0]
    if not needs_conversion(dt):
        return np.frombuffer(np.ascontiguousarray(b), npy_dtype(dt), n)
    if isinstance(dt, FloatingPoint):
        return decode_float(b, dt)
    if isinstance(dt, FixedPoint):
        return decode_int(b, dt)
    if isinstance(dt, Complex):
        half = dt.base.size
        out = np.empty(n, "<c16")
        out.real = decode_float(b[:, :half], dt.base)
        out.imag = decode_float(b[:, half:2 * half], dt.base)
        return out
    if isinstance(dt, Enum):
        return _convert(b, dt.base)
    if isinstance(dt, Compound):
        out = np.empty(n, npy_dtype(dt))
        for m in dt.members:
            out[m.name] = _convert(b[:, m.offset:m.offset + m.type.size], m.type)
        return out
    if isinstance(dt, Array):
        count = math.prod(dt.dims)
        flat = np.ascontiguousarray(b).reshape(n * count, dt.base.size)
        vals = _convert(flat, dt.base)
        return vals.reshape((n, *dt.dims, *vals.shape[1:]))
    raise Unsupported(f"conversion of {dt.class_name} values")


# ----------------------------------------------------------------------------- bit plumbing

def _little_endian(b: np.ndarray, order: str) -> np.ndarray:
    """(n, size) element bytes -> the same elements in little-endian byte order."""
    n, size = b.shape
    if order == ">":
        return b[:, ::-1]
    if order == "vax" and size % 4 == 0:
        return b.reshape(n, size // 2, 2)[:, ::-1, :].reshape(n, size)
    return b


def _words(b: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(n, size <= 16) little-endian element bytes -> (low, high) 64-bit words (high None if
    the element fits one word)."""
    n, size = b.shape
    width = 8 if size <= 8 else 16
    buf = np.zeros((n, width), np.uint8)
    buf[:, :size] = b
    w = buf.view("<u8")
    return w[:, 0].astype(_U), (w[:, 1].astype(_U) if width == 16 else None)


def _mask(nbits: int) -> np.uint64:
    return _U((1 << nbits) - 1) if nbits < 64 else _U(0xFFFFFFFFFFFFFFFF)


def _field(lo: np.ndarray, hi: np.ndarray | None, pos: int, nbits: int) -> np.ndarray:
    """Bits [pos, pos + nbits) of each 128-bit (hi:lo) value, nbits <= 64."""
    if nbits <= 0:
        return np.zeros(lo.shape, _U)
    if pos >= 64:
        v = hi >> _U(pos - 64) if hi is not None else np.zeros(lo.shape, _U)
    elif pos == 0:
        v = lo.copy()
    else:
        v = lo >> _U(pos)
        if hi is not None:
            v |= hi << _U(64 - pos)
    if nbits < 64:
        v &= _mask(nbits)
    return v


def _shl(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    """x << k elementwise for shift counts 0..any (>= 64 gives 0; NumPy's own is undefined)."""
    return np.where(k >= 64, _ZERO, x << np.minimum(k, 63).astype(_U))


def _shr(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    return np.where(k >= 64, _ZERO, x >> np.minimum(k, 63).astype(_U))


def _bit_length(x: np.ndarray) -> np.ndarray:
    """Number of significant bits of each uint64 (0 for 0), as int64."""
    n = np.zeros(x.shape, np.int64)
    x = x.copy()
    for s in (32, 16, 8, 4, 2, 1):
        big = x >= (_ONE << _U(s))
        x = np.where(big, x >> _U(s), x)
        n += big * s
    return n + (x != 0)


# ------------------------------------------------------------------------------------ floats

def decode_float(b: np.ndarray, f: FloatingPoint) -> np.ndarray:
    """(n, f.size) stored elements -> float64 values (libhdf5's conversion to a native double)."""
    check_float_layout(f)
    if b.ndim != 2 or b.shape[1] != f.size:
        raise FormatError(f"float data: rows of {b.shape[1:]} bytes for {f.size}-byte elements")
    n = b.shape[0]
    if f.size <= 2:                 # every stored pattern decoded once, then looked up
        index = b[:, 0].astype(np.intp)
        if f.size == 2:
            index |= b[:, 1].astype(np.intp) << 8
        return _pattern_table(f)[index]
    out = np.empty(n, _U)
    for start in range(0, n, BLOCK):
        out[start:start + BLOCK] = _float_bits(b[start:start + BLOCK], f)
    return out.view("<f8")


@lru_cache(maxsize=64)
def _pattern_table(f: FloatingPoint) -> np.ndarray:
    """float64 values of all stored patterns of a 1- or 2-byte float, indexed by the stored
    bytes read as a little-endian integer."""
    patterns = np.arange(1 << (8 * f.size), dtype="<u2").view(np.uint8).reshape(-1, 2)[:, :f.size]
    table = _float_bits(patterns, f).view("<f8")
    table.flags.writeable = False
    return table


def _float_bits(b: np.ndarray, f: FloatingPoint) -> np.ndarray:
    lo, hi = _words(_little_endian(b, float_byte_order(f)))
    msize, esize = f.mantissa_size, f.exponent_size
    sign = _field(lo, hi, f.sign_location, 1)
    e_u = _field(lo, hi, f.exponent_location, esize)
    mlo = _field(lo, hi, f.mantissa_location, min(msize, 64))
    mhi = _field(lo, hi, f.mantissa_location + 64, msize - 64)      # zeros when msize <= 64
    explicit = f.normalization != NORM_IMPLIED

    # special values (H5T__conv_float_find_special)
    m_zero = (mlo == 0) & (mhi == 0)
    e_zero = e_u == 0
    e_ones = e_u == _mask(esize)
    zero = m_zero & e_zero
    if explicit:
        rest = msize - 1        # the mantissa bits below its leading (stored) bit
        rest_zero = ((mlo & _mask(min(rest, 64))) == 0) if rest > 0 else np.ones(lo.shape, bool)
        if rest > 64:
            rest_zero &= (mhi & _mask(rest - 64)) == 0
        inf = e_ones & ~zero & (m_zero | rest_zero)
    else:
        inf = e_ones & ~zero & m_zero
    nan = e_ones & ~zero & ~inf

    # the leading 1 (position lead in the mantissa field; msize = the implied bit above it)
    top = np.where(mhi != 0, 64 + _bit_length(mhi) - 1, _bit_length(mlo) - 1)   # -1: no bit set
    e = e_u.astype(np.int64)
    if explicit:
        implied = np.zeros(lo.shape, bool)
    else:
        implied = ~e_zero
    lead = np.where(implied, msize, top)
    exponent = np.where(implied, e - f.exponent_bias, e - (f.exponent_bias - 1) - (msize - top))
    exponent = np.minimum(exponent, 1 << 40)        # far beyond float64; keeps int64 sums safe
    frac = _fraction_below(mlo, mhi, lead)          # the bits after the leading 1, left-aligned

    bits = _to_float64(sign, exponent, frac, e_zero)
    sign63 = sign << _U(63)
    bits = np.where(zero, sign63, bits)
    bits = np.where(inf, sign63 | _F64_INF, bits)
    bits = np.where(nan, sign63 | _F64_NAN, bits)
    return bits


def _fraction_below(mlo: np.ndarray, mhi: np.ndarray, lead: np.ndarray) -> np.ndarray:
    """Bits [lead - 64, lead) of the 128-bit mantissa (mhi:mlo), left-aligned in 64 bits
    (bits below the field are zeros)."""
    r = np.clip(lead - 64, 0, 64)
    upper = _shr(mlo, r) | _shl(mhi, 64 - r)            # lead >= 64
    lower = _shl(mlo, np.clip(64 - lead, 0, 65))        # lead < 64 (-1: nothing)
    return np.where(lead >= 64, upper, lower)


def _to_float64(sign: np.ndarray, exponent: np.ndarray, frac: np.ndarray,
                denormal_source: np.ndarray) -> np.ndarray:
    """(1 + frac / 2**64) * 2**exponent -> float64 bits, rounded as H5T__conv_f_f rounds."""
    dexp = exponent + 1023
    tiny = dexp < -52
    sub = dexp <= 0
    shift = np.where(sub, 1 - dexp, 0)                  # mantissa right shift for denormals
    denormal = denormal_source | sub
    kept_bits = np.clip(52 - shift, 0, 52).astype(_U)
    kept = _shr(frac, _U(64) - kept_bits)
    cut = _shr(frac, _U(63) - kept_bits) & _ONE
    cut = np.where(shift <= 52, cut, _ZERO)
    full = (_ONE << kept_bits) - _ONE
    round_up = (cut == 1) & (denormal | (kept != full) | (dexp < 2046))
    kept = kept + round_up.astype(_U)
    carry = (kept > full) & ~denormal
    kept &= full
    dexp = dexp + carry
    huge = ~sub & (dexp >= 2047)
    mant = np.where(shift == 0, kept, (_ONE << kept_bits) | kept)
    expf = np.where(sub, 0, np.clip(dexp, 0, 2047)).astype(_U)
    bits = (sign << _U(63)) | (expf << _U(52)) | mant
    bits = np.where(huge, (sign << _U(63)) | _F64_INF, bits)
    return np.where(tiny, sign << _U(63), bits)


# ---------------------------------------------------------------------------------- integers

def decode_int(b: np.ndarray, t: FixedPoint) -> np.ndarray:
    """(n, t.size) stored elements -> values in dtypes.converted_int_dtype(t)."""
    out_dtype = converted_int_dtype(t)
    if b.ndim != 2 or b.shape[1] != t.size:
        raise FormatError(f"integer data: rows of {b.shape[1:]} bytes for {t.size}-byte elements")
    n = b.shape[0]
    out = np.empty(n, out_dtype)
    first, last = t.bit_offset // 8, (t.bit_offset + t.precision - 1) // 8
    pos = t.bit_offset - 8 * first
    for start in range(0, n, BLOCK):
        le = _little_endian(b[start:start + BLOCK], t.order)[:, first:last + 1]   # <= 9 bytes
        lo, hi = _words(le)
        v = _field(lo, hi, pos, t.precision)
        if t.signed and t.precision < 64:
            s = _ONE << _U(t.precision - 1)
            v = (v ^ s) - s
        out[start:start + BLOCK] = v.view(np.int64 if t.signed else _U)
    return out
