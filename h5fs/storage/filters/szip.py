"""Szip (filter 4), decoded by libaec through imagecodecs.

Client data as libhdf5's H5Zszip.c stores it: options mask, pixels per block, bits per pixel,
pixels per scanline. Each chunk starts with its decoded size, 4 bytes little-endian.
"""

from __future__ import annotations

import imagecodecs

from ...errors import FormatError
from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo


def decode(data: bytes | bytearray | memoryview, spec: FilterSpec, limit: int,
           info: ChunkInfo) -> bytes:
    if len(spec.client_data) < 4:
        raise FormatError(f"szip needs 4 client data values, got {len(spec.client_data)}")
    mask, ppb, bpp, pps = spec.client_data[:4]
    mv = memoryview(data).cast("B")
    if len(mv) < 4:
        raise FormatError("szip chunk shorter than its size header")
    size = int.from_bytes(mv[:4], "little")
    if size > limit:
        raise FormatError(f"szip chunk claims {size} bytes, more than {limit}")
    out = imagecodecs.szip_decode(mv[4:], mask, ppb, bpp, pps, out=size)
    if len(out) != size:
        raise FormatError(f"szip chunk decodes to {len(out)} bytes, header says {size}")
    return out
