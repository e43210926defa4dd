"""Link Info message (0x0002): where a new-style group keeps dense links."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError
from ..codec import Reader


@dataclass(frozen=True)
class LinkInfo:
    track_order: bool
    index_order: bool
    max_creation_index: int | None
    heap_address: int | None           # fractal heap; undefined = links are compact
    name_index_address: int | None     # v2 B-tree type 5
    order_index_address: int | None    # v2 B-tree type 6


def decode(c: Reader) -> LinkInfo:
    version = c.u8()
    if version != 0:
        raise FormatError(f"link info message version {version}")
    flags = c.u8()
    max_idx = c.u64() if flags & 0x01 else None
    heap = c.offset()
    name_idx = c.offset()
    order_idx = c.offset() if flags & 0x02 else None
    return LinkInfo(bool(flags & 1), bool(flags & 2), max_idx, heap, name_idx, order_idx)
