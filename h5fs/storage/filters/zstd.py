"""Zstandard (filter 32015, HDF5Plugin-Zstandard): one zstd frame, with its content size (the
plugin's decoder needs it). Client data: the level, clamped to 1..22, 3 when absent."""

from __future__ import annotations

import imagecodecs

from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo
from ._bits import as_signed

_DEFAULT_LEVEL, _MAX_LEVEL = 3, 22


def decode(data: bytes | bytearray | memoryview, spec: FilterSpec, limit: int,
           info: ChunkInfo) -> bytes:
    # The frame's own content size is not trusted: the output buffer is `limit` bytes.
    return imagecodecs.zstd_decode(data, out=limit)


def encode(data: bytes | bytearray | memoryview, spec: FilterSpec, info: ChunkInfo) -> bytes:
    cd = spec.client_data
    level = as_signed(cd[0], 32) if cd else _DEFAULT_LEVEL  # the plugin reads an int
    return imagecodecs.zstd_encode(data, min(max(level, 1), _MAX_LEVEL))
