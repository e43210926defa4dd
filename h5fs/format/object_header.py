"""Object headers (IV.A.1), versions 1 and 2, with continuation blocks, as raw messages.

Message payloads are decoded lazily by the model (one module per message type under
`messages/`); this module only finds them, verifying v2 checksums and guarding against
continuation cycles and absurd sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import FormatError, Unsupported
from . import checksum
from .codec import Reader

MAX_BLOCKS = 1024          # continuation blocks per object
MAX_MESSAGES = 65536
MAX_HEADER_BYTES = 64 * 1024 * 1024

NIL, CONTINUATION = 0x0000, 0x0010
FLAG_CONSTANT, FLAG_SHARED, FLAG_FAIL_UNKNOWN = 0x01, 0x02, 0x80


@dataclass(frozen=True)
class RawMessage:
    type: int
    flags: int
    data: bytes
    creation_order: int | None = None

    @property
    def shared(self) -> bool:
        return bool(self.flags & FLAG_SHARED)


@dataclass(frozen=True)
class ObjectHeader:
    address: int
    version: int
    refcount: int
    messages: tuple[RawMessage, ...]
    flags: int = 0
    times: tuple[int, int, int, int] | None = None  # access, modification, change, birth (v2)
    attr_max_compact: int | None = None
    attr_min_dense: int | None = None

    def find(self, mtype: int) -> list[RawMessage]:
        return [m for m in self.messages if m.type == mtype]

    def first(self, mtype: int) -> RawMessage | None:
        for m in self.messages:
            if m.type == mtype:
                return m
        return None


def read(reader, address: int, what: str) -> ObjectHeader:
    """Read the object header at `address` (reader: a BlockReader) with all continuation blocks."""
    first = reader.read_upto(address, 16 + 4096, f"{what}: object header")
    if first[:4] == b"OHDR":
        return _read_v2(reader, address, first, what)
    if first[:1] == b"\x01":
        return _read_v1(reader, address, first, what)
    raise FormatError(f"{what}: no object header at address {address} (version byte {first[:1].hex()})")


def _continuation(data: bytes, reader, what: str) -> tuple[int, int]:
    c = Reader(data, 0, reader.sizes, f"{what}: continuation message")
    addr = c.offset()
    length = c.length()
    if addr is None or length <= 0 or length > MAX_HEADER_BYTES:
        raise FormatError(f"{what}: bad continuation block ({addr}, {length})")
    return addr, length


class _Walk:
    """Shared bookkeeping of one header read: visited blocks and bounds."""

    def __init__(self, what: str):
        self.what = what
        self.seen: set[int] = set()
        self.total = 0
        self.messages: list[RawMessage] = []

    def block(self, addr: int, length: int) -> None:
        if addr in self.seen:
            raise FormatError(f"{self.what}: object header continuation cycle at {addr}")
        self.seen.add(addr)
        self.total += length
        if len(self.seen) > MAX_BLOCKS or self.total > MAX_HEADER_BYTES:
            raise FormatError(f"{self.what}: object header too large")

    def add(self, msg: RawMessage) -> None:
        if len(self.messages) >= MAX_MESSAGES:
            raise FormatError(f"{self.what}: too many object header messages")
        if msg.flags & FLAG_FAIL_UNKNOWN and msg.type not in KNOWN_TYPES:
            raise Unsupported(f"{self.what}: unknown object header message type {msg.type:#x} marked must-understand")
        self.messages.append(msg)


def _read_v1(reader, address: int, first: bytes, what: str) -> ObjectHeader:
    c = Reader(first, 0, reader.sizes, f"{what}: object header")
    c.u8()
    c.u8()
    nmesg = c.u16()
    refcount = c.u32()
    size = c.u32()
    walk = _Walk(what)
    pending = [(address + 16, size)]
    while pending:
        addr, length = pending.pop(0)
        walk.block(addr, length)
        blk = Reader(reader.read(addr, length, f"{what}: object header block"), 0, reader.sizes, what)
        while blk.remaining() >= 8:
            mtype = blk.u16()
            msize = blk.u16()
            mflags = blk.u8()
            blk.skip(3)
            data = blk.bytes(msize)
            if mtype == CONTINUATION:
                pending.append(_continuation(data, reader, what))
            elif mtype != NIL:
                walk.add(RawMessage(mtype, mflags, data))
    del nmesg  # libhdf5 itself tolerates a wrong count (it merges NIL messages)
    return ObjectHeader(address, 1, refcount, tuple(walk.messages))


def _read_v2(reader, address: int, first: bytes, what: str) -> ObjectHeader:
    c = Reader(first, 4, reader.sizes, f"{what}: object header")
    version = c.u8()
    if version != 2:
        raise Unsupported(f"{what}: object header version {version}")
    flags = c.u8()
    times = None
    if flags & 0x20:
        times = (c.u32(), c.u32(), c.u32(), c.u32())
    max_compact = min_dense = None
    if flags & 0x10:
        max_compact, min_dense = c.u16(), c.u16()
    chunk0 = c.uint(1 << (flags & 0x03))
    prefix = c.pos
    track_order = bool(flags & 0x04)
    walk = _Walk(what)
    walk.block(address, prefix + chunk0 + 4)
    data = reader.read(address, prefix + chunk0 + 4, f"{what}: object header")
    checksum.verify(data, f"{what}: object header")
    pending = _messages_v2(data, prefix, prefix + chunk0, track_order, walk, reader)
    while pending:
        addr, length = pending.pop(0)
        walk.block(addr, length)
        blk = reader.read(addr, length, f"{what}: object header continuation")
        if blk[:4] != b"OCHK":
            raise FormatError(f"{what}: continuation block at {addr} lacks OCHK signature")
        checksum.verify(blk, f"{what}: object header continuation")
        pending += _messages_v2(blk, 4, length - 4, track_order, walk, reader)
    return ObjectHeader(address, 2, 1, tuple(walk.messages), flags, times, max_compact, min_dense)


def _messages_v2(buf: bytes, start: int, end: int, track_order: bool, walk: _Walk, reader) -> list[tuple[int, int]]:
    c = Reader(buf[:end], start, reader.sizes, f"{walk.what}: object header")
    head = 6 if track_order else 4
    pending = []
    while c.remaining() >= head:
        mtype = c.u8()
        msize = c.u16()
        mflags = c.u8()
        order = c.u16() if track_order else None
        data = c.bytes(msize)
        if mtype == CONTINUATION:
            pending.append(_continuation(data, reader, walk.what))
        elif mtype != NIL:
            walk.add(RawMessage(mtype, mflags, data, order))
    return pending


# Message types h5fs decodes or knowingly ignores (IV.A.2).
KNOWN_TYPES = frozenset(range(0x00, 0x19))
