"""Deflate (filter 1): a zlib stream. Encoded by libdeflate at the level the file stores (libhdf5
uses zlib; libdeflate at the same level is about twice as fast and compresses alike)."""

from __future__ import annotations

import zlib

import deflate as libdeflate

from ...errors import FormatError
from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo, FilterFailed


def decode(data: bytes | bytearray | memoryview, spec: FilterSpec, limit: int,
           info: ChunkInfo) -> bytes | bytearray:
    try:
        # libdeflate inflates ~2x faster than zlib; with a size hint above the real size it
        # still succeeds and returns the real size, and it never writes past `limit`.
        return libdeflate.zlib_decompress(data, limit)
    except libdeflate.DeflateError:
        pass
    # libdeflate is strict (e.g. about trailing bytes after the stream): let zlib judge,
    # producing at most limit + 1 bytes so an oversized stream is detected, not allocated.
    d = zlib.decompressobj()
    try:
        out = d.decompress(data, limit + 1)
    except zlib.error as e:
        raise FormatError(f"corrupt deflate stream ({e})") from None
    if len(out) > limit:
        raise FormatError(f"deflate stream inflates to more than {limit} bytes")
    if not d.eof:
        raise FormatError("truncated deflate stream")
    return out


def encode(data: bytes | bytearray | memoryview, spec: FilterSpec, info: ChunkInfo) -> bytearray:
    cd = spec.client_data
    if len(cd) != 1 or cd[0] > 9:  # H5Z_filter_deflate refuses any other parameters
        raise FilterFailed(f"deflate parameters {cd} are not one level 0..9")
    # libhdf5's output buffer (input size * 1.001 + 12) holds any zlib stream: deflate never fails.
    return libdeflate.zlib_compress(data, cd[0])
