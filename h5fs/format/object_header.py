"""Object headers (IV.A.1), versions 1 and 2, decoded losslessly and encoded back block by block.

A header is a chain of blocks: block 0 at the header's address (the prefix, then messages) and
continuation blocks named by continuation messages (v2: "OCHK" first). Every message is kept with
where it lives (its block's address and the offset of its message header in the block), NIL and
continuation messages included (`HeaderBlock.messages`); `ObjectHeader.messages` lists only the
ones the model reads. Bytes after a block's last message too few for a message header are the
block's gap (v2; v1 blocks are multiples of 8 and never have one).

Message payloads are decoded lazily by the model (one module per message type under
`messages/`); this module finds them, verifies v2 checksums and guards against continuation
cycles and absurd sizes. It does no I/O: `decode` takes block 0's bytes and a `fetch(address,
length)` giving continuation blocks' bytes (h5fs.storage.object_header.reader reads the file).

Encoding: `encode_block(header, i)` gives block i's bytes (prefix or OCHK signature, messages in
order, the gap, the checksum); `encode_continuation` a continuation message body. The sizes a
writer lays blocks out with (`align`, `block_overhead`, `continuation_size`, `chunk0_width_flags`,
`MIN_CHUNK`, `MESSAGE_MAX`) are libhdf5's (h5fs.storage.object_header.placement places the
messages). Undefined bytes encode as zeros, as libhdf5 writes them: the 4 alignment bytes of the
v1 prefix, the 3 reserved bytes of each v1 message header, v2 gaps. Message data is kept whole (v1 padding, the old bytes
of a NIL message), so what libhdf5 left there comes back unchanged.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ..errors import FormatError, Unsupported
from . import checksum
from .codec import Sizes
from .messages.types import CONTINUATION, KNOWN_TYPES, NIL

MAX_BLOCKS = 1024          # continuation blocks per object
MAX_MESSAGES = 65536       # messages per object, NIL and continuation included
MAX_HEADER_BYTES = 64 * 1024 * 1024
MESSAGE_MAX = 65536        # a message's data is smaller (libhdf5's H5O_MESG_MAX_SIZE; 16-bit size field)
MIN_CHUNK = 22             # least message bytes of a new block: a message header and a continuation (H5O_MIN_SIZE)

# Message flags (IV.A.1): constant, shared (the body is a shared-message reference), not to be
# shared, writers that do not understand the type must fail, must mark it "was unknown" when they
# write the object, was unknown to a writer, shareable, readers that do not understand it must fail
FLAG_CONSTANT, FLAG_SHARED, FLAG_DONT_SHARE, FLAG_FAIL_UNKNOWN_WRITE = 0x01, 0x02, 0x04, 0x08
FLAG_MARK_UNKNOWN, FLAG_WAS_UNKNOWN, FLAG_SHAREABLE, FLAG_FAIL_UNKNOWN = 0x10, 0x20, 0x40, 0x80

# Header flags (v2)
HDR_CHUNK0_WIDTH = 0x03    # bits 0-1: the size of chunk 0 is 1, 2, 4 or 8 bytes wide
HDR_TRACK_ORDER, HDR_INDEX_ORDER, HDR_PHASE_CHANGE, HDR_TIMES = 0x04, 0x08, 0x10, 0x20

V2_SIGNATURE, CONTINUATION_SIGNATURE = b"OHDR", b"OCHK"
V1_PREFIX = struct.Struct("<BBHII4x")   # version, reserved, message count, refcount, header size, alignment
V1_MESSAGE = struct.Struct("<HHB3x")    # type, size, flags, reserved
V2_MESSAGE = struct.Struct("<BHB")      # type, size, flags
V2_MESSAGE_ORDER = struct.Struct("<BHBH")  # ... creation order
_V2_START = struct.Struct("<4sBB")       # signature, version, flags
_TIMES = struct.Struct("<4I")
_PHASE = struct.Struct("<2H")
_CHUNK0 = {0: struct.Struct("<B"), 1: struct.Struct("<H"), 2: struct.Struct("<I"), 3: struct.Struct("<Q")}
CHECKSUM_SIZE = 4


@dataclass(frozen=True, slots=True)
class RawMessage:
    type: int
    flags: int
    data: bytes                  # the stored message data, `size` bytes (v1: its padding included)
    creation_order: int | None = None   # v2 headers that track creation order
    block: int | None = None     # address of the header block holding it (None: not read from a header)
    offset: int = 0              # offset of its message header in that block

    @property
    def shared(self) -> bool:
        return bool(self.flags & FLAG_SHARED)

    @property
    def size(self) -> int:
        """The stored size of the message data."""
        return len(self.data)


@dataclass(frozen=True, slots=True)
class HeaderBlock:
    address: int
    length: int                  # bytes on disk: prefix or signature, messages, gap, checksum
    messages: tuple[RawMessage, ...]   # every message in stored order, NIL and continuation included
    gap: int = 0                 # bytes after the last message, too few for a message header


@dataclass(frozen=True, slots=True)
class Space:
    """Free space inside a header: a NIL message (header included) or a gap."""

    block: int
    offset: int
    size: int
    nil: bool


@dataclass(frozen=True, slots=True)
class Continuation:
    """A continuation message body: where the next header block lives."""

    address: int | None
    length: int


@dataclass(frozen=True, slots=True)
class ObjectHeader:
    address: int
    version: int
    refcount: int                # v1: the prefix field; v2: 1 (a refcount message holds it)
    blocks: tuple[HeaderBlock, ...]
    flags: int = 0               # v2 header flags (HDR_*)
    times: tuple[int, int, int, int] | None = None  # access, modification, change, birth (v2)
    attr_max_compact: int | None = None
    attr_min_dense: int | None = None
    nmesgs: int = 0              # v1: the stored message count (libhdf5 counts NIL and continuation too)
    reserved: int = 0            # v1: the byte after the version
    # the messages the model reads (neither NIL nor continuation), in stored order
    messages: tuple[RawMessage, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(
            m for b in self.blocks for m in b.messages if m.type not in (NIL, CONTINUATION)))

    def find(self, mtype: int) -> list[RawMessage]:
        return [m for m in self.messages if m.type == mtype]

    def first(self, mtype: int) -> RawMessage | None:
        for m in self.messages:
            if m.type == mtype:
                return m
        return None

    @property
    def track_order(self) -> bool:
        return self.version == 2 and bool(self.flags & HDR_TRACK_ORDER)

    @property
    def prefix_size(self) -> int:
        """Bytes before the first message of block 0."""
        return prefix_size(self.version, self.flags)

    @property
    def chunk0_width(self) -> int:
        """Bytes of the v2 'size of chunk 0' field (v1: 4, the header size field)."""
        return 4 if self.version == 1 else _CHUNK0[self.flags & HDR_CHUNK0_WIDTH].size

    @property
    def chunk0_size(self) -> int:
        """The stored size of chunk 0: block 0's message bytes (gap included, checksum not)."""
        return self.blocks[0].length - self.prefix_size - tail_size(self.version)

    def all_messages(self) -> Iterator[RawMessage]:
        """Every message of every block in stored order, NIL and continuation included."""
        for b in self.blocks:
            yield from b.messages

    def free_space(self) -> tuple[Space, ...]:
        """NIL messages and gaps, block by block: where a writer can put new messages."""
        head = message_header_size(self.version, self.track_order)
        out = []
        for b in self.blocks:
            out += [Space(b.address, m.offset, head + m.size, True) for m in b.messages if m.type == NIL]
            if b.gap:
                out.append(Space(b.address, b.length - tail_size(self.version) - b.gap, b.gap, False))
        return tuple(out)


