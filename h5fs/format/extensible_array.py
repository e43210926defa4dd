"""Extensible arrays (spec Appendix C.D): header, index block, super blocks, data blocks, pages.

Reading only; every checksum is verified. Geometry as libhdf5 computes it (H5EAhdr.c
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

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterator

from ..errors import FormatError
from .checksum import checked_block, verify
from .codec import Reader, Sizes
from .fixed_array import check_block_prefix

SIG_HEADER, SIG_IBLOCK, SIG_SBLOCK, SIG_DBLOCK = b"EAHD", b"EAIB", b"EASB", b"EADB"
_CACHE = 16


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _log2(n: int) -> int:
    return n.bit_length() - 1


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class SuperBlockInfo:
    ndblks: int
    dblk_nelmts: int
    start_idx: int
    start_dblk: int


def header_size(sizes: Sizes) -> int:
    return 4 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 6 * sizes.length + sizes.offset + 4


def read_header(reader, address: int | None, what: str = "extensible array") -> ExtensibleArrayHeader:
    label = f"{what} header at {address}"
    buf = reader.read(address, header_size(reader.sizes), label)
    c, version = checked_block(buf, reader.sizes, SIG_HEADER, label, (0, 1))
    vals = [c.u8() for _ in range(7)]
    stats = [c.length() for _ in range(6)]
    iblock = c.offset()
    h = ExtensibleArrayHeader(address, version, *vals, *stats, iblock)
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
        self.arr_off_size = (h.max_nelmts_bits + 7) // 8
        self.page_nelmts = 1 << h.max_dblk_page_nelmts_bits
        self.iblock_nsblks = 2 * _log2(h.sup_blk_min_data_ptrs)
        self.iblock_ndblk_addrs = 2 * (h.sup_blk_min_data_ptrs - 1)
        self.iblock_nsblk_addrs = self.nsblks - self.iblock_nsblks
        if self.iblock_nsblk_addrs < 0:
            raise FormatError(f"{self.what}: fewer super blocks ({self.nsblks}) than the index block covers")
        self._iblock: tuple[bytes, tuple[int | None, ...], tuple[int | None, ...]] | None = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, int], object] = OrderedDict()

    # -- blocks ---------------------------------------------------------------------------------

    def _cached(self, key: tuple[str, int]):
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
            return hit

    def _store(self, key: tuple[str, int], value) -> None:
        with self._lock:
            self._cache[key] = value
            while len(self._cache) > _CACHE:
                self._cache.popitem(last=False)

    def index_block(self) -> tuple[bytes, tuple[int | None, ...], tuple[int | None, ...]]:
        """(element bytes, data block addresses, super block addresses) of the index block."""
        if self._iblock is not None:
            return self._iblock
        h, s = self.header, self.sizes
        label = f"{self.what} index block at {h.iblock_address}"
        size = 4 + 1 + 1 + s.offset + h.idx_blk_elmts * h.element_size \
            + (self.iblock_ndblk_addrs + self.iblock_nsblk_addrs) * s.offset + 4
        buf = self.reader.read(h.iblock_address, size, label)
        c = Reader(buf, 0, s, label)
        verify(buf, label)
        check_block_prefix(c, SIG_IBLOCK, h, label)
        elements = c.bytes(h.idx_blk_elmts * h.element_size)
        dblks = tuple(c.offset() for _ in range(self.iblock_ndblk_addrs))
        sblks = tuple(c.offset() for _ in range(self.iblock_nsblk_addrs))
        self._iblock = (elements, dblks, sblks)
        return self._iblock

    def _sblock_geometry(self, sblk_idx: int) -> tuple[int, int, int]:
        """(pages per data block, page-init bitmap bytes, super block size) of super block u."""
        info = self.sblk_info[sblk_idx]
        npages = info.dblk_nelmts // self.page_nelmts if info.dblk_nelmts > self.page_nelmts else 0
        # libhdf5 reserves ceil(npages / 8) bytes per data block but numbers the bits contiguously
        # (bit dblk * npages + page), so the tail of the bitmap stays unused
        bitmap = info.ndblks * ((npages + 7) // 8)
        size = 4 + 1 + 1 + self.sizes.offset + self.arr_off_size + bitmap + info.ndblks * self.sizes.offset + 4
        return npages, bitmap, size

    def super_block(self, sblk_idx: int, address: int) -> tuple[bytes, tuple[int | None, ...]]:
        """(page-init bitmap, data block addresses) of super block `sblk_idx` at `address`."""
        hit = self._cached(("s", address))
        if hit is not None:
            return hit
        info = self.sblk_info[sblk_idx]
        npages, bitmap_size, size = self._sblock_geometry(sblk_idx)
        label = f"{self.what} super block {sblk_idx} at {address}"
        buf = self.reader.read(address, size, label)
        c = Reader(buf, 0, self.sizes, label)
        verify(buf, label)
        check_block_prefix(c, SIG_SBLOCK, self.header, label)
        c.uint(self.arr_off_size)  # block offset: informational
        bitmap = c.bytes(bitmap_size)
        dblks = tuple(c.offset() for _ in range(info.ndblks))
        out = (bitmap, dblks)
        self._store(("s", address), out)
        return out

    def _dblock_prefix_size(self) -> int:
        return 4 + 1 + 1 + self.sizes.offset + self.arr_off_size + 4

    def data_block(self, address: int, nelmts: int) -> bytes:
        """Element bytes of an unpaged data block of `nelmts` elements."""
        hit = self._cached(("d", address))
        if hit is not None:
            return hit
        h = self.header
        label = f"{self.what} data block at {address}"
        buf = self.reader.read(address, self._dblock_prefix_size() + nelmts * h.element_size, label)
        c = Reader(buf, 0, self.sizes, label)
        verify(buf, label)
        check_block_prefix(c, SIG_DBLOCK, self.header, label)
        c.uint(self.arr_off_size)
        data = c.bytes(nelmts * h.element_size)
        self._store(("d", address), data)
        return data

    def data_block_page(self, dblock_address: int, page: int, check_prefix: bool = True) -> bytes:
        """Element bytes of page `page` of the paged data block at `dblock_address`."""
        h = self.header
        page_size = self.page_nelmts * h.element_size + 4
        addr = dblock_address + self._dblock_prefix_size() + page * page_size
        hit = self._cached(("p", addr))
        if hit is not None:
            return hit
        if check_prefix:
            self._check_paged_prefix(dblock_address)
        label = f"{self.what} data block page at {addr}"
        buf = self.reader.read(addr, page_size, label)
        verify(buf, label)
        data = buf[:-4]
        self._store(("p", addr), data)
        return data

    def _check_paged_prefix(self, address: int) -> None:
        if self._cached(("P", address)) is not None:
            return
        label = f"{self.what} data block at {address}"
        buf = self.reader.read(address, self._dblock_prefix_size(), label)
        c = Reader(buf, 0, self.sizes, label)
        verify(buf, label)
        check_block_prefix(c, SIG_DBLOCK, self.header, label)
        self._store(("P", address), True)

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
        if u < self.iblock_nsblks:
            dblk_idx = info.start_dblk + rel // info.dblk_nelmts
            addr = idblks[dblk_idx]
            if addr is None:
                return None
            if info.dblk_nelmts > self.page_nelmts:
                raise FormatError(f"{self.what}: paged data block referenced by the index block")
            data = self.data_block(addr, info.dblk_nelmts)
            k = rel % info.dblk_nelmts
            return data[k * es:(k + 1) * es]
        saddr = isblks[u - self.iblock_nsblks]
        if saddr is None:
            return None
        bitmap, dblks = self.super_block(u, saddr)
        dblk_idx = rel // info.dblk_nelmts
        addr = dblks[dblk_idx]
        if addr is None:
            return None
        k = rel % info.dblk_nelmts
        npages = info.dblk_nelmts // self.page_nelmts if info.dblk_nelmts > self.page_nelmts else 0
        if npages:
            page, k = divmod(k, self.page_nelmts)
            bit = dblk_idx * npages + page
            if not bitmap[bit // 8] & (0x80 >> (bit % 8)):
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
            npages = info.dblk_nelmts // self.page_nelmts if info.dblk_nelmts > self.page_nelmts else 0
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
                self._check_paged_prefix(addr)
                for p in range(npages):
                    bit = j * npages + p
                    pbase = base + p * self.page_nelmts
                    if pbase >= limit or not bitmap[bit // 8] & (0x80 >> (bit % 8)):
                        continue
                    yield from run(pbase, self.data_block_page(addr, p, False), self.page_nelmts)
