"""Shuffle (filter 2): byte k of every element stored together, plane after plane."""

from __future__ import annotations

import numpy as np

from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo, FilterFailed


def _transpose(data: bytes | bytearray | memoryview, rows: int, cols: int) -> bytes | bytearray | memoryview:
    """The first rows x cols bytes of `data` stored column after column; a remainder shorter
    than a row stays at the end as it is."""
    src = np.frombuffer(data, np.uint8)
    out = np.empty(len(src), np.uint8)
    grid = src[: rows * cols].reshape(rows, cols)
    dst = out[: rows * cols].reshape(cols, rows)
    # One strided copy per byte plane (the short side) runs ~3x faster than a transpose copy.
    if cols <= rows:
        for j in range(cols):
            dst[j] = grid[:, j]
    else:
        for i in range(rows):
            dst[:, i] = grid[i]
    out[rows * cols:] = src[rows * cols:]
    return memoryview(out)


def _planes(data: bytes | bytearray | memoryview, esize: int) -> int:
    """Elements in `data`, or 0 when libhdf5 leaves it as it is (1-byte or single elements)."""
    n = len(data) // esize if esize > 1 else 0
    return n if n > 1 else 0


def unshuffle(data: bytes | bytearray | memoryview, esize: int) -> bytes | bytearray | memoryview:
    n = _planes(data, esize)
    return _transpose(data, esize, n) if n else data


def decode(data: bytes | bytearray | memoryview, spec: FilterSpec, limit: int,
           info: ChunkInfo) -> bytes | bytearray | memoryview:
    esize = spec.client_data[0] if spec.client_data else info.element_size
    return unshuffle(data, esize)


def encode(data: bytes | bytearray | memoryview, spec: FilterSpec,
           info: ChunkInfo) -> bytes | bytearray | memoryview:
    if len(spec.client_data) != 1:  # H5Z__filter_shuffle takes exactly the element size
        raise FilterFailed(f"shuffle needs 1 client data value, got {len(spec.client_data)}")
    n = _planes(data, spec.client_data[0])
    return _transpose(data, n, spec.client_data[0]) if n else data
