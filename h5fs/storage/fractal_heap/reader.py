"""Reads fractal heap objects: the header, then down the doubling table's indirect blocks to the
direct block holding a managed object (blocks through the file's metadata cache), a huge object
through its B-tree or its ID; tiny objects are in their IDs. `block_extents` lists the blocks the
heap occupies; `extents` reports them, its huge objects' and its free-space manager's to a walk."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import FormatError
from ...format import btree_v2
from ...format.codec import Reader, Sizes
from ...format.fractal_heap import (HEADER_PREFIX, MAX_BLOCK, DirectBlock, DirectEntry, HeapGeometry, HugeId,
                                    IndirectBlock, ManagedId, TinyId, check_direct_block_size, decode_direct,
                                    decode_header, decode_id, decode_indirect, derive, entry_offset, filter_length,
                                    header_size, indirect_block_size, row_col, row_offset, rows_for_block)
from ...format.free_space_manager import CLIENT_HEAP
from ...format.messages import filter_pipeline
from ..btree_v2 import reader as bt
from .. import free_space_manager

if TYPE_CHECKING:
    from ..extent_sink import ExtentSink


class FractalHeap:
    """A fractal heap: `get(heap_id)` returns an object's bytes. The geometry's sizes read as
    the heap's attributes (`heap.max_direct_rows`, `heap.heap_off_size`, ...)."""

    def __init__(self, reader, address: int | None, what: str = "fractal heap"):
        self.reader = reader
        self.sizes: Sizes = reader.sizes
        self.what = f"{what} at {address}"
        if address is None:
            raise FormatError(f"{what}: undefined address")
        self.header_address = address
        # a heap is opened for every lookup and edit of the links or attributes it holds
        self.header, self.geometry, self.filters = reader.meta.get(address, "fheap header", self._load_header, 1000)

    def _load_header(self):
        address = self.header_address
        # the header's length depends on the filter length, which sits at a fixed position
        filter_len = filter_length(self.reader.read(address, HEADER_PREFIX, f"{self.what} header"), self.what)
        buf = self.reader.read(address, header_size(self.sizes, filter_len), f"{self.what} header")
        h = decode_header(buf, address, self.sizes, f"{self.what} header")
        filters = None
        if h.filter_len:
            filters = filter_pipeline.decode(Reader(h.filter_info, 0, self.sizes, f"{self.what} I/O filters"))
        return h, derive(h, self.sizes, self.what), filters

    def __getattr__(self, name: str):
        geometry = self.__dict__.get("geometry")
        if geometry is None or name not in HeapGeometry.__dataclass_fields__:
            raise AttributeError(name)
        return getattr(geometry, name)

    # -- doubling table -----------------------------------------------------------------------

    def row_col(self, offset: int) -> tuple[int, int]:
        """H5HF__dtable_lookup: doubling-table row and column of a heap offset."""
        return row_col(self.header, self.geometry, offset, self.what)

    def rows_for_block(self, block_size: int) -> int:
        """Rows of a child indirect block that stands for a block of `block_size` bytes."""
        return rows_for_block(self.geometry, block_size)

    def indirect_block_size(self, nrows: int) -> int:
        return indirect_block_size(self.geometry, nrows)

    # -- blocks ---------------------------------------------------------------------------------

    def read_indirect(self, address: int | None, nrows: int, block_offset: int) -> IndirectBlock:
        if address is None:
            raise FormatError(f"{self.what}: undefined indirect block address")
        g = self.geometry
        label = f"{self.what} indirect block at {address}"

        def load() -> IndirectBlock:
            if not 1 <= nrows <= g.max_root_rows:
                raise FormatError(f"{self.what}: indirect block with {nrows} rows")
            buf = self.reader.read(address, indirect_block_size(g, nrows), label)
            return decode_indirect(buf, g, address, nrows, label)

        ib = self.reader.meta.get(address, ("fheap iblock", g.heap_address), load,
                                  lambda b: 200 + 100 * (len(b.direct) + len(b.indirect)))
        if ib.nrows != nrows:
            raise FormatError(f"{self.what}: indirect block at {address} reached from two places")
        if ib.block_offset != block_offset:
            raise FormatError(f"{label}: block offset {ib.block_offset}, expected {block_offset}")
        return ib

    def read_direct(self, address: int | None, block_size: int, block_offset: int,
                    filtered_size: int = 0, filter_mask: int = 0) -> DirectBlock:
        """The whole direct block (de-filtered), checked."""
        if address is None:
            raise FormatError(f"{self.what}: undefined direct block address")
        g = self.geometry
        label = f"{self.what} direct block at {address}"

        def load() -> DirectBlock:
            check_direct_block_size(self.header, g, block_size, label)
            if self.filters is not None:
                if not 0 < filtered_size <= MAX_BLOCK:
                    raise FormatError(f"{label}: implausible filtered size {filtered_size}")
                raw = self.reader.read(address, filtered_size, label)
                buf = self._defilter(raw, filter_mask, block_size, label)
            else:
                buf = self.reader.read(address, block_size, label)
            return decode_direct(buf, g, label)

        kind = ("fheap dblock", g.heap_address, block_size, filtered_size, filter_mask)
        db = self.reader.meta.get(address, kind, load, 100 + block_size)
        if db.block_offset != block_offset:
            raise FormatError(f"{label}: block offset {db.block_offset}, expected {block_offset}")
        return db

    def _defilter(self, raw: bytes, mask: int, size: int, label: str) -> bytes:
        # at the first filtered block: the codecs take 0.1 s to import
        from ..filters import ChunkInfo
        from ..filters.pipeline import decode_chunk
        filters = getattr(self.filters, "filters", self.filters)
        data = bytes(decode_chunk(filters, raw, mask, ChunkInfo(size, 1, label)))
        if len(data) != size:
            raise FormatError(f"{label}: de-filtered to {len(data)} bytes, expected {size}")
        return data

    def _locate_direct(self, offset: int) -> tuple[DirectEntry, int, int]:
        """The direct block holding heap offset `offset`: (entry, block size, block offset)."""
        h, g = self.header, self.geometry
        if h.root_address is None:
            raise FormatError(f"{self.what}: heap has no blocks")
        if h.root_rows == 0:
            return DirectEntry(h.root_address, h.root_filtered_size, h.root_filter_mask), h.start_block_size, 0
        ib = self.read_indirect(h.root_address, h.root_rows, 0)
        row, col = self.row_col(offset)
        for _ in range(g.max_root_rows + 1):
            if row >= ib.nrows:
                raise FormatError(f"{self.what}: heap offset {offset} beyond indirect block at {ib.address}")
            if row < g.max_direct_rows:
                entry = ib.direct[row * h.width + col]
                bsize = g.row_block_size[row]
                boff = ib.block_offset + self._row_offset(row) + col * bsize
                return entry, bsize, boff
            child_size = g.row_block_size[row]
            nrows = self.rows_for_block(child_size)
            if not nrows < ib.nrows:
                raise FormatError(f"{self.what}: indirect block at {ib.address} does not shrink")
            child_off = ib.block_offset + self._row_offset(row) + col * child_size
            addr = ib.indirect[(row - g.max_direct_rows) * h.width + col]
            if addr is None:
                raise FormatError(f"{self.what}: heap offset {offset} lies in an unallocated indirect block")
            ib = self.read_indirect(addr, nrows, child_off)
            row, col = self.row_col(offset - child_off)
        raise FormatError(f"{self.what}: indirect blocks nested too deep")

    def _row_offset(self, row: int) -> int:
        """Offset of a row's first block from the start of its indirect block."""
        return row_offset(self.header, row)

    def block_extents(self):
        """(address, size) of the heap's direct and indirect blocks."""
        h, g = self.header, self.geometry
        if h.root_address is None:
            return
        if h.root_rows == 0:
            yield h.root_address, h.root_filtered_size if h.filter_len else h.start_block_size
            return
        stack = [(h.root_address, h.root_rows, 0)]
        while stack:
            addr, nrows, off = stack.pop()
            ib = self.read_indirect(addr, nrows, off)
            yield addr, indirect_block_size(g, nrows)
            for entry, e in enumerate(ib.direct):
                if e.address is not None:
                    yield e.address, e.filtered_size if h.filter_len else g.row_block_size[entry // h.width]
            for j, child in enumerate(ib.indirect):
                if child is not None:
                    entry = j + g.max_direct_rows * h.width
                    size = g.row_block_size[entry // h.width]
                    stack.append((child, rows_for_block(g, size), entry_offset(h, g, off, entry)))

    # -- objects --------------------------------------------------------------------------------

    def get(self, heap_id: bytes) -> bytes:
        """The object named by `heap_id` (managed, tiny or huge)."""
        hid = decode_id(bytes(heap_id), self.geometry, self.what)
        if isinstance(hid, ManagedId):
            return self._get_managed(hid)
        if isinstance(hid, TinyId):
            return hid.data
        return self._get_huge(hid)

    def _get_managed(self, hid: ManagedId) -> bytes:
        h, g = self.header, self.geometry
        off, length = hid.offset, hid.length
        if off == 0 or off >= max(h.managed_size, 1) or off >= 1 << h.max_heap_bits:
            raise FormatError(f"{self.what}: managed object offset {off} outside the heap ({h.managed_size} bytes)")
        if length > h.max_direct_size or length > h.max_managed_size:
            raise FormatError(f"{self.what}: managed object length {length} is too large")
        entry, bsize, boff = self._locate_direct(off)
        if entry.address is None:
            raise FormatError(f"{self.what}: object at heap offset {off} lies in an unallocated block")
        block = self.read_direct(entry.address, bsize, boff, entry.filtered_size, entry.filter_mask)
        rel = off - boff
        if rel < g.dblock_overhead or rel + length > bsize:
            raise FormatError(f"{self.what}: object {off}+{length} does not fit its direct block")
        rel -= g.dblock_overhead
        return block.payload[rel:rel + length]

    def _huge_record(self, key: int) -> btree_v2.HugeObjectRecord:
        """The huge-object B-tree's record for `key`."""
        h = self.header
        if h.huge_btree_address is None:
            raise FormatError(f"{self.what}: huge object {key} but no huge-object B-tree")
        filtered = bool(h.filter_len)
        bt_what = f"{self.what} huge-object B-tree"
        hdr = bt.read_header(self.reader, h.huge_btree_address, bt_what)
        want = btree_v2.HUGE_INDIRECT_FILTERED if filtered else btree_v2.HUGE_INDIRECT
        if hdr.type != want:
            raise FormatError(f"{bt_what}: type {hdr.type}, expected {want}")
        rec = bt.find(self.reader, h.huge_btree_address, lambda r: (key > r.id) - (key < r.id),
                      btree_v2.record_decoder(want), bt_what, header=hdr)
        if rec is None:
            raise FormatError(f"{self.what}: huge object {key} not found")
        return rec

    def _get_huge(self, hid: HugeId) -> bytes:
        if hid.key is not None:
            rec = self._huge_record(hid.key)
            addr, length, mask, msize = rec.address, rec.length, rec.filter_mask, rec.memory_size
        else:
            addr, length, mask, msize = hid.address, hid.length, hid.filter_mask, hid.memory_size
        label = f"{self.what} huge object at {addr}"
        data = self.reader.read(addr, length, label)
        if self.header.filter_len:
            if msize is None or msize > (1 << 32):
                raise FormatError(f"{label}: implausible de-filtered size {msize}")
            data = self._defilter(data, mask, msize, label)
        return data

    def kind(self, heap_id: bytes) -> int:
        """ID_MANAGED, ID_HUGE or ID_TINY."""
        return (bytes(heap_id[:1]) or b"\0")[0] >> 4 & 0x3


# -- the blocks a heap occupies ---------------------------------------------------------------------


def extents(out: ExtentSink, reader, path: str, label: str, address: int | None) -> None:
    """The header's, every direct and indirect block's, the huge objects' (raw data) with their
    B-tree's, and the heap's free-space manager's extents."""
    if not out.first_time(("fractal heap", address)):
        return
    heap = None
    with out.guard(path, label):
        heap = FractalHeap(reader, address, f"{path}: {label}")
    if heap is None:
        return
    h = heap.header
    out.add(address, header_size(reader.sizes, h.filter_len), path, f"{label} header")
    if h.root_address is not None and h.root_rows == 0:
        entry = DirectEntry(h.root_address, h.root_filtered_size, h.root_filter_mask)
        _direct(out, heap, path, label, entry, h.start_block_size, 0)
    elif h.root_address is not None:
        _indirect(out, heap, path, label)
    if h.huge_btree_address is not None:
        for rec in bt.extents(out, reader, path, f"{label} huge-object index", h.huge_btree_address, records=True):
            out.add(rec.address, rec.length, path, f"{label} huge object", raw=True)
    if h.free_space_manager_address is not None:
        free_space_manager.extents(out, reader, path, f"{label} free-space manager", h.free_space_manager_address,
                                   CLIENT_HEAP)


def _direct(out: ExtentSink, heap: FractalHeap, path: str, label: str, entry: DirectEntry, size: int,
            offset: int) -> None:
    what = f"{label} direct block"
    if out.add(entry.address, entry.filtered_size if heap.geometry.filtered else size, path, what):
        with out.guard(path, what):
            heap.read_direct(entry.address, size, offset, entry.filtered_size, entry.filter_mask)


def _indirect(out: ExtentSink, heap: FractalHeap, path: str, label: str) -> None:
    h, g = heap.header, heap.geometry
    what = f"{label} indirect block"
    stack = [(h.root_address, h.root_rows, 0)]
    while stack:
        addr, nrows, offset = stack.pop()
        ib = None
        if out.add(addr, indirect_block_size(g, nrows), path, what):
            with out.guard(path, what):
                ib = heap.read_indirect(addr, nrows, offset)   # each step down is smaller: no cycle
        if ib is None:
            continue
        for i, entry in enumerate(ib.direct):
            row, col = divmod(i, g.width)
            size = g.row_block_size[row]
            if entry.address is not None:
                _direct(out, heap, path, label, entry, size, offset + row_offset(h, row) + col * size)
        for j, child in enumerate(ib.indirect):
            row, col = divmod(j, g.width)
            row += g.max_direct_rows
            size = g.row_block_size[row]
            if child is not None:
                stack.append((child, rows_for_block(g, size), offset + row_offset(h, row) + col * size))
