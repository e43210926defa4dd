"""Symbol table entry (III.C): a link name offset, an object header address and a scratch pad.

Entries live inside symbol table nodes and the v0/v1 superblock, so they decode from and encode
into a Reader/Writer positioned on them. The 4 reserved bytes and the scratch-pad bytes the cache
type leaves unused are undefined; they encode as zeros, as libhdf5 writes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .codec import Reader, Sizes, Writer

CACHE_NONE, CACHE_STAB, CACHE_SOFTLINK = 0, 1, 2
SCRATCH_SIZE = 16


@dataclass(frozen=True, slots=True)
class SymbolTableEntry:
    name_offset: int
    header_address: int | None
    cache_type: int
    btree_address: int | None = None   # cache type 1: the group's B-tree
    heap_address: int | None = None    # cache type 1: the group's local heap
    softlink_offset: int = 0           # cache type 2: link value offset in the local heap


def size(sizes: Sizes) -> int:
    return sizes.length + sizes.offset + 8 + SCRATCH_SIZE


def decode(c: Reader) -> SymbolTableEntry:
    # the name offset is a heap offset: `size of lengths` wide, as libhdf5's H5G_ent_decode reads it
    name_off, addr, cache = c.fields("LOI4x")
    addr = c.sizes.address(addr)
    start = c.pos
    if cache == CACHE_STAB:
        btree, heap = c.fields("OO")
        entry = SymbolTableEntry(name_off, addr, cache, c.sizes.address(btree), c.sizes.address(heap))
    elif cache == CACHE_SOFTLINK:
        entry = SymbolTableEntry(name_off, addr, cache, softlink_offset=c.u32())
    else:
        entry = SymbolTableEntry(name_off, addr, cache)
    c.pos = start
    c.skip(SCRATCH_SIZE)
    return entry


def encode(w: Writer, entry: SymbolTableEntry) -> None:
    w.fields("LOI4x", entry.name_offset, w.sizes.raw_address(entry.header_address), entry.cache_type)
    start = w.pos
    if entry.cache_type == CACHE_STAB:
        w.fields("OO", w.sizes.raw_address(entry.btree_address), w.sizes.raw_address(entry.heap_address))
    elif entry.cache_type == CACHE_SOFTLINK:
        w.u32(entry.softlink_offset)
    w.zeros(SCRATCH_SIZE - (w.pos - start))
