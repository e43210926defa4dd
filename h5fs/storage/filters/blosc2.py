"""Blosc2 (filter 32026, HDF5-Blosc2 / hdf5plugin).

Each chunk is a Blosc2 contiguous frame (cframe): a msgpack header, the compressed Blosc2 chunks,
a Blosc2 chunk of int64 chunk offsets, a trailer. The filter writes one chunk per frame. When
the frame carries a "b2nd" metalayer the chunk holds its data block by block (each block in C
order, blocks in C order over a grid padded up to whole blocks), which is put back in C order.

Client data: filter version, block size (bytes, 0 = chosen by Blosc2), type size, chunk size,
level, shuffle (0 none, 1 byte, 2 bit, 3 delta, 4 truncated precision), compressor code (0
blosclz, 1 lz4, 2 lz4hc, 4 zlib, 5 zstd; 0 when absent), and for 2..8-dimensional chunks the rank
and the chunk's dimensions: the encoder then writes a b2nd frame as HDF5-Blosc2 does, its block
shape grown from 2 x ... x 2 towards the block size (compute_b2nd_block_shape).
"""

from __future__ import annotations

import functools
import math

import imagecodecs
import numpy as np

from ...errors import FormatError, Unsupported
from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo, FilterFailed
from ._blosc2_frame import SPLITMODE, frame
from ._msgpack import Reader
from .blosc import typed

_MAGIC = b"b2frame\0"
_SPECIAL_ZERO, _SPECIAL_NAN, _SPECIAL_UNINIT = 1, 2, 4
_COMPRESSORS = (0, 1, 2, 4, 5)
_MAX_DIM = 8


def _chunk(mv: memoryview, at: int) -> memoryview:
    """The Blosc2 chunk at `at`, sized by its own header (compressed size at bytes 12-15)."""
    if at < 0 or at + 16 > len(mv):
        raise FormatError("blosc2 chunk outside the frame")
    cbytes = int.from_bytes(mv[at + 12:at + 16], "little")
    if at + cbytes > len(mv) or cbytes < 16:
        raise FormatError("blosc2 chunk outside the frame")
    return mv[at:at + cbytes]


def _nbytes(chunk: memoryview) -> int:
    return int.from_bytes(chunk[4:8], "little")


def _b2nd_layout(meta: memoryview) -> tuple[list[int], list[int]]:
    """(chunk shape, block shape) of a b2nd metalayer: [version, ndim, shape, chunkshape,
    blockshape, ...]."""
    fields = Reader(meta).value()
    ndim, shape, blockshape = fields[1], fields[2], fields[4]
    if not (len(shape) == len(blockshape) == ndim) or not all(
            0 < b <= s for s, b in zip(shape, blockshape)):
        raise FormatError(f"blosc2 b2nd shape {shape} / block shape {blockshape} is invalid")
    return shape, blockshape


