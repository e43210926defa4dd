"""Reads an extensible array: the header, index block, super blocks, data blocks and pages through
the file's metadata cache, then elements one by one or all written ones in order; `extents`: the
blocks an array occupies."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator, Sequence

from ....errors import FormatError
from ....format.codec import Sizes
from ....format.extensible_array import (DataBlock, ExtensibleArrayHeader, IndexBlock, SuperBlock, data_block_size,
                                        decode_data_block, decode_header, decode_index_block, decode_super_block,
                                        header_size, index_block_size, index_block_super_blocks, super_block_index,
                                        super_block_size, super_blocks)
from ....format.fixed_array import bit_set, decode_page
from ..fixed_array import cached_header

if TYPE_CHECKING:
    from ...extent_sink import ExtentSink


def read_header(reader, address: int | None, what: str = "extensible array") -> ExtensibleArrayHeader:
    return cached_header(reader, address, f"{what} header at {address}", "ea header", header_size(reader.sizes),
                         decode_header)


class ExtensibleArray:
    """Random access to the raw elements of an extensible array."""

    def __init__(self, reader, address: int | None, what: str = "extensible array"):
        self.reader = reader
        self.sizes: Sizes = reader.sizes
        self.what = f"{what} at {address}"
        self.header = h = read_header(reader, address, what)
        self.sblk_info = super_blocks(h)
        self.nsblks = len(self.sblk_info)
        self.arr_off_size = h.block_offset_size
        self.page_nelmts = 1 << h.max_dblk_page_nelmts_bits
        self.iblock_nsblks = index_block_super_blocks(h)
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
        return super_block_index(self.header, idx)

    def get(self, idx: int) -> bytes | None:
        """Raw bytes of element `idx`, or None when it was never written."""
        return self.get_many([idx])[0]

    def get_many(self, idxs: Sequence[int | None]) -> list[bytes | None]:
        """`get` of each index (None: None), fetching each block once for all its elements."""
        memo: dict[tuple, object] = {}

        def once(key: tuple, load: Callable[[], object]):
            value = memo.get(key)
            if value is None:
                value = memo[key] = load()
            return value

        return [None if idx is None else self._get(idx, once) for idx in idxs]

    def _get(self, idx: int, once) -> bytes | None:
        h = self.header
        if idx < 0:
            raise FormatError(f"{self.what}: negative element index {idx}")
        if idx >= h.max_idx_set or h.iblock_address is None:
            return None
        es = h.element_size
        elements, idblks, isblks = once(("i",), self.index_block)
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
            data = once(("d", addr), lambda: self.data_block(addr, info.dblk_nelmts))
            return data[k * es:(k + 1) * es]
        saddr = isblks[u - self.iblock_nsblks]
        if saddr is None:
            return None
        bitmap, dblks = once(("s", u, saddr), lambda: self.super_block(u, saddr))
        dblk_idx = rel // info.dblk_nelmts
        addr = dblks[dblk_idx]
        if addr is None:
            return None
        if npages:
            page, k = divmod(k, self.page_nelmts)
            if not bit_set(bitmap, dblk_idx * npages + page):
                return None
            data = once(("p", addr, page), lambda: self.data_block_page(addr, page))
        else:
            data = once(("d", addr), lambda: self.data_block(addr, info.dblk_nelmts))
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


def extents(out: ExtentSink, arr: ExtensibleArray, path: str, label: str = "chunk index extensible array") -> None:
    """The header's, index block's, super blocks' and data blocks' extents (a paged data block
    with all its pages)."""
    s, h = arr.sizes, arr.header
    out.add(h.address, header_size(s), path, f"{label} header")
    if h.iblock_address is None:
        return
    ib = None
    what = f"{label} index block"
    if out.add(h.iblock_address, index_block_size(h, s, arr.iblock_ndblk_addrs, arr.iblock_nsblk_addrs), path, what):
        with out.guard(path, what):
            ib = arr.index_block_record()
    if ib is None:
        return
    blocks = [(u, addr) for u in range(arr.iblock_nsblks) for addr in
              ib.dblock_addresses[arr.sblk_info[u].start_dblk:][:arr.sblk_info[u].ndblks]]
    for k, saddr in enumerate(ib.sblock_addresses):
        u = arr.iblock_nsblks + k
        what = f"{label} super block"
        if saddr is None or not out.add(saddr, super_block_size(h, s, arr.bitmap_size(u), arr.sblk_info[u].ndblks),
                                        path, what):
            continue
        with out.guard(path, what):
            blocks += [(u, addr) for addr in arr.super_block_record(u, saddr).dblock_addresses]
    page = arr.page_nelmts * h.element_size + 4
    what = f"{label} data block"
    for u, addr in blocks:
        npages, nelmts = arr.npages(u), arr.sblk_info[u].dblk_nelmts
        stored = 0 if npages else nelmts
        if addr is not None and out.add(addr, data_block_size(h, s, stored) + npages * page, path, what):
            with out.guard(path, what):
                arr.data_block_record(addr, stored)
