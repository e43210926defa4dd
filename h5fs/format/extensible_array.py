"""Extensible arrays (spec Appendix C.D): header, index block, super blocks, data blocks, pages.

Decoders verify every checksum; encoders (`encode_header`, `encode_index_block`,
`encode_super_block`, `encode_data_block`, and the pages' `fixed_array.encode_page`) return whole
blocks with their checksum. Blocks keep elements as raw bytes (see fixed_array for the chunk
elements). Pure bytes <-> records and geometry; h5fs.storage.index.extensible_array reads
arrays from the file. Geometry as libhdf5 computes it (H5EAhdr.c H5EA__hdr_init, H5EAiblock.c,
H5EAsblock.c, H5EAdblock.c, H5EA.c H5EA__lookup_elmt):

- ``nsblks = 1 + max_nelmts_bits - log2(data_blk_min_elmts)`` super blocks; super block u has
  ``2**(u // 2)`` data blocks of ``2**((u + 1) // 2) * data_blk_min_elmts`` elements; the
  element index space after the index block's own elements is laid out super block after super
  block;
- the index block holds ``idx_blk_elmts`` elements, the data block addresses of the first
  ``2 * log2(sup_blk_min_data_ptrs)`` super blocks (``2 * (sup_blk_min_data_ptrs - 1)``
  addresses), then the addresses of the remaining super blocks;
- element ``i >= idx_blk_elmts`` lies in super block ``floor(log2((i - idx_blk_elmts) //
  data_blk_min_elmts + 1))``;
- a data block with more elements than a page (``2**max_dblk_page_nelmts_bits``) is paged: it
  stores only its prefix (signature, version, client, header address, block offset, checksum)
  and its pages follow it, each ``elements + checksum``; the super block holds one page-init bit
  per page of each of its data blocks (bit ``dblk * npages + page``, most significant bit first,
  in a bitmap of ``ndblks * ceil(npages / 8)`` bytes). Data blocks referenced by the
  index block are never paged in files libhdf5 writes (it cannot read such a file either).
- the block offset width is ``ceil(max_nelmts_bits / 8)``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..errors import FormatError
from .checksum import checked_block, sealed, verify
from .codec import Reader, Sizes, Writer, as_uint, uint_code, uint_field
from .fixed_array import PREFIX_LAYOUT, check_block_prefix, write_block_prefix

SIG_HEADER, SIG_IBLOCK, SIG_SBLOCK, SIG_DBLOCK = b"EAHD", b"EAIB", b"EASB", b"EADB"
HEADER_LAYOUT = "BBBBBBBLLLLLLO"   # after signature and version


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _log2(n: int) -> int:
    return n.bit_length() - 1


@dataclass(frozen=True, slots=True)
class ExtensibleArrayHeader:
    address: int
    version: int
    client_id: int
    element_size: int
    max_nelmts_bits: int
    idx_blk_elmts: int
    data_blk_min_elmts: int
    sup_blk_min_data_ptrs: int
    max_dblk_page_nelmts_bits: int
    num_super_blocks: int
    super_block_size: int
    num_data_blocks: int
    data_block_size: int
    max_idx_set: int
    num_elements: int
    iblock_address: int | None

    @property
    def block_offset_size(self) -> int:
        """Bytes of the block offset in super and data blocks."""
        return (self.max_nelmts_bits + 7) // 8


@dataclass(frozen=True, slots=True)
class SuperBlockInfo:
    ndblks: int
    dblk_nelmts: int
    start_idx: int
    start_dblk: int


def super_blocks(h: ExtensibleArrayHeader) -> tuple[SuperBlockInfo, ...]:
    """Every super block's data block count, elements per data block and first element and data
    block (counted after the index block's own)."""
    return _super_blocks(h.max_nelmts_bits, h.data_blk_min_elmts)


@functools.lru_cache(maxsize=64)   # a few shapes of array serve a whole file's datasets
def _super_blocks(max_nelmts_bits: int, data_blk_min_elmts: int) -> tuple[SuperBlockInfo, ...]:
    info, start_idx, start_dblk = [], 0, 0
    for u in range(1 + max_nelmts_bits - _log2(data_blk_min_elmts)):
        nd = 1 << (u // 2)
        ne = (1 << ((u + 1) // 2)) * data_blk_min_elmts
        info.append(SuperBlockInfo(nd, ne, start_idx, start_dblk))
        start_idx += nd * ne
        start_dblk += nd
    return tuple(info)


def index_block_super_blocks(h: ExtensibleArrayHeader) -> int:
    """Super blocks whose data block addresses the index block holds itself."""
    return 2 * _log2(h.sup_blk_min_data_ptrs)


def super_block_index(h: ExtensibleArrayHeader, idx: int) -> int:
    """H5EA__dblock_sblk_idx: the super block of element `idx` (>= idx_blk_elmts)."""
    return _log2((idx - h.idx_blk_elmts) // h.data_blk_min_elmts + 1)


def header_size(sizes: Sizes) -> int:
    return 4 + 1 + sizes.layout(HEADER_LAYOUT).size + 4


def decode_header(buf: bytes | memoryview, address: int, sizes: Sizes, label: str) -> ExtensibleArrayHeader:
    c, version = checked_block(buf, sizes, SIG_HEADER, label, (0, 1))
    *vals, iblock = c.fields(HEADER_LAYOUT)
    h = ExtensibleArrayHeader(address, version, *vals, sizes.address(iblock))
    if h.element_size == 0:
        raise FormatError(f"{label}: zero element size")
    if not 1 <= h.max_nelmts_bits <= 64:
        raise FormatError(f"{label}: max elements bits {h.max_nelmts_bits} out of range")
    if not _is_pow2(h.data_blk_min_elmts) or _log2(h.data_blk_min_elmts) > h.max_nelmts_bits:
        raise FormatError(f"{label}: data block minimum elements {h.data_blk_min_elmts} invalid")
    if not _is_pow2(h.sup_blk_min_data_ptrs) or h.sup_blk_min_data_ptrs < 2:
        raise FormatError(f"{label}: super block minimum data pointers {h.sup_blk_min_data_ptrs} invalid")
    if h.max_dblk_page_nelmts_bits > h.max_nelmts_bits:
        raise FormatError(f"{label}: page bits {h.max_dblk_page_nelmts_bits} exceed the array's bits")
    return h


def encode_header(h: ExtensibleArrayHeader, sizes: Sizes) -> bytes:
    w = Writer(sizes)
    w.fields("4sB" + HEADER_LAYOUT, SIG_HEADER, h.version, h.client_id, h.element_size, h.max_nelmts_bits,
             h.idx_blk_elmts, h.data_blk_min_elmts, h.sup_blk_min_data_ptrs, h.max_dblk_page_nelmts_bits,
             h.num_super_blocks, h.super_block_size, h.num_data_blocks, h.data_block_size, h.max_idx_set,
             h.num_elements, sizes.raw_address(h.iblock_address))
    return sealed(w.buf)


# -- blocks -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IndexBlock:
    address: int
    elements: bytes                         # idx_blk_elmts raw elements
    dblock_addresses: tuple[int | None, ...]
    sblock_addresses: tuple[int | None, ...]


@dataclass(frozen=True, slots=True)
class SuperBlock:
    address: int
    block_offset: int
    bitmap: bytes                           # page-init bits of its paged data blocks
    dblock_addresses: tuple[int | None, ...]


@dataclass(frozen=True, slots=True)
class DataBlock:
    address: int
    block_offset: int
    elements: bytes                         # empty for a paged data block (its pages follow it)


def _addresses(c: Reader, n: int) -> tuple[int | None, ...]:
    undefined = c.sizes.undefined
    values = c.sizes.layout("O" * n).unpack(c.bytes(n * c.sizes.offset))
    if values.count(undefined) == n:   # a small array's blocks: none made yet
        return (None,) * n
    return tuple(None if a == undefined else a for a in values)


def _write_addresses(w: Writer, addresses) -> None:
    for a in addresses:
        w.offset(a)


def _offset_layout(h: ExtensibleArrayHeader) -> str:
    return uint_code(h.block_offset_size)


def _open_block(buf, h: ExtensibleArrayHeader, sizes: Sizes, size: int, signature: bytes, label: str) -> Reader:
    """A Reader past the prefix of a block of `size` bytes, checksum and prefix verified."""
    c = Reader(buf, 0, sizes, label)
    c.need(size)
    verify(bytes(c.buf[:size]), label)
    check_block_prefix(c, signature, h, label)
    return c


def index_block_size(h: ExtensibleArrayHeader, sizes: Sizes, ndblk_addrs: int, nsblk_addrs: int) -> int:
    return sizes.layout(PREFIX_LAYOUT).size + h.idx_blk_elmts * h.element_size \
        + (ndblk_addrs + nsblk_addrs) * sizes.offset + 4


def decode_index_block(buf, h: ExtensibleArrayHeader, sizes: Sizes, ndblk_addrs: int, nsblk_addrs: int,
                       label: str) -> IndexBlock:
    c = _open_block(buf, h, sizes, index_block_size(h, sizes, ndblk_addrs, nsblk_addrs), SIG_IBLOCK, label)
    elements = c.bytes(h.idx_blk_elmts * h.element_size)
    return IndexBlock(h.iblock_address, elements, _addresses(c, ndblk_addrs), _addresses(c, nsblk_addrs))


def encode_index_block(ib: IndexBlock, h: ExtensibleArrayHeader, sizes: Sizes) -> bytes:
    w = Writer(sizes)
    write_block_prefix(w, SIG_IBLOCK, h)
    w.bytes(ib.elements)
    _write_addresses(w, ib.dblock_addresses)
    _write_addresses(w, ib.sblock_addresses)
    return sealed(w.buf)


def super_block_size(h: ExtensibleArrayHeader, sizes: Sizes, bitmap_size: int, ndblks: int) -> int:
    return sizes.layout(PREFIX_LAYOUT + _offset_layout(h)).size + bitmap_size + ndblks * sizes.offset + 4


def decode_super_block(buf, h: ExtensibleArrayHeader, sizes: Sizes, address: int, bitmap_size: int, ndblks: int,
                       label: str) -> SuperBlock:
    c = _open_block(buf, h, sizes, super_block_size(h, sizes, bitmap_size, ndblks), SIG_SBLOCK, label)
    (off,) = c.fields(_offset_layout(h))
    bitmap = c.bytes(bitmap_size)
    return SuperBlock(address, as_uint(off), bitmap, _addresses(c, ndblks))


def encode_super_block(sb: SuperBlock, h: ExtensibleArrayHeader, sizes: Sizes) -> bytes:
    w = Writer(sizes)
    write_block_prefix(w, SIG_SBLOCK, h)
    w.fields(_offset_layout(h), uint_field(sb.block_offset, h.block_offset_size))
    w.bytes(sb.bitmap)
    _write_addresses(w, sb.dblock_addresses)
    return sealed(w.buf)


def data_block_size(h: ExtensibleArrayHeader, sizes: Sizes, nelmts: int) -> int:
    """Bytes of a data block storing `nelmts` elements itself (0: a paged block's prefix)."""
    return sizes.layout(PREFIX_LAYOUT + _offset_layout(h)).size + nelmts * h.element_size + 4


def decode_data_block(buf, h: ExtensibleArrayHeader, sizes: Sizes, address: int, nelmts: int,
                      label: str) -> DataBlock:
    """A data block holding `nelmts` elements (0 for a paged data block: the prefix only)."""
    c = _open_block(buf, h, sizes, data_block_size(h, sizes, nelmts), SIG_DBLOCK, label)
    (off,) = c.fields(_offset_layout(h))
    return DataBlock(address, as_uint(off), c.bytes(nelmts * h.element_size))


def encode_data_block(db: DataBlock, h: ExtensibleArrayHeader, sizes: Sizes) -> bytes:
    w = Writer(sizes)
    write_block_prefix(w, SIG_DBLOCK, h)
    w.fields(_offset_layout(h), uint_field(db.block_offset, h.block_offset_size))
    w.bytes(db.elements)
    return sealed(w.buf)
