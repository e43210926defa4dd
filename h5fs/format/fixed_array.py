"""Fixed arrays (spec Appendix C.C): header, data block, data block pages; chunk-index elements.

Reading only; every checksum is verified. Layout as libhdf5 writes it (H5FAcache.c, H5FAdblock.c):

- header ``FAHD``: version, client ID, element size, page bits, number of elements (length),
  data block address, checksum;
- data block ``FADB``: version, client ID, header address, then, when the array has more elements
  than one page holds (``nelmts > 2**page_bits``), a page-init bitmap of ``ceil(npages / 8)`` bytes
  (bit i, most significant bit first, set when page i was written) and the checksum; the pages
  follow the data block prefix contiguously, each ``elements + checksum``, the last one holding
  only the remaining elements. Unpaged, the elements sit inside the data block before its checksum.

The elements of chunk indexes (client 0: address; client 1: address, chunk size, filter mask) are
decoded by `chunk_element_decoder`, shared with the extensible array.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Iterator

from ..errors import FormatError
from .checksum import checked_block, verify
from .codec import Reader, Sizes

SIG_HEADER, SIG_DBLOCK = b"FAHD", b"FADB"
CLIENT_CHUNKS, CLIENT_FILTERED_CHUNKS = 0, 1
MAX_ELEMENT_SIZE = 255
MAX_PAGE_BITS = 32
_CACHE_PAGES = 16


@dataclass(frozen=True)
class ChunkElement:
    """One chunk-index element: the chunk's address (None: not allocated), size and filter mask."""

    address: int | None
    size: int = 0
    filter_mask: int = 0


def chunk_element_decoder(sizes: Sizes, filtered: bool, size_width: int = 0) -> Callable[[bytes], ChunkElement]:
    """Decoder of raw element bytes into a ChunkElement (client 0 or 1)."""
    width = sizes.offset
    undefined = sizes.undefined
    if filtered and not 1 <= size_width <= 8:
        raise FormatError(f"chunk index: chunk size width {size_width} out of range")

    def decode(raw: bytes) -> ChunkElement:
        addr = int.from_bytes(raw[:width], "little")
        a = None if addr == undefined else addr
        if not filtered:
            return ChunkElement(a)
        size = int.from_bytes(raw[width:width + size_width], "little")
        mask = int.from_bytes(raw[width + size_width:width + size_width + 4], "little")
        return ChunkElement(a, size, mask)

    return decode


@dataclass(frozen=True)
class FixedArrayHeader:
    address: int
    version: int
    client_id: int
    element_size: int
    page_bits: int
    nelmts: int
    dblock_address: int | None


def header_size(sizes: Sizes) -> int:
    return 4 + 1 + 1 + 1 + 1 + sizes.length + sizes.offset + 4


def check_block_prefix(c: Reader, signature: bytes, header, label: str) -> None:
    """The prefix every block of a fixed or extensible array starts with: signature, then the
    version, client and header address its array header records."""
    c.signature(signature)
    version = c.u8()
    if version != header.version:
        raise FormatError(f"{label}: version {version} differs from the header's {header.version}")
    client = c.u8()
    if client != header.client_id:
        raise FormatError(f"{label}: client {client} differs from the header's {header.client_id}")
    if c.offset() != header.address:
        raise FormatError(f"{label}: belongs to another array (header at {header.address})")


def read_header(reader, address: int | None, what: str = "fixed array") -> FixedArrayHeader:
    label = f"{what} header at {address}"
    buf = reader.read(address, header_size(reader.sizes), label)
    c, version = checked_block(buf, reader.sizes, SIG_HEADER, label, (0, 1))
    client = c.u8()
    esize = c.u8()
    page_bits = c.u8()
    nelmts = c.length()
    dblock = c.offset()
    if esize == 0:
        raise FormatError(f"{label}: zero element size")
    if page_bits > MAX_PAGE_BITS:
        raise FormatError(f"{label}: page bits {page_bits} too large")
    return FixedArrayHeader(address, version, client, esize, page_bits, nelmts, dblock)


