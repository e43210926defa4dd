"""Uses of the file's shared object header messages counted down (libhdf5's H5SM_delete).

A file made with shared-message indexes (spec III.I, an SMTB table of indexes, each a list or a
v2 B-tree of type 7 records, with a fractal heap of message bodies) keeps one record per distinct
message of the indexed types:
- a message shared "in the heap" has a record with its heap ID and a reference count; the headers
  using it hold a shared-message reference (flag 0x02) to that heap ID;
- a message seen once stays in its header, flagged shareable (0x40), and its record names that
  header ("in an object header"). When a second object gets the same message, libhdf5 copies it
  into the heap with a count of 2, and leaves the first header's message as it was: that use is
  found again by content (the lookup3 hash of its bytes, seeded with its type, then the bytes).

When a message leaves a header (its object freed, an attribute removed or replaced, a dataset's
data messages replaced), `release` finds its record: a record naming that header goes; a heap
record is counted down, and at zero it goes with its heap object. Every change of one transaction
is written at `close`: list blocks rewritten whole (records packed, the rest of the block zero, as
libhdf5 writes them), B-tree records replaced or removed through the v2 B-tree editor, and the
table's message counts rewritten. Indexes left with no message keep their list or tree and heap
(libhdf5 would delete them; an empty index is read and grown again by libhdf5 as any other), and a
B-tree below its "B-tree to list" cutoff stays a B-tree (libhdf5 converts it; both read alike).
"""

from __future__ import annotations

from dataclasses import replace

from ...errors import CannotWrite, FormatError
from ...format import btree_v2 as bt
from ...format import checksum
from ...format.codec import Reader, Writer
from ...format.messages import shared as shared_msg
from ...format.messages import sohm_table as T
from ...format.messages.types import ATTRIBUTE, SOHM_TABLE
from ...format.object_header import FLAG_SHAREABLE, FLAG_SHARED, RawMessage
from ..btree_v2.edit import BTreeV2Edit
from ..fractal_heap import writer as heap_write
from ..fractal_heap.reader import FractalHeap
from ..btree_v2 import reader as bt_reader
from ..transaction import Transaction
from .reader import attribute_refs, index_for, read_records, read_table

IN_HEAP, IN_HEADER = 0, 1   # a record's location


