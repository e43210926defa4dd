"""Dense storage of links (H5Gdense.c) and attributes (H5Adense.c) edited in a transaction: the
messages live in a fractal heap, found by name through a v2 B-tree of name hashes (type 5 or 8) and,
when the object indexes creation order, through a second one keyed by creation order (type 6 or 9).

A name index orders records by the lookup3 hash of the name, then, for names whose hashes tie, by
the names themselves (strcmp order), which are read from the heap only then (libhdf5's
H5G__dense_btree2_name_compare and H5A__dense_btree2_name_compare).

New storage takes libhdf5's parameters: the heaps of format/fractal_heap.py (LINK_HEAP,
ATTRIBUTE_HEAP) and B-trees of 512-byte nodes that split when full and merge below 40%
(H5G_NAME_BT2_*, H5G_CORDER_BT2_*, H5A_NAME_BT2_*, H5A_CORDER_BT2_*). Attribute records carry the
message flags; h5fs stores unshared messages only, so they are 0 (a record flagged shared points into
the file's shared message table instead: DenseStore).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import total_ordering
from typing import TYPE_CHECKING, Callable

from ..errors import CannotWrite, FormatError
from ..format import btree_v2 as bt
from ..format.checksum import lookup3
from ..format.codec import Reader, Sizes
from ..format.fractal_heap import ATTRIBUTE_HEAP, LINK_HEAP, HeapParams
from ..format.messages import attribute as attr_msg
from ..format.messages import link as link_msg
from .btree_v2.edit import BTreeV2Edit, delete as delete_tree, new_header
from .fractal_heap import writer as heap_write
from .fractal_heap.reader import FractalHeap
from .btree_v2 import reader as bt_reader

if TYPE_CHECKING:
    from .transaction import Transaction

NODE_SIZE, SPLIT_PERCENT, MERGE_PERCENT = 512, 100, 40
FIND_EACH = 16   # entries to remove found by a descent each, more by one walk of the index
MSG_SHARED = 0x02   # an attribute record's flag: the heap holds a shared-message reference


def name_hash(name: bytes) -> int:
    return lookup3(name, 0)


@total_ordering
class NameKey:
    """A name index key: the hash, then the name, read (once) only when hashes tie."""

    __slots__ = ("hash", "_name", "_load")

    def __init__(self, h: int, name: bytes | None = None, load: Callable[[], bytes] | None = None):
        self.hash, self._name, self._load = h, name, load

    @property
    def name(self) -> bytes:
        if self._name is None:
            self._name = self._load()
        return self._name

    def __eq__(self, other) -> bool:
        return isinstance(other, NameKey) and self.hash == other.hash and self.name == other.name

    def __lt__(self, other: NameKey) -> bool:
        return self.hash < other.hash or (self.hash == other.hash and self.name < other.name)

    def __hash__(self) -> int:
        return self.hash


@dataclass(frozen=True)
class DenseKind:
    """What link and attribute storage differ in."""

    label: str
    heap: HeapParams
    name_type: int
    corder_type: int
    name_record_size: int
    corder_record_size: int
    name_of: Callable[[bytes, Sizes], bytes]          # the name inside a stored message
    name_record: Callable[[bytes, int, int], object]  # (heap ID, hash, creation order) -> record
    corder_record: Callable[[bytes, int], object]     # (heap ID, creation order) -> record


def _link_name(raw: bytes, sizes: Sizes) -> bytes:
    return link_msg.decode(Reader(raw, 0, sizes, "dense link")).name.encode("utf-8", "surrogateescape")


def _attribute_name(raw: bytes, sizes: Sizes) -> bytes:
    return attr_msg.decode(Reader(raw, 0, sizes, "dense attribute")).name.encode("utf-8", "surrogateescape")


LINKS = DenseKind("link", LINK_HEAP, bt.LINK_NAME, bt.LINK_CORDER, 4 + 7, 8 + 7, _link_name,
                  lambda hid, h, order: bt.LinkNameRecord(h, hid),
                  lambda hid, order: bt.LinkCorderRecord(order, hid))
ATTRIBUTES = DenseKind("attribute", ATTRIBUTE_HEAP, bt.ATTR_NAME, bt.ATTR_CORDER, 8 + 1 + 4 + 4, 8 + 1 + 4,
                       _attribute_name,
                       lambda hid, h, order: bt.AttrNameRecord(hid, 0, order, h),
                       lambda hid, order: bt.AttrCorderRecord(hid, 0, order))


def find(reader, kind: DenseKind, name_index: int, name: bytes, message: Callable[[object], bytes], what: str):
    """The record of `name` in the name index at `name_index`, or None, descending from the root
    only; `message` reads the message of a record (names are read only when hashes tie)."""
    want = name_hash(name)

    def compare(rec) -> int:   # hashes first; a name read only when they tie (a descent's hot loop)
        if rec.hash != want:
            return 1 if want > rec.hash else -1
        other = kind.name_of(message(rec), reader.sizes)
        return (name > other) - (name < other)

    label = f"{what}: dense {kind.label} name index"
    hdr = bt_reader.read_header(reader, name_index, label)
    return bt_reader.find(reader, hdr.address, compare, bt.record_decoder(hdr.type), label, header=hdr)


def lookup(reader, kind: DenseKind, heap_address: int, name_index: int, name: bytes, what: str) -> bytes | None:
    """The stored message named `name`, or None, read without a transaction."""
    heap = FractalHeap(reader, heap_address, f"{what}: dense {kind.label} heap")
    def message(rec) -> bytes:
        return heap.get(unshared(rec, kind, what).heap_id)

    rec = find(reader, kind, name_index, name, message, what)
    return None if rec is None else message(rec)


def is_shared(rec) -> bool:
    """Whether the record's heap ID is one of the shared-message table's (attribute records only)."""
    return bool(getattr(rec, "flags", 0) & MSG_SHARED)


def unshared(rec, kind: DenseKind, what: str):
    """`rec`, unless its heap object is a reference into the shared-message table (not read)."""
    if is_shared(rec):
        raise CannotWrite(f"{what}: a shared (SOHM) {kind.label} message in dense storage")
    return rec


class DenseStore:
    """One object's dense links or attributes; `close()` stages the heap's changes.

    An attribute shared through the file's shared message table has a record flagged shared whose
    heap ID is the table heap's: `shared_get` reads it there (without it, such a record is refused
    by name). Removing it leaves the table's heap alone; replacing it stores the new message here,
    unshared. Counting the table's uses down is the caller's (storage/sohm_table/writer.py)."""

    def __init__(self, txn: Transaction, kind: DenseKind, heap: int, name_index: int, corder_index: int | None,
                 what: str, shared_get: Callable[[bytes], bytes] | None = None):
        self.txn, self.kind, self.what, self.shared_get = txn, kind, what, shared_get
        self.heap_address, self.name_index, self.corder_index = heap, name_index, corder_index
        self._writer: heap_write.HeapWriter | None = None
        self._reader = FractalHeap(txn.reader, heap, f"{what}: dense {kind.label} heap")

    @classmethod
    def create(cls, txn: Transaction, kind: DenseKind, with_corder: bool, what: str) -> DenseStore:
        """Empty storage (H5G__dense_create, H5A__dense_create): a heap and its empty indexes."""
        txn.dense_edits = True
        heap = heap_write.create(txn, kind.heap)
        name = cls._new_tree(txn, kind.name_type, kind.name_record_size, what)
        order = cls._new_tree(txn, kind.corder_type, kind.corder_record_size, what) if with_corder else None
        return cls(txn, kind, heap, name, order, what)

    @staticmethod
    def _new_tree(txn: Transaction, btype: int, record_size: int, what: str) -> int:
        hdr = new_header(txn.sizes, btype, NODE_SIZE, record_size, SPLIT_PERCENT, MERGE_PERCENT)
        return BTreeV2Edit(txn, hdr, _no_key, bt.record_decoder(btype), bt.record_encoder(btype), what,
                           new=True).apply([]).address

    # -- reading ---------------------------------------------------------------------------------
    def _get(self, heap_id: bytes) -> bytes:
        return self._writer.get(heap_id) if self._writer is not None else self._reader.get(heap_id)

    def _message(self, rec) -> bytes:
        """The message a name record stands for, wherever it is stored."""
        if self.shared_get is not None and is_shared(rec):
            return self.shared_get(rec.heap_id)
        return self._get(unshared(rec, self.kind, self.what).heap_id)

    def _key(self, rec) -> NameKey:
        return NameKey(rec.hash, load=lambda: self.kind.name_of(self._message(rec), self.txn.sizes))

    def _header(self, address: int) -> bt.BTreeV2Header:
        return bt_reader.read_header(self.txn.reader, address, f"{self.what}: dense {self.kind.label} index")

    def count(self) -> int:
        return self._header(self.name_index).total_records

    def find(self, name: bytes):
        """The name index's record of `name`, or None."""
        return find(self.txn.reader, self.kind, self.name_index, name, self._message, self.what)

    def lookup(self, name: bytes) -> bytes | None:
        """The stored message named `name`, or None."""
        rec = self.find(name)
        return None if rec is None else self._message(rec)

    def items(self) -> list[tuple[object, bytes]]:
        """(name record, stored message) of every entry, in name-index order."""
        out = []
        for rec in bt_reader.iterate(self.txn.reader, self.name_index, what=f"{self.what}: dense {self.kind.label} "
                                     "name index", expect_type=self.kind.name_type):
            out.append((rec, self._message(rec)))
        return out

    # -- edits -------------------------------------------------------------------------------------
    def _heap(self) -> heap_write.HeapWriter:
        self.txn.dense_edits = True
        if self._writer is None:
            label = f"{self.what}: dense {self.kind.label} heap"
            self._writer = heap_write.HeapWriter(self.txn, self.heap_address, label)
        return self._writer

    def _edit(self, address: int, todo: list) -> None:
        self.txn.dense_edits = True
        hdr = self._header(address)
        key = self._key if hdr.type == self.kind.name_type else _corder
        BTreeV2Edit(self.txn, hdr, key, bt.record_decoder(hdr.type), bt.record_encoder(hdr.type),
                    f"{self.what}: dense {self.kind.label} index").apply(todo)

    def insert(self, name: bytes, message: bytes, corder: int = 0) -> None:
        """Store `message` under `name` (the caller checked that the name is free)."""
        self.insert_many([(name, message, corder)])

    def insert_many(self, items: list[tuple[bytes, bytes, int]]) -> None:
        """Store each (name, message, creation order), the names free and distinct."""
        self.edit_many(set(), items)

    def edit_many(self, removes: set[bytes], items: list[tuple[bytes, bytes, int]]) -> None:
        """Drop the entries named in `removes` (each there), then store each (name, message,
        creation order) of `items` (names free once those went, and distinct): each index edited
        once, the entries to drop found in one walk of the name index when they are many."""
        if len(removes) > FIND_EACH:
            found = [(rec, name) for rec, message in self.items()
                     if (name := self.kind.name_of(message, self.txn.sizes)) in removes]
        else:
            found = [(self.find(name), name) for name in removes]
        if len(found) != len(removes) or any(rec is None for rec, _ in found):
            raise FileNotFoundError(f"{self.what}: some of the {self.kind.label}s to remove are not there")
        names: dict[NameKey, object] = {}
        orders: dict[int, object] = {}
        freed = []
        for rec, name in found:
            names[NameKey(rec.hash, name)] = None   # its name known: the edit's comparisons need not read it
            if self.corder_index is not None:
                orders[self._order(rec)] = None
            if not is_shared(rec):
                freed.append(rec.heap_id)
        for name, message, corder in items:
            heap_id = self._heap().insert(message)
            h = name_hash(name)
            names[NameKey(h, name)] = self.kind.name_record(heap_id, h, corder)
            orders[corder] = self.kind.corder_record(heap_id, corder)
        self._edit(self.name_index, sorted(names.items(), key=lambda kv: kv[0]))
        if self.corder_index is not None:
            self._edit(self.corder_index, sorted(orders.items(), key=lambda kv: kv[0]))
        for heap_id in freed:   # after the index edits, which may read names from the heap
            self._heap().remove(heap_id)

    def remove(self, name: bytes) -> bytes:
        """Drop the entry `name` (FileNotFoundError when there is none); its stored message."""
        rec = self.find(name)
        if rec is None:
            raise FileNotFoundError(f"{self.what}: no {self.kind.label} named {name!r}")
        message = self._message(rec)
        self._edit(self.name_index, [(NameKey(rec.hash, name), None)])
        if self.corder_index is not None:
            self._edit(self.corder_index, [(self._order(rec), None)])
        if not is_shared(rec):
            self._heap().remove(rec.heap_id)
        return message

    def replace(self, name: bytes, message: bytes) -> None:
        """New bytes for the entry `name`: in place when the size is kept (as H5A__dense_write),
        else a new heap object, the indexes repointed to it, and only then the old object removed
        (the index edits read the old record's name from it)."""
        rec = self.find(name)
        if rec is None:
            raise FileNotFoundError(f"{self.what}: no {self.kind.label} named {name!r}")
        old = None
        if not (is_shared(rec) and self.shared_get is not None):   # else the table's copy stays the table's
            old = unshared(rec, self.kind, self.what).heap_id
            if len(self._message(rec)) == len(message):
                self._heap().replace(old, message)
                return
        heap_id = self._heap().insert(message)
        order = self._order(rec)
        self._edit(self.name_index, [(NameKey(rec.hash, name), self.kind.name_record(heap_id, rec.hash, order))])
        if self.corder_index is not None:
            self._edit(self.corder_index, [(order, self.kind.corder_record(heap_id, order))])
        if old is not None:
            self._heap().remove(old)

    def _order(self, rec) -> int:
        """The creation order of a name record: attribute records carry it; a link's is in its
        message, needed only by a creation-order index."""
        if hasattr(rec, "corder"):
            return rec.corder
        if self.corder_index is None:
            return 0
        link = link_msg.decode(Reader(self._get(rec.heap_id), 0, self.txn.sizes, self.what))
        if link.creation_order is None:
            raise FormatError(f"{self.what}: link {link.name!r} has no creation order but the group indexes it")
        return link.creation_order

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self._reader = FractalHeap(self.txn.reader, self.heap_address, f"{self.what}: dense {self.kind.label} heap")

    def delete(self) -> None:
        """Free the heap and both indexes (H5G__dense_delete, H5A__dense_delete: the messages'
        own storage is the caller's)."""
        self.txn.dense_edits = True
        self.close()
        delete_tree(self.txn, self.name_index, f"{self.what}: dense {self.kind.label} name index")
        if self.corder_index is not None:
            delete_tree(self.txn, self.corder_index, f"{self.what}: dense {self.kind.label} creation-order index")
        heap_write.delete(self.txn, self.heap_address)


def _no_key(rec) -> None:
    raise AssertionError("an empty tree has no keys")


def _corder(rec) -> int:
    return rec.corder
