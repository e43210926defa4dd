"""N-bit (filter 5): only the significant bits of each integer/float are kept, packed.

The client data describes the datatype as libhdf5's H5Znbit.c writes it: [count of values,
"nothing to do" flag, elements in the chunk, then the type: 1 atomic (size, order 0 LE / 1 BE,
precision, offset), 2 array (size, base type), 3 compound (size, member count, then per member:
offset and type), 4 other (size; its bytes are packed whole)]. Every element is one record of
the same bit layout, records follow each other with no padding. libhdf5's encoder always ends
the stream one byte after the last whole byte (a zero byte when the bits fill whole bytes).
"""

from __future__ import annotations

import numpy as np

from ...errors import FormatError
from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo, FilterFailed
from ._bits import ByteOps, pack, unpack, unpack_values

_ATOMIC, _ARRAY, _COMPOUND, _NOOP = 1, 2, 3, 4


class _Parms:
    def __init__(self, cd: tuple[int, ...], start: int) -> None:
        self.cd, self.i = cd, start

    def take(self) -> int:
        if self.i >= len(self.cd):
            raise FormatError("n-bit parameters are shorter than the datatype they describe")
        self.i += 1
        return self.cd[self.i - 1]


def _atomic(p: _Parms, size: int) -> ByteOps:
    order, precision, offset = p.take(), p.take(), p.take()
    if order not in (0, 1):
        raise FormatError(f"n-bit byte order {order}")
    if size == 0 or precision + offset > 8 * size:
        raise FormatError(f"n-bit precision {precision} + offset {offset} exceeds {size} bytes")
    return ByteOps.atomic(size, order == 1, precision, offset)


def _array(p: _Parms, space: int) -> ByteOps:
    total, base_class = p.take(), p.take()
    if total > space:
        raise FormatError(f"n-bit array of {total} bytes in {space}")
    if base_class == _NOOP:
        p.take()
        return ByteOps.raw(total)
    base_size = p.cd[p.i] if p.i < len(p.cd) else 0  # read ahead, as libhdf5 does
    if base_size == 0:
        raise FormatError("n-bit array base of size 0")
    base = _member(p, base_class, base_size)
    return base.repeated(total // base_size, base_size)


def _compound(p: _Parms, space: int) -> ByteOps:
    size, nmembers = p.take(), p.take()
    if size > space:
        raise FormatError(f"n-bit compound of {size} bytes in {space}")
    parts, bits, used = [], 0, 0
    for _ in range(nmembers):
        moff, mclass = p.take(), p.take()
        msize = p.cd[p.i] if p.i < len(p.cd) else 0
        used += msize
        if msize == 0 or used > size or moff + msize > size:
            raise FormatError("n-bit compound member outside the compound")
        ops = _member(p, mclass, msize)
        parts.append(ops.placed(moff, bits))
        bits += ops.record_bits
    return ByteOps.concat(parts, bits)


def _member(p: _Parms, cls: int, size: int) -> ByteOps:
    """The type at the cursor, whose class code was just read; its size comes next."""
    if cls == _ATOMIC:
        p.take()
        return _atomic(p, size)
    if cls == _ARRAY:
        return _array(p, size)
    if cls == _COMPOUND:
        return _compound(p, size)
    if cls == _NOOP:
        p.take()
        return ByteOps.raw(size)
    raise FormatError(f"n-bit datatype class {cls}")


def _no_op(cd: tuple[int, ...]) -> bool:
    """Whether the filter leaves the data as it is (full precision everywhere)."""
    if len(cd) < 2:
        raise FormatError(f"n-bit needs at least 2 client data values, got {len(cd)}")
    return bool(cd[1])


def _layout(cd: tuple[int, ...], limit: int) -> tuple[int, int, ByteOps]:
    """(elements in the chunk, element size, each element's bit layout), the chunk being at most
    `limit` bytes."""
    if len(cd) < 5 or cd[0] != len(cd):
        raise FormatError("n-bit client data is malformed")
    n, cls, size = cd[2], cd[3], cd[4]
    if size == 0 or n * size > limit:
        raise FormatError(f"n-bit chunk of {n} x {size} bytes, more than {limit}")
    if cls not in (_ATOMIC, _ARRAY, _COMPOUND):
        raise FormatError(f"n-bit top-level datatype class {cls}")
    return n, size, _member(_Parms(cd, 4), cls, size)


def decode(data: bytes | bytearray | memoryview, spec: FilterSpec, limit: int,
           info: ChunkInfo) -> bytes | bytearray | memoryview:
    cd = spec.client_data
    if _no_op(cd):  # libhdf5 stored the data as is
        return data
    n, size, ops = _layout(cd, limit)
    if cd[3] == _ATOMIC and size <= 8 and 0 < cd[6] <= 57:  # the common case, 8-byte windows
        values = unpack_values(data, n, cd[6]) << np.uint64(cd[7])
        out = values.astype("<u8").view(np.uint8).reshape(n, 8)[:, :size]
        return memoryview(np.ascontiguousarray(out[:, ::-1] if cd[5] == 1 else out).reshape(-1))
    return memoryview(unpack(data, n, size, ops))


def encode(data: bytes | bytearray | memoryview, spec: FilterSpec,
           info: ChunkInfo) -> bytes | bytearray | memoryview:
    cd = spec.client_data
    if _no_op(cd):
        return data
    n, size, ops = _layout(cd, len(data))
    if n * size != len(data):
        raise FilterFailed(f"n-bit parameters describe {n} x {size} bytes, the chunk has {len(data)}")
    out = np.zeros(n * ops.record_bits // 8 + 1, np.uint8)
    packed = pack(data, n, size, ops)
    out[:len(packed)] = packed
    return memoryview(out)
