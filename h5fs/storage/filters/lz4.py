"""LZ4 (filter 32004, the HDF Group's H5Zlz4.c): 8-byte big-endian decoded size, 4-byte block
size, then per block a 4-byte big-endian compressed size and an LZ4 block (stored raw when
compression did not pay). Client data: the block size in bytes, 0 or absent for 1 GiB."""

from __future__ import annotations

import imagecodecs

from ...errors import FormatError
from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo, FilterFailed

_DEFAULT_BLOCK = 1 << 30


def decode(data: bytes | bytearray | memoryview, spec: FilterSpec, limit: int,
           info: ChunkInfo) -> bytes:
    mv = memoryview(data).cast("B")
    if len(mv) < 12:
        raise FormatError("lz4 chunk shorter than its header")
    size = int.from_bytes(mv[:8], "big")
    if size > limit:
        raise FormatError(f"lz4 chunk claims {size} bytes, more than {limit}")
    return imagecodecs.lz4h5_decode(mv, out=size)


def encode(data: bytes | bytearray | memoryview, spec: FilterSpec, info: ChunkInfo) -> bytes:
    if len(data) > 0x7FFFFFFF:
        raise FilterFailed("lz4 chunks are limited to 2 GiB")
    cd = spec.client_data
    block = cd[0] if cd and cd[0] else _DEFAULT_BLOCK
    # The header records the block size after H5Zlz4.c cuts it down to the chunk.
    return imagecodecs.lz4h5_encode(data, blocksize=max(1, min(block, len(data))))
