"""Selections as index sets, beside the chunk grid: a hyperslab, "all" or a product-shaped block
list is a product of 1-D sets (RegDim, IntDim) that maps element boxes to ordinals and back
without enumerating anything; irregular block lists and point selections are enumerated
(ExplicitSel, at most MAX_EXPLICIT elements, else Unsupported). Two selections of the same
per-dimension sizes pair box by box (`paired_boxes`); virtual datasets map their elements to
their sources' this way (model/virtual.py)."""

from __future__ import annotations

import itertools
from math import prod

import numpy as np

from ..errors import FormatError, Unsupported
from ..format import selection as SEL

MAX_EXPLICIT = 1 << 22         # elements of an enumerated (non-product) selection
MAX_PIECES = 4096              # boxes two selections' part of a box may pair as, else elements


def _expand(bs: np.ndarray, lens: np.ndarray, base: np.ndarray, lo: int, hi: int):
    """Coordinates in [lo, hi) of blocks (start bs, length lens, first ordinal base) and their ordinals."""
    a = np.maximum(bs, lo)
    b = np.minimum(bs + lens, hi)
    keep = b > a
    if not keep.all():
        a, b, bs, base = a[keep], b[keep], bs[keep], base[keep]
    n = b - a
    total = int(n.sum())
    if total == 0:
        e = np.empty(0, np.int64)
        return e, e
    before = np.concatenate(([0], np.cumsum(n)[:-1]))
    coords = np.repeat(a - before, n) + np.arange(total, dtype=np.int64)
    ords = coords - np.repeat(bs, n) + np.repeat(base, n)
    return coords, ords


