"""bzip2 (filter 307): one bzip2 stream."""

from __future__ import annotations

import imagecodecs

from ...errors import FormatError
from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo


def decode(data: bytes | bytearray | memoryview, spec: FilterSpec, limit: int,
           info: ChunkInfo) -> bytes:
    # imagecodecs truncates silently at `out`: one spare byte tells an oversized stream.
    out = imagecodecs.bz2_decode(data, out=limit + 1)
    if len(out) > limit:
        raise FormatError(f"bzip2 stream decodes to more than {limit} bytes")
    return out
