"""Local heap (III.D): the name store of old-style groups and external-file lists."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import FormatError


@dataclass(frozen=True)
class LocalHeap:
    data: bytes

    def string(self, offset: int) -> bytes:
        """The NUL-terminated string at `offset` in the data segment."""
        if offset < 0 or offset >= len(self.data):
            raise FormatError(f"local heap: offset {offset} outside the {len(self.data)}-byte data segment")
        end = self.data.find(b"\0", offset)
        if end < 0:
            raise FormatError(f"local heap: unterminated string at offset {offset}")
        return self.data[offset:end]


def read(reader, address: int | None, what: str) -> LocalHeap:
    s = reader.sizes
    c = reader.cursor(address, 8 + 2 * s.length + s.offset, f"{what}: local heap")
    c.signature(b"HEAP")
    if c.u8() != 0:
        raise FormatError(f"{what}: local heap version is not 0")
    c.skip(3)
    size = c.length()
    c.length()  # free list head
    data_addr = c.offset()
    return LocalHeap(reader.read(data_addr, size, f"{what}: local heap data"))
