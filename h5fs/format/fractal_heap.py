"""Fractal heaps (spec III.G): header, direct and indirect blocks, heap IDs, object lookup.

Decoders and encoders side by side: `decode_header`/`encode_header`, `decode_direct`/
`encode_direct`, `decode_indirect`/`encode_indirect` (whole blocks to and from bytes, checksums
verified and recomputed) and `decode_id`/`encode_id` (heap IDs). The blocks and IDs need sizes
derived from the header, computed once by `derive` into a `HeapGeometry`.

Derived sizes follow libhdf5 (H5HFhdr.c, H5HFdtable.c, H5HFtiny.c, H5HFhuge.c):

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
each step down goes to a strictly smaller block). Decoded blocks are cached in the file's
metadata cache (`reader.meta`).

Undefined space: a heap ID's bytes after its object (a short tiny object, a managed ID in a
longer ID) encode as zeros.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ChecksumError, FormatError, Unsupported
from . import btree_v2
from .checksum import checksum, verify
from .codec import Reader, Sizes, Writer, as_uint, uint_code, uint_field

SIG_HEADER, SIG_DIRECT, SIG_INDIRECT = b"FRHP", b"FHDB", b"FHIB"
MAX_BLOCK = 1 << 28        # largest direct block h5fs accepts (libhdf5's default is 64 KiB)
MAX_ID_LEN = 4096
MAX_WIDTH = 1 << 16

ID_MANAGED, ID_HUGE, ID_TINY = 0, 1, 2
TINY_LEN_SHORT = 16

# header fields up to the root indirect block's row count; the filtered root fields follow
HEADER_LAYOUT = "4sBHHBILOLOLLLLLLLLHLLHHOH"
FILTERED_ROOT_LAYOUT = "LI"


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _log2(n: int) -> int:
    return n.bit_length() - 1


@dataclass(frozen=True, slots=True)
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


def header_size(sizes: Sizes, filter_len: int) -> int:
    n = sizes.layout(HEADER_LAYOUT).size
    if filter_len:
        n += sizes.layout(FILTERED_ROOT_LAYOUT).size + filter_len
    return n + 4


def decode_header(buf: bytes | memoryview, address: int, sizes: Sizes, what: str) -> FractalHeapHeader:
    c = Reader(buf, 0, sizes, what)
    sig, version, *v = c.fields(HEADER_LAYOUT)
    if sig != SIG_HEADER:
        raise FormatError(f"{what}: bad signature {sig!r}, expected {SIG_HEADER!r}")
    if version != 0:
        raise Unsupported(f"{what}: version {version}")
    for i in (5, 7, 21):   # huge B-tree, free-space manager and root block addresses
        v[i] = sizes.address(v[i])
    filter_len = v[1]
    froot: tuple = ()
    if filter_len:
        froot = (*c.fields(FILTERED_ROOT_LAYOUT), c.bytes(filter_len))
    end = c.pos
    c.skip(4)
    verify(bytes(c.buf[:end + 4]), what)
    return FractalHeapHeader(address, *v, *froot)


def encode_header(h: FractalHeapHeader, sizes: Sizes) -> bytes:
    if h.filter_len != len(h.filter_info):
        raise ValueError(f"filter length {h.filter_len} differs from the {len(h.filter_info)} bytes of filter info")
    w = Writer(sizes)
    w.fields(HEADER_LAYOUT, SIG_HEADER, 0, h.id_len, h.filter_len, h.flags, h.max_managed_size, h.next_huge_id,
             sizes.raw_address(h.huge_btree_address), h.free_space, sizes.raw_address(h.free_space_manager_address),
             h.managed_size, h.managed_alloc_size, h.iterator_offset, h.managed_count, h.huge_size, h.huge_count,
             h.tiny_size, h.tiny_count, h.width, h.start_block_size, h.max_direct_size, h.max_heap_bits,
             h.start_root_rows, sizes.raw_address(h.root_address), h.root_rows)
    if h.filter_len:
        w.fields(FILTERED_ROOT_LAYOUT, h.root_filtered_size, h.root_filter_mask)
        w.bytes(h.filter_info)
    return btree_v2.sealed(w)


# -- geometry ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeapGeometry:
    """Sizes derived from a heap's header: what its blocks and IDs need to be decoded."""

    sizes: Sizes
    heap_address: int
    id_len: int
    width: int
    filtered: bool
    checksummed: bool            # direct blocks carry a checksum
    start_bits: int
    first_row_bits: int
    max_direct_bits: int
    max_root_rows: int
    max_direct_rows: int
    heap_off_size: int
    heap_len_size: int
    row_block_size: tuple[int, ...]
    tiny_max: int
    tiny_extended: bool
    huge_direct: bool
    huge_id_size: int
    dblock_overhead: int


