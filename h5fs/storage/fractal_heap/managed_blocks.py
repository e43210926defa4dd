"""The direct and indirect blocks of a fractal heap's managed space being edited: found down the
doubling table, read once, changed in memory, created (any missing indirect blocks above a new
direct block with it, H5HF__man_dblock_locate) and staged whole at close."""

from __future__ import annotations

from ...errors import FormatError
from ...format.fractal_heap import (DirectBlock, DirectEntry, IndirectBlock, encode_direct, encode_indirect,
                                    entry_offset, indirect_block_size, rows_for_block)
from .heap_state import HeapPart, HeapState


class IBlock:
    """An indirect block being edited: entries hold child addresses (direct rows, then indirect)."""

    def __init__(self, address: int, nrows: int, block_off: int, entries: list[int | None],
                 parent: IBlock | None, dirty: bool):
        self.address, self.nrows, self.block_off, self.entries = address, nrows, block_off, entries
        self.parent, self.dirty = parent, dirty


class ManagedBlocks(HeapPart):
    """The blocks read or made so far: indirect blocks by block offset, direct blocks' payloads."""

    def __init__(self, state: HeapState):
        super().__init__(state)
        self.reader = state.reader
        self._root: IBlock | None = None
        self._iblocks: dict[int, IBlock] = {}          # by block offset
        self._payloads: dict[int, bytearray] = {}      # direct block address -> payload being edited
        self.dblocks: dict[int, tuple[int, int]] = {}  # address -> (block offset, size) of those
        self._dirty: set[int] = set()                  # direct blocks changed

    # -- direct blocks --------------------------------------------------------------------------

    def dblock_at(self, offset: int) -> tuple[int, int, int]:
        """(address, block offset, size) of the direct block holding heap offset `offset`."""
        h, g = self.h, self.g
        if h.root_address is None:
            raise FormatError(f"{self.what}: heap offset {offset} in a heap without blocks")
        if h.root_rows == 0:
            if offset >= h.start_block_size:
                raise FormatError(f"{self.what}: heap offset {offset} beyond the root direct block")
            return h.root_address, 0, h.start_block_size
        ib = self.root_iblock()
        while True:
            row, col = self.lookup(offset - ib.block_off)
            if row >= ib.nrows:
                raise FormatError(f"{self.what}: heap offset {offset} beyond indirect block at {ib.address}")
            entry = row * self.W + col
            if row < g.max_direct_rows:
                addr = ib.entries[entry]
                if addr is None:
                    raise FormatError(f"{self.what}: heap offset {offset} lies in an unallocated block")
                return addr, entry_offset(h, g, ib.block_off, entry), g.row_block_size[row]
            ib = self.child(ib, entry)

    def _payload(self, address: int, block_off: int) -> bytearray:
        buf = self._payloads.get(address)
        if buf is None:
            size = self._block_size(block_off)
            buf = bytearray(self.reader.read_direct(address, size, block_off).payload)
            self._payloads[address] = buf
            self.dblocks[address] = (block_off, size)
        return buf

    def _block_size(self, block_off: int) -> int:
        if self.h.root_rows == 0:
            return self.h.start_block_size
        return self.dblock_at(block_off + self.g.dblock_overhead)[2]

    def read(self, offset: int, length: int) -> bytes:
        addr, block_off, _ = self.dblock_at(offset)
        rel = offset - block_off - self.g.dblock_overhead
        return bytes(self._payload(addr, block_off)[rel:rel + length])

    def write(self, offset: int, data: bytes) -> None:
        addr, block_off, size = self.dblock_at(offset)
        rel = offset - block_off - self.g.dblock_overhead
        if rel < 0 or offset + len(data) > block_off + size:
            raise FormatError(f"{self.what}: object {offset}+{len(data)} does not fit its direct block")
        self._payload(addr, block_off)[rel:rel + len(data)] = data
        self._dirty.add(addr)

    def new_dblock(self, parent: IBlock | None, entry: int) -> int:
        """H5HF__man_dblock_create: a zeroed block at `entry` of `parent` (or the root); its
        address (its free space is a whole-block single section the caller uses)."""
        if parent is None:
            block_off, size = 0, self.h.start_block_size
        else:
            block_off = entry_offset(self.h, self.g, parent.block_off, entry)
            size = self.g.row_block_size[entry // self.W]
        addr = self.state.alloc(size)
        if parent is not None:
            parent.entries[entry] = addr
            parent.dirty = True
        self._payloads[addr] = bytearray(size - self.g.dblock_overhead)
        self.dblocks[addr] = (block_off, size)
        self._dirty.add(addr)
        self.state.adjust(managed_alloc_size=size)
        return addr

    def drop_dblock(self, addr: int, size: int) -> None:
        self._payloads.pop(addr, None)
        self.dblocks.pop(addr, None)
        self._dirty.discard(addr)
        self.state.free_block(addr, size)

    # -- indirect blocks ------------------------------------------------------------------------

    def root_iblock(self) -> IBlock:
        if self._root is None:
            h = self.h
            ib = self.reader.read_indirect(h.root_address, h.root_rows, 0)
            self._root = self._adopt(ib, None)
        return self._root

    def _adopt(self, ib: IndirectBlock, parent: IBlock | None) -> IBlock:
        entries = [e.address for e in ib.direct] + list(ib.indirect)
        out = IBlock(ib.address, ib.nrows, ib.block_offset, entries, parent, False)
        self._iblocks[ib.block_offset] = out
        return out

    def child(self, ib: IBlock, entry: int) -> IBlock:
        off = entry_offset(self.h, self.g, ib.block_off, entry)
        got = self._iblocks.get(off)
        if got is not None:
            return got
        addr = ib.entries[entry]
        if addr is None:
            raise FormatError(f"{self.what}: heap offset {off} lies in an unallocated indirect block")
        nrows = rows_for_block(self.g, self.g.row_block_size[entry // self.W])
        return self._adopt(self.reader.read_indirect(addr, nrows, off), ib)

    def new_iblock(self, parent: IBlock | None, entry: int, nrows: int) -> IBlock:
        """H5HF__man_iblock_create; without a parent, the new root."""
        addr = self.state.alloc(indirect_block_size(self.g, nrows))
        block_off = 0 if parent is None else entry_offset(self.h, self.g, parent.block_off, entry)
        ib = IBlock(addr, nrows, block_off, [None] * (nrows * self.W), parent, True)
        if parent is not None:
            parent.entries[entry] = addr
            parent.dirty = True
        else:
            self._root = ib
        self._iblocks[block_off] = ib
        return ib

    def iblock_for(self, block_off: int) -> IBlock:
        """The indirect block at `block_off`, created with any missing ones above it
        (H5HF__man_dblock_locate)."""
        ib = self.root_iblock()
        while ib.block_off != block_off:
            row, col = self.lookup(block_off - ib.block_off)
            entry = row * self.W + col
            if row < self.g.max_direct_rows or row >= ib.nrows:
                raise FormatError(f"{self.what}: no indirect block at heap offset {block_off}")
            if ib.entries[entry] is None:
                nrows = rows_for_block(self.g, self.g.row_block_size[row])
                ib = self.new_iblock(ib, entry, nrows)
            else:
                ib = self.child(ib, entry)
        return ib

    def drop_iblock(self, ib: IBlock) -> None:
        self.state.free_block(ib.address, indirect_block_size(self.g, ib.nrows))

    # -- staging --------------------------------------------------------------------------------

    def stage(self) -> None:
        """Every block changed, written whole."""
        g = self.g
        for addr in self._dirty:
            block_off = self.dblocks[addr][0]
            self.state.put(addr, encode_direct(DirectBlock(block_off, bytes(self._payloads[addr])), g))
        for ib in self._iblocks.values():
            if ib.dirty:
                ndirect = min(ib.nrows, g.max_direct_rows) * self.W
                image = encode_indirect(IndirectBlock(ib.address, ib.block_off, ib.nrows,
                                                      tuple(DirectEntry(a) for a in ib.entries[:ndirect]),
                                                      tuple(ib.entries[ndirect:])), g)
                self.state.put(ib.address, image)
        self._dirty.clear()
        for ib in self._iblocks.values():
            ib.dirty = False
