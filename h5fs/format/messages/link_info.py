"""Link Info message (0x0002): where a new-style group keeps dense links.

Its layout is shared with the Attribute Info message (0x0015), which differs only in the width of
the maximum creation index: `decode_info`/`encode_info` serve both. Reserved flag bits (2-7) are
not kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from ...errors import FormatError
from ..codec import Reader, Writer

if TYPE_CHECKING:
    from .attribute_info import AttributeInfo

TRACKED, INDEXED = 0x01, 0x02


@dataclass(frozen=True, slots=True)
class LinkInfo:
    track_order: bool
    index_order: bool
    max_creation_index: int | None     # present when track_order
    heap_address: int | None           # fractal heap; undefined = links are compact
    name_index_address: int | None     # v2 B-tree type 5
    order_index_address: int | None    # v2 B-tree type 6; present when index_order


Info = TypeVar("Info")


def decode_info(c: Reader, record: type[Info], counter: str, what: str) -> Info:
    """A Link Info or Attribute Info message; `counter`: the struct code of the creation index."""
    version, flags = c.fields("BB")
    if version != 0:
        raise FormatError(f"{what} message version {version}")
    max_idx = c.fields(counter)[0] if flags & TRACKED else None
    heap, name_idx = map(c.sizes.address, c.fields("OO"))
    order_idx = c.offset() if flags & INDEXED else None
    return record(bool(flags & TRACKED), bool(flags & INDEXED), max_idx, heap, name_idx, order_idx)


def encode_info(w: Writer, info: LinkInfo | AttributeInfo, counter: str) -> None:
    w.fields("BB", 0, (TRACKED if info.track_order else 0) | (INDEXED if info.index_order else 0))
    if info.track_order:
        w.fields(counter, info.max_creation_index)
    w.offset(info.heap_address)
    w.offset(info.name_index_address)
    if info.index_order:
        w.offset(info.order_index_address)


def decode(c: Reader) -> LinkInfo:
    return decode_info(c, LinkInfo, "Q", "link info")


def encode(w: Writer, info: LinkInfo) -> None:
    encode_info(w, info, "Q")
