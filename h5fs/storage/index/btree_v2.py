"""Version 2 B-tree chunk index (layout index type 5): two or more unlimited dimensions.

Records are of type 10 (unfiltered: address, scaled offsets) or 11 (filtered: address, chunk
size, filter mask, scaled offsets), or for structured chunks 12/13 (address, chunk size, scaled
offsets, section metadata); scaled offsets are chunk-grid coordinates (8 bytes each),
ordered lexicographically, which is how `lookup` descends without reading the whole tree. The
width of the chunk size field is read off the header's record size (libhdf5 writes
``1 + (log2(chunk bytes) + 8) // 8`` for layout v4 and `size of lengths` for v5). Writes
(batches of put and removed records) are btree_v2_write's.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING, Iterator, Sequence

from ...errors import FormatError
from ...format import btree_v2 as bt
from ...format.messages.layout import DataLayout
from ..btree_v2.reader import find_with_leaf, iterate, read_header
from . import ChunkIndex, ChunkRecord, IndexContext
from .fixed_array import _check_rank, chunk_nbytes

if TYPE_CHECKING:
    from ..transaction import Transaction


def record_size_width(ctx: IndexContext, record_size: int, what: str) -> int:
    """Width of the records' chunk size field, read off the header's record size (0: type 10)."""
    sizes, rank = ctx.reader.sizes, len(ctx.layout.chunk_dims)
    comp = ctx.layout.composition
    if not ctx.filtered and comp is None:
        if record_size != bt.chunk_record_size(sizes, rank, False):
            raise FormatError(f"{what}: record size {record_size} does not fit rank {rank}")
        return 0
    width = record_size - bt.chunk_record_size(sizes, rank, ctx.filtered, 1, comp) + 1
    if not 1 <= width <= 8:
        raise FormatError(f"{what}: record size {record_size} leaves {width} bytes for the chunk size")
    return width


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
        want = bt.chunk_type(ctx.filtered, ctx.structured)
        if h.type != want:
            raise FormatError(f"{self.what}: record type {h.type}, expected {want}")
        self.decode = bt.chunk_record_decoder(self.rank, ctx.filtered, record_size_width(ctx, h.record_size, self.what),
                                              ctx.layout.composition)

    def _record(self, r: bt.ChunkRecordV2) -> ChunkRecord | None:
        if r.address is None:
            return None
        if self.ctx.structured:
            return ChunkRecord(r.scaled, r.address, r.size, 0, r.sections)
        if self.ctx.filtered:
            return ChunkRecord(r.scaled, r.address, r.size, r.filter_mask)
        return ChunkRecord(r.scaled, r.address, self.nbytes, 0)

    def lookup(self, coords: tuple[int, ...]) -> ChunkRecord | None:
        return self.lookup_many([coords])[0]

    def lookup_many(self, coords: Sequence[tuple[int, ...]]) -> list[ChunkRecord | None]:
        """A key within the leaf the previous descent ended in is looked for there first."""
        out: list[ChunkRecord | None] = []
        leaf: list[bt.ChunkRecordV2] | None = None
        for c in coords:
            key = tuple(c)
            if self.header is None or len(key) != self.rank:
                out.append(None)
                continue
            if leaf and leaf[0].scaled <= key <= leaf[-1].scaled:
                i = bisect_left(leaf, key, key=lambda r: r.scaled)
                r = leaf[i] if leaf[i].scaled == key else None
            else:
                def compare(r: bt.ChunkRecordV2) -> int:
                    return (key > r.scaled) - (key < r.scaled)

                r, ended = find_with_leaf(self.ctx.reader, self.header.address, compare, self.decode, self.what,
                                          header=self.header)
                leaf = ended or leaf
            out.append(None if r is None else self._record(r))
        return out

    def records(self) -> Iterator[ChunkRecord]:
        if self.header is None:
            return
        for r in iterate(self.ctx.reader, self.header.address, self.decode, self.what, header=self.header):
            rec = self._record(r)
            if rec is not None:
                yield rec

    def put(self, txn: Transaction, records: Sequence[ChunkRecord]) -> DataLayout | None:
        from .btree_v2_write import V2Writer   # it imports this module
        return V2Writer(self, txn).apply(records, ())

    def remove(self, txn: Transaction, coords: Sequence[tuple[int, ...]]) -> DataLayout | None:
        from .btree_v2_write import V2Writer
        return V2Writer(self, txn).apply((), coords)
