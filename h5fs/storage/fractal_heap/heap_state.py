"""What every part of one fractal heap's edit shares (`HeapState`): the heap's header as edited
so far, its geometry, and the blocks this edit allocated, which are written whole as new blocks
(`txn.write_new`) where the others are rewritten in place."""

from __future__ import annotations

from dataclasses import replace

from ...errors import Unsupported
from ...format.fractal_heap import FractalHeapHeader
from ..transaction import Transaction
from .reader import FractalHeap


def log2(n: int) -> int:
    return n.bit_length() - 1


class HeapState:
    """One heap edited within a transaction."""

    def __init__(self, txn: Transaction, heap_address: int, what: str):
        self.txn, self.sizes = txn, txn.sizes
        self.reader = FractalHeap(txn.reader, heap_address, what)
        self.what = self.reader.what
        if self.reader.header.filter_len:
            raise Unsupported(f"{self.what}: editing heaps with I/O filters")
        self.h: FractalHeapHeader = self.reader.header
        self.g = self.reader.geometry
        self.W = self.h.width
        self.new: set[int] = set()                     # addresses allocated by this edit

    def set(self, **fields) -> None:
        self.h = replace(self.h, **fields)

    def adjust(self, **deltas) -> None:
        self.h = replace(self.h, **{k: getattr(self.h, k) + v for k, v in deltas.items()})

    def alloc(self, size: int, raw: bool = False) -> int:
        addr = self.txn.allocate(size, raw=raw)
        self.new.add(addr)
        return addr

    def put(self, addr: int, image: bytes) -> None:
        (self.txn.write_new if addr in self.new else self.txn.write_in_place)(addr, image)

    def free_block(self, addr: int, size: int) -> None:
        """A direct or indirect block of the heap given up (it may be one this edit made)."""
        self.new.discard(addr)
        self.txn.free(addr, size)


class HeapPart:
    """One part of a heap's edit (its managed blocks, free sections, huge objects): `h` is the
    header as edited so far, shared with the other parts."""

    def __init__(self, state: HeapState):
        self.state, self.txn, self.sizes = state, state.txn, state.sizes
        self.g, self.W, self.what = state.g, state.W, state.what

    @property
    def h(self) -> FractalHeapHeader:
        return self.state.h

    def lookup(self, rel: int) -> tuple[int, int]:
        """H5HF__dtable_lookup: row and column of an offset within an indirect block."""
        h, g = self.h, self.g
        if rel < h.start_block_size * self.W:
            return 0, rel // h.start_block_size
        high = log2(rel)
        row = high - g.first_row_bits + 1
        return row, (rel - (1 << high)) // g.row_block_size[row]
