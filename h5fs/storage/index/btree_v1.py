"""Chunk index of layout versions 1-3 (and v4 files that keep it): a version 1 B-tree of type 1.

Writes (`V1Writer`): one batch of inserted, replaced and removed chunks.

The tree keeps the shape libhdf5 gives it (H5B.c, H5Dbtree.c), which its own inserts and removals
rely on later:
- a leaf's key i is chunk i's key (stored size, filter mask, element offsets and a trailing 0);
  an internal node's key i is child i's first key; the key after the last child is the first
  key of the node to its right at the same level (the parent's key between the two), or, for the
  last node of every level, the tree's end key: the offsets one chunk past the largest chunk ever
  inserted at the end, element-size entry included (libhdf5's zero-size "right key");
- nodes of a level are linked left and right; every node has room for 2K children;
- emptied nodes are unlinked and freed, other nodes are never merged; an emptied root stays as
  an empty leaf.

The batch is routed down the tree once: each node it reaches is read once, rebuilt with its
changes and split evenly when it overflows. Rebuilt nodes keep their address (the first piece of a
split) and are rewritten in place (the journal makes the commit atomic); the other pieces and new
root levels go to fresh space, so a taller tree has a new root address. Boundary keys and sibling
links are settled level by level afterwards, rewriting the untouched neighbours whose right key
or sibling link changes. Each changed node is written once.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field, replace
from itertools import groupby
from typing import TYPE_CHECKING, Iterator, Sequence

from ...errors import FormatError
from ...format import btree_v1 as bt
from ...format.messages.layout import DataLayout
from ..btree_v1 import btree_k, iterate_leaves, read_node
from ..tree_batch import changes, merged, not_twice, spans
from . import ChunkIndex, ChunkRecord, IndexContext, check_coords, check_size, same_view

if TYPE_CHECKING:
    from ..transaction import Transaction

Entry = tuple[bt.ChunkKey, int]    # a key and the child after it


class BTreeV1Index(ChunkIndex):
    def __init__(self, ctx: IndexContext):
        super().__init__(ctx)
        self.rank = len(ctx.layout.chunk_dims)
        self.root = ctx.layout.index.address if ctx.layout.index else None

    def node(self, address: int) -> tuple[bt.Node, list[tuple[int, ...]], list]:
        """A node, its keys' chunk offsets, and room for a leaf's records by grid coordinates
        (`_records`: made on first use, as a row of chunks looks them up again and again),
        through the file's metadata cache."""
        def load() -> tuple[bt.Node, list[tuple[int, ...]], list]:
            node = read_node(self.ctx.reader, address, bt.CHUNK, self.rank, self.ctx.what)
            return node, [tuple(k.offsets[:self.rank]) for k in node.keys], []

        # per key: a ChunkKey, its offsets, their ints and the offsets tuple kept beside it, and a record
        return self.ctx.reader.meta.get(address, ("v1 B-tree chunk node", self.rank), load,
                                        lambda v: 256 + len(v[0].keys) * (350 + 60 * self.rank))

    def _record(self, key: bt.ChunkKey, child: int) -> ChunkRecord:
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

    def _leaf(self, target: tuple[int, ...]) -> tuple[bt.Node, list[tuple[int, ...]], list] | None:
        """The leaf (as `node` gives it) whose range holds `target`; None when no leaf's does."""
        if self.root is None:
            return None
        addr, level = self.root, None
        for _ in range(bt.MAX_DEPTH + 1):
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
        raise FormatError(f"{self.ctx.what}: B-tree deeper than {bt.MAX_DEPTH}")

    def records(self) -> Iterator[ChunkRecord]:
        if self.root is None:
            return
        for key, child, _ in iterate_leaves(self.ctx.reader, self.root, bt.CHUNK, self.rank,
                                                     self.ctx.what, lambda r, a, t, k, w: self.node(a)[0]):
            yield self._record(key, child)

    def allocated_bytes(self) -> int:
        """The leaves' stored sizes, summed without making a record per chunk (st_blocks walks
        the whole index while the first reads go on)."""
        if self.root is None:
            return 0
        return sum(key.size for key, _, _ in iterate_leaves(self.ctx.reader, self.root, bt.CHUNK, self.rank,
                                                             self.ctx.what, lambda r, a, t, k, w: self.node(a)[0]))

    def put(self, txn: Transaction, records: Sequence[ChunkRecord]) -> DataLayout | None:
        return V1Writer(self, txn).apply(records, ())

    def remove(self, txn: Transaction, coords: Sequence[tuple[int, ...]]) -> DataLayout | None:
        return V1Writer(self, txn).apply((), coords)


def chunk_k(txn: Transaction) -> int:
    """The file's K for chunk B-trees (every node has room for 2K children)."""
    return btree_k(txn).indexed_storage_internal


