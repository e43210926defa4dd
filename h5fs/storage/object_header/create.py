"""New object headers (for new groups and datasets), laid out as libhdf5 lays them out.

libhdf5 (H5O_apply_ohdr) allocates block 0 for a "size hint" of message bytes (at least 22,
libhdf5's H5O_MIN_SIZE; v1: a multiple of 8), fills it with one NIL message, and appends the
object's messages one by one, each splitting the NIL message that is left (H5O__alloc_null): the
messages in order, then a NIL message or (v2) a gap too small for one. A v2 header's chunk-0 size
field is as narrow as the hint allows. Messages beyond the hint make libhdf5 extend block 0 at the
end of the file (H5O__alloc_extend_chunk); here block 0 is simply made large enough for all of
them. Callers pass libhdf5's hint for the kind of object (groups: H5G__obj_create_real, e.g.
4 + 2 * offset size for a symbol-table group; datasets: H5D__update_oh_info, at least 256).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from ...format import object_header as oh
from ...format.codec import Sizes
from ...format.messages.types import NIL, REFCOUNT
from ...format.object_header import HeaderBlock, ObjectHeader, RawMessage
from .edit import refcount_body
from .placement import NoRoom

if TYPE_CHECKING:
    from ..transaction import Transaction

DEFAULT_ATTR_PHASE = (8, 6)   # libhdf5's max compact / min dense attributes, left out of the prefix


def create_header(txn: Transaction, sizes: Sizes, version: int, messages: list[tuple[int, bytes, int]], *,
                  track_times: bool = False, track_attr_order: bool = False, index_attr_order: bool | None = None,
                  attr_phase: tuple[int, int] = DEFAULT_ATTR_PHASE, min_size: int = 0, refcount: int = 1) -> int:
    """Stage a new object header holding `messages` ((type, body, flags), in this order) and
    return its address (`build_header`, in space `txn` allocates)."""
    header, image = build_header(sizes, version, messages, txn.allocate, track_times=track_times,
                                 track_attr_order=track_attr_order, index_attr_order=index_attr_order,
                                 attr_phase=attr_phase, min_size=min_size, refcount=refcount)
    txn.write_new(header.address, image)
    txn.headers[header.address] = header   # the next look at the new object does not decode it
    txn.store.created.add(header.address)
    return header.address


def build_header(sizes: Sizes, version: int, messages: list[tuple[int, bytes, int]], allocate: Callable[[int], int], *,
                 track_times: bool = False, track_attr_order: bool = False, index_attr_order: bool | None = None,
                 attr_phase: tuple[int, int] = DEFAULT_ATTR_PHASE, min_size: int = 0,
                 refcount: int = 1, times: tuple[int, int, int, int] | None = None) -> tuple[ObjectHeader, bytes]:
    """A new object header holding `messages` ((type, body, flags), in this order) in the space
    `allocate(length)` gives: its record and its image. v1 headers hold their link count in the
    prefix; v2 headers get a reference count message when `refcount` > 1 (H5O__link_oh), the
    times (`times`, or all now) when `track_times`, the attribute creation-order flags, and the
    phase-change values when they differ from libhdf5's defaults. v1 headers store no times in
    the prefix: give them a modification time message."""
    if version == 1 and (track_times or track_attr_order or attr_phase != DEFAULT_ATTR_PHASE):
        raise ValueError("version 1 object headers store no times, creation order or attribute phase change")
    if min_size >= oh.MESSAGE_MAX:
        raise ValueError(f"object header hint of {min_size} bytes")
    if version == 2 and refcount > 1:
        messages = [*messages, (REFCOUNT, refcount_body(refcount, sizes), oh.FLAG_DONT_SHARE)]
    flags = 0
    if version == 2:
        flags |= oh.HDR_TIMES if track_times else 0
        flags |= oh.HDR_TRACK_ORDER if track_attr_order else 0
        flags |= oh.HDR_INDEX_ORDER if (track_attr_order if index_attr_order is None else index_attr_order) else 0
        flags |= oh.HDR_PHASE_CHANGE if tuple(attr_phase) != DEFAULT_ATTR_PHASE else 0
    head = oh.message_header_size(version, bool(flags & oh.HDR_TRACK_ORDER))
    needed = sum(head + oh.align(version, len(body)) for _, body, _ in messages)
    size = max(oh.align(version, max(oh.MIN_CHUNK, min_size)), needed)
    if version == 2:
        flags |= oh.chunk0_width_flags(size)
    start = oh.prefix_size(version, flags)
    length = start + size + oh.tail_size(version)
    address = allocate(length)
    times = times or (int(time.time()),) * 4
    phase = tuple(attr_phase) if flags & oh.HDR_PHASE_CHANGE else (None, None)
    # the messages one after another, then what is left: a NIL message, or (v2) a gap too
    # small for one (as H5O__alloc_null splits the one NIL message of an empty header)
    corder = 0 if flags & oh.HDR_TRACK_ORDER else None
    placed, at = [], start
    for mtype, body, mflags in messages:
        stored = oh.align(version, len(body))
        if stored >= oh.MESSAGE_MAX:
            raise NoRoom(f"object header at {address}: a message of {len(body)} bytes (at most {oh.MESSAGE_MAX - 8})")
        placed.append(RawMessage(mtype, mflags, body.ljust(stored, b"\0"), corder, address, at))
        at += head + stored
    rest = start + size - at
    if rest >= head:
        placed.append(RawMessage(NIL, 0, bytes(rest - head), corder, address, at))
    header = ObjectHeader(address, version, refcount if version == 1 else 1,
                          (HeaderBlock(address, length, tuple(placed), 0 if rest >= head else rest),),
                          flags, times if flags & oh.HDR_TIMES else None, *phase,
                          nmesgs=len(placed) if version == 1 else 0)
    return header, oh.encode_block(header, 0)   # one block: as decoding its image gives it


def moved(header: ObjectHeader, address: int) -> ObjectHeader:
    """A header `build_header` made, as made at `address` (its image is the same: a one-block
    header holds no address of its own)."""
    (block,) = header.blocks
    messages = tuple(RawMessage(m.type, m.flags, m.data, m.creation_order, address, m.offset) for m in block.messages)
    return ObjectHeader(address, header.version, header.refcount, (HeaderBlock(address, block.length, messages, block.gap),),
                        header.flags, header.times, header.attr_max_compact, header.attr_min_dense, header.nmesgs)
