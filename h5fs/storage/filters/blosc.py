"""Blosc (filter 32001, hdf5-blosc): one Blosc1 buffer, whose 16-byte header carries its decoded
size. Client data: filter and format versions, type size, chunk size, then optionally the level
(5), the shuffle (0 none, 1 byte, 2 bit; 1) and the compressor code (0 blosclz, 1 lz4, 2 lz4hc,
3 snappy, 4 zlib, 5 zstd; 0)."""

from __future__ import annotations

import imagecodecs
import numpy as np

from ...errors import FormatError
from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo, FilterFailed

_COMPRESSORS = range(6)


def decode(data: bytes | bytearray | memoryview, spec: FilterSpec, limit: int,
           info: ChunkInfo) -> bytes:
    mv = memoryview(data).cast("B")
    if len(mv) < 16:
        raise FormatError("blosc chunk shorter than its header")
    size = int.from_bytes(mv[4:8], "little")
    if size > limit:
        raise FormatError(f"blosc chunk claims {size} bytes, more than {limit}")
    return imagecodecs.blosc_decode(mv, out=size)


def typed(data: bytes | bytearray | memoryview, typesize: int) -> np.ndarray:
    """`data` as elements of `typesize` bytes: imagecodecs takes Blosc's type size from the
    buffer's item size. A buffer that is not whole elements goes as bytes."""
    return np.frombuffer(data, f"V{typesize}" if typesize and len(data) % typesize == 0 else "V1")


def encode(data: bytes | bytearray | memoryview, spec: FilterSpec, info: ChunkInfo) -> bytes:
    cd = spec.client_data
    if len(cd) < 4:
        raise FilterFailed(f"blosc needs at least 4 client data values, got {len(cd)}")
    level = cd[4] if len(cd) > 4 else 5
    shuffle = cd[5] if len(cd) > 5 else 1
    compressor = cd[6] if len(cd) > 6 else 0
    if level > 9 or shuffle > 2 or compressor not in _COMPRESSORS:
        raise FilterFailed(f"blosc level {level}, shuffle {shuffle}, compressor {compressor}")
    # hdf5-blosc gives Blosc an output buffer of the input's size: data it cannot shrink fails.
    return imagecodecs.blosc_encode(typed(data, cd[2]), level, compressor=compressor, shuffle=shuffle,
                                    numthreads=1, out=len(data))
