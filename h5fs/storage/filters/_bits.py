"""Vectorised reading and writing of the MSB-first bit streams that n-bit and scale-offset pack."""

from __future__ import annotations

import numpy as np

from ...errors import FormatError

# Block size so that the (elements x byte-ops) index arrays stay around 8 MiB.
_BLOCK_ENTRIES = 1 << 20


class ByteOps:
    """How to rebuild each byte of one element from its packed bit record: output byte `dst`
    takes `width` (1..8) bits starting at bit `src` of the record, shifted left by `shift`."""

    def __init__(self, dst: np.ndarray, src: np.ndarray, width: np.ndarray, shift: np.ndarray,
                 record_bits: int) -> None:
        self.dst, self.src, self.width, self.shift = dst, src, width, shift
        self.record_bits = record_bits

    @staticmethod
    def atomic(size: int, big_endian: bool, precision: int, offset: int) -> "ByteOps":
        """One integer/float of `size` bytes whose value bits [offset, offset+precision) are
        packed most significant bit first (libhdf5's n-bit and scale-offset layout)."""
        dst, src, width, shift = [], [], [], []
        for m in range((offset + precision - 1) // 8, offset // 8 - 1, -1):  # byte m: bits 8m..8m+7
            lo, hi = max(8 * m, offset), min(8 * m + 8, offset + precision)
            if lo >= hi:
                continue
            dst.append(size - 1 - m if big_endian else m)
            src.append(offset + precision - hi)
            width.append(hi - lo)
            shift.append(lo - 8 * m)
        return ByteOps(*(np.array(v, np.int64) for v in (dst, src, width, shift)), precision)

    @staticmethod
    def raw(size: int) -> "ByteOps":
        """`size` bytes copied whole, in order."""
        r = np.arange(size, dtype=np.int64)
        return ByteOps(r, 8 * r, np.full(size, 8, np.int64), np.zeros(size, np.int64), 8 * size)

    def placed(self, byte_offset: int, bit_offset: int) -> "ByteOps":
        return ByteOps(self.dst + byte_offset, self.src + bit_offset, self.width, self.shift,
                       self.record_bits)

    @staticmethod
    def concat(parts: list["ByteOps"], record_bits: int) -> "ByteOps":
        cat = [np.concatenate([getattr(p, k) for p in parts]) if parts else np.zeros(0, np.int64)
               for k in ("dst", "src", "width", "shift")]
        return ByteOps(*cat, record_bits)

    def repeated(self, count: int, stride_bytes: int) -> "ByteOps":
        """`count` copies, element i at byte i*stride_bytes and bit i*record_bits."""
        i = np.arange(count, dtype=np.int64)[:, None]
        return ByteOps((self.dst + i * stride_bytes).ravel(), (self.src + i * self.record_bits).ravel(),
                       np.tile(self.width, count), np.tile(self.shift, count),
                       self.record_bits * count)


def as_signed(v: int, bits: int) -> int:
    """`v`'s low `bits` bits as a two's complement number (C's cast of an unsigned value)."""
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def unpack(data: bytes | bytearray | memoryview, n: int, elem_size: int, ops: ByteOps) -> np.ndarray:
    """Rebuild `n` elements of `elem_size` bytes from `n` consecutive packed records; bytes no
    op writes are 0. Returns a flat uint8 array."""
    need = -(-n * ops.record_bits // 8)
    if len(data) < need:
        raise FormatError(f"packed data holds {len(data)} bytes, {n} elements need {need}")
    buf = np.zeros(need + 2, np.uint8)  # +2: the 16-bit window may read past the last byte
    buf[:need] = np.frombuffer(data, np.uint8, count=need)
    out = np.zeros((n, elem_size), np.uint8)
    if not len(ops.dst) or not n:
        return out.ravel()
    mask = (1 << ops.width) - 1
    block = max(1, _BLOCK_ENTRIES // len(ops.dst))
    for start in range(0, n, block):
        stop = min(n, start + block)
        bit = np.arange(start, stop, dtype=np.int64)[:, None] * ops.record_bits + ops.src
        byte = bit >> 3
        window = buf[byte].astype(np.int64) << 8 | buf[byte + 1]
        val = window >> (16 - (bit & 7) - ops.width) & mask
        out[start:stop, ops.dst] = (val << ops.shift).astype(np.uint8)
    return out.ravel()


def unpack_values(data: bytes | bytearray | memoryview, n: int, width: int) -> np.ndarray:
    """`n` unsigned values of `width` (1..57) bits packed back to back, most significant bit
    first, as uint64: one 8-byte window per value, several times faster than `unpack`."""
    if not 0 < width <= 57:
        raise ValueError(f"width {width} outside 1..57")
    need = -(-n * width // 8)
    if len(data) < need:
        raise FormatError(f"packed data holds {len(data)} bytes, {n} elements need {need}")
    buf = np.zeros(need + 8, np.uint8)
    buf[:need] = np.frombuffer(data, np.uint8, count=need)
    bit = np.arange(n, dtype=np.int64) * width
    windows = np.lib.stride_tricks.sliding_window_view(buf, 8)[bit >> 3].view(">u8").ravel()
    return (windows << (bit & 7).astype(np.uint64)) >> np.uint64(64 - width)


def _blocks(n: int, record_bits: int):
    """(start, stop) element ranges of at most ~_BLOCK_ENTRIES bits whose bit counts are whole
    bytes (a multiple of 8 elements), so blocks pack independently."""
    block = max(8, _BLOCK_ENTRIES // max(1, record_bits) // 8 * 8)
    for start in range(0, n, block):
        yield start, min(n, start + block)


def pack(data: bytes | bytearray | memoryview, n: int, elem_size: int, ops: ByteOps) -> np.ndarray:
    """The inverse of `unpack`: `n` elements of `elem_size` bytes as `n` consecutive packed
    records, the bits each op describes and no others, as a flat uint8 array of whole bytes."""
    src = np.frombuffer(data, np.uint8, count=n * elem_size).reshape(n, elem_size)
    parts = []
    for start, stop in _blocks(n, ops.record_bits):
        # unpackbits lists a byte's bits most significant first: bit b sits at column 7 - b.
        bits = np.unpackbits(src[start:stop, ops.dst], axis=1).reshape(stop - start, len(ops.dst), 8)
        record = np.zeros((stop - start, ops.record_bits), np.uint8)
        for k, (at, width, shift) in enumerate(zip(ops.src, ops.width, ops.shift)):
            record[:, at:at + width] = bits[:, k, 8 - shift - width:8 - shift]
        parts.append(np.packbits(record))
    return np.concatenate(parts) if parts else np.zeros(0, np.uint8)


def pack_values(values: np.ndarray, width: int) -> np.ndarray:
    """The inverse of `unpack_values` for `width` 1..64: the low `width` bits of each uint64,
    back to back, most significant bit first, as a flat uint8 array of whole bytes."""
    if not 0 < width <= 64:
        raise ValueError(f"width {width} outside 1..64")
    parts = []
    for start, stop in _blocks(len(values), width):
        octets = values[start:stop].astype(">u8").view(np.uint8).reshape(-1, 8)
        parts.append(np.packbits(np.unpackbits(octets, axis=1)[:, 64 - width:]))
    return np.concatenate(parts) if parts else np.zeros(0, np.uint8)
