"""Single chunk index (layout index type 1): one chunk covering the whole dataset.

The layout message holds the chunk's address; a filtered chunk's stored size and filter mask sit
in the layout message too (flag SINGLE_INDEX_WITH_FILTER), otherwise the chunk has the full
unfiltered size.
"""

from __future__ import annotations

from typing import Iterator

from ...errors import FormatError
from ...format.messages.layout import SINGLE_INDEX_WITH_FILTER
from . import ChunkIndex, ChunkRecord, IndexContext
from .fixed_array import _check_rank, chunk_nbytes


class SingleChunkIndex(ChunkIndex):
    def __init__(self, ctx: IndexContext):
        super().__init__(ctx)
        _check_rank(ctx)
        info = ctx.layout.index
        self.address = info.address if info else None
        rank = len(ctx.layout.chunk_dims)
        if ctx.layout.flags & SINGLE_INDEX_WITH_FILTER:
            self.size, self.mask = info.filtered_size, info.filter_mask
        elif ctx.filtered:
            raise FormatError(f"{ctx.what}: filtered single-chunk layout without the filtered chunk size")
        else:
            self.size, self.mask = chunk_nbytes(ctx), 0
        self.record = (ChunkRecord((0,) * rank, self.address, self.size, self.mask)
                       if self.address is not None else None)

    def lookup(self, coords: tuple[int, ...]) -> ChunkRecord | None:
        if self.record is None or any(c != 0 for c in coords) or len(coords) != len(self.record.coords):
            return None
        return self.record

    def records(self) -> Iterator[ChunkRecord]:
        if self.record is not None:
            yield self.record