def prefix_size(version: int, flags: int = 0) -> int:
    if version == 1:
        return V1_PREFIX.size
    return (_V2_START.size + (_TIMES.size if flags & HDR_TIMES else 0) + (_PHASE.size if flags & HDR_PHASE_CHANGE else 0)
            + _CHUNK0[flags & HDR_CHUNK0_WIDTH].size)


def message_header_size(version: int, track_order: bool = False) -> int:
    return _message_struct(version, track_order).size


def align(version: int, n: int) -> int:
    """A message's stored size for `n` bytes of data: v1 pads messages to multiples of 8."""
    return (n + 7) & ~7 if version == 1 else n


def block_overhead(version: int) -> int:
    """Bytes of a continuation block that are not messages: v2's "OCHK" and checksum."""
    return len(CONTINUATION_SIGNATURE) + CHECKSUM_SIZE if version == 2 else 0


def continuation_size(version: int, sizes: Sizes) -> int:
    """The stored size of a continuation message."""
    return align(version, sizes.offset + sizes.length)


def chunk0_width_flags(size: int) -> int:
    """The v2 header flag bits for a chunk 0 of `size` message bytes: the narrowest size field."""
    return next(bits for bits, st in _CHUNK0.items() if size < 1 << 8 * st.size)


def _message_struct(version: int, track_order: bool) -> struct.Struct:
    return V1_MESSAGE if version == 1 else (V2_MESSAGE_ORDER if track_order else V2_MESSAGE)


