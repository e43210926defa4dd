"""The free space of a fractal heap being edited, kept exact as libhdf5 keeps it (H5HFsection.c),
and its free-space manager (FSHD/FSSE, client 0) written back.

A "single" section is free space in a direct block; a "row" section stands for the unallocated
direct blocks of one row of an indirect block. Unallocated entries the allocation iterator skipped
are "indirect" ranges, merged with an adjacent range of the same indirect block
(H5HF__sect_indirect_merge_row). A managed object goes into the best-fitting section
(H5FS__sect_find_node: the smallest section that holds it, the lowest address among equal sizes).

The manager lists the single sections and, for each range, its first row section carrying the
range (block offset, row, column, entries: H5HF__sect_indirect_serialize); the other row sections
are "ghosts" libhdf5 rebuilds from the range, counted in the header. A heap without free sections
has no manager (H5HF__space_close deletes it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...errors import FormatError, Unsupported
from ...format import free_space_manager as fsm
from ...format.fractal_heap import entry_offset, rows_for_block, span_size
from .heap_state import HeapPart, HeapState

FSM_SHRINK, FSM_EXPAND = 80, 120          # H5HF_FSPACE_SHRINK / _EXPAND


@dataclass(frozen=True, slots=True)
class Range:
    """An "indirect" free section at the top of its hierarchy: `count` unallocated entries of the
    indirect block at `block_off` from entry `start` (child entries stand for whole subtrees)."""

    block_off: int
    start: int
    count: int


@dataclass(frozen=True, slots=True)
class Row:
    """A row section: `count` unallocated direct blocks of row `row` from column `col` in the
    block at `block_off`, derived from `top`; `path` = the (block offset, entry) steps from the
    top's block down to this row's block, `owner` = the range of that block the row belongs to."""

    addr: int
    size: int
    block_off: int
    row: int
    col: int
    count: int
    top: Range
    owner: Range
    path: tuple[tuple[int, int], ...]


class FreeSections(HeapPart):
    """Single sections (heap offset -> size) and ranges, read from the heap's manager on first use;
    `changed` once they differ from what the manager holds."""

    def __init__(self, state: HeapState):
        super().__init__(state)
        self._free: tuple[dict[int, int], set[Range]] | None = None   # singles, ranges
        self._ends: dict[int, int] | None = None   # a single's end -> its offset (`release`'s merges)
        self._row_cache: list[Row] | None = None
        self.changed = False

    # -- reading the manager ----------------------------------------------------------------------

    def sections(self) -> tuple[dict[int, int], set[Range]]:
        """Singles (offset -> size) and ranges, from the heap's free-space manager."""
        if self._free is None:
            singles: dict[int, int] = {}
            ranges: set[Range] = set()
            sl = self._fsm()[1]
            if sl is not None:
                for st in sl.sets:
                    for sec in st.sections:
                        if sec.type == fsm.HEAP_SINGLE:
                            singles[sec.offset] = st.size
                        elif sec.type == fsm.HEAP_FIRST_ROW:
                            i = sec.indirect
                            ranges.add(Range(i.block_offset, i.start_row * self.W + i.start_col, i.num_blocks))
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

    # -- row sections -----------------------------------------------------------------------------

    def _rows(self) -> list[Row]:
        if self._row_cache is None:
            self._row_cache = [r for rng in self.sections()[1] for r in self._expand(rng, rng, ())]
        return self._row_cache

    def _expand(self, top: Range, rng: Range, path: tuple):
        """H5HF__sect_indirect_init_rows: the row sections of a range, in address order (the
        first is the range's "first row")."""
        h, g, W = self.h, self.g, self.W
        end = rng.start + rng.count - 1
        for u in range(rng.start // W, end // W + 1):
            c0 = rng.start % W if u == rng.start // W else 0
            c1 = end % W if u == end // W else W - 1
            if u < g.max_direct_rows:
                yield Row(entry_offset(h, g, rng.block_off, u * W + c0), g.row_block_size[u] - g.dblock_overhead,
                          rng.block_off, u, c0, c1 - c0 + 1, top, rng, path)
                continue
            child_rows = rows_for_block(g, g.row_block_size[u])
            for c in range(c0, c1 + 1):
                child = Range(entry_offset(h, g, rng.block_off, u * W + c), 0, child_rows * W)
                yield from self._expand(top, child, path + ((rng.block_off, u * W + c),))

    def _first_row(self, rng: Range) -> Row:
        return next(self._expand(rng, rng, ()))

    def _range_addr(self, rng: Range) -> int:
        return entry_offset(self.h, self.g, rng.block_off, rng.start)

    # -- taking space -----------------------------------------------------------------------------

    def find(self, request: int) -> tuple[int, int] | Row | None:
        """H5FS__sect_find_node: the smallest section holding `request` bytes, lowest address first."""
        singles, _ = self.sections()
        best, key = None, None
        for addr, size in singles.items():
            if size >= request and (key is None or (size, addr) < key):
                best, key = (addr, size), (size, addr)
        for row in self._rows():
            if row.size >= request and (key is None or (row.size, row.addr) < key):
                best, key = row, (row.size, row.addr)
        return best

    def remove_single(self, offset: int) -> None:
        size = self.sections()[0].pop(offset)
        if self._ends is not None:
            del self._ends[offset + size]
        self.changed = True

    def add_single(self, offset: int, size: int) -> None:
        """The rest of a section an object took (nothing when it took it all)."""
        if size:
            self.sections()[0][offset] = size
            if self._ends is not None:
                self._ends[offset + size] = offset
        self.changed = True

    def take_row(self, row: Row) -> int:
        """H5HF__man_iblock_alloc_row's section: the entry of its block a new direct block takes
        out of `row` (the section's end when the row is the last of several rows of its range,
        else its start)."""
        W = self.W
        owner = row.owner
        first, last = row.row * W + row.col, row.row * W + row.col + row.count - 1
        o_end = owner.start + owner.count - 1
        entry = last if last == o_end and owner.start // W != o_end // W else first
        # the entry leaves its range and every range above it (H5HF__sect_indirect_reduce[_row])
        _, ranges = self.sections()
        ranges.discard(row.top)
        levels = [row.top] + [self._full_child(b, e) for b, e in row.path]
        taken = [e for _, e in row.path] + [entry]
        for rng, e in zip(levels, taken):
            if e > rng.start:
                ranges.add(Range(rng.block_off, rng.start, e - rng.start))
            if e < rng.start + rng.count - 1:
                ranges.add(Range(rng.block_off, e + 1, rng.start + rng.count - 1 - e))
        self._row_cache = None
        return entry

    def _full_child(self, block_off: int, entry: int) -> Range:
        nrows = rows_for_block(self.g, self.g.row_block_size[entry // self.W])
        return Range(entry_offset(self.h, self.g, block_off, entry), 0, nrows * self.W)

    # -- giving space back ------------------------------------------------------------------------

    def _under_block(self, rng: Range) -> int:
        """The block holding a range's first row (what H5HF__sect_row_can_merge compares)."""
        return self._first_row(rng).block_off

    def add_range(self, new: Range) -> None:
        """H5HF__sect_indirect_add, then H5FS__sect_merge: a range joins an adjacent range of the
        same block (its first neighbours in address order among singles and first rows); ranges
        past the iterator vanish (H5HF__sect_row_can_shrink)."""
        singles, ranges = self.sections()
        self._row_cache = None
        self.changed = True
        it_off = self.h.iterator_offset
        cur: Range | None = new
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

    def _adjacent(self, a: Range, b: Range) -> bool:
        return a != b and self._under_block(a) == self._under_block(b) and \
            self._range_addr(a) + span_size(self.h, self.g, a.start, a.count) == self._range_addr(b)

    def _join(self, a: Range, b: Range) -> Range:
        """H5HF__sect_indirect_merge_row (+ build_parent when the range fills its block)."""
        out = Range(a.block_off, a.start, a.count + b.count)
        if a.block_off and out.count == self.W * self._rows_at(a.block_off):
            parent_off, entry = self._parent_entry(a.block_off)
            out = Range(parent_off, entry, 1)
        return out

    def _rows_at(self, block_off: int) -> int:
        """The rows of the (whole) indirect block at `block_off`."""
        if block_off == 0:
            return self.g.max_root_rows
        entry = self._parent_entry(block_off)[1]
        return rows_for_block(self.g, self.g.row_block_size[entry // self.W])

    def _parent_entry(self, block_off: int) -> tuple[int, int]:
        """H5HF__man_iblock_parent_info: the block offset and entry of the indirect block that
        holds the child indirect block at `block_off`."""
        par, prev = 0, (0, 0)
        row, col = self.lookup(block_off)
        while row >= self.g.max_direct_rows:
            prev = (par, row * self.W + col)
            par = entry_offset(self.h, self.g, par, row * self.W + col)
            row, col = self.lookup(block_off - par)
        return prev

    def release(self, offset: int, length: int) -> bool:
        """H5HF__man_remove's section: merged with the singles next to it in its block. True when
        it empties the root direct block (the heap then empties: not recorded)."""
        singles = self.sections()[0]
        if self._ends is None:   # kept from here on: a burst of removals merges without a sort each
            self._ends = {start + size: start for start, size in singles.items()}
        ends = self._ends
        self.changed = True
        before = ends.pop(offset, None)
        if before is not None:
            offset, length = before, singles.pop(before) + length
        after = singles.pop(offset + length, None)
        if after is not None:
            del ends[offset + length + after]
            length += after
        h = self.h
        if h.root_rows == 0 and length == h.start_block_size - self.g.dblock_overhead:
            return True
        singles[offset] = length
        ends[offset + length] = offset
        return False

    def clear(self) -> None:
        """No free space left: the heap was emptied."""
        self._free = ({}, set())
        self._ends = None
        self._row_cache = None

    # -- writing the manager ----------------------------------------------------------------------

    def store(self) -> None:
        """The manager as libhdf5 leaves it at close: a new section list, the header rewritten in
        place (or created); no manager when no section is left (H5HF__space_close)."""
        singles, ranges = self.sections()
        old = self._fsm_header()
        if old is not None and old.sections_address is not None:
            self.txn.free(old.sections_address, old.sections_alloc_size)
        if not singles and not ranges:
            if old is not None:
                self.txn.free(old.address, fsm.header_size(self.sizes))
                self.state.set(free_space_manager_address=None)
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
        address = old.address if old is not None else self.state.alloc(fsm.header_size(self.sizes))
        hdr = fsm.FreeSpaceHeader(address, fsm.CLIENT_HEAP, total, len(records) + ghosts, len(records), ghosts,
                                  4, FSM_SHRINK, FSM_EXPAND, self.h.max_heap_bits, self.h.max_direct_size, None,
                                  0, 0)
        image = fsm.encode_sections(fsm.SectionList(address, tuple(sets)), hdr, self.sizes)
        sect_addr = self.state.alloc(len(image))
        self.txn.write_new(sect_addr, image)
        hdr = replace(hdr, sections_address=sect_addr, sections_size=len(image), sections_alloc_size=len(image))
        self.state.put(address, fsm.encode_header(hdr, self.sizes))
        self.state.set(free_space_manager_address=address)
