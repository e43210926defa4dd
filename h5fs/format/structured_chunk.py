"""Structured chunks (spec 3.0 Appendix E; RFC "File Format Changes for Enabling Sparse Storage"):
the composition a layout message declares, the per-chunk metadata an index record carries, and
the split of a chunk's bytes into sections.

A structured chunk is N sections stored back to back; a section that holds metadata for the
others ends with a lookup3 checksum of its bytes (counted as part of the section, and filtered
with it). Index records locate the sections:

- unfiltered metadata: the offset of each section 1..N-1 (section 0 starts at 0);
- filtered metadata: those offsets, the unfiltered size of each section 0..N-1, then a 4-byte
  filter mask per section (bit i set: filter i of the section's pipeline was skipped).

Decisions where the texts differ (GUIDE.md section 5):
- Offsets and unfiltered sizes are `offset size` bytes wide, the composition's first field.
  The spec says 4 ("due to API limitation"), the RFC and the prototype write 8: we write 8 and
  read either.
- Composition fields are one byte each (offset size, number of sections, number of metadata
  sections, then each metadata section's number), as the prototype encodes them; the spec's
  table does not give widths.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import FormatError
from .checksum import checksum
from .codec import Reader, Writer, uint_code

SPARSE = 0x0001             # structured chunk type bit 0: sparse chunk storage
VARLEN = 0x0002             # bit 1: variable-length chunk storage
SELECTION, VALUES = 0, 1    # the sections of a sparse chunk of fixed-size elements
OFFSET_SIZE = 8             # what we write
MAX_SECTIONS = 8


@dataclass(frozen=True, slots=True)
class Composition:
    """How every structured chunk of a dataset is made: `nsections` sections, those listed in
    `metadata` end with a checksum; section offsets and sizes are `offset_size` bytes wide."""

    offset_size: int = OFFSET_SIZE
    nsections: int = 2
    metadata: tuple[int, ...] = (SELECTION,)

    def meta_size(self, filtered: bool) -> int:
        """Bytes of one chunk's metadata in an index record."""
        n = self.nsections
        return (n - 1) * self.offset_size + ((n * self.offset_size + 4 * n) if filtered else 0)


SPARSE_FIXED = Composition()   # a sparse dataset of fixed-size elements: selection, values


def decode_composition(c: Reader, what: str) -> Composition:
    offset_size, n, k = c.fields("BBB")
    if offset_size not in (2, 4, 8):
        raise FormatError(f"{what}: structured chunk offset size {offset_size}")
    if not 1 <= n <= MAX_SECTIONS or k > n:
        raise FormatError(f"{what}: {n} structured chunk sections, {k} with metadata")
    md = c.fields(f"{k}B")
    if list(md) != sorted(set(md)) or any(s >= n for s in md):
        raise FormatError(f"{what}: metadata sections {md} of {n}")
    return Composition(offset_size, n, tuple(md))


def encode_composition(w: Writer, comp: Composition) -> None:
    w.fields(f"BBB{len(comp.metadata)}B", comp.offset_size, comp.nsections, len(comp.metadata), *comp.metadata)


@dataclass(frozen=True, slots=True)
class SectionMeta:
    """One chunk's section metadata. `offsets`: where sections 1..N-1 start in the stored chunk;
    `sizes` and `masks` (filtered datasets only): each section's unfiltered size and filter mask."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...] | None = None
    masks: tuple[int, ...] | None = None

    def bounds(self, stored: int) -> list[tuple[int, int]]:
        """(start, end) of each stored section in a chunk of `stored` bytes."""
        starts = (0, *self.offsets)
        return [(starts[i], starts[i + 1] if i + 1 < len(starts) else stored) for i in range(len(starts))]


def meta_layout(comp: Composition, filtered: bool) -> str:
    n, code = comp.nsections, uint_code(comp.offset_size)
    return code * (n - 1) + ((code * n + "I" * n) if filtered else "")


def meta_from_fields(comp: Composition, filtered: bool, values) -> SectionMeta:
    n = comp.nsections
    offsets = tuple(values[:n - 1])
    if not filtered:
        return SectionMeta(offsets)
    return SectionMeta(offsets, tuple(values[n - 1:2 * n - 1]), tuple(values[2 * n - 1:3 * n - 1]))


def meta_fields(comp: Composition, filtered: bool, meta: SectionMeta) -> tuple[int, ...]:
    n = comp.nsections
    if len(meta.offsets) != n - 1 or filtered != (meta.sizes is not None) or \
            filtered and (len(meta.sizes) != n or len(meta.masks) != n):
        raise ValueError(f"section metadata {meta} for {n} sections ({'filtered' if filtered else 'unfiltered'})")
    return (*meta.offsets, *meta.sizes, *meta.masks) if filtered else meta.offsets


def split(data: bytes | memoryview, meta: SectionMeta, what: str) -> list[memoryview]:
    """The stored sections of a chunk (still filtered), checked against the chunk's size."""
    view = memoryview(data)
    prev = 0
    for off in meta.offsets:
        if off < prev or off > len(view):
            raise FormatError(f"{what}: section offsets {meta.offsets} do not fit {len(view)} stored bytes")
        prev = off
    return [view[a:b] for a, b in meta.bounds(len(view))]


def join(sections: list[bytes]) -> tuple[bytes, tuple[int, ...]]:
    """The stored chunk and the offsets of sections 1..N-1."""
    offsets, at = [], 0
    for s in sections[:-1]:
        at += len(s)
        offsets.append(at)
    return b"".join(sections), tuple(offsets)


def unseal(section: bytes | memoryview, what: str) -> memoryview:
    """A metadata section's bytes without its checksum, which must match them (an empty
    section has none)."""
    view = memoryview(section)
    if not len(view):
        return view
    if len(view) < 4:
        raise FormatError(f"{what}: {len(view)}-byte metadata section has no room for its checksum")
    body = view[:-4]
    stored = int.from_bytes(view[-4:], "little")
    if checksum(body) != stored:
        raise FormatError(f"{what}: section checksum mismatch")
    return body


def seal(body: bytes) -> bytes:
    """A metadata section: its bytes and their lookup3 checksum."""
    return body + checksum(body).to_bytes(4, "little") if body else b""
