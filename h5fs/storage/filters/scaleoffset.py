"""Scale-offset (filter 6), following libhdf5's H5Zscaleoffset.c.

Client data: scale type (0 float D-scale, 1 float E-scale, 2 integer), scale factor, elements
in the chunk, class (0 integer, 1 float), size, sign (0 unsigned), byte order (0 LE, 1 BE),
fill value defined, fill value (little-endian bytes, 4 per value). A chunk starts with a 21-byte
header: minbits (4 bytes LE), the size of minval, minval (LE); then every element as `minbits`
bits, packed most significant bit first. libhdf5 computes in the writer's native order; all
writers of note are little-endian, which is what is assumed for the values in the stream.

The encoder reproduces H5Z__filter_scaleoffset's stream: the same minimum bits (floats: from the
span rounded in the float's own precision, as libhdf5's powf/lroundf arithmetic does), the same
header and the same length (21 + n * minbits // 8 + 1 bytes; 21 + the raw values at full
precision, which libhdf5 also falls back to for spans it cannot hold).
"""

from __future__ import annotations

import numpy as np

from ...errors import FormatError, Unsupported
from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo, FilterFailed
from ._bits import ByteOps, as_signed, pack_values, unpack, unpack_values

_HEADER = 21
_NPARMS = 20   # libhdf5 stores (and requires) 20 client data values
_DSCALE, _ESCALE, _INT = 0, 1, 2
_CLS_INT, _CLS_FLOAT = 0, 1


