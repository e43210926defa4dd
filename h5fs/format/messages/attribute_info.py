"""Attribute Info message (0x0015): where an object keeps dense attributes (the Link Info layout
with a 2-byte maximum creation index)."""

from __future__ import annotations

from dataclasses import dataclass

from ..codec import Reader, Writer
from .link_info import decode_info, encode_info


@dataclass(frozen=True, slots=True)
class AttributeInfo:
    track_order: bool
    index_order: bool
    max_creation_index: int | None     # present when track_order
    heap_address: int | None
    name_index_address: int | None     # v2 B-tree type 8
    order_index_address: int | None    # v2 B-tree type 9; present when index_order


def decode(c: Reader) -> AttributeInfo:
    return decode_info(c, AttributeInfo, "H", "attribute info")


def encode(w: Writer, info: AttributeInfo) -> None:
    encode_info(w, info, "H")
