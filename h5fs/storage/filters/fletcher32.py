"""Fletcher32 (filter 3): a 4-byte checksum appended to the chunk."""

from __future__ import annotations

import numpy as np

from ...errors import ChecksumError, FormatError
from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo

_M = 0xFFFF  # sums are kept modulo 65535 (end-around carry)
_WEIGHTS = np.arange(1, _M + 1, dtype=np.uint64)


def fletcher32(data: bytes | bytearray | memoryview) -> int:
    """libhdf5's H5_checksum_fletcher32: big-endian 16-bit words, a trailing odd byte is the
    high byte of a last word, both sums start at 0."""
    raw = np.frombuffer(data, np.uint8)
    words = raw[: len(raw) & ~1].view(">u2").astype(np.uint64)
    if len(raw) & 1:
        words = np.append(words, np.uint64(int(raw[-1]) << 8))
    n = len(words)
    s1 = int(words.sum())
    # sum2 adds every prefix sum: word i (from the end, 1-based) is counted i times. Weights
    # matter only modulo 65535, so fold the reversed words into rows of 65535 columns.
    rev = np.zeros(-(-n // _M) * _M, np.uint64)
    rev[:n] = words[::-1]
    s2 = int((rev.reshape(-1, _M).sum(axis=0) % _M * _WEIGHTS).sum())  # only s2 mod 65535
    # libhdf5's folding never turns a positive sum into 0: a multiple of 65535 reads 0xffff.
    # Both sums are positive exactly when some word is (sum2 >= sum1).
    f1 = s1 % _M or (_M if s1 else 0)
    f2 = s2 % _M or (_M if s1 else 0)
    return f2 << 16 | f1


def decode(data: bytes | bytearray | memoryview, spec: FilterSpec, limit: int,
           info: ChunkInfo) -> memoryview:
    mv = memoryview(data).cast("B")
    if len(mv) < 4:
        raise FormatError(f"chunk of {len(mv)} bytes cannot hold a fletcher32 checksum")
    body = mv[:-4]
    stored = int.from_bytes(mv[-4:], "little")
    computed = fletcher32(body)
    # Files written before libhdf5 1.6.3 swapped the bytes within each 16-bit half.
    swapped = (computed & 0x00FF00FF) << 8 | (computed >> 8) & 0x00FF00FF
    if stored not in (computed, swapped):
        raise ChecksumError(f"fletcher32 mismatch: stored {stored:#010x}, computed {computed:#010x}")
    return body
