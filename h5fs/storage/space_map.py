"""The file's space map: the extents every structure reachable from the superblock occupies, the
free space the file's free-space managers list, and what is wrong (storage/space_walk.py walks the
file to make it); `space_problems` and `gaps` read it.

Every size is the block's size on disk as libhdf5 allocates it (a v1 B-tree node has room for 2K
entries, a shared-message list for its cutoff, a paged array data block holds all its pages).
Space a persistent free-space manager lists is free (`SpaceMap.free`, each section with the slot
of its manager in the File Space Info message, kept in `SpaceMap.file_space`), not used; the
managers' own blocks are used. Raw data (chunks, contiguous data, global heap collections, huge
fractal heap objects: libhdf5's H5FD_MEM_DRAW and _GHEAP allocations) is marked `raw`: paged
aggregation keeps it in pages of its own.

A structure the walk cannot follow is a Problem naming the object and the structure. A reference
that names no object the walk met is a warning (`SpaceMap.warnings`), not a problem: libhdf5
leaves such references behind whenever it deletes an object.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass, field
from typing import Callable

from ..format.messages import file_space_info

FILE = "(file)"     # the owner named for the file's own structures (superblock and what it names)
MAX_OVERLAPS = 1000   # overlap problems named one by one; the rest are counted
# what decoding a hostile file can raise where a bounds check was missed (as the model's guard)
UNEXPECTED = (ArithmeticError, LookupError, ValueError, TypeError, struct.error, MemoryError, RecursionError,
              AssertionError, BufferError)


@dataclass(frozen=True, slots=True)
class Extent:
    """Bytes [address, address + size) of the file (addresses relative to the superblock, as
    every address in the file), held by `structure` of the object at `path`."""

    address: int
    size: int
    path: str
    structure: str
    raw: bool = False             # raw data (module docstring), not metadata
    slot: int | None = None       # a free section: the slot of the file's manager listing it
    owner: int | None = None      # the header address of the object it belongs to
    seen: int = 0                 # the walk's `clock` when it met the extent

    @property
    def end(self) -> int:
        return self.address + self.size

    @property
    def what(self) -> str:
        return f"{self.path}: {self.structure}"


@dataclass(frozen=True, slots=True)
class Problem:
    path: str
    structure: str
    message: str
    objects: tuple[int, ...] = ()   # header addresses of the objects it concerns (edits refuse them)

    def __str__(self) -> str:
        return f"{self.path}: {self.structure}: {self.message}"


@dataclass
class SpaceMap:
    extents: list[Extent] = field(default_factory=list)   # used, in the order the walk met them
    free: list[Extent] = field(default_factory=list)      # sections of the file's free-space managers
    file_space: file_space_info.FileSpaceInfo | None = None   # the File Space Info message
    problems: list[Problem] = field(default_factory=list)
    # references that name no object the walk met (libhdf5 leaves them when it deletes an
    # object): a warning each, naming the holder; `dangling`, the addresses they name
    warnings: list[Problem] = field(default_factory=list)
    dangling: set[int] = field(default_factory=set)
    objects: int = 0
    chunks: int = 0


Progress = Callable[[int, int], None]   # (objects walked, chunks met)


def space_problems(used: list[Extent], free: list[Extent], eoa: int) -> list[Problem]:
    """Extents (sorted by address) past the end of allocation, extents that overlap, free
    sections something uses; each problem names the objects concerned."""
    out = [Problem(e.path, e.structure, f"{e.address}+{e.size} lies past the end of allocation ({eoa})", _owners(e))
           for e in used if e.end > eoa]
    overlaps, reach = 0, None
    for e in used:
        if reach is not None and e.address < reach.end:
            overlaps += 1
            if overlaps <= MAX_OVERLAPS:
                out.append(Problem(e.path, e.structure, f"{e.address}+{e.size} overlaps {reach.what} at "
                                                        f"{reach.address}+{reach.size}", _owners(e, reach)))
        if reach is None or e.end > reach.end:
            reach = e
    if overlaps > MAX_OVERLAPS:
        out.append(Problem(FILE, "space map", f"{overlaps - MAX_OVERLAPS} more overlapping extents"))
    starts = [e.address for e in used]
    reaches, furthest = [], None   # reaches[i]: the extent reaching furthest among used[:i + 1]
    for e in used:
        furthest = e if furthest is None or e.end > furthest.end else furthest
        reaches.append(furthest)
    for s in free:
        i = bisect.bisect_left(starts, s.end) - 1
        if s.end > eoa:
            out.append(Problem(s.path, s.structure, f"{s.address}+{s.size} lies past the end of allocation ({eoa})"))
        elif i >= 0 and reaches[i].end > s.address:
            hit = reaches[i]
            out.append(Problem(s.path, s.structure, f"{s.address}+{s.size} is listed free but {hit.what} uses "
                                                    f"{hit.address}+{hit.size}", _owners(hit)))
    return out


def _owners(*extents: Extent) -> tuple[int, ...]:
    return tuple(e.owner for e in extents if e.owner is not None)


def gaps(extents: list[Extent], end: int) -> list[tuple[int, int]]:
    """(address, size) of the space below `end` no extent covers (extents sorted by address)."""
    out, reach = [], 0
    for e in extents:
        if e.address > reach:
            out.append((reach, min(e.address, end) - reach))
        reach = max(reach, e.end)
        if reach >= end:
            return [g for g in out if g[1] > 0]
    if reach < end:
        out.append((reach, end - reach))
    return [g for g in out if g[1] > 0]
