"""Group symbol table node (III.B): the leaves of an old-style group's B-tree."""

from __future__ import annotations

from ..errors import FormatError
from . import symbol_table_entry
from .symbol_table_entry import SymbolTableEntry

MAX_SYMBOLS = 65536


def read(reader, address: int, what: str) -> list[SymbolTableEntry]:
    head = reader.cursor(address, 8, f"{what}: symbol table node")
    head.signature(b"SNOD")
    if head.u8() != 1:
        raise FormatError(f"{what}: symbol table node version is not 1")
    head.u8()
    count = head.u16()
    if count > MAX_SYMBOLS:
        raise FormatError(f"{what}: symbol table node claims {count} entries")
    esize = symbol_table_entry.size(reader.sizes)
    c = reader.cursor(address + 8, count * esize, f"{what}: symbol table node")
    return [symbol_table_entry.decode(c) for _ in range(count)]
