"""Implicit chunk index (layout index type 2): no index structure at all.

libhdf5 (H5Dnone.c) allocates every chunk of the MAXIMUM extent up front, contiguously, in
row-major order of the maximum chunk grid: chunk ``scaled`` lives at ``address +
ravel(scaled, max grid) * chunk bytes``. Chunks are never filtered. Iteration, as libhdf5's,
covers the chunks of the current extent.

Writing: chunks are written where the index says (the caller writes them in place), so a put only
checks that; removing a chunk changes nothing (libhdf5's H5D__none_idx_remove: the block keeps
its space). The block itself is allocated, whole, when the extent first holds a chunk (`resize`,
as libhdf5's early allocation at H5Dset_extent) or at a put before that; its address goes into
the layout message that either returns. Filling the chunks of the extent with the fill value is
the caller's (the index does not know the fill value).
"""

from __future__ import annotations

from dataclasses import replace
from math import prod
from typing import TYPE_CHECKING, Iterator, Sequence

from ...errors import FormatError
from ...format.messages.layout import DataLayout
from . import ChunkIndex, ChunkRecord, IndexContext, check_coords
from .grid import check_rank, chunk_nbytes, grid, iter_grid, max_grid, ravel

if TYPE_CHECKING:
    from ..transaction import Transaction


class ImplicitIndex(ChunkIndex):
    def __init__(self, ctx: IndexContext):
        super().__init__(ctx)
        check_rank(ctx)
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

    def put(self, txn: Transaction, records: Sequence[ChunkRecord]) -> DataLayout | None:
        check_coords([r.coords for r in records], len(self.max_grid), self.ctx.what)
        if self.address is None:
            return self._allocate(txn, records) if records else None
        for r in records:
            want = self._record(tuple(r.coords))
            if want is None or (r.address, r.size) != (want.address, want.size):
                raise ValueError(f"{self.ctx.what}: implicit chunk {tuple(r.coords)} written at {r.address} "
                                 f"({r.size} bytes), the index puts it at "
                                 f"{'nowhere' if want is None else want.address} ({self.nbytes} bytes)")
        return None

    def remove(self, txn: Transaction, coords: Sequence[tuple[int, ...]]) -> DataLayout | None:
        check_coords(coords, len(self.max_grid), self.ctx.what)
        return None

    def resize(self, txn: Transaction, dims: tuple[int, ...]) -> DataLayout | None:
        if self.address is not None or not all(grid(dims, self.ctx.layout.chunk_dims)):
            return None
        return self._allocate(txn, ())

    def _allocate(self, txn: Transaction, records: Sequence[ChunkRecord]) -> DataLayout:
        """Allocate the block (every chunk of the maximum grid) and move the chunks of
        `records`, written elsewhere in this transaction, to their places in it."""
        self.address = txn.allocate(prod(self.max_grid) * self.nbytes, raw=True)
        for r in records:
            slot = self._record(tuple(r.coords))
            if slot is None or r.size != self.nbytes:
                raise ValueError(f"{self.ctx.what}: implicit chunk {tuple(r.coords)} of {r.size} bytes does not fit "
                                 f"the maximum grid {self.max_grid} of {self.nbytes}-byte chunks")
            txn.write_data(slot.address, txn.read_data(r.address, r.size), rewritable=True)
            txn.free(r.address, r.size, raw=True)
        lay = self.ctx.layout
        return replace(lay, index=replace(lay.index, address=self.address))

