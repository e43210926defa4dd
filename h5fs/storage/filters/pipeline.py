"""Apply a dataset's filter pipeline to one chunk, or undo it on a stored chunk.

Each filter module exposes ``decode(data, spec, limit, info)`` returning the bytes the filter was
given at write time, never more than ``limit`` bytes: the limit is what keeps a hostile chunk (a
"decompression bomb") from making us allocate more than the chunk can legitimately hold; and
``encode(data, spec, info)`` returning what libhdf5 (or the filter's plugin) would store, with
the parameters the file records. Encoders are pure functions of their arguments (codec libraries
called with a context of their own, the GIL released while they run): they run in worker threads.
"""

from __future__ import annotations

from typing import Callable, Union

from ...errors import CannotWrite, FormatError, H5fsError, Unsupported
from ...format.messages.filter_pipeline import FilterSpec
from . import (bitshuffle, blosc, blosc2, bzip2, deflate, fletcher32, lz4, lzf, nbit, scaleoffset,
               shuffle, szip, zstd)
from . import ChunkInfo

Buffer = Union[bytes, bytearray, memoryview]
Decoder = Callable[[Buffer, FilterSpec, int, ChunkInfo], Buffer]
Encoder = Callable[[Buffer, FilterSpec, ChunkInfo], Buffer]

DECODERS: dict[int, Decoder] = {
    1: deflate.decode,
    2: shuffle.decode,
    3: fletcher32.decode,
    4: szip.decode,
    5: nbit.decode,
    6: scaleoffset.decode,
    307: bzip2.decode,
    32000: lzf.decode,
    32001: blosc.decode,
    32004: lz4.decode,
    32008: bitshuffle.decode,
    32015: zstd.decode,
    32026: blosc2.decode,
}

ENCODERS: dict[int, Encoder] = {
    1: deflate.encode,
    2: shuffle.encode,
    3: fletcher32.encode,
    4: szip.encode,
    5: nbit.encode,
    6: scaleoffset.encode,
    307: bzip2.encode,
    32000: lzf.encode,
    32001: blosc.encode,
    32004: lz4.encode,
    32008: bitshuffle.encode,
    32015: zstd.encode,
    32026: blosc2.encode,
}


def _limit(encoded_before: tuple[FilterSpec, ...], nbytes: int) -> int:
    """Most bytes a decoder may produce: what the filters applied before it at write time can
    have grown the chunk to (a checksum adds 4 bytes; a compressor fed incompressible data
    or a scale-offset header adds a little)."""
    limit = nbytes
    for spec in encoded_before:
        if spec.id == 3:
            limit += 4
        elif spec.id != 2:
            limit += nbytes // 8 + 1024
    return limit


def decode_chunk(filters: tuple[FilterSpec, ...], data: bytes, filter_mask: int,
                 info: ChunkInfo) -> bytes:
    """Undo `filters` (in write order) on a stored chunk; bit i of `filter_mask` set means
    filter i was skipped when the chunk was written. Returns exactly `info.nbytes` bytes."""
    buf: Buffer = data
    for i in range(len(filters) - 1, -1, -1):
        if filter_mask >> i & 1:
            continue
        spec = filters[i]
        decoder = DECODERS.get(spec.id)
        if decoder is None:
            raise Unsupported(f"{info.what}: unsupported filter {spec.label!r} (id {spec.id})")
        limit = _limit(filters[:i], info.nbytes)
        where = f"{info.what}: filter {spec.label!r} (id {spec.id})"
        try:
            buf = decoder(buf, spec, limit, info)
        except H5fsError as e:
            raise type(e)(f"{where}: {e}") from e
        except Exception as e:  # a codec library's own error: the bytes are bad
            raise FormatError(f"{where}: {type(e).__name__}: {e}") from e
        if len(buf) > limit:
            raise FormatError(f"{where}: decodes to {len(buf)} bytes, more than {limit}")
    if len(buf) != info.nbytes:
        raise FormatError(f"{info.what}: chunk decodes to {len(buf)} bytes, expected {info.nbytes}")
    return buf if isinstance(buf, bytes) else bytes(buf)


def encode_chunk(filters: tuple[FilterSpec, ...], data: bytes, info: ChunkInfo) -> tuple[bytes, int]:
    """Apply `filters` (in write order) to a chunk's `info.nbytes` bytes: (the bytes to store, the
    chunk's filter mask). As libhdf5's H5Z_pipeline: an optional filter that is not available or
    fails is skipped and its bit set in the mask; a mandatory one fails the write."""
    buf: Buffer = data
    mask = 0
    for i, spec in enumerate(filters):
        where = f"{info.what}: filter {spec.label!r} (id {spec.id})"
        encoder = ENCODERS.get(spec.id)
        if encoder is None:
            if not spec.optional:
                raise Unsupported(f"{where} cannot be written")
            mask |= 1 << i
            continue
        try:
            buf = encoder(buf, spec, info)
        except Exception as e:  # a filter or its codec library failing, as libhdf5 sees it
            if not spec.optional:
                if isinstance(e, H5fsError):
                    raise type(e)(f"{where}: {e}") from e
                raise CannotWrite(f"{where}: {type(e).__name__}: {e}") from e
            mask |= 1 << i
    return (buf if isinstance(buf, bytes) else bytes(buf)), mask
