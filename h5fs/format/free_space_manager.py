"""Free-space managers (spec III.H): the header (FSHD) and the serialized section list (FSSE).

Decoders and encoders side by side: `decode_header`/`encode_header` and `decode_sections`/
`encode_sections` (whole blocks to and from bytes, checksums verified and recomputed). A client is
the file (its managers are named by the File Space Info message) or a fractal heap (named by the
heap's header).

The section list's field widths come from its header, as libhdf5 derives them (H5FScache.c,
H5FSsection.c): a set's section count takes ``limit_enc_size(serial_sections)`` bytes, a set's
section size ``limit_enc_size(max_section_size)`` bytes (limit_enc_size(n) = floor(log2(n)) // 8
+ 1), a section's offset ``ceil(address_bits / 8)`` bytes. Records follow a type byte whose data
depends on the client and the type: a file's sections (simple, small, large: types 0-2) and a
heap's "single" and "normal row" sections (types 0 and 2) carry none; a heap's "first row" and
"indirect" sections (types 1 and 3) carry the indirect section: the indirect block's offset in the
heap (as wide as a section offset: libhdf5 gives the heap's manager the heap's maximum size as its
address space), its start row, start column and block count (2 bytes each). libhdf5 writes sets by
increasing size, sections by increasing offset; sets stop once `serial_sections` records are read.

A file's manager tracks sections up to the file's maximum address (2^63 - 1 with libhdf5's sec2
driver, whatever the size of offsets), its address space is that value's bit count, and libhdf5
(1.10 to 2.0) stores the maximum section size truncated to the size of lengths while it writes the
section sizes at the width of the untruncated value (libhdf5 2.0 itself segfaults reopening such a
file for writing, presumably reading them at the truncated width). So a maximum section size saturated at a size of lengths
under 8 stands for a value as large as the address space: its sections' sizes take the width of
the address space's largest value when that is wider.

The list is `sections_size` bytes (checksum last); `sections_alloc_size` may be larger: the rest of
the allocation is not part of the block. Undefined space: bytes between the last record and the
checksum (libhdf5 leaves none) are kept as a count and encode as zeros.

Everything read from the file is bounded before use: offset widths of at most 8 bytes, set counts
of at least one section and no more than the header announces, every read against the block's end
(each record takes at least its type byte, so a count cannot outrun the buffer unnoticed).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import FormatError, Unsupported
from .checksum import checked_block, sealed
from .codec import Reader, Sizes, Writer

SIG_HEADER, SIG_SECTIONS = b"FSHD", b"FSSE"
CLIENT_HEAP, CLIENT_FILE = 0, 1
# file sections: simple (non-paged), small and large (paged aggregation); none carries data
FILE_SIMPLE, FILE_SMALL, FILE_LARGE = 0, 1, 2
HEAP_SINGLE, HEAP_FIRST_ROW, HEAP_NORMAL_ROW, HEAP_INDIRECT = 0, 1, 2, 3
SECTION_TYPES = {CLIENT_HEAP: 4, CLIENT_FILE: 3}
WITH_INDIRECT = (HEAP_FIRST_ROW, HEAP_INDIRECT)      # the heap sections whose records carry data

HEADER_LAYOUT = "4sBBLLLLHHHHLOLL"
INDIRECT_LAYOUT = "HHH"


def _enc_size(n: int) -> int:
    """Bytes libhdf5 encodes values up to n in (H5VM_limit_enc_size)."""
    return (max(n, 1).bit_length() - 1) // 8 + 1


@dataclass(frozen=True, slots=True)
class FreeSpaceHeader:
    address: int
    client: int
    total_space: int
    total_sections: int
    serial_sections: int
    ghost_sections: int
    nclasses: int
    shrink_percent: int
    expand_percent: int
    address_bits: int                   # log2 of the address space the sections lie in
    max_section_size: int
    sections_address: int | None
    sections_size: int                  # bytes of the section list (its checksum included)
    sections_alloc_size: int

    def widths(self, sizes: Sizes) -> tuple[int, int, int]:
        """(set count, section size, section offset) widths of the section list."""
        size_w = _enc_size(self.max_section_size)
        if sizes.length < 8 and self.max_section_size == (1 << 8 * sizes.length) - 1:
            size_w = max(size_w, (self.address_bits - 1) // 8 + 1)     # truncated (module docstring)
        return _enc_size(self.serial_sections), size_w, (self.address_bits + 7) // 8


def header_size(sizes: Sizes) -> int:
    return sizes.layout(HEADER_LAYOUT).size + 4


def decode_header(buf: bytes | memoryview, address: int, sizes: Sizes, what: str) -> FreeSpaceHeader:
    n = header_size(sizes)
    if len(buf) < n:
        raise FormatError(f"{what}: truncated ({len(buf)} of {n} bytes)")
    c, _ = checked_block(buf[:n], sizes, SIG_HEADER, what)
    client, *v = c.fields(HEADER_LAYOUT[3:])
    if client not in SECTION_TYPES:
        raise Unsupported(f"{what}: client {client}")
    v[9] = sizes.address(v[9])
    return FreeSpaceHeader(address, client, *v)


def encode_header(h: FreeSpaceHeader, sizes: Sizes) -> bytes:
    w = Writer(sizes)
    w.fields(HEADER_LAYOUT, SIG_HEADER, 0, h.client, h.total_space, h.total_sections, h.serial_sections,
             h.ghost_sections, h.nclasses, h.shrink_percent, h.expand_percent, h.address_bits, h.max_section_size,
             sizes.raw_address(h.sections_address), h.sections_size, h.sections_alloc_size)
    return sealed(w.buf)


# -- the section list -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeapIndirect:
    """The data of a fractal heap's "first row" or "indirect" section: a run of empty blocks."""

    block_offset: int                   # the indirect block's offset in the heap
    start_row: int
    start_col: int
    num_blocks: int


