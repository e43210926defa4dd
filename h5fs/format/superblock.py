"""Format signature and superblock (II.A), versions 0-3, searched for at 0, 512, 1024, ...."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import FormatError, Unsupported
from . import checksum, symbol_table_entry
from .codec import Reader, Sizes

SIGNATURE = b"\x89HDF\r\n\x1a\n"
MAX_SEARCH = 1 << 40


@dataclass(frozen=True)
class Superblock:
    version: int
    location: int                  # absolute file position of the signature
    sizes: Sizes
    base_address: int
    root_header_address: int
    extension_address: int | None = None
    root_entry: symbol_table_entry.SymbolTableEntry | None = None  # versions 0-1
    group_leaf_k: int = 4
    group_internal_k: int = 16
    indexed_storage_k: int = 32
    eof_address: int = 0


def find_signature(fd: int) -> int:
    """Absolute position of the signature: 0 or a power of two >= 512 (a user block precedes it)."""
    size = os.fstat(fd).st_size
    pos = 0
    while pos + len(SIGNATURE) <= min(size, MAX_SEARCH):
        if os.pread(fd, len(SIGNATURE), pos) == SIGNATURE:
            return pos
        pos = 512 if pos == 0 else pos * 2
    raise FormatError("not an HDF5 file (no HDF5 signature found)")


def read(fd: int) -> Superblock:
    loc = find_signature(fd)
    head = os.pread(fd, 256 + 2 * 8 * 8, loc)
    c = Reader(head, len(SIGNATURE), what="superblock")
    version = c.u8()
    if version in (0, 1):
        return _decode_v0_v1(c, version, loc)
    if version in (2, 3):
        return _decode_v2_v3(c, version, loc)
    raise Unsupported(f"superblock version {version}")


def _sizes(offset: int, length: int) -> Sizes:
    if offset not in (2, 4, 8, 16) or length not in (2, 4, 8, 16):
        raise FormatError(f"superblock: invalid size of offsets/lengths ({offset}/{length})")
    if offset > 8 or length > 8:
        raise Unsupported(f"superblock: {offset}-byte offsets / {length}-byte lengths")
    return Sizes(offset, length)


def _decode_v0_v1(c: Reader, version: int, loc: int) -> Superblock:
    c.u8()  # free-space version
    c.u8()  # root group symbol table entry version
    c.u8()
    c.u8()  # shared header message format version
    sizes = _sizes(c.u8(), c.u8())
    c.u8()
    leaf_k = c.u16()
    internal_k = c.u16()
    c.u32()  # file consistency flags
    istore_k = 32
    if version == 1:
        istore_k = c.u16()
        c.u16()
    if leaf_k == 0 or internal_k == 0 or istore_k == 0:
        raise FormatError("superblock: B-tree K value of zero")
    c.sizes = sizes
    base = c.uint(sizes.offset)
    c.offset()  # free-space info address: always undefined
    eof = c.uint(sizes.offset)
    c.offset()  # driver information block
    entry = symbol_table_entry.decode(c)
    if entry.header_address is None:
        raise FormatError("superblock: root group has no object header address")
    return Superblock(version, loc, sizes, base, entry.header_address, root_entry=entry,
                      group_leaf_k=leaf_k, group_internal_k=internal_k, indexed_storage_k=istore_k,
                      eof_address=eof)


def _decode_v2_v3(c: Reader, version: int, loc: int) -> Superblock:
    sizes = _sizes(c.u8(), c.u8())
    c.u8()  # consistency flags
    c.sizes = sizes
    base = c.uint(sizes.offset)
    ext = c.offset()
    eof = c.uint(sizes.offset)
    root = c.offset()
    end = c.pos
    c.u32()
    checksum.verify(c.buf[:end + 4], "superblock")
    if root is None:
        raise FormatError("superblock: root group has no object header address")
    return Superblock(version, loc, sizes, base, root, extension_address=ext, eof_address=eof)
