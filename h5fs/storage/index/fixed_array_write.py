"""Writes fixed array chunk indexes (layout index type 3): one batch of put and removed chunks.

As libhdf5 does (H5FA.c H5FA_set, H5FAdblock.c, H5FAdblkpage.c): the header is made with the
index (one slot per chunk of the maximum grid, the page bits of the layout message); the data
block at the first chunk, its whole extent allocated at once (the prefix, then every page when
paged); a page is written when a chunk first lands in it, its other slots undefined, and its bit
set in the data block's page-init bitmap. A removal writes the undefined element back; blocks
are never freed.

Each block and page the batch touches is read once and written once: new ones (a data block, a
page written for the first time: nothing points at them yet) with `write_new`, live ones in place
with their checksum recomputed, the header in place when its data block appears. A new array's
header goes to fresh space: the layout message the put returns publishes it.
"""

from __future__ import annotations

from dataclasses import replace
from math import prod
from typing import TYPE_CHECKING, Sequence

from ...format.fixed_array import (FixedArrayDataBlock, FixedArrayHeader, bit_set, dblock_size, encode_dblock,
                                   encode_header, encode_page, header_size)
from ...format.messages.layout import DataLayout
from ..readers.fixed_array import FixedArray
from . import ChunkRecord
from .array_write import ArrayWriter, Slots, by_page, patched, set_bit

if TYPE_CHECKING:
    from .fixed_array import FixedArrayIndex


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