@dataclass(frozen=True, slots=True)
class Section:
    offset: int                         # in the client's address space (the file, the heap)
    type: int
    indirect: HeapIndirect | None = None   # heap types 1 and 3 only


@dataclass(frozen=True, slots=True)
class SectionSet:
    size: int                           # of every section in the set
    sections: tuple[Section, ...]


@dataclass(frozen=True, slots=True)
class SectionList:
    header_address: int
    sets: tuple[SectionSet, ...]
    gap: int = 0                        # undefined bytes before the checksum

    @property
    def sections(self) -> int:
        return sum(len(s.sections) for s in self.sets)


def section_sets(sections: list[tuple[int, Section]]) -> tuple[SectionSet, ...]:
    """(size, section) pairs grouped as libhdf5 serializes them: sets by increasing size, each
    set's sections by increasing offset."""
    sets: list[SectionSet] = []
    for size, sec in sorted(sections, key=lambda t: (t[0], t[1].offset)):
        if sets and sets[-1].size == size:
            sets[-1] = SectionSet(size, sets[-1].sections + (sec,))
        else:
            sets.append(SectionSet(size, (sec,)))
    return tuple(sets)


def _carries_indirect(header: FreeSpaceHeader, stype: int) -> bool:
    return header.client == CLIENT_HEAP and stype in WITH_INDIRECT


def decode_sections(buf: bytes | memoryview, header: FreeSpaceHeader, sizes: Sizes, what: str) -> SectionList:
    """The section list of `header` (its first `header.sections_size` bytes of `buf`)."""
    n = header.sections_size
    if n > len(buf):
        raise FormatError(f"{what}: truncated ({len(buf)} of {n} bytes)")
    if header.address_bits > 64:
        raise FormatError(f"{what}: address space of {header.address_bits} bits")
    c, _ = checked_block(buf[:n], sizes, SIG_SECTIONS, what)
    owner = c.offset()
    if owner != header.address:
        raise FormatError(f"{what}: belongs to the header at {owner}, not {header.address}")
    c = Reader(c.buf[:n - 4], c.pos, sizes, what)
    count_w, size_w, off_w = header.widths(sizes)
    ntypes, left, sets = SECTION_TYPES[header.client], header.serial_sections, []
    while left:
        count, size = c.uint(count_w), c.uint(size_w)
        if not 0 < count <= left:
            raise FormatError(f"{what}: a set of {count} sections, {left} left to read")
        left -= count
        sections = []
        for _ in range(count):
            offset, stype = c.uint(off_w), c.u8()
            if stype >= ntypes:
                raise FormatError(f"{what}: section type {stype}")
            indirect = None
            if _carries_indirect(header, stype):
                indirect = HeapIndirect(c.uint(off_w), *c.fields(INDIRECT_LAYOUT))
            sections.append(Section(offset, stype, indirect))
        sets.append(SectionSet(size, tuple(sections)))
    return SectionList(owner, tuple(sets), c.remaining())


def encode_sections(sl: SectionList, header: FreeSpaceHeader, sizes: Sizes) -> bytes:
    """The section list's bytes; the widths come from `header` (whose counts must describe `sl`)."""
    count_w, size_w, off_w = header.widths(sizes)
    w = Writer(sizes)
    w.bytes(SIG_SECTIONS)
    w.u8(0)
    w.offset(sl.header_address)
    try:
        for s in sl.sets:
            w.uint(len(s.sections), count_w)
            w.uint(s.size, size_w)
            for sec in s.sections:
                w.uint(sec.offset, off_w)
                w.u8(sec.type)
                if _carries_indirect(header, sec.type) != (sec.indirect is not None):
                    raise ValueError(f"a type {sec.type} section of client {header.client}: indirect data")
                if sec.indirect is not None:
                    i = sec.indirect
                    w.uint(i.block_offset, off_w)
                    w.fields(INDIRECT_LAYOUT, i.start_row, i.start_col, i.num_blocks)
    except OverflowError as e:
        raise ValueError(f"a section field too wide for the header's widths: {e}") from None
    w.zeros(sl.gap)
    return sealed(w.buf)
