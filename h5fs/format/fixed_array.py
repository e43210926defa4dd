"""Fixed arrays (spec Appendix C.C): header, data block, data block pages; chunk-index elements.

Layout as libhdf5 writes it (H5FAcache.c, H5FAdblock.c):

- header ``FAHD``: version, client ID, element size, page bits, number of elements (length),
  data block address, checksum;
- data block ``FADB``: version, client ID, header address, then, when the array has more elements
  than one page holds (``nelmts > 2**page_bits``), a page-init bitmap of ``ceil(npages / 8)`` bytes
  (bit i, most significant bit first, set when page i was written) and the checksum; the pages
  follow the data block prefix contiguously, each ``elements + checksum``, the last one holding
  only the remaining elements. Unpaged, the elements sit inside the data block before its checksum.

Decoders verify every checksum; encoders (`encode_header`, `encode_dblock`, `encode_page`) return
whole blocks with their checksum. Blocks keep their elements as raw bytes (any client); the
elements of chunk indexes (client 0: address; client 1: address, chunk size, filter mask; clients
2 and 3, structured chunks: address, chunk size, the chunk's section metadata, unfiltered or
filtered, format/structured_chunk.py) are decoded and encoded by `chunk_element_decoder` /
`chunk_element_encoder`, shared with the extensible array. Structured chunk clients came with
version 1 of the array's blocks (spec 3.0); the RFC means to go back to version 0: both read.

Pure bytes <-> records; h5fs.storage.index.fixed_array reads arrays from the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from ..errors import FormatError
from .checksum import checked_block, sealed, verify
from .codec import Reader, Sizes, Writer, as_uint, uint_code, uint_field
from .structured_chunk import Composition, SectionMeta, meta_fields, meta_from_fields, meta_layout

SIG_HEADER, SIG_DBLOCK = b"FAHD", b"FADB"
CLIENT_CHUNKS, CLIENT_FILTERED_CHUNKS, CLIENT_STRUCTURED, CLIENT_FILTERED_STRUCTURED = 0, 1, 2, 3
MAX_ELEMENT_SIZE = 255
MAX_PAGE_BITS = 32
HEADER_LAYOUT = "BBBLO"     # after signature and version: client, element size, page bits, count, data block
PREFIX_LAYOUT = "4sBBO"     # every array block: signature, version, client, header address


@dataclass(frozen=True, slots=True)
class ChunkElement:
    """One chunk-index element: the chunk's address (None: not allocated), size and filter mask
    (or, for a structured chunk, its section metadata)."""

    address: int | None
    size: int = 0
    filter_mask: int = 0
    sections: SectionMeta | None = None


def client_id(filtered: bool, structured: bool) -> int:
    return (CLIENT_FILTERED_CHUNKS if filtered else CLIENT_CHUNKS) + (2 if structured else 0)


def _element_layout(filtered: bool, size_width: int, comp: Composition | None) -> str:
    if (filtered or comp is not None) and not 1 <= size_width <= 8:
        raise FormatError(f"chunk index: chunk size width {size_width} out of range")
    if comp is not None:
        return "O" + uint_code(size_width) + meta_layout(comp, filtered)
    return "O" + uint_code(size_width) + "I" if filtered else "O"


@lru_cache(maxsize=64)
def chunk_element_decoder(sizes: Sizes, filtered: bool, size_width: int = 0,
                          comp: Composition | None = None) -> Callable[[bytes], ChunkElement]:
    """Decoder of raw element bytes into a ChunkElement (clients 0-3: `comp` for structured)."""
    st = sizes.layout(_element_layout(filtered, size_width, comp))

    def decode(raw: bytes) -> ChunkElement:
        v = st.unpack_from(raw)
        addr = sizes.address(v[0])
        if comp is not None:
            return ChunkElement(addr, as_uint(v[1]), 0, meta_from_fields(comp, filtered, v[2:]))
        return ChunkElement(addr, as_uint(v[1]), v[2]) if filtered else ChunkElement(addr)

    return decode


@lru_cache(maxsize=64)
def chunk_element_encoder(sizes: Sizes, filtered: bool, size_width: int = 0,
                          comp: Composition | None = None) -> Callable[[ChunkElement], bytes]:
    """Encoder of a ChunkElement into raw element bytes (clients 0-3: `comp` for structured).
    A structured slot without a chunk is the undefined address and zeros."""
    st = sizes.layout(_element_layout(filtered, size_width, comp))
    empty = None if comp is None else SectionMeta((0,) * (comp.nsections - 1),
                                                  *(((0,) * comp.nsections,) * 2 if filtered else ()))

    def encode(el: ChunkElement) -> bytes:
        if comp is not None:
            return st.pack(sizes.raw_address(el.address), uint_field(el.size, size_width),
                           *meta_fields(comp, filtered, el.sections or empty))
        extra = (uint_field(el.size, size_width), el.filter_mask) if filtered else ()
        return st.pack(sizes.raw_address(el.address), *extra)

    return encode


def element_size(sizes: Sizes, filtered: bool, size_width: int, comp: Composition | None) -> int:
    return sizes.layout(_element_layout(filtered, size_width, comp)).size


@dataclass(frozen=True, slots=True)
class FixedArrayHeader:
    address: int
    version: int
    client_id: int
    element_size: int
    page_bits: int
    nelmts: int
    dblock_address: int | None

    @property
    def page_nelmts(self) -> int:
        return 1 << self.page_bits

    @property
    def paged(self) -> bool:
        return self.nelmts > self.page_nelmts

    @property
    def npages(self) -> int:
        return -(-self.nelmts // self.page_nelmts) if self.paged else 0

    def page_count(self, page: int) -> int:
        """Elements held by page `page` (the last one holds the rest)."""
        return min(self.page_nelmts, self.nelmts - page * self.page_nelmts)


def header_size(sizes: Sizes) -> int:
    return 4 + 1 + sizes.layout(HEADER_LAYOUT).size + 4


def decode_header(buf: bytes | memoryview, address: int, sizes: Sizes, label: str) -> FixedArrayHeader:
    c, version = checked_block(buf, sizes, SIG_HEADER, label, (0, 1))
    client, esize, page_bits, nelmts, dblock = c.fields(HEADER_LAYOUT)
    if esize == 0:
        raise FormatError(f"{label}: zero element size")
    if page_bits > MAX_PAGE_BITS:
        raise FormatError(f"{label}: page bits {page_bits} too large")
    return FixedArrayHeader(address, version, client, esize, page_bits, nelmts, sizes.address(dblock))


def encode_header(h: FixedArrayHeader, sizes: Sizes) -> bytes:
    w = Writer(sizes)
    w.fields("4sB" + HEADER_LAYOUT, SIG_HEADER, h.version, h.client_id, h.element_size, h.page_bits, h.nelmts,
             sizes.raw_address(h.dblock_address))
    return sealed(w.buf)


def check_block_prefix(c: Reader, signature: bytes, header, label: str) -> None:
    """The prefix every block of a fixed or extensible array starts with: signature, then the
    version, client and header address its array header records."""
    sig, version, client, haddr = c.fields(PREFIX_LAYOUT)
    if sig != signature:
        raise FormatError(f"{label}: bad signature {sig!r}, expected {signature!r}")
    if version != header.version:
        raise FormatError(f"{label}: version {version} differs from the header's {header.version}")
    if client != header.client_id:
        raise FormatError(f"{label}: client {client} differs from the header's {header.client_id}")
    if c.sizes.address(haddr) != header.address:
        raise FormatError(f"{label}: belongs to another array (header at {header.address})")


def write_block_prefix(w: Writer, signature: bytes, header) -> None:
    """The mirror of `check_block_prefix`."""
    w.fields(PREFIX_LAYOUT, signature, header.version, header.client_id, header.address)


def decode_page(buf: bytes | memoryview, label: str) -> bytes:
    """The elements of a data block page (fixed or extensible array), checksum verified."""
    verify(buf, label)
    return bytes(buf[:-4])


def encode_page(elements: bytes) -> bytes:
    return sealed(elements)


@dataclass(frozen=True, slots=True)
class FixedArrayDataBlock:
    address: int
    bitmap: bytes      # page-init bitmap (paged arrays only)
    elements: bytes    # raw elements (unpaged arrays only; paged ones keep theirs in the pages)


def dblock_size(h: FixedArrayHeader, sizes: Sizes) -> int:
    body = (h.npages + 7) // 8 if h.paged else h.nelmts * h.element_size
    return sizes.layout(PREFIX_LAYOUT).size + body + 4


def decode_dblock(buf: bytes | memoryview, h: FixedArrayHeader, sizes: Sizes, address: int,
                  label: str) -> FixedArrayDataBlock:
    c = Reader(buf, 0, sizes, label)
    c.need(dblock_size(h, sizes))
    verify(buf, label)
    check_block_prefix(c, SIG_DBLOCK, h, label)
    if h.paged:
        return FixedArrayDataBlock(address, c.bytes((h.npages + 7) // 8), b"")
    return FixedArrayDataBlock(address, b"", c.bytes(h.nelmts * h.element_size))


def encode_dblock(db: FixedArrayDataBlock, h: FixedArrayHeader, sizes: Sizes) -> bytes:
    w = Writer(sizes)
    write_block_prefix(w, SIG_DBLOCK, h)
    w.bytes(db.bitmap if h.paged else db.elements)
    return sealed(w.buf)


def bit_set(bitmap: bytes, bit: int) -> bool:
    """Page-init bitmaps number their bits from the most significant bit of each byte."""
    return bool(bitmap[bit // 8] & (0x80 >> (bit % 8)))
