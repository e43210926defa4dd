"""Write the Blosc2 contiguous frame (c-blosc2's README_CFRAME_FORMAT.rst) that HDF5-Blosc2 stores
as a chunk: a msgpack header with the frame's metalayers, one Blosc2 chunk, the Blosc2 chunk of
its int64 offset, a trailer without variable-length metalayers. A chunk of one special value
(all zeros, NaN or uninitialised) is stored, as c-blosc2's frame_append_chunk does, as a special
offset alone.
"""

from __future__ import annotations

import struct

import imagecodecs
import numpy as np

_FRAME_VERSION = 2             # BLOSC2_VERSION_FRAME_FORMAT
_OFFSETS_64 = 0x10             # general flags: 64-bit chunk offsets
SPLITMODE = 4                  # BLOSC_FORWARD_COMPAT_SPLIT, in HDF5-Blosc2's default parameters
_NEVER_SPLIT = 2
_SPECIAL_MASK, _SPECIAL_VALUE = 0x7, 3
_SPECIAL_OFFSET = 1 << 63

# The header up to its metalayers (87 bytes): fixarray(14), "b2frame\0", header length (int32),
# frame length (uint64), flags (str4: general, frame type, codec | level << 4, split mode - 1),
# uncompressed and compressed sizes (int64), type size, block size, chunk size (int32),
# compression and decompression threads (int16: 0 and 1, as HDF5-Blosc2's frames say), no
# vlmetalayers, fixext16 of the filter pipeline (6 filters, user codec, codec meta, 6 filter
# metas, 2 reserved).
_HEADER = struct.Struct(">BB8sBiBQBBBBBBqBqBiBiBiBhBhBBB6sBB8x")
# Trailer: fixarray(4), version 1, empty vlmetalayers [size, {}, []], length 35, no fingerprint.
_TRAILER = bytes.fromhex("9401" "93cd0006de0000dc0000" "ce00000023" "d800") + bytes(16)


def _metalayers(meta: dict[str, bytes], at: int) -> bytes:
    """The header's metalayer section starting at offset `at`: [index size, {name: offset of the
    content}, [bin32 contents]]."""
    index = b"".join(bytes([0xa0 + len(name)]) + name.encode() + b"\xd2" + bytes(4) for name in meta)
    head_len = 1 + 3 + 3 + len(index)
    out = bytearray(b"\x93\xcd" + head_len.to_bytes(2, "big") + b"\xde" + len(meta).to_bytes(2, "big"))
    content_at = at + head_len + 3
    for name, content in meta.items():
        out += bytes([0xa0 + len(name)]) + name.encode() + b"\xd2" + content_at.to_bytes(4, "big")
        content_at += 5 + len(content)
    out += b"\xdc" + len(meta).to_bytes(2, "big")
    for content in meta.values():
        out += b"\xc6" + len(content).to_bytes(4, "big") + content
    return bytes(out)


def frame(chunk: bytes, typesize: int, compcode: int, level: int, shuffle: int,
          meta: dict[str, bytes]) -> bytes:
    """The frame holding `chunk`, compressed by `compcode` at `level` with `shuffle`."""
    nbytes, blocksize = (int.from_bytes(chunk[i:i + 4], "little") for i in (4, 8))
    special = chunk[31] >> 4 & _SPECIAL_MASK
    if special and special != _SPECIAL_VALUE:
        offset, chunk = _SPECIAL_OFFSET | special << 56, b""
    else:
        offset = 0
    offsets = imagecodecs.blosc2_encode(np.array([offset], "<u8").view("V8"), 5, compressor=0,
                                        shuffle=1, splitmode=_NEVER_SPLIT, numthreads=1)
    metalayers = _metalayers(meta, _HEADER.size)
    header_len = _HEADER.size + len(metalayers)
    frame_len = header_len + len(chunk) + len(offsets) + len(_TRAILER)
    filters = bytes(5) + bytes([shuffle])
    header = _HEADER.pack(0x9e, 0xa8, b"b2frame\0", 0xd2, header_len, 0xcf, frame_len,
                          0xa4, _FRAME_VERSION | _OFFSETS_64, 0, compcode | level << 4,
                          SPLITMODE - 1, 0xd3, nbytes, 0xd3, len(chunk), 0xd2, typesize,
                          0xd2, blocksize, 0xd2, nbytes, 0xd1, 0, 0xd1, 1, 0xc2, 0xd8, 6, filters,
                          compcode, 0)
    return b"".join((header, metalayers, chunk, offsets, _TRAILER))
