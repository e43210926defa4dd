"""LZF (filter 32000, h5py's lzf_filter.c): a bare LZF stream, no header. The filter gives liblzf
an output buffer of the input's size: data LZF cannot shrink fails."""

from __future__ import annotations

import imagecodecs

from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo, FilterFailed


def decode(data: bytes | bytearray | memoryview, spec: FilterSpec, limit: int,
           info: ChunkInfo) -> bytes:
    # liblzf stops with an error rather than write past `out`.
    return imagecodecs.lzf_decode(data, out=limit)


def encode(data: bytes | bytearray | memoryview, spec: FilterSpec, info: ChunkInfo) -> bytes:
    out = imagecodecs.lzf_encode(data)
    if len(out) > len(data):
        raise FilterFailed(f"LZF does not shrink {len(data)} bytes")
    return out
