"""Symbol Table message (0x0011): an old-style group's v1 B-tree and local heap."""

from __future__ import annotations

from dataclasses import dataclass

from ..codec import Reader


@dataclass(frozen=True)
class SymbolTable:
    btree_address: int | None
    heap_address: int | None


def decode(c: Reader) -> SymbolTable:
    return SymbolTable(c.offset(), c.offset())