class FixedArray:
    """Random access to the raw elements of a fixed array."""

    def __init__(self, reader, address: int | None, what: str = "fixed array"):
        self.reader = reader
        self.sizes: Sizes = reader.sizes
        self.what = f"{what} at {address}"
        self.header = h = read_header(reader, address, what)
        self.page_nelmts = 1 << h.page_bits
        self.paged = h.nelmts > self.page_nelmts
        self.npages = -(-h.nelmts // self.page_nelmts) if self.paged else 0
        self.bitmap_size = (self.npages + 7) // 8
        self.prefix_size = 4 + 1 + 1 + self.sizes.offset + self.bitmap_size + 4
        self.page_size = self.page_nelmts * h.element_size + 4
        self._bitmap = b""
        self._elements: bytes | None = None
        self._loaded = False
        self._lock = threading.Lock()
        self._pages: OrderedDict[int, bytes] = OrderedDict()

    def _load_dblock(self) -> None:
        if self._loaded:
            return
        h = self.header
        label = f"{self.what} data block at {h.dblock_address}"
        if h.dblock_address is None:
            self._loaded = True
            return
        esize = 0 if self.paged else h.nelmts * h.element_size
        buf = self.reader.read(h.dblock_address, self.prefix_size + esize, label)
        c = Reader(buf, 0, self.sizes, label)
        verify(buf, label)
        check_block_prefix(c, SIG_DBLOCK, h, label)
        self._bitmap = c.bytes(self.bitmap_size)
        self._elements = None if self.paged else c.bytes(esize)
        self._loaded = True

    def _page_nelmts(self, page: int) -> int:
        if page == self.npages - 1:
            rest = self.header.nelmts - page * self.page_nelmts
            return rest
        return self.page_nelmts

    def page_initialized(self, page: int) -> bool:
        self._load_dblock()
        return bool(self._bitmap[page // 8] & (0x80 >> (page % 8)))

    def _read_page(self, page: int) -> bytes:
        with self._lock:
            hit = self._pages.get(page)
            if hit is not None:
                self._pages.move_to_end(page)
                return hit
        h = self.header
        addr = h.dblock_address + self.prefix_size + page * self.page_size
        n = self._page_nelmts(page)
        label = f"{self.what} data block page {page} at {addr}"
        buf = self.reader.read(addr, n * h.element_size + 4, label)
        verify(buf, label)
        data = buf[:-4]
        with self._lock:
            self._pages[page] = data
            while len(self._pages) > _CACHE_PAGES:
                self._pages.popitem(last=False)
        return data

    def __len__(self) -> int:
        return self.header.nelmts

    def get(self, idx: int) -> bytes | None:
        """Raw bytes of element `idx`, or None when it was never written (no data block or page)."""
        h = self.header
        if not 0 <= idx < h.nelmts:
            raise FormatError(f"{self.what}: element {idx} outside the array of {h.nelmts}")
        self._load_dblock()
        if h.dblock_address is None:
            return None
        es = h.element_size
        if not self.paged:
            assert self._elements is not None
            return self._elements[idx * es:(idx + 1) * es]
        page, rel = divmod(idx, self.page_nelmts)
        if not self.page_initialized(page):
            return None
        data = self._read_page(page)
        return data[rel * es:(rel + 1) * es]

    def items(self) -> Iterator[tuple[int, bytes]]:
        """(index, raw bytes) of every element that was written, in index order."""
        h = self.header
        self._load_dblock()
        if h.dblock_address is None:
            return
        es = h.element_size
        if not self.paged:
            assert self._elements is not None
            for i in range(h.nelmts):
                yield i, self._elements[i * es:(i + 1) * es]
            return
        for page in range(self.npages):
            if not self.page_initialized(page):
                continue
            data = self._read_page(page)
            base = page * self.page_nelmts
            for j in range(self._page_nelmts(page)):
                yield base + j, data[j * es:(j + 1) * es]