@dataclass(eq=False)
class _Piece:
    """A node as the change leaves it; `keys` gets its right key when the level is linked."""

    level: int
    keys: list[bt.ChunkKey]
    children: list[int]
    address: int
    left: int | None = None
    right: int | None = None

    def node(self) -> bt.Node:
        return bt.Node(bt.CHUNK, self.level, tuple(self.keys), tuple(self.children), self.left, self.right,
                       self.address)


@dataclass(eq=False)
class _Visit:
    """A node the change read, and what replaces it (nothing: it emptied)."""

    node: bt.Node
    pieces: list[_Piece] = field(default_factory=list)


class V1Writer:
    def __init__(self, index: BTreeV1Index, txn: Transaction):
        ctx = index.ctx
        self.index, self.txn, self.what = index, txn, f"{ctx.what}: v1 B-tree chunk index"
        same_view(ctx, txn, self.what)
        self.rank, self.dims = index.rank, ctx.layout.chunk_dims
        self.element_size = ctx.layout.element_size
        self.k = chunk_k(txn)
        self.node_size = bt.node_size(bt.CHUNK, txn.sizes, self.rank, self.k)
        self.seen: set[int] = set()
        self.visits: dict[int, _Visit] = {}        # by address, children before parents
        self.neighbours: dict[int, dict] = {}      # untouched nodes whose links or right key change
        self.fresh: list[_Piece] = []      # pieces in new space
        self.end: bt.ChunkKey | None = None

    # -- keys ----------------------------------------------------------------------------------
    def _key(self, rec: ChunkRecord) -> bt.ChunkKey:
        check_size(rec, 1 << 32, self.what)
        return bt.ChunkKey(rec.size, rec.filter_mask, self._offsets(rec.coords) + (0,))

    def _offsets(self, coords: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(c * d for c, d in zip(coords, self.dims))

    def _end_key(self, coords: tuple[int, ...]) -> bt.ChunkKey:
        """libhdf5's right key after the chunk at `coords`: one chunk further in every dimension."""
        return bt.ChunkKey(0, 0, self._offsets(tuple(c + 1 for c in coords)) + (self.element_size,))

    # -- the change ----------------------------------------------------------------------------
    def apply(self, records: Sequence[ChunkRecord], removed: Sequence[tuple[int, ...]]) -> DataLayout | None:
        check_coords([r.coords for r in records], self.rank, self.what)
        todo = changes(((self._offsets(r.coords) + (0,), (self._key(r), r.address)) for r in records),
                       (self._offsets(tuple(c)) + (0,) for c in removed))
        if not todo:
            return None
        root = self.index.root
        if root is None:
            if not any(v is not None for _, v in todo):
                return None
            top = bt.Node(bt.CHUNK, 0, (self._end_key((0,) * self.rank),), ())
        else:
            top = self._read(root, None)
        self.end = top.keys[-1]
        last = max((k for k, v in todo if v is not None), default=None)
        if last is not None and last >= self.end.offsets:
            self.end = self._end_key(tuple(o // d for o, d in zip(last, self.dims)))
        pieces = self._rebuild(top, todo)
        if root is None:
            self._level(pieces)
        for visit in self.visits.values():
            self._link(visit)
        new_root = self._grow(pieces, top)
        self._write()
        self.index.root = new_root
        if new_root == root:
            return None
        layout = self.index.ctx.layout
        return replace(layout, index=replace(layout.index, address=new_root))

    def _read(self, address: int, level: int | None) -> bt.Node:
        not_twice(self.seen, address, self.what)
        node = self.index.node(address)[0]
        if level is not None and node.level != level:
            raise FormatError(f"{self.what}: node at {address} has level {node.level}, expected {level}")
        if len(node.children) > 2 * self.k:
            raise FormatError(f"{self.what}: node at {address} holds {len(node.children)} children, K is {self.k}")
        return node

    def _rebuild(self, node: bt.Node, todo: list) -> list[_Piece]:
        """The pieces that replace `node` once `todo` (its share of the batch) is applied."""
        n = len(node.children)
        if node.level == 0:
            old = [(k.offsets, (k, c)) for k, c in zip(node.keys, node.children)]
            entries = [v for _, v in merged(old, todo)]
        elif n == 0:
            raise FormatError(f"{self.what}: internal node at {node.address} has no children")
        else:
            lefts = [k.offsets for k in node.keys[:n]]
            routed = {i: list(g) for i, g in
                      groupby(todo, lambda kv: min(max(bisect_right(lefts, kv[0]) - 1, 0), n - 1))}
            entries = []
            for i, entry in enumerate(zip(node.keys, node.children)):
                if i in routed:
                    child = self._read(entry[1], node.level - 1)
                    entries += [(p.keys[0], p.address) for p in self._rebuild(child, routed[i])]
                else:
                    entries.append(entry)
        pieces = self._pieces(entries, node.level, node.address)
        if node.address is not None:
            self.visits[node.address] = _Visit(node, pieces)
        return pieces

    def _pieces(self, entries: list[Entry], level: int, address: int | None) -> list[_Piece]:
        """Nodes holding `entries` in order, evenly filled; the first one at `address`."""
        out = []
        for a, b in spans(len(entries), -(-len(entries) // (2 * self.k))) if entries else ():
            piece = _Piece(level, [k for k, _ in entries[a:b]], [c for _, c in entries[a:b]],
                           address if address is not None and not out else self.txn.allocate(self.node_size))
            if piece.address != address:
                self.fresh.append(piece)
            out.append(piece)
        return out

    # -- links and boundary keys ---------------------------------------------------------------
    def _live_left(self, address: int | None) -> int | None:
        """The node that will be left of a node whose old left neighbour is `address`."""
        while address in self.visits and not self.visits[address].pieces:
            address = self.visits[address].node.left
        return self.visits[address].pieces[-1].address if address in self.visits else address

    def _live_right(self, address: int | None, key: bt.ChunkKey) -> tuple[int | None, bt.ChunkKey]:
        """The node that will be right of a node whose old right neighbour is `address` (its
        first key being `key`), and that first key."""
        while address in self.visits and not self.visits[address].pieces:
            key = self.visits[address].node.keys[-1]
            address = self.visits[address].node.right
        if address is None:
            return None, self.end
        if address in self.visits:
            first = self.visits[address].pieces[0]
            return first.address, first.keys[0]
        return address, key

    def _link(self, visit: _Visit) -> None:
        """Chain `visit`'s pieces to each other and to the nodes around them; note the untouched
        neighbours whose link or boundary key changes."""
        node, pieces = visit.node, visit.pieces
        self._chain(pieces)
        if pieces:
            pieces[0].left = self._live_left(node.left)
            pieces[-1].right, rkey = self._live_right(node.right, node.keys[-1])
            pieces[-1].keys.append(rkey)
        if node.left is not None and node.left not in self.visits:
            right = (pieces[0].address, pieces[0].keys[0]) if pieces else self._live_right(node.right, node.keys[-1])
            self.neighbours.setdefault(node.left, {})["right"] = right
        if node.right is not None and node.right not in self.visits:
            left = pieces[-1].address if pieces else self._live_left(node.left)
            self.neighbours.setdefault(node.right, {})["left"] = left

    @staticmethod
    def _chain(pieces: list[_Piece]) -> None:
        for a, b in zip(pieces, pieces[1:]):
            a.right, b.left = b.address, a.address
            a.keys.append(b.keys[0])

    def _level(self, pieces: list[_Piece]) -> list[_Piece]:
        """`pieces` linked as a whole new level."""
        self._chain(pieces)
        pieces[-1].keys.append(self.end)
        return pieces

    def _grow(self, pieces: list[_Piece], top: bt.Node) -> int:
        """The root's address: new levels over the root's pieces while there are several, or the
        old root kept as an empty leaf."""
        while len(pieces) > 1:
            pieces = self._level(self._pieces([(p.keys[0], p.address) for p in pieces], pieces[0].level + 1, None))
        if pieces:
            return pieces[0].address
        # libhdf5 keeps an emptied root as a leaf with no children
        empty = _Piece(0, [top.keys[0]], [], top.address)
        self.visits[top.address].pieces = [empty]
        return top.address

    # -- output --------------------------------------------------------------------------------
    def _write(self) -> None:
        txn, sizes, meta = self.txn, self.txn.sizes, self.index.ctx.reader.meta
        for piece in self.fresh:
            txn.write_new(piece.address, bt.encode_node(piece.node(), sizes, self.k))
            meta.invalidate(piece.address)   # space freed earlier may be cached under its address
        for address, visit in self.visits.items():
            if not visit.pieces:
                txn.free(address, self.node_size)
            elif visit.pieces[0].node() != visit.node:
                txn.write_in_place(address, bt.encode_node(visit.pieces[0].node(), sizes, self.k))
            meta.invalidate(address)
        for address, fix in self.neighbours.items():
            node = self.index.node(address)[0]
            new = replace(node, left=fix.get("left", node.left))
            if "right" in fix:
                right, key = fix["right"]
                keys = node.keys if key.offsets == node.keys[-1].offsets else node.keys[:-1] + (key,)
                new = replace(new, right=right, keys=keys)
            if new != node:
                txn.write_in_place(address, bt.encode_node(new, sizes, self.k))
                meta.invalidate(address)
