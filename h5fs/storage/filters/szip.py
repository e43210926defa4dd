"""Szip (filter 4), decoded by libaec through imagecodecs.

Client data as libhdf5's H5Zszip.c stores it: options mask, pixels per block, bits per pixel,
pixels per scanline. Each chunk starts with its decoded size, 4 bytes little-endian. libhdf5
gives the encoder an output buffer of the chunk's own size: data it cannot shrink fails.
"""

from __future__ import annotations

import imagecodecs

from ...errors import FormatError
from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo, FilterFailed


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


def encode(data: bytes | bytearray | memoryview, spec: FilterSpec, info: ChunkInfo) -> bytes:
    if len(spec.client_data) != 4:
        raise FilterFailed(f"szip needs 4 client data values, got {len(spec.client_data)}")
    mask, ppb, bpp, pps = spec.client_data
    # libaec reports a full output buffer as an error, as libsz does for libhdf5 ("overflow").
    return imagecodecs.szip_encode(data, mask, ppb, bpp, pps, header=True, out=len(data) + 4)
