"""Fixed array chunk index (layout index type 3): the array read, the index, and its writes.

Slots count over the chunk grid of the dataset's MAXIMUM dimensions, in row-major order
(libhdf5 H5Dfarray.c: ``H5VM_array_offset_pre(ndims, max_down_chunks, scaled)``), so a dataset
whose current extent is smaller than its maximum leaves the trailing slots of each row unused.

Reading (`FixedArray`): the header and data block through the file's metadata cache, then
elements one by one or all written ones in order, reading only the pages that were written;
`extents`: the blocks an array occupies.

Writing (`FixedArrayWriter`, one batch of put and removed chunks), as libhdf5 does (H5FA.c
H5FA_set, H5FAdblock.c, H5FAdblkpage.c): the header is made with the index (one slot per chunk of
the maximum grid, the page bits of the layout message); the data block at the first chunk, its
whole extent allocated at once (the prefix, then every page when paged); a page is written when a
chunk first lands in it, its other slots undefined, and its bit set in the data block's page-init
bitmap. A removal writes the undefined element back; blocks are never freed.

Each block and page the batch touches is read once and written once: new ones (a data block, a
page written for the first time: nothing points at them yet) with `write_new`, live ones in place
with their checksum recomputed, the header in place when its data block appears. A new array's
header goes to fresh space: the layout message the put returns publishes it.
"""

from __future__ import annotations

from dataclasses import replace
from math import prod
from typing import TYPE_CHECKING, Iterator, Sequence

from ...errors import FormatError
from ...format.codec import Sizes
from ...format.fixed_array import (FixedArrayDataBlock, FixedArrayHeader, bit_set, dblock_size, decode_dblock,
                                   decode_header, decode_page, encode_dblock, encode_header, encode_page, header_size)
from ...format.messages.layout import DataLayout
from . import ChunkRecord, IndexContext
from .array_index import ArrayIndex, ArrayWriter, Slots, by_page, element_decoder, patched, set_bit
from .grid import check_rank, chunk_nbytes, max_grid, ravel, unravel

if TYPE_CHECKING:
    from ..extent_sink import ExtentSink
    from ..transaction import Transaction


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


class FixedArrayIndex(ArrayIndex):
    def __init__(self, ctx: IndexContext):
        super().__init__(ctx)
        check_rank(ctx)
        self.grid = max_grid(ctx)
        self.nbytes = chunk_nbytes(ctx)
        self.what = f"{ctx.what}: fixed array index"
        addr = ctx.layout.index.address if ctx.layout.index else None
        if addr is not None:
            self.open_array(FixedArray(ctx.reader, addr, self.what))

    def open_array(self, array: FixedArray) -> None:
        ctx = self.ctx
        self.array = array
        h = array.header
        expected = prod(self.grid)
        if h.nelmts != expected:
            raise FormatError(f"{ctx.what}: fixed array holds {h.nelmts} slots, the maximum chunk grid "
                              f"{self.grid} needs {expected}")
        self.decode = element_decoder(ctx, h.client_id, h.element_size)

    def writer(self, txn: Transaction) -> FixedArrayWriter:
        return FixedArrayWriter(self, txn)

    def index_of(self, coords: tuple[int, ...]) -> int | None:
        return ravel(coords, self.grid)

    def coords_of(self, idx: int) -> tuple[int, ...]:
        return unravel(idx, self.grid)


class FixedArrayWriter(ArrayWriter):
    index: FixedArrayIndex

    def apply(self, records: Sequence[ChunkRecord], removed: Sequence[tuple[int, ...]]) -> DataLayout | None:
        todo = self.changes(records, removed)
        arr = self.index.array
        live = arr is not None and arr.header.dblock_address is not None
        if not live and not self.fmt.adds(todo.values()):
            return None   # only removals, and no chunk was ever indexed
        hdr = arr.header if arr else self._new_header()
        if hdr.dblock_address is None:
            hdr = self._new_dblock(hdr, todo)
            (self.txn.write_in_place if arr else self.txn.write_new)(hdr.address, encode_header(hdr, self.sizes))
        else:
            self._update(arr, todo)
        if arr is not None:
            arr.header = hdr   # what the reader would decode from the staged header
            self.index.open_array(arr)
            return None
        self.index.open_array(FixedArray(self.txn.reader, hdr.address, self.index.what))
        return self.published(hdr.address)

    def _new_header(self) -> FixedArrayHeader:
        return FixedArrayHeader(self.txn.allocate(header_size(self.sizes)), self.fmt.version, self.fmt.client_id, self.fmt.size,
                                self.index.ctx.layout.index.page_bits, prod(self.index.grid), None)

    def _page_address(self, hdr: FixedArrayHeader, page: int) -> int:
        return hdr.dblock_address + dblock_size(hdr, self.sizes) + page * (hdr.page_nelmts * self.fmt.size + 4)

    def _new_page(self, hdr: FixedArrayHeader, page: int, items: Slots, bitmap: bytearray) -> None:
        """A page written for the first time: undefined elements but `items`."""
        base = page * hdr.page_nelmts
        self.txn.write_new(self._page_address(hdr, page),
                           encode_page(patched(self.fmt.fill * hdr.page_count(page), items, base, self.fmt.size)))
        set_bit(bitmap, page)

    def _new_dblock(self, hdr: FixedArrayHeader, todo: Slots) -> FixedArrayHeader:
        es = self.fmt.size
        pages = hdr.nelmts * es + hdr.npages * 4 if hdr.paged else 0
        hdr = replace(hdr, dblock_address=self.txn.allocate(dblock_size(hdr, self.sizes) + pages))
        if hdr.paged:
            bitmap = bytearray((hdr.npages + 7) // 8)
            for page, items in sorted(by_page(todo, hdr.page_nelmts).items()):
                if self.fmt.adds(items.values()):
                    self._new_page(hdr, page, items, bitmap)
            db = FixedArrayDataBlock(hdr.dblock_address, bytes(bitmap), b"")
        else:
            db = FixedArrayDataBlock(hdr.dblock_address, b"", patched(self.fmt.fill * hdr.nelmts, todo, 0, es))
        self.stage(None, db, encode_dblock, hdr)
        return hdr

    def _update(self, arr: FixedArray, todo: Slots) -> None:
        hdr, es = arr.header, self.fmt.size
        db = arr.dblock()
        if not hdr.paged:
            new = replace(db, elements=patched(db.elements, todo, 0, es))
        else:
            bitmap = bytearray(db.bitmap)
            for page, items in sorted(by_page(todo, hdr.page_nelmts).items()):
                if bit_set(bitmap, page):
                    old = arr._read_page(page)   # through the cache the lookups filled
                    data = patched(old, items, page * hdr.page_nelmts, es)
                    if data != old:
                        self.txn.write_in_place(self._page_address(hdr, page), encode_page(data))
                elif self.fmt.adds(items.values()):
                    self._new_page(hdr, page, items, bitmap)
            new = replace(db, bitmap=bytes(bitmap))
        self.stage(db, new, encode_dblock, hdr)
