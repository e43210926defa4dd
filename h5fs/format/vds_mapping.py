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

`decode(data, sizes)` and `encode(block, sizes)` work on the whole heap object (checksum
included). Entries keep their flags and shared-name indexes, so a block encodes back as it was
read. Names are UTF-8; a name that is not (read as Latin-1) encodes back as UTF-8.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import FormatError, Unsupported
from . import selection as SEL
from .checksum import sealed, verify
from .codec import Reader, Sizes, Writer

MAX_ENTRIES = 1 << 20
FILE_SHARED, DSET_SHARED, SAME_FILE = 0x01, 0x02, 0x04


@dataclass(frozen=True, slots=True)
class Mapping:
    source_file: str           # "." means the file holding the virtual dataset
    source_dataset: str
    source_selection: SEL.Selection
    virtual_selection: SEL.Selection
    flags: int = 0                      # version 1: FILE_SHARED | DSET_SHARED | SAME_FILE
    file_index: int | None = None       # FILE_SHARED: the entry whose source file name this repeats
    dataset_index: int | None = None    # DSET_SHARED: likewise for the source dataset name


@dataclass(frozen=True, slots=True)
class MappingBlock:
    version: int
    entries: tuple[Mapping, ...]


def _name(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _shared(c: Reader, i: int, what: str) -> int:
    """The index of an earlier entry whose name entry i repeats."""
    j = c.length()
    if j >= i:
        raise FormatError(f"{what} refers to entry {j}")
    return j


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
        file_index = dset_index = None
        if flags & SAME_FILE:
            if flags & FILE_SHARED:
                raise FormatError(f"{ew}: source file both shared and the same file")
            src_file = "."
        elif flags & FILE_SHARED:
            file_index = _shared(c, i, f"{ew}: shared source file name")
            src_file = entries[file_index].source_file
        else:
            src_file = _name(c.cstring())
        if flags & DSET_SHARED:
            dset_index = _shared(c, i, f"{ew}: shared source dataset name")
            src_dset = entries[dset_index].source_dataset
        else:
            src_dset = _name(c.cstring())
        src_sel = SEL.decode(c, f"{ew}: source selection")
        virt_sel = SEL.decode(c, f"{ew}: virtual selection")
        entries.append(Mapping(src_file, src_dset, src_sel, virt_sel, flags, file_index, dset_index))
    if c.remaining():
        raise FormatError(f"{what}: {c.remaining()} bytes left after {n} entries")
    return MappingBlock(version, tuple(entries))


def encode(block: MappingBlock, sizes: Sizes) -> bytes:
    """The heap object of a mapping block, checksum included."""
    w = Writer(sizes)
    w.u8(block.version)
    w.length(len(block.entries))
    for m in block.entries:
        if block.version >= 1:
            w.u8(m.flags)
        if m.flags & FILE_SHARED:
            w.length(m.file_index)
        elif not m.flags & SAME_FILE:
            w.cstring(m.source_file.encode("utf-8"))
        if m.flags & DSET_SHARED:
            w.length(m.dataset_index)
        else:
            w.cstring(m.source_dataset.encode("utf-8"))
        SEL.encode(w, m.source_selection)
        SEL.encode(w, m.virtual_selection)
    return sealed(w.buf)
