"""Edits any version 2 B-tree (spec III.A.2) in one transaction: a batch of inserted, replaced
and removed records, whatever their type; the caller says how records encode and what orders them.

Records live in every node (an internal node's records separate its children), so a node's
content is a sequence: records for a leaf, child, record, child, ..., child for an internal node.
The batch is routed down the tree once; each node it reaches is read once and its sequence
rebuilt:
- a removed separator joins the two subtrees around it (their touching edges, down to the leaves);
- a node holding more than the header's split share of its capacity (libhdf5 splits a node when it
  reaches exactly that many) is split evenly, the records between the parts going up;
- a rebuilt node left with fewer records than the merge share (or none) is merged with a sibling
  (and split again evenly if the two do not fit one node), as libhdf5 does when it removes;
- a root that splits grows a new root (the tree's depth grows); a root left with no records and
  one child gives way to it; a tree left empty has no root, as libhdf5 leaves it.

Nodes keep their address when they can (the first part of a split, the left one of a merge) and
are rewritten in place with their checksum recomputed (the journal makes the commit atomic);
other nodes go to fresh space, freed nodes to `txn.free`. Nodes are written children first, each
once, and only when their bytes change; the header (root, its record count, the total, the depth)
is rewritten in place when any of those changes, or written new for a tree made by this edit.

Keys only need `<` and `==`: a name index (types 5 and 8) orders by hash, then by the name kept
in a fractal heap, which its key reads only when two hashes tie.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, replace
from itertools import groupby
from typing import TYPE_CHECKING, Any, Callable, Sequence, Union

from ...format import btree_v2 as bt
from ...format.codec import Reader, Sizes, Writer
from ..tree_batch import merged, not_twice, spans
from .reader import decoded_node, read_header, read_node   # decoded_node: the nodes lookups cached

if TYPE_CHECKING:
    from ..transaction import Transaction

Key = Any
Record = Any


def new_header(sizes: Sizes, btype: int, node_size: int, record_size: int, split_percent: int,
               merge_percent: int) -> bt.BTreeV2Header:
    """The header of an empty tree (address 0 until `BTreeV2Edit` writes it)."""
    version = 1 if btype in (bt.STRUCTURED, bt.STRUCTURED_FILTERED) else 0   # spec 3.0: types 12/13
    proto = bt.BTreeV2Header(0, version, btype, node_size, record_size, 0, split_percent, merge_percent, None, 0, 0,
                             sizes, 0, ())
    return bt.decode_header(bt.encode_header(proto), 0, sizes, "new v2 B-tree header")


def delete(txn: Transaction, address: int, what: str, each: Callable[[Record], None] | None = None) -> None:
    """Free every node and the header of the tree at `address` (H5B2_delete); `each` sees every
    record first (to free what records point at)."""
    hdr = read_header(txn.reader, address, what)
    decode = bt.record_decoder(hdr.type) if each is not None else None
    stack = [] if hdr.root_address is None else [(hdr.root_address, hdr.root_nrecords, hdr.depth)]
    seen: set[int] = set()
    while stack:
        addr, nrec, depth = stack.pop()
        not_twice(seen, addr, what)
        node = read_node(txn.reader, hdr, addr, nrec, depth, what)
        stack += [(c.address, c.nrecords, depth - 1) for c in node.children]
        if decode is not None:
            for rec in bt.decode_records(hdr, node, decode, what):
                each(rec)
        txn.free(addr, hdr.node_size)
        txn.reader.meta.invalidate(addr)
    txn.free(address, bt.header_size(txn.sizes))
    txn.reader.meta.invalidate(address)


@dataclass(eq=False)
class _Node:
    """A node as the change leaves it."""

    depth: int
    seq: list             # leaf: records; internal: child, record, ..., child (children: _Node or ChildPointer)
    address: int | None   # where it is written; None: fresh space
    old: list | None = None   # the sequence as read (a node that ends as it began is not rewritten)

    @property
    def nrec(self) -> int:
        return len(self.seq) if self.depth == 0 else len(self.seq) // 2


Child = Union[_Node, bt.ChildPointer]


def _is_child(item) -> bool:
    return isinstance(item, (_Node, bt.ChildPointer))


class BTreeV2Edit:
    """One batch of changes to the tree `hdr` describes (`new`: a tree this edit creates)."""

    def __init__(self, txn: Transaction, hdr: bt.BTreeV2Header, key: Callable[[Record], Key],
                 decode: Callable[[Reader], Record], encode: Callable[[Writer, Record], None], what: str,
                 new: bool = False):
        self.txn, self.hdr, self.key, self.decode, self.encode, self.what = txn, hdr, key, decode, encode, what
        self.new = new
        self.seen: set[int] = set()
        self.idle: dict[int, _Node] = {}      # nodes read and left unchanged, by address
        self.freed: list[int] = []
        self.shapes: dict[int, bt.BTreeV2Header] = {}

    def _shape(self, depth: int) -> bt.BTreeV2Header:
        """The header as a tree of `depth` would have it (node capacities and field widths)."""
        if depth not in self.shapes:
            empty = replace(self.hdr, depth=depth, root_address=None, root_nrecords=0, total_records=0)
            self.shapes[depth] = bt.decode_header(bt.encode_header(empty), self.hdr.address, self.hdr.sizes, self.what)
        return self.shapes[depth]

    def _cap(self, depth: int) -> int:
        return max(1, self._shape(depth).levels[depth].max_nrec * self.hdr.split_percent // 100)

    def _underfull(self, node: _Node) -> bool:
        merge = self._shape(node.depth).levels[node.depth].max_nrec * self.hdr.merge_percent // 100
        return node.nrec < max(1, min(merge, self._cap(node.depth) // 2))

    # -- the change ----------------------------------------------------------------------------
    def apply(self, todo: Sequence[tuple[Key, Record | None]]) -> bt.BTreeV2Header:
        """Apply `todo`, (key, record or None to remove) sorted by key, one per key; the new header
        (staged in the transaction)."""
        hdr = self.hdr
        if hdr.root_address is None:
            run = self._split([v for _, v in merged([], todo)], 0, None)
        else:
            run = self._update(bt.ChildPointer(hdr.root_address, hdr.root_nrecords, hdr.total_records),
                               hdr.depth, todo)
        depth = hdr.depth
        while len(run) > 1:                    # the root split: a new root above
            depth += 1
            run = self._split(run, depth, None)
        root = run[0]
        while isinstance(root, _Node) and root.nrec == 0 and depth > 0:   # a root with one child
            self._free(root)
            root, depth = root.seq[0], depth - 1
        if isinstance(root, _Node) and root.nrec == 0:                    # an empty tree
            self._free(root)
            root = None
        self.hdr = self._shape(depth)
        ptr = self._emit(root) if root is not None else None
        new = replace(self.hdr, root_address=ptr.address if ptr else None, root_nrecords=ptr.nrecords if ptr else 0,
                      total_records=ptr.total_records if ptr else 0)
        if self.new:
            new = replace(new, address=self.txn.allocate(bt.header_size(self.txn.sizes)))
            self.txn.write_new(new.address, bt.encode_header(new))
        elif new != hdr:
            self.txn.write_in_place(new.address, bt.encode_header(new))
        for address in self.freed:
            self.txn.free(address, hdr.node_size)
        meta = self.txn.reader.meta
        for address in self.seen | set(self.freed) | {new.address}:
            meta.invalidate(address)
        self.hdr, self.new = new, False
        return new

    def _load(self, child: Child, depth: int) -> _Node:
        if isinstance(child, _Node):
            return child
        if child.address in self.idle:
            return self.idle.pop(child.address)
        not_twice(self.seen, child.address, self.what)
        node, recs = decoded_node(self.txn.reader, self.hdr, child.address, child.nrecords, depth, self.decode,
                                  self.what)
        if depth == 0:
            seq = list(recs)
        else:
            seq = [node.children[0]]
            for r, c in zip(recs, node.children[1:]):
                seq += [r, c]
        return _Node(depth, seq, child.address, list(seq))

    def _update(self, ptr: bt.ChildPointer, depth: int, todo: list) -> list:
        """The run (node, record, node, ..., node) that replaces the subtree at `ptr` once `todo`
        is applied; [ptr] when nothing changes."""
        node = self._load(ptr, depth)
        if depth == 0:
            seq = [v for _, v in merged([(self.key(r), r) for r in node.seq], todo)]
        else:
            keys = [self.key(r) for r in node.seq[1::2]]
            routed = {i: list(g) for i, g in groupby(todo, lambda kv: bisect_left(keys, kv[0]))}
            seq = []
            for i in range(len(keys) + 1):
                part = routed.get(i, [])
                if part and i < len(keys) and part[-1][0] == keys[i]:   # this separator itself
                    part, hit = part[:-1], part[-1]
                else:
                    hit = None
                child = node.seq[2 * i]
                self._append(seq, self._update(child, depth - 1, part) if part else [child], depth - 1)
                if i < len(keys):
                    if hit is None:
                        seq.append(node.seq[2 * i + 1])
                    elif hit[1] is not None:
                        seq.append(hit[1])
            self._fix(seq, depth - 1)
        if seq == node.old:
            self.idle[ptr.address] = node
            return [ptr]
        return self._split(seq, depth, node.address, node.old)

    def _append(self, seq: list, run: list, depth: int) -> None:
        """Extend `seq` by `run`; two subtrees left touching (their separator removed) are joined."""
        if seq and run and _is_child(seq[-1]):
            run = self._join(seq.pop(), run[0], depth) + run[1:]
        seq.extend(run)

    def _join(self, a: Child, b: Child, depth: int) -> list:
        """The run holding subtrees `a` and `b` (of `depth`, `a` before `b`) with nothing between."""
        a, b = self._load(a, depth), self._load(b, depth)
        seq = list(a.seq)
        self._append(seq, b.seq, depth - 1)
        if depth > 0:
            self._fix(seq, depth - 1)
        return self._merged(a, b, seq)

    def _merged(self, a: _Node, b: _Node, seq: list) -> list:
        """The run replacing nodes `a` and `b` by `seq` (their content), at one of their addresses."""
        keep = a.address if a.address is not None else b.address
        if b.address is not None and b.address != keep:
            self.freed.append(b.address)
        return self._split(seq, a.depth, keep)

    def _fix(self, seq: list, depth: int) -> None:
        """Merge the rebuilt children of `seq` (of `depth`) that are underfull with a sibling, until
        none is (a merge too big for one node splits evenly in two that are not)."""
        i = 0
        while i < len(seq):
            child = seq[i]
            if len(seq) > 1 and isinstance(child, _Node) and self._underfull(child):
                i = i if i + 2 < len(seq) else i - 2     # merge with the right sibling, or the left one
                a, b = self._load(seq[i], depth), self._load(seq[i + 2], depth)
                inner = a.seq + [seq[i + 1]] + b.seq
                if depth > 0:
                    self._fix(inner, depth - 1)
                seq[i:i + 3] = self._merged(a, b, inner)
            else:
                i += 2

    def _split(self, seq: list, depth: int, address: int | None, old: list | None = None) -> list:
        """The run of nodes holding `seq` (evenly, each within the split share), the first one at
        `address`; `old`: what a node there held, if it was read."""
        cap = self._cap(depth)
        if depth == 0:
            # each leaf takes a span of one more than its records: the separator after it
            parts = spans(len(seq) + 1, -(-(len(seq) + 1) // (cap + 1)))
            chunks = [seq[a:b - 1] for a, b in parts]
            seps = [seq[b - 1] for _, b in parts[:-1]]
        else:
            children = seq[0::2]
            parts = spans(len(children), -(-len(children) // (cap + 1)))
            chunks = [seq[2 * a:2 * b - 1] for a, b in parts]
            seps = [seq[2 * b - 1] for _, b in parts[:-1]]
        out: list = []
        for k, part in enumerate(chunks):
            if k:
                out.append(seps[k - 1])
            out.append(_Node(depth, part, address if k == 0 else None, old if len(chunks) == 1 else None))
        return out

    def _free(self, node: _Node) -> None:
        if node.address is not None:
            self.freed.append(node.address)

    # -- output --------------------------------------------------------------------------------
    def _emit(self, child: Child) -> bt.ChildPointer:
        """Write the rebuilt subtree, children first; its pointer."""
        if not isinstance(child, _Node):
            return child
        node = child
        seq = [self._emit(x) if _is_child(x) else x for x in node.seq]
        if node.depth == 0:
            recs, children, total = seq, (), len(seq)
        else:
            recs, children = seq[1::2], tuple(seq[0::2])
            total = len(recs) + sum(c.total_records for c in children)
        ptr = bt.ChildPointer(node.address if node.address is not None else self.txn.allocate(self.hdr.node_size),
                              len(recs), total)
        if seq != node.old or node.address is None:
            records = bt.encode_records(self.hdr, self.encode, recs)
            raw = bt.encode_node(self.hdr, bt.Node(ptr.address, node.depth, records, children))
            if node.address is None:
                self.txn.write_new(ptr.address, raw)
                self.txn.reader.meta.invalidate(ptr.address)
            else:
                self.txn.write_in_place(ptr.address, raw)
        return ptr

