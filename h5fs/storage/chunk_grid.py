"""Projection of a row-major element range onto hyperslab boxes and chunk-grid cells."""

from __future__ import annotations

import itertools
from math import prod
from typing import Iterator

Box = tuple[tuple[int, ...], tuple[int, ...]]   # (start, count) per dimension


def linear_boxes(shape: tuple[int, ...], a: int, b: int) -> list[Box]:
    """Boxes that cover elements [a, b) of a row-major array, in order; at most 2*rank of them."""
    if a >= b:
        return []
    if len(shape) == 1:
        return [((a,), (b - a,))]
    row = prod(shape[1:])
    inner = shape[1:]
    zeros = (0,) * len(inner)
    i0, r0 = divmod(a, row)
    i1, r1 = divmod(b, row)
    if i0 == i1:
        return [((i0,) + s, (1,) + c) for s, c in linear_boxes(inner, r0, r1)]
    out: list[Box] = []
    if r0:
        out += [((i0,) + s, (1,) + c) for s, c in linear_boxes(inner, r0, row)]
        i0 += 1
    if i1 > i0:
        out.append(((i0,) + zeros, (i1 - i0,) + inner))
    if r1:
        out += [((i1,) + s, (1,) + c) for s, c in linear_boxes(inner, 0, r1)]
    return out


def chunks_in_box(box: Box, chunk: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    """Grid coordinates of every chunk that overlaps the box, in row-major order."""
    start, count = box
    ranges = [range(s // c, (s + n - 1) // c + 1) for s, n, c in zip(start, count, chunk)]
    return itertools.product(*ranges)


def overlap(box: Box, coords: tuple[int, ...], chunk: tuple[int, ...]) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
    """(slices into the box's array, slices into the chunk's array) for their intersection."""
    dst, src = [], []
    for s, n, c, k in zip(box[0], box[1], coords, chunk):
        lo = max(s, c * k)
        hi = min(s + n, (c + 1) * k)
        dst.append(slice(lo - s, hi - s))
        src.append(slice(lo - c * k, hi - c * k))
    return tuple(dst), tuple(src)
