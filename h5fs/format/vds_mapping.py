"""The virtual dataset mapping block (III.F): a global heap object named by a version-4 layout
message of class 3 (virtual).

Version 0 (spec 3.0; libhdf5 1.10-1.14):
    version u8 = 0, entry count (size of lengths), then per entry: source file name (NUL
    terminated), source dataset name (NUL terminated), source selection, virtual selection
    (H5Sencode serializations, see selection.py); then a lookup3 checksum of everything before.

Version 1 (libhdf5 2.0, written when it saves space, e.g. for source file "."): every entry
begins with a flags byte:
    bit 0  source file name shared: instead of the string, the index (size of lengths) of an
           earlier entry whose source file name this one repeats;
    bit 1  source dataset name shared: likewise for the dataset name;
    bit 2  same file: the source file name is "." and is not stored.
Observed in libhdf5 2.0 files (h5py 3.16): flags 0x04 and no file name for ".". The shared
forms follow the same description used by other readers; an index that does not point to an
earlier entry is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import FormatError, Unsupported
from . import selection as S
from .checksum import verify
from .codec import Reader, Sizes

MAX_ENTRIES = 1 << 20
FILE_SHARED, DSET_SHARED, SAME_FILE = 0x01, 0x02, 0x04


@dataclass(frozen=True)
class Mapping:
    source_file: str           # "." means the file holding the virtual dataset
    source_dataset: str
    source_selection: S.Selection
    virtual_selection: S.Selection


@dataclass(frozen=True)
class MappingBlock:
    version: int
    entries: tuple[Mapping, ...]


def _name(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def decode(data: bytes, sizes: Sizes, what: str = "virtual dataset mapping") -> MappingBlock:
    """Decode and check one mapping block (the whole heap object, checksum included)."""
    if len(data) < 1 + sizes.length + 4:
        raise FormatError(f"{what}: block of {len(data)} bytes is too short")
    verify(data, what)
    c = Reader(memoryview(data)[:-4], 0, sizes, what)
    version = c.u8()
    if version not in (0, 1):
        raise Unsupported(f"{what}: mapping block version {version}")
    n = c.length()
    # every entry takes at least two selections of 16 bytes
    if n > MAX_ENTRIES or n * 32 > c.remaining():
        raise FormatError(f"{what}: {n} entries do not fit in {c.remaining()} bytes")
    entries: list[Mapping] = []
    for i in range(n):
        ew = f"{what} entry {i}"
        flags = c.u8() if version >= 1 else 0
        if flags & ~(FILE_SHARED | DSET_SHARED | SAME_FILE):
            raise Unsupported(f"{ew}: unknown flags {flags:#x}")
        if flags & SAME_FILE:
            if flags & FILE_SHARED:
                raise FormatError(f"{ew}: source file both shared and the same file")
            src_file = "."
        elif flags & FILE_SHARED:
            j = c.length()
            if j >= i:
                raise FormatError(f"{ew}: shared source file name refers to entry {j}")
            src_file = entries[j].source_file
        else:
            src_file = _name(c.cstring())
        if flags & DSET_SHARED:
            j = c.length()
            if j >= i:
                raise FormatError(f"{ew}: shared source dataset name refers to entry {j}")
            src_dset = entries[j].source_dataset
        else:
            src_dset = _name(c.cstring())
        src_sel = S.decode(c, f"{ew}: source selection")
        virt_sel = S.decode(c, f"{ew}: virtual selection")
        entries.append(Mapping(src_file, src_dset, src_sel, virt_sel))
    if c.remaining():
        raise FormatError(f"{what}: {c.remaining()} bytes left after {n} entries")
    return MappingBlock(version, tuple(entries))
