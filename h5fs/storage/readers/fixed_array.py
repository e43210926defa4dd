"""Reads fixed arrays: the header and data block through the file's metadata cache, then elements
one by one or all written ones in order, reading only the pages that were written; `extents`: the
blocks an array occupies."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Sequence

from ...errors import FormatError
from ...format.codec import Sizes
from ...format.fixed_array import (FixedArrayDataBlock, FixedArrayHeader, bit_set, dblock_size, decode_dblock,
                                   decode_header, decode_page, header_size)

if TYPE_CHECKING:
    from ..extent_sink import ExtentSink


def cached_header(reader, address: int | None, label: str, kind: str, size: int, decode):
    """An array header through the metadata cache: `decode(bytes, address, sizes, label)` of
    the `size` bytes at `address` on a miss."""
    def load():
        return decode(reader.read(address, size, label), address, reader.sizes, label)

    return load() if address is None else reader.meta.get(address, kind, load, 400)


def read_header(reader, address: int | None, what: str = "fixed array") -> FixedArrayHeader:
    return cached_header(reader, address, f"{what} header at {address}", "fa header", header_size(reader.sizes),
                         decode_header)


class FixedArray:
    """Random access to the raw elements of a fixed array."""

    def __init__(self, reader, address: int | None, what: str = "fixed array"):
        self.reader = reader
        self.sizes: Sizes = reader.sizes
        self.what = f"{what} at {address}"
        self.header = h = read_header(reader, address, what)
        self.page_nelmts = h.page_nelmts
        self.paged = h.paged
        self.npages = h.npages
        self.prefix_size = dblock_size(h, self.sizes) if self.paged else 0
        self.page_size = self.page_nelmts * h.element_size + 4

    def dblock(self) -> FixedArrayDataBlock:
        h = self.header
        label = f"{self.what} data block at {h.dblock_address}"

        def load() -> FixedArrayDataBlock:
            buf = self.reader.read(h.dblock_address, dblock_size(h, self.sizes), label)
            return decode_dblock(buf, h, self.sizes, h.dblock_address, label)

        return self.reader.meta.get(h.dblock_address, ("fa dblock", h.address), load,
                                    lambda db: 100 + len(db.bitmap) + len(db.elements))

    def page_initialized(self, page: int) -> bool:
        return bit_set(self.dblock().bitmap, page)

    def page_address(self, page: int) -> int:
        return self.header.dblock_address + self.prefix_size + page * self.page_size

    def _read_page(self, page: int) -> bytes:
        addr = self.page_address(page)
        n = self.header.page_count(page) * self.header.element_size + 4
        label = f"{self.what} data block page {page} at {addr}"
        return self.reader.meta.get(addr, ("fa page", self.header.address),
                                    lambda: decode_page(self.reader.read(addr, n, label), label), n + 40)

    def __len__(self) -> int:
        return self.header.nelmts

    def get(self, idx: int) -> bytes | None:
        """Raw bytes of element `idx`, or None when it was never written (no data block or page)."""
        return self.get_many([idx])[0]

    def get_many(self, idxs: Sequence[int | None]) -> list[bytes | None]:
        """`get` of each index (None: None), reading the data block or each page once."""
        h = self.header
        if h.dblock_address is None:
            return [None] * len(idxs)
        es = h.element_size
        pages: dict[int, bytes | None] = {}
        out: list[bytes | None] = []
        for idx in idxs:
            if idx is None:
                out.append(None)
                continue
            if not 0 <= idx < h.nelmts:
                raise FormatError(f"{self.what}: element {idx} outside the array of {h.nelmts}")
            if not self.paged:
                page, rel = -1, idx
                if page not in pages:
                    pages[page] = self.dblock().elements
            else:
                page, rel = divmod(idx, self.page_nelmts)
                if page not in pages:
                    pages[page] = self._read_page(page) if self.page_initialized(page) else None
            data = pages[page]
            out.append(None if data is None else data[rel * es:(rel + 1) * es])
        return out

    def items(self) -> Iterator[tuple[int, bytes]]:
        """(index, raw bytes) of every element that was written, in index order."""
        h = self.header
        if h.dblock_address is None:
            return
        es = h.element_size
        if not self.paged:
            elements = self.dblock().elements
            for i in range(h.nelmts):
                yield i, elements[i * es:(i + 1) * es]
            return
        for page in range(self.npages):
            if not self.page_initialized(page):
                continue
            data = self._read_page(page)
            base = page * self.page_nelmts
            for j in range(h.page_count(page)):
                yield base + j, data[j * es:(j + 1) * es]


def extents(out: ExtentSink, arr: FixedArray, path: str, label: str = "chunk index fixed array") -> None:
    """The header's and the data block's extent (with all its pages)."""
    s, h = arr.sizes, arr.header
    out.add(h.address, header_size(s), path, f"{label} header")
    if h.dblock_address is None:
        return
    pages = sum(h.page_count(p) * h.element_size + 4 for p in range(h.npages))
    what = f"{label} data block"
    if out.add(h.dblock_address, dblock_size(h, s) + pages, path, what):
        with out.guard(path, what):
            arr.dblock()   # its pages are read with the records
