"""Bitshuffle (filter 32008, bshuf_h5filter.c), optionally with LZ4 or Zstandard.

Client data: major, minor, element size, block size (elements, 0 = default), compression
(0 none, 2 LZ4, 3 zstd), level. Uncompressed chunks are the bit-transposed blocks as they are.
Compressed chunks: 8-byte big-endian decoded size, 4-byte big-endian block size in bytes, then
per block of `block size` elements (the last one rounded down to a multiple of 8 elements) a
4-byte big-endian compressed size and the compressed bit-transposed block; the remaining
(elements % 8) elements follow raw. The default block size is 8 KiB of elements, a multiple of 8
and at least 128 (bshuf_default_block_size, fixed for ever by the format).
"""

from __future__ import annotations

import imagecodecs
import numpy as np

from ...errors import FormatError, Unsupported
from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo, FilterFailed
from ._bits import as_signed

_LZ4, _ZSTD = 2, 3
_TARGET_BLOCK_BYTES, _MIN_BLOCK = 8192, 128


def _blocks(nbytes: int, esize: int, block: int) -> list[int]:
    """Byte sizes of the blocks a chunk of `nbytes` is cut into: whole blocks of `block`
    elements, then one of the rest rounded down to a multiple of 8 elements (if any)."""
    n = nbytes // esize
    last = n % block - n % block % 8
    return [block * esize] * (n // block) + ([last * esize] if last else [])


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
    sizes = _blocks(nbytes, esize, block_bytes // esize)
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


def encode(data: bytes | bytearray | memoryview, spec: FilterSpec, info: ChunkInfo) -> bytes:
    cd = spec.client_data
    if len(cd) < 3 or not cd[2] or len(data) % cd[2]:
        raise FilterFailed(f"bitshuffle element size {cd[2:3]} for a chunk of {len(data)} bytes")
    esize = cd[2]
    block = (cd[3] if len(cd) > 3 else 0) or max(_TARGET_BLOCK_BYTES // esize // 8 * 8, _MIN_BLOCK)
    comp = cd[4] if len(cd) > 4 else 0
    if block % 8 or comp not in (0, _LZ4, _ZSTD) or (comp == _ZSTD and len(cd) < 6):
        raise FilterFailed(f"bitshuffle block size {block}, compression {comp}")
    shuffled = memoryview(imagecodecs.bitshuffle_encode(data, itemsize=esize, blocksize=block))
    if comp == 0:
        return shuffled
    level = as_signed(cd[5], 32) if comp == _ZSTD else 0
    parts = [len(data).to_bytes(8, "big"), (block * esize).to_bytes(4, "big")]
    at = 0
    for size in _blocks(len(data), esize, block):
        piece = shuffled[at:at + size]
        packed = imagecodecs.lz4_encode(piece) if comp == _LZ4 else imagecodecs.zstd_encode(piece, level)
        parts += [len(packed).to_bytes(4, "big"), packed]
        at += size
    parts.append(shuffled[at:])  # the last (elements % 8) elements, not transposed
    return b"".join(parts)
