"""Reads a group symbol table node: its valid entries only, or the whole node; `extents`: the
blocks a group's symbol table (local heap, v1 B-tree, symbol table nodes) occupies."""

from __future__ import annotations

from itertools import pairwise
from typing import TYPE_CHECKING

from ...format import btree_v1, symbol_table_entry
from ...format.symbol_table_entry import SymbolTableEntry
from ...format.symbol_table_node import HEAD, SymbolTableNode, decode, node_size, symbol_count
from .btree_v1 import extents as btree_extents
from .btree_v1 import iterate_leaves
from .local_heap import extents as heap_extents

if TYPE_CHECKING:
    from ..extent_sink import ExtentSink


def read(reader, address: int, what: str) -> list[SymbolTableEntry]:
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
    return [entry for _, node, _ in iterate_leaves(reader, btree_address, btree_v1.GROUP, 0, what)
            for entry in read(reader, node, what)]


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
    for addr in btree_extents(out, reader, path, "symbol table B-tree node", btree, btree_v1.GROUP, 0, group_k):
        label = "symbol table node"
        if not out.add(addr, node_size(reader.sizes, 2 * leaf_k), path, label):
            continue
        with out.guard(path, label):
            node = read_node(reader, addr, 2 * leaf_k, f"{path}: {label} at {addr}")
            if heap is not None:
                names += [heap.string(e.name_offset) for e in node.entries]
    if any(a >= b for a, b in pairwise(names)):
        out.problem(path, "symbol table", "link names out of order (or repeated) in the B-tree")
