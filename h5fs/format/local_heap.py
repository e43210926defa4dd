"""Local heap (III.D): the name store of old-style groups and external-file lists.

A prefix ("HEAP", version 0, data segment size, offset of the first free block, data segment
address) and a data segment, right after the prefix when libhdf5 creates the heap, elsewhere once
it grew. The prefix takes 8 + 2 * size of lengths + size of offsets bytes, which libhdf5 rounds up
to a multiple of 8 (H5HL_SIZEOF_HDR): the padding is undefined and encodes as zeros.

Free blocks are a list threaded through the data segment: each starts with the offset of the next
one and its own size (both `size of lengths` wide). libhdf5 ends the list, and marks an empty one,
with offset 1 (H5HL_FREE_NULL); the spec's undefined address is accepted too and encodes as 1.
libhdf5 keeps objects and free blocks 8-byte aligned and never lists a free block smaller than
its two fields (aligned): `align`, `free_block_size`.
The record keeps the whole data segment, free blocks included, so their undefined bytes come back
as they were; `encode_data` writes the free list over it.

Pure bytes <-> records; h5fs.storage.local_heap reads a heap from the file.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import FormatError
from .codec import Reader, Sizes

SIGNATURE = b"HEAP"
VERSION = 0
PREFIX = "4sB3xLLO"      # signature, version, reserved, data size, free list head, data address
FREE_NULL = 1
ALIGNMENT = 8            # objects and free blocks start and end on 8-byte boundaries (H5HL_ALIGN)


@dataclass(frozen=True, slots=True)
class FreeBlock:
    offset: int
    size: int            # bytes, its own two fields included


@dataclass(frozen=True, slots=True)
class LocalHeap:
    data: bytes
    data_address: int | None = None
    free: tuple[FreeBlock, ...] = ()   # the free list, in list order
    version: int = VERSION

    def string(self, offset: int) -> bytes:
        """The NUL-terminated string at `offset` in the data segment."""
        if offset < 0 or offset >= len(self.data):
            raise FormatError(f"local heap: offset {offset} outside the {len(self.data)}-byte data segment")
        end = self.data.find(b"\0", offset)
        if end < 0:
            raise FormatError(f"local heap: unterminated string at offset {offset}")
        return self.data[offset:end]


def align(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


def free_block_size(sizes: Sizes) -> int:
    """The smallest free block: its two fields, aligned (H5HL_SIZEOF_FREE)."""
    return align(2 * sizes.length)


def prefix_size(sizes: Sizes) -> int:
    """Bytes libhdf5 allocates for the prefix (rounded up to 8)."""
    return (sizes.layout(PREFIX).size + 7) & ~7


def decode_prefix(buf: bytes, sizes: Sizes, what: str = "local heap") -> tuple[int, int, int | None]:
    """(data segment size, free list head, data segment address) from the prefix."""
    sig, version, size, head, data_addr = Reader(buf, 0, sizes, what).fields(PREFIX)
    if sig != SIGNATURE:
        raise FormatError(f"{what}: bad signature {sig!r}, expected {SIGNATURE!r}")
    if version != VERSION:
        raise FormatError(f"{what}: local heap version is not 0")
    return size, head, sizes.address(data_addr)


def decode(prefix: bytes, data: bytes, sizes: Sizes, what: str = "local heap") -> LocalHeap:
    size, head, data_addr = decode_prefix(prefix, sizes, what)
    if len(data) != size:
        raise FormatError(f"{what}: data segment of {len(data)} bytes, expected {size}")
    return LocalHeap(bytes(data), data_addr, _free_list(data, head, sizes, what))


def _free_list(data: bytes, head: int, sizes: Sizes, what: str) -> tuple[FreeBlock, ...]:
    link = sizes.layout("LL")
    out: list[FreeBlock] = []
    seen: set[int] = set()
    offset = head
    while offset not in (FREE_NULL, (1 << (8 * sizes.length)) - 1):
        if offset in seen or offset + link.size > len(data):
            raise FormatError(f"{what}: bad free list (block at {offset})")
        seen.add(offset)
        nxt, fsize = link.unpack_from(data, offset)
        if fsize < link.size or offset + fsize > len(data):
            raise FormatError(f"{what}: free block of {fsize} bytes at {offset}")
        out.append(FreeBlock(offset, fsize))
        offset = nxt
    return tuple(out)


def encode_prefix(heap: LocalHeap, sizes: Sizes) -> bytes:
    """The prefix, padded to `prefix_size(sizes)`."""
    head = heap.free[0].offset if heap.free else FREE_NULL
    raw = sizes.layout(PREFIX).pack(SIGNATURE, heap.version, len(heap.data), head, sizes.raw_address(heap.data_address))
    return raw.ljust(prefix_size(sizes), b"\0")


def encode_data(heap: LocalHeap, sizes: Sizes) -> bytes:
    """The data segment with the free list written into it."""
    out = bytearray(heap.data)
    link = sizes.layout("LL")
    for i, block in enumerate(heap.free):
        nxt = heap.free[i + 1].offset if i + 1 < len(heap.free) else FREE_NULL
        link.pack_into(out, block.offset, nxt, block.size)
    return bytes(out)
