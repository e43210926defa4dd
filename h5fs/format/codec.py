"""The one codec every format module decodes and encodes with: a bounds-checked Reader and a Writer.

Both know the file's size of offsets and size of lengths. Fixed runs of fields go through
precompiled `struct.Struct`s (`Sizes.layout`): a run of fields costs one call instead of one per
field. In a layout spec, `O` stands for an offset and `L` for a length at this file's widths;
every other character is a `struct` code (little-endian is implied).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ..errors import FormatError

_CODE = {1: "B", 2: "H", 4: "I", 8: "Q"}


def uint_code(n: int) -> str:
    """A struct code for an unsigned field of n bytes: a native integer code where one exists,
    otherwise `{n}s` (read back with int.from_bytes)."""
    return _CODE.get(n, f"{n}s")


def as_uint(v: int | bytes) -> int:
    return v if isinstance(v, int) else int.from_bytes(v, "little")


def uint_field(v: int, n: int) -> int | bytes:
    """The value to pack at `uint_code(n)`."""
    return v if n in (1, 2, 4, 8) else v.to_bytes(n, "little")


@dataclass(frozen=True, slots=True)
class Sizes:
    """Size of offsets and size of lengths from the superblock (2, 4 or 8 bytes each)."""

    offset: int = 8
    length: int = 8
    _layouts: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    @property
    def undefined(self) -> int:
        """The 'undefined address' value: all bits set at the offset width."""
        return (1 << (8 * self.offset)) - 1

    def layout(self, spec: str) -> struct.Struct:
        """The little-endian Struct of `spec` (`O` = offset, `L` = length), built once per spec."""
        st = self._layouts.get(spec)
        if st is None:
            fmt = spec.replace("O", uint_code(self.offset)).replace("L", uint_code(self.length))
            st = self._layouts[spec] = struct.Struct("<" + fmt)
        return st

    def address(self, value: int) -> int | None:
        """A decoded offset field as an address: None for the undefined address."""
        return None if value == self.undefined else value

    def raw_address(self, address: int | None) -> int:
        """An address as its field value: the undefined address for None."""
        return self.undefined if address is None else address


DEFAULT_SIZES = Sizes()


class Reader:
    """Sequential little-endian decoding; every read is checked against the buffer's end."""

    __slots__ = ("buf", "pos", "sizes", "what", "_bytes")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0, sizes: Sizes = DEFAULT_SIZES,
                 what: str = "structure"):
        self.buf = buf if isinstance(buf, memoryview) else memoryview(buf)
        self.pos = pos
        self.sizes = sizes
        self.what = what
        self._bytes: bytes | None = None

    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def need(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.buf):
            raise FormatError(f"{self.what}: truncated (need {n} bytes at {self.pos}, have {len(self.buf) - self.pos})")

    def unpack(self, st: struct.Struct) -> tuple:
        """The fields of `st` at the current position (one bounds check for the whole run)."""
        pos = self.pos
        if pos + st.size > len(self.buf):
            self.need(st.size)
        self.pos = pos + st.size
        return st.unpack_from(self.buf, pos)

    def fields(self, spec: str) -> tuple:
        """`unpack` of a layout spec (`O` = offset, `L` = length)."""
        return self.unpack(self.sizes.layout(spec))

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
        return self.sizes.address(self.uint(self.sizes.offset))

    def length(self) -> int:
        return self.uint(self.sizes.length)

    def signature(self, sig: bytes) -> None:
        got = self.bytes(len(sig))
        if got != sig:
            raise FormatError(f"{self.what}: bad signature {got!r}, expected {sig!r}")

    def cstring(self, limit: int | None = None) -> bytes:
        """A NUL-terminated string (the NUL is consumed, not returned)."""
        end = len(self.buf) if limit is None else min(len(self.buf), self.pos + limit)
        if self._bytes is None:  # one copy per reader, so a run of strings stays linear
            self._bytes = self.buf.tobytes()
        idx = self._bytes.find(b"\0", self.pos, end)
        if idx < 0:
            raise FormatError(f"{self.what}: unterminated string at {self.pos}")
        s = self._bytes[self.pos:idx]
        self.pos = idx + 1
        return s


class Writer:
    """Sequential little-endian encoding into a growing buffer (the mirror of Reader)."""

    __slots__ = ("buf", "sizes")

    def __init__(self, sizes: Sizes = DEFAULT_SIZES):
        self.buf = bytearray()
        self.sizes = sizes

    @property
    def pos(self) -> int:
        return len(self.buf)

    def getvalue(self) -> bytes:
        return bytes(self.buf)

    def pack(self, st: struct.Struct, *values: int) -> None:
        self.buf += st.pack(*values)

    def fields(self, spec: str, *values: int) -> None:
        """`pack` of a layout spec (`O` = offset, `L` = length); addresses as field values."""
        self.buf += self.sizes.layout(spec).pack(*values)

    def patch(self, pos: int, st: struct.Struct, *values: int) -> None:
        """Overwrite fields already written at `pos` (sizes and checksums known only at the end)."""
        st.pack_into(self.buf, pos, *values)

    def bytes(self, data: bytes | bytearray | memoryview) -> None:
        self.buf += data

    def zeros(self, n: int) -> None:
        self.buf += bytes(n)

    def uint(self, value: int, n: int) -> None:
        self.buf += value.to_bytes(n, "little")

    def u8(self, value: int) -> None:
        self.buf.append(value)

    def u16(self, value: int) -> None:
        self.uint(value, 2)

    def u32(self, value: int) -> None:
        self.uint(value, 4)

    def u64(self, value: int) -> None:
        self.uint(value, 8)

    def offset(self, address: int | None) -> None:
        """An address; None writes the undefined address."""
        self.uint(self.sizes.raw_address(address), self.sizes.offset)

    def length(self, value: int) -> None:
        self.uint(value, self.sizes.length)

    def cstring(self, s: bytes) -> None:
        self.buf += s
        self.buf.append(0)

    def align(self, multiple: int, start: int = 0) -> None:
        """Zero-pad until (pos - start) is a multiple of `multiple`."""
        self.buf += bytes(-(len(self.buf) - start) % multiple)


def encoded(encode, value, sizes: Sizes = DEFAULT_SIZES) -> bytes:
    """The bytes `encode(writer, value)` writes: a message body on its own."""
    w = Writer(sizes)
    encode(w, value)
    return w.getvalue()
