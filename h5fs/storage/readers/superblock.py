"""Finds the superblock in a file (at 0, 512, 1024, ...) and reads it with its driver information
block."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Callable

from ...errors import NotHDF5
from ...format.superblock import (DRIVER_HEAD_SIZE, MAX_SEARCH, SIGNATURE, Superblock, decode,
                                  decode_driver_info, driver_info_length)


def find_signature(fd: int, pread: Callable[[int, int, int], bytes] = os.pread) -> int:
    """Absolute position of the signature: 0 or a power of two >= 512 (a user block precedes it)."""
    size = os.fstat(fd).st_size
    pos = 0
    while pos + len(SIGNATURE) <= min(size, MAX_SEARCH):
        if pread(fd, len(SIGNATURE), pos) == SIGNATURE:
            return pos
        pos = 512 if pos == 0 else pos * 2
    raise NotHDF5("not an HDF5 file (no HDF5 signature found)")


def read(fd: int, pread: Callable[[int, int, int], bytes] = os.pread) -> Superblock:
    """The superblock (`pread`: as os.pread, e.g. through a crash's journal)."""
    loc = find_signature(fd, pread)
    sb = decode(pread(fd, 256 + 2 * 8 * 8, loc), loc)
    if sb.driver_info_address is None:
        return sb
    at = loc + sb.driver_info_address
    length = driver_info_length(pread(fd, DRIVER_HEAD_SIZE, at), sb.driver_info_address)
    return replace(sb, driver_info=decode_driver_info(pread(fd, length, at)))


def recorded_eoa(fd: int) -> int | None:
    """The end of allocation the superblock records, or None when there is no readable one."""
    try:
        return read(fd).eof_address
    except Exception:   # noqa: BLE001 -- any failure means no superblock to go by
        return None
