"""Blosc (filter 32001): one Blosc1 buffer, whose 16-byte header carries its decoded size."""

from __future__ import annotations

import imagecodecs

from ...errors import FormatError
from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo


def decode(data: bytes | bytearray | memoryview, spec: FilterSpec, limit: int,
           info: ChunkInfo) -> bytes:
    mv = memoryview(data).cast("B")
    if len(mv) < 16:
        raise FormatError("blosc chunk shorter than its header")
    size = int.from_bytes(mv[4:8], "little")
    if size > limit:
        raise FormatError(f"blosc chunk claims {size} bytes, more than {limit}")
    return imagecodecs.blosc_decode(mv, out=size)
