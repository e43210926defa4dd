"""Extensible array chunk index (layout index type 4): exactly one unlimited dimension.

The linear slot of a chunk follows libhdf5's H5D__earray_idx_get_addr: the chunk's scaled
coordinates are "swizzled" so that the unlimited dimension comes first (the other dimensions
keep their order), then linearised row-major over the swizzled MAXIMUM chunk grid (the unlimited
dimension's extent does not matter: it is the slowest). With the unlimited dimension already
first this is plain row-major order over the maximum grid.

Note: libhdf5's own iteration (H5D__earray_idx_iterate_cb) walks the slots in unswizzled order,
so for an unlimited dimension other than the first, H5Dget_chunk_info(index) reports wrong chunk
offsets; `records()` here inverts the real mapping instead.

reader  ExtensibleArray: the array's blocks read through the metadata cache, its elements; the
        blocks it occupies
writer  ExtensibleArrayWriter: one batch of put and removed chunks
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from ....errors import FormatError
from .. import ChunkRecord, IndexContext
from ..array_index import ArrayIndex, element_decoder
from ..grid import check_rank, chunk_nbytes, grid
from .reader import ExtensibleArray
from .writer import ExtensibleArrayWriter

if TYPE_CHECKING:
    from ...transaction import Transaction


class ExtensibleArrayIndex(ArrayIndex):
    def __init__(self, ctx: IndexContext):
        super().__init__(ctx)
        check_rank(ctx)
        unlimited = [i for i, m in enumerate(ctx.maxdims) if m is None]
        if len(unlimited) != 1:
            raise FormatError(f"{ctx.what}: extensible array index needs exactly one unlimited dimension")
        self.unlim = u = unlimited[0]
        rank = len(ctx.dims)
        self.order = (u,) + tuple(i for i in range(rank) if i != u)   # swizzled position -> dimension
        fixed = {i: m for i, m in enumerate(ctx.maxdims) if m is not None}
        max_chunks = grid([fixed.get(i, 0) for i in range(rank)], ctx.layout.chunk_dims)
        self.sw_extents = tuple(max_chunks[d] for d in self.order)      # [0] unused (unlimited)
        downs, acc = [], 1
        for e in reversed(self.sw_extents[1:]):
            downs.append(acc)
            acc *= e
        self.sw_down = (acc,) + tuple(reversed(downs))
        self.nbytes = chunk_nbytes(ctx)
        self.what = f"{ctx.what}: extensible array index"
        self.max_bits = ctx.layout.index.max_bits   # the array's own once it exists
        addr = ctx.layout.index.address
        if addr is not None:
            self.open_array(ExtensibleArray(ctx.reader, addr, self.what))

    def open_array(self, array: ExtensibleArray) -> None:
        self.array = array
        h = array.header
        self.max_bits = h.max_nelmts_bits
        self.decode = element_decoder(self.ctx, h.client_id, h.element_size)

    def writer(self, txn: Transaction) -> ExtensibleArrayWriter:
        return ExtensibleArrayWriter(self, txn)

    def index_of(self, coords: tuple[int, ...]) -> int | None:
        """Linear slot of chunk `coords`, None when outside the maximum grid."""
        if len(coords) != len(self.order) or any(c < 0 for c in coords):
            return None
        sw = [coords[d] for d in self.order]
        if any(c >= e for c, e in zip(sw[1:], self.sw_extents[1:])):
            return None
        idx = sum(c * d for c, d in zip(sw, self.sw_down))
        return None if idx >> self.max_bits else idx

    def coords_of(self, idx: int) -> tuple[int, ...]:
        sw = []
        for d in self.sw_down:
            q, idx = divmod(idx, d)
            sw.append(q)
        out = [0] * len(self.order)
        for pos, dim in enumerate(self.order):
            out[dim] = sw[pos]
        return tuple(out)

    def records(self) -> Iterator[ChunkRecord]:
        if self.sw_down[0] == 0:  # a fixed dimension of no chunks: no slot is a chunk
            return iter(())
        return super().records()
