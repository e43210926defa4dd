"""bzip2 (filter 307, PyTables' H5Zbzip2.c): one bzip2 stream; client data: the block size
(1..9, compression level), 9 when absent."""

from __future__ import annotations

import imagecodecs

from ...errors import FormatError
from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo, FilterFailed


def decode(data: bytes | bytearray | memoryview, spec: FilterSpec, limit: int,
           info: ChunkInfo) -> bytes:
    # imagecodecs truncates silently at `out`: one spare byte tells an oversized stream.
    out = imagecodecs.bz2_decode(data, out=limit + 1)
    if len(out) > limit:
        raise FormatError(f"bzip2 stream decodes to more than {limit} bytes")
    return out


def encode(data: bytes | bytearray | memoryview, spec: FilterSpec, info: ChunkInfo) -> bytes:
    level = spec.client_data[0] if spec.client_data else 9
    if not 1 <= level <= 9:
        raise FilterFailed(f"bzip2 block size {level} outside 1..9")
    return imagecodecs.bz2_encode(data, level)
