"""The only writes to the .h5 file (and its journal): positional writes and fsync barriers,
optionally recorded for crash-replay tests.

A recording (`H5FS_RECORD=path` in the daemon's environment) lists every write and every fsync in
the order the engine issued them, so a test can rebuild the files from any prefix, drop the writes
after the last barrier, and check what a crash at that point would have left.
"""

from __future__ import annotations

import os
import struct
import threading

_OP = struct.Struct("<cBQI")   # op (W = write, S = fsync, T = truncate), file tag, offset, length


class Recorder:
    """Appends every write and barrier to a log file (tests only)."""

    def __init__(self, path: str):
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self._lock = threading.Lock()

    def record(self, op: bytes, tag: int, offset: int, data: bytes = b"") -> None:
        with self._lock:
            os.write(self._fd, _OP.pack(op, tag, offset, len(data)) + data)

    def close(self) -> None:
        os.close(self._fd)


def open_recorder() -> Recorder | None:
    path = os.environ.get("H5FS_RECORD")
    return Recorder(path) if path else None


def read_recording(path: str) -> list[tuple[bytes, int, int, bytes]]:
    """The recorded operations: (op, file tag, offset, data)."""
    with open(path, "rb") as f:
        buf = f.read()
    out, pos = [], 0
    while pos + _OP.size <= len(buf):
        op, tag, offset, n = _OP.unpack_from(buf, pos)
        pos += _OP.size
        out.append((op, tag, offset, buf[pos:pos + n]))
        pos += n
    return out


class FileWriter:
    """Writes at absolute positions of one open file, and its fsync barriers."""

    def __init__(self, fd: int, tag: int, recorder: Recorder | None):
        self.fd, self.tag, self.recorder = fd, tag, recorder

    def pwrite(self, position: int, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            n = os.pwrite(self.fd, view, position)
            if self.recorder is not None:
                self.recorder.record(b"W", self.tag, position, bytes(view[:n]))
            position += n
            view = view[n:]

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)
        if self.recorder is not None:
            self.recorder.record(b"T", self.tag, size)

    def sync(self, data_only: bool = False) -> None:
        """A barrier; `data_only`: fdatasync (the data, and the size if it grew; not the times)."""
        (os.fdatasync if data_only else os.fsync)(self.fd)
        if self.recorder is not None:
            self.recorder.record(b"S", self.tag, 0)
