"""A bounds-checked reader over a byte buffer that knows the file's offset and length sizes."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import FormatError


@dataclass(frozen=True)
class Sizes:
    """Size of offsets and size of lengths from the superblock (2, 4 or 8 bytes each)."""

    offset: int = 8
    length: int = 8

    @property
    def undefined(self) -> int:
        """The 'undefined address' value: all bits set at the offset width."""
        return (1 << (8 * self.offset)) - 1


class Cursor:
    """Sequential little-endian decoding; every read is checked against the buffer's end."""

    __slots__ = ("buf", "pos", "sizes", "what", "_bytes")

    def __init__(self, buf: bytes | memoryview, pos: int = 0, sizes: Sizes = Sizes(), what: str = "structure"):
        self.buf = memoryview(buf) if not isinstance(buf, memoryview) else buf
        self.pos = pos
        self.sizes = sizes
        self.what = what
        self._bytes: bytes | None = None

    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def need(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.buf):
            raise FormatError(f"{self.what}: truncated (need {n} bytes at {self.pos}, have {len(self.buf) - self.pos})")

    def bytes(self, n: int) -> bytes:
        self.need(n)
        out = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return out

    def skip(self, n: int) -> None:
        self.need(n)
        self.pos += n

    def uint(self, n: int) -> int:
        self.need(n)
        v = int.from_bytes(self.buf[self.pos:self.pos + n], "little")
        self.pos += n
        return v

    def u8(self) -> int:
        return self.uint(1)

    def u16(self) -> int:
        return self.uint(2)

    def u32(self) -> int:
        return self.uint(4)

    def u64(self) -> int:
        return self.uint(8)

    def offset(self) -> int | None:
        """An address, or None for the undefined address."""
        v = self.uint(self.sizes.offset)
        return None if v == self.sizes.undefined else v

    def length(self) -> int:
        return self.uint(self.sizes.length)

    def signature(self, sig: bytes) -> None:
        got = self.bytes(len(sig))
        if got != sig:
            raise FormatError(f"{self.what}: bad signature {got!r}, expected {sig!r}")

    def cstring(self, limit: int | None = None) -> bytes:
        """A NUL-terminated string (the NUL is consumed, not returned)."""
        end = len(self.buf) if limit is None else min(len(self.buf), self.pos + limit)
        if self._bytes is None:  # one copy per cursor, so a run of strings stays linear
            self._bytes = self.buf.tobytes()
        idx = self._bytes.find(b"\0", self.pos, end)
        if idx < 0:
            raise FormatError(f"{self.what}: unterminated string at {self.pos}")
        s = self._bytes[self.pos:idx]
        self.pos = idx + 1
        return s
