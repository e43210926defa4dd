"""LZF (filter 32000, h5py's lzf_filter.c): a bare LZF stream, no header."""

from __future__ import annotations

import imagecodecs

from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo


def decode(data: bytes | bytearray | memoryview, spec: FilterSpec, limit: int,
           info: ChunkInfo) -> bytes:
    # liblzf stops with an error rather than write past `out`.
    return imagecodecs.lzf_decode(data, out=limit)
