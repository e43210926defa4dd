"""Writes version 2 B-tree chunk indexes: one batch of inserted, replaced and removed chunks,
applied by the generic tree editor (storage/btree_v2/edit.py) with chunk-grid coordinates as keys.
A tree the batch creates takes the layout's parameters; nothing is written for a new tree left
empty."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Sequence

from ...format import btree_v2 as bt
from ...format.messages.layout import DataLayout
from ..btree_v2.edit import BTreeV2Edit, new_header
from ..tree_batch import changes
from . import ChunkRecord, check_coords, check_size, same_view
from .btree_v2 import record_size_width

if TYPE_CHECKING:
    from ..transaction import Transaction
    from .btree_v2 import BTreeV2Index

Rec = bt.ChunkRecordV2


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
