"""Where a fractal heap's managed objects go (H5HF__man_insert, H5HF__man_remove): into the
best-fitting free section, else into a new direct block at the allocation iterator, the doubling
table growing as libhdf5 grows it (H5HFiter.c, H5HF__hdr_update_iter).

A row section taken creates its direct block (and any missing indirect blocks above it), at the end
of the section when the row is its last of several rows, else at the row's start
(H5HF__sect_indirect_reduce_row). Without a fitting section, a new direct block goes at the
iterator (H5HF__man_dblock_new): the root direct block first, then a root indirect block whose
entry 0 takes the old root (H5HF__man_iblock_root_create), doubled in rows as it fills
(H5HF__man_iblock_root_double), child indirect blocks for deeper rows; blocks too small for the
object are skipped (H5HF__hdr_skip_blocks) and become free ranges.

Removal frees the object's bytes as a single section merged with its neighbours in the block; a
root direct block left empty empties the heap (H5HF__sect_single_shrink, H5HF__hdr_empty). Where
libhdf5 would also destroy an emptied direct block inside an indirect block and shrink the
doubling table (H5HF__sect_single_full_dblock, H5HF__hdr_reverse_iter, root halving), this module
keeps the block with a single section covering it: a state libhdf5 reads and later converts itself
the first time it touches that section.
"""

from __future__ import annotations

from ...format.fractal_heap import (entry_offset, indirect_block_size, row_free_space, row_offset,
                                    rows_for_block, size_to_row, span_size)
from .free_sections import FreeSections, Range, Row
from .heap_state import HeapPart, HeapState, log2
from .managed_blocks import IBlock, ManagedBlocks


