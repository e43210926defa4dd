"""Finds the superblock in a file (at 0, 512, 1024, ...) and reads it with its driver information
block; `extents`: the blocks they occupy."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from ..errors import NotHDF5
from ..format.superblock import (DRIVER_HEAD_SIZE, MAX_SEARCH, SIGNATURE, Superblock, decode,
                                  decode_driver_info, driver_info_length, encode)
from .byte_source import ByteSource, as_source

if TYPE_CHECKING:
    from .extent_sink import ExtentSink

Pread = Callable[[int, int], bytes]   # (size, position) -> bytes


def find_signature(source: int | ByteSource, pread: Pread | None = None) -> int:
    """Absolute position of the signature: 0 or a power of two >= 512 (a user block precedes it)."""
    source = as_source(source)
    pread = pread or source.pread
    size = source.end()
    pos = 0
    while pos + len(SIGNATURE) <= min(size, MAX_SEARCH):
        if pread(len(SIGNATURE), pos) == SIGNATURE:
            return pos
        pos = 512 if pos == 0 else pos * 2
    raise NotHDF5("not an HDF5 file (no HDF5 signature found)")


def read(source: int | ByteSource, pread: Pread | None = None) -> Superblock:
    """The superblock of the file at `source` (an fd: a local file; `pread`: (size, position)
    through a crash's journal)."""
    source = as_source(source)
    pread = pread or source.pread
    loc = find_signature(source, pread)
    sb = decode(pread(256 + 2 * 8 * 8, loc), loc)
    if sb.driver_info_address is None:
        return sb
    at = loc + sb.driver_info_address
    length = driver_info_length(pread(DRIVER_HEAD_SIZE, at), sb.driver_info_address)
    return replace(sb, driver_info=decode_driver_info(pread(length, at)))


def extents(out: ExtentSink, sb: Superblock, path: str) -> None:
    """The superblock's and its driver information block's extents (the extension is an object
    header)."""
    out.add(0, len(encode(sb)), path, "superblock")
    if sb.driver_info is not None:
        out.add(sb.driver_info_address, DRIVER_HEAD_SIZE + len(sb.driver_info.data), path, "driver information block")


def recorded_eoa(fd: int) -> int | None:
    """The end of allocation the superblock records, or None when there is no readable one."""
    try:
        return read(fd).eof_address
    except Exception:   # noqa: BLE001 -- any failure means no superblock to go by
        return None


def allocated_end(fd: int) -> int | None:
    """The absolute file position where the superblock says allocated space ends (its end of
    allocation is relative to the base address), or None without a readable superblock."""
    try:
        sb = read(fd)
    except Exception:   # noqa: BLE001 -- any failure means no superblock to go by
        return None
    return sb.location + sb.eof_address - sb.base_address
