"""Object header edits inside a transaction (the placing is placement.Layout's, libhdf5's).

`HeaderEdit` applies one edit at a time to the header as it last left it (what libhdf5 does
between two opens of the file), then stages each block that changed: once per transaction, the
whole block with its checksum (write_in_place; the journal makes several atomic), new blocks with
write_new, freed blocks with txn.free. A message that cannot be stored in any header block (64 KiB
and more) raises NoRoom: attributes then go to dense storage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import CannotWrite
from ...format import object_header as oh
from ...format.codec import Reader, Sizes, Writer
from ...format.messages import small
from ...format.messages.types import CONTINUATION, KNOWN_TYPES, NIL, REFCOUNT
from ...format.object_header import ObjectHeader, RawMessage
from .placement import Layout, Message

if TYPE_CHECKING:
    from ..transaction import Transaction


class HeaderEdit:
    """Successive edits of one object header in one transaction, each seeing the last."""

    def __init__(self, txn: Transaction, header: ObjectHeader):
        for m in header.messages:
            if m.type not in KNOWN_TYPES and m.flags & oh.FLAG_FAIL_UNKNOWN_WRITE:
                raise CannotWrite(f"object header at {header.address}: message type {m.type:#x}, unknown, "
                                  "forbids writers that do not know it")
        self.txn = txn
        self._header = header
        # each block's bytes as they stand, to write only the blocks an edit changed: encoded at
        # the first publish of a header of several blocks (one of one block changes with any edit)
        self._images: dict[int, bytes] | None = None
        self._fresh: set[int] = set()        # blocks this edit allocated

    @property
    def header(self) -> ObjectHeader:
        """The header as it will be after the commit."""
        return self._header

    def _layout(self) -> Layout:
        def allocate(size: int) -> int:
            address = self.txn.allocate(size)
            self._fresh.add(address)
            return address
        return Layout(self._header, self.txn.sizes, allocate)

    def _publish(self, lay: Layout) -> None:
        """Stage every block that changed, free what the header let go, and read it back."""
        record = lay.header()
        images = {b.address: oh.encode_block(record, i) for i, b in enumerate(record.blocks)}
        if self._images is None and len(self._header.blocks) > 1:
            self._images = {b.address: oh.encode_block(self._header, i) for i, b in enumerate(self._header.blocks)}
        for address, image in images.items():
            if address in self._fresh:
                self.txn.write_new(address, image)
            elif self._images is None or image != self._images.get(address):
                self.txn.write_in_place(address, image)
        for address, size in lay.freed:
            self.txn.free(address, size)
        self.txn.owners.add(record.address)

        def fetch(address: int, length: int) -> bytes:
            if len(images.get(address, b"")) != length:
                raise ValueError(f"object header at {record.address}: no block of {length} bytes at {address}")
            return images[address]
        # one block: the record is what decoding its image gives; more: decoded, as a reader
        # lists the blocks in the order the continuations chain them
        self._header = record if len(record.blocks) == 1 else oh.decode(
            images[record.address], record.address, self.txn.sizes, f"object header at {record.address}", fetch)
        self._images = images
        self.txn.headers[record.address] = self._header

    def _placed(self, m: Message) -> RawMessage:
        return next(r for r in self._header.all_messages() if r.block == m.chunk.address and r.offset == m.offset)

    # -- edits --------------------------------------------------------------------------------
    def _editable(self, mtype: int) -> None:
        """Continuation and NIL messages are the engine's; v1 headers hold no reference count
        message (libhdf5 refuses one)."""
        if mtype in (NIL, CONTINUATION) or mtype == REFCOUNT and self._header.version == 1:
            raise ValueError(f"object header at {self._header.address}: a message of type {mtype:#x} is not editable")

    def add(self, mtype: int, data: bytes, flags: int = 0, *, creation_order: int = 0) -> RawMessage:
        """A new message (H5O_msg_append_oh): returns it as placed (valid until the next edit).
        `creation_order` is stored where the header tracks it (attributes: theirs)."""
        return self.add_all([(mtype, data, flags, creation_order)])[0]

    def add_all(self, messages: list[tuple[int, bytes, int, int]]) -> list[RawMessage]:
        """New messages (type, body, flags, creation order), placed one after another as `add`
        would place them, the header encoded once."""
        for mtype, *_ in messages:
            self._editable(mtype)
        lay = self._layout()
        placed = [lay.alloc(mtype, data, flags, corder) for mtype, data, flags, corder in messages]
        self._publish(lay)
        return [self._placed(m) for m in placed]

    def remove(self, raw: RawMessage) -> None:
        """The message becomes NIL and the header is condensed (H5O_msg_remove)."""
        self._editable(raw.type)
        lay = self._layout()
        lay.release(lay.find(raw))
        lay.condense()
        self._publish(lay)

    def replace(self, raw: RawMessage, data: bytes, flags: int | None = None, *, relocate: bool = False) -> RawMessage:
        """A new body (and flags) for a message: in place when its stored size stays (v1: padded to
        it) and `relocate` is false, otherwise removed and added again and the header condensed,
        as libhdf5 renames an attribute (H5O__attr_rename_mod_cb: it relocates whenever the name's
        length changes, with flag "do not share"). Returns the message as placed."""
        self._editable(raw.type)
        lay = self._layout()
        m = lay.find(raw)
        size = lay.stored_size(data)
        flags = m.flags if flags is None else flags
        if size == m.size and not relocate:
            m.data, m.flags = data.ljust(size, b"\0"), flags
        else:
            lay.release(m)
            m = lay.alloc(raw.type, data, flags, m.corder)
            lay.condense()
        self._publish(lay)
        return self._placed(m)

    def set(self, mtype: int, data: bytes) -> None:
        """A new body for the first message of type `mtype`."""
        old = self._header.first(mtype)
        if old is None:
            raise ValueError(f"object header at {self._header.address}: no message of type {mtype:#x}")
        self.replace(old, data)

    @property
    def refcount(self) -> int:
        """The object's hard link count (`refcount_of`)."""
        return refcount_of(self._header, self.txn.sizes)

    @refcount.setter
    def refcount(self, count: int) -> None:
        """v2 as H5O__link_oh: a count above 1 is a reference count message (flag "do not
        share"), added, rewritten, or removed (with the header condensed) at 1 or below."""
        lay = self._layout()
        if lay.version == 1:
            lay.refcount = count
        else:
            have = [m for m in lay.msgs if m.type == REFCOUNT]
            body = refcount_body(count, self.txn.sizes)
            if have and count <= 1:
                for m in have:
                    lay.release(m)
                lay.condense()
            elif have:
                have[0].data = body
            elif count > 1:
                lay.alloc(REFCOUNT, body, oh.FLAG_DONT_SHARE, 0)
        self._publish(lay)

    @property
    def times(self) -> tuple[int, int, int, int] | None:
        """v2 headers storing times: (access, modification, change, birth), in seconds."""
        return self._header.times

    @times.setter
    def times(self, times: tuple[int, int, int, int]) -> None:
        if not self._header.flags & oh.HDR_TIMES:
            raise ValueError(f"object header at {self._header.address} stores no times")
        lay = self._layout()
        lay.times = tuple(times)
        self._publish(lay)


def refcount_of(header: ObjectHeader, sizes: Sizes) -> int:
    """An object's hard link count: v1's prefix field, v2's reference count message (1 without one)."""
    if header.version == 1:
        return header.refcount
    m = header.first(REFCOUNT)
    return 1 if m is None else small.decode_refcount(Reader(m.data, 0, sizes, "reference count message"))


def refcount_body(count: int, sizes: Sizes) -> bytes:
    w = Writer(sizes)
    small.encode_refcount(w, count)
    return w.getvalue()


def rewrite_message(txn: Transaction, header: ObjectHeader, old: RawMessage, data: bytes) -> ObjectHeader:
    """Stage `old` with its data replaced (HeaderEdit.replace); returns the header as it will be."""
    edit = HeaderEdit(txn, header)
    edit.replace(old, data)
    return edit.header
