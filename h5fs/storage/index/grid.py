"""The chunk grid as the indexes count it: the bytes of a chunk, the chunks covering an extent
(the current one or the maximum one), row-major slot numbers of grid coordinates, the rank checked.
(storage/chunk_grid.py maps element ranges onto chunks.)"""

from __future__ import annotations

from typing import Iterator

from ...errors import FormatError
from . import IndexContext


def chunk_nbytes(ctx: IndexContext) -> int:
    """Bytes of one unfiltered chunk (libhdf5's layout->size)."""
    n = ctx.layout.element_size
    for d in ctx.layout.chunk_dims:
        n *= d
    return n


def check_rank(ctx: IndexContext) -> None:
    if len(ctx.layout.chunk_dims) != len(ctx.dims) or len(ctx.maxdims) != len(ctx.dims):
        raise FormatError(f"{ctx.what}: chunk rank {len(ctx.layout.chunk_dims)} differs from dataset rank {len(ctx.dims)}")
    if any(c <= 0 for c in ctx.layout.chunk_dims):
        raise FormatError(f"{ctx.what}: zero chunk dimension")


def grid(dims, chunk_dims) -> tuple[int, ...]:
    """Chunks per dimension covering `dims` (partial edge chunks count)."""
    return tuple(-(-d // c) for d, c in zip(dims, chunk_dims))


def max_grid(ctx: IndexContext) -> tuple[int, ...]:
    """Chunks per dimension of the maximum extent; every maximum dimension must be fixed."""
    if any(m is None for m in ctx.maxdims):
        raise FormatError(f"{ctx.what}: index type needs fixed maximum dimensions")
    return grid(ctx.maxdims, ctx.layout.chunk_dims)  # type: ignore[arg-type]


def ravel(coords: tuple[int, ...], extents: tuple[int, ...]) -> int | None:
    """Row-major linear index of `coords` in a grid of `extents`, None when outside it."""
    if len(coords) != len(extents) or any(not 0 <= c < e for c, e in zip(coords, extents)):
        return None
    idx = 0
    for c, e in zip(coords, extents):
        idx = idx * e + c
    return idx


def unravel(idx: int, extents: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for e in reversed(extents):
        idx, r = divmod(idx, e) if e else (idx, 0)
        out.append(r)
    return tuple(reversed(out))


def iter_grid(extents: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    """Every coordinate of a grid in row-major order."""
    if any(e <= 0 for e in extents):
        return
    coords = [0] * len(extents)
    while True:
        yield tuple(coords)
        i = len(extents) - 1
        while i >= 0:
            coords[i] += 1
            if coords[i] < extents[i]:
                break
            coords[i] = 0
            i -= 1
        if i < 0:
            return
