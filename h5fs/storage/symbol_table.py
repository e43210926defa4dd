"""An old-style group's symbol table (a local heap of names, a version 1 B-tree, symbol table
nodes) read and edited.

Reading: a node's valid entries only, or the whole node; every entry of a group in name order;
`extents`: the blocks a group's symbol table (local heap, v1 B-tree, symbol table nodes) occupies.

Editing, in a transaction, as libhdf5's H5Gstab.c and H5Gnode.c do, so that h5py lists the result
and keeps editing it:

- `create` (H5G__stab_create): an empty B-tree root leaf and a heap sized from the group's
  estimates, holding the empty name at offset 0 (the tree's left-most key);
- `insert` (H5G__stab_insert_real, H5G__node_insert): the name, then a soft link's value, go
  into the heap; the entry goes into its node in name order (strcmp), a full node (2K entries, K
  the group leaf K) splitting into K + K with the new entry on its side; the node's key in the
  B-tree follows a new last name (storage/btree_v1.py's GroupBTree does the tree's part);
- `remove` (H5G__stab_remove, H5G__node_remove): a soft link's value, then the name, leave the
  heap; an emptied node leaves the tree and the file; a new last name becomes the node's key;
- `rename` within a group: the new name is inserted, then the old one removed (H5L_move's order,
  which decides where the names land in the heap);
- `delete` (H5G__stab_delete): frees every node and the heap of a group going away.

An entry naming a group caches the group's B-tree and heap addresses (scratch-pad cache type 1)
as libhdf5 writes it for a new group or a hard link to an existing one (`cached_stab` reads them
from the target's header); the addresses never change afterwards (the B-tree root and the heap
prefix stay where they are). Reference counts are the caller's: `remove` returns the entry.

Each edit reads through `txn.reader` and stages every node and the heap once; nothing commits.
"""

from __future__ import annotations

import bisect
import errno
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

from ..errors import FormatError, NotFound
from ..format import btree_v1 as bt
from ..format import local_heap as lh
from ..format import symbol_table_entry
from ..format import symbol_table_node as snod
from ..format.codec import Reader
from ..format.messages.symbol_table import SymbolTable
from ..format.messages.symbol_table import decode as decode_stab
from ..format.messages.types import SYMBOL_TABLE
from ..format.symbol_table_entry import CACHE_NONE, CACHE_SOFTLINK, CACHE_STAB, SymbolTableEntry
from ..format.symbol_table_node import HEAD, SymbolTableNode, decode, node_size, symbol_count
from .btree_v1 import NOOP, REMOVE, RIGHT, Blocks, GroupBTree, btree_k, find_child, iterate_leaves
from .btree_v1 import extents as btree_extents
from .extent_sink import Freeing
from .local_heap import HeapEdit
from .local_heap import extents as heap_extents
from .local_heap import read as read_heap
from .object_header.reader import read as read_header

if TYPE_CHECKING:
    from .extent_sink import ExtentSink
    from .transaction import Transaction

EST_ENTRIES, EST_NAME_LEN = 4, 8     # H5G_CRT_GINFO_EST_NUM_ENTRIES, H5G_CRT_GINFO_EST_NAME_LEN


def node_entries(reader, address: int, what: str) -> list[SymbolTableEntry]:
    """The valid entries of the node at `address` (reads only those: K is not needed)."""
    head_size = reader.sizes.layout(HEAD).size
    count = symbol_count(reader.read(address, head_size, f"{what}: symbol table node"), reader.sizes,
                         f"{what}: symbol table node")
    esize = symbol_table_entry.size(reader.sizes)
    c = reader.cursor(address + head_size, count * esize, f"{what}: symbol table node")
    return [symbol_table_entry.decode(c) for _ in range(count)]


def group_entries(reader, btree_address: int, what: str) -> list[SymbolTableEntry]:
    """Every entry of an old-style group, in name order: those of the nodes its B-tree's leaves
    point at."""
    return [entry for _, node, _ in iterate_leaves(reader, btree_address, bt.GROUP, 0, what)
            for entry in node_entries(reader, node, what)]


def read_node(reader, address: int, capacity: int, what: str) -> SymbolTableNode:
    """The whole node at `address`, `capacity` = 2 * group leaf node K slots."""
    label = f"{what}: symbol table node"
    return decode(reader.read(address, node_size(reader.sizes, capacity), label), reader.sizes, capacity, label)


