"""Blosc2 (filter 32026, HDF5-Blosc2 / hdf5plugin).

Each chunk is a Blosc2 contiguous frame (cframe): a msgpack header, the compressed Blosc2 chunks,
a Blosc2 chunk of int64 chunk offsets, a trailer. The filter writes one chunk per frame. When
the frame carries a "b2nd" metalayer the chunk holds its data block by block (each block in C
order, blocks in C order over a grid padded up to whole blocks), which is put back in C order.
"""

from __future__ import annotations

import math

import imagecodecs
import numpy as np

from ...errors import FormatError, Unsupported
from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo
from ._msgpack import Reader

_MAGIC = b"b2frame\0"
_SPECIAL_ZERO, _SPECIAL_NAN, _SPECIAL_UNINIT = 1, 2, 4


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
