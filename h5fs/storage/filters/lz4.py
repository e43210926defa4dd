"""LZ4 (filter 32004, the HDF Group's H5Zlz4.c): 8-byte big-endian decoded size, 4-byte block
size, then per block a 4-byte big-endian compressed size and an LZ4 block (stored raw when
compression did not pay)."""

from __future__ import annotations

import imagecodecs

from ...errors import FormatError
from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo


def decode(data: bytes | bytearray | memoryview, spec: FilterSpec, limit: int,
           info: ChunkInfo) -> bytes:
    mv = memoryview(data).cast("B")
    if len(mv) < 12:
        raise FormatError("lz4 chunk shorter than its header")
    size = int.from_bytes(mv[:8], "big")
    if size > limit:
        raise FormatError(f"lz4 chunk claims {size} bytes, more than {limit}")
    return imagecodecs.lz4h5_decode(mv, out=size)