class SharedMessages:
    """The shared-message index changes of one transaction; `close()` writes them."""

    def __init__(self, txn: Transaction, f):
        self.txn, self.f = txn, f
        self._table: T.SohmTableMessage | None = None
        self._indexes: list[T.SohmIndex] | None = None
        self._records: dict[int, list[bt.SharedMessageRecord]] = {}   # index number -> records now
        self._btree_changes: dict[int, dict[int, bt.SharedMessageRecord | None]] = {}   # by hash
        self._heap_removals: list[tuple[int, bytes]] = []
        self._changed: set[int] = set()
        self._active: bool | None = None

    @property
    def active(self) -> bool:
        """Whether the file has a table. Most do not: then nothing here reads what goes (a
        broken attribute included)."""
        if self._active is None:
            ext = self.f.extension
            self._active = ext is not None and ext.first(SOHM_TABLE) is not None
        return self._active

    # -- what leaves a header -------------------------------------------------------------------
    def release(self, raw: RawMessage, header_address: int, what: str) -> None:
        """Message `raw` leaves the header at `header_address`: a use of a shared message fewer.
        Committed datatypes (shared through another object's header) are the caller's."""
        if not self.active:
            return
        if raw.shared:
            ref = shared_msg.decode(Reader(raw.data, 0, self.txn.sizes, f"{what}: shared message"))
            if ref.kind == shared_msg.IN_SOHM_HEAP:
                self.release_heap_id(raw.type, ref.heap_id, what)
            return
        tracked = bool(raw.flags & FLAG_SHAREABLE) and self._release_here(raw, header_address, what)
        if not tracked and raw.type == ATTRIBUTE:   # (a tracked one's go with its last use)
            self.release_attribute(bytes(raw.data), what)

    def release_attribute(self, body: bytes, what: str) -> None:
        """An attribute message of its own goes (wherever it was stored): the datatype and
        dataspace it holds as shared-message references, one use fewer each (H5O__attr_delete)."""
        if not self.active:
            return
        for mtype, heap_id in attribute_refs(body, self.txn.sizes, what):
            self.release_heap_id(mtype, heap_id, what)

    def acquire_attribute(self, body: bytes, what: str) -> None:
        """A new attribute message of its own holds these references: one use more each."""
        if not self.active:
            return
        for mtype, heap_id in attribute_refs(body, self.txn.sizes, what):
            number, i = self._find_heap_id(mtype, heap_id, what)
            rec = self._records[number][i]
            self._records[number][i] = replace(rec, refcount=rec.refcount + 1)
            self._note(number, self._records[number][i])

    def release_heap_id(self, mtype: int, heap_id: bytes, what: str) -> None:
        """One use fewer of the message of type `mtype` the index's heap holds under `heap_id`."""
        self._count_down(*self._find_heap_id(mtype, heap_id, what), mtype, what)

    def _find_heap_id(self, mtype: int, heap_id: bytes, what: str) -> tuple[int, int]:
        number = index_for(self._all(what), mtype)
        if number is None:
            raise FormatError(f"{what}: shared in the file's message heap, but no index holds its type")
        for i, rec in enumerate(self._load(number, what)):
            if rec.location == IN_HEAP and rec.heap_id == heap_id:
                return number, i
        raise FormatError(f"{what}: its shared message (heap ID {heap_id.hex()}) is not in the index")

    def release_dense_attributes(self, heap_address: int, name_index: int, what: str) -> None:
        """The attributes of an object's dense storage go: those shared in the table (records
        flagged shared, whose heap ID is the table heap's), one use fewer each; the others
        release what they hold."""
        if not self.active:
            return
        heap = None
        for rec in bt_reader.iterate(self.txn.reader, name_index, bt.decode_attr_name, f"{what}: attribute name index",
                                     expect_type=bt.ATTR_NAME):
            if rec.flags & FLAG_SHARED:   # the record holds the shared message heap's ID itself
                self.release_heap_id(ATTRIBUTE, rec.heap_id, what)
                continue
            heap = heap or FractalHeap(self.txn.reader, heap_address, f"{what}: attribute heap")
            self.release_attribute(heap.get(rec.heap_id), what)

    def _release_here(self, raw: RawMessage, header_address: int, what: str) -> bool:
        """A shareable message kept in its header goes; whether the index tracked it."""
        number = index_for(self._all(what), raw.type)
        if number is None:
            return False   # shareable, but its type is not indexed: nothing tracks it
        body = bytes(raw.data)
        hashed = checksum.lookup3(body, raw.type)
        records = self._load(number, what)
        order = (raw.creation_order or 0) if raw.type == ATTRIBUTE else 0
        for i, rec in enumerate(records):
            if rec.hash != hashed:
                continue
            if rec.location == IN_HEADER and (rec.oh_address, rec.msg_type, rec.oh_index) == (
                    header_address, raw.type, order):
                self._drop(number, i)
                if raw.type == ATTRIBUTE:   # its last use: what it holds goes too
                    self.release_attribute(body, what)
                return True
            if rec.location == IN_HEAP and self._heap(number, what).get(rec.heap_id) == body:
                self._count_down(number, i, raw.type, what)   # copied into the heap at a second use
                return True
        return False   # not tracked (the index was full, or the message added unshared)

    # -- the index ------------------------------------------------------------------------------
    def _all(self, what: str) -> list[T.SohmIndex]:
        if self._indexes is None:
            ext = self.f.extension
            raw = None if ext is None else ext.first(SOHM_TABLE)
            if raw is None:
                raise FormatError(f"{what}: a shared message, but the file has no shared message table")
            self._table = T.decode(Reader(raw.data, 0, self.txn.sizes, "shared message table message"))
            self._indexes = read_table(self.txn.reader, self._table)
        return self._indexes

    def _load(self, number: int, what: str) -> list[bt.SharedMessageRecord]:
        if number not in self._records:
            index = self._all(what)[number]
            label = f"shared message index {number}"
            records = read_records(self.txn.reader, index, label)
            if index.index_type != T.LIST:
                if len({r.hash for r in records}) != len(records):   # edits find records by hash
                    raise CannotWrite(f"{what}: two shared messages with one hash in {label} (not edited)")
                self._btree_changes[number] = {}
            self._records[number] = records
        return self._records[number]

    def _heap(self, number: int, what: str) -> FractalHeap:
        address = self._all(what)[number].heap_address
        if address is None:
            raise FormatError(f"{what}: shared message index {number} has no heap")
        return FractalHeap(self.txn.reader, address, f"shared message heap {number}")

    def _count_down(self, number: int, i: int, mtype: int, what: str) -> None:
        rec = self._records[number][i]
        if rec.refcount > 1:
            self._records[number][i] = replace(rec, refcount=rec.refcount - 1)
            self._note(number, self._records[number][i])
            return
        body = self._heap(number, what).get(rec.heap_id) if mtype == ATTRIBUTE else None
        self._heap_removals.append((self._all(what)[number].heap_address, rec.heap_id))
        self._drop(number, i)
        if body is not None:   # the message's last use: the references it holds go too
            self.release_attribute(body, what)

    def _drop(self, number: int, i: int) -> None:
        rec = self._records[number].pop(i)
        self._note(number, rec, gone=True)
        index = self._indexes[number]
        self._indexes[number] = replace(index, num_messages=index.num_messages - 1)

    def _note(self, number: int, rec: bt.SharedMessageRecord, gone: bool = False) -> None:
        self._changed.add(number)
        if number in self._btree_changes:
            self._btree_changes[number][rec.hash] = None if gone else rec

    # -- writing ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Stage every change in the transaction."""
        if not self._changed:
            return
        txn, sizes = self.txn, self.txn.sizes
        for number in sorted(self._changed):
            index = self._indexes[number]
            if index.index_type == T.LIST:
                w = Writer(sizes)
                T.encode_list(w, self._records[number])
                block = w.getvalue()
                txn.write_in_place(index.index_address, block + bytes(T.list_size(sizes, index.list_cutoff) - len(block)))
                txn.reader.meta.invalidate(index.index_address)
            else:
                hdr = bt_reader.read_header(txn.reader, index.index_address, f"shared message index {number}")
                edit = BTreeV2Edit(txn, hdr, lambda r: r.hash, bt.decode_sohm, bt.encode_sohm,
                                   f"shared message index {number}")
                edit.apply(sorted(self._btree_changes[number].items()))
        for heap_address, heap_id in self._heap_removals:
            heap_write.remove(txn, heap_address, heap_id)
        w = Writer(sizes)
        T.encode_table(w, self._indexes)
        txn.write_in_place(self._table.table_address, w.getvalue())
        txn.reader.meta.invalidate(self._table.table_address)
        ext = self.f.superblock.extension_address   # the decoded table is cached under it
        txn.on_commit(lambda: self.f.invalidate_range(ext, ext + 1))
        self._changed.clear()