def extents(out: ExtentSink, reader, path: str, btree: int | None, heap_address: int | None, group_k: int,
            leaf_k: int) -> None:
    """The local heap's, every B-tree node's (K = `group_k`) and every symbol table node's (2K
    entries, K = `leaf_k`) extents; the link names must be in order."""
    if not out.first_time(("symbol table", btree, heap_address)):
        return
    heap = heap_extents(out, reader, path, heap_address, "symbol table local heap")
    if btree is None:
        return
    names: list[bytes] = []
    for addr in btree_extents(out, reader, path, "symbol table B-tree node", btree, bt.GROUP, 0, group_k):
        label = "symbol table node"
        if not out.add(addr, node_size(reader.sizes, 2 * leaf_k), path, label):
            continue
        with out.guard(path, label):
            node = read_node(reader, addr, 2 * leaf_k, f"{path}: {label} at {addr}")
            if heap is not None:
                names += [heap.string(e.name_offset) for e in node.entries]
    if any(a >= b for a, b in pairwise(names)):
        out.problem(path, "symbol table", "link names out of order (or repeated) in the B-tree")


@dataclass(frozen=True)
class Link:
    """What an entry names: a hard link's object header (and, when that object is an old-style
    group, its symbol table for the cache), or a soft link's value."""

    address: int | None = None
    cached: SymbolTable | None = None
    soft_target: bytes | None = None

    def __post_init__(self):
        if (self.address is None) == (self.soft_target is None) or (self.cached and self.soft_target is not None):
            raise ValueError("symbol table entry: a hard link (an address) or a soft link (a value)")


def check_name(name: bytes) -> None:
    if not name or b"\0" in name or b"/" in name:
        raise ValueError(f"symbol table: {name!r} cannot name a link")


def _compare(a: bytes, b: bytes) -> int:
    return (a > b) - (a < b)


class _SymbolNodes:
    """The symbol table nodes one edit touches, and the name it inserts or removes (the B-tree's
    `Leaves`)."""

    def __init__(self, txn: Transaction, heap: HeapEdit, capacity: int, name: bytes, what: str,
                 link: Link | None):
        self.heap, self.name, self.what, self.link = heap, name, what, link
        self.capacity = capacity     # 2 * group leaf K
        self.done: SymbolTableEntry | None = None   # the entry inserted or removed
        self.nodes = Blocks(txn, snod.node_size(txn.sizes, capacity),
                            lambda a: list(read_node(txn.reader, a, capacity, what).entries),
                            lambda entries: snod.encode(snod.SymbolTableNode(tuple(entries), capacity), txn.sizes),
                            f"{what}: symbol table node")

    def entries(self, address: int) -> list[SymbolTableEntry]:
        return self.nodes.get(address)

    def compare(self, key: int) -> int:
        return _compare(self.name, self.heap.string(key))

    def search(self, entries: list[SymbolTableEntry]) -> tuple[int, int]:
        """(the entry's index or where it would go, 0 when it is there)."""
        lo, hi, cmp = 0, len(entries), 1
        while lo < hi:
            mid = (lo + hi) // 2
            cmp = self.compare(entries[mid].name_offset)
            if cmp == 0:
                return mid, 0
            lo, hi = (lo, mid) if cmp < 0 else (mid + 1, hi)
        return lo, cmp

    # -- Leaves --------------------------------------------------------------------------------
    def create(self) -> int:
        return self.nodes.new([])

    def insert(self, address: int, keys: list[int], i: int) -> tuple[str, int, int | None, bool]:
        """H5G__node_insert."""
        entries = self.entries(address)
        idx, cmp = self.search(entries)
        if cmp == 0:
            raise FileExistsError(errno.EEXIST, f"{self.what}: {self.name!r} exists already")
        entry = self._entry()
        self.nodes.touch(address)
        half, changed, op, md_key, right = self.capacity // 2, False, NOOP, 0, None
        target = entries
        if len(entries) >= self.capacity:
            op, right = RIGHT, self.nodes.new(entries[half:])
            del entries[half:]
            md_key = entries[-1].name_offset
            if idx == half:
                md_key = entry.name_offset
            elif idx > half:
                idx -= half
                target = self.nodes.get(right)
                changed = idx == half
        else:
            changed = idx == len(entries)
        if changed:
            keys[i + 1] = entry.name_offset
        target.insert(idx, entry)
        self.done = entry
        return op, md_key, right, changed

    def _entry(self) -> SymbolTableEntry:
        """H5G__ent_convert: the name (then a soft link's value) into the heap."""
        link = self.link
        name_offset = self.heap.insert(self.name + b"\0")
        if link.soft_target is not None:
            return SymbolTableEntry(name_offset, None, CACHE_SOFTLINK,
                                    softlink_offset=self.heap.insert(link.soft_target + b"\0"))
        if link.cached is not None:
            return SymbolTableEntry(name_offset, link.address, CACHE_STAB, link.cached.btree_address,
                                    link.cached.heap_address)
        return SymbolTableEntry(name_offset, link.address, CACHE_NONE)

    def remove(self, address: int, keys: list[int], i: int) -> tuple[str, bool]:
        """H5G__node_remove."""
        entries = self.entries(address)
        idx, cmp = self.search(entries)
        if cmp:
            raise NotFound(f"{self.what}: no link named {self.name!r}")
        entry = self.done = entries[idx]
        if entry.cache_type == CACHE_SOFTLINK:
            value = self.heap.string(entry.softlink_offset)
            self.heap.remove(entry.softlink_offset, len(value) + 1)
        self.heap.remove(entry.name_offset, len(self.name) + 1)
        if len(entries) == 1:
            self.nodes.drop(address)
            return REMOVE, False
        del entries[idx]
        self.nodes.touch(address)
        if idx == len(entries):
            keys[i + 1] = entries[-1].name_offset
            return NOOP, True
        return NOOP, False


