"""Zstandard (filter 32015): one zstd frame."""

from __future__ import annotations

import imagecodecs

from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo


def decode(data: bytes | bytearray | memoryview, spec: FilterSpec, limit: int,
           info: ChunkInfo) -> bytes:
    # The frame's own content size is not trusted: the output buffer is `limit` bytes.
    return imagecodecs.zstd_decode(data, out=limit)