class RegDim:
    """`count` blocks of `block` coordinates every `stride` from `start`; nothing at or past `limit`."""

    def __init__(self, start: int, stride: int, count: int | None, block: int | None, limit: int | None = None):
        if block is None:                                  # unlimited block (count 1)
            if limit is None:
                raise FormatError("unlimited hyperslab block used without an extent")
            count, block = (1, max(0, limit - start)) if limit > start else (0, 1)
            limit = None
        if count is None:
            if limit is None:
                raise FormatError("unlimited hyperslab count used without an extent")
            count = 0 if limit <= start else -(-(limit - start) // stride)
        elif limit is not None:
            count = 0 if limit <= start else min(count, -(-(limit - start) // stride) if stride else 1)
        self.start, self.stride, self.count, self.block = start, stride, count, block
        if count == 0 or block == 0:
            self.count, self.last, self.n = 0, 0, 0
            return
        last_start = start + (count - 1) * stride
        self.last = block if limit is None else min(block, limit - last_start)
        self.n = (count - 1) * block + self.last

    def bounds(self) -> tuple[int, int]:
        return self.start, self.start + (self.count - 1) * self.stride + self.last - 1

    def within(self, lo: int, hi: int):
        if self.n == 0 or hi <= lo:
            e = np.empty(0, np.int64)
            return e, e
        s, st, b = self.start, self.stride, self.block
        if self.count == 1:
            q0, q1 = 0, 0
        else:
            q0 = max(0, (lo - s - b) // st + 1)
            q1 = min(self.count - 1, (hi - 1 - s) // st)
        if q1 < q0:
            e = np.empty(0, np.int64)
            return e, e
        q = np.arange(q0, q1 + 1, dtype=np.int64)
        lens = np.full(len(q), b, np.int64)
        if q1 == self.count - 1:
            lens[-1] = self.last
        return _expand(s + q * st, lens, q * b, lo, hi)

    def coords(self, k: np.ndarray) -> np.ndarray:
        if self.block == 1:
            return self.start + k * self.stride
        if self.count == 1:
            return self.start + k
        q, r = np.divmod(k, self.block)
        return self.start + q * self.stride + r


class IntDim:
    """Sorted disjoint intervals (starts, lengths)."""

    def __init__(self, starts: np.ndarray, lengths: np.ndarray):
        self.starts = starts.astype(np.int64)
        self.lengths = lengths.astype(np.int64)
        self.ends = self.starts + self.lengths
        self.cum = np.concatenate(([0], np.cumsum(self.lengths))).astype(np.int64)
        self.n = int(self.cum[-1])

    def bounds(self) -> tuple[int, int]:
        return int(self.starts[0]), int(self.ends[-1]) - 1

    def within(self, lo: int, hi: int):
        i0 = int(np.searchsorted(self.ends, lo, "right"))
        i1 = int(np.searchsorted(self.starts, hi, "left"))
        if i1 <= i0:
            e = np.empty(0, np.int64)
            return e, e
        return _expand(self.starts[i0:i1], self.lengths[i0:i1], self.cum[i0:i1], lo, hi)

    def coords(self, k: np.ndarray) -> np.ndarray:
        i = np.searchsorted(self.cum, k, "right") - 1
        return self.starts[i] + (k - self.cum[i])


# ------------------------------------------------------------------------ N-D selections

class ProductSel:
    """The product of 1-D sets, iterated row-major."""

    def __init__(self, dims: list):
        self.dims = dims
        self.sizes = [d.n for d in dims]
        self.n = prod(self.sizes)
        self.radix = [prod(self.sizes[i + 1:]) for i in range(len(dims))]

    def bounds(self):
        if self.n == 0:
            return None
        b = [d.bounds() for d in self.dims]
        return tuple(x[0] for x in b), tuple(x[1] for x in b)

    def locate(self, start, count):
        """(flat positions in the box, ordinals) of the selected elements inside the box."""
        per = [d.within(s, s + c) for d, s, c in zip(self.dims, start, count)]
        if any(len(c) == 0 for c, _ in per):
            return None
        rank = len(per)
        pos = np.zeros((1,) * rank, np.int64)
        ords = np.zeros((1,) * rank, np.int64)
        for d, ((coords, o), s) in enumerate(zip(per, start)):
            shp = [1] * rank
            shp[d] = len(coords)
            pos = pos + ((coords - s) * prod(count[d + 1:])).reshape(shp)
            ords = ords + (o * self.radix[d]).reshape(shp)
        return pos.ravel(), ords.ravel()

    def coords(self, ords: np.ndarray) -> np.ndarray:
        cols = []
        for i, (d, r, n) in enumerate(zip(self.dims, self.radix, self.sizes)):
            k = ords // r if r != 1 else ords
            if i:                       # the first dimension's quotient is already < n
                k = k % n
            cols.append(d.coords(k))
        return np.stack(cols, axis=1) if cols else np.zeros((len(ords), 0), np.int64)


class ExplicitSel:
    """Enumerated points in iteration order."""

    def __init__(self, points: np.ndarray, shape: tuple[int, ...] | None = None):
        self.points = points
        self.n = len(points)
        self._shape = shape
        self._sorted = None

    def bounds(self):
        if self.n == 0:
            return None
        return tuple(int(v) for v in self.points.min(0)), tuple(int(v) for v in self.points.max(0))

    def _index(self):
        if self._sorted is None:
            shape = self._shape
            inside = np.all(self.points < np.asarray(shape, np.int64), axis=1)
            ords = np.nonzero(inside)[0]
            lin = np.ravel_multi_index(tuple(self.points[ords].T), shape) if len(ords) else np.empty(0, np.int64)
            order = np.argsort(lin, kind="stable")
            self._sorted = (lin[order].astype(np.int64), ords[order].astype(np.int64))
        return self._sorted

    def locate(self, start, count):
        lin, ords = self._index()
        shape = self._shape
        lo = int(np.ravel_multi_index(tuple(start), shape))
        last = tuple(s + c - 1 for s, c in zip(start, count))
        hi = int(np.ravel_multi_index(last, shape)) + 1
        i0, i1 = int(np.searchsorted(lin, lo, "left")), int(np.searchsorted(lin, hi, "left"))
        if i1 <= i0:
            return None
        sel_lin, sel_ords = lin[i0:i1], ords[i0:i1]
        if hi - lo == prod(count):          # the box is one row-major run (linear_boxes' boxes are)
            return sel_lin - lo, sel_ords
        pts = np.stack(np.unravel_index(sel_lin, shape), axis=1)
        st, cn = np.asarray(start), np.asarray(count)
        inside = np.all((pts >= st) & (pts < st + cn), axis=1)
        pts, sel_ords = pts[inside], sel_ords[inside]
        if not len(pts):
            return None
        return np.ravel_multi_index(tuple((pts - st).T), tuple(count)), sel_ords

    def coords(self, ords: np.ndarray) -> np.ndarray:
        return self.points[ords]


def build_selection(sel: SEL.Selection, shape: tuple[int, ...], clip: int | None = None, what: str = ""):
    """A ProductSel/ExplicitSel for a decoded selection in a dataspace of `shape`; the unlimited
    dimension of a regular hyperslab is clipped at `clip`. None for an empty selection."""
    rank = len(shape)
    if sel.kind == "none":
        return None
    if sel.kind == "all":
        return ProductSel([RegDim(0, 1, 1, e) for e in shape])
    if sel.rank != rank:
        raise FormatError(f"{what}: selection of rank {sel.rank} in a dataspace of rank {rank}")
    if sel.kind == "points":
        if len(sel.points) > MAX_EXPLICIT:
            raise Unsupported(f"{what}: point selection of {len(sel.points)} points")
        return ExplicitSel(sel.points, shape)
    if sel.regular is not None:
        u = sel.unlimited_dim
        dims = [RegDim(s, st, c, b, clip if d == u else None)
                for d, (s, st, c, b) in enumerate(zip(*sel.regular))]
        return ProductSel(dims)
    blocks = sel.blocks
    n = len(blocks)
    if n == 0:
        return None
    per = []
    for d in range(rank):
        u = np.unique(blocks[:, :, d], axis=0)
        if len(u) > 1 and bool((u[1:, 0] <= u[:-1, 1]).any()):
            per = None
            break
        per.append(u)
    if per is not None and prod(len(u) for u in per) == n and len(np.unique(blocks.reshape(n, -1), axis=0)) == n:
        return ProductSel([IntDim(u[:, 0], u[:, 1] - u[:, 0] + 1) for u in per])
    sizes = np.prod(blocks[:, 1, :] - blocks[:, 0, :] + 1, axis=1)
    if int(sizes.sum()) > MAX_EXPLICIT:
        raise Unsupported(f"{what}: irregular hyperslab of {int(sizes.sum())} elements")
    pts = []
    for b in blocks:
        grid = np.indices(tuple(int(x) for x in b[1] - b[0] + 1)).reshape(rank, -1).T + b[0]
        pts.append(grid)
    points = np.unique(np.concatenate(pts), axis=0)        # row-major order, overlaps merged
    return ExplicitSel(points.astype(np.int64), shape)


# ---------------------------------------------------------------- pairing two selections

def paired_boxes(vsel, ssel, start: tuple[int, ...], count: tuple[int, ...]):
    """[(slices into the box, source start, source count)]: where selection `vsel` (of the box
    (start, count)'s array) pairs a box of the box with a box of selection `ssel` (of a source
    array). Selections of the same per-dimension sizes pair dimension by dimension (the k-th
    selected index of a dimension with the k-th), so each dimension's runs, consecutive on both
    sides, multiply into boxes. None when they do not pair that way, or would make more than
    MAX_PIECES boxes: the caller pairs elements."""
    if not isinstance(vsel, ProductSel) or not isinstance(ssel, ProductSel) or vsel.sizes != ssel.sizes:
        return None
    per, total = [], 1
    for vd, sd, s, c in zip(vsel.dims, ssel.dims, start, count):
        runs = _runs(vd, sd, s, c)
        if not runs:
            return []
        per.append(runs)
        total *= len(runs)
        if total > MAX_PIECES:
            return None
    return [(tuple(slice(v, v + n) for v, _, n in runs), tuple(x for _, x, _ in runs), tuple(n for _, _, n in runs))
            for runs in itertools.product(*per)]


def _single(d) -> int | None:
    """The first coordinate of a 1-D set that is one block (of d.n coordinates), else None."""
    if isinstance(d, RegDim):
        return d.start if d.count == 1 else None
    return int(d.starts[0]) if len(d.starts) == 1 else None


def _runs(vd, sd, s: int, c: int) -> list[tuple[int, int, int]]:
    """[(offset in [s, s+c), source coordinate, length)]: the runs of one dimension's selected
    coordinates in [s, s+c) that are consecutive on both sides. Single blocks pair by arithmetic."""
    v1, s1 = _single(vd), _single(sd)
    if v1 is not None and s1 is not None:
        a, b = max(s, v1), min(s + c, v1 + vd.n)
        return [(a - s, s1 + a - v1, b - a)] if a < b else []
    vc, ords = vd.within(s, s + c)
    if not len(vc):
        return []
    sc = sd.coords(ords)
    cuts = np.flatnonzero((np.diff(vc) != 1) | (np.diff(sc) != 1)) + 1
    a, b = np.concatenate(([0], cuts)), np.concatenate((cuts, [len(vc)]))
    return list(zip((vc[a] - s).tolist(), sc[a].tolist(), (b - a).tolist()))


# -------------------------------------------------------------------- extents and memory

def selection_ends(sel: SEL.Selection, skip: int | None) -> list[int | None]:
    """Per dimension, the last selected coordinate (None for the unlimited dimension `skip`)."""
    if sel.regular is not None:
        out = []
        for d, (s, st, c, b) in enumerate(zip(*sel.regular)):
            out.append(None if d == skip else s + (c - 1) * st + b - 1)
        return out
    if sel.kind == "points":
        return [int(v) for v in sel.points.max(0)] if len(sel.points) else [None] * sel.rank
    if sel.blocks is not None and len(sel.blocks):
        return [int(v) for v in sel.blocks[:, 1, :].max(0)]
    return [None] * sel.rank


def clip_extent_match(start: int, stride: int, block: int | None, slices: int) -> int:
    """The extent whose unlimited dimension holds exactly `slices` coordinates of a hyperslab
    (start, stride, unlimited count, block) (libhdf5 H5S_hyper_get_clip_extent_match without
    trailing space)."""
    if slices == 0:
        return 0
    if block is None:                  # unlimited block
        return start + slices
    q, r = divmod(slices - 1, block)
    return start + q * stride + r + 1


def selection_nbytes(sel) -> int:
    """Memory of a built selection, with room for what it computes on first use (the sorted
    index of an ExplicitSel, a source selection built per source shape)."""
    if isinstance(sel, ExplicitSel):
        return 300 + 3 * sel.points.nbytes
    if isinstance(sel, ProductSel):
        return 300 + sum(300 + (d.starts.nbytes * 4 if isinstance(d, IntDim) else 0) for d in sel.dims)
    return 0
