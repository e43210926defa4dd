"""Chunked layout: serve row-major byte ranges from filtered chunks through the shared cache.

Chunks are cached under (owner, chunk coordinates); the owner names this version of the dataset
(see chunk_cache.py), so a source built after the dataset changed never sees the old chunks."""

from __future__ import annotations

from math import prod
from typing import Callable

import numpy as np

from ..errors import FormatError
from ..format.messages.filter_pipeline import FilterSpec
from .chunk_cache import MAX_BUDGET, ChunkCache
from .chunk_grid import chunks_in_box, linear_boxes, overlap
from .filters import ChunkInfo
from . import unfiltered_read
from .index import ChunkIndex, ChunkRecord
from .sources import NOWAIT, RawSource, fill_pattern

# A chunk larger than the cache can ever hold would be decoded again on every read: refused.
MAX_CHUNK_BYTES = MAX_BUDGET
FILL = "fill"   # the coordinates under which a source caches its chunk of fill values
RECORD_BYTES = 300   # a chunk record kept by grid coordinates


def is_edge(coords: tuple[int, ...], chunk: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether the chunk at grid `coords` reaches past the dataset's extent (a partial edge chunk)."""
    return any((c + 1) * k > d for c, k, d in zip(coords, chunk, shape))


def chunk_elements(filters: tuple[FilterSpec, ...], stored: bytes, filter_mask: int, info: ChunkInfo,
                   unfiltered: bool = False) -> bytes:
    """A chunk's elements from its stored bytes: the pipeline undone, unless there is none or
    the chunk is `unfiltered` (an edge chunk of a dataset that leaves them unfiltered)."""
    if not filters or unfiltered:
        return stored
    from .filters.pipeline import decode_chunk   # at the first decode: the codecs take 0.1 s to import
    return decode_chunk(filters, stored, filter_mask, info)


def read_chunk(reader, rec: ChunkRecord, filters: tuple[FilterSpec, ...], nbytes: int, itemsize: int, what: str,
               unfiltered: bool = False) -> bytes:
    """A chunk's elements read through a BlockReader (`unfiltered` as for `chunk_elements`)."""
    data = chunk_elements(filters, reader.read(rec.address, rec.size, what), rec.filter_mask,
                          ChunkInfo(nbytes, itemsize, what), unfiltered)
    if len(data) != nbytes:
        raise FormatError(f"{what}: holds {len(data)} bytes, a chunk is {nbytes}")
    return data


class ChunkedSource(RawSource):
    def __init__(self, shape: tuple[int, ...], itemsize: int, chunk: tuple[int, ...], index: ChunkIndex,
                 filters: tuple[FilterSpec, ...], fill: bytes | None, cache: ChunkCache, owner: object,
                 what: str, edge_unfiltered: bool = False):
        super().__init__(prod(shape) * itemsize)
        if len(chunk) != len(shape):
            raise FormatError(f"{what}: chunk rank {len(chunk)} differs from dataspace rank {len(shape)}")
        self.shape, self.itemsize, self.chunk = shape, itemsize, chunk
        self.chunk_bytes = prod(chunk) * itemsize
        if self.chunk_bytes > MAX_CHUNK_BYTES:
            raise FormatError(f"{what}: chunk of {self.chunk_bytes} bytes is too large to serve")
        self.index, self.filters, self.fill = index, filters, fill
        self.cache, self.owner, self.what = cache, owner, what
        self.grid = tuple(-(-d // c) for d, c in zip(shape, chunk))
        cache.reserve(self.chunk_bytes * (prod(self.grid[1:]) + 1))   # a row of chunks, and one more
        self.edge_unfiltered = edge_unfiltered
        self.stored_max = self.chunk_bytes if not filters else MAX_CHUNK_BYTES   # a chunk's stored bytes
        # elements copied as `words` unsigned integers of `word` each: NumPy copies whole words
        # in its inner loop, not single bytes
        size = next(w for w in (8, 4, 2, 1) if itemsize % w == 0)
        self.word, self.words = np.dtype(f"<u{size}"), itemsize // size
        self.sparse = False   # structured chunks of defined elements (sparse_source.py)
        self._allocated: int | None = None
        self.row_bytes = prod(chunk[1:]) * itemsize   # one element row of a chunk, in the file
        self._row: dict[tuple[int, ...], ChunkRecord | None] = {}   # the last row of chunks looked up
        self.next_offset = -1   # where the last direct read ended: a reader going on reads ahead

    @property
    def direct(self) -> bool:
        """Chunks stored as their elements: reads go straight from the file (unfiltered_read)."""
        return not self.filters and not self.sparse

    def records(self, coords: list[tuple[int, ...]],
                wider: Callable[[], list[tuple[int, ...]]] | None = None) -> list[ChunkRecord | None]:
        """The index records of these chunks. On a miss, those of `wider()` (a row of chunks
        around them, these included) in one index walk, kept for the reads that cross the row."""
        row = self._row
        try:
            return [row[c] for c in coords]
        except KeyError:
            pass
        around = coords if wider is None else wider()
        row = self._row = dict(zip(around, self.index.lookup_many(around)))
        return [row[c] for c in coords]

    # -- chunks ---------------------------------------------------------------------------
    def _is_edge(self, coords: tuple[int, ...]) -> bool:
        return is_edge(coords, self.chunk, self.shape)

    def _fill(self) -> bytes:
        """A chunk of fill values, held by the cache (it can be as large as a chunk)."""
        return self.cache.get((self.owner, FILL), lambda: fill_pattern(self.fill, self.itemsize, 0, self.chunk_bytes))

    def _load(self, coords: tuple[int, ...], rec=None) -> bytes:
        if rec is None:
            rec = self.index.lookup(coords)
        if rec is None:
            return self._fill()
        data = self._decode(coords, rec, self.stored(coords, rec, self.stored_max))
        if len(data) != self.chunk_bytes:
            raise FormatError(f"{self.what}: chunk {coords} holds {len(data)} bytes, expected {self.chunk_bytes}")
        return data

    def located(self, coords: tuple[int, ...], rec, stored_max: int) -> int:
        """Where the chunk's stored bytes begin in the file, checked to lie inside it."""
        reader = self.index.ctx.reader
        if rec.size < 0 or rec.size > stored_max:
            raise FormatError(f"{self.what}: chunk {coords} claims {rec.size} stored bytes")
        if rec.address is None or rec.address < 0 or reader.base + rec.address + rec.size > reader.eof:
            raise FormatError(f"{self.what}: chunk {coords} at {rec.address}+{rec.size} lies outside the file")
        return reader.base + rec.address

    def stored(self, coords: tuple[int, ...], rec, stored_max: int) -> bytes:
        """The chunk's bytes as the file stores them, checked to lie inside it."""
        position = self.located(coords, rec, stored_max)
        data = self.index.ctx.reader.source.pread(rec.size, position) if rec.size else b""
        if len(data) != rec.size:
            raise FormatError(f"{self.what}: chunk {coords} at {rec.address}+{rec.size} lies outside the file")
        return data

    def _decode(self, coords: tuple[int, ...], rec, data: bytes) -> bytes:
        """The chunk's elements from its stored bytes."""
        return chunk_elements(self.filters, data, rec.filter_mask,
                              ChunkInfo(self.chunk_bytes, self.itemsize, f"{self.what} chunk {coords}"),
                              self.edge_unfiltered and self._is_edge(coords))

    def chunk_bytes_at(self, coords: tuple[int, ...]) -> bytes:
        """The decoded chunk; the shared fill chunk when it was never allocated."""
        data = self._chunk_or_none(coords)
        return self._fill() if data is None else data

    def _chunk_or_none(self, coords: tuple[int, ...]) -> bytes | None:
        """The decoded chunk, or None when it was never allocated (never cached: a hostile
        extent of tiny unallocated chunks must neither flood the cache nor cost a decode each)."""
        key = (self.owner, coords)
        data = self.cache.peek(key)
        if data is not None:
            return data
        rec = self.index.lookup(coords)
        if rec is None:
            return None
        return self.cache.get(key, lambda: self._load(coords, rec))

    # -- RawSource --------------------------------------------------------------------------
    def read(self, offset: int, size: int) -> bytes | memoryview:
        if self.direct:
            return unfiltered_read.read(self, offset, size)
        return self._read(offset, size, self._chunk_or_none)   # a view: the FUSE reply copies it once

    def read_cached(self, offset: int, size: int) -> bytes | memoryview | None:
        """The bytes when the cache holds every chunk, or (unfiltered chunks) the page cache
        does; None when a chunk needs I/O or decoding."""
        if self.direct:
            if not NOWAIT:
                return None
            try:
                return unfiltered_read.read(self, offset, size, NOWAIT)
            except unfiltered_read.Miss:
                return None
        held = {}
        for coords in self.chunks_under(offset, size):   # every chunk first: a miss costs no output buffer
            data = self.cache.peek((self.owner, coords))
            if data is None:
                return None
            held[coords] = data
        return self._read(offset, size, held.get)   # a view: the FUSE reply copies it once

    def _read(self, offset: int, size: int, chunk_at) -> bytes | memoryview:
        """The bytes, assembled once: each chunk's part is copied straight into its place in one
        output buffer (a run inside one chunk is a view of the decoded chunk, no copy)."""
        offset, size = self.clip(offset, size)
        if size == 0:
            return b""
        isz = self.itemsize
        e0, e1 = offset // isz, -(-(offset + size) // isz)
        skip = offset - e0 * isz
        boxes = linear_boxes(self.shape, e0, e1)
        if len(boxes) == 1:
            run = self._run_in_one_chunk(boxes[0])
            if run is not None:
                coords, first = run
                data = chunk_at(coords)
                if data is not None:
                    start = first * isz + skip
                    return memoryview(data)[start:start + size]
        buf = np.empty((e1 - e0) * isz, np.uint8)   # every element is written below: not zeroed first
        out = buf.view(self.word).reshape(-1, self.words)
        fill = 0 if not self.fill or not any(self.fill) else np.frombuffer(self.fill, self.word)
        pos = 0
        for start, count in boxes:
            n = prod(count)
            view = out[pos:pos + n].reshape(count + (self.words,))
            pos += n
            for coords in chunks_in_box((start, count), self.chunk):
                dst, src = overlap((start, count), coords, self.chunk)
                data = chunk_at(coords)
                if data is None:   # never allocated
                    view[dst] = fill
                    continue
                view[dst] = np.frombuffer(data, self.word).reshape(self.chunk + (self.words,))[src]
        return memoryview(buf)[skip:skip + size]

    def chunks_under(self, offset: int, size: int, missing: bool = False) -> list[tuple[int, ...]]:
        """The chunks under bytes [offset, offset+size), each once (`missing`: those the cache
        neither holds nor is decoding: the work a reader of these bytes would wait for)."""
        offset, size = self.clip(offset, size)
        if size == 0:
            return []
        isz = self.itemsize
        out = dict.fromkeys(c for box in linear_boxes(self.shape, offset // isz, -(-(offset + size) // isz))
                            for c in chunks_in_box(box, self.chunk))
        return [c for c in out if not missing or self.cache.wanted((self.owner, c))]

    def fetch_ahead(self, coords: list[tuple[int, ...]]) -> None:
        """Have a remote object fetch these chunks' stored bytes together, without waiting (the
        decoding of each then finds its bytes arriving, not a round trip of its own)."""
        reader = self.index.ctx.reader
        spans = [(self.located(c, rec, self.stored_max), rec.size)
                 for c, rec in zip(coords, self.index.lookup_many(coords)) if rec is not None and rec.size]
        reader.source.want(spans, wait=False)

    def warm_chunk(self, coords: tuple[int, ...]) -> None:
        """Decode one chunk into the cache, assembling nothing."""
        self._chunk_or_none(coords)

    def _run_in_one_chunk(self, box) -> tuple[tuple[int, ...], int] | None:
        """(chunk coords, first element's linear index in it) when the box is one contiguous run
        of a single chunk's elements, so a read can slice the chunk instead of copying boxes."""
        start, count = box
        coords = tuple(s // c for s, c in zip(start, self.chunk))
        if coords != tuple((s + n - 1) // c for s, n, c in zip(start, count, self.chunk)):
            return None
        inner = [s - k * c for s, k, c in zip(start, coords, self.chunk)]
        dims = [d for d, n in enumerate(count) if n != 1]
        # contiguous: below the outermost dimension that spans several elements, every
        # dimension is taken whole
        if dims and any(count[d] != self.chunk[d] or inner[d] for d in range(dims[0] + 1, len(count))):
            return None
        first = 0
        for i, c in zip(inner, self.chunk):
            first = first * c + i
        return coords, first

    def footprint(self) -> int:
        # the source and its index object (index blocks live in the metadata cache), and the
        # records of the row of chunks it keeps
        return 1024 + (RECORD_BYTES * unfiltered_read.records_kept(self) if self.direct else 0)

    def allocated(self) -> int:
        if self._allocated is None:
            self._allocated = self.index.allocated_bytes()
        return self._allocated