def _edit(txn: Transaction, stab: SymbolTable, name: bytes, what: str,
          link: Link | None = None) -> tuple[GroupBTree, _SymbolNodes]:
    check_name(name)
    if stab.btree_address is None or stab.heap_address is None:
        raise FormatError(f"{what}: symbol table message without a B-tree or a heap")
    k = btree_k(txn)
    heap = HeapEdit.open(txn, stab.heap_address, what)
    if stab.heap_address not in txn.store.sound_heaps:
        _check_free_list(txn, stab, heap, what)
        txn.store.sound_heaps.add(stab.heap_address)
    leaves = _SymbolNodes(txn, heap, 2 * k.group_leaf, name, what, link)
    return GroupBTree(txn, stab.btree_address, k.group_internal, leaves, what), leaves


def _check_free_list(txn: Transaction, stab: SymbolTable, heap: HeapEdit, what: str) -> None:
    """The first edit of a group's heap in a mount checks that no free block of the heap (which
    has no checksum) covers a link name: a name written there would overwrite another."""
    if not heap.free:
        return
    names = sorted((e.name_offset, e.name_offset + len(heap.string(e.name_offset)) + 1)
                   for e in group_entries(txn.reader, stab.btree_address, what))
    starts = [a for a, _ in names]
    for offset, size in heap.free:
        i = bisect.bisect_left(starts, offset + size) - 1
        if i >= 0 and names[i][1] > offset:   # names do not overlap: their ends rise with their starts
            raise FormatError(f"{what}: local heap free block {offset}+{size} covers a link name: not edited")


def _stage(tree: GroupBTree, leaves: _SymbolNodes) -> None:
    leaves.heap.txn.stab_edits = True   # its lookups read what it staged from now on
    tree.stage()
    leaves.nodes.stage()
    leaves.heap.stage()


def insert(txn: Transaction, stab: SymbolTable, name: bytes, link: Link,
           what: str = "symbol table") -> SymbolTableEntry:
    """Add the link `name` (FileExistsError when the group has one); the new entry."""
    tree, leaves = _edit(txn, stab, name, what, link)
    tree.insert()
    _stage(tree, leaves)
    return leaves.done


def remove(txn: Transaction, stab: SymbolTable, name: bytes, what: str = "symbol table") -> SymbolTableEntry:
    """Remove the link `name` (NotFound when there is none); its entry as it was."""
    tree, leaves = _edit(txn, stab, name, what)
    if tree.find() is None:
        raise NotFound(f"{what}: no link named {name!r}")
    tree.remove()
    _stage(tree, leaves)
    return leaves.done


def edit_many(txn: Transaction, stab: SymbolTable, removes: list[bytes], inserts: list[tuple[bytes, Link]],
              what: str = "symbol table") -> None:
    """The links `removes` removed, then `inserts` added, in that order, as that many `remove`
    and `insert` calls would, but each node and the heap read and staged once (a burst of
    deferred link edits landing: storage/pending_links.py). NotFound, FileExistsError as they."""
    if not removes and not inserts:
        return
    tree, leaves = _edit(txn, stab, (removes or [inserts[0][0]])[0], what)
    for name in removes:
        check_name(name)
        leaves.name, leaves.link = name, None
        if tree.find() is None:
            raise NotFound(f"{what}: no link named {name!r}")
        tree.remove()
    for name, link in inserts:
        check_name(name)
        leaves.name, leaves.link = name, link
        tree.insert()
    _stage(tree, leaves)


