"""Group symbol table node (III.B): the leaves of an old-style group's B-tree.

A node has room for 2K entries (K: the superblock's group leaf node K); the first `len(entries)`
are valid. The unused slots hold undefined bytes ("space reserved but undefined may differ"):
libhdf5 zero-fills them, and so does `encode`.

Pure bytes <-> records; h5fs.storage.symbol_table reads nodes from the file.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import FormatError
from . import symbol_table_entry
from .codec import Reader, Sizes, Writer
from .symbol_table_entry import SymbolTableEntry

SIGNATURE = b"SNOD"
VERSION = 1
MAX_SYMBOLS = 65536
HEAD = "4sBxH"   # signature, version, reserved, number of symbols


@dataclass(frozen=True, slots=True)
class SymbolTableNode:
    entries: tuple[SymbolTableEntry, ...]
    capacity: int          # entry slots: 2 * group leaf node K
    version: int = VERSION


def node_size(sizes: Sizes, capacity: int) -> int:
    return sizes.layout(HEAD).size + capacity * symbol_table_entry.size(sizes)


def symbol_count(buf: bytes, sizes: Sizes, what: str) -> int:
    sig, version, count = Reader(buf, 0, sizes, what).fields(HEAD)
    if sig != SIGNATURE:
        raise FormatError(f"{what}: bad signature {sig!r}, expected {SIGNATURE!r}")
    if version != VERSION:
        raise FormatError(f"{what}: symbol table node version is not 1")
    if count > MAX_SYMBOLS:
        raise FormatError(f"{what}: symbol table node claims {count} entries")
    return count


def decode(buf: bytes, sizes: Sizes, capacity: int, what: str = "symbol table node") -> SymbolTableNode:
    """A whole node (`node_size(sizes, capacity)` bytes)."""
    count = symbol_count(buf, sizes, what)
    if count > capacity:
        raise FormatError(f"{what}: {count} entries in a node of {capacity}")
    size = node_size(sizes, capacity)
    if len(buf) < size:
        raise FormatError(f"{what}: truncated ({len(buf)} of {size} bytes)")
    c = Reader(buf, sizes.layout(HEAD).size, sizes, what)
    return SymbolTableNode(tuple(symbol_table_entry.decode(c) for _ in range(count)), capacity)


def encode(node: SymbolTableNode, sizes: Sizes) -> bytes:
    if len(node.entries) > node.capacity:
        raise ValueError(f"symbol table node: {len(node.entries)} entries in {node.capacity} slots")
    w = Writer(sizes)
    w.fields(HEAD, SIGNATURE, node.version, len(node.entries))
    for entry in node.entries:
        symbol_table_entry.encode(w, entry)
    w.zeros(node_size(sizes, node.capacity) - w.pos)
    return w.getvalue()
