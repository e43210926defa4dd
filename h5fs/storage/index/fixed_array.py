"""Fixed array chunk index (layout index type 3).

Slots count over the chunk grid of the dataset's MAXIMUM dimensions, in row-major order
(libhdf5 H5Dfarray.c: ``H5VM_array_offset_pre(ndims, max_down_chunks, scaled)``), so a dataset
whose current extent is smaller than its maximum leaves the trailing slots of each row unused.

The grid helpers here are shared by the other array-backed index modules. Writes (batches of put
and removed records) are fixed_array_write's.
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING, Iterator, Sequence

from ...errors import FormatError
from ...format import fixed_array as fa
from ...format.fixed_array import ChunkElement, chunk_element_decoder
from ...format.messages.layout import DataLayout
from ..readers.fixed_array import FixedArray
from . import ChunkIndex, ChunkRecord, IndexContext

if TYPE_CHECKING:
    from ..transaction import Transaction


def chunk_nbytes(ctx: IndexContext) -> int:
    """Bytes of one unfiltered chunk (libhdf5's layout->size)."""
    n = ctx.layout.element_size
    for d in ctx.layout.chunk_dims:
        n *= d
    return n


def _check_rank(ctx: IndexContext) -> None:
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


def size_width_from_element(ctx: IndexContext, element_size: int) -> int:
    """Width of the 'chunk size' field, read off the stored element/record size.

    libhdf5 writes ``1 + (log2(chunk bytes) + 8) // 8`` (layout v4) or `size of lengths` (v5);
    the stored element size already says which, so it decides. Structured chunk elements hold
    their section metadata after it."""
    comp = ctx.layout.composition
    w = element_size - ctx.reader.sizes.offset - (comp.meta_size(ctx.filtered) if comp else 4)
    if not 1 <= w <= 8:
        raise FormatError(f"{ctx.what}: chunk index element size {element_size} leaves {w} bytes for the chunk size")
    return w


def element_decoder(ctx: IndexContext, client_id: int, element_size: int):
    """Chunk element decoder for an array client, checked against the dataset's storage."""
    if client_id > fa.CLIENT_FILTERED_STRUCTURED:
        raise FormatError(f"{ctx.what}: chunk index array of unknown client {client_id}")
    if client_id != fa.client_id(ctx.filtered, ctx.structured):
        raise FormatError(f"{ctx.what}: chunk index array of client {client_id} for a dataset with "
                          f"{'structured' if ctx.structured else 'plain'}, "
                          f"{'filtered' if ctx.filtered else 'unfiltered'} chunks")
    if ctx.filtered or ctx.structured:
        width = size_width_from_element(ctx, element_size)
    else:
        width = 0
        if element_size != ctx.reader.sizes.offset:
            raise FormatError(f"{ctx.what}: unfiltered chunk element of {element_size} bytes")
    return chunk_element_decoder(ctx.reader.sizes, ctx.filtered, width, ctx.layout.composition)


def to_record(ctx: IndexContext, coords: tuple[int, ...], el: ChunkElement, nbytes: int) -> ChunkRecord | None:
    if el.address is None:
        return None
    if ctx.structured:
        return ChunkRecord(coords, el.address, el.size, 0, el.sections)
    if ctx.filtered:
        return ChunkRecord(coords, el.address, el.size, el.filter_mask)
    return ChunkRecord(coords, el.address, nbytes, 0)


class ArrayIndex(ChunkIndex):
    """Lookup, iteration and the write entry points shared by the array indexes; subclasses map
    coordinates <-> slots and open their array."""

    array = None  # the decoded FixedArray or ExtensibleArray, None when no chunk was allocated
    what = ""     # the index, for messages

    def open_array(self, array) -> None:
        """Use this FixedArray or ExtensibleArray (the one a change left)."""
        raise NotImplementedError

    def writer(self, txn: Transaction):
        """The object applying a batch of changes to this index in `txn`."""
        raise NotImplementedError

    def put(self, txn: Transaction, records: Sequence[ChunkRecord]) -> DataLayout | None:
        return self.writer(txn).apply(records, ())

    def remove(self, txn: Transaction, coords: Sequence[tuple[int, ...]]) -> DataLayout | None:
        return self.writer(txn).apply((), coords)

    def index_of(self, coords: tuple[int, ...]) -> int | None:
        raise NotImplementedError

    def coords_of(self, idx: int) -> tuple[int, ...]:
        raise NotImplementedError

    def lookup(self, coords: tuple[int, ...]) -> ChunkRecord | None:
        return self.lookup_many([coords])[0]

    def lookup_many(self, coords: Sequence[tuple[int, ...]]) -> list[ChunkRecord | None]:
        if self.array is None:
            return [None] * len(coords)
        coords = [tuple(c) for c in coords]
        raws = self.array.get_many([self.index_of(c) for c in coords])
        return [None if raw is None else to_record(self.ctx, c, self.decode(raw), self.nbytes)
                for c, raw in zip(coords, raws)]

    def records(self) -> Iterator[ChunkRecord]:
        if self.array is None:
            return
        for idx, raw in self.array.items():
            rec = to_record(self.ctx, self.coords_of(idx), self.decode(raw), self.nbytes)
            if rec is not None:
                yield rec


class FixedArrayIndex(ArrayIndex):
    def __init__(self, ctx: IndexContext):
        super().__init__(ctx)
        _check_rank(ctx)
        self.grid = max_grid(ctx)
        self.nbytes = chunk_nbytes(ctx)
        self.what = f"{ctx.what}: fixed array index"
        addr = ctx.layout.index.address if ctx.layout.index else None
        if addr is not None:
            self.open_array(FixedArray(ctx.reader, addr, self.what))

    def open_array(self, array: FixedArray) -> None:
        ctx = self.ctx
        self.array = array
        h = array.header
        expected = prod(self.grid)
        if h.nelmts != expected:
            raise FormatError(f"{ctx.what}: fixed array holds {h.nelmts} slots, the maximum chunk grid "
                              f"{self.grid} needs {expected}")
        self.decode = element_decoder(ctx, h.client_id, h.element_size)

    def writer(self, txn: Transaction):
        from .fixed_array_write import FixedArrayWriter   # it imports this module
        return FixedArrayWriter(self, txn)

    def index_of(self, coords: tuple[int, ...]) -> int | None:
        return ravel(coords, self.grid)

    def coords_of(self, idx: int) -> tuple[int, ...]:
        return unravel(idx, self.grid)