def _unblock(buf: np.ndarray, shape: list[int], blockshape: list[int], typesize: int) -> np.ndarray:
    grid = [-(-s // b) for s, b in zip(shape, blockshape)]
    blocked = buf.reshape(grid + blockshape + [typesize])
    nd = len(shape)
    order = [a for d in range(nd) for a in (d, nd + d)] + [2 * nd]
    full = blocked.transpose(order).reshape([g * b for g, b in zip(grid, blockshape)] + [typesize])
    return np.ascontiguousarray(full[tuple(slice(0, s) for s in shape)]).reshape(-1)


def decode(data: bytes | bytearray | memoryview, spec: FilterSpec, limit: int,
           info: ChunkInfo) -> bytes | bytearray | memoryview:
    mv = memoryview(data).cast("B")
    if bytes(mv[2:10]) != _MAGIC:  # not a frame: a bare Blosc2 chunk
        chunk = _chunk(mv, 0)
        if _nbytes(chunk) > limit:
            raise FormatError(f"blosc2 chunk claims {_nbytes(chunk)} bytes, more than {limit}")
        return imagecodecs.blosc2_decode(chunk, out=_nbytes(chunk))
    header = Reader(mv).value()
    if not isinstance(header, list) or len(header) < 14:
        raise FormatError("malformed blosc2 frame header")
    header_size, cbytes, typesize, metalayers = header[1], header[5], header[6], header[-1]
    if typesize <= 0:
        raise FormatError(f"blosc2 frame type size {typesize}")
    meta = {}
    if isinstance(metalayers, list) and len(metalayers) == 3 and isinstance(metalayers[1], dict):
        for name, offset in metalayers[1].items():
            meta[name] = Reader(mv, offset).value()
    offsets_chunk = _chunk(mv, header_size + cbytes)
    if _nbytes(offsets_chunk) != 8:
        raise Unsupported(f"blosc2 frame with {_nbytes(offsets_chunk) // 8} chunks")
    offset = int.from_bytes(imagecodecs.blosc2_decode(offsets_chunk, out=8), "little", signed=True)

    if "b2nd" in meta:
        shape, blockshape = _b2nd_layout(meta["b2nd"])
        if typesize * math.prod(shape) > limit:
            raise FormatError(f"blosc2 b2nd shape {shape} holds more than {limit} bytes")
        # Padding to whole blocks at most doubles each dimension (blocks <= shape).
        cap = typesize * math.prod(-(-s // b) * b for s, b in zip(shape, blockshape))
    else:
        cap = limit
    if offset < 0:  # a run-length chunk recorded in the index only
        special = offset >> 56 & 0x7F
        size = cap if "b2nd" in meta else header[4]
        if size > cap:
            raise FormatError(f"blosc2 frame claims {size} bytes, more than {limit}")
        if special in (_SPECIAL_ZERO, _SPECIAL_UNINIT):
            out = np.zeros(size, np.uint8)
        elif special == _SPECIAL_NAN and typesize in (4, 8):
            out = np.full(size // typesize, np.nan, f"<f{typesize}").view(np.uint8)
        else:
            raise Unsupported(f"blosc2 special chunk kind {special}")
    else:
        chunk = _chunk(mv, header_size + offset)
        size = _nbytes(chunk)
        if size > cap:
            raise FormatError(f"blosc2 chunk claims {size} bytes, more than {cap}")
        out = np.frombuffer(imagecodecs.blosc2_decode(chunk, out=size), np.uint8)
    if "b2nd" not in meta:
        return memoryview(out)
    if len(out) != cap:
        raise FormatError(f"blosc2 b2nd chunk of {len(out)} bytes does not match its shape")
    return memoryview(_unblock(out, shape, blockshape, typesize))


def _block(buf: memoryview, shape: list[int], blockshape: list[int], typesize: int) -> np.ndarray:
    """The inverse of `_unblock`: the chunk block by block, each block padded with zeros."""
    grid = [-(-s // b) for s, b in zip(shape, blockshape)]
    full = np.zeros([g * b for g, b in zip(grid, blockshape)] + [typesize], np.uint8)
    full[tuple(slice(0, s) for s in shape)] = np.frombuffer(buf, np.uint8).reshape(shape + [typesize])
    nd = len(shape)
    split = full.reshape([x for g, b in zip(grid, blockshape) for x in (g, b)] + [typesize])
    return np.ascontiguousarray(split.transpose(list(range(0, 2 * nd, 2)) + list(range(1, 2 * nd, 2))
                                                + [2 * nd])).reshape(-1)


@functools.lru_cache(maxsize=64)
def _default_blocksize(chunk_bytes: int, typesize: int, level: int, compcode: int) -> int:
    """The block size Blosc2 chooses for a chunk of that size: HDF5-Blosc2 reads it from a chunk of
    zeros compressed with the default parameters and these (compute_blosc2_blocksize)."""
    zeros = typed(bytes(chunk_bytes), typesize)
    chunk = imagecodecs.blosc2_encode(zeros, level, compressor=compcode, shuffle=1, splitmode=SPLITMODE,
                                      numthreads=1)
    return int.from_bytes(chunk[8:12], "little")


def _block_shape(block_bytes: int, typesize: int, chunkshape: list[int]) -> list[int]:
    """HDF5-Blosc2's compute_b2nd_block_shape: start at 2 (1 along length-1 dimensions) and double
    dimensions from the innermost while the block stays within `block_bytes`."""
    limit = block_bytes // typesize
    block = [1 if c == 1 else 2 for c in chunkshape]
    items = math.prod(block)
    while items < limit:
        before = items
        for i in range(len(chunkshape) - 1, -1, -1):
            if block[i] * 2 <= chunkshape[i]:
                if items * 2 <= limit:
                    items *= 2
                    block[i] *= 2
            elif block[i] < chunkshape[i] and items // block[i] * chunkshape[i] <= limit:
                items = items // block[i] * chunkshape[i]
                block[i] = chunkshape[i]
        if items == before:
            break
    return block


def _b2nd_meta(chunkshape: list[int], blockshape: list[int], typesize: int) -> bytes:
    """The "b2nd" metalayer: [version 0, rank, shape (int64), chunk shape, block shape (int32),
    NumPy dtype format 0, an opaque dtype "|V<typesize>"]; the frame's array is the one chunk."""
    fixarray = bytes([0x90 + len(chunkshape)])
    dtype = f"|V{typesize}".encode()
    return b"".join((b"\x97\x00", bytes([len(chunkshape)]),
                     fixarray, b"".join(b"\xd3" + s.to_bytes(8, "big") for s in chunkshape),
                     fixarray, b"".join(b"\xd2" + s.to_bytes(4, "big") for s in chunkshape),
                     fixarray, b"".join(b"\xd2" + b.to_bytes(4, "big") for b in blockshape),
                     b"\x00\xdb", len(dtype).to_bytes(4, "big"), dtype))


def encode(data: bytes | bytearray | memoryview, spec: FilterSpec, info: ChunkInfo) -> bytes:
    cd = spec.client_data
    if len(cd) < 6:
        raise FilterFailed(f"blosc2 needs at least 6 client data values, got {len(cd)}")
    blocksize, typesize, level, shuffle = cd[1], cd[2], cd[4], cd[5]
    compcode = cd[6] if len(cd) > 6 else 0
    if not typesize or compcode not in _COMPRESSORS or level > 9 or shuffle > 4:
        raise FilterFailed(f"blosc2 type size {typesize}, compressor {compcode}, level {level}, "
                           f"shuffle {shuffle}")
    chunkshape = list(cd[8:8 + cd[7]]) if len(cd) > 7 else []
    if len(cd) > 7 and not (2 <= cd[7] <= _MAX_DIM and len(chunkshape) == cd[7] and all(chunkshape)):
        raise FilterFailed(f"blosc2 chunk rank {cd[7]} with dimensions {chunkshape}")
    meta = {}
    # An input that is not the whole chunk (a checksum added before) goes as plain Blosc2.
    if chunkshape and len(data) == typesize * math.prod(chunkshape):
        block_bytes = blocksize or _default_blocksize(cd[3], typesize, level, compcode)
        blockshape = _block_shape(block_bytes, typesize, chunkshape)
        blocksize = typesize * math.prod(blockshape)
        data = _block(memoryview(data), chunkshape, blockshape, typesize)
        meta["b2nd"] = _b2nd_meta(chunkshape, blockshape, typesize)
    chunk = imagecodecs.blosc2_encode(typed(data, typesize), level, compressor=compcode, shuffle=shuffle,
                                      splitmode=SPLITMODE, blocksize=blocksize, numthreads=1)
    return frame(chunk, typesize, compcode, level, shuffle, meta)
