"""Raw-byte sources for a dataset's row-major element bytes: the `RawSource` interface and the
unchunked layouts (contiguous, compact, never-allocated)."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from ..errors import FormatError
from .blockio import BlockReader
from .byte_source import NOWAIT


def fill_pattern(fill: bytes | None, itemsize: int, start: int, size: int) -> bytes:
    """`size` bytes of the repeated fill value (one element's bytes, or None for zeros), as seen
    from byte `start` of the array."""
    if not fill or not any(fill):
        return bytes(size)
    phase = start % itemsize
    reps = (phase + size) // itemsize + 1
    return (fill * reps)[phase:phase + size]


class RawSource(ABC):
    """Bytes [0, size) of a dataset in row-major order."""

    def __init__(self, size: int):
        self.size = size

    @abstractmethod
    def read(self, offset: int, size: int) -> bytes | memoryview:
        """Bytes [offset, offset+size) clipped to the array (a memoryview of the one buffer a
        read was assembled in: no copy); may do I/O and decoding."""

    def read_cached(self, offset: int, size: int) -> bytes | bytearray | memoryview | None:
        """The same bytes (any bytes-like object: the FUSE reply takes a buffer) without I/O
        or decoding, or None when that would need them."""
        return None

    @abstractmethod
    def allocated(self) -> int:
        """Bytes the data occupies in the file."""

    def footprint(self) -> int:
        """Bytes of memory this source holds (sources are cached in the file's metadata cache)."""
        return 256

    def clip(self, offset: int, size: int) -> tuple[int, int]:
        offset = max(0, offset)
        return offset, max(0, min(size, self.size - offset))


class FillSource(RawSource):
    """Storage never allocated: every element reads as the fill value."""

    def __init__(self, size: int, fill: bytes | None, itemsize: int):
        super().__init__(size)
        self.fill, self.itemsize = fill, itemsize

    def read(self, offset: int, size: int) -> bytes:
        offset, size = self.clip(offset, size)
        return fill_pattern(self.fill, self.itemsize, offset, size)

    read_cached = read

    def allocated(self) -> int:
        return 0


class CompactSource(RawSource):
    def __init__(self, size: int, data: bytes, what: str):
        super().__init__(size)
        if len(data) < size:
            raise FormatError(f"{what}: compact data holds {len(data)} bytes, dataset needs {size}")
        self.data = data

    def footprint(self) -> int:
        return 256 + len(self.data)

    def read(self, offset: int, size: int) -> bytes:
        offset, size = self.clip(offset, size)
        return self.data[offset:offset + size]

    read_cached = read

    def allocated(self) -> int:
        return self.size


class ContiguousSource(RawSource):
    """One extent in the file; read straight from it (the page cache or the block cache is the
    cache)."""

    def __init__(self, size: int, reader: BlockReader, address: int, what: str):
        super().__init__(size)
        reader.check_range(address, size, f"{what}: contiguous data")
        self.bytes, self.start = reader.source, reader.base + address

    def read(self, offset: int, size: int) -> bytes:
        offset, size = self.clip(offset, size)
        return self.bytes.pread(size, self.start + offset)

    def read_cached(self, offset: int, size: int) -> memoryview | None:
        """The bytes when the page cache (or block cache) holds them all (RWF_NOWAIT never waits
        for a disk or a network), else None."""
        offset, size = self.clip(offset, size)
        buf = memoryview(np.empty(size, np.uint8))   # not zeroed first, as a bytearray would be
        try:
            n = self.bytes.preadv([buf], self.start + offset, NOWAIT)
        except OSError:   # EAGAIN: not all cached; EOPNOTSUPP: the file system cannot say
            return None
        return buf if n == size else None

    def allocated(self) -> int:
        return self.size
