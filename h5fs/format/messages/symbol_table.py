"""Symbol Table message (0x0011): an old-style group's v1 B-tree and local heap."""

from __future__ import annotations

from dataclasses import dataclass

from ..codec import Reader, Writer


@dataclass(frozen=True, slots=True)
class SymbolTable:
    btree_address: int | None
    heap_address: int | None


def decode(c: Reader) -> SymbolTable:
    return SymbolTable(*map(c.sizes.address, c.fields("OO")))


def encode(w: Writer, stab: SymbolTable) -> None:
    w.offset(stab.btree_address)
    w.offset(stab.heap_address)
