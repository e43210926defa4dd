"""Fletcher32 (filter 3): a 4-byte checksum appended to the chunk."""

from __future__ import annotations

import numpy as np

from ...errors import ChecksumError, FormatError
from ...format.messages.filter_pipeline import FilterSpec
from . import ChunkInfo

_M = 0xFFFF  # sums are kept modulo 65535 (end-around carry)
_DESCENDING = np.arange(_M - 1, -1, -1, dtype=np.uint64)


def fletcher32(data: bytes | bytearray | memoryview) -> int:
    """libhdf5's H5_checksum_fletcher32: big-endian 16-bit words, a trailing odd byte is the
    high byte of a last word, both sums start at 0."""
    raw = np.frombuffer(data, np.uint8)
    words = raw[: len(raw) & ~1].view(">u2")
    if len(raw) & 1:
        words = np.append(words, np.uint16(int(raw[-1]) << 8))
    n, full = len(words), len(words) // _M * _M
    # sum2 adds every prefix sum, so word i counts n - i times; modulo 65535 that weight depends
    # only on i % 65535: fold the words into rows of 65535 and weight the column sums.
    cols = np.zeros(_M, np.uint64)
    if full:
        cols += words[:full].reshape(-1, _M).sum(axis=0, dtype=np.uint32)  # < 2**32 below 8 GiB
    cols[: n - full] += words[full:]
    s1 = int(cols.sum())
    weights = np.roll(_DESCENDING, n % _M + 1)  # (n - column) % 65535
    s2 = int((cols * weights).sum())  # < 2**63 for chunks under 4 GiB (libhdf5's limit)
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


def encode(data: bytes | bytearray | memoryview, spec: FilterSpec, info: ChunkInfo) -> bytes:
    return b"".join((data, fletcher32(data).to_bytes(4, "little")))
