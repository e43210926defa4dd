"""Version 2 B-tree chunk index (layout index type 5): two or more unlimited dimensions.

Records are of type 10 (unfiltered: address, scaled offsets) or 11 (filtered: address, chunk
size, filter mask, scaled offsets); scaled offsets are chunk-grid coordinates (8 bytes each),
ordered lexicographically, which is how `lookup` descends without reading the whole tree. The
width of the chunk size field is read off the header's record size (libhdf5 writes
``1 + (log2(chunk bytes) + 8) // 8`` for layout v4 and `size of lengths` for v5). Writes
(batches of put and removed records) are btree_v2_write's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Sequence

from ...errors import FormatError
from ...format import btree_v2 as bt
from ...format.messages.layout import DataLayout
from ..readers.btree_v2 import find, iterate, read_header
from . import ChunkIndex, ChunkRecord, IndexContext
from .btree_v2_write import V2Writer
from .fixed_array import _check_rank, chunk_nbytes

if TYPE_CHECKING:
    from ..transaction import Transaction


class BTreeV2Index(ChunkIndex):
    def __init__(self, ctx: IndexContext):
        super().__init__(ctx)
        _check_rank(ctx)
        self.rank = len(ctx.layout.chunk_dims)
        self.nbytes = chunk_nbytes(ctx)
        self.what = f"{ctx.what}: v2 B-tree chunk index"
        self.header: bt.BTreeV2Header | None = None
        addr = ctx.layout.index.address if ctx.layout.index else None
        if addr is None:
            return
        self.header = h = read_header(ctx.reader, addr, self.what)
        want = bt.CHUNK_FILTERED if ctx.filtered else bt.CHUNK
        if h.type != want:
            raise FormatError(f"{self.what}: record type {h.type}, expected {want}")
        sizes = ctx.reader.sizes
        if ctx.filtered:
            width = h.record_size - sizes.offset - 4 - 8 * self.rank
            if not 1 <= width <= 8:
                raise FormatError(f"{self.what}: record size {h.record_size} leaves {width} bytes for the chunk size")
        else:
            width = 0
            if h.record_size != bt.chunk_record_size(sizes, self.rank, False):
                raise FormatError(f"{self.what}: record size {h.record_size} does not fit rank {self.rank}")
        self.decode = bt.chunk_record_decoder(self.rank, ctx.filtered, width)

    def _record(self, r: bt.ChunkRecordV2) -> ChunkRecord | None:
        if r.address is None:
            return None
        if self.ctx.filtered:
            return ChunkRecord(r.scaled, r.address, r.size, r.filter_mask)
        return ChunkRecord(r.scaled, r.address, self.nbytes, 0)

    def lookup(self, coords: tuple[int, ...]) -> ChunkRecord | None:
        if self.header is None:
            return None
        key = tuple(coords)
        if len(key) != self.rank:
            return None

        def compare(r: bt.ChunkRecordV2) -> int:
            return (key > r.scaled) - (key < r.scaled)

        r = find(self.ctx.reader, self.header.address, compare, self.decode, self.what, header=self.header)
        return None if r is None else self._record(r)

    def records(self) -> Iterator[ChunkRecord]:
        if self.header is None:
            return
        for r in iterate(self.ctx.reader, self.header.address, self.decode, self.what, header=self.header):
            rec = self._record(r)
            if rec is not None:
                yield rec

    def put(self, txn: Transaction, records: Sequence[ChunkRecord]) -> DataLayout | None:
        return V2Writer(self, txn).apply(records, ())

    def remove(self, txn: Transaction, coords: Sequence[tuple[int, ...]]) -> DataLayout | None:
        return V2Writer(self, txn).apply((), coords)
