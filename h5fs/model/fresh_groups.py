"""New groups made, and given attributes, without a transaction each (storage/pending_objects.py
says how they wait and land): `mkdir` in a new-style group, and `setfattr` or
`setfattr -x` on such a new group. The tree editor's transactions make everything else, landing
them first (model/tree_edit.py).
"""

from __future__ import annotations

import functools
import time
from typing import NamedTuple

from ..errors import CannotWrite
from ..format import object_header as oh
from ..format.codec import encoded
from ..format.messages import attribute as attr_msg
from ..format.messages import attribute_info as ainfo_msg
from ..format.messages import link as link_msg
from ..format.messages import link_info as link_info_msg
from ..format.messages.link import Link
from ..format.messages.types import ATTRIBUTE, ATTRIBUTE_INFO, GROUP_INFO, LINK_INFO, MTIME, MTIME_OLD
from ..storage import global_heap
from ..storage.links_write import UTF8, encode_link
from ..storage.object_header.create import build_header, moved
from ..storage.object_header.reader import HEADER, nbytes
from ..storage.pending_links import INSERT, Op
from ..storage.pending_objects import DELATTR, NEW, SETATTR, Fresh, FreshOp
from ..storage.sohm_table.writer import SharedMessages
from ..storage.transaction import Transaction
from . import attributes_write
from . import messages as M
from .attribute_values import check_string_attribute, new_string_attribute
from .attributes import UNSTORED
from .libver import libver_for_superblock
from .library_conventions import text_form
from .objects import H5Object


class _Landing(NamedTuple):   # what an attribute edit needs of its object
    address: int
    path: str


def group_messages(header: oh.ObjectHeader, info: link_info_msg.LinkInfo, sizes) -> tuple[int, tuple, dict]:
    """A new new-style group in the group whose header and link info these are
    (H5G__obj_create_real): its header's version, messages and options (`build_header`)."""
    ginfo = header.first(GROUP_INFO)
    return _group_messages(header.version, header.flags & (oh.HDR_TIMES | oh.HDR_TRACK_ORDER),
                           b"\0\0" if ginfo is None else bytes(ginfo.data), info.track_order, info.index_order, sizes)


@functools.lru_cache(maxsize=64)
def _group_messages(version: int, flags: int, group_info: bytes, track_order: bool, index_order: bool,
                    sizes) -> tuple[int, tuple, dict]:
    """`group_messages`, made once for each kind of group (a burst of `mkdir` asks the same)."""
    new_info = link_info_msg.LinkInfo(track_order, index_order, 0 if track_order else None, None, None, None)
    messages = ((LINK_INFO, encoded(link_info_msg.encode, new_info, sizes), 0), (GROUP_INFO, group_info, 0))
    hint = sum(len(body) for _, body, _ in messages) + 4 * (8 + len(encode_link(
        Link("x" * 8, link_msg.HARD, address=0), sizes)))
    if version == 1:
        return 1, messages, {"min_size": hint}
    return 2, messages, {"min_size": hint, "track_times": bool(flags & oh.HDR_TIMES),
                         "track_attr_order": bool(flags & oh.HDR_TRACK_ORDER)}


def mkdir(f, parent: H5Object, name: str) -> int | None:
    """The new group `name` of `parent`, acknowledged once the journal holds it; None when it
    takes a transaction: `parent` is new itself, keeps its links in a symbol table, numbers
    them, or keeps times the edit changes. FileExistsError: the name is taken."""
    store, header = f.store, parent.header
    if store.persistent is not None or parent.address in store.pending.fresh or parent.address in store.damaged \
            or not store.cache_current or not times_stay(header):
        return None   # (free-space managers in the file would have to follow the space it takes)
    info = parent.message(M.LINK_INFO)
    if info is None or info.track_order:
        return None
    # (waiting links first, then the group's own, each name's answer kept: the lookup that
    # found the name missing just before answers again)
    if parent.link(name) is not None:
        raise FileExistsError(f"{parent.path}: a link named {name!r} exists")
    version, messages, options = group_messages(header, info, f.sizes)
    end = store.allocator.eoa   # space past it held nothing this mount read
    if options.get("track_times"):   # its times are now
        record, image = build_header(f.sizes, version, messages, store.allocator.allocate, **options)
        address = record.address
    else:   # the same image for every such group
        template, image = _template(version, messages, tuple(options.items()), f.sizes)
        address = store.allocator.allocate(len(image))
        record = moved(template, address)
    link = Link(name, link_msg.HARD, address=address, charset=UTF8)
    try:
        store.defer([FreshOp(NEW, address, data=image), Op(INSERT, parent.address, name, link, encode_link(link, f.sizes))],
                    (address, image))
    except BaseException:
        store.allocator.free(address, len(image))
        raise
    store.pending.fresh[address].record = record
    if address < end:
        f.invalidate(address)   # what the reused space held
    f.reader.meta.get(address, HEADER, lambda: record, nbytes)   # the answer's stat does not decode it
    return address


@functools.lru_cache(maxsize=64)
def _template(version: int, messages: tuple, options: tuple, sizes) -> tuple[oh.ObjectHeader, bytes]:
    return build_header(sizes, version, list(messages), lambda length: 0, **dict(options))


def times_stay(header: oh.ObjectHeader) -> bool:
    """Whether a link added or removed leaves the group's times as they are: it keeps none, or they say now
    (HDF5 keeps seconds: a burst of edits changes them about once a second)."""
    if header.times is not None:
        now = time.time_ns() // 1_000_000_000
        return header.times[1] == now and header.times[2] == now
    return header.first(MTIME) is None and header.first(MTIME_OLD) is None


