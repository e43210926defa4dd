"""Dataspace selection serializations (H5Sencode, Appendix D) with unlimited counts.

h5fs.model.values.decode_selection decodes the same bytes for region references, but hands back
the raw integers: a version-2/3 regular hyperslab stores H5S_UNLIMITED as all ones *at the
encoded width* (8 bytes in version 2; 2, 4 or 8 in version 3), and that width is gone by the time
the caller sees the numbers. Virtual dataset mappings need unlimited counts and blocks, so this
module decodes them itself and reports `None` for an unlimited count or block (libhdf5
H5S__hyper_deserialize: a version-3 value equal to the all-ones value of its encoding size is
H5S_UNLIMITED, so a real count of exactly 65535 in a 2-byte encoding also reads as unlimited --
we follow the library).

Layouts (type u32, version u32, then):
- none (0) / all (3), version 1: reserved u32, length u32.
- points (1): v1 reserved u32, length u32, rank u32, count u32, coordinates u32;
              v2 encode size u8 (2/4/8), rank u32, count and coordinates at that size.
- hyperslab (2): v1 reserved u32, length u32, rank u32, block count u32, blocks (start, end
              inclusive) u32; v2 flags u8, length u32, rank u32, then regular (flags bit 0):
              per dimension start, stride, count, block u64, or irregular: block count u64 and
              blocks u64; v3 flags u8, encode size u8, rank u32, then as v2 at the encode size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import FormatError, Unsupported
from .codec import Reader

MAX_RANK = 32
MAX_ITEMS = 1 << 22          # points or blocks in one serialized selection

NONE, POINTS, HYPERSLAB, ALL = 0, 1, 2, 3


@dataclass(frozen=True, eq=False)
class Selection:
    """kind: 'none', 'all', 'points', 'hyperslab'.

    regular: (start, stride, count, block) tuples; count/block entries are None when unlimited.
    blocks: int64 array (n, 2, rank) of [start, end] (inclusive) for irregular hyperslabs.
    points: int64 array (n, rank) in the stored (iteration) order."""

    kind: str
    rank: int = 0
    regular: tuple | None = None
    blocks: np.ndarray | None = None
    points: np.ndarray | None = None

    @property
    def unlimited_dim(self) -> int | None:
        if self.regular is None:
            return None
        _, _, count, block = self.regular
        dims = [d for d in range(self.rank) if count[d] is None or block[d] is None]
        if len(dims) > 1:
            raise FormatError(f"hyperslab selection unlimited in {len(dims)} dimensions")
        return dims[0] if dims else None

    def text(self) -> str:
        """Short slice-like text, e.g. '[0:10:2, 3]', '[all]', '[5 points]', '[3 blocks]'."""
        if self.kind in ("all", "none"):
            return f"[{self.kind}]"
        if self.kind == "points":
            return f"[{len(self.points)} points]"
        if self.regular is None:
            if len(self.blocks) > 4 or len(self.blocks) == 0:
                return f"[{len(self.blocks)} blocks]"
            return " + ".join("[" + ", ".join(str(a) if a == b else f"{a}:{b + 1}" for a, b in zip(*blk.tolist())) + "]"
                              for blk in self.blocks)
        parts = []
        for s, st, c, b in zip(*self.regular):
            if c is None:
                parts.append(f"{s}::{st}" if st != 1 and b == 1 else (f"{s}:" if b == 1 else f"{s}::{st}x{b}"))
            elif b is None:
                parts.append(f"{s}:")
            elif c == 1:
                parts.append(str(s) if b == 1 else f"{s}:{s + b}")
            elif b == 1:
                stop = s + st * (c - 1) + 1
                parts.append(f"{s}:{stop}" if st == 1 else f"{s}:{stop}:{st}")
            else:
                parts.append(f"{s}:{s + st * (c - 1) + b}:{st}x{b}")
        return "[" + ", ".join(parts) + "]"


def _rank(r: int, what: str) -> int:
    if r == 0 or r > MAX_RANK:
        raise FormatError(f"{what}: rank {r}")
    return r


def _width(w: int, what: str) -> int:
    if w not in (2, 4, 8):
        raise FormatError(f"{what}: encode size {w}")
    return w


def _array(c: Reader, n: int, width: int, what: str) -> np.ndarray:
    if n > MAX_ITEMS * 2 * MAX_RANK or n * width > c.remaining():
        raise FormatError(f"{what}: {n} values of {width} bytes do not fit in {c.remaining()} bytes")
    raw = c.bytes(n * width)
    a = np.frombuffer(raw, f"<u{width}").astype(np.uint64)
    if width == 8 and len(a) and int(a.max()) >= 1 << 63:
        raise FormatError(f"{what}: coordinate beyond 2**63")
    return a.astype(np.int64)


def decode(c: Reader, what: str = "dataspace selection") -> Selection:
    """Decode one selection serialization, leaving the cursor just past it."""
    sel_type = c.u32()
    version = c.u32()
    if sel_type in (NONE, ALL):
        if version != 1:
            raise Unsupported(f"{what}: {'all' if sel_type == ALL else 'none'} selection version {version}")
        c.skip(8)
        return Selection("all" if sel_type == ALL else "none")
    if sel_type == POINTS:
        if version == 1:
            c.skip(8)
            r = _rank(c.u32(), what)
            width = 4
            n = c.u32()
        elif version == 2:
            width = _width(c.u8(), what)
            r = _rank(c.u32(), what)
            n = c.uint(width)
        else:
            raise Unsupported(f"{what}: point selection version {version}")
        if n > MAX_ITEMS:
            raise FormatError(f"{what}: {n} points")
        pts = _array(c, n * r, width, what).reshape(n, r)
        return Selection("points", r, points=pts)
    if sel_type == HYPERSLAB:
        flags = 0
        if version == 1:
            c.skip(8)
            width = 4
        elif version == 2:
            flags = c.u8()
            c.skip(4)
            width = 8
        elif version == 3:
            flags = c.u8()
            width = _width(c.u8(), what)
        else:
            raise Unsupported(f"{what}: hyperslab selection version {version}")
        r = _rank(c.u32(), what)
        if flags & 1:
            if version == 1:
                raise FormatError(f"{what}: regular flag in a version-1 hyperslab")
            ones = (1 << (8 * width)) - 1
            vals = [[c.uint(width) for _ in range(4)] for _ in range(r)]
            start = tuple(v[0] for v in vals)
            stride = tuple(v[1] for v in vals)
            count = tuple(None if v[2] == ones else v[2] for v in vals)
            block = tuple(None if v[3] == ones else v[3] for v in vals)
            for s, st, cn, b in zip(start, stride, count, block):
                if s == ones or st == ones:
                    raise FormatError(f"{what}: unlimited start or stride")
                if cn is None and b is None:
                    raise FormatError(f"{what}: both count and block unlimited")
                if cn is not None and b is not None and cn > 1 and b > st:
                    raise FormatError(f"{what}: overlapping hyperslab blocks (block {b} > stride {st})")
                if (cn is None or cn > 1) and st == 0:
                    raise FormatError(f"{what}: zero stride")
            sel = Selection("hyperslab", r, regular=(start, stride, count, block))
            sel.unlimited_dim   # at most one unlimited dimension
            return sel
        n = c.u32() if version == 1 else c.uint(width)
        if n > MAX_ITEMS:
            raise FormatError(f"{what}: {n} hyperslab blocks")
        blocks = _array(c, n * 2 * r, width, what).reshape(n, 2, r)
        if n and bool((blocks[:, 1, :] < blocks[:, 0, :]).any()):
            raise FormatError(f"{what}: hyperslab block ends before it starts")
        return Selection("hyperslab", r, blocks=blocks)
    raise FormatError(f"{what}: unknown selection type {sel_type}")
