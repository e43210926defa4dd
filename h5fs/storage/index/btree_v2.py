"""Version 2 B-tree chunk index (layout index type 5): two or more unlimited dimensions.

Records are of type 10 (unfiltered: address, scaled offsets) or 11 (filtered: address, chunk
size, filter mask, scaled offsets), or for structured chunks 12/13 (address, chunk size, scaled
offsets, section metadata); scaled offsets are chunk-grid coordinates (8 bytes each),
ordered lexicographically, which is how `lookup` descends without reading the whole tree. The
width of the chunk size field is read off the header's record size (libhdf5 writes
``1 + (log2(chunk bytes) + 8) // 8`` for layout v4 and `size of lengths` for v5).

Writes (`V2Writer`): one batch of inserted, replaced and removed chunks, applied by the generic
tree editor (storage/btree_v2/edit.py) with chunk-grid coordinates as keys. A tree the batch
creates takes the layout's parameters; nothing is written for a new tree left empty.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import replace
from typing import TYPE_CHECKING, Iterator, Sequence

from ...errors import FormatError
from ...format import btree_v2 as bt
from ...format.messages.layout import DataLayout
from ..btree_v2.edit import BTreeV2Edit, new_header
from ..btree_v2.reader import find_with_leaf, iterate, read_header
from ..tree_batch import changes
from . import ChunkIndex, ChunkRecord, IndexContext, check_coords, check_size, same_view
from .grid import check_rank, chunk_nbytes

if TYPE_CHECKING:
    from ..transaction import Transaction

Rec = bt.ChunkRecordV2


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
        check_rank(ctx)
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
        return V2Writer(self, txn).apply(records, ())

    def remove(self, txn: Transaction, coords: Sequence[tuple[int, ...]]) -> DataLayout | None:
        return V2Writer(self, txn).apply((), coords)


class V2Writer:
    def __init__(self, index: BTreeV2Index, txn: Transaction):
        ctx = index.ctx
        self.index, self.txn, self.what = index, txn, index.what
        same_view(ctx, txn, self.what)
        self.rank, self.filtered = index.rank, ctx.filtered
        sizes, info, comp = txn.sizes, ctx.layout.index, ctx.layout.composition
        if index.header is None:
            width = ctx.layout.filtered_size_width(sizes) if self.filtered or comp is not None else 0
            hdr = new_header(sizes, bt.chunk_type(self.filtered, comp is not None), info.node_size,
                             bt.chunk_record_size(sizes, self.rank, self.filtered, width, comp),
                             info.split_percent, info.merge_percent)
        else:
            hdr = index.header
        self.width = record_size_width(ctx, hdr.record_size, self.what)
        self.structured = comp is not None
        self.decode = bt.chunk_record_decoder(self.rank, self.filtered, self.width, comp)
        self.tree = BTreeV2Edit(txn, hdr, lambda r: r.scaled, self.decode,
                                bt.chunk_record_encoder(self.rank, self.filtered, self.width, comp), self.what,
                                new=index.header is None)

    def apply(self, records: Sequence[ChunkRecord], removed: Sequence[tuple[int, ...]]) -> DataLayout | None:
        check_coords([r.coords for r in records], self.rank, self.what)
        todo = changes(((tuple(r.coords), self._record(r)) for r in records), (tuple(c) for c in removed))
        creating = self.index.header is None
        if creating and not any(v is not None for _, v in todo):
            return None
        self.index.header = new = self.tree.apply(todo)
        self.index.decode = self.decode
        if not creating:
            return None
        layout = self.index.ctx.layout
        return replace(layout, index=replace(layout.index, address=new.address))

    def _record(self, r: ChunkRecord) -> Rec:
        if not self.filtered and not self.structured:
            return Rec(r.address, tuple(r.coords))
        check_size(r, 1 << (8 * self.width), self.what)
        return Rec(r.address, tuple(r.coords), r.size, r.filter_mask, r.sections)
