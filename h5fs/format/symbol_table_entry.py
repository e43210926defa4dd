"""Symbol table entry (III.C): a link name offset, an object header address and a scratch pad."""

from __future__ import annotations

from dataclasses import dataclass

from .codec import Reader

CACHE_NONE, CACHE_STAB, CACHE_SOFTLINK = 0, 1, 2


@dataclass(frozen=True)
class SymbolTableEntry:
    name_offset: int
    header_address: int | None
    cache_type: int
    btree_address: int | None = None   # cache type 1: the group's B-tree
    heap_address: int | None = None    # cache type 1: the group's local heap
    softlink_offset: int = 0           # cache type 2: link value offset in the local heap


def size(sizes) -> int:
    return sizes.length + sizes.offset + 24


def decode(c: Reader) -> SymbolTableEntry:
    name_off = c.length()  # a heap offset: `size of lengths` wide, as libhdf5's H5G_ent_decode reads it
    addr = c.offset()
    cache = c.u32()
    c.skip(4)
    start = c.pos
    entry = SymbolTableEntry(name_off, addr, cache)
    if cache == CACHE_STAB:
        entry = SymbolTableEntry(name_off, addr, cache, btree_address=c.offset(), heap_address=c.offset())
    elif cache == CACHE_SOFTLINK:
        entry = SymbolTableEntry(name_off, addr, cache, softlink_offset=c.u32())
    c.pos = start
    c.skip(16)
    return entry
