"""Extensible arrays (spec Appendix C.D): header, index block, super blocks, data blocks, pages.

Decoders verify every checksum; encoders (`encode_header`, `encode_index_block`,
`encode_super_block`, `encode_data_block`, and the pages' `fixed_array.encode_page`) return whole
blocks with their checksum. Blocks keep elements as raw bytes (see fixed_array for the chunk
elements). Decoded blocks are cached in the file's metadata cache. Geometry as libhdf5 computes it (H5EAhdr.c
H5EA__hdr_init, H5EAiblock.c, H5EAsblock.c, H5EAdblock.c, H5EA.c H5EA__lookup_elmt):

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

from dataclasses import dataclass
from typing import Iterator

from ..errors import FormatError
from .btree_v2 import sealed
from .checksum import checked_block, verify
from .codec import Reader, Sizes, Writer, as_uint, uint_code, uint_field
from .fixed_array import PREFIX_LAYOUT, bit_set, cached_header, check_block_prefix, decode_page, write_block_prefix

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
    return sealed(w)


def read_header(reader, address: int | None, what: str = "extensible array") -> ExtensibleArrayHeader:
    return cached_header(reader, address, f"{what} header at {address}", "ea header", header_size(reader.sizes),
                         decode_header)


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
    return tuple(None if a == undefined else a for (a,) in c.sizes.layout("O").iter_unpack(c.bytes(n * c.sizes.offset)))


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
    return sealed(w)


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
    return sealed(w)


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
    return sealed(w)


class ExtensibleArray:
    """Random access to the raw elements of an extensible array."""

    def __init__(self, reader, address: int | None, what: str = "extensible array"):
        self.reader = reader
        self.sizes: Sizes = reader.sizes
        self.what = f"{what} at {address}"
        self.header = h = read_header(reader, address, what)
        self.nsblks = 1 + h.max_nelmts_bits - _log2(h.data_blk_min_elmts)
        info, start_idx, start_dblk = [], 0, 0
        for u in range(self.nsblks):
            nd = 1 << (u // 2)
            ne = (1 << ((u + 1) // 2)) * h.data_blk_min_elmts
            info.append(SuperBlockInfo(nd, ne, start_idx, start_dblk))
            start_idx += nd * ne
            start_dblk += nd
        self.sblk_info = tuple(info)
        self.arr_off_size = h.block_offset_size
        self.page_nelmts = 1 << h.max_dblk_page_nelmts_bits
        self.iblock_nsblks = 2 * _log2(h.sup_blk_min_data_ptrs)
        self.iblock_ndblk_addrs = 2 * (h.sup_blk_min_data_ptrs - 1)
        self.iblock_nsblk_addrs = self.nsblks - self.iblock_nsblks
        if self.iblock_nsblk_addrs < 0:
            raise FormatError(f"{self.what}: fewer super blocks ({self.nsblks}) than the index block covers")

    # -- blocks ---------------------------------------------------------------------------------

    def _cached(self, address: int, kind: str, load, nbytes):
        return self.reader.meta.get(address, (kind, self.header.address), load, nbytes)

    def index_block_record(self) -> IndexBlock:
        h, s = self.header, self.sizes
        label = f"{self.what} index block at {h.iblock_address}"
        nd, ns = self.iblock_ndblk_addrs, self.iblock_nsblk_addrs

        def load() -> IndexBlock:
            buf = self.reader.read(h.iblock_address, index_block_size(h, s, nd, ns), label)
            return decode_index_block(buf, h, s, nd, ns, label)

        return self._cached(h.iblock_address, "ea iblock", load, index_block_size(h, s, nd, ns) + 100 * (nd + ns))

    def index_block(self) -> tuple[bytes, tuple[int | None, ...], tuple[int | None, ...]]:
        """(element bytes, data block addresses, super block addresses) of the index block."""
        ib = self.index_block_record()
        return ib.elements, ib.dblock_addresses, ib.sblock_addresses

    def npages(self, sblk_idx: int) -> int:
        """Pages per data block of super block `sblk_idx` (0: its data blocks are not paged)."""
        n = self.sblk_info[sblk_idx].dblk_nelmts
        return n // self.page_nelmts if n > self.page_nelmts else 0

    def bitmap_size(self, sblk_idx: int) -> int:
        # libhdf5 reserves ceil(npages / 8) bytes per data block but numbers the bits contiguously
        # (bit dblk * npages + page), so the tail of the bitmap stays unused
        return self.sblk_info[sblk_idx].ndblks * ((self.npages(sblk_idx) + 7) // 8)

    def super_block_record(self, sblk_idx: int, address: int) -> SuperBlock:
        h, s = self.header, self.sizes
        ndblks, bitmap = self.sblk_info[sblk_idx].ndblks, self.bitmap_size(sblk_idx)
        size = super_block_size(h, s, bitmap, ndblks)
        label = f"{self.what} super block {sblk_idx} at {address}"

        def load() -> SuperBlock:
            return decode_super_block(self.reader.read(address, size, label), h, s, address, bitmap, ndblks, label)

        return self._cached(address, f"ea sblock {sblk_idx}", load, size + 100 * ndblks)

    def super_block(self, sblk_idx: int, address: int) -> tuple[bytes, tuple[int | None, ...]]:
        """(page-init bitmap, data block addresses) of super block `sblk_idx` at `address`."""
        sb = self.super_block_record(sblk_idx, address)
        return sb.bitmap, sb.dblock_addresses

    def data_block_record(self, address: int, nelmts: int) -> DataBlock:
        """The data block at `address` storing `nelmts` elements (0: a paged block's prefix)."""
        h, s = self.header, self.sizes
        size = data_block_size(h, s, nelmts)
        label = f"{self.what} data block at {address}"

        def load() -> DataBlock:
            return decode_data_block(self.reader.read(address, size, label), h, s, address, nelmts, label)

        return self._cached(address, f"ea dblock {nelmts}", load, size + 100)

    def data_block(self, address: int, nelmts: int) -> bytes:
        """Element bytes of an unpaged data block of `nelmts` elements."""
        return self.data_block_record(address, nelmts).elements

    def data_block_page(self, dblock_address: int, page: int, check_prefix: bool = True) -> bytes:
        """Element bytes of page `page` of the paged data block at `dblock_address`."""
        page_size = self.page_nelmts * self.header.element_size + 4
        addr = dblock_address + data_block_size(self.header, self.sizes, 0) + page * page_size
        if check_prefix:
            self.data_block_record(dblock_address, 0)
        label = f"{self.what} data block page at {addr}"
        return self._cached(addr, "ea page", lambda: decode_page(self.reader.read(addr, page_size, label), label),
                            page_size + 40)

    # -- elements -------------------------------------------------------------------------------

    def superblock_index(self, idx: int) -> int:
        """H5EA__dblock_sblk_idx."""
        h = self.header
        return _log2((idx - h.idx_blk_elmts) // h.data_blk_min_elmts + 1)

    def get(self, idx: int) -> bytes | None:
        """Raw bytes of element `idx`, or None when it was never written."""
        h = self.header
        if idx < 0:
            raise FormatError(f"{self.what}: negative element index {idx}")
        if idx >= h.max_idx_set or h.iblock_address is None:
            return None
        es = h.element_size
        elements, idblks, isblks = self.index_block()
        if idx < h.idx_blk_elmts:
            return elements[idx * es:(idx + 1) * es]
        u = self.superblock_index(idx)
        if u >= self.nsblks:
            raise FormatError(f"{self.what}: element {idx} beyond the array's capacity")
        info = self.sblk_info[u]
        rel = idx - (h.idx_blk_elmts + info.start_idx)
        k = rel % info.dblk_nelmts
        npages = self.npages(u)
        if u < self.iblock_nsblks:
            addr = idblks[info.start_dblk + rel // info.dblk_nelmts]
            if addr is None:
                return None
            if npages:
                raise FormatError(f"{self.what}: paged data block referenced by the index block")
            return self.data_block(addr, info.dblk_nelmts)[k * es:(k + 1) * es]
        saddr = isblks[u - self.iblock_nsblks]
        if saddr is None:
            return None
        bitmap, dblks = self.super_block(u, saddr)
        dblk_idx = rel // info.dblk_nelmts
        addr = dblks[dblk_idx]
        if addr is None:
            return None
        if npages:
            page, k = divmod(k, self.page_nelmts)
            if not bit_set(bitmap, dblk_idx * npages + page):
                return None
            data = self.data_block_page(addr, page)
        else:
            data = self.data_block(addr, info.dblk_nelmts)
        return data[k * es:(k + 1) * es]

    def items(self) -> Iterator[tuple[int, bytes]]:
        """(index, raw bytes) of every element in written blocks below max_idx_set, in order."""
        h = self.header
        if h.iblock_address is None or h.max_idx_set == 0:
            return
        es = h.element_size
        limit = h.max_idx_set
        elements, idblks, isblks = self.index_block()
        for i in range(min(h.idx_blk_elmts, limit)):
            yield i, elements[i * es:(i + 1) * es]

        def run(base: int, data: bytes, n: int) -> Iterator[tuple[int, bytes]]:
            for j in range(min(n, limit - base)):
                yield base + j, data[j * es:(j + 1) * es]

        for u, info in enumerate(self.sblk_info):
            sbase = h.idx_blk_elmts + info.start_idx
            if sbase >= limit:
                return
            npages = self.npages(u)
            if u < self.iblock_nsblks:
                for j in range(info.ndblks):
                    addr = idblks[info.start_dblk + j]
                    base = sbase + j * info.dblk_nelmts
                    if addr is None or base >= limit:
                        continue
                    if npages:
                        raise FormatError(f"{self.what}: paged data block referenced by the index block")
                    yield from run(base, self.data_block(addr, info.dblk_nelmts), info.dblk_nelmts)
                continue
            saddr = isblks[u - self.iblock_nsblks]
            if saddr is None:
                continue
            bitmap, dblks = self.super_block(u, saddr)
            for j, addr in enumerate(dblks):
                base = sbase + j * info.dblk_nelmts
                if addr is None or base >= limit:
                    continue
                if not npages:
                    yield from run(base, self.data_block(addr, info.dblk_nelmts), info.dblk_nelmts)
                    continue
                self.data_block_record(addr, 0)
                for p in range(npages):
                    pbase = base + p * self.page_nelmts
                    if pbase >= limit or not bit_set(bitmap, j * npages + p):
                        continue
                    yield from run(pbase, self.data_block_page(addr, p, False), self.page_nelmts)