def tail_size(version: int) -> int:
    """Bytes after a block's messages: v2's checksum."""
    return CHECKSUM_SIZE if version == 2 else 0


def block_start(version: int, flags: int, index: int) -> int:
    """Offset of the first message in block `index`."""
    if index == 0:
        return prefix_size(version, flags)
    return len(CONTINUATION_SIGNATURE) if version == 2 else 0


# ------------------------------------------------------------------------------------- decoding

def block0_length(buf: bytes, address: int, what: str) -> int:
    """Bytes of block 0 of the header whose first bytes (at least its prefix) are `buf`."""
    return _prefix(buf, address, what)[1]


def decode(block0: bytes, address: int, sizes: Sizes, what: str,
           fetch: Callable[[int, int], bytes]) -> ObjectHeader:
    """The header whose block 0 is `block0`; `fetch(address, length)` gives a continuation block."""
    fields, length = _prefix(block0, address, what)
    if len(block0) != length:
        raise FormatError(f"{what}: object header block 0 is {length} bytes, got {len(block0)}")
    version, refcount, flags, times, attr_max_compact, attr_min_dense, nmesgs, reserved = fields
    walk = _Walk(what, version, flags, sizes)
    blocks = [walk.block(block0, address, 0)]
    while walk.pending:
        cont = walk.pending.pop(0)
        if cont.address in walk.seen:
            raise FormatError(f"{what}: object header continuation cycle at {cont.address}")
        if len(walk.seen) >= MAX_BLOCKS or walk.total + cont.length > MAX_HEADER_BYTES:
            raise FormatError(f"{what}: object header too large")
        blocks.append(walk.block(fetch(cont.address, cont.length), cont.address, len(blocks)))
    return ObjectHeader(address, version, refcount, tuple(blocks), flags, times, attr_max_compact, attr_min_dense,
                        nmesgs, reserved)


def _prefix(buf: bytes, address: int, what: str) -> tuple[tuple, int]:
    """The header's prefix fields (ObjectHeader's, from version to reserved, without the blocks)
    and block 0's length, from its first bytes."""
    if buf[:1] == b"\x01":
        _, reserved, nmesgs, refcount, size = _unpack(V1_PREFIX, buf, 0, what)
        fields = (1, refcount, 0, None, None, None, nmesgs, reserved)
        length = V1_PREFIX.size + size
    elif buf[:4] == V2_SIGNATURE:
        _, version, flags = _unpack(_V2_START, buf, 0, what)
        if version != 2:
            raise Unsupported(f"{what}: object header version {version}")
        pos = _V2_START.size
        times = phase = None
        if flags & HDR_TIMES:
            times = _unpack(_TIMES, buf, pos, what)
            pos += _TIMES.size
        if flags & HDR_PHASE_CHANGE:
            phase = _unpack(_PHASE, buf, pos, what)
            pos += _PHASE.size
        st = _CHUNK0[flags & HDR_CHUNK0_WIDTH]
        fields = (2, 1, flags, times, *(phase or (None, None)), 0, 0)
        length = pos + st.size + _unpack(st, buf, pos, what)[0] + CHECKSUM_SIZE
    else:
        raise FormatError(f"{what}: no object header at address {address} (version byte {buf[:1].hex()})")
    if length > MAX_HEADER_BYTES:
        raise FormatError(f"{what}: object header too large")
    return fields, length


def _unpack(st: struct.Struct, buf: bytes, pos: int, what: str) -> tuple:
    if pos + st.size > len(buf):
        raise FormatError(f"{what}: object header truncated (need {st.size} bytes at {pos}, have {len(buf) - pos})")
    return st.unpack_from(buf, pos)


def decode_continuation(data: bytes, sizes: Sizes, what: str) -> Continuation:
    """A continuation message body, refused unless it names a plausible block."""
    st = sizes.layout("OL")
    if len(data) < st.size:
        raise FormatError(f"{what}: continuation message of {len(data)} bytes")
    addr, length = st.unpack_from(data)
    addr = sizes.address(addr)
    if addr is None or length <= 0 or length > MAX_HEADER_BYTES:
        raise FormatError(f"{what}: bad continuation block ({addr}, {length})")
    return Continuation(addr, length)


