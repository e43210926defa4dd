"""Version 1 B-trees (III.A.1) read, and the tree of an old-style group edited.

Reading: nodes (only their used part), a tree's leaves walked in key order, refusing cycles,
shared children and implausible depths; one leaf entry found by descent; `extents`: the blocks a
tree occupies; `btree_k`: the file's K values. (A chunk index's tree is edited by
storage/index/btree_v1.py.)

Editing (`GroupBTree`): inserts into and removals from the version 1 B-tree of an old-style group
(node type 0), one name at a time, exactly as libhdf5's H5B.c does, so that trees we edit and trees
libhdf5 edits stay the same shape and libhdf5 keeps editing ours:

- key i of a node is the heap offset of a name; child i holds the names in (key i, key i+1]
  (the right key is the critical one: H5B_RIGHT); the left-most key of the tree is the empty
  name at heap offset 0;
- a name goes down the child whose range holds it, or the first / last child when it lies
  before / after every key (H5B__insert_helper); the leaf it reaches (a symbol table node, the
  `Leaves` callback) may split, handing up its new right sibling and the key between them;
- a full node splits before taking a new child (H5B__split), keeping 2K * 0.1 children when it
  is the left-most of its level, 2K * 0.9 when it is the right-most (the root too), 2K * 0.5
  otherwise (libhdf5's default split ratios), adjusted so the new child stays with the child
  that split;
- a split root keeps its address: its content moves to fresh space and the root becomes a node
  one level up over it and its new sibling (H5B_insert), so the symbol table message and the
  cached addresses in the parent's entry never change;
- removal (H5B__remove_helper) drops a leaf that emptied, and a node left without children (not
  the root: an emptied root becomes an empty leaf at level 0), unlinking it from its siblings
  and giving its left key to its right sibling; a changed right key climbs while it is a node's
  last key and is copied to the right sibling's first key. Nodes never merge; the tree never
  gets lower.

Every node is read once per edit and written once at the end: fresh nodes with `write_new`,
changed nodes with `write_in_place` (whole nodes; the commit's journal makes them atomic), nodes
that left the tree freed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Generic, Iterator, Protocol, TypeVar

from ..errors import FormatError
from ..format import btree_v1 as bt
from ..format.btree_v1 import HEAD, MAX_DEPTH, MAX_ENTRIES, Node, decode_node, key_size, node_size
from ..format.codec import Reader
from ..format.messages.small import BTreeK, decode_btree_k
from ..format.messages.types import BTREE_K
from .object_header.reader import read as read_header

if TYPE_CHECKING:
    from .extent_sink import ExtentSink
    from .transaction import Transaction

NOOP, RIGHT, REMOVE = "noop", "right", "remove"     # what an insert or removal asks of the parent
SPLIT_RATIOS = (0.1, 0.5, 0.9)   # H5D_XFER_BTREE_SPLIT_RATIO_DEF: left-most, middle, right-most
T = TypeVar("T")


def read_node(reader, address: int | None, node_type: int, rank: int, what: str) -> Node:
    """The node at `address`, reading only its used part (K is not needed)."""
    s = reader.sizes
    label = f"{what}: B-tree node"
    head = reader.read(address, s.layout(HEAD).size, label)
    used = Reader(head, 0, s, label).fields(HEAD)[3]
    if used > MAX_ENTRIES:
        raise FormatError(f"{what}: B-tree node claims {used} entries")
    size = len(head) + used * (key_size(node_type, s, rank) + s.offset) + key_size(node_type, s, rank)
    return decode_node(reader.read(address, size, label), address, node_type, rank, s, what)


def node_bytes(node: Node, sizes, rank: int) -> int:
    """The used bytes of `node` (its siblings are about as large)."""
    return sizes.layout(HEAD).size + len(node.children) * (key_size(node.node_type, sizes, rank) + sizes.offset) \
        + key_size(node.node_type, sizes, rank)


def iterate_leaves(reader, address: int, node_type: int, rank: int, what: str,
                   read: Callable = read_node) -> Iterator[tuple[object, int, object]]:
    """Yield (left key, child address, right key) for every entry of every leaf, in key order."""
    seen: set[int] = set()
    leaves: set[int] = set()
    stack = [(address, None)]
    while stack:
        addr, expect_level = stack.pop()
        if addr in seen:
            raise FormatError(f"{what}: B-tree cycle at address {addr}")
        seen.add(addr)
        node = read(reader, addr, node_type, rank, what)
        if expect_level is not None and node.level != expect_level:
            raise FormatError(f"{what}: B-tree node at {addr} has level {node.level}, expected {expect_level}")
        if node.level > MAX_DEPTH:
            raise FormatError(f"{what}: B-tree depth {node.level} is implausible")
        if node.level == 0:
            for i, child in enumerate(node.children):
                # a child shared by two entries is no tree: left alone it multiplies what it
                # holds (a 4 MB file could list a symbol table node's 65536 links 65536 times)
                if child in leaves:
                    raise FormatError(f"{what}: B-tree entries share the child at address {child}")
                leaves.add(child)
                yield node.keys[i], child, node.keys[i + 1]
        else:
            if len(node.children) > 1 and hasattr(reader, "want"):
                reader.want(node.children, node_bytes(node, reader.sizes, rank))
            for child in reversed(node.children):
                stack.append((child, node.level - 1))


def find_child(reader, address: int, node_type: int, rank: int, cmp3: Callable[[object, object], int],
               what: str, read: Callable = read_node) -> int | None:
    """The child of a leaf entry whose key range holds what `cmp3` looks for, in one descent
    (H5B_find): `cmp3(left key, right key)` is negative below the range, 0 inside it, positive
    above it; None when no range holds it."""
    level = None
    for _ in range(MAX_DEPTH + 1):
        node = read(reader, address, node_type, rank, what)
        if level is not None and node.level != level - 1:
            raise FormatError(f"{what}: B-tree node at {address} has level {node.level}, expected {level - 1}")
        lo, hi, cmp, idx = 0, len(node.children), 1, 0
        while lo < hi and cmp:
            idx = (lo + hi) // 2
            cmp = cmp3(node.keys[idx], node.keys[idx + 1])
            if cmp < 0:
                hi = idx
            else:
                lo = idx + 1
        if cmp:
            return None
        if node.level == 0:
            return node.children[idx]
        address, level = node.children[idx], node.level
    raise FormatError(f"{what}: B-tree depth beyond {MAX_DEPTH}")


def extents(out: ExtentSink, reader, path: str, label: str, root: int, node_type: int, rank: int,
            k: int) -> list[int]:
    """Every node's extent (room for 2K entries); the leaves' children in key order."""
    size = node_size(node_type, reader.sizes, rank, k)
    children: list[int] = []
    stack: list[tuple[int, int | None]] = [(root, None)]
    seen: set[int] = set()
    while stack:
        addr, level = stack.pop()
        if addr in seen:
            out.problem(path, label, f"node at {addr} is reached twice (cycle or shared node)")
            continue
        seen.add(addr)
        if not out.add(addr, size, path, label):
            continue
        with out.guard(path, label):
            node = read_node(reader, addr, node_type, rank, f"{path}: {label}")
            if level is not None and node.level != level:
                raise FormatError(f"{path}: {label}: node at {addr} has level {node.level}, expected {level}")
            if node.level > MAX_DEPTH:
                raise FormatError(f"{path}: {label}: node at {addr} has level {node.level}")
            if node.level:
                stack += [(child, node.level - 1) for child in reversed(node.children)]
            else:
                children += node.children
    return children


def btree_k(txn: Transaction) -> BTreeK:
    """The file's K values: the superblock's (versions 0 and 1) or its extension's B-tree 'K'
    values message (versions 2 and 3; libhdf5's defaults when it has none)."""
    sb = txn.store.superblock
    if sb.version >= 2 and sb.extension_address is not None:
        ext = read_header(txn.reader, sb.extension_address, "superblock extension")
        raw = ext.first(BTREE_K)   # superblocks 2 and 3 keep K in their extension
        if raw is not None:
            return decode_btree_k(Reader(raw.data, 0, txn.sizes, "B-tree 'K' values message"))
    return BTreeK(sb.indexed_storage_k, sb.group_internal_k, sb.group_leaf_k)


@dataclass(eq=False)
class Blocks(Generic[T]):
    """The fixed-size blocks of one kind an edit touches (B-tree nodes, symbol table nodes), each
    read once, changed in memory and staged once: fresh ones with `write_new`, changed ones with
    `write_in_place`, dropped ones freed."""

    txn: Transaction
    size: int
    load: Callable[[int], T]
    encode: Callable[[T], bytes]
    what: str
    items: dict[int, T] = field(default_factory=dict)
    dirty: set[int] = field(default_factory=set)
    fresh: set[int] = field(default_factory=set)
    freed: set[int] = field(default_factory=set)

    def get(self, address: int) -> T:
        if address in self.freed:
            raise FormatError(f"{self.what}: node at {address} is reached twice")
        if address not in self.items:
            self.items[address] = self.load(address)
        return self.items[address]

    def new(self, item: T) -> int:
        address = self.txn.allocate(self.size)
        self.items[address] = item
        self.fresh.add(address)
        return address

    def touch(self, address: int) -> None:
        self.dirty.add(address)

    def drop(self, address: int) -> None:
        self.freed.add(address)

    def stage(self) -> None:
        for address in sorted(self.freed):
            self.txn.free(address, self.size)
        for address in sorted((self.dirty | self.fresh) - self.freed):
            data = self.encode(self.items[address])
            (self.txn.write_new if address in self.fresh else self.txn.write_in_place)(address, data)


@dataclass(eq=False)
class BNode:
    address: int
    level: int
    keys: list[int]
    children: list[int]
    left: int | None = None
    right: int | None = None

    def record(self) -> bt.Node:
        return bt.Node(bt.GROUP, self.level, tuple(self.keys), tuple(self.children), self.left, self.right,
                       self.address)


class Leaves(Protocol):
    """The leaves' side of an edit (libhdf5's B-tree class callbacks for H5B_SNODE). `keys[i]` and
    `keys[i + 1]` are the leaf's keys in its B-tree node: a callback changes `keys[i + 1]` in place
    and says so when the leaf's last name changes."""

    def compare(self, key: int) -> int:
        """strcmp(the name, the name at heap offset `key`)."""

    def create(self) -> int:
        """A new empty leaf's address (H5G__node_create)."""

    def insert(self, address: int, keys: list[int], i: int) -> tuple[str, int, int | None, bool]:
        """(NOOP or RIGHT, the key between the leaf and its new right sibling, that sibling's
        address, whether keys[i + 1] changed)."""

    def remove(self, address: int, keys: list[int], i: int) -> tuple[str, bool]:
        """(NOOP, or REMOVE when the leaf emptied and is gone; whether keys[i + 1] changed)."""


class GroupBTree:
    """One edit of the group B-tree rooted at `root` (`k`: the group internal node K)."""

    def __init__(self, txn: Transaction, root: int, k: int, leaves: Leaves, what: str):
        self.root, self.k, self.leaves, self.what = root, k, leaves, what
        self.nodes = Blocks(txn, bt.node_size(bt.GROUP, txn.sizes, 0, k), self._load,
                            lambda node: bt.encode_node(node.record(), txn.sizes, k), f"{what}: B-tree")
        self.reader = txn.reader

    def _load(self, address: int) -> BNode:
        rec = read_node(self.reader, address, bt.GROUP, 0, self.what)
        if len(rec.children) > 2 * self.k:
            raise FormatError(f"{self.what}: B-tree node at {address} holds {len(rec.children)} "
                              f"children, K is {self.k}")
        return BNode(address, rec.level, list(rec.keys), list(rec.children), rec.left, rec.right)

    def node(self, address: int, level: int | None = None) -> BNode:
        node = self.nodes.get(address)
        if level is not None and node.level != level:
            raise FormatError(f"{self.what}: B-tree node at {address} has level {node.level}, expected {level}")
        return node

    def _new(self, level: int) -> BNode:
        node = BNode(0, level, [], [])
        node.address = self.nodes.new(node)
        return node

    def stage(self) -> None:
        self.nodes.stage()

    def _search(self, node: BNode) -> tuple[int, int]:
        """Binary search of `node`'s children for the name: (child index, comparison), 0 when
        the child's range holds it (H5G__node_cmp3 over the node's keys)."""
        lo, hi, idx, cmp = 0, len(node.children), 0, -1
        while lo < hi and cmp:
            idx = (lo + hi) // 2
            if self.leaves.compare(node.keys[idx]) <= 0:
                cmp = -1
            else:
                cmp = 1 if self.leaves.compare(node.keys[idx + 1]) > 0 else 0
            if cmp < 0:
                hi = idx
            else:
                lo = idx + 1
        return idx, cmp

    # -- find ----------------------------------------------------------------------------------
    def find(self) -> int | None:
        """The leaf whose range holds the name (H5B_find), None when none does."""
        node = self.node(self.root)
        while True:
            idx, cmp = self._search(node)
            if cmp or not node.children:
                return None
            if node.level == 0:
                return node.children[idx]
            node = self.node(node.children[idx], node.level - 1)

    # -- insert --------------------------------------------------------------------------------
    def insert(self) -> None:
        """H5B_insert: the name into the tree; a split root keeps its address."""
        outer = [0, 0]     # the root's left and right keys, as its caller would hold them
        op, md_key, split, _ = self._insert(self.node(self.root), outer, 0)
        if op == NOOP:
            return
        root, sibling = self.node(self.root), self.node(split)
        moved = self._new(root.level)
        moved.keys, moved.children, moved.left, moved.right = root.keys, root.children, root.left, root.right
        sibling.left = moved.address
        self.nodes.touch(sibling.address)
        root.keys = [moved.keys[0], md_key, sibling.keys[-1]]
        root.children = [moved.address, sibling.address]
        root.level, root.left, root.right = root.level + 1, None, None
        self.nodes.touch(root.address)

    def _insert(self, node: BNode, outer: list[int], at: int) -> tuple[str, int, int | None, bool]:
        """H5B__insert_helper: (NOOP or RIGHT, the key between `node` and its new right sibling,
        that sibling, whether `node`'s right key changed). `outer[at]` and `outer[at + 1]` are
        `node`'s keys in its parent."""
        n = len(node.children)
        idx, cmp = self._search(node)
        if n == 0:
            if node.level:
                raise FormatError(f"{self.what}: B-tree node at {node.address} has no children")
            node.children, node.keys = [self.leaves.create()], [0, 0]
            self.nodes.touch(node.address)
            idx = 0
        elif cmp > 0 and idx + 1 >= n:
            idx = n - 1
        elif cmp and not (cmp < 0 and idx == 0):
            raise FormatError(f"{self.what}: B-tree node at {node.address} has keys out of order")
        if node.level:
            op, md_key, new_child, changed = self._insert(self.node(node.children[idx], node.level - 1),
                                                          node.keys, idx)
        else:
            op, md_key, new_child, changed = self.leaves.insert(node.children[idx], node.keys, idx)
        right_changed = changed and self._climb(node, idx, outer, at)
        if op == NOOP:
            return NOOP, 0, None, right_changed
        target, sibling = node, None
        if len(node.children) == 2 * self.k:
            sibling = self._split(node, idx)
            if idx >= len(node.children):
                idx -= len(node.children)
                target = sibling
        target.keys.insert(idx + 1, md_key)
        target.children.insert(idx + 1, new_child)
        self.nodes.touch(target.address)
        if sibling is None:
            return NOOP, 0, None, right_changed
        return RIGHT, sibling.keys[0], sibling.address, right_changed

    def _climb(self, node: BNode, idx: int, outer: list[int], at: int) -> bool:
        """Child `idx`'s right key (`node.keys[idx + 1]`) changed: it becomes `node`'s right key
        in its parent too when it is `node`'s last key. Whether it did."""
        self.nodes.touch(node.address)
        if idx + 1 < len(node.children):
            return False
        outer[at + 1] = node.keys[idx + 1]
        return True

    def _split(self, node: BNode, idx: int) -> BNode:
        """H5B__split of a full node about to take a child after child `idx`: its new right
        sibling."""
        two_k = 2 * self.k
        ratio = SPLIT_RATIOS[2] if node.right is None else SPLIT_RATIOS[0] if node.left is None else SPLIT_RATIOS[1]
        nleft = int(two_k * ratio)
        if idx < nleft and nleft == two_k:
            nleft -= 1
        elif idx >= nleft and nleft == 0:
            nleft += 1
        sibling = self._new(node.level)
        sibling.keys, sibling.children = node.keys[nleft:], node.children[nleft:]
        node.keys, node.children = node.keys[:nleft + 1], node.children[:nleft]
        sibling.left, sibling.right = node.address, node.right
        if node.right is not None:
            self.node(node.right, node.level).left = sibling.address
            self.nodes.touch(node.right)
        node.right = sibling.address
        self.nodes.touch(node.address)
        return sibling

    # -- remove --------------------------------------------------------------------------------
    def remove(self) -> None:
        """H5B_remove: the name out of the tree (FormatError when no leaf range holds it: the
        caller looks the name up first)."""
        self._remove(self.node(self.root), 0, [0, 0], 0)

    def _remove(self, node: BNode, depth: int, outer: list[int], at: int) -> tuple[str, bool]:
        """H5B__remove_helper at `depth` below the root: (NOOP or REMOVE: `node` is gone,
        whether `node`'s right key changed)."""
        idx, cmp = self._search(node)
        if cmp or not node.children:
            raise FormatError(f"{self.what}: the name is in no B-tree leaf range")
        if node.level:
            op, changed = self._remove(self.node(node.children[idx], node.level - 1), depth + 1, node.keys, idx)
        else:
            op, changed = self.leaves.remove(node.children[idx], node.keys, idx)
        right_changed = changed and self._climb(node, idx, outer, at)
        if op == REMOVE:
            n = len(node.children)
            self.nodes.touch(node.address)
            if n == 1 and depth:
                self._unlink(node)
                return REMOVE, False
            if n == 1:     # the root: an empty leaf again
                node.children, node.keys, node.level = [], [0], 0
            elif idx == 0:
                del node.keys[1], node.children[0]
            elif idx + 1 == n:
                del node.keys[n], node.children[idx]
                outer[at + 1] = node.keys[-1]
                right_changed = True
            else:
                del node.keys[idx + 1], node.children[idx]
        if right_changed and node.right is not None:
            self.node(node.right, node.level).keys[0] = node.keys[-1]
            self.nodes.touch(node.right)
        return NOOP, right_changed

    def _unlink(self, node: BNode) -> None:
        """A node that lost its last child leaves its level; its right sibling inherits its left
        key."""
        if node.left is not None:
            self.node(node.left, node.level).right = node.right
            self.nodes.touch(node.left)
        if node.right is not None:
            sibling = self.node(node.right, node.level)
            sibling.keys[0], sibling.left = node.keys[0], node.left
            self.nodes.touch(node.right)
        self.nodes.drop(node.address)
