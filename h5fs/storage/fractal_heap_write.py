"""Fractal heap edits (spec III.G) as libhdf5 makes them (H5HF*.c): new heaps, objects inserted,
removed and replaced, the heap's own free-space manager kept exact.

`create(txn, params)` makes an empty heap, `delete` frees all of one; `insert` and `remove` edit
one object;
`HeapWriter` chains several edits of one heap in one transaction (each block read and written
once). Nothing is committed here: new blocks go to fresh space (`txn.write_new`), live blocks are
rewritten whole (`txn.write_in_place`), replaced blocks are freed (`txn.free`).

What libhdf5 does, and so this module:

- Objects up to the ID's tiny length live in their IDs (H5HF__tiny_insert); objects larger than the
  maximum managed size are "huge": stored on their own and listed in a v2 B-tree (types 1/3,
  H5HF__huge_insert; IDs are keys from ``next_huge_id`` unless the ID holds address and length);
  the rest are managed objects in direct blocks.
- A managed object goes into the best-fitting free section (H5FS__sect_find_node: the smallest
  section that holds it, the lowest address among equal sizes). A "single" section is free space in
  a direct block; a "row" section stands for the unallocated direct blocks of one row of an
  indirect block: taking one creates the block (and any missing indirect blocks above it,
  H5HF__man_dblock_locate), at the end of the section when the row is its last of several rows,
  else at the row's start (H5HF__sect_indirect_reduce_row).
- Without a fitting section, a new direct block goes at the allocation iterator (H5HF__man_dblock_new,
  H5HF__hdr_update_iter): the root direct block first, then a root indirect block whose entry 0
  takes the old root (H5HF__man_iblock_root_create), doubled in rows as it fills
  (H5HF__man_iblock_root_double), child indirect blocks for deeper rows; blocks too small for the
  object are skipped (H5HF__hdr_skip_blocks) and listed as free "indirect" ranges, merged with an
  adjacent range of the same indirect block (H5HF__sect_indirect_merge_row).
- The free-space manager (FSHD/FSSE, client 0) lists single sections and, for each range, its
  first row section carrying the range (block offset, row, column, entries: H5HF__sect_indirect_
  serialize); the other row sections are "ghosts" libhdf5 rebuilds from the range, counted in the
  header. A heap without free sections has no manager (H5HF__space_close deletes it).

Removal frees the object's bytes as a single section merged with its neighbours in the block; a
root direct block left empty empties the heap (H5HF__sect_single_shrink, H5HF__hdr_empty). Where
libhdf5 would also destroy an emptied direct block inside an indirect block and shrink the
doubling table (H5HF__sect_single_full_dblock, H5HF__hdr_reverse_iter, root halving), this module
keeps the block with a single section covering it: a state libhdf5 reads and later converts itself
the first time it touches that section.

Heaps with I/O filters are refused (Unsupported). The huge-object B-tree is edited by the generic
v2 B-tree editor (btree_v2_edit.py), keyed by the huge ID (or address and length for direct IDs).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from typing import Self

from ..errors import FormatError, Unsupported
from ..format import btree_v2 as bt
from ..format import free_space_manager as fsm
from ..format.fractal_heap import (ID_HUGE, ID_MANAGED, ID_TINY, LINK_HEAP, DirectBlock, DirectEntry,
                                   FractalHeapHeader, HeapParams, HugeId, IndirectBlock, ManagedId, TinyId,
                                   decode_id, derive, encode_direct, encode_header, encode_id, encode_indirect,
                                   entry_offset, header_size, indirect_block_size, new_header, row_free_space,
                                   row_offset, rows_for_block, size_to_row, span_size)
from .btree_v2_edit import BTreeV2Edit
from .btree_v2_edit import delete as delete_tree
from .btree_v2_edit import new_header as new_tree_header
from .readers import btree_v2 as bt_reader
from .readers.fractal_heap import FractalHeap
from .transaction import Transaction

FSM_SHRINK, FSM_EXPAND = 80, 120          # H5HF_FSPACE_SHRINK / _EXPAND
HUGE_NODE_SIZE, HUGE_SPLIT, HUGE_MERGE = 512, 100, 40   # H5HF_HUGE_BT2_*


def _log2(n: int) -> int:
    return n.bit_length() - 1


# -- public API -----------------------------------------------------------------------------------


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
    for address, size in _heap_extents(heap):
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


def _heap_extents(heap: FractalHeap):
    """(address, size) of the heap's direct and indirect blocks."""
    h, g = heap.header, heap.geometry
    if h.root_address is None:
        return
    if h.root_rows == 0:
        yield h.root_address, h.root_filtered_size if h.filter_len else h.start_block_size
        return
    stack = [(h.root_address, h.root_rows, 0)]
    while stack:
        addr, nrows, off = stack.pop()
        ib = heap.read_indirect(addr, nrows, off)
        yield addr, indirect_block_size(g, nrows)
        for entry, e in enumerate(ib.direct):
            if e.address is not None:
                yield e.address, e.filtered_size if h.filter_len else g.row_block_size[entry // h.width]
        for j, child in enumerate(ib.indirect):
            if child is not None:
                entry = j + g.max_direct_rows * h.width
                size = g.row_block_size[entry // h.width]
                stack.append((child, rows_for_block(g, size), entry_offset(h, g, off, entry)))


# -- in-memory state ------------------------------------------------------------------------------


class _IBlock:
    """An indirect block being edited: entries hold child addresses (direct rows, then indirect)."""

    def __init__(self, address: int, nrows: int, block_off: int, entries: list[int | None],
                 parent: _IBlock | None, par_entry: int, max_rows: int, new: bool):
        self.address, self.nrows, self.block_off, self.entries = address, nrows, block_off, entries
        self.parent, self.par_entry, self.max_rows = parent, par_entry, max_rows
        self.new, self.dirty = new, new


@dataclass(frozen=True, slots=True)
class _Range:
    """An "indirect" free section at the top of its hierarchy: `count` unallocated entries of the
    indirect block at `block_off` from entry `start` (child entries stand for whole subtrees)."""

    block_off: int
    start: int
    count: int


@dataclass(frozen=True, slots=True)
class _Row:
    """A row section: `count` unallocated direct blocks of row `row` from column `col` in the
    block at `block_off`, derived from `top`; `path` = the (block offset, entry) steps from the
    top's block down to this row's block, `owner` = the range of that block the row belongs to."""

    addr: int
    size: int
    block_off: int
    row: int
    col: int
    count: int
    top: _Range
    owner: _Range
    path: tuple[tuple[int, int], ...]


class HeapWriter:
    """Edits of one heap within a transaction; `close()` (or leaving the `with`) stages them.
    One writer per heap at a time: a second one sees the first's edits only once it closed."""

    def __init__(self, txn: Transaction, heap_address: int, what: str = "fractal heap"):
        self.txn, self.sizes = txn, txn.sizes
        self.reader = FractalHeap(txn.reader, heap_address, what)
        self.what = self.reader.what
        if self.reader.header.filter_len:
            raise Unsupported(f"{self.what}: editing heaps with I/O filters")
        self.h: FractalHeapHeader = self.reader.header
        self.g = self.reader.geometry
        self.rfree = row_free_space(self.g)
        self.W = self.h.width
        self._root: _IBlock | None = None
        self._iblocks: dict[int, _IBlock] = {}         # by block offset
        self._payloads: dict[int, bytearray] = {}      # direct block address -> payload being edited
        self._dblocks: dict[int, tuple[int, int]] = {}  # address -> (block offset, size) of those
        self._dirty: set[int] = set()                  # direct blocks changed
        self._new: set[int] = set()                    # addresses allocated by this writer
        self._it: list[list] | None = None             # the "next block" iterator: [iblock, entry] per level
        self._free: tuple[dict[int, int], set[_Range]] | None = None   # singles, ranges
        self._row_cache: list[_Row] | None = None
        self._fsm_changed = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()

    # -- header fields ----------------------------------------------------------------------------

    def _set(self, **fields) -> None:
        self.h = replace(self.h, **fields)

    def _adjust(self, **deltas) -> None:
        self.h = replace(self.h, **{k: getattr(self.h, k) + v for k, v in deltas.items()})

    # -- objects ----------------------------------------------------------------------------------

    def insert(self, data: bytes) -> bytes:
        n = len(data)
        if n == 0:
            raise ValueError("fractal heap objects are not empty")
        if n > self.h.max_managed_size:
            return self._insert_huge(bytes(data))
        if n <= self.g.tiny_max:
            self._adjust(tiny_count=1, tiny_size=n)
            return encode_id(TinyId(bytes(data)), self.g)
        offset = self._allocate(n)
        self._write(offset, data)
        self._adjust(managed_count=1, free_space=-n)
        return encode_id(ManagedId(offset, n), self.g)

    def get(self, heap_id: bytes) -> bytes:
        kind = self.reader.kind(heap_id)
        if kind == ID_HUGE:
            rec = self._huge_location(heap_id)
            return self.txn.reader.read(rec.address, rec.length, f"{self.what} huge object")
        if kind != ID_MANAGED:
            return self.reader.get(heap_id)
        hid = self._managed(heap_id)
        addr, block_off, _ = self._dblock_at(hid.offset)
        rel = hid.offset - block_off - self.g.dblock_overhead
        return bytes(self._payload(addr, block_off)[rel:rel + hid.length])

    def remove(self, heap_id: bytes) -> None:
        kind = self.reader.kind(heap_id)
        if kind == ID_TINY:
            n = len(self.reader.get(heap_id))
            self._adjust(tiny_count=-1, tiny_size=-n)
        elif kind == ID_HUGE:
            self._remove_huge(heap_id)
        elif kind == ID_MANAGED:
            hid = self._managed(heap_id)
            self._dblock_at(hid.offset)          # the object's block exists
            self._adjust(managed_count=-1, free_space=hid.length)
            self._release(hid.offset, hid.length)
        else:
            raise FormatError(f"{self.what}: heap ID of unknown type {kind}")

    def replace(self, heap_id: bytes, data: bytes) -> bytes:
        kind = self.reader.kind(heap_id)
        if kind == ID_MANAGED:
            hid = self._managed(heap_id)
            if hid.length == len(data):
                self._write(hid.offset, data)
                return bytes(heap_id)
        elif kind == ID_HUGE:
            rec = self._huge_location(heap_id)
            if rec.length == len(data):
                self._put(rec.address, bytes(data))
                return bytes(heap_id)
        self.remove(heap_id)
        return self.insert(data)

    def _managed(self, heap_id: bytes) -> ManagedId:
        hid = decode_id(bytes(heap_id), self.g, self.what)
        assert isinstance(hid, ManagedId)
        if hid.offset == 0 or hid.length == 0 or hid.offset + hid.length > self.h.managed_size \
                or hid.length > self.h.max_managed_size:
            raise FormatError(f"{self.what}: managed object {hid.offset}+{hid.length} outside the heap")
        return hid

    # -- direct blocks --------------------------------------------------------------------------

    def _dblock_at(self, offset: int) -> tuple[int, int, int]:
        """(address, block offset, size) of the direct block holding heap offset `offset`."""
        h, g = self.h, self.g
        if h.root_address is None:
            raise FormatError(f"{self.what}: heap offset {offset} in a heap without blocks")
        if h.root_rows == 0:
            if offset >= h.start_block_size:
                raise FormatError(f"{self.what}: heap offset {offset} beyond the root direct block")
            return h.root_address, 0, h.start_block_size
        ib = self._root_iblock()
        while True:
            row, col = self._lookup(offset - ib.block_off)
            if row >= ib.nrows:
                raise FormatError(f"{self.what}: heap offset {offset} beyond indirect block at {ib.address}")
            entry = row * self.W + col
            if row < g.max_direct_rows:
                addr = ib.entries[entry]
                if addr is None:
                    raise FormatError(f"{self.what}: heap offset {offset} lies in an unallocated block")
                return addr, entry_offset(h, g, ib.block_off, entry), g.row_block_size[row]
            ib = self._child(ib, entry)

    def _lookup(self, rel: int) -> tuple[int, int]:
        """H5HF__dtable_lookup: row and column of an offset within an indirect block."""
        h, g = self.h, self.g
        if rel < h.start_block_size * self.W:
            return 0, rel // h.start_block_size
        high = _log2(rel)
        row = high - g.first_row_bits + 1
        return row, (rel - (1 << high)) // g.row_block_size[row]

    def _payload(self, address: int, block_off: int) -> bytearray:
        buf = self._payloads.get(address)
        if buf is None:
            size = self._block_size(block_off)
            buf = bytearray(self.reader.read_direct(address, size, block_off).payload)
            self._payloads[address] = buf
            self._dblocks[address] = (block_off, size)
        return buf

    def _block_size(self, block_off: int) -> int:
        if self.h.root_rows == 0:
            return self.h.start_block_size
        return self._dblock_at(block_off + self.g.dblock_overhead)[2]

    def _write(self, offset: int, data: bytes) -> None:
        addr, block_off, size = self._dblock_at(offset)
        rel = offset - block_off - self.g.dblock_overhead
        if rel < 0 or offset + len(data) > block_off + size:
            raise FormatError(f"{self.what}: object {offset}+{len(data)} does not fit its direct block")
        self._payload(addr, block_off)[rel:rel + len(data)] = data
        self._dirty.add(addr)

    def _new_dblock(self, parent: _IBlock | None, entry: int) -> int:
        """H5HF__man_dblock_create: a zeroed block at `entry` of `parent` (or the root); the
        offset of its free space (a whole-block single section the caller uses)."""
        if parent is None:
            block_off, size = 0, self.h.start_block_size
        else:
            block_off = entry_offset(self.h, self.g, parent.block_off, entry)
            size = self.g.row_block_size[entry // self.W]
        addr = self._alloc(size)
        if parent is not None:
            parent.entries[entry] = addr
            parent.dirty = True
        self._payloads[addr] = bytearray(size - self.g.dblock_overhead)
        self._dblocks[addr] = (block_off, size)
        self._dirty.add(addr)
        self._adjust(managed_alloc_size=size)
        return addr

    def _alloc(self, size: int, raw: bool = False) -> int:
        addr = self.txn.allocate(size, raw=raw)
        self._new.add(addr)
        return addr

    # -- indirect blocks ------------------------------------------------------------------------

    def _root_iblock(self) -> _IBlock:
        if self._root is None:
            h = self.h
            ib = self.reader.read_indirect(h.root_address, h.root_rows, 0)
            self._root = self._adopt(ib, None, 0, self.g.max_root_rows)
        return self._root

    def _adopt(self, ib: IndirectBlock, parent: _IBlock | None, par_entry: int, max_rows: int) -> _IBlock:
        entries = [e.address for e in ib.direct] + list(ib.indirect)
        out = _IBlock(ib.address, ib.nrows, ib.block_offset, entries, parent, par_entry, max_rows, False)
        self._iblocks[ib.block_offset] = out
        return out

    def _child(self, ib: _IBlock, entry: int) -> _IBlock:
        off = entry_offset(self.h, self.g, ib.block_off, entry)
        got = self._iblocks.get(off)
        if got is not None:
            return got
        addr = ib.entries[entry]
        if addr is None:
            raise FormatError(f"{self.what}: heap offset {off} lies in an unallocated indirect block")
        nrows = rows_for_block(self.g, self.g.row_block_size[entry // self.W])
        return self._adopt(self.reader.read_indirect(addr, nrows, off), ib, entry, nrows)

    def _new_iblock(self, parent: _IBlock | None, entry: int, nrows: int, max_rows: int) -> _IBlock:
        """H5HF__man_iblock_create."""
        addr = self._alloc(indirect_block_size(self.g, nrows))
        block_off = 0 if parent is None else entry_offset(self.h, self.g, parent.block_off, entry)
        ib = _IBlock(addr, nrows, block_off, [None] * (nrows * self.W), parent, entry, max_rows, True)
        if parent is not None:
            parent.entries[entry] = addr
            parent.dirty = True
        self._iblocks[block_off] = ib
        return ib

    def _iblock_for(self, block_off: int) -> _IBlock:
        """The indirect block at `block_off`, created with any missing ones above it
        (H5HF__man_dblock_locate)."""
        ib = self._root_iblock()
        while ib.block_off != block_off:
            row, col = self._lookup(block_off - ib.block_off)
            entry = row * self.W + col
            if row < self.g.max_direct_rows or row >= ib.nrows:
                raise FormatError(f"{self.what}: no indirect block at heap offset {block_off}")
            if ib.entries[entry] is None:
                nrows = rows_for_block(self.g, self.g.row_block_size[row])
                ib = self._new_iblock(ib, entry, nrows, nrows)
            else:
                ib = self._child(ib, entry)
        return ib

    # -- the allocation iterator (H5HFiter.c, H5HF__hdr_update_iter) -----------------------------

    def _iterator(self) -> list[list]:
        """H5HF__man_iter_start_offset: the iterator's levels from the root, rebuilt from the
        header's iterator offset."""
        if self._it is None:
            h, g = self.h, self.g
            ib, off, levels = self._root_iblock(), h.iterator_offset, []
            while True:
                row = 0
                while off >= row_offset(h, row + 1):
                    row += 1
                rel = off - row_offset(h, row)
                col = rel // g.row_block_size[row]
                levels.append([ib, row * self.W + col])
                if rel == col * g.row_block_size[row] or row < g.max_direct_rows:
                    break
                ib = self._child(ib, row * self.W + col)
                off = rel - col * g.row_block_size[row]
            self._it = levels
        return self._it

    def _skip(self, ib: _IBlock, start: int, count: int) -> None:
        """H5HF__hdr_skip_blocks: entries the iterator passes over become a free range."""
        self._iterator()[-1][1] += count
        self._adjust(iterator_offset=span_size(self.h, self.g, start, count))
        self._add_range(_Range(ib.block_off, start, count))

    def _update_iter(self, min_size: int) -> None:
        h, g, W = self.h, self.g, self.W
        if h.root_rows == 0:
            self._root_create(min_size)
            return
        min_row = size_to_row(h, min_size)
        it = self._iterator()
        ib, entry = it[-1]
        row = entry // W
        if min_row > row and row < ib.nrows:
            self._skip(ib, entry, (ib.nrows * W if min_row >= ib.nrows else min_row * W) - entry)
        while True:
            walked = False
            ib, entry = it[-1]
            while entry // W >= ib.nrows:
                if ib.parent is None:
                    self._root_double(min_size)
                else:
                    it.pop()
                    it[-1][1] += 1
                ib, entry = it[-1]
                walked = True
            row = entry // W
            if row >= g.max_direct_rows:
                child_rows = rows_for_block(g, g.row_block_size[row])
                if g.row_block_size[child_rows - 1] < min_size:
                    needed = _log2(min_size) - _log2(self.h.start_block_size) + 2
                    end = min((row + needed - child_rows) * W, ib.nrows * W)
                    self._skip(ib, entry, end - entry)
                else:
                    child = self._new_iblock(ib, entry, child_rows, child_rows)
                    it.append([child, 0])
                    if min_size > self.h.start_block_size:
                        self._skip(child, 0, W * min_row)
                walked = True
            if not walked:
                return

    def _root_create(self, min_size: int) -> None:
        """H5HF__man_iblock_root_create."""
        h, g, W = self.h, self.g, self.W
        if h.start_root_rows == 0:
            nrows = g.max_root_rows
        else:
            block_row_off = _log2(min_size) - _log2(h.start_block_size)
            nrows = max(h.start_root_rows, 1 + block_row_off + (1 if block_row_off > 0 else 0))
        ib = self._new_iblock(None, 0, nrows, g.max_root_rows)
        have = 1 if h.root_address is not None else 0
        if have:
            ib.entries[0] = h.root_address
        self._root = ib
        self._it = [[ib, have]]
        self._set(iterator_offset=h.start_block_size * have)
        if min_size > h.start_block_size:
            self._skip(ib, have, (nrows - 1) * W - have)
        acc = sum(self.rfree[u] * W for u in range(nrows)) - (self.rfree[0] if have else 0)
        self._set(root_rows=nrows, root_address=ib.address, managed_size=entry_offset(h, g, 0, nrows * W))
        self._adjust(free_space=acc)

    def _root_double(self, min_size: int) -> None:
        """H5HF__man_iblock_root_double: the root moves to a block of more rows."""
        h, g, W = self.h, self.g, self.W
        ib, next_entry = self._iterator()[0]
        old = ib.nrows
        min_rows, skip_to = 0, None
        if old < g.max_direct_rows and min_size > g.row_block_size[next_entry // W]:
            min_rows = 1 + size_to_row(h, min_size)
            skip_to = (min_rows - 1) * W
        new_rows = max(min_rows, min(2 * old, ib.max_rows))
        self._drop_iblock(ib)
        ib.address = self._alloc(indirect_block_size(g, new_rows))
        ib.nrows, ib.new, ib.dirty = new_rows, True, True
        ib.entries += [None] * ((new_rows - old) * W)
        if skip_to is not None:
            self._skip(ib, next_entry, skip_to - next_entry)
        acc = sum(self.rfree[u // W] for u in range(old * W, new_rows * W))
        self._set(root_rows=new_rows, root_address=ib.address,
                  managed_size=2 * entry_offset(h, g, 0, (new_rows - 1) * W))
        self._adjust(free_space=acc)

    def _drop_iblock(self, ib: _IBlock) -> None:
        if ib.address in self._new:
            self._new.discard(ib.address)
        self.txn.free(ib.address, indirect_block_size(self.g, ib.nrows))

    def _dblock_new(self, request: int) -> int:
        """H5HF__man_dblock_new: a block for `request` bytes at the iterator; its address."""
        h = self.h
        min_size = h.start_block_size if request < h.start_block_size else 1 << (1 + _log2(request))
        if min_size < self.g.dblock_overhead + request:
            min_size *= 2
        if h.root_address is None and min_size == h.start_block_size:
            addr = self._new_dblock(None, 0)
            self._set(root_rows=0, root_address=addr, managed_size=h.start_block_size)
            self._adjust(free_space=self.rfree[0])
            return addr
        self._update_iter(min_size)
        ib, entry = self._iterator()[-1]
        self._iterator()[-1][1] += 1
        self._adjust(iterator_offset=self.g.row_block_size[entry // self.W])
        return self._new_dblock(ib, entry)

    # -- free space -----------------------------------------------------------------------------

    def _free_state(self) -> tuple[dict[int, int], set[_Range]]:
        """Singles (offset -> size) and ranges, from the heap's free-space manager."""
        if self._free is None:
            singles: dict[int, int] = {}
            ranges: set[_Range] = set()
            sl = self._fsm()[1]
            if sl is not None:
                for st in sl.sets:
                    for sec in st.sections:
                        if sec.type == fsm.HEAP_SINGLE:
                            singles[sec.offset] = st.size
                        elif sec.type == fsm.HEAP_FIRST_ROW:
                            i = sec.indirect
                            ranges.add(_Range(i.block_offset, i.start_row * self.W + i.start_col, i.num_blocks))
                        else:
                            raise Unsupported(f"{self.what}: serialized free section of type {sec.type}")
            self._free = singles, ranges
        return self._free

    def _fsm_header(self) -> fsm.FreeSpaceHeader | None:
        addr = self.h.free_space_manager_address
        if addr is None:
            return None
        s, label = self.sizes, f"{self.what} free-space manager"
        fh = fsm.decode_header(self.txn.reader.read(addr, fsm.header_size(s), label), addr, s, label)
        if fh.client != fsm.CLIENT_HEAP:
            raise FormatError(f"{label}: client {fh.client}")
        return fh

    def _fsm(self) -> tuple[fsm.FreeSpaceHeader | None, fsm.SectionList | None]:
        fh = self._fsm_header()
        if fh is None or fh.sections_address is None or not fh.serial_sections:
            return fh, None
        label = f"{self.what} free-space manager"
        return fh, fsm.decode_sections(self.txn.reader.read(fh.sections_address, fh.sections_size, label), fh,
                                       self.sizes, label)

    def _rows(self) -> list[_Row]:
        if self._row_cache is None:
            self._row_cache = [r for rng in self._free_state()[1] for r in self._expand(rng, rng, ())]
        return self._row_cache

    def _expand(self, top: _Range, rng: _Range, path: tuple):
        """H5HF__sect_indirect_init_rows: the row sections of a range, in address order (the
        first is the range's "first row")."""
        h, g, W = self.h, self.g, self.W
        end = rng.start + rng.count - 1
        for u in range(rng.start // W, end // W + 1):
            c0 = rng.start % W if u == rng.start // W else 0
            c1 = end % W if u == end // W else W - 1
            if u < g.max_direct_rows:
                yield _Row(entry_offset(h, g, rng.block_off, u * W + c0), g.row_block_size[u] - g.dblock_overhead,
                           rng.block_off, u, c0, c1 - c0 + 1, top, rng, path)
                continue
            child_rows = rows_for_block(g, g.row_block_size[u])
            for c in range(c0, c1 + 1):
                child = _Range(entry_offset(h, g, rng.block_off, u * W + c), 0, child_rows * W)
                yield from self._expand(top, child, path + ((rng.block_off, u * W + c),))

    def _first_row(self, rng: _Range) -> _Row:
        return next(self._expand(rng, rng, ()))

    def _range_addr(self, rng: _Range) -> int:
        return entry_offset(self.h, self.g, rng.block_off, rng.start)

    def _find(self, request: int) -> tuple[int, int] | _Row | None:
        """H5FS__sect_find_node: the smallest section holding `request` bytes, lowest address first."""
        singles, _ = self._free_state()
        best, key = None, None
        for addr, size in singles.items():
            if size >= request and (key is None or (size, addr) < key):
                best, key = (addr, size), (size, addr)
        for row in self._rows():
            if row.size >= request and (key is None or (row.size, row.addr) < key):
                best, key = row, (row.size, row.addr)
        return best

    def _allocate(self, n: int) -> int:
        """H5HF__man_insert's space: the heap offset of `n` free bytes, taken out of the free space."""
        singles, _ = self._free_state()
        found = self._find(n)
        if isinstance(found, tuple):
            offset, size = found
            del singles[offset]
        else:
            addr = self._alloc_row(found) if found is not None else self._dblock_new(n)
            offset = self._dblocks[addr][0] + self.g.dblock_overhead
            size = self._dblocks[addr][1] - self.g.dblock_overhead
        if size > n:
            singles[offset + n] = size - n
        self._fsm_changed = True
        return offset

    def _alloc_row(self, row: _Row) -> int:
        """H5HF__man_iblock_alloc_row: a new direct block out of a row section; its address."""
        W = self.W
        owner = row.owner
        first, last = row.row * W + row.col, row.row * W + row.col + row.count - 1
        o_end = owner.start + owner.count - 1
        entry = last if last == o_end and owner.start // W != o_end // W else first
        # the entry leaves its range and every range above it (H5HF__sect_indirect_reduce[_row])
        _, ranges = self._free_state()
        ranges.discard(row.top)
        levels = [row.top] + [self._full_child(b, e) for b, e in row.path]
        taken = [e for _, e in row.path] + [entry]
        for rng, e in zip(levels, taken):
            if e > rng.start:
                ranges.add(_Range(rng.block_off, rng.start, e - rng.start))
            if e < rng.start + rng.count - 1:
                ranges.add(_Range(rng.block_off, e + 1, rng.start + rng.count - 1 - e))
        self._row_cache = None
        return self._new_dblock(self._iblock_for(owner.block_off), entry)

    def _full_child(self, block_off: int, entry: int) -> _Range:
        nrows = rows_for_block(self.g, self.g.row_block_size[entry // self.W])
        return _Range(entry_offset(self.h, self.g, block_off, entry), 0, nrows * self.W)

    def _under_block(self, rng: _Range) -> int:
        """The block holding a range's first row (what H5HF__sect_row_can_merge compares)."""
        return self._first_row(rng).block_off

    def _add_range(self, new: _Range) -> None:
        """H5HF__sect_indirect_add, then H5FS__sect_merge: a range joins an adjacent range of the
        same block (its first neighbours in address order among singles and first rows); ranges
        past the iterator vanish (H5HF__sect_row_can_shrink)."""
        singles, ranges = self._free_state()
        self._row_cache = None
        self._fsm_changed = True
        it_off = self.h.iterator_offset
        cur: _Range | None = new
        while cur is not None:
            addr = self._range_addr(cur)
            below = [(a, r) for r in ranges if (a := self._range_addr(r)) < addr]
            below += [(a, None) for a in singles if a < addr]
            less = max(below, key=lambda t: t[0], default=None)
            merged = False
            if less is not None and less[1] is not None and self._adjacent(less[1], cur):
                ranges.discard(less[1])
                cur = less[1] if addr >= it_off else self._join(less[1], cur)
                merged = True
            addr = self._range_addr(cur)
            above = [(a, r) for r in ranges if (a := self._range_addr(r)) > addr]
            above += [(a, None) for a in singles if a > addr]
            greater = min(above, key=lambda t: t[0], default=None)
            if greater is not None and greater[1] is not None and self._adjacent(cur, greater[1]):
                ranges.discard(greater[1])
                if greater[0] < it_off:
                    cur = self._join(cur, greater[1])
                merged = True
            if not merged:
                break
        if self._range_addr(cur) < it_off:
            ranges.add(cur)

    def _adjacent(self, a: _Range, b: _Range) -> bool:
        return a != b and self._under_block(a) == self._under_block(b) and \
            self._range_addr(a) + span_size(self.h, self.g, a.start, a.count) == self._range_addr(b)

    def _join(self, a: _Range, b: _Range) -> _Range:
        """H5HF__sect_indirect_merge_row (+ build_parent when the range fills its block)."""
        out = _Range(a.block_off, a.start, a.count + b.count)
        ib = self._iblocks.get(a.block_off)
        entries = self.W * (ib.max_rows if ib is not None else self._rows_at(a.block_off))
        if a.block_off and out.count == entries:
            parent_off, entry = self._parent_entry(a.block_off)
            out = _Range(parent_off, entry, 1)
        return out

    def _rows_at(self, block_off: int) -> int:
        if block_off == 0:
            return self.g.max_root_rows
        entry = self._parent_entry(block_off)[1]
        return rows_for_block(self.g, self.g.row_block_size[entry // self.W])

    def _parent_entry(self, block_off: int) -> tuple[int, int]:
        """H5HF__man_iblock_parent_info: the block offset and entry of the indirect block that
        holds the child indirect block at `block_off`."""
        par, prev = 0, (0, 0)
        row, col = self._lookup(block_off)
        while row >= self.g.max_direct_rows:
            prev = (par, row * self.W + col)
            par = entry_offset(self.h, self.g, par, row * self.W + col)
            row, col = self._lookup(block_off - par)
        return prev

    def _release(self, offset: int, length: int) -> None:
        """H5HF__man_remove's section: merged with the singles next to it in its block; an
        emptied root direct block empties the heap."""
        singles = self._free_state()[0]
        self._fsm_changed = True
        addrs = sorted(singles)
        i = bisect.bisect_left(addrs, offset)
        if i and addrs[i - 1] + singles[addrs[i - 1]] == offset:
            offset, length = addrs[i - 1], singles.pop(addrs[i - 1]) + length
        if offset + length in singles:
            length += singles.pop(offset + length)
        h = self.h
        if h.root_rows == 0 and length == h.start_block_size - self.g.dblock_overhead:
            self._empty()
            return
        singles[offset] = length

    def _empty(self) -> None:
        """H5HF__man_dblock_destroy of the root direct block, H5HF__hdr_empty."""
        addr = self.h.root_address
        self._payloads.pop(addr, None)
        self._dblocks.pop(addr, None)
        self._dirty.discard(addr)
        if addr in self._new:
            self._new.discard(addr)
        self.txn.free(addr, self.h.start_block_size)
        self._set(root_address=None, root_rows=0, managed_size=0, managed_alloc_size=0, iterator_offset=0,
                  free_space=0)
        self._free = ({}, set())
        self._row_cache, self._it = None, None

    # -- huge objects ---------------------------------------------------------------------------

    def _huge_type(self) -> int:
        return bt.HUGE_DIRECT if self.g.huge_direct else bt.HUGE_INDIRECT

    def _insert_huge(self, data: bytes) -> bytes:
        """H5HF__huge_insert: the object in its own space, recorded in the huge-object B-tree."""
        addr = self._alloc(len(data), raw=True)   # raw data in libhdf5's sec2 map
        self._put(addr, data)
        if self.g.huge_direct:
            rec, hid = bt.HugeObjectRecord(addr, len(data)), HugeId(address=addr, length=len(data))
        else:
            key = self.h.next_huge_id + 1
            if key >= 1 << (8 * self.g.huge_id_size):
                raise Unsupported(f"{self.what}: huge object IDs wrapped around")
            self._set(next_huge_id=key)
            rec, hid = bt.HugeObjectRecord(addr, len(data), id=key), HugeId(key=key)
        self._huge_tree_put(rec)
        self._adjust(huge_count=1, huge_size=len(data))
        return encode_id(hid, self.g)

    def _huge_location(self, heap_id: bytes) -> bt.HugeObjectRecord:
        hid = decode_id(bytes(heap_id), self.g, self.what)
        if hid.key is None:
            return bt.HugeObjectRecord(hid.address, hid.length)
        what, key = f"{self.what} huge-object B-tree", hid.key
        if self.h.huge_btree_address is None:
            raise FormatError(f"{self.what}: huge object {key} but no huge-object B-tree")
        hdr = bt_reader.read_header(self.txn.reader, self.h.huge_btree_address, what)
        rec = bt_reader.find(self.txn.reader, hdr.address, lambda r: (key > r.id) - (key < r.id),
                             bt.record_decoder(hdr.type), what, header=hdr)
        if rec is None:
            raise FormatError(f"{self.what}: huge object {key} not found")
        return rec

    def _remove_huge(self, heap_id: bytes) -> None:
        """H5HF__huge_remove (and H5HF__huge_term once the last one goes)."""
        rec = self._huge_location(heap_id)
        self._huge_tree_drop(rec)
        self.txn.free(rec.address, rec.length, raw=True)
        self._adjust(huge_count=-1, huge_size=-rec.length)

    def _huge_key(self, r: bt.HugeObjectRecord):
        return r.id if r.id is not None and not self.g.huge_direct else (r.address, r.length)

    def _huge_tree(self, todo: list) -> bt.BTreeV2Header:
        """Apply `todo` to the huge-object B-tree, made first when the heap has none."""
        what = f"{self.what} huge-object B-tree"
        if self.h.huge_btree_address is None:
            rsize = self.sizes.offset + self.sizes.length * (1 if self.g.huge_direct else 2)
            hdr, new = new_tree_header(self.sizes, self._huge_type(), HUGE_NODE_SIZE, rsize, HUGE_SPLIT,
                                       HUGE_MERGE), True
        else:
            hdr, new = bt_reader.read_header(self.txn.reader, self.h.huge_btree_address, what), False
        hdr = BTreeV2Edit(self.txn, hdr, self._huge_key, bt.record_decoder(hdr.type), bt.record_encoder(hdr.type),
                          what, new=new).apply(todo)
        self._set(huge_btree_address=hdr.address)
        return hdr

    def _huge_tree_put(self, rec: bt.HugeObjectRecord) -> None:
        self._huge_tree([(self._huge_key(rec), rec)])

    def _huge_tree_drop(self, rec: bt.HugeObjectRecord) -> None:
        hdr = self._huge_tree([(self._huge_key(rec), None)])
        if hdr.total_records == 0:     # H5HF__huge_term: the tree goes with the last huge object
            self.txn.free(hdr.address, bt.header_size(self.sizes))
            self._set(huge_btree_address=None, next_huge_id=0)

    # -- staging --------------------------------------------------------------------------------

    def close(self) -> None:
        """Stage every block this writer changed, the free-space manager and the header."""
        g = self.g
        for addr in self._dirty:
            block_off = self._dblocks[addr][0]
            self._put(addr, encode_direct(DirectBlock(block_off, bytes(self._payloads[addr])), g))
        for ib in self._iblocks.values():
            if ib.dirty:
                ndirect = min(ib.nrows, g.max_direct_rows) * self.W
                image = encode_indirect(IndirectBlock(ib.address, ib.block_off, ib.nrows,
                                                      tuple(DirectEntry(a) for a in ib.entries[:ndirect]),
                                                      tuple(ib.entries[ndirect:])), g)
                self._put(ib.address, image)
        if self._fsm_changed:
            self._store_fsm()
        self._put(self.h.address, encode_header(self.h, self.sizes))
        self._dirty.clear()
        for ib in self._iblocks.values():
            ib.new = ib.dirty = False

    def _put(self, addr: int, image: bytes) -> None:
        (self.txn.write_new if addr in self._new else self.txn.write_in_place)(addr, image)

    def _store_fsm(self) -> None:
        """The manager as libhdf5 leaves it at close: a new section list, the header rewritten in
        place (or created); no manager when no section is left (H5HF__space_close)."""
        singles, ranges = self._free_state()
        old = self._fsm_header()
        if old is not None and old.sections_address is not None:
            self.txn.free(old.sections_address, old.sections_alloc_size)
        if not singles and not ranges:
            if old is not None:
                self.txn.free(old.address, fsm.header_size(self.sizes))
                self._set(free_space_manager_address=None)
            return
        records = [(size, addr, fsm.Section(addr, fsm.HEAP_SINGLE)) for addr, size in singles.items()]
        ghosts, total = 0, sum(singles.values())
        for rng in ranges:
            rows = list(self._expand(rng, rng, ()))
            ghosts += len(rows) - 1
            total += sum(r.size for r in rows)
            info = fsm.HeapIndirect(rng.block_off, rng.start // self.W, rng.start % self.W, rng.count)
            records.append((rows[0].size, rows[0].addr, fsm.Section(rows[0].addr, fsm.HEAP_FIRST_ROW, info)))
        records.sort(key=lambda t: (t[0], t[1]))
        sets: list[fsm.SectionSet] = []
        for size, _, sec in records:
            if sets and sets[-1].size == size:
                sets[-1] = fsm.SectionSet(size, sets[-1].sections + (sec,))
            else:
                sets.append(fsm.SectionSet(size, (sec,)))
        address = old.address if old is not None else self._alloc(fsm.header_size(self.sizes))
        hdr = fsm.FreeSpaceHeader(address, fsm.CLIENT_HEAP, total, len(records) + ghosts, len(records), ghosts,
                                  4, FSM_SHRINK, FSM_EXPAND, self.h.max_heap_bits, self.h.max_direct_size, None,
                                  0, 0)
        image = fsm.encode_sections(fsm.SectionList(address, tuple(sets)), hdr, self.sizes)
        sect_addr = self._alloc(len(image))
        self.txn.write_new(sect_addr, image)
        hdr = replace(hdr, sections_address=sect_addr, sections_size=len(image), sections_alloc_size=len(image))
        self._put(address, fsm.encode_header(hdr, self.sizes))
        self._set(free_space_manager_address=address)
