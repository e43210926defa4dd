"""Sparse datasets (structured chunks): the dense raw view and the list of defined elements.

The dense view is a chunked source whose chunks are decoded from their sections into the fill
value with the defined values placed (storage/sparse_chunk.py); the list of defined elements
reads only the chunks the index holds, decoding none of them into a dense chunk."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from .chunked import MAX_CHUNK_BYTES, ChunkedSource
from .sparse_chunk import SparseCodec


class SparseSource(ChunkedSource):
    def __init__(self, shape, itemsize, chunk, index, codec: SparseCodec, fill, cache, owner, what):
        super().__init__(shape, itemsize, chunk, index, (), fill, cache, owner, what)
        self.codec = codec
        self.stored_max = MAX_CHUNK_BYTES   # a selection can take more room than the dense chunk
        # a few defined elements cost far less than a dense chunk: a write into a chunk not in
        # memory waits as a patch, stored or not (model/chunk_staging.py), until a read or the flush
        self.sparse = True

    def _decode(self, coords: tuple[int, ...], rec, data: bytes) -> bytes:
        return self.codec.dense(*self.codec.decode(data, rec.sections, self._is_edge(coords),
                                                   f"{self.what} chunk {coords}"))

    def chunk_points(self, coords: tuple[int, ...], rec) -> tuple[np.ndarray, bytes]:
        """(sorted positions in the chunk, values) of a stored chunk's defined elements."""
        return self.codec.decode(self.stored(coords, rec, self.stored_max), rec.sections, self._is_edge(coords),
                                 f"{self.what} chunk {coords}")

    def defined_chunks(self) -> Iterator[tuple[tuple[int, ...], object]]:
        """(coords, record) of every stored chunk, in row-major order of the chunk grid."""
        return iter(sorted(((r.coords, r) for r in self.index.records()), key=lambda cr: cr[0]))
