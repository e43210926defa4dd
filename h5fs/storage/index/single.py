"""Single chunk index (layout index type 1): one chunk covering the whole dataset.

The layout message holds the chunk's address; a filtered chunk's stored size and filter mask sit
in the layout message too (flag SINGLE_INDEX_WITH_FILTER), otherwise the chunk has the full
unfiltered size.

A single structured chunk has its stored size and section metadata in the layout message too.

Writing changes only the layout message (which the caller rewrites): a put sets the chunk's
address (and filtered size and mask), a removal the undefined address, as libhdf5's
H5D__single_idx_insert/remove do (the filtered size stays, as there).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Iterator, Sequence

from ...errors import FormatError
from ...format.messages.layout import SINGLE_INDEX_WITH_FILTER, DataLayout, single_size_width
from . import ChunkIndex, ChunkRecord, IndexContext, check_coords, check_size
from .grid import check_rank, chunk_nbytes

if TYPE_CHECKING:
    from ..transaction import Transaction


class SingleChunkIndex(ChunkIndex):
    def __init__(self, ctx: IndexContext):
        super().__init__(ctx)
        check_rank(ctx)
        info = ctx.layout.index
        self.address = info.address if info else None
        rank = len(ctx.layout.chunk_dims)
        self.sections = info.sections if info else None
        if ctx.structured:
            if self.sections is None:
                raise FormatError(f"{ctx.what}: single structured chunk without its section metadata")
            self.size, self.mask = info.filtered_size, 0
        elif ctx.layout.flags & SINGLE_INDEX_WITH_FILTER:
            self.size, self.mask = info.filtered_size, info.filter_mask
        elif ctx.filtered:
            raise FormatError(f"{ctx.what}: filtered single-chunk layout without the filtered chunk size")
        else:
            self.size, self.mask = chunk_nbytes(ctx), 0
        self.record = (ChunkRecord((0,) * rank, self.address, self.size, self.mask, self.sections)
                       if self.address is not None else None)

    def lookup(self, coords: tuple[int, ...]) -> ChunkRecord | None:
        if self.record is None or any(c != 0 for c in coords) or len(coords) != len(self.record.coords):
            return None
        return self.record

    def records(self) -> Iterator[ChunkRecord]:
        if self.record is not None:
            yield self.record

    def put(self, txn: Transaction, records: Sequence[ChunkRecord]) -> DataLayout | None:
        if not records:
            return None
        self._check([r.coords for r in records])
        rec = records[-1]   # the last word on the one chunk
        if self.ctx.structured:
            check_size(rec, 1 << (8 * single_size_width((*self.ctx.layout.chunk_dims, self.ctx.layout.element_size))),
                       self.ctx.what)
            return self._publish(rec.address, rec.size, 0, rec.sections)
        if self.ctx.filtered:
            check_size(rec, 1 << (8 * txn.sizes.length), self.ctx.what)
            return self._publish(rec.address, rec.size, rec.filter_mask)
        if rec.size != self.size:
            raise ValueError(f"{self.ctx.what}: unfiltered single chunk of {rec.size} bytes, it holds {self.size}")
        return self._publish(rec.address, self.size, 0)

    def remove(self, txn: Transaction, coords: Sequence[tuple[int, ...]]) -> DataLayout | None:
        self._check(coords)
        return self._publish(None, self.size, self.mask, self.sections) if coords and self.record is not None else None

    def _check(self, coords: Sequence[tuple[int, ...]]) -> None:
        rank = len(self.ctx.layout.chunk_dims)
        check_coords(coords, rank, self.ctx.what)
        if any(any(c) for c in coords):
            raise ValueError(f"{self.ctx.what}: a single-chunk index holds only chunk {(0,) * rank}")

    def _publish(self, address: int | None, size: int, mask: int, sections=None) -> DataLayout:
        """The layout holding the chunk at `address` (None: no chunk); the index follows it."""
        lay = self.ctx.layout
        info = replace(lay.index, address=address)
        if self.ctx.structured:
            info = replace(info, filtered_size=size, sections=sections)
        elif self.ctx.filtered:
            info = replace(info, filtered_size=size, filter_mask=mask)
        self.address, self.size, self.mask, self.sections = address, size, mask, sections
        self.record = (ChunkRecord((0,) * len(lay.chunk_dims), address, size, mask, sections)
                       if address is not None else None)
        return replace(lay, index=info)