def find_entry(reader, btree_address: int | None, heap: lh.LocalHeap, name: bytes,
               what: str = "symbol table") -> SymbolTableEntry | None:
    """H5G__stab_lookup without a transaction: the B-tree down to the node whose name range
    holds `name`, then a search of its sorted entries; None when the group has no such link."""
    if btree_address is None:
        return None

    def cmp3(left: int, right: int) -> int:   # names in (left, right] are this child's
        return -1 if name <= heap.string(left) else 1 if name > heap.string(right) else 0
    node = find_child(reader, btree_address, bt.GROUP, 0, cmp3, what)
    if node is None:
        return None
    entries = node_entries(reader, node, what)
    lo, hi = 0, len(entries)
    while lo < hi:
        mid = (lo + hi) // 2
        found = heap.string(entries[mid].name_offset)
        if found == name:
            return entries[mid]
        lo, hi = (mid + 1, hi) if found < name else (lo, mid)
    return None


def lookup(txn: Transaction, stab: SymbolTable, name: bytes, what: str = "symbol table") -> SymbolTableEntry | None:
    """The entry of the link `name`, None when the group has none (H5G__stab_lookup)."""
    tree, leaves = _edit(txn, stab, name, what)
    leaf = tree.find()
    if leaf is None:
        return None
    entries = leaves.entries(leaf)
    idx, cmp = leaves.search(entries)
    return entries[idx] if cmp == 0 else None


def link_of(txn: Transaction, stab: SymbolTable, entry: SymbolTableEntry, what: str = "symbol table") -> Link:
    """What `entry` links, as `insert` takes it (read it before removing the entry: a soft
    link's value leaves the heap with it)."""
    if entry.cache_type == CACHE_SOFTLINK:
        heap = read_heap(txn.reader, stab.heap_address, what)
        return Link(soft_target=heap.string(entry.softlink_offset))
    cached = SymbolTable(entry.btree_address, entry.heap_address) if entry.cache_type == CACHE_STAB else None
    return Link(entry.header_address, cached)


def rename(txn: Transaction, stab: SymbolTable, old: bytes, new: bytes, what: str = "symbol table") -> SymbolTableEntry:
    """Give the link `old` the name `new` (NotFound, FileExistsError); the new entry."""
    entry = lookup(txn, stab, old, what)
    if entry is None:
        raise NotFound(f"{what}: no link named {old!r}")
    if old == new:
        return entry
    out = insert(txn, stab, new, link_of(txn, stab, entry, what), what)
    remove(txn, stab, old, what)
    return out


def create(txn: Transaction, est_entries: int = EST_ENTRIES, est_name_len: int = EST_NAME_LEN,
           heap_size_hint: int = 0, what: str = "new symbol table") -> SymbolTable:
    """The B-tree and heap of a new empty group, as H5G__stab_create lays them out (its
    estimates: the group info message's, or libhdf5's defaults; a local heap size hint from the
    group creation property list wins)."""
    txn.stab_edits = True
    sizes, k = txn.sizes, btree_k(txn)
    free_size = lh.free_block_size(sizes)
    hint = heap_size_hint or 8 + est_entries * lh.align(est_name_len + 1) + free_size
    btree = txn.allocate(bt.node_size(bt.GROUP, sizes, 0, k.group_internal))
    txn.write_new(btree, bt.encode_node(bt.Node(bt.GROUP, 0, (0,), ()), sizes, k.group_internal))
    heap = HeapEdit.create(txn, max(hint, free_size + 2), what)
    heap.insert(b"\0")
    heap.stage()
    return SymbolTable(btree, heap.address)


def delete(txn: Transaction, stab: SymbolTable, what: str = "symbol table") -> list[SymbolTableEntry]:
    """Free a group's B-tree, nodes and heap (H5G__stab_delete); the entries it held (the
    caller drops their objects' reference counts)."""
    txn.stab_edits = True
    k, out = btree_k(txn), Freeing(txn)
    heap_extents(out, txn.reader, what, stab.heap_address, "symbol table local heap")
    entries: list[SymbolTableEntry] = []
    for leaf in btree_extents(out, txn.reader, what, "symbol table B-tree node", stab.btree_address, bt.GROUP, 0,
                                 k.group_internal):
        entries += node_entries(txn.reader, leaf, what)
        txn.free(leaf, snod.node_size(txn.sizes, 2 * k.group_leaf))
    return entries


def cached_stab(txn: Transaction, address: int, what: str = "link target") -> SymbolTable | None:
    """The symbol table of the object at `address` when it is an old-style group: what an entry
    linking it caches (H5G__ent_convert)."""
    raw = read_header(txn.reader, address, what).first(SYMBOL_TABLE)
    return None if raw is None else decode_stab(Reader(raw.data, 0, txn.sizes, f"{what}: symbol table message"))
