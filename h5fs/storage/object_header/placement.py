"""Where object header edits put things: messages added, removed and replaced, continuation
blocks created and freed, placed as libhdf5 places them (H5Oalloc.c).

`Layout` is libhdf5's in-memory header (H5O_t): blocks ("chunks") and a message table in the order
libhdf5 numbers them after reading the header (chunk by chunk, each in stored order), so ties in
its searches fall the same way. Loading does what libhdf5 does when it opens a header for writing
(H5O__chunk_deserialize): adjacent NIL messages merge, messages of unknown types flagged "mark if
unknown" are marked "was unknown"; an unknown message flagged "fail if unknown and writing" makes
the header unwritable (CannotWrite). The methods are libhdf5's, named in each docstring: a new
message takes the best-fitting NIL message, split (H5O__alloc, H5O__alloc_null); with none, a
continuation block is allocated, its continuation message taking a NIL message or the room of a
message moved into the new block (H5O__alloc_new_chunk, H5O__alloc_chunk); a removed message
becomes NIL and the header is condensed: messages moved towards block 0, NILs merged, emptied
blocks freed with their continuation messages, blocks whose NILs reach 64 KiB shrunk
(H5O__condense_header). v2 bytes too few for a message header are a block's "gap", never in a
block that holds a NIL message (libhdf5 refuses such a block).

Where libhdf5 cannot extend a block, the engine puts every block, message and gap where libhdf5
does (tests/test_header_write.py compares twins edit by edit). The differences, none visible to a
reader: blocks are never extended in place into free space or the end of the file
(H5O__alloc_extend_chunk: a new continuation block is made instead), and NIL messages are written
as zeros with no flags (libhdf5 leaves the bytes there were, and may leave stale flags on NIL and
continuation messages).

`HeaderEdit` (edit.py) drives it edit by edit inside a transaction.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import dataclass, replace

from ...errors import H5fsError
from ...format import object_header as oh
from ...format.codec import Sizes
from ...format.messages.types import ATTRIBUTE, CONTINUATION, KNOWN_TYPES, NIL
from ...format.object_header import ObjectHeader, RawMessage


class NoRoom(H5fsError):
    """A message too large for any object header block (libhdf5's H5O_MESG_MAX_SIZE)."""

    errno = errno.E2BIG


@dataclass(eq=False)
class Chunk:
    address: int
    length: int          # the whole block: prefix or signature, messages, gap, checksum
    start: int           # offset of its first message
    end: int             # offset after its last message and gap
    gap: int = 0
    index: int = 0       # its number in libhdf5's chunk list


@dataclass(eq=False)
class Message:
    type: int
    flags: int
    data: bytes          # the stored data (v1: padded to 8 bytes)
    corder: int
    chunk: Chunk
    offset: int          # of its message header in the block
    target: Chunk | None = None   # continuation messages: the block named

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(eq=False)
class _Movable:
    """H5O_msg_alloc_info_t: a message to move out for a continuation message, and the room
    it leaves (itself, the gap or NIL message after it)."""

    msg: Message
    total: int
    gap: int
    null: Message | None


class Layout:
    """One object header as libhdf5 edits it (see the module docstring)."""

    def __init__(self, header: ObjectHeader, sizes: Sizes, allocate: Callable[[int], int]):
        self.record = header
        self.sizes, self.allocate = sizes, allocate
        self.version, self.flags, self.refcount, self.times = header.version, header.flags, header.refcount, header.times
        self.track = header.track_order
        self.head = oh.message_header_size(self.version, self.track)
        self.tail = oh.tail_size(self.version)
        self.cont_size = oh.continuation_size(self.version, sizes)
        self.freed: list[tuple[int, int]] = []
        self.chunks: list[Chunk] = []
        self.msgs: list[Message] = []
        for i, b in enumerate(header.blocks):
            c = Chunk(b.address, b.length, oh.block_start(self.version, self.flags, i), b.length - self.tail, b.gap)
            self.chunks.append(c)
            for m in b.messages:
                last = self.msgs[-1] if self.msgs else None
                if m.type == NIL and last is not None and last.type == NIL and last.chunk is c:
                    last.data = bytes(last.size + self.head + m.size)
                else:
                    flags = m.flags
                    if m.type not in KNOWN_TYPES and flags & oh.FLAG_MARK_UNKNOWN:
                        flags |= oh.FLAG_WAS_UNKNOWN   # as libhdf5 marks them when it writes the object
                    self.msgs.append(Message(m.type, flags, m.data, m.creation_order or 0, c, m.offset))
        self.renumber()
        by_address = {c.address: c for c in self.chunks}
        for m in self.msgs:
            if m.type == CONTINUATION:
                m.target = by_address[oh.decode_continuation(m.data, sizes, "continuation message").address]

    # -- what the header holds --------------------------------------------------------------
    def find(self, raw: RawMessage) -> Message:
        for m in self.msgs:
            if m.chunk.address == raw.block and m.offset == raw.offset:
                if m.type != raw.type or m.data != raw.data:
                    break
                return m
        raise ValueError(f"object header at {self.record.address}: no such message (type {raw.type:#x} "
                         f"at {raw.block}+{raw.offset}); edits since made it stale?")

    def in_chunk(self, chunk: Chunk) -> list[Message]:
        return [m for m in self.msgs if m.chunk is chunk]

    def end(self, m: Message) -> int:
        return m.offset + self.head + m.size

    def data_end(self, chunk: Chunk) -> int:
        return chunk.end - chunk.gap

    def renumber(self) -> None:
        for i, c in enumerate(self.chunks):
            c.index = i

    def point(self, cont: Message, chunk: Chunk) -> None:
        """Continuation message `cont` names `chunk`."""
        cont.target = chunk
        cont.data = oh.encode_continuation(oh.Continuation(chunk.address, chunk.length), self.sizes).ljust(cont.size, b"\0")

    def new_message(self, mtype: int, size: int, chunk: Chunk, offset: int) -> Message:
        m = Message(mtype, 0, bytes(size), 0, chunk, offset)
        self.msgs.append(m)
        return m

    def header(self) -> ObjectHeader:
        """The record (blocks in libhdf5's chunk order; block 0 first)."""
        held: dict[int, list[Message]] = {id(c): [] for c in self.chunks}
        for m in self.msgs:
            if m.size >= oh.MESSAGE_MAX:
                raise ValueError(f"object header at {self.record.address}: a message of {m.size} bytes")
            held[id(m.chunk)].append(m)
        blocks = tuple(oh.HeaderBlock(c.address, c.length, tuple(
            RawMessage(m.type, m.flags, m.data, m.corder if self.track else None, c.address, m.offset)
            for m in sorted(held[id(c)], key=lambda m: m.offset)), c.gap) for c in self.chunks)
        return replace(self.record, refcount=self.refcount, blocks=blocks, flags=self.flags, times=self.times,
                       nmesgs=len(self.msgs) if self.record.version == 1 else 0)

    # -- gaps (v2) ----------------------------------------------------------------------------
    def eliminate_gap(self, null: Message, at: int, size: int) -> None:
        """H5O__eliminate_gap: the `size` bytes at `at` join NIL message `null`, the messages
        between them sliding over."""
        if null.offset < at:
            lo, hi, step = self.end(null), at, size
        else:
            lo, hi, step = at + size, null.offset, -size
            null.offset -= size
        for m in self.in_chunk(null.chunk):
            if m is not null and lo <= m.offset < hi:
                m.offset += step
        null.data = bytes(null.size + size)
        null.chunk.gap = 0

    def add_gap(self, chunk: Chunk, keep: Message, at: int, size: int) -> None:
        """H5O__add_gap: `size` bytes at `at` freed: into a NIL message of the block (not `keep`),
        else to the block's end, where with the block's gap they may make a NIL message."""
        for m in self.msgs:
            if m.type == NIL and m.chunk is chunk and m is not keep:
                self.eliminate_gap(m, at, size)
                return
        for m in self.in_chunk(chunk):
            if m.offset + self.head > at:
                m.offset -= size
        size += chunk.gap
        if size >= self.head:
            self.new_message(NIL, size - self.head, chunk, chunk.end - size)
            chunk.gap = 0
        else:
            chunk.gap = size

    # -- allocation ---------------------------------------------------------------------------
    def best_null(self, size: int) -> Message | None:
        """H5O__alloc_find_best_null (its ties included)."""
        found = None
        for m in self.msgs:
            if m.type != NIL:
                continue
            if m.size == size:
                if found is None:
                    found = m
                elif m.chunk.index < found.chunk.index:
                    found = m
                    if m.chunk.index == 0:
                        break
            elif m.size > size and (found is None or m.size < found.size
                                    or m.size == found.size and m.chunk.index < found.chunk.index):
                found = m
        return found

    def alloc_null(self, null: Message, mtype: int, size: int) -> Message:
        """H5O__alloc_null: NIL message `null` becomes a message of `size` bytes, the rest
        split off as a NIL message or a gap."""
        chunk = null.chunk
        rest = null.size - size
        if rest > 0:
            null.data = null.data[:size]
            if rest < self.head:
                self.add_gap(chunk, null, self.end(null), rest)
            else:
                split = self.new_message(NIL, rest - self.head, chunk, self.end(null))
                if chunk.gap:
                    self.eliminate_gap(split, self.data_end(chunk), chunk.gap)
        null.type = mtype
        return null

    def alloc(self, mtype: int, data: bytes, flags: int, corder: int) -> Message:
        """H5O__alloc (chunks never extended: see the module docstring)."""
        size = self.stored_size(data)
        null = self.best_null(size)
        m = self.alloc_null(self.new_chunk(size) if null is None else null, mtype, size)
        m.flags, m.data, m.corder = flags, data.ljust(size, b"\0"), corder
        return m

    def stored_size(self, data: bytes) -> int:
        size = oh.align(self.version, len(data))
        if size >= oh.MESSAGE_MAX:
            raise NoRoom(f"object header at {self.record.address}: a message of {len(data)} bytes "
                         f"(at most {oh.MESSAGE_MAX - 8})")
        return size

    def best_movable(self) -> _Movable | None:
        """H5O__alloc_find_best_nonnull: the message to move out so that a continuation message
        takes its room (attributes last, then the smallest, then the earliest block)."""
        found = None
        for m in self.msgs:
            if m.type == CONTINUATION:
                continue
            gap, null = 0, None
            if self.end(m) == self.data_end(m.chunk):
                gap = m.chunk.gap
            else:
                null = next((x for x in self.msgs if x.type == NIL and x.chunk is m.chunk
                             and x.offset == self.end(m)), None)
            total = m.size + gap + (self.head + null.size if null else 0)
            if total < self.cont_size:
                continue
            if found is None or found.msg.type == ATTRIBUTE and m.type != ATTRIBUTE or total < found.total or \
                    total == found.total and m.chunk.index < found.msg.chunk.index:
                found = _Movable(m, total, gap, null)
        return found

    def new_chunk(self, size: int) -> Message:
        """H5O__alloc_new_chunk and H5O__alloc_chunk: a continuation block for `size` bytes of
        message; returns the NIL message filling what the block has left."""
        size = oh.align(self.version, size)
        home = self.best_null(self.cont_size)
        movable = None
        if home is None:
            movable = self.best_movable()
            if movable is None:
                size += sum(self.head + m.size for m in self.in_chunk(self.chunks[-1]) if m.type != CONTINUATION)
            else:
                size += self.head + movable.msg.size
        size = oh.align(self.version, max(oh.MIN_CHUNK, size + self.head))   # libhdf5 keeps v1 blocks aligned too
        length = size + oh.block_overhead(self.version)
        chunk = Chunk(self.allocate(length), length, oh.block_start(self.version, 0, 1), length - self.tail)
        pos = chunk.start

        def move(m: Message) -> None:
            nonlocal pos
            m.chunk, m.offset = chunk, pos
            pos += self.head + m.size

        if home is None and movable is None:
            # every message of the last block moves (libhdf5: "should be extremely rare")
            last = self.chunks[-1]
            for m in self.in_chunk(last):
                if m.type == NIL:
                    self.msgs.remove(m)
                else:
                    move(m)
            home = self.new_message(NIL, last.end - last.start - self.head, last, last.start)
            last.gap = 0
        elif home is None:
            m = movable.msg
            home = self.new_message(NIL, m.size, m.chunk, m.offset)
            move(m)
            if movable.gap:
                home.data = bytes(home.size + movable.gap)
                home.chunk.gap = 0
            elif movable.null is not None:
                home.data = bytes(home.size + self.head + movable.null.size)
                self.msgs.remove(movable.null)
        rest = self.new_message(NIL, chunk.end - pos - self.head, chunk, pos)
        self.chunks.append(chunk)
        self.renumber()
        cont = self.alloc_null(home, CONTINUATION, self.cont_size)
        cont.flags = 0
        self.point(cont, chunk)
        return rest

    # -- removal and condensing ---------------------------------------------------------------
    def release(self, m: Message) -> None:
        """H5O__release_mesg: the message becomes NIL (zeros), absorbing the block's gap."""
        m.type, m.flags, m.data = NIL, 0, bytes(m.size)
        if m.chunk.gap:
            self.eliminate_gap(m, self.data_end(m.chunk), m.chunk.gap)

    def drop_chunk(self, chunk: Chunk) -> None:
        self.freed.append((chunk.address, chunk.length))
        self.chunks.remove(chunk)
        self.renumber()

    def condense(self) -> None:
        """H5O__condense_header."""
        while self.move_forward() | self.merge_null() | self.remove_empty_chunks():
            pass

    def move_forward(self) -> bool:
        """H5O__move_msgs_forward: NIL messages bubble to their block's end; a continuation
        message whose (last) block's messages fit in its room takes them instead; a message fitting
        in a NIL message of an earlier block moves there."""
        did = False
        while True:
            packed = False
            nulls = [x for x in self.msgs if x.type == NIL]   # what changes them ends the pass
            # largest[c]: the largest NIL message before block c (most messages fit none: no search)
            largest = [-1] * (len(self.chunks) + 1)
            for x in nulls:
                largest[x.chunk.index + 1] = max(largest[x.chunk.index + 1], x.size)
            for c in range(1, len(largest)):
                largest[c] = max(largest[c], largest[c - 1])
            u = 0
            while u < len(self.msgs):
                m = self.msgs[u]
                u += 1
                if m.type == NIL:
                    if self.end(m) == self.data_end(m.chunk):
                        continue
                    after = next(x for x in self.msgs if x.chunk is m.chunk and x.offset == self.end(m))
                    if after.type != NIL:
                        after.offset, m.offset = m.offset, m.offset + self.head + after.size
                        packed = True
                    continue
                if m.type == CONTINUATION and self.move_cont(m):
                    packed = True
                    break
                if m.size <= largest[m.chunk.index]:
                    null = next(x for x in nulls if m.chunk.index > x.chunk.index and m.size <= x.size)
                    self.move_into(m, null)
                    packed = True
                if packed:   # libhdf5 starts over at the first message that is not NIL after any change
                    break
            did |= packed
            if not packed:
                return did

    def move_into(self, m: Message, null: Message) -> None:
        """The part of H5O__move_msgs_forward moving message `m` into NIL message `null` of an
        earlier block; a NIL message takes `m`'s old place."""
        old_chunk, old_offset = m.chunk, m.offset
        m.chunk, m.offset = null.chunk, null.offset
        if m.size == null.size:
            freed = null
        elif null.size - m.size < self.head:
            gap = null.size - m.size
            null.data = bytes(m.size)
            self.add_gap(null.chunk, null, self.end(m), gap)
            freed = null
        else:
            null.offset += self.head + m.size
            null.data = bytes(null.size - self.head - m.size)
            freed = self.new_message(NIL, 0, old_chunk, old_offset)
        freed.chunk, freed.offset, freed.data = old_chunk, old_offset, bytes(m.size)
        if old_chunk.gap:
            self.eliminate_gap(freed, self.data_end(old_chunk), old_chunk.gap)

    def move_cont(self, cont: Message) -> bool:
        """H5O__move_cont: the messages of the last block move into its continuation message's
        room (and the gap after it) when they fit; the block is freed."""
        target = cont.target
        if target is not self.chunks[-1]:
            return False
        moving = [m for m in self.in_chunk(target) if m.type != NIL]
        needed = sum(self.head + m.size for m in moving)
        gap = cont.chunk.gap
        if not needed or needed > gap + cont.size + self.head:
            return False
        home, pos, end = cont.chunk, cont.offset, self.end(cont)
        self.release(cont)
        for m in moving:
            m.chunk, m.offset = home, pos
            pos += self.head + m.size
        rest = gap + end - pos
        if rest >= self.head:
            cont.offset, cont.data = pos, bytes(rest - self.head)
        else:
            if rest:
                self.add_gap(home, cont, pos, rest)
            self.msgs.remove(cont)
        self.msgs = [m for m in self.msgs if m.chunk is not target]
        self.drop_chunk(target)
        return True

    def merge_null(self) -> bool:
        """H5O__merge_null: adjacent NIL messages of a block become one."""
        did = False
        while True:
            merged = False
            nulls = [m for m in self.msgs if m.type == NIL]
            by_chunk: dict[int, list[Message]] = {}
            for m in nulls:
                by_chunk.setdefault(id(m.chunk), []).append(m)
            for u in nulls:
                for v in by_chunk[id(u.chunk)]:
                    if v is not u and (self.end(u) == v.offset or self.end(v) == u.offset):
                        u.offset = min(u.offset, v.offset)
                        u.data = bytes(u.size + self.head + v.size)
                        self.msgs.remove(v)
                        merged = True
                        if not self.remove_empty_chunks() and u.size >= oh.MESSAGE_MAX:
                            self.shrink(u.chunk)
                        break
                if merged:
                    break
            did |= merged
            if not merged:
                return did

    def remove_empty_chunks(self) -> bool:
        """H5O__remove_empty_chunks: a continuation block holding one NIL message is freed and
        the continuation message naming it becomes NIL."""
        did = False
        while True:
            empty = next((m for m in self.msgs if m.type == NIL and m.chunk is not self.chunks[0]
                          and self.head + m.size == m.chunk.end - m.chunk.start), None)
            if empty is None:
                return did
            cont = next(m for m in self.msgs if m.type == CONTINUATION and m.target is empty.chunk)
            self.release(cont)
            self.msgs.remove(empty)
            self.drop_chunk(empty.chunk)
            did = True

    def shrink(self, chunk: Chunk) -> None:
        """H5O__alloc_shrink_chunk: a block loses its NIL messages and gap (the end of it is
        freed); a v2 block 0 may take a narrower size field."""
        old_length = chunk.length
        end = self.data_end(chunk)
        for m in reversed(self.msgs):
            if m.type == NIL and m.chunk is chunk:
                cut = self.head + m.size
                for x in self.in_chunk(chunk):
                    if x.offset > m.offset:
                        x.offset -= cut
                end -= cut
                self.msgs.remove(m)
        least = oh.align(self.version, oh.MIN_CHUNK)
        if end - chunk.start < least:
            size = max(oh.align(self.version, least - (end - chunk.start)), self.head) - self.head
            self.new_message(NIL, size, chunk, end)
            end += self.head + size
        if chunk is self.chunks[0] and self.version == 2:
            width = oh.HDR_CHUNK0_WIDTH
            bits = min(self.flags & width, oh.chunk0_width_flags(end - chunk.start))
            cut = chunk.start - oh.prefix_size(2, (self.flags & ~width) | bits)
            self.flags = (self.flags & ~width) | bits
            for x in self.in_chunk(chunk):
                x.offset -= cut
            chunk.start -= cut
            end -= cut
        chunk.end, chunk.gap, chunk.length = end, 0, end + self.tail
        if chunk is not self.chunks[0]:
            self.point(next(m for m in self.msgs if m.type == CONTINUATION and m.target is chunk), chunk)
        self.freed.append((chunk.address + chunk.length, old_length - chunk.length))
