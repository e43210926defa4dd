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

Pure bytes <-> records and doubling-table arithmetic; h5fs.storage.fractal_heap reads
heaps from the file, bounding everything before use: block sizes must be powers of two within
MAX_BLOCK, row counts within the doubling table, addresses and ranges inside the file, block
offsets must match the position a block is reached from (which also makes cycles impossible: each
step down goes to a strictly smaller block).

Undefined space: a heap ID's bytes after its object (a short tiny object, a managed ID in a
longer ID) encode as zeros.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ChecksumError, FormatError, Unsupported
from . import btree_v2
from .checksum import checksum, sealed, verify
from .codec import Reader, Sizes, Writer, as_uint, uint_code, uint_field

SIG_HEADER, SIG_DIRECT, SIG_INDIRECT = b"FRHP", b"FHDB", b"FHIB"
MAX_BLOCK = 1 << 28        # largest direct block h5fs accepts (libhdf5's default is 64 KiB)
MAX_ID_LEN = 4096
MAX_WIDTH = 1 << 16

ID_MANAGED, ID_HUGE, ID_TINY = 0, 1, 2
TINY_LEN_SHORT = 16

# header fields up to the root indirect block's row count; the filtered root fields follow
HEADER_LAYOUT = "4sBHHBILOLOLLLLLLLLHLLHHOH"
HEADER_PREFIX = 9          # signature, version, heap ID length, I/O filters' encoded length
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


def filter_length(prefix: bytes, what: str) -> int:
    """The I/O filters' encoded length (what the header's size depends on) from the header's first
    HEADER_PREFIX bytes."""
    if prefix[:4] != SIG_HEADER:
        raise FormatError(f"{what}: bad signature {prefix[:4]!r}, expected {SIG_HEADER!r}")
    return int.from_bytes(prefix[7:9], "little")


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
    return sealed(w.buf)


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


def row_col(h: FractalHeapHeader, g: HeapGeometry, offset: int, what: str) -> tuple[int, int]:
    """H5HF__dtable_lookup: doubling-table row and column of a heap offset."""
    if offset < h.start_block_size * h.width:
        return 0, offset // h.start_block_size
    high = _log2(offset)
    row = high - g.first_row_bits + 1
    if row >= len(g.row_block_size):
        raise FormatError(f"{what}: heap offset {offset} beyond the doubling table")
    return row, (offset - (1 << high)) // g.row_block_size[row]


def rows_for_block(g: HeapGeometry, block_size: int) -> int:
    """Rows of a child indirect block that stands for a block of `block_size` bytes."""
    return _log2(block_size) - g.first_row_bits + 1


def row_offset(h: FractalHeapHeader, row: int) -> int:
    """Offset of a row's first block from the start of its indirect block."""
    return 0 if row == 0 else h.start_block_size * h.width << (row - 1)


def entry_offset(h: FractalHeapHeader, g: HeapGeometry, block_offset: int, entry: int) -> int:
    """Heap offset of entry `entry` (row * width + column) of the indirect block at `block_offset`."""
    row, col = divmod(entry, h.width)
    return block_offset + row_offset(h, row) + col * g.row_block_size[row]


def span_size(h: FractalHeapHeader, g: HeapGeometry, entry: int, count: int) -> int:
    """H5HF__dtable_span_size: heap bytes covered by `count` entries from `entry` of one block."""
    return entry_offset(h, g, 0, entry + count) - entry_offset(h, g, 0, entry)


def size_to_row(h: FractalHeapHeader, size: int) -> int:
    """H5HF__dtable_size_to_row: the first row of direct blocks of `size` bytes."""
    return 0 if size == h.start_block_size else _log2(size) - _log2(h.start_block_size) + 1


def row_free_space(g: HeapGeometry) -> tuple[int, ...]:
    """Free space of a whole empty block of each row (H5HF__hdr_finish_init_phase2): a direct
    block's size less its prefix, or all the direct blocks under a child indirect block."""
    free: list[int] = []
    for row, size in enumerate(g.row_block_size):
        if row < g.max_direct_rows:
            free.append(size - g.dblock_overhead)
            continue
        covered = total = 0
        for r in range(row):
            if covered >= size:
                break
            covered += g.row_block_size[r] * g.width
            total += free[r] * g.width
        free.append(total)
    return tuple(free)


@dataclass(frozen=True, slots=True)
class HeapParams:
    """Creation parameters of a heap (H5HF_create_t); `id_len` 0 asks for libhdf5's default."""

    width: int
    start_block_size: int
    max_direct_size: int
    max_heap_bits: int
    start_root_rows: int
    checksum_direct_blocks: bool
    max_managed_size: int
    id_len: int = 0


# what libhdf5 gives dense link storage (H5G_FHEAP_* in H5Gdense.c) and dense attribute storage
# (H5O_FHEAP_* in H5Oprivate.h): heap IDs of 7 and 8 bytes follow from the sizes
LINK_HEAP = HeapParams(4, 512, 64 * 1024, 32, 1, True, 4 * 1024)
ATTRIBUTE_HEAP = HeapParams(4, 1024, 64 * 1024, 40, 1, True, 4 * 1024)


def new_header(address: int, p: HeapParams) -> FractalHeapHeader:
    """The header of an empty heap as H5HF__hdr_create sets it up (no I/O filters)."""
    heap_off_size = (p.max_heap_bits + 7) // 8
    heap_len_size = min((_log2(p.max_direct_size) + 7) // 8, btree_v2.limit_enc_size(p.max_managed_size))
    return FractalHeapHeader(
        address, p.id_len or 1 + heap_off_size + heap_len_size, 0, 0x02 if p.checksum_direct_blocks else 0,
        p.max_managed_size, 0, None, 0, None, 0, 0, 0, 0, 0, 0, 0, 0, p.width, p.start_block_size,
        p.max_direct_size, p.max_heap_bits, p.start_root_rows, None, 0)


def check_direct_block_size(h: FractalHeapHeader, g: HeapGeometry, block_size: int, label: str) -> None:
    """Refuse a direct block size the heap cannot have."""
    if not _is_pow2(block_size) or block_size > h.max_direct_size:
        raise FormatError(f"{label}: invalid block size {block_size}")
    if block_size < g.dblock_overhead:
        raise FormatError(f"{label}: block of {block_size} bytes is smaller than its prefix")


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
    return sealed(w.buf)


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