def _fill_bytes(cd: tuple[int, ...], size: int) -> bytes:
    words = cd[8:8 + -(-size // 4)]
    if len(words) * 4 < size:
        raise FormatError("scale-offset fill value missing from client data")
    return b"".join(w.to_bytes(4, "little") for w in words)[:size]


def decode(data: bytes | bytearray | memoryview, spec: FilterSpec, limit: int,
           info: ChunkInfo) -> bytes | bytearray | memoryview:
    cd = spec.client_data
    if len(cd) < 8:
        raise FormatError(f"scale-offset needs at least 8 client data values, got {len(cd)}")
    scale_type, n, cls, size, order, fill_defined = cd[0], cd[2], cd[3], cd[4], cd[6], cd[7] == 1
    factor = as_signed(cd[1], 32)
    if n * size > limit:
        raise FormatError(f"scale-offset chunk of {n} x {size} bytes, more than {limit}")
    if cls == _CLS_INT:
        if scale_type != _INT:
            raise FormatError(f"scale-offset scale type {scale_type} for integers")
        if size not in (1, 2, 4, 8):
            raise Unsupported(f"scale-offset on {size}-byte integers")
        if factor > 8 * size:
            raise FormatError(f"scale-offset minimum bits {factor} exceed the type")
        if factor == 8 * size:  # full precision was asked for: libhdf5 stored the data as is
            return data
    elif cls == _CLS_FLOAT:
        if scale_type == _ESCALE:
            raise Unsupported("scale-offset E-scaling (libhdf5 cannot write it either)")
        if scale_type != _DSCALE:
            raise FormatError(f"scale-offset scale type {scale_type} for floats")
        if size not in (4, 8):
            raise Unsupported(f"scale-offset on {size}-byte floats")
    else:
        raise FormatError(f"scale-offset datatype class {cls}")
    if order not in (0, 1):
        raise FormatError(f"scale-offset byte order {order}")

    mv = memoryview(data).cast("B")
    if len(mv) < _HEADER:
        raise FormatError("scale-offset chunk shorter than its header")
    minbits = int.from_bytes(mv[:4], "little")
    minval = int.from_bytes(mv[5:5 + min(8, mv[4])], "little")
    if minbits > 8 * size:
        raise FormatError(f"scale-offset minimum bits {minbits} exceed the {size}-byte type")
    utype = np.dtype(f"<u{size}")
    if minbits == 8 * size:  # full precision: the values follow the header unchanged
        raw = mv[_HEADER:_HEADER + n * size]
        if len(raw) != n * size:
            raise FormatError("truncated scale-offset chunk")
        values = np.frombuffer(raw, utype)
    else:
        if 0 < minbits <= 57:
            packed = unpack_values(mv[_HEADER:], n, minbits).astype(utype)
        elif minbits:
            packed = unpack(mv[_HEADER:], n, size, ByteOps.atomic(size, False, minbits, 0))
            packed = packed.view(utype)
        else:  # every value was the minimum
            packed = np.zeros(n, utype)
        marker = (1 << minbits) - 1  # where the fill value was
        if cls == _CLS_INT:
            values = (packed + utype.type(minval & (1 << 8 * size) - 1)).astype(utype)
        else:
            ftype = np.dtype(f"<f{size}")
            ints = packed.view(f"<i{size}")
            # Same arithmetic, in the float's own precision, as libhdf5: i / 10**D + min.
            scale = np.power(ftype.type(10), ftype.type(factor))
            minimum = np.frombuffer(minval.to_bytes(8, "little")[:size], ftype)[0]
            values = (ints.astype(ftype) / scale + minimum).astype(ftype).view(utype)
        if fill_defined:
            fill = np.frombuffer(_fill_bytes(cd, size), utype)[0]
            values = np.where(packed == marker, fill, values)
    if order == 1:
        values = values.byteswap()
    return memoryview(np.ascontiguousarray(values).view(np.uint8))


def _ceil_log2(v: int) -> int:
    return (v - 1).bit_length()


def _header(minbits: int, minval: int) -> bytes:
    return (minbits.to_bytes(4, "little") + bytes([8]) + (minval % (1 << 64)).to_bytes(8, "little")
            + bytes(8))


def _whole(minval: int, values: np.ndarray) -> bytes:
    """Full precision: the values as they are (little-endian), after the header."""
    return _header(8 * values.itemsize, minval) + values.tobytes()


def _packed(minbits: int, minval: int, offsets: np.ndarray) -> bytes:
    """Every offset's low `minbits` bits, in libhdf5's buffer of n * minbits // 8 + 1 bytes."""
    body = np.zeros(len(offsets) * minbits // 8 + 1, np.uint8)
    if minbits:
        packed = pack_values(offsets, minbits)
        body[:len(packed)] = packed
    return _header(minbits, minval) + body.tobytes()


def _first(values: np.ndarray, value) -> np.generic:
    """The first element equal to `value`: what libhdf5's min/max loops keep (a -0.0 or 0.0)."""
    return values[np.argmax(values == value)]


def _encode_ints(values: np.ndarray, fill, minbits: int) -> bytes:
    bits = 8 * values.itemsize
    is_fill = values == fill if fill is not None else np.zeros(len(values), bool)
    kept = values[~is_fill]
    lo, hi = (int(kept.min()), int(kept.max())) if len(kept) else (0, 0)
    if not minbits:
        if hi - lo > (1 << bits) - 3:  # libhdf5 keeps the values whole and records no minimum
            signed_byte = values.dtype == np.int8 and fill is None
            return _whole(lo if signed_byte else 0, values)
        minbits = _ceil_log2(hi - lo + 1 + (fill is not None))  # one more code marks the fill value
    if minbits == bits:
        return _whole(lo, values)
    offsets = (values.view(f"<u{values.itemsize}").astype(np.uint64) - np.uint64(lo % (1 << 64)))
    offsets[is_fill] = (1 << minbits) - 1
    return _packed(minbits, lo, offsets)


def _round_away(x: np.ndarray) -> np.ndarray:
    """C's lround/lroundf: halves away from zero, in the array's own precision (exact)."""
    whole = np.trunc(x)
    return whole + np.where(np.abs(x - whole) >= 0.5, np.sign(x), 0)


def _encode_floats(values: np.ndarray, fill, factor: int) -> bytes:
    ftype, bits = values.dtype.type, 8 * values.itemsize
    scale = np.power(ftype(10), ftype(factor))  # powf/pow, as libhdf5 computes it
    if fill is not None:  # libhdf5's min/max skips values within 10**-D of the fill value (in double)
        near = np.abs((values - fill).astype(np.float64)) < np.power(10.0, -factor)
        kept = values[~near]
    else:
        kept = values
    if not len(kept):
        lo = hi = ftype(0)
    elif np.isnan(kept[0]):
        raise FilterFailed("scale-offset of floats starting with NaN (libhdf5 computes no valid span)")
    else:
        lo, hi = _first(kept, np.nanmin(kept)), _first(kept, np.nanmax(kept))
    with np.errstate(over="ignore", invalid="ignore"):
        span = _round_away(np.array(hi * scale - lo * scale))
        if np.isnan(span):
            raise FilterFailed("scale-offset span of infinite values")
        if span > 2.0 ** (bits - 1):  # libhdf5 keeps the values whole and records no minimum
            return _whole(0, values)
        minbits = _ceil_log2(int(span) + 1 + (fill is not None))
        minval = int.from_bytes(np.array(lo).tobytes(), "little")
        if minbits == bits:
            return _whole(minval, values)
        # lround of a NaN or huge value gives INT64_MIN, whose low bits are 0, as in libhdf5.
        offsets = _round_away(values * scale - lo * scale).astype(np.int64).view(np.uint64)
    if fill is not None:  # the fill test here is in the float's precision (fabsf, powf)
        offsets[np.abs(values - fill) < np.power(ftype(10), ftype(-factor))] = (1 << minbits) - 1
    return _packed(minbits, minval, offsets)


def encode(data: bytes | bytearray | memoryview, spec: FilterSpec,
           info: ChunkInfo) -> bytes | bytearray | memoryview:
    cd = spec.client_data
    if len(cd) != _NPARMS:
        raise FilterFailed(f"scale-offset needs {_NPARMS} client data values, got {len(cd)}")
    scale_type, n, cls, size, sign, order, fill_defined = cd[0], cd[2], cd[3], cd[4], cd[5], cd[6], cd[7] == 1
    factor = as_signed(cd[1], 32)
    if len(data) != n * size or order not in (0, 1):
        raise FilterFailed(f"scale-offset of {n} x {size} bytes (order {order}) on {len(data)} bytes")
    if cls == _CLS_INT and scale_type == _INT and size in (1, 2, 4, 8):
        if factor >= 8 * size:  # full precision asked for: libhdf5 leaves the data as it is
            if factor > 8 * size:
                raise FilterFailed(f"scale-offset minimum bits {factor} exceed the type")
            return data
        dtype = np.dtype(f"<{'i' if sign else 'u'}{size}")
    elif cls == _CLS_FLOAT and scale_type == _DSCALE and size in (4, 8):
        dtype = np.dtype(f"<f{size}")
    else:  # libhdf5 fails: E-scaling is not implemented, other types have no C type to use
        raise FilterFailed(f"scale-offset scale type {scale_type} on class {cls} of {size} bytes")
    values = np.frombuffer(data, dtype.newbyteorder(">") if order else dtype).astype(dtype)
    fill = np.frombuffer(_fill_bytes(cd, size), dtype)[0] if fill_defined else None
    if cls == _CLS_INT:
        return _encode_ints(values, fill, max(factor, 0))
    return _encode_floats(values, fill, factor)