def derive(h: FractalHeapHeader, sizes: Sizes, what: str) -> HeapGeometry:
    """The heap's geometry; FormatError when the header's parameters are not a valid heap."""
    if not _is_pow2(h.width) or h.width > MAX_WIDTH:
        raise FormatError(f"{what}: table width {h.width} is not a power of two up to {MAX_WIDTH}")
    if not _is_pow2(h.start_block_size) or h.start_block_size > MAX_BLOCK:
        raise FormatError(f"{what}: starting block size {h.start_block_size} is not a power of two up to {MAX_BLOCK}")
    if not _is_pow2(h.max_direct_size) or not h.start_block_size <= h.max_direct_size <= MAX_BLOCK:
        raise FormatError(f"{what}: maximum direct block size {h.max_direct_size} is invalid")
    if not 1 <= h.id_len <= MAX_ID_LEN:
        raise FormatError(f"{what}: heap ID length {h.id_len} out of range")
    start_bits = _log2(h.start_block_size)
    first_row_bits = start_bits + _log2(h.width)
    max_direct_bits = _log2(h.max_direct_size)
    if not max_direct_bits < h.max_heap_bits <= 64 or h.max_heap_bits < first_row_bits:
        raise FormatError(f"{what}: maximum heap size of {h.max_heap_bits} bits is invalid")
    max_root_rows = h.max_heap_bits - first_row_bits + 1
    if h.root_rows > max_root_rows or h.start_root_rows > max_root_rows:
        raise FormatError(f"{what}: root indirect block rows {h.root_rows} exceed {max_root_rows}")
    heap_off_size = (h.max_heap_bits + 7) // 8
    if h.id_len - 1 <= TINY_LEN_SHORT:
        tiny_max, tiny_extended = h.id_len - 1, False
    elif h.id_len - 1 == TINY_LEN_SHORT + 1:
        tiny_max, tiny_extended = TINY_LEN_SHORT, False
    else:
        tiny_max, tiny_extended = h.id_len - 2, True
    s = sizes
    huge_room = s.offset + s.length + (4 + s.length if h.filter_len else 0)
    return HeapGeometry(
        sizes, h.address, h.id_len, h.width, bool(h.filter_len), h.checksum_direct_blocks, start_bits,
        first_row_bits, max_direct_bits, max_root_rows, max_direct_bits - start_bits + 2, heap_off_size,
        min((max_direct_bits + 7) // 8, btree_v2.limit_enc_size(h.max_managed_size)),
        (h.start_block_size,) + tuple(h.start_block_size << max(0, u - 1) for u in range(1, max_root_rows)),
        tiny_max, tiny_extended, h.id_len - 1 >= huge_room, min(h.id_len - 1, 8),
        4 + 1 + (4 if h.checksum_direct_blocks else 0) + s.offset + heap_off_size)


def _prefix_layout(g: HeapGeometry) -> str:
    """Signature, version, heap header address, block offset: how every block starts."""
    return "4sBO" + uint_code(g.heap_off_size)


def _check_prefix(c: Reader, g: HeapGeometry, signature: bytes) -> int:
    """The block offset of a block whose prefix `c` reads; the prefix itself checked."""
    sig, version, heap, off = c.fields(_prefix_layout(g))
    if sig != signature:
        raise FormatError(f"{c.what}: bad signature {sig!r}, expected {signature!r}")
    if version != 0:
        raise Unsupported(f"{c.what}: version {version}")
    if g.sizes.address(heap) != g.heap_address:
        raise FormatError(f"{c.what}: belongs to another heap")
    return as_uint(off)


def _write_prefix(w: Writer, g: HeapGeometry, signature: bytes, block_offset: int) -> None:
    w.fields(_prefix_layout(g), signature, 0, g.heap_address, uint_field(block_offset, g.heap_off_size))


# -- direct blocks ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DirectBlock:
    block_offset: int
    payload: bytes     # everything after the prefix: objects and free space


def decode_direct(buf: bytes | memoryview, g: HeapGeometry, what: str) -> DirectBlock:
    """A whole (de-filtered) direct block; its checksum, when the heap has them, verified."""
    c = Reader(buf, 0, g.sizes, what)
    off = _check_prefix(c, g, SIG_DIRECT)
    if g.checksummed:
        pos = c.pos
        stored = c.u32()
        data = bytes(buf)
        actual = checksum(data[:pos] + b"\0\0\0\0" + data[pos + 4:])
        if stored != actual:
            raise ChecksumError(f"{what}: checksum mismatch (stored {stored:#010x}, computed {actual:#010x})")
    return DirectBlock(off, bytes(c.buf[c.pos:]))


def encode_direct(db: DirectBlock, g: HeapGeometry) -> bytes:
    """The block's image before any filter (its checksum covers the block with the field zeroed)."""
    w = Writer(g.sizes)
    _write_prefix(w, g, SIG_DIRECT, db.block_offset)
    pos = w.pos
    if g.checksummed:
        w.u32(0)
    w.bytes(db.payload)
    if g.checksummed:
        w.patch(pos, g.sizes.layout("I"), checksum(w.buf))
    return w.getvalue()


# -- indirect blocks --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DirectEntry:
    address: int | None
    filtered_size: int = 0
    filter_mask: int = 0


@dataclass(frozen=True, slots=True)
class IndirectBlock:
    address: int
    block_offset: int
    nrows: int
    direct: tuple[DirectEntry, ...]        # min(nrows, max_direct_rows) * width entries
    indirect: tuple[int | None, ...]       # the remaining rows' child indirect block addresses


def _entry_layouts(g: HeapGeometry) -> tuple[str, str]:
    return ("OLI" if g.filtered else "O"), "O"


def indirect_block_size(g: HeapGeometry, nrows: int) -> int:
    dir_rows = min(nrows, g.max_direct_rows)
    ind_rows = max(0, nrows - g.max_direct_rows)
    direct, indirect = (g.sizes.layout(s).size for s in _entry_layouts(g))
    return g.sizes.layout(_prefix_layout(g)).size + (dir_rows * direct + ind_rows * indirect) * g.width + 4


def decode_indirect(buf: bytes | memoryview, g: HeapGeometry, address: int, nrows: int, what: str) -> IndirectBlock:
    """An indirect block of `nrows` rows (checksum and heap address verified)."""
    c = Reader(buf, 0, g.sizes, what)
    c.need(indirect_block_size(g, nrows))
    off = _check_prefix(c, g, SIG_INDIRECT)
    verify(bytes(c.buf[:indirect_block_size(g, nrows)]), what)
    ndirect = min(nrows, g.max_direct_rows) * g.width
    dlayout, ilayout = (g.sizes.layout(s) for s in _entry_layouts(g))
    undefined = g.sizes.undefined
    direct = tuple(DirectEntry(None if e[0] == undefined else e[0], *e[1:])
                   for e in dlayout.iter_unpack(c.bytes(ndirect * dlayout.size)))
    nindirect = nrows * g.width - ndirect
    indirect = tuple(None if a == undefined else a for (a,) in ilayout.iter_unpack(c.bytes(nindirect * ilayout.size)))
    return IndirectBlock(address, off, nrows, direct, indirect)


def encode_indirect(ib: IndirectBlock, g: HeapGeometry) -> bytes:
    if len(ib.direct) + len(ib.indirect) != ib.nrows * g.width or \
            len(ib.direct) != min(ib.nrows, g.max_direct_rows) * g.width:
        raise ValueError(f"indirect block of {ib.nrows} rows with {len(ib.direct)}/{len(ib.indirect)} entries")
    w = Writer(g.sizes)
    _write_prefix(w, g, SIG_INDIRECT, ib.block_offset)
    dlayout, ilayout = (g.sizes.layout(s) for s in _entry_layouts(g))
    for e in ib.direct:
        extra = (e.filtered_size, e.filter_mask) if g.filtered else ()
        w.pack(dlayout, g.sizes.raw_address(e.address), *extra)
    for a in ib.indirect:
        w.pack(ilayout, g.sizes.raw_address(a))
    return btree_v2.sealed(w)


# -- heap IDs ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ManagedId:
    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class TinyId:
    data: bytes


@dataclass(frozen=True, slots=True)
class HugeId:
    """A huge object's ID: `key` into the huge-object B-tree, or (heaps whose IDs have room)
    the object's address, length, and when filtered its filter mask and de-filtered size."""

    key: int | None = None
    address: int | None = None
    length: int = 0
    filter_mask: int = 0
    memory_size: int | None = None


HeapId = ManagedId | TinyId | HugeId


def _huge_layout(g: HeapGeometry) -> str:
    if not g.huge_direct:
        return uint_code(g.huge_id_size)
    return "OLIL" if g.filtered else "OL"


def decode_id(heap_id: bytes, g: HeapGeometry, what: str) -> HeapId:
    if not heap_id:
        raise FormatError(f"{what}: empty heap ID")
    flag = heap_id[0]
    if flag >> 6 != 0:
        raise Unsupported(f"{what}: heap ID version {flag >> 6}")
    kind = (flag >> 4) & 0x3
    c = Reader(heap_id, 1, g.sizes, f"{what} heap ID")
    if kind == ID_MANAGED:
        off, length = c.fields(uint_code(g.heap_off_size) + uint_code(g.heap_len_size))
        return ManagedId(as_uint(off), as_uint(length))
    if kind == ID_TINY:
        n = (flag & 0x0F) + 1
        if g.tiny_extended:
            n = (((flag & 0x0F) << 8) | c.u8()) + 1
        if n > g.tiny_max or c.pos + n > len(heap_id):
            raise FormatError(f"{what}: tiny object of {n} bytes does not fit the heap ID")
        return TinyId(c.bytes(n))
    if kind == ID_HUGE:
        v = c.fields(_huge_layout(g))
        if not g.huge_direct:
            return HugeId(key=as_uint(v[0]))
        return HugeId(None, g.sizes.address(v[0]), *v[1:])
    raise FormatError(f"{what}: heap ID of unknown type {kind}")


def encode_id(hid: HeapId, g: HeapGeometry) -> bytes:
    """The heap ID at the heap's ID length (zero-padded)."""
    w = Writer(g.sizes)
    if isinstance(hid, ManagedId):
        w.u8(ID_MANAGED << 4)
        w.fields(uint_code(g.heap_off_size) + uint_code(g.heap_len_size),
                 uint_field(hid.offset, g.heap_off_size), uint_field(hid.length, g.heap_len_size))
    elif isinstance(hid, TinyId):
        n = len(hid.data) - 1
        if not 0 <= n < g.tiny_max:
            raise ValueError(f"tiny object of {n + 1} bytes in a heap of {g.id_len}-byte IDs")
        if g.tiny_extended:
            w.fields("BB", ID_TINY << 4 | n >> 8, n & 0xFF)
        else:
            w.u8(ID_TINY << 4 | n)
        w.bytes(hid.data)
    else:
        w.u8(ID_HUGE << 4)
        if g.huge_direct:
            extra = (hid.filter_mask, hid.memory_size) if g.filtered else ()
            w.fields(_huge_layout(g), g.sizes.raw_address(hid.address), hid.length, *extra)
        else:
            w.fields(_huge_layout(g), uint_field(hid.key, g.huge_id_size))
    if w.pos > g.id_len:
        raise ValueError(f"heap ID of {w.pos} bytes in a heap of {g.id_len}-byte IDs")
    w.zeros(g.id_len - w.pos)
    return w.getvalue()


# -- the heap ---------------------------------------------------------------------------------


class FractalHeap:
    """A fractal heap: `get(heap_id)` returns an object's bytes. The geometry's sizes read as
    the heap's attributes (`heap.max_direct_rows`, `heap.heap_off_size`, ...)."""

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
        buf = reader.read(address, header_size(self.sizes, filter_len), f"{self.what} header")
        self.header = h = decode_header(buf, address, self.sizes, f"{self.what} header")
        self.geometry = derive(h, self.sizes, self.what)
        self.filters = None
        if h.filter_len:
            from .messages import filter_pipeline
            self.filters = filter_pipeline.decode(Reader(h.filter_info, 0, self.sizes, f"{self.what} I/O filters"))

    def __getattr__(self, name: str):
        geometry = self.__dict__.get("geometry")
        if geometry is None or name not in HeapGeometry.__dataclass_fields__:
            raise AttributeError(name)
        return getattr(geometry, name)

    # -- doubling table -----------------------------------------------------------------------

    def row_col(self, offset: int) -> tuple[int, int]:
        """H5HF__dtable_lookup: doubling-table row and column of a heap offset."""
        h, g = self.header, self.geometry
        if offset < h.start_block_size * h.width:
            return 0, offset // h.start_block_size
        high = _log2(offset)
        row = high - g.first_row_bits + 1
        if row >= len(g.row_block_size):
            raise FormatError(f"{self.what}: heap offset {offset} beyond the doubling table")
        return row, (offset - (1 << high)) // g.row_block_size[row]

    def rows_for_block(self, block_size: int) -> int:
        """Rows of a child indirect block that stands for a block of `block_size` bytes."""
        return _log2(block_size) - self.geometry.first_row_bits + 1

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
            if not _is_pow2(block_size) or block_size > self.header.max_direct_size:
                raise FormatError(f"{label}: invalid block size {block_size}")
            if block_size < g.dblock_overhead:
                raise FormatError(f"{label}: block of {block_size} bytes is smaller than its prefix")
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
        from ..storage.filters import ChunkInfo
        from ..storage.filters.pipeline import decode_chunk
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
        h = self.header
        return 0 if row == 0 else h.start_block_size * h.width << (row - 1)

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
        hdr = btree_v2.read_header(self.reader, h.huge_btree_address, bt_what)
        want = btree_v2.HUGE_INDIRECT_FILTERED if filtered else btree_v2.HUGE_INDIRECT
        if hdr.type != want:
            raise FormatError(f"{bt_what}: type {hdr.type}, expected {want}")
        rec = btree_v2.find(self.reader, h.huge_btree_address, lambda r: (key > r.id) - (key < r.id),
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
