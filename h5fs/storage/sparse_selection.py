"""The defined elements of a sparse chunk as a dataspace selection, and back.

Positions are row-major linear indices into the chunk (chunk-relative coordinates), sorted and
unique: the order section 1 stores the values in (the prototype gathers them with a sorted
selection iterator). Encoding picks the smallest serialization of the set: none, all, a point
list, a regular hyperslab, or an irregular hyperslab (a list of blocks).
"""

from __future__ import annotations

from math import prod

import numpy as np

from ..errors import FormatError
from ..format import selection as SEL
from ..format.codec import Writer


def positions(sel: SEL.Selection, chunk: tuple[int, ...], what: str) -> np.ndarray:
    """The sorted linear indices `sel` selects in a chunk of dimensions `chunk`."""
    n = prod(chunk)
    if sel.kind == "none":
        return np.zeros(0, np.int64)
    if sel.kind == "all":
        return np.arange(n, dtype=np.int64)
    if sel.rank != len(chunk):
        raise FormatError(f"{what}: selection of rank {sel.rank} in a rank-{len(chunk)} chunk")
    dims = np.array(chunk, np.int64)
    if sel.kind == "points":
        pts = sel.points
        if len(pts) and bool((pts >= dims).any()):
            raise FormatError(f"{what}: selected point outside the chunk {chunk}")
        return np.unique(np.ravel_multi_index(pts.T, chunk)) if len(pts) else np.zeros(0, np.int64)
    if sel.regular is not None:
        axes = []
        for d, (start, stride, count, block) in enumerate(zip(*sel.regular)):
            if count is None or block is None:
                raise FormatError(f"{what}: unlimited hyperslab in a chunk")
            if count and block and start + stride * (count - 1) + block > chunk[d]:
                raise FormatError(f"{what}: hyperslab beyond the chunk {chunk}")
            axes.append((start + stride * np.arange(count)[:, None] + np.arange(block)[None, :]).ravel())
        if any(len(a) == 0 for a in axes):
            return np.zeros(0, np.int64)
        grids = np.meshgrid(*axes, indexing="ij")
        return np.unique(np.ravel_multi_index([g.ravel() for g in grids], chunk))
    blocks = sel.blocks
    if len(blocks) and bool((blocks[:, 1, :] >= dims).any()):
        raise FormatError(f"{what}: hyperslab block outside the chunk {chunk}")
    mask = np.zeros(chunk, bool)
    for lo, hi in blocks:
        mask[tuple(slice(a, b + 1) for a, b in zip(lo, hi))] = True
    return np.flatnonzero(mask)


def smallest(pos: np.ndarray, chunk: tuple[int, ...]) -> SEL.Selection:
    """The selection of these sorted unique positions that serializes in the fewest bytes."""
    n = prod(chunk)
    if len(pos) == 0:
        return SEL.Selection("none")
    if len(pos) == n:
        return SEL.Selection("all")
    rank = len(chunk)
    coords = np.stack(np.unravel_index(pos, chunk), axis=1).astype(np.int64)
    lo, hi = _blocks(coords, pos, chunk)
    candidates = [SEL.Selection("points", rank, points=coords)]
    regular = _regular(lo, hi)
    if regular is not None:
        candidates.append(SEL.Selection("hyperslab", rank, regular=regular))
    else:
        candidates.append(SEL.Selection("hyperslab", rank, blocks=np.stack([lo, hi], axis=1)))
    return min(candidates, key=_size)


def _size(sel: SEL.Selection) -> int:
    w = Writer()
    SEL.encode(w, sel)
    return len(w.getvalue())


def _blocks(coords: np.ndarray, pos: np.ndarray, chunk: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint blocks covering exactly the positions: runs along the last dimension, then
    blocks equal in every other dimension and adjacent in one merged, one dimension at a time
    from the last but one to the first. (start, end) corners, ends inclusive."""
    last = chunk[-1]
    row = pos // last
    starts = np.ones(len(pos), bool)
    starts[1:] = (np.diff(pos) != 1) | (row[1:] != row[:-1])
    first = np.flatnonzero(starts)
    ends = np.append(first[1:], len(pos)) - 1
    lo, hi = coords[first].copy(), coords[first].copy()
    hi[:, -1] = coords[ends, -1]
    for k in range(len(chunk) - 2, -1, -1):
        others = [d for d in range(len(chunk)) if d != k]
        keys = [lo[:, k]] + [hi[:, d] for d in reversed(others)] + [lo[:, d] for d in reversed(others)]
        order = np.lexsort(keys)
        lo, hi = lo[order], hi[order]
        same = np.ones(len(lo), bool)
        same[0] = False
        same[1:] = (lo[1:, others] == lo[:-1, others]).all(axis=1) & (hi[1:, others] == hi[:-1, others]).all(axis=1) \
            & (lo[1:, k] == hi[:-1, k] + 1)
        tail = np.append(np.flatnonzero(~same)[1:], len(lo)) - 1
        head = np.flatnonzero(~same)
        new_lo, new_hi = lo[head].copy(), hi[head].copy()
        new_hi[:, k] = hi[tail, k]
        lo, hi = new_lo, new_hi
    return lo, hi


def _regular(lo: np.ndarray, hi: np.ndarray) -> tuple | None:
    """The blocks as one regular hyperslab (start, stride, count, block per dimension), or None
    when they do not form a grid of equal blocks at equal strides."""
    start, stride, count, block = [], [], [], []
    total = 1
    for k in range(lo.shape[1]):
        spans = np.unique(np.stack([lo[:, k], hi[:, k]], axis=1), axis=0)
        sizes = spans[:, 1] - spans[:, 0] + 1
        if (sizes != sizes[0]).any():
            return None
        steps = np.diff(spans[:, 0])
        if len(steps) and ((steps != steps[0]).any() or steps[0] < sizes[0]):
            return None
        start.append(int(spans[0, 0]))
        stride.append(int(steps[0]) if len(steps) else 1)
        count.append(len(spans))
        block.append(int(sizes[0]))
        total *= len(spans)
    if total != len(lo):
        return None
    return tuple(start), tuple(stride), tuple(count), tuple(block)
