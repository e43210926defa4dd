"""Scale-offset (filter 6), following libhdf5's H5Zscaleoffset.c.

Client data: scale type (0 float D-scale, 1 float E-scale, 2 integer), scale factor, elements
in the chunk, class (0 integer, 1 float), size, sign (0 unsigned), byte order (0 LE, 1 BE),
fill value defined, fill value (little-endian bytes, 4 per value). A chunk starts with a 21-byte
header: minbits (4 bytes LE), the size of minval, minval (LE); then every element as `minbits`
bits, packed most significant bit first. libhdf5 computes in the writer's native order; all
writers of note are little-endian, which is what is assumed for the values in the stream.
"""

from __future__ import annotations

import numpy as np

from ...errors import FormatError, Unsupported
from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo
from ._bits import ByteOps, unpack, unpack_values

_HEADER = 21
_DSCALE, _ESCALE, _INT = 0, 1, 2
_CLS_INT, _CLS_FLOAT = 0, 1


def _fill_bytes(cd: tuple[int, ...], size: int) -> bytes:
    words = cd[8:8 + -(-size // 4)]
    if len(words) * 4 < size:
        raise FormatError("scale-offset fill value missing from client data")
    return b"".join(w.to_bytes(4, "little") for w in words)[:size]


def _as_signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def decode(data: bytes | bytearray | memoryview, spec: FilterSpec, limit: int,
           info: ChunkInfo) -> bytes | bytearray | memoryview:
    cd = spec.client_data
    if len(cd) < 8:
        raise FormatError(f"scale-offset needs at least 8 client data values, got {len(cd)}")
    scale_type, n, cls, size, order, fill_defined = cd[0], cd[2], cd[3], cd[4], cd[6], cd[7] == 1
    factor = _as_signed(cd[1], 32)
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
