"""The write-ahead journal beside the file (`FILE.h5fs-journal`): in-place updates of live
metadata are logged and made durable before any of them touches the .h5 file, so a crash in the
middle of applying them is finished at the next open.

One record at a time: magic, entry count, record length, entries (absolute file position,
length, bytes), CRC-32 of all that. A record that is incomplete or fails its CRC was never acknowledged and is ignored
(nothing of it was applied: applying starts only after the record is durable).
"""

from __future__ import annotations

import os
import struct
import zlib

from ..errors import H5fsError
from .writer import FileWriter, Recorder

MAGIC = b"H5FSJRN1"
_HEAD = struct.Struct("<8sIQ")
_ENTRY = struct.Struct("<QI")
_CRC = struct.Struct("<I")
SUFFIX = ".h5fs-journal"
TAG = 1   # the journal's tag in a write recording (the .h5 file is 0)


def journal_path(path: str) -> str:
    return path + SUFFIX


def encode(entries: list[tuple[int, bytes]]) -> bytes:
    length = _HEAD.size + sum(_ENTRY.size + len(data) for _, data in entries)
    parts = [_HEAD.pack(MAGIC, len(entries), length)]
    for position, data in entries:
        parts += [_ENTRY.pack(position, len(data)), data]
    body = b"".join(parts)
    return body + _CRC.pack(zlib.crc32(body))


def decode(buf: bytes) -> list[tuple[int, bytes]] | None:
    """The entries of a complete record, or None (empty, torn or foreign)."""
    if len(buf) < _HEAD.size + _CRC.size:
        return None
    magic, count, length = _HEAD.unpack_from(buf)
    if magic != MAGIC or length + _CRC.size > len(buf) or \
            _CRC.unpack_from(buf, length)[0] != zlib.crc32(buf[:length]):
        return None
    entries, pos = [], _HEAD.size
    for _ in range(count):
        position, n = _ENTRY.unpack_from(buf, pos)
        pos += _ENTRY.size
        entries.append((position, buf[pos:pos + n]))
        pos += n
    return entries


class Journal:
    def __init__(self, path: str, recorder: Recorder | None):
        self.path = path
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise H5fsError(f"cannot open the journal {path}: {e.strerror}") from e
        self.writer = FileWriter(fd, TAG, recorder)
        self.pending = False   # a record is logged whose updates may not be durable in the file yet

    def replay(self, fd: int) -> int:
        """Apply again the record a crash left (to the .h5 file open at `fd`), durably, and
        retire it; returns how many updates it held."""
        size = os.fstat(self.writer.fd).st_size
        entries = decode(os.pread(self.writer.fd, size, 0)) if size else None
        if entries:
            target = FileWriter(fd, 0, self.writer.recorder)
            for position, data in entries:
                target.pwrite(position, data)
            target.sync()
        if size:
            self.clear()
        return len(entries or ())

    def log(self, entries: list[tuple[int, bytes]]) -> None:
        """Write the record and wait until it is durable."""
        record = encode(entries)
        self.writer.truncate(0)
        self.writer.pwrite(0, record)
        self.writer.sync()
        self.pending = True

    def clear(self) -> None:
        """The record is applied and durable in the file: retire it (durably, so a later crash
        never replays it over newer contents; the caller fsynced the file first)."""
        self.writer.truncate(0)
        self.writer.sync()
        self.pending = False

    def close(self) -> None:
        """Close it, removing the file when no record waits in it (a clean close)."""
        empty = os.fstat(self.writer.fd).st_size == 0
        os.close(self.writer.fd)
        if empty:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
