"""Fractal heaps (spec III.G): header, direct and indirect blocks, and object lookup by heap ID.

Reading only. Derived sizes follow libhdf5 (H5HFhdr.c, H5HFdtable.c, H5HFtiny.c, H5HFhuge.c):

- heap offset width ``heap_off_size = ceil(max_heap_bits / 8)``;
- heap length width ``heap_len_size = min(ceil(log2(max_direct_size) / 8),
  limit_enc_size(max_managed_size))`` (limit_enc_size = floor(log2(n)) // 8 + 1);
- doubling table: rows 0 and 1 hold blocks of the starting size, each later row doubles;
  ``max_direct_rows = log2(max_direct) - log2(start) + 2``; a child indirect block standing for
  a row of blocks of size S has ``log2(S) - log2(start * width) + 1`` rows;
- tiny objects use the extended (12-bit) length iff ``id_len - 1 > 17``;
- huge objects are "direct" (address and length in the ID) iff the ID has room for
  address + length (+ filter mask + de-filtered size when the heap is filtered), otherwise the
  ID holds a key (``min(id_len - 1, 8)`` bytes) into the huge-object v2 B-tree (types 1/2).

Everything read from the file is bounded before use: block sizes must be powers of two within
MAX_BLOCK, row counts within the doubling table, addresses and ranges inside the file (BlockReader),
block offsets must match the position a block is reached from (which also makes cycles impossible:
each step down goes to a strictly smaller block).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from ..errors import FormatError, Unsupported
from . import btree_v2
from .checksum import checksum, verify
from .codec import Reader, Sizes

SIG_HEADER, SIG_DIRECT, SIG_INDIRECT = b"FRHP", b"FHDB", b"FHIB"
MAX_BLOCK = 1 << 28        # largest direct block h5fs accepts (libhdf5's default is 64 KiB)
MAX_ID_LEN = 4096
MAX_WIDTH = 1 << 16

ID_MANAGED, ID_HUGE, ID_TINY = 0, 1, 2
TINY_LEN_SHORT = 16

_CACHE_BLOCKS = 32                 # indirect blocks
_CACHE_DBLOCK_BYTES = 32 << 20     # direct blocks: name indexes visit them in hash order


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _log2(n: int) -> int:
    return n.bit_length() - 1


@dataclass(frozen=True)
class FractalHeapHeader:
    address: int
    id_len: int
    filter_len: int
    flags: int
    max_managed_size: int
    next_huge_id: int
    huge_btree_address: int | None
    free_space: int
    free_space_manager_address: int | None
    managed_size: int
    managed_alloc_size: int
    iterator_offset: int
    managed_count: int
    huge_size: int
    huge_count: int
    tiny_size: int
    tiny_count: int
    width: int
    start_block_size: int
    max_direct_size: int
    max_heap_bits: int
    start_root_rows: int
    root_address: int | None
    root_rows: int
    root_filtered_size: int = 0
    root_filter_mask: int = 0
    filter_info: bytes = b""

    @property
    def checksum_direct_blocks(self) -> bool:
        return bool(self.flags & 0x02)


def decode_header(buf: bytes | memoryview, address: int, sizes: Sizes, what: str) -> FractalHeapHeader:
    c = Reader(buf, 0, sizes, what)
    c.signature(SIG_HEADER)
    version = c.u8()
    if version != 0:
        raise Unsupported(f"{what}: version {version}")
    id_len = c.u16()
    filter_len = c.u16()
    flags = c.u8()
    max_man = c.u32()
    next_huge = c.length()
    huge_bt = c.offset()
    free = c.length()
    fs_addr = c.offset()
    man_size, man_alloc, iter_off, man_n = c.length(), c.length(), c.length(), c.length()
    huge_size, huge_n, tiny_size, tiny_n = c.length(), c.length(), c.length(), c.length()
    width = c.u16()
    start = c.length()
    max_direct = c.length()
    max_bits = c.u16()
    start_rows = c.u16()
    root = c.offset()
    root_rows = c.u16()
    fsize = fmask = 0
    finfo = b""
    if filter_len:
        fsize = c.length()
        fmask = c.u32()
        finfo = c.bytes(filter_len)
    end = c.pos
    c.skip(4)
    verify(bytes(c.buf[:end + 4]), what)
    return FractalHeapHeader(address, id_len, filter_len, flags, max_man, next_huge, huge_bt, free, fs_addr,
                             man_size, man_alloc, iter_off, man_n, huge_size, huge_n, tiny_size, tiny_n,
                             width, start, max_direct, max_bits, start_rows, root, root_rows, fsize, fmask, finfo)


@dataclass(frozen=True)
class DirectEntry:
    address: int | None
    filtered_size: int = 0
    filter_mask: int = 0


@dataclass(frozen=True)
class IndirectBlock:
    address: int
    block_offset: int
    nrows: int
    direct: tuple[DirectEntry, ...]        # min(nrows, max_direct_rows) * width entries
    indirect: tuple[int | None, ...]       # the remaining rows' child indirect block addresses


class FractalHeap:
    """A fractal heap: `get(heap_id)` returns an object's bytes."""

    def __init__(self, reader, address: int | None, what: str = "fractal heap"):
        self.reader = reader
        self.sizes: Sizes = reader.sizes
        self.what = f"{what} at {address}"
        if address is None:
            raise FormatError(f"{what}: undefined address")
        # the header's length depends on the filter length, which sits at a fixed position
        prefix = reader.read(address, 9, f"{self.what} header")
        if prefix[:4] != SIG_HEADER:
            raise FormatError(f"{self.what}: bad signature {prefix[:4]!r}, expected {SIG_HEADER!r}")
        filter_len = int.from_bytes(prefix[7:9], "little")
        size = self._header_size(filter_len)
        buf = reader.read(address, size, f"{self.what} header")
        self.header = h = decode_header(buf, address, self.sizes, f"{self.what} header")
        self._init_derived()
        self._lock = threading.Lock()
        self._iblocks: OrderedDict[int, IndirectBlock] = OrderedDict()
        self._dblocks: OrderedDict[int, bytes] = OrderedDict()
        self._dblock_bytes = 0
        self._huge_header: btree_v2.BTreeV2Header | None = None
        self._huge_nodes = btree_v2.NodeCache(16)
        self.filters = None
        if h.filter_len:
            from .messages import filter_pipeline
            self.filters = filter_pipeline.decode(Reader(h.filter_info, 0, self.sizes, f"{self.what} I/O filters"))

    def _header_size(self, filter_len: int) -> int:
        s = self.sizes
        n = 4 + 1 + 2 + 2 + 1 + 4 + s.length + s.offset + s.length + s.offset + 8 * s.length \
            + 2 + 2 * s.length + 2 + 2 + s.offset + 2
        if filter_len:
            n += s.length + 4 + filter_len
        return n + 4

    # -- doubling table -----------------------------------------------------------------------

    def _init_derived(self) -> None:
        h, w = self.header, self.what
        if not _is_pow2(h.width) or h.width > MAX_WIDTH:
            raise FormatError(f"{w}: table width {h.width} is not a power of two up to {MAX_WIDTH}")
        if not _is_pow2(h.start_block_size) or h.start_block_size > MAX_BLOCK:
            raise FormatError(f"{w}: starting block size {h.start_block_size} is not a power of two up to {MAX_BLOCK}")
        if not _is_pow2(h.max_direct_size) or not h.start_block_size <= h.max_direct_size <= MAX_BLOCK:
            raise FormatError(f"{w}: maximum direct block size {h.max_direct_size} is invalid")
        if not 1 <= h.id_len <= MAX_ID_LEN:
            raise FormatError(f"{w}: heap ID length {h.id_len} out of range")
        self.start_bits = _log2(h.start_block_size)
        self.first_row_bits = self.start_bits + _log2(h.width)
        self.max_direct_bits = _log2(h.max_direct_size)
        if not self.max_direct_bits < h.max_heap_bits <= 64 or h.max_heap_bits < self.first_row_bits:
            raise FormatError(f"{w}: maximum heap size of {h.max_heap_bits} bits is invalid")
        self.max_root_rows = h.max_heap_bits - self.first_row_bits + 1
        self.max_direct_rows = self.max_direct_bits - self.start_bits + 2
        if h.root_rows > self.max_root_rows or h.start_root_rows > self.max_root_rows:
            raise FormatError(f"{w}: root indirect block rows {h.root_rows} exceed {self.max_root_rows}")
        self.heap_off_size = (h.max_heap_bits + 7) // 8
        self.heap_len_size = min((self.max_direct_bits + 7) // 8, btree_v2.limit_enc_size(h.max_managed_size))
        self.row_block_size = [h.start_block_size] + [h.start_block_size << max(0, u - 1)
                                                       for u in range(1, self.max_root_rows)]
        # tiny objects
        if h.id_len - 1 <= TINY_LEN_SHORT:
            self.tiny_max, self.tiny_extended = h.id_len - 1, False
        elif h.id_len - 1 == TINY_LEN_SHORT + 1:
            self.tiny_max, self.tiny_extended = TINY_LEN_SHORT, False
        else:
            self.tiny_max, self.tiny_extended = h.id_len - 2, True
        # huge objects
        s = self.sizes
        if h.filter_len:
            self.huge_direct = h.id_len - 1 >= s.offset + s.length + 4 + s.length
        else:
            self.huge_direct = h.id_len - 1 >= s.offset + s.length
        self.huge_id_size = min(h.id_len - 1, 8)
        self.dblock_overhead = 4 + 1 + (4 if h.checksum_direct_blocks else 0) + s.offset + self.heap_off_size

    def row_col(self, offset: int) -> tuple[int, int]:
        """H5HF__dtable_lookup: doubling-table row and column of a heap offset."""
        h = self.header
        if offset < h.start_block_size * h.width:
            return 0, offset // h.start_block_size
        high = _log2(offset)
        row = high - self.first_row_bits + 1
        if row >= len(self.row_block_size):
            raise FormatError(f"{self.what}: heap offset {offset} beyond the doubling table")
        return row, (offset - (1 << high)) // self.row_block_size[row]

    def rows_for_block(self, block_size: int) -> int:
        """Rows of a child indirect block that stands for a block of `block_size` bytes."""
        return _log2(block_size) - self.first_row_bits + 1

    def indirect_block_size(self, nrows: int) -> int:
        h, s = self.header, self.sizes
        dir_rows = min(nrows, self.max_direct_rows)
        ind_rows = max(0, nrows - self.max_direct_rows)
        entry = s.offset + (s.length + 4 if h.filter_len else 0)
        return 4 + 1 + s.offset + self.heap_off_size + dir_rows * h.width * entry + ind_rows * h.width * s.offset + 4

    # -- blocks ---------------------------------------------------------------------------------

    def read_indirect(self, address: int | None, nrows: int, block_offset: int) -> IndirectBlock:
        if address is None:
            raise FormatError(f"{self.what}: undefined indirect block address")
        with self._lock:
            hit = self._iblocks.get(address)
            if hit is not None:
                self._iblocks.move_to_end(address)
        if hit is not None:
            if hit.nrows != nrows or hit.block_offset != block_offset:
                raise FormatError(f"{self.what}: indirect block at {address} reached from two places")
            return hit
        if not 1 <= nrows <= self.max_root_rows:
            raise FormatError(f"{self.what}: indirect block with {nrows} rows")
        h, s = self.header, self.sizes
        label = f"{self.what} indirect block at {address}"
        buf = self.reader.read(address, self.indirect_block_size(nrows), label)
        c = Reader(buf, 0, s, label)
        c.signature(SIG_INDIRECT)
        version = c.u8()
        if version != 0:
            raise Unsupported(f"{label}: version {version}")
        verify(buf, label)
        if c.offset() != h.address:
            raise FormatError(f"{label}: belongs to another heap")
        off = c.uint(self.heap_off_size)
        if off != block_offset:
            raise FormatError(f"{label}: block offset {off}, expected {block_offset}")
        direct, indirect = [], []
        for u in range(nrows * h.width):
            addr = c.offset()
            if u < self.max_direct_rows * h.width:
                if h.filter_len:
                    direct.append(DirectEntry(addr, c.length(), c.u32()))
                else:
                    direct.append(DirectEntry(addr))
            else:
                indirect.append(addr)
        ib = IndirectBlock(address, off, nrows, tuple(direct), tuple(indirect))
        with self._lock:
            self._iblocks[address] = ib
            while len(self._iblocks) > _CACHE_BLOCKS:
                self._iblocks.popitem(last=False)
        return ib

    def read_direct(self, address: int | None, block_size: int, block_offset: int,
                    filtered_size: int = 0, filter_mask: int = 0) -> bytes:
        """The whole direct block (prefix included, de-filtered), checked."""
        if address is None:
            raise FormatError(f"{self.what}: undefined direct block address")
        with self._lock:
            hit = self._dblocks.get(address)
            if hit is not None:
                self._dblocks.move_to_end(address)
        if hit is not None and len(hit) == block_size:
            return hit
        h, s = self.header, self.sizes
        label = f"{self.what} direct block at {address}"
        if not _is_pow2(block_size) or block_size > h.max_direct_size:
            raise FormatError(f"{label}: invalid block size {block_size}")
        if block_size < self.dblock_overhead:
            raise FormatError(f"{label}: block of {block_size} bytes is smaller than its prefix")
        if self.filters is not None:
            if not 0 < filtered_size <= MAX_BLOCK:
                raise FormatError(f"{label}: implausible filtered size {filtered_size}")
            raw = self.reader.read(address, filtered_size, label)
            from ..storage.filters.pipeline import decode_chunk
            from ..storage.filters import ChunkInfo
            filters = getattr(self.filters, "filters", self.filters)
            buf = bytes(decode_chunk(filters, raw, filter_mask, ChunkInfo(block_size, 1, label)))
            if len(buf) != block_size:
                raise FormatError(f"{label}: de-filtered to {len(buf)} bytes, expected {block_size}")
        else:
            buf = self.reader.read(address, block_size, label)
        c = Reader(buf, 0, s, label)
        c.signature(SIG_DIRECT)
        version = c.u8()
        if version != 0:
            raise Unsupported(f"{label}: version {version}")
        if c.offset() != h.address:
            raise FormatError(f"{label}: belongs to another heap")
        off = c.uint(self.heap_off_size)
        if off != block_offset:
            raise FormatError(f"{label}: block offset {off}, expected {block_offset}")
        if h.checksum_direct_blocks:
            pos = c.pos
            stored = c.u32()
            actual = checksum(buf[:pos] + b"\0\0\0\0" + buf[pos + 4:])
            if stored != actual:
                from ..errors import ChecksumError
                raise ChecksumError(f"{label}: checksum mismatch (stored {stored:#010x}, computed {actual:#010x})")
        with self._lock:
            if address not in self._dblocks:
                self._dblocks[address] = buf
                self._dblock_bytes += len(buf)
            while self._dblock_bytes > _CACHE_DBLOCK_BYTES:
                self._dblock_bytes -= len(self._dblocks.popitem(last=False)[1])
        return buf

    def _locate_direct(self, offset: int) -> tuple[DirectEntry, int, int]:
        """The direct block holding heap offset `offset`: (entry, block size, block offset)."""
        h = self.header
        if h.root_address is None:
            raise FormatError(f"{self.what}: heap has no blocks")
        if h.root_rows == 0:
            return DirectEntry(h.root_address, h.root_filtered_size, h.root_filter_mask), h.start_block_size, 0
        ib = self.read_indirect(h.root_address, h.root_rows, 0)
        row, col = self.row_col(offset)
        for _ in range(self.max_root_rows + 1):
            if row >= ib.nrows:
                raise FormatError(f"{self.what}: heap offset {offset} beyond indirect block at {ib.address}")
            if row < self.max_direct_rows:
                entry = ib.direct[row * h.width + col]
                bsize = self.row_block_size[row]
                boff = ib.block_offset + self._row_offset(row) + col * bsize
                return entry, bsize, boff
            child_size = self.row_block_size[row]
            nrows = self.rows_for_block(child_size)
            if not nrows < ib.nrows:
                raise FormatError(f"{self.what}: indirect block at {ib.address} does not shrink")
            child_off = ib.block_offset + self._row_offset(row) + col * child_size
            addr = ib.indirect[(row - self.max_direct_rows) * h.width + col]
            if addr is None:
                raise FormatError(f"{self.what}: heap offset {offset} lies in an unallocated indirect block")
            ib = self.read_indirect(addr, nrows, child_off)
            row, col = self.row_col(offset - child_off)
        raise FormatError(f"{self.what}: indirect blocks nested too deep")

    def _row_offset(self, row: int) -> int:
        """Offset of a row's first block from the start of its indirect block."""
        h = self.header
        return 0 if row == 0 else h.start_block_size * h.width << (row - 1)

    # -- objects --------------------------------------------------------------------------------

    def get(self, heap_id: bytes) -> bytes:
        """The object named by `heap_id` (managed, tiny or huge)."""
        heap_id = bytes(heap_id)
        if not heap_id:
            raise FormatError(f"{self.what}: empty heap ID")
        flag = heap_id[0]
        if flag >> 6 != 0:
            raise Unsupported(f"{self.what}: heap ID version {flag >> 6}")
        kind = (flag >> 4) & 0x3
        if kind == ID_MANAGED:
            return self._get_managed(heap_id)
        if kind == ID_TINY:
            return self._get_tiny(heap_id)
        if kind == ID_HUGE:
            return self._get_huge(heap_id)
        raise FormatError(f"{self.what}: heap ID of unknown type {kind}")

    def _get_managed(self, heap_id: bytes) -> bytes:
        h = self.header
        c = Reader(heap_id, 1, self.sizes, f"{self.what} heap ID")
        off = c.uint(self.heap_off_size)
        length = c.uint(self.heap_len_size)
        if off == 0 or off >= max(h.managed_size, 1) or off >= 1 << h.max_heap_bits:
            raise FormatError(f"{self.what}: managed object offset {off} outside the heap ({h.managed_size} bytes)")
        if length > h.max_direct_size or length > h.max_managed_size:
            raise FormatError(f"{self.what}: managed object length {length} is too large")
        entry, bsize, boff = self._locate_direct(off)
        if entry.address is None:
            raise FormatError(f"{self.what}: object at heap offset {off} lies in an unallocated block")
        block = self.read_direct(entry.address, bsize, boff, entry.filtered_size, entry.filter_mask)
        rel = off - boff
        if rel < self.dblock_overhead or rel + length > bsize:
            raise FormatError(f"{self.what}: object {off}+{length} does not fit its direct block")
        return block[rel:rel + length]

    def _get_tiny(self, heap_id: bytes) -> bytes:
        if self.tiny_extended:
            if len(heap_id) < 2:
                raise FormatError(f"{self.what}: truncated tiny heap ID")
            n = (((heap_id[0] & 0x0F) << 8) | heap_id[1]) + 1
            start = 2
        else:
            n = (heap_id[0] & 0x0F) + 1
            start = 1
        if n > self.tiny_max or start + n > len(heap_id):
            raise FormatError(f"{self.what}: tiny object of {n} bytes does not fit the heap ID")
        return heap_id[start:start + n]

    def _get_huge(self, heap_id: bytes) -> bytes:
        h, s = self.header, self.sizes
        c = Reader(heap_id, 1, s, f"{self.what} huge heap ID")
        if self.huge_direct:
            addr = c.offset()
            length = c.length()
            mask, msize = 0, None
            if h.filter_len:
                mask = c.u32()
                msize = c.length()
        else:
            key = c.uint(self.huge_id_size)
            if h.huge_btree_address is None:
                raise FormatError(f"{self.what}: huge object {key} but no huge-object B-tree")
            filtered = bool(h.filter_len)
            decoder = btree_v2.decode_huge_indirect_filtered if filtered else btree_v2.decode_huge_indirect
            bt_what = f"{self.what} huge-object B-tree"
            hdr = self._huge_header
            if hdr is None:
                hdr = btree_v2.read_header(self.reader, h.huge_btree_address, bt_what)
                want = btree_v2.HUGE_INDIRECT_FILTERED if filtered else btree_v2.HUGE_INDIRECT
                if hdr.type != want:
                    raise FormatError(f"{bt_what}: type {hdr.type}, expected {want}")
                self._huge_header = hdr
            rec = btree_v2.find(self.reader, h.huge_btree_address, lambda r: (key > r.id) - (key < r.id),
                                decoder, bt_what, header=hdr, cache=self._huge_nodes)
            if rec is None:
                raise FormatError(f"{self.what}: huge object {key} not found")
            addr, length, mask, msize = rec.address, rec.length, rec.filter_mask, rec.memory_size
        label = f"{self.what} huge object at {addr}"
        data = self.reader.read(addr, length, label)
        if h.filter_len:
            if msize is None or msize > (1 << 32):
                raise FormatError(f"{label}: implausible de-filtered size {msize}")
            from ..storage.filters.pipeline import decode_chunk
            from ..storage.filters import ChunkInfo
            filters = getattr(self.filters, "filters", self.filters)
            data = bytes(decode_chunk(filters, data, mask, ChunkInfo(msize, 1, label)))
            if len(data) != msize:
                raise FormatError(f"{label}: de-filtered to {len(data)} bytes, expected {msize}")
        return data

    def kind(self, heap_id: bytes) -> int:
        """ID_MANAGED, ID_HUGE or ID_TINY."""
        return (bytes(heap_id[:1]) or b"\0")[0] >> 4 & 0x3
