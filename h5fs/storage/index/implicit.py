"""Implicit chunk index (layout index type 2): no index structure at all.

libhdf5 (H5Dnone.c) allocates every chunk of the MAXIMUM extent up front, contiguously, in
row-major order of the maximum chunk grid: chunk ``scaled`` lives at ``address +
ravel(scaled, max grid) * chunk bytes``. Chunks are never filtered. Iteration, as libhdf5's,
covers the chunks of the current extent.
"""

from __future__ import annotations

from typing import Iterator

from ...errors import FormatError
from . import ChunkIndex, ChunkRecord, IndexContext
from .fixed_array import _check_rank, chunk_nbytes, grid, iter_grid, max_grid, ravel


class ImplicitIndex(ChunkIndex):
    def __init__(self, ctx: IndexContext):
        super().__init__(ctx)
        _check_rank(ctx)
        if ctx.filtered:
            raise FormatError(f"{ctx.what}: implicit chunk index with filters")
        self.address = ctx.layout.index.address if ctx.layout.index else None
        self.max_grid = max_grid(ctx)
        self.grid = grid(ctx.dims, ctx.layout.chunk_dims)
        self.nbytes = chunk_nbytes(ctx)

    def _record(self, coords: tuple[int, ...]) -> ChunkRecord | None:
        idx = ravel(coords, self.max_grid)
        if idx is None or self.address is None:
            return None
        addr = self.address + idx * self.nbytes
        self.ctx.reader.check_range(addr, self.nbytes, f"{self.ctx.what}: implicit chunk {coords}")
        return ChunkRecord(coords, addr, self.nbytes, 0)

    def lookup(self, coords: tuple[int, ...]) -> ChunkRecord | None:
        return self._record(tuple(coords))

    def records(self) -> Iterator[ChunkRecord]:
        if self.address is None:
            return
        for coords in iter_grid(self.grid):
            rec = self._record(coords)
            if rec is not None:
                yield rec
