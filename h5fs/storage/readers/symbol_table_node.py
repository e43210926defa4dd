"""Reads a group symbol table node: its valid entries only, or the whole node."""

from __future__ import annotations

from ...format import btree_v1, symbol_table_entry
from ...format.symbol_table_entry import SymbolTableEntry
from ...format.symbol_table_node import HEAD, SymbolTableNode, decode, node_size, symbol_count
from .btree_v1 import iterate_leaves


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
