"""Bitshuffle (filter 32008, bshuf_h5filter.c), optionally with LZ4 or Zstandard.

Client data: major, minor, element size, block size (elements, 0 = default), compression
(0 none, 2 LZ4, 3 zstd), level. Uncompressed chunks are the bit-transposed blocks as they are.
Compressed chunks: 8-byte big-endian decoded size, 4-byte big-endian block size in bytes, then
per block of `block size` elements (the last one rounded down to a multiple of 8 elements) a
4-byte big-endian compressed size and the compressed bit-transposed block; the remaining
(elements % 8) elements follow raw.
"""

from __future__ import annotations

import imagecodecs
import numpy as np

from ...errors import FormatError, Unsupported
from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo

_LZ4, _ZSTD = 2, 3


def _inflate_blocks(mv: memoryview, comp: int, esize: int, limit: int) -> np.ndarray:
    """The bit-transposed chunk, every block decompressed."""
    if len(mv) < 12:
        raise FormatError("bitshuffle chunk shorter than its header")
    nbytes = int.from_bytes(mv[:8], "big")
    block_bytes = int.from_bytes(mv[8:12], "big")
    if nbytes > limit:
        raise FormatError(f"bitshuffle chunk claims {nbytes} bytes, more than {limit}")
    if nbytes % esize or block_bytes % esize or block_bytes // esize % 8 or not block_bytes:
        raise FormatError(f"bitshuffle sizes {nbytes}/{block_bytes} do not fit element size {esize}")
    block = block_bytes // esize
    n = nbytes // esize
    last = n % block - n % block % 8
    sizes = [block_bytes] * (n // block) + ([last * esize] if last else [])
    out = np.empty(nbytes, np.uint8)
    dst = memoryview(out)
    pos, at = 12, 0
    for size in sizes:
        csize = int.from_bytes(mv[pos:pos + 4], "big")
        src = mv[pos + 4:pos + 4 + csize]
        if len(src) != csize or csize == 0:
            raise FormatError("truncated bitshuffle block")
        if comp == _LZ4:
            got = imagecodecs.lz4_decode(src, out=dst[at:at + size])
        else:
            got = imagecodecs.zstd_decode(src, out=dst[at:at + size])
        if len(got) != size:
            raise FormatError(f"bitshuffle block decodes to {len(got)} bytes, expected {size}")
        pos += 4 + csize
        at += size
    rest = mv[pos:pos + nbytes - at]
    if len(rest) != nbytes - at:
        raise FormatError("truncated bitshuffle chunk")
    out[at:] = np.frombuffer(rest, np.uint8)
    return out


def decode(data: bytes | bytearray | memoryview, spec: FilterSpec, limit: int,
           info: ChunkInfo) -> bytes | bytearray:
    cd = spec.client_data
    esize = cd[2] if len(cd) > 2 else info.element_size
    block = cd[3] if len(cd) > 3 else 0
    comp = cd[4] if len(cd) > 4 else 0
    if esize <= 0:
        raise FormatError("bitshuffle element size 0")
    mv = memoryview(data).cast("B")
    if comp in (_LZ4, _ZSTD):
        shuffled = _inflate_blocks(mv, comp, esize, limit)
        block = int.from_bytes(mv[8:12], "big") // esize
    elif comp == 0:
        shuffled = mv
    else:
        raise Unsupported(f"bitshuffle compression {comp}")
    if len(shuffled) % esize:
        raise FormatError(f"bitshuffle chunk of {len(shuffled)} bytes is not whole elements of {esize}")
    # A bytes-like input (an ndarray would be unshuffled by its own dtype) gives bytes back.
    return imagecodecs.bitshuffle_decode(memoryview(shuffled), itemsize=esize, blocksize=block)