class _Walk:
    """One header read: blocks seen, bounds, continuation blocks still to read."""

    def __init__(self, what: str, version: int, flags: int, sizes: Sizes):
        self.what = what
        self.version, self.flags = version, flags
        self.track_order = version == 2 and bool(flags & HDR_TRACK_ORDER)
        self.message = _message_struct(version, self.track_order)
        self.sizes = sizes
        self.seen: set[int] = set()
        self.total = 0
        self.count = 0
        self.pending: list[Continuation] = []

    def block(self, buf: bytes, address: int, index: int) -> HeaderBlock:
        self.seen.add(address)
        self.total += len(buf)
        start, end = block_start(self.version, self.flags, index), len(buf)
        if self.version == 2:
            what = f"{self.what}: object header" if index == 0 else f"{self.what}: object header continuation"
            if index and buf[:4] != CONTINUATION_SIGNATURE:
                raise FormatError(f"{self.what}: continuation block at {address} lacks OCHK signature")
            if len(buf) < start + CHECKSUM_SIZE:
                raise FormatError(f"{what}: block at {address} of {len(buf)} bytes")
            checksum.verify(buf, what)
            end -= CHECKSUM_SIZE
        messages, gap = self.messages(buf, address, start, end)
        return HeaderBlock(address, len(buf), messages, gap)

    def messages(self, buf: bytes, address: int, pos: int, end: int) -> tuple[tuple[RawMessage, ...], int]:
        st, head, out = self.message, self.message.size, []
        track_order, count = self.track_order, self.count
        while end - pos >= head:
            fields = st.unpack_from(buf, pos)
            mtype, msize, mflags = fields[0], fields[1], fields[2]
            body = pos + head
            if body + msize > end:
                raise FormatError(f"{self.what}: object header message at {pos} of the block at {address} "
                                  f"overruns the block ({msize} bytes)")
            msg = RawMessage(mtype, mflags, buf[body:body + msize], fields[3] if track_order else None, address, pos)
            count += 1
            if count > MAX_MESSAGES:  # checked as they come: a huge block of empty messages is refused early
                raise FormatError(f"{self.what}: too many object header messages")
            if mtype == CONTINUATION:
                self.pending.append(decode_continuation(msg.data, self.sizes, f"{self.what}: continuation message"))
            elif mflags & FLAG_FAIL_UNKNOWN and mtype not in KNOWN_TYPES:
                raise Unsupported(f"{self.what}: unknown object header message type {mtype:#x} marked must-understand")
            out.append(msg)
            pos = body + msize
        self.count = count
        return tuple(out), end - pos


# ------------------------------------------------------------------------------------- encoding

def encode_prefix(header: ObjectHeader) -> bytes:
    """Block 0's prefix (through the v1 alignment bytes or the v2 chunk-0 size)."""
    if header.version == 1:
        return V1_PREFIX.pack(1, header.reserved, header.nmesgs, header.refcount, header.chunk0_size)
    out = _V2_START.pack(V2_SIGNATURE, 2, header.flags)
    if header.flags & HDR_TIMES:
        out += _TIMES.pack(*header.times)
    if header.flags & HDR_PHASE_CHANGE:
        out += _PHASE.pack(header.attr_max_compact, header.attr_min_dense)
    return out + _CHUNK0[header.flags & HDR_CHUNK0_WIDTH].pack(header.chunk0_size)


def encode_block(header: ObjectHeader, index: int) -> bytes:
    """Block `index` as stored: prefix or signature, messages, gap, checksum. The record must be
    consistent: each message at its recorded offset, the block filled exactly."""
    block = header.blocks[index]
    out = bytearray(encode_prefix(header) if index == 0 else
                    CONTINUATION_SIGNATURE if header.version == 2 else b"")
    st = _message_struct(header.version, header.track_order)
    for m in block.messages:
        if m.offset != len(out):
            raise ValueError(f"object header message recorded at {m.offset}, encoded at {len(out)}")
        out += st.pack(m.type, m.size, m.flags, m.creation_order) if header.track_order else \
            st.pack(m.type, m.size, m.flags)
        out += m.data
    out += bytes(block.gap)
    if header.version == 2:
        out = checksum.sealed(out)
    if len(out) != block.length:
        raise ValueError(f"object header block at {block.address}: {len(out)} bytes encoded, {block.length} recorded")
    return bytes(out)


def encode_continuation(cont: Continuation, sizes: Sizes) -> bytes:
    """A continuation message body."""
    return sizes.layout("OL").pack(sizes.raw_address(cont.address), cont.length)
