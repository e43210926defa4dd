"""The few msgpack types Blosc2 frame headers and metalayers use (read only)."""

from __future__ import annotations

from typing import Any

from ...errors import FormatError

_FIXED = {0xcc: (1, False), 0xcd: (2, False), 0xce: (4, False), 0xcf: (8, False),
          0xd0: (1, True), 0xd1: (2, True), 0xd2: (4, True), 0xd3: (8, True)}
_FIXEXT = {0xd4: 1, 0xd5: 2, 0xd6: 4, 0xd7: 8, 0xd8: 16}


class Reader:
    def __init__(self, buf: memoryview, pos: int = 0) -> None:
        self.buf, self.pos = buf, pos

    def _take(self, n: int) -> memoryview:
        if self.pos + n > len(self.buf):
            raise FormatError("truncated msgpack data")
        self.pos += n
        return self.buf[self.pos - n:self.pos]

    def _int(self, n: int, signed: bool = False) -> int:
        return int.from_bytes(self._take(n), "big", signed=signed)

    def value(self, depth: int = 0) -> Any:
        if depth > 16:
            raise FormatError("msgpack nesting too deep")
        t = self._take(1)[0]
        if t <= 0x7f or t >= 0xe0:
            return t if t <= 0x7f else t - 0x100
        if t in _FIXED:
            return self._int(*_FIXED[t])
        if 0x90 <= t <= 0x9f or t in (0xdc, 0xdd):
            n = t & 0x0f if t <= 0x9f else self._int(2 if t == 0xdc else 4)
            return [self.value(depth + 1) for _ in range(n)]
        if 0x80 <= t <= 0x8f or t in (0xde, 0xdf):
            n = t & 0x0f if t <= 0x8f else self._int(2 if t == 0xde else 4)
            return {self.value(depth + 1): self.value(depth + 1) for _ in range(n)}
        if 0xa0 <= t <= 0xbf or t in (0xd9, 0xda, 0xdb):
            n = t & 0x1f if t <= 0xbf else self._int({0xd9: 1, 0xda: 2, 0xdb: 4}[t])
            return bytes(self._take(n)).decode("utf-8", "replace")
        if t in (0xc4, 0xc5, 0xc6):
            return self._take(self._int({0xc4: 1, 0xc5: 2, 0xc6: 4}[t]))
        if t in _FIXEXT:
            self._take(1)
            return self._take(_FIXEXT[t])
        if t in (0xc0, 0xc2, 0xc3):
            return {0xc0: None, 0xc2: False, 0xc3: True}[t]
        raise FormatError(f"unexpected msgpack type byte {t:#x}")
