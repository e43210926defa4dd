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

`decode(r)` and `encode(w, selection)` work on a Reader/Writer: a selection is always embedded
(in a VDS mapping block, a region reference). A decoded Selection keeps its version and encode
size; the length fields of versions 1 and 2 are recomputed (libhdf5 writes them so), reserved
fields are written as zeros. A Selection built without a version (None) encodes as libhdf5 does
with the latest format: "all"/"none" version 1, points version 2, hyperslabs version 3, at the
smallest encode size (2, 4 or 8) that holds every value below its all-ones (unlimited) value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import FormatError, Unsupported
from .codec import Reader, Writer

MAX_RANK = 32
MAX_ITEMS = 1 << 22          # points or blocks in one serialized selection

NONE, POINTS, HYPERSLAB, ALL = 0, 1, 2, 3


@dataclass(frozen=True, eq=False, slots=True)
class Selection:
    """kind: 'none', 'all', 'points', 'hyperslab'.

    regular: (start, stride, count, block) tuples; count/block entries are None when unlimited.
    blocks: int64 array (n, 2, rank) of [start, end] (inclusive) for irregular hyperslabs.
    points: int64 array (n, rank) in the stored (iteration) order.
    version, width: the serialization's version and encode size (None: chosen when encoding)."""

    kind: str
    rank: int = 0
    regular: tuple | None = None
    blocks: np.ndarray | None = None
    points: np.ndarray | None = None
    version: int | None = None
    width: int | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Selection):
            return NotImplemented
        return (self.kind, self.rank, self.regular, self.version, self.width) == \
            (other.kind, other.rank, other.regular, other.version, other.width) and \
            all(_same(a, b) for a, b in ((self.blocks, other.blocks), (self.points, other.points)))

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


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return a is b or (a is not None and b is not None and np.array_equal(a, b))


def _rank(r: int, what: str) -> int:
    if r == 0 or r > MAX_RANK:
        raise FormatError(f"{what}: rank {r}")
    return r


def _width(w: int, what: str) -> int:
    if w not in (2, 4, 8):
        raise FormatError(f"{what}: encode size {w}")
    return w


_CODES = {2: "H", 4: "I", 8: "Q"}


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
    sel_type, version = c.fields("II")
    if sel_type in (NONE, ALL):
        if version != 1:
            raise Unsupported(f"{what}: {'all' if sel_type == ALL else 'none'} selection version {version}")
        c.skip(8)
        return Selection("all" if sel_type == ALL else "none", version=1)
    if sel_type == POINTS:
        if version == 1:
            _, _, r, n = c.fields("IIII")
            width = 4
        elif version == 2:
            width = _width(c.u8(), what)
            r = c.u32()
            n = c.uint(width)
        else:
            raise Unsupported(f"{what}: point selection version {version}")
        r = _rank(r, what)
        if n > MAX_ITEMS:
            raise FormatError(f"{what}: {n} points")
        pts = _array(c, n * r, width, what).reshape(n, r)
        return Selection("points", r, points=pts, version=version, width=width)
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
            flags, width = c.fields("BB")
            width = _width(width, what)
        else:
            raise Unsupported(f"{what}: hyperslab selection version {version}")
        if flags & ~1:
            raise FormatError(f"{what}: unknown hyperslab flags {flags:#x}")
        r = _rank(c.u32(), what)
        if flags & 1:
            if version == 1:
                raise FormatError(f"{what}: regular flag in a version-1 hyperslab")
            return _regular(c.fields(_CODES[width] * 4 * r), r, version, width, what)
        n = c.u32() if version == 1 else c.uint(width)
        if n > MAX_ITEMS:
            raise FormatError(f"{what}: {n} hyperslab blocks")
        blocks = _array(c, n * 2 * r, width, what).reshape(n, 2, r)
        if n and bool((blocks[:, 1, :] < blocks[:, 0, :]).any()):
            raise FormatError(f"{what}: hyperslab block ends before it starts")
        return Selection("hyperslab", r, blocks=blocks, version=version, width=width)
    raise FormatError(f"{what}: unknown selection type {sel_type}")


def _regular(vals: tuple[int, ...], r: int, version: int, width: int, what: str) -> Selection:
    ones = (1 << (8 * width)) - 1
    start, stride, count, block = (tuple(vals[k::4]) for k in range(4))
    count = tuple(None if v == ones else v for v in count)
    block = tuple(None if v == ones else v for v in block)
    for s, st, cn, b in zip(start, stride, count, block):
        if s == ones or st == ones:
            raise FormatError(f"{what}: unlimited start or stride")
        if cn is None and b is None:
            raise FormatError(f"{what}: both count and block unlimited")
        if cn is not None and b is not None and cn > 1 and b > st:
            raise FormatError(f"{what}: overlapping hyperslab blocks (block {b} > stride {st})")
        if (cn is None or cn > 1) and st == 0:
            raise FormatError(f"{what}: zero stride")
    sel = Selection("hyperslab", r, regular=(start, stride, count, block), version=version, width=width)
    sel.unlimited_dim   # at most one unlimited dimension
    return sel


def _values(sel: Selection) -> list[int]:
    """Every integer the serialization stores besides the counts' and blocks' unlimited values."""
    if sel.kind == "points":
        return [len(sel.points), *sel.points.ravel().tolist()]
    if sel.regular is not None:
        return [v for part in sel.regular for v in part if v is not None]
    return [len(sel.blocks), *sel.blocks.ravel().tolist()]


_FIXED_WIDTH = {("points", 1): 4, ("hyperslab", 1): 4, ("hyperslab", 2): 8}


def _version_width(sel: Selection) -> tuple[int, int]:
    """The selection's own version and encode size, or those libhdf5 chooses for it."""
    if sel.kind in ("all", "none"):
        return 1, 4
    if sel.version is not None:
        return sel.version, _FIXED_WIDTH.get((sel.kind, sel.version), sel.width)
    top = max(_values(sel), default=0)
    width = next(w for w in (2, 4, 8) if w == 8 or top < (1 << (8 * w)) - 1)
    return (2 if sel.kind == "points" else 3), width


def encode(w: Writer, sel: Selection) -> None:
    """Append the serialization of `sel` (the mirror of `decode`)."""
    version, width = _version_width(sel)
    if sel.kind in ("all", "none"):
        w.fields("IIII", ALL if sel.kind == "all" else NONE, 1, 0, 0)
        return
    code = _CODES[width]
    ones = (1 << (8 * width)) - 1
    if sel.kind == "points":
        pts = sel.points
        if version == 1:
            w.fields("IIIIII", POINTS, 1, 0, 8 + pts.size * 4, sel.rank, len(pts))
        else:
            w.fields("IIBI" + code, POINTS, 2, width, sel.rank, len(pts))
        w.bytes(pts.astype(f"<u{width}").tobytes())
        return
    flags = 0 if sel.regular is None else 1
    if sel.regular is not None:
        start, stride, count, block = sel.regular
        vals = [v for dim in zip(start, stride, count, block) for v in dim]
        body = w.sizes.layout(code * len(vals)).pack(*(ones if v is None else v for v in vals))
    else:
        body = w.sizes.layout("I" if version == 1 else code).pack(len(sel.blocks)) + \
            sel.blocks.astype(f"<u{width}").tobytes()
    if version == 1:
        w.fields("IIIII", HYPERSLAB, 1, 0, 4 + len(body), sel.rank)
    elif version == 2:
        w.fields("IIBII", HYPERSLAB, 2, flags, 4 + len(body), sel.rank)
    else:
        w.fields("IIBBI", HYPERSLAB, 3, flags, width, sel.rank)
    w.bytes(body)
