"""Fill value messages: old (0x0004) and new (0x0005, versions 1-3)."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError
from ..codec import Reader

ALLOC_EARLY, ALLOC_LATE, ALLOC_INCREMENTAL = 1, 2, 3
WRITE_ON_ALLOC, WRITE_NEVER, WRITE_IF_SET = 0, 1, 2
MAX_FILL = 1 << 20


@dataclass(frozen=True)
class FillValue:
    value: bytes | None          # None: undefined (reads as zeros)
    alloc_time: int = ALLOC_LATE
    write_time: int = WRITE_IF_SET


def _value(c: Reader) -> bytes | None:
    size = c.u32()
    if size > MAX_FILL:
        raise FormatError(f"fill value of {size} bytes")
    return c.bytes(size) if size else None


def decode_old(c: Reader) -> FillValue:
    return FillValue(_value(c))


def decode(c: Reader) -> FillValue:
    version = c.u8()
    if version in (1, 2):
        alloc, write, defined = c.u8(), c.u8(), c.u8()
        if version == 1 or defined:
            value = _value(c)
        else:
            value = None
        return FillValue(value if defined else None, alloc, write)
    if version == 3:
        flags = c.u8()
        value = _value(c) if flags & 0x20 else None
        return FillValue(value, flags & 0x03, (flags >> 2) & 0x03)
    raise FormatError(f"fill value message version {version}")
