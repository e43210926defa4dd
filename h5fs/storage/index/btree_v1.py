"""Chunk index of layout versions 1-3 (and v4 files that keep it): a version 1 B-tree of type 1.
Writes (batches of put and removed records) are btree_v1_write's."""

from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING, Iterator, Sequence

from ...errors import FormatError
from ...format import btree_v1
from ...format.messages.layout import DataLayout
from ..readers.btree_v1 import iterate_leaves, read_node
from . import ChunkIndex, ChunkRecord, IndexContext
from .btree_v1_write import V1Writer

if TYPE_CHECKING:
    from ..transaction import Transaction


class BTreeV1Index(ChunkIndex):
    def __init__(self, ctx: IndexContext):
        super().__init__(ctx)
        self.rank = len(ctx.layout.chunk_dims)
        self.root = ctx.layout.index.address if ctx.layout.index else None

    def node(self, address: int) -> tuple[btree_v1.Node, list[tuple[int, ...]], list]:
        """A node, its keys' chunk offsets, and room for a leaf's records by grid coordinates
        (`_records`: made on first use, as a row of chunks looks them up again and again),
        through the file's metadata cache."""
        def load() -> tuple[btree_v1.Node, list[tuple[int, ...]], list]:
            node = read_node(self.ctx.reader, address, btree_v1.CHUNK, self.rank, self.ctx.what)
            return node, [tuple(k.offsets[:self.rank]) for k in node.keys], []

        # per key: a ChunkKey, its offsets, their ints and the offsets tuple kept beside it, and a record
        return self.ctx.reader.meta.get(address, ("v1 B-tree chunk node", self.rank), load,
                                        lambda v: 256 + len(v[0].keys) * (350 + 60 * self.rank))

    def _record(self, key: btree_v1.ChunkKey, child: int) -> ChunkRecord:
        coords = []
        for o, d in zip(key.offsets, self.ctx.layout.chunk_dims):   # the offsets' trailing 0 left out
            q, r = divmod(o, d)
            if r:
                raise FormatError(f"{self.ctx.what}: chunk offset {key.offsets[:self.rank]} is not on the chunk grid")
            coords.append(q)
        return ChunkRecord(tuple(coords), child, key.size, key.filter_mask)

    def _records(self, leaf) -> tuple[dict[tuple[int, ...], ChunkRecord], tuple[int, ...], tuple[int, ...]]:
        """A leaf's records by grid coordinates, its first chunk's and its last chunk's."""
        node, _, memo = leaf
        if not memo:
            recs = [self._record(k, c) for k, c in zip(node.keys, node.children)]
            memo.append(({r.coords: r for r in recs}, recs[0].coords, recs[-1].coords))
        return memo[0]

    def lookup(self, coords: tuple[int, ...]) -> ChunkRecord | None:
        return self.lookup_many([coords])[0]

    def lookup_many(self, coords: Sequence[tuple[int, ...]]) -> list[ChunkRecord | None]:
        """One descent per leaf: a chunk within the last leaf's first and last is answered from
        that leaf (in a valid tree no other leaf can hold it)."""
        out: list[ChunkRecord | None] = []
        held, lo, hi = {}, None, None
        for c in coords:
            c = tuple(c)
            if lo is None or not lo <= c <= hi:
                leaf = self._leaf(tuple(x * d for x, d in zip(c, self.ctx.layout.chunk_dims)))
                if leaf is None:
                    out.append(None)
                    continue
                held, lo, hi = self._records(leaf)
            out.append(held.get(c))
        return out

    def _leaf(self, target: tuple[int, ...]) -> tuple[btree_v1.Node, list[tuple[int, ...]], list] | None:
        """The leaf (as `node` gives it) whose range holds `target`; None when no leaf's does."""
        if self.root is None:
            return None
        addr, level = self.root, None
        for _ in range(btree_v1.MAX_DEPTH + 1):
            leaf = self.node(addr)
            node, keys = leaf[0], leaf[1]
            if level is not None and node.level != level:
                raise FormatError(f"{self.ctx.what}: B-tree node at {addr} has level {node.level}, expected {level}")
            if not node.children:
                return None
            if node.level == 0:
                return leaf
            # child i holds keys in [keys[i], keys[i+1]): take the last child whose left key <= target
            # (keys are sorted in a valid tree; in a corrupt one this still picks some child)
            pick = bisect_right(keys, target, 0, len(node.children)) - 1
            if pick < 0:
                return None
            addr, level = node.children[pick], node.level - 1
        raise FormatError(f"{self.ctx.what}: B-tree deeper than {btree_v1.MAX_DEPTH}")

    def records(self) -> Iterator[ChunkRecord]:
        if self.root is None:
            return
        for key, child, _ in iterate_leaves(self.ctx.reader, self.root, btree_v1.CHUNK, self.rank,
                                                     self.ctx.what, lambda r, a, t, k, w: self.node(a)[0]):
            yield self._record(key, child)

    def allocated_bytes(self) -> int:
        """The leaves' stored sizes, summed without making a record per chunk (st_blocks walks
        the whole index while the first reads go on)."""
        if self.root is None:
            return 0
        return sum(key.size for key, _, _ in iterate_leaves(self.ctx.reader, self.root, btree_v1.CHUNK, self.rank,
                                                             self.ctx.what, lambda r, a, t, k, w: self.node(a)[0]))

    def put(self, txn: Transaction, records: Sequence[ChunkRecord]) -> DataLayout | None:
        return V1Writer(self, txn).apply(records, ())

    def remove(self, txn: Transaction, coords: Sequence[tuple[int, ...]]) -> DataLayout | None:
        return V1Writer(self, txn).apply((), coords)