class ManagedSpace(HeapPart):
    """Space for managed objects taken and given back; the allocation iterator."""

    def __init__(self, state: HeapState, blocks: ManagedBlocks, free: FreeSections):
        super().__init__(state)
        self.blocks, self.free = blocks, free
        self.rfree = row_free_space(self.g)
        self._it: list[list] | None = None             # the "next block" iterator: [iblock, entry] per level

    def allocate(self, n: int) -> int:
        """H5HF__man_insert's space: the heap offset of `n` free bytes, taken out of the free space."""
        found = self.free.find(n)
        if isinstance(found, tuple):
            offset, size = found
            self.free.remove_single(offset)
        else:
            addr = self._alloc_row(found) if found is not None else self._dblock_new(n)
            block_off, block_size = self.blocks.dblocks[addr]
            offset, size = block_off + self.g.dblock_overhead, block_size - self.g.dblock_overhead
        self.free.add_single(offset + n, size - n)
        return offset

    def release(self, offset: int, length: int) -> None:
        if self.free.release(offset, length):
            self._empty()

    def _alloc_row(self, row: Row) -> int:
        """H5HF__man_iblock_alloc_row: a new direct block out of a row section; its address."""
        entry = self.free.take_row(row)
        return self.blocks.new_dblock(self.blocks.iblock_for(row.owner.block_off), entry)

    def _empty(self) -> None:
        """H5HF__man_dblock_destroy of the root direct block, H5HF__hdr_empty."""
        self.blocks.drop_dblock(self.h.root_address, self.h.start_block_size)
        self.state.set(root_address=None, root_rows=0, managed_size=0, managed_alloc_size=0, iterator_offset=0,
                       free_space=0)
        self.free.clear()
        self._it = None

    # -- the allocation iterator ------------------------------------------------------------------

    def _iterator(self) -> list[list]:
        """H5HF__man_iter_start_offset: the iterator's levels from the root, rebuilt from the
        header's iterator offset."""
        if self._it is None:
            h, g = self.h, self.g
            ib, off, levels = self.blocks.root_iblock(), h.iterator_offset, []
            while True:
                row = 0
                while off >= row_offset(h, row + 1):
                    row += 1
                rel = off - row_offset(h, row)
                col = rel // g.row_block_size[row]
                levels.append([ib, row * self.W + col])
                if rel == col * g.row_block_size[row] or row < g.max_direct_rows:
                    break
                ib = self.blocks.child(ib, row * self.W + col)
                off = rel - col * g.row_block_size[row]
            self._it = levels
        return self._it

    def _skip(self, ib: IBlock, start: int, count: int) -> None:
        """H5HF__hdr_skip_blocks: entries the iterator passes over become a free range."""
        self._iterator()[-1][1] += count
        self.state.adjust(iterator_offset=span_size(self.h, self.g, start, count))
        self.free.add_range(Range(ib.block_off, start, count))

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
                    needed = log2(min_size) - log2(self.h.start_block_size) + 2
                    end = min((row + needed - child_rows) * W, ib.nrows * W)
                    self._skip(ib, entry, end - entry)
                else:
                    child = self.blocks.new_iblock(ib, entry, child_rows)
                    it.append([child, 0])
                    if min_size > self.h.start_block_size:
                        self._skip(child, 0, W * min_row)
                walked = True
            if not walked:
                return

    # -- growth of the doubling table -------------------------------------------------------------

    def _root_create(self, min_size: int) -> None:
        """H5HF__man_iblock_root_create."""
        h, g, W = self.h, self.g, self.W
        if h.start_root_rows == 0:
            nrows = g.max_root_rows
        else:
            block_row_off = log2(min_size) - log2(h.start_block_size)
            nrows = max(h.start_root_rows, 1 + block_row_off + (1 if block_row_off > 0 else 0))
        ib = self.blocks.new_iblock(None, 0, nrows)
        have = 1 if h.root_address is not None else 0
        if have:
            ib.entries[0] = h.root_address
        self._it = [[ib, have]]
        self.state.set(iterator_offset=h.start_block_size * have)
        if min_size > h.start_block_size:
            self._skip(ib, have, (nrows - 1) * W - have)
        acc = sum(self.rfree[u] * W for u in range(nrows)) - (self.rfree[0] if have else 0)
        self.state.set(root_rows=nrows, root_address=ib.address, managed_size=entry_offset(h, g, 0, nrows * W))
        self.state.adjust(free_space=acc)

    def _root_double(self, min_size: int) -> None:
        """H5HF__man_iblock_root_double: the root moves to a block of more rows."""
        h, g, W = self.h, self.g, self.W
        ib, next_entry = self._iterator()[0]
        old = ib.nrows
        min_rows, skip_to = 0, None
        if old < g.max_direct_rows and min_size > g.row_block_size[next_entry // W]:
            min_rows = 1 + size_to_row(h, min_size)
            skip_to = (min_rows - 1) * W
        new_rows = max(min_rows, min(2 * old, g.max_root_rows))
        self.blocks.drop_iblock(ib)
        ib.address = self.state.alloc(indirect_block_size(g, new_rows))
        ib.nrows, ib.dirty = new_rows, True
        ib.entries += [None] * ((new_rows - old) * W)
        if skip_to is not None:
            self._skip(ib, next_entry, skip_to - next_entry)
        acc = sum(self.rfree[u // W] for u in range(old * W, new_rows * W))
        self.state.set(root_rows=new_rows, root_address=ib.address,
                       managed_size=2 * entry_offset(h, g, 0, (new_rows - 1) * W))
        self.state.adjust(free_space=acc)

    def _dblock_new(self, request: int) -> int:
        """H5HF__man_dblock_new: a block for `request` bytes at the iterator; its address."""
        h = self.h
        min_size = h.start_block_size if request < h.start_block_size else 1 << (1 + log2(request))
        if min_size < self.g.dblock_overhead + request:
            min_size *= 2
        if h.root_address is None and min_size == h.start_block_size:
            addr = self.blocks.new_dblock(None, 0)
            self.state.set(root_rows=0, root_address=addr, managed_size=h.start_block_size)
            self.state.adjust(free_space=self.rfree[0])
            return addr
        self._update_iter(min_size)
        ib, entry = self._iterator()[-1]
        self._iterator()[-1][1] += 1
        self.state.adjust(iterator_offset=self.g.row_block_size[entry // self.W])
        return self.blocks.new_dblock(ib, entry)
