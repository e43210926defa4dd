"""Fractal heap edits (spec III.G) as libhdf5 makes them (H5HF*.c): new heaps, objects inserted,
removed and replaced, the heap's own free-space manager kept exact.

`create(txn, params)` makes an empty heap, `delete` frees all of one; `insert` and `remove` edit
one object; `HeapWriter` chains several edits of one heap in one transaction (each block read and
written once). Nothing is committed here: new blocks go to fresh space (`txn.write_new`), live
blocks are rewritten whole (`txn.write_in_place`), replaced blocks are freed (`txn.free`).

Objects up to the ID's tiny length live in their IDs (H5HF__tiny_insert); objects larger than the
maximum managed size are huge (huge_objects.py); the rest are managed objects in direct blocks
(managed_space.py: where they go; managed_blocks.py: the blocks; free_sections.py: the free space
and its manager). Heaps with I/O filters are refused (Unsupported).
"""

from __future__ import annotations

from typing import Self

from ...errors import FormatError
from ...format import free_space_manager as fsm
from ...format.fractal_heap import (ID_HUGE, ID_MANAGED, ID_TINY, LINK_HEAP, HeapParams, ManagedId, TinyId, decode_id,
                                    derive, encode_header, encode_id, header_size, new_header)
from ..btree_v2.edit import delete as delete_tree
from ..transaction import Transaction
from .free_sections import FreeSections
from .heap_state import HeapState
from .huge_objects import HugeObjects
from .managed_blocks import ManagedBlocks
from .managed_space import ManagedSpace
from .reader import FractalHeap


def create(txn: Transaction, params: HeapParams = LINK_HEAP) -> int:
    """A new empty heap; its header's address."""
    address = txn.allocate(header_size(txn.sizes, 0))
    h = new_header(address, params)
    derive(h, txn.sizes, "new fractal heap")    # refuses parameters libhdf5 would refuse
    txn.write_new(address, encode_header(h, txn.sizes))
    return address


def insert(txn: Transaction, heap_address: int, data: bytes) -> bytes:
    """Store `data`; its heap ID."""
    with HeapWriter(txn, heap_address) as w:
        return w.insert(data)


def remove(txn: Transaction, heap_address: int, heap_id: bytes) -> None:
    with HeapWriter(txn, heap_address) as w:
        w.remove(heap_id)


def delete(txn: Transaction, heap_address: int) -> None:
    """H5HF_delete: every block of the heap becomes free space (header, direct and indirect
    blocks, huge objects and their B-tree, the free-space manager)."""
    heap = FractalHeap(txn.reader, heap_address)
    h, s = heap.header, txn.sizes
    for address, size in heap.block_extents():
        txn.free(address, size)
    if h.free_space_manager_address is not None:
        mh = fsm.decode_header(txn.reader.read(h.free_space_manager_address, fsm.header_size(s)),
                               h.free_space_manager_address, s, f"{heap.what} free-space manager")
        txn.free(mh.sections_address, mh.sections_alloc_size)
        txn.free(mh.address, fsm.header_size(s))
    if h.huge_btree_address is not None:   # huge objects are raw data
        delete_tree(txn, h.huge_btree_address, f"{heap.what} huge-object B-tree",
                    lambda rec: txn.free(rec.address, rec.length, raw=True))
    txn.free(heap_address, header_size(s, h.filter_len))


class HeapWriter:
    """Edits of one heap within a transaction; `close()` (or leaving the `with`) stages them.
    One writer per heap at a time: a second one sees the first's edits only once it closed."""

    def __init__(self, txn: Transaction, heap_address: int, what: str = "fractal heap"):
        self.state = HeapState(txn, heap_address, what)
        self.reader, self.what, self.g = self.state.reader, self.state.what, self.state.g
        self.blocks = ManagedBlocks(self.state)
        self.free = FreeSections(self.state)
        self.managed = ManagedSpace(self.state, self.blocks, self.free)
        self.huge = HugeObjects(self.state)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()

    def insert(self, data: bytes) -> bytes:
        n = len(data)
        if n == 0:
            raise ValueError("fractal heap objects are not empty")
        if n > self.state.h.max_managed_size:
            return self.huge.insert(bytes(data))
        if n <= self.g.tiny_max:
            self.state.adjust(tiny_count=1, tiny_size=n)
            return encode_id(TinyId(bytes(data)), self.g)
        offset = self.managed.allocate(n)
        self.blocks.write(offset, data)
        self.state.adjust(managed_count=1, free_space=-n)
        return encode_id(ManagedId(offset, n), self.g)

    def get(self, heap_id: bytes) -> bytes:
        kind = self.reader.kind(heap_id)
        if kind == ID_HUGE:
            return self.huge.get(heap_id)
        if kind != ID_MANAGED:
            return self.reader.get(heap_id)
        hid = self._managed(heap_id)
        return self.blocks.read(hid.offset, hid.length)

    def remove(self, heap_id: bytes) -> None:
        kind = self.reader.kind(heap_id)
        if kind == ID_TINY:
            n = len(self.reader.get(heap_id))
            self.state.adjust(tiny_count=-1, tiny_size=-n)
        elif kind == ID_HUGE:
            self.huge.remove(heap_id)
        elif kind == ID_MANAGED:
            hid = self._managed(heap_id)
            self.blocks.dblock_at(hid.offset)          # the object's block exists
            self.state.adjust(managed_count=-1, free_space=hid.length)
            self.managed.release(hid.offset, hid.length)
        else:
            raise FormatError(f"{self.what}: heap ID of unknown type {kind}")

    def replace(self, heap_id: bytes, data: bytes) -> bytes:
        kind = self.reader.kind(heap_id)
        if kind == ID_MANAGED:
            hid = self._managed(heap_id)
            if hid.length == len(data):
                self.blocks.write(hid.offset, data)
                return bytes(heap_id)
        elif kind == ID_HUGE:
            rec = self.huge.location(heap_id)
            if rec.length == len(data):
                self.state.put(rec.address, bytes(data))
                return bytes(heap_id)
        self.remove(heap_id)
        return self.insert(data)

    def _managed(self, heap_id: bytes) -> ManagedId:
        hid = decode_id(bytes(heap_id), self.g, self.what)
        assert isinstance(hid, ManagedId)
        h = self.state.h
        if hid.offset == 0 or hid.length == 0 or hid.offset + hid.length > h.managed_size \
                or hid.length > h.max_managed_size:
            raise FormatError(f"{self.what}: managed object {hid.offset}+{hid.length} outside the heap")
        return hid

    def close(self) -> None:
        """Stage every block this writer changed, the free-space manager and the header."""
        self.blocks.stage()
        if self.free.changed:
            self.free.store()
        self.state.put(self.state.h.address, encode_header(self.state.h, self.state.sizes))
