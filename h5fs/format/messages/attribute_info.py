"""Attribute Info message (0x0015): where an object keeps dense attributes."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError
from ..codec import Reader


@dataclass(frozen=True)
class AttributeInfo:
    track_order: bool
    index_order: bool
    max_creation_index: int | None
    heap_address: int | None
    name_index_address: int | None     # v2 B-tree type 8
    order_index_address: int | None    # v2 B-tree type 9


def decode(c: Reader) -> AttributeInfo:
    version = c.u8()
    if version != 0:
        raise FormatError(f"attribute info message version {version}")
    flags = c.u8()
    max_idx = c.u16() if flags & 0x01 else None
    heap = c.offset()
    name_idx = c.offset()
    order_idx = c.offset() if flags & 0x02 else None
    return AttributeInfo(bool(flags & 1), bool(flags & 2), max_idx, heap, name_idx, order_idx)
