"""External Data Files message (0x0007): raw data kept in other files, named in a local heap."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError
from ..codec import Reader

MAX_SLOTS = 65535


@dataclass(frozen=True)
class ExternalSlot:
    name_offset: int
    file_offset: int
    size: int          # bytes reserved in that file; the all-ones value means unlimited


@dataclass(frozen=True)
class ExternalFiles:
    heap_address: int | None
    slots: tuple[ExternalSlot, ...]


def decode(c: Reader) -> ExternalFiles:
    version = c.u8()
    if version != 1:
        raise FormatError(f"external files message version {version}")
    c.skip(3)
    c.u16()  # allocated slots
    used = c.u16()
    heap = c.offset()
    slots = tuple(ExternalSlot(c.length(), c.length(), c.length()) for _ in range(used))
    return ExternalFiles(heap, slots)
