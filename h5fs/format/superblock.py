"""Format signature and superblock (II.A), versions 0-3, and the driver information block (II.B).

The superblock is searched for at 0, 512, 1024, ... (a user block precedes it). Versions 0 and 1
end with the root group's symbol table entry; versions 2 and 3 with a checksum. The reserved
bytes of versions 0 and 1 are undefined and encode as zeros, as libhdf5 writes them.

Pure bytes <-> records: `decode(buf, location)` and `encode(sb)`, `decode_driver_info` and
`encode_driver_info`; h5fs.storage.superblock finds the signature in a file and reads both.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import FormatError, Unsupported
from . import checksum, symbol_table_entry
from .codec import Reader, Sizes, Writer

SIGNATURE = b"\x89HDF\r\n\x1a\n"
MAX_SEARCH = 1 << 40
MAX_DRIVER_INFO = 1 << 20
# signature, version, free-space version, root entry version, reserved, shared header version,
# size of offsets, size of lengths, reserved, group leaf K, group internal K, consistency flags
_V01 = struct.Struct("<8sBBBxBBBxHHI")
_V1_ISTORE = "H2x"      # indexed storage K, reserved
_V01_ADDRESSES = "OOOO"  # base, free-space info, end of file, driver information block
# signature, version, size of offsets, size of lengths, consistency flags
_V23 = struct.Struct("<8sBBBB")
_V23_ADDRESSES = "OOOO"  # base, superblock extension, end of file, root group object header
_DRIVER = struct.Struct("<B3xI8s")   # version, reserved, size of the driver information, driver id
DRIVER_HEAD_SIZE = _DRIVER.size


@dataclass(frozen=True, slots=True)
class DriverInfo:
    version: int
    driver_id: bytes               # 8 ASCII bytes, e.g. b"NCSAfami", b"NCSAmult"
    data: bytes                    # the driver-specific information, kept whole


@dataclass(frozen=True, slots=True)
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
    consistency_flags: int = 0
    free_space_version: int = 0    # versions 0-1, like the fields below
    root_entry_version: int = 0
    shared_header_version: int = 0
    free_space_address: int | None = None
    driver_info_address: int | None = None
    driver_info: DriverInfo | None = None   # read with the superblock when it names one


def decode(buf: bytes, location: int = 0) -> Superblock:
    """The superblock whose signature starts `buf` (the driver information block not included)."""
    c = Reader(buf, 0, what="superblock")
    c.signature(SIGNATURE)
    version = c.u8()
    c.pos = 0
    if version in (0, 1):
        return _decode_v0_v1(c, version, location)
    if version in (2, 3):
        return _decode_v2_v3(c, version, location)
    raise Unsupported(f"superblock version {version}")


def _sizes(offset: int, length: int) -> Sizes:
    if offset not in (2, 4, 8, 16) or length not in (2, 4, 8, 16):
        raise FormatError(f"superblock: invalid size of offsets/lengths ({offset}/{length})")
    if offset > 8 or length > 8:
        raise Unsupported(f"superblock: {offset}-byte offsets / {length}-byte lengths")
    return Sizes(offset, length)


def _decode_v0_v1(c: Reader, version: int, loc: int) -> Superblock:
    _, _, fs_version, entry_version, shared_version, offset, length, leaf_k, internal_k, flags = c.unpack(_V01)
    sizes = _sizes(offset, length)
    istore_k = 32
    if version == 1:
        istore_k, = c.fields(_V1_ISTORE)
    if leaf_k == 0 or internal_k == 0 or istore_k == 0:
        raise FormatError("superblock: B-tree K value of zero")
    c.sizes = sizes
    base, free_space, eof, driver = c.fields(_V01_ADDRESSES)
    entry = symbol_table_entry.decode(c)
    if entry.header_address is None:
        raise FormatError("superblock: root group has no object header address")
    return Superblock(version, loc, sizes, base, entry.header_address, root_entry=entry,
                      group_leaf_k=leaf_k, group_internal_k=internal_k, indexed_storage_k=istore_k,
                      eof_address=eof, consistency_flags=flags, free_space_version=fs_version,
                      root_entry_version=entry_version, shared_header_version=shared_version,
                      free_space_address=sizes.address(free_space), driver_info_address=sizes.address(driver))


def _decode_v2_v3(c: Reader, version: int, loc: int) -> Superblock:
    _, _, offset, length, flags = c.unpack(_V23)
    sizes = _sizes(offset, length)
    c.sizes = sizes
    base, ext, eof, root = c.fields(_V23_ADDRESSES)
    end = c.pos
    c.u32()
    checksum.verify(c.buf[:end + 4], "superblock")
    root = sizes.address(root)
    if root is None:
        raise FormatError("superblock: root group has no object header address")
    return Superblock(version, loc, sizes, base, root, extension_address=sizes.address(ext), eof_address=eof,
                      consistency_flags=flags)


def encode(sb: Superblock) -> bytes:
    """The superblock's bytes, from the signature to the root entry (v0/v1) or checksum (v2/v3)."""
    s = sb.sizes
    w = Writer(s)
    if sb.version in (0, 1):
        w.pack(_V01, SIGNATURE, sb.version, sb.free_space_version, sb.root_entry_version, sb.shared_header_version,
               s.offset, s.length, sb.group_leaf_k, sb.group_internal_k, sb.consistency_flags)
        if sb.version == 1:
            w.fields(_V1_ISTORE, sb.indexed_storage_k)
        w.fields(_V01_ADDRESSES, sb.base_address, s.raw_address(sb.free_space_address), sb.eof_address,
                 s.raw_address(sb.driver_info_address))
        symbol_table_entry.encode(w, sb.root_entry)
        return w.getvalue()
    w.pack(_V23, SIGNATURE, sb.version, s.offset, s.length, sb.consistency_flags)
    w.fields(_V23_ADDRESSES, sb.base_address, s.raw_address(sb.extension_address), sb.eof_address,
             s.raw_address(sb.root_header_address))
    return checksum.sealed(w.buf)


def driver_info_length(head: bytes, address: int | None) -> int:
    """Bytes of the driver information block at `address` from its first DRIVER_HEAD_SIZE bytes
    (fewer: the block lies outside the file)."""
    if len(head) < _DRIVER.size:
        raise FormatError(f"superblock: driver information block at {address} lies outside the file")
    size = _DRIVER.unpack(head)[1]
    if size > MAX_DRIVER_INFO:
        raise FormatError(f"superblock: driver information of {size} bytes")
    return _DRIVER.size + size


def decode_driver_info(buf: bytes) -> DriverInfo:
    c = Reader(buf, 0, what="superblock: driver information block")
    version, size, driver_id = c.unpack(_DRIVER)
    if version != 0:
        raise Unsupported(f"superblock: driver information block version {version}")
    return DriverInfo(version, driver_id, c.bytes(size))


def encode_driver_info(info: DriverInfo) -> bytes:
    return _DRIVER.pack(info.version, len(info.data), info.driver_id) + info.data
