"""Shuffle (filter 2): byte k of every element stored together, plane after plane."""

from __future__ import annotations

import numpy as np

from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo


def unshuffle(data: bytes | bytearray | memoryview, esize: int) -> bytes | bytearray | memoryview:
    n = len(data) // esize
    if esize <= 1 or n <= 1:  # libhdf5 leaves such buffers as they are
        return data
    src = np.frombuffer(data, np.uint8)
    out = np.empty(len(src), np.uint8)
    planes = src[: n * esize].reshape(esize, n)
    dst = out[: n * esize].reshape(n, esize)
    # One strided column write per plane runs ~3x faster than a transpose copy.
    for j in range(esize):
        dst[:, j] = planes[j]
    out[n * esize:] = src[n * esize:]  # a remainder shorter than an element is stored as is
    return memoryview(out)


def decode(data: bytes | bytearray | memoryview, spec: FilterSpec, limit: int,
           info: ChunkInfo) -> bytes | bytearray | memoryview:
    esize = spec.client_data[0] if spec.client_data else info.element_size
    return unshuffle(data, esize)