def set_attribute(f, obj: H5Object, name: str, text: bytes) -> bool:
    """Attribute `name` of the new group `obj` set to `text`, acknowledged once the journal holds
    it; False when it takes a transaction (`obj` is not new, or the file's library keeps text in
    another form than h5py's)."""
    if obj.address not in f.store.pending.fresh or text_form(f) is not None:
        return False   # (a file no library marks: no convention of one to keep, check_attribute_edit)
    check_string_attribute(name, text)   # refused now, not when it lands
    f.store.defer([FreshOp(SETATTR, obj.address, name, text)])
    f.invalidate(obj.address)   # its attribute table
    return True


def remove_attribute(f, obj: H5Object, name: str) -> bool:
    """As `set_attribute`, removing attribute `name` (False: not one set on a new group)."""
    fresh = f.store.pending.fresh.get(obj.address)
    if fresh is None or name not in fresh.attributes:   # (set as `set_attribute` sets: in a file no library marks)
        return False
    f.store.defer([FreshOp(DELATTR, obj.address, name)])
    f.invalidate(obj.address)
    return True


def land(txn: Transaction, f, shared: SharedMessages, touched: set[int]) -> None:
    """Every new group into the file in `txn`, which lands their links: its header built with
    its attributes (their strings in the global heap together), or staged as it is and the
    attributes added as a transaction adds them (too many, or too large, for the room it has,
    or kept by creation order). One read from the journal goes where `txn` allocates, its link
    pointed there."""
    sizes, pending = txn.sizes, txn.store.pending
    libver = libver_for_superblock(f.superblock.version)
    relocated: dict[int, int] = {}
    built: list[tuple[Fresh, int, oh.ObjectHeader]] = []
    for fresh in pending.fresh.values():
        address = fresh.address
        if not fresh.kept:
            address = txn.allocate(len(fresh.image))
            relocated[fresh.address] = address
        txn.store.created.add(address)
        touched.add(address)
        record = fresh.record if fresh.kept and fresh.record is not None else \
            oh.decode(fresh.image, address, sizes, f"new group at {address}", _one_block)
        if fresh.attributes and _fit(record, fresh.attributes, sizes, libver):
            built.append((fresh, address, record))
            continue
        txn.write_new(address, fresh.image)
        for name, text in fresh.attributes.items():
            attributes_write.set_attribute(txn, f, _Landing(address, f"new group at {address}"), name, text, shared)
    ids = iter(global_heap.insert_many(txn, [text for fresh, _, _ in built for text in fresh.attributes.values()]))
    for fresh, address, record in built:
        attributes = [new_string_attribute(name, text, next(ids), sizes, libver) for name, text in fresh.attributes.items()]
        header, image = build_header(sizes, record.version, _with_attributes(record, attributes, sizes),
                                     lambda length: address, min_size=_room(record), track_times=record.times is not None,
                                     times=record.times, index_attr_order=bool(record.flags & oh.HDR_INDEX_ORDER))
        if len(image) != len(fresh.image):
            raise CannotWrite(f"new group at {address}: its header outgrew its room ({len(image)} bytes, "
                              f"{len(fresh.image)} kept)")
        txn.write_new(address, image)
        txn.headers[address] = header
    if relocated:
        pending.relink(relocated, sizes)


def _fit(record: oh.ObjectHeader, texts: dict[str, bytes], sizes, libver: str) -> bool:
    """Whether a new group's attributes (h5py's strings) fit in its header's room as they are
    added one by one (few enough not to go dense, none by creation order)."""
    if record.flags & oh.HDR_TRACK_ORDER or len(texts) > attributes_write.MAX_COMPACT:
        return False
    head = oh.message_header_size(record.version)
    used = sum(head + len(m.data) for m in record.messages)   # (stored: aligned)
    if record.version > 1:
        used += head + oh.align(2, len(_attribute_info(bool(record.flags & oh.HDR_INDEX_ORDER), sizes)))
    used += sum(head + oh.align(record.version, _string_message_size(name, sizes, libver)) for name in texts)
    return used <= _room(record)


def _room(record: oh.ObjectHeader) -> int:
    """The message bytes of a one-block header."""
    return record.blocks[0].length - oh.prefix_size(record.version, record.flags) - oh.tail_size(record.version)


@functools.lru_cache(maxsize=256)
def _string_message_size(name: str, sizes, libver: str) -> int:
    """The bytes of a string attribute message named `name` (its value is a heap ID: the same
    for any text)."""
    return len(encoded(attr_msg.encode, new_string_attribute(name, b"", UNSTORED, sizes, libver), sizes))


@functools.lru_cache(maxsize=8)
def _attribute_info(index_order: bool, sizes) -> bytes:
    """The attribute info a new group's first attribute brings (no creation order kept)."""
    return encoded(ainfo_msg.encode, ainfo_msg.AttributeInfo(False, index_order, None, None, None, None), sizes)


def _with_attributes(record: oh.ObjectHeader, attributes: list, sizes) -> list[tuple[int, bytes, int]]:
    """The messages of a new group's header with `attributes` added (in a version 2 header
    with the attribute info the first one brings), as `_fit` counts them."""
    messages = [(m.type, bytes(m.data), m.flags) for m in record.messages]
    if record.version > 1:
        messages.append((ATTRIBUTE_INFO, _attribute_info(bool(record.flags & oh.HDR_INDEX_ORDER), sizes), 0))
    return messages + [(ATTRIBUTE, encoded(attr_msg.encode, msg, sizes), 0) for msg in attributes]


def _one_block(address: int, length: int) -> bytes:
    raise CannotWrite(f"a new group's header continues at {address}: it was made in one block")
