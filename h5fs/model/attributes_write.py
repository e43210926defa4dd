"""Attributes set and removed inside a transaction, as libhdf5 stores them (H5Oattribute.c):
attribute messages in the object's header (compact), or, in version 2 headers past the
attribute phase change (8 by default), a fractal heap indexed by v2 B-trees (dense), named by
the attribute info message that a version 2 header gets with its first attribute.

`setfattr -n user.A -v V` replaces the value of an attribute A, parsed as the mount shows it
and keeping its datatype and shape, a fixed-length string's datatype resized to the new text as
netCDF-4, PyTables and h5py do (model/attribute_values.py), or creates A as h5py writes a
Python str: a variable-length UTF-8 string (in netCDF-4 and PyTables files, their fixed-length
one). `h5fs attr` (`create`) makes A anew with a number, bool or complex dtype and the value's
shape. Values in the global heap go with the value they belonged to. Edits the library that
wrote the file refuses are refused (model/library_conventions.py).
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import CannotWrite, NotFound
from ..format import object_header as oh
from ..format.codec import Reader, Writer
from ..format.messages import attribute as attr_msg
from ..format.messages import attribute_info as ainfo_msg
from ..format.messages import dataspace as DS
from ..format.messages import datatype as T
from ..format.messages import shared as shared_msg
from ..format.messages.types import ATTRIBUTE, ATTRIBUTE_INFO, DATASPACE, DATATYPE
from ..storage.dense_storage import ATTRIBUTES, DenseStore, is_shared
from ..storage.object_header.edit import HeaderEdit
from ..storage.object_header.placement import NoRoom
from ..storage.object_header.reader import read as read_header
from ..storage.sohm_table.writer import SharedMessages
from ..storage.transaction import Transaction
from .attribute_values import (create_string_attribute, new_attribute, new_fixed_string_attribute,
                               release_value, revalued)
from .libver import libver_for_superblock
from .library_conventions import check_attribute_edit, text_form

MAX_COMPACT, MIN_DENSE = 8, 6   # libhdf5's attribute phase change when the header stores none
MAX_MESSAGE = 65536             # H5O_MESG_MAX_SIZE: larger attributes live in dense storage only
NO_ORDER = 0xFFFF               # H5O_MAX_CRT_ORDER_IDX: the creation order of an untracked attribute


class Attributes:
    """The attributes of one object, edited in one transaction. An attribute message in the
    header may be a reference into the file's shared message table (or tracked there): replacing
    or removing it counts that use down (`shared`), and its value, the shared message's, is left
    alone; a replaced one is stored unshared."""

    def __init__(self, txn: Transaction, f, obj, shared: SharedMessages):
        self.txn, self.f, self.what, self.shared = txn, f, obj.path, shared
        self.address = obj.address
        self.edit = HeaderEdit(txn, read_header(txn.reader, obj.address, obj.path))

    def _decode(self, data: bytes) -> attr_msg.AttributeMessage:
        """An attribute message's bytes (in the header or in dense storage), decoded."""
        return attr_msg.decode(Reader(data, 0, self.txn.sizes, f"{self.what}: attribute message"))

    def info(self):
        raw = self.edit.header.first(ATTRIBUTE_INFO)
        return None if raw is None else ainfo_msg.decode(Reader(raw.data, 0, self.txn.sizes, f"{self.what}: attribute info"))

    def compact(self, name: str):
        for raw in self.edit.header.find(ATTRIBUTE):
            msg = self._decode(self._body(raw))
            if msg.name == name:
                return raw, msg
        return None

    def _body(self, raw) -> bytes:
        """The attribute message `raw` stands for (read from the shared message heap if shared)."""
        if not raw.shared:
            return bytes(raw.data)
        ref = shared_msg.decode(Reader(raw.data, 0, self.txn.sizes, f"{self.what}: shared attribute"))
        return bytes(self.f.shared_message_body(ref, ATTRIBUTE, f"{self.what}: shared attribute").data)

    def _let_go_message(self, raw) -> bool:
        """A compact attribute message goes: count down what it used of the shared message
        table; whether the table tracks it (its value's global heap objects may then be another
        copy's too: they are kept)."""
        self.shared.release(raw, self.address, self.what)
        return bool(raw.flags & (oh.FLAG_SHARED | oh.FLAG_SHAREABLE))

    def _types(self, msg: attr_msg.AttributeMessage) -> tuple[T.Datatype, DS.Dataspace]:
        """The attribute's datatype and dataspace, read from the shared message table when it
        holds them there (a committed datatype is refused)."""
        parts = []
        for shared, raw, mtype, decode in ((msg.datatype_shared, msg.datatype_raw, DATATYPE, T.decode),
                                           (msg.dataspace_shared, msg.dataspace_raw, DATASPACE, DS.decode)):
            what = f"{self.what}: attribute {msg.name!r}"
            if shared:
                ref = shared_msg.decode(Reader(raw, 0, self.txn.sizes, what))
                if ref.kind != shared_msg.IN_SOHM_HEAP:
                    raise CannotWrite(f"{what} has a shared (committed) datatype")
                raw = self.f.shared_message_body(ref, mtype, what).data
            parts.append(decode(Reader(raw, 0, self.txn.sizes, what)))
        return parts[0], parts[1]

    def _store(self, info) -> DenseStore | None:
        if info is None or info.heap_address is None:
            return None
        return DenseStore(self.txn, ATTRIBUTES, info.heap_address, info.name_index_address,
                          info.order_index_address if info.index_order else None, self.what, self._table_message)

    def _table_message(self, heap_id: bytes) -> bytes:
        """An attribute the shared message table's heap holds (a dense record flagged shared)."""
        ref = shared_msg.SharedRef(shared_msg.IN_SOHM_HEAP, heap_id=heap_id)
        return bytes(self.f.shared_message_body(ref, ATTRIBUTE, f"{self.what}: shared attribute").data)

    def _let_go(self, rec, body: bytes) -> bool:
        """A dense record and the attribute `body` it stands for go: a use of the table fewer if
        the record is shared there (True), else what the attribute holds of the table."""
        if is_shared(rec):
            self.shared.release_heap_id(ATTRIBUTE, rec.heap_id, self.what)
            return True
        self.shared.release_attribute(body, self.what)
        return False

    def _new_value(self, msg: attr_msg.AttributeMessage, text: bytes, keep_old: bool = False) -> bytes:
        """The attribute message with `text` as its value (datatype and shape kept, a fixed-length
        string's resized to the text; shared ones still shared); the old value's global heap
        objects removed unless `keep_old`. A message of a new size is moved by the header or
        dense storage editor."""
        dt, space = self._types(msg)
        form = text_form(self.f) if not text and isinstance(dt, T.String) else None
        empty_null = form is not None and form.empty_null
        return _encode(revalued(self.txn, msg, text, dt, space, keep_old, empty_null), self.txn.sizes)

    def get(self, name: str) -> tuple[attr_msg.AttributeMessage, T.Datatype, DS.Dataspace, bool] | None:
        """The attribute `name` (compact or dense): its message, datatype, dataspace, and whether
        the shared message table tracks it (its value's global heap objects are then the shared
        copy's too); None when the object has none of that name."""
        store = self._store(self.info())
        if store is not None:
            key = name.encode("utf-8", "surrogateescape")
            rec = store.find(key)
            if rec is None:
                return None
            msg, shared = self._decode(store.lookup(key)), is_shared(rec)
        else:
            found = self.compact(name)
            if found is None:
                return None
            msg, shared = found[1], bool(found[0].flags & (oh.FLAG_SHARED | oh.FLAG_SHAREABLE))
        return (msg, *self._types(msg), shared)

    def put(self, name: str, msg: attr_msg.AttributeMessage) -> None:
        """Replace the existing attribute `name` by `msg` (stored unshared; the old value's
        global heap objects are the caller's to release)."""
        if not self._replace(name, lambda old, tracked: _encode(msg, self.txn.sizes)):
            raise NotFound(f"{self.what}: no attribute {name!r}")

    def _replace(self, name: str, new_body) -> bool:
        """Replace the attribute `name` (compact or dense) by the message `new_body(old message,
        whether the shared message table tracks it)` encodes, stored unshared; False when there
        is none. The new message's uses of the table are counted before the old one's go: the
        old one's last use of a shared datatype or dataspace would take it out of the table."""
        key = name.encode("utf-8", "surrogateescape")
        store = self._store(self.info())
        if store is not None:
            rec = store.find(key)
            if rec is None:
                return False
            raw = store.lookup(key)
            body = new_body(self._decode(raw), is_shared(rec))
            self.shared.acquire_attribute(body, self.what)
            self._let_go(rec, raw)
            store.replace(key, body)
            store.close()
            return True
        found = self.compact(name)
        if found is None:
            return False
        raw, msg = found
        body = new_body(msg, bool(raw.flags & (oh.FLAG_SHARED | oh.FLAG_SHAREABLE)))
        self.shared.acquire_attribute(body, self.what)
        self._let_go_message(raw)
        self.edit.replace(raw, body, flags=raw.flags & ~(oh.FLAG_SHARED | oh.FLAG_SHAREABLE))
        return True

    def set(self, name: str, text: bytes) -> None:
        if self._replace(name, lambda msg, tracked: self._new_value(msg, text, keep_old=tracked)):
            return
        info = self.info()
        store = self._store(info)
        libver = libver_for_superblock(self.f.superblock.version)
        form = text_form(self.f)
        if form is None:
            msg = create_string_attribute(self.txn, name, text, libver)
        else:
            msg = new_fixed_string_attribute(name, text, form.charset, self.txn.sizes, libver, form.empty_null)
        self._add(name, msg, info, store)

    def create(self, name: str, msg: attr_msg.AttributeMessage) -> None:
        """Attribute `name` made `msg` (a new datatype and shape: any attribute of that name goes
        first, its heap objects with it)."""
        try:
            self.remove(name)
        except NotFound:
            pass
        info = self.info()
        self._add(name, msg, info, self._store(info))

    def _add(self, name: str, msg: attr_msg.AttributeMessage, info, store: DenseStore | None) -> None:
        """A new attribute message: in the header, or in dense storage (which the header moves
        to past its phase change, or for a message too large for a header)."""
        key = name.encode("utf-8", "surrogateescape")
        raw = _encode(msg, self.txn.sizes)
        order, first = 0, False
        if self.edit.header.version > 1:
            if info is None:   # a version 2 header's first attribute brings the attribute info
                track = bool(self.edit.header.flags & oh.HDR_TRACK_ORDER)
                info = ainfo_msg.AttributeInfo(track, bool(self.edit.header.flags & oh.HDR_INDEX_ORDER),
                                               0 if track else None, None, None, None)
                first = True   # added with the attribute, the header encoded once
            new_info = info
            if info.track_order:
                order = info.max_creation_index or 0
                new_info = replace(info, max_creation_index=order + 1)
            else:
                order = NO_ORDER
            if store is None and (len(self.edit.header.find(ATTRIBUTE)) >= self._phase()[0]
                                  or len(raw) >= MAX_MESSAGE):
                if first:
                    self._set_info(info, add=True)
                    first = False
                store = self._to_dense(info)
                new_info = replace(new_info, heap_address=store.heap_address, name_index_address=store.name_index,
                                   order_index_address=store.corder_index)
            if new_info != info and not first:
                self._set_info(new_info)
        if store is not None:
            store.insert(key, raw, order)
            store.close()
            return
        added = [(ATTRIBUTE, raw, 0, order if order != NO_ORDER else 0)]
        if first:
            w = Writer(self.txn.sizes)
            ainfo_msg.encode(w, new_info)
            added.insert(0, (ATTRIBUTE_INFO, w.getvalue(), 0, 0))
        try:
            self.edit.add_all(added)
        except NoRoom as exc:
            raise CannotWrite(f"{self.what}: attribute {name!r} does not fit in the object header: {exc}") from exc

    def _phase(self) -> tuple[int, int]:
        h = self.edit.header
        if h.attr_max_compact is None:
            return MAX_COMPACT, MIN_DENSE
        return h.attr_max_compact, h.attr_min_dense

    def _to_dense(self, info) -> DenseStore:
        """H5O__attr_create going dense: new storage takes the attribute messages, in header order,
        with their creation order."""
        store = DenseStore.create(self.txn, ATTRIBUTES, info.index_order, self.what)
        for raw in self.edit.header.find(ATTRIBUTE):   # stored unshared: shared ones counted down
            body = self._body(raw)
            self.shared.release(raw, self.address, self.what)
            self.shared.acquire_attribute(body, self.what)   # what it holds, held by its new copy
            order = raw.creation_order if info.track_order and raw.creation_order is not None else NO_ORDER
            store.insert(self._decode(body).name.encode("utf-8", "surrogateescape"), body, order)
        store.close()
        while raws := self.edit.header.find(ATTRIBUTE):   # each removal can move the others
            self.edit.remove(raws[0])
        return store

    def _set_info(self, info, add: bool = False) -> None:
        w = Writer(self.txn.sizes)
        ainfo_msg.encode(w, info)
        if add:
            self.edit.add(ATTRIBUTE_INFO, w.getvalue())
        else:
            self.edit.set(ATTRIBUTE_INFO, w.getvalue())

    def remove(self, name: str) -> None:
        info = self.info()
        store = self._store(info)
        if store is not None:
            key = name.encode("utf-8", "surrogateescape")
            rec = store.find(key)
            if rec is None:
                raise NotFound(f"{self.what}: no attribute {name!r}")
            raw = store.remove(key)
            store.close()
            if not self._let_go(rec, raw):
                self._release(self._decode(raw))
            left = store.count()
            if left < self._phase()[1] and self._to_compact(store):
                info = replace(info, heap_address=None, name_index_address=None, order_index_address=None)
                if left:
                    self._set_info(info)
        else:
            found = self.compact(name)
            if found is None:
                raise NotFound(f"{self.what}: no attribute {name!r}")
            raw, msg = found
            if not self._let_go_message(raw):
                self._release(msg)
            self.edit.remove(raw)
            left = len(self.edit.header.find(ATTRIBUTE))
        if info is not None and left == 0:   # H5O__attr_remove_update: the info goes with the last one
            self.edit.remove(self.edit.header.first(ATTRIBUTE_INFO))

    def _release(self, msg: attr_msg.AttributeMessage) -> None:
        """Free what the value holds in the global heap."""
        try:
            dt, space = self._types(msg)
        except CannotWrite:   # a committed datatype's: its values are left, as they always were
            return
        release_value(self.txn, msg.data[:space.count * dt.size], dt, space)

    def _to_compact(self, store: DenseStore) -> bool:
        """H5O__attr_remove_update going compact: the attributes become messages again, in name
        index order, unless one is too large for a message; whether they did."""
        entries = store.items()
        if any(len(raw) >= MAX_MESSAGE for _, raw in entries):
            return False
        for rec, raw in entries:
            order = rec.corder if rec.corder != NO_ORDER else 0
            if is_shared(rec):   # a message of its own now: the table's use goes
                self._let_go(rec, raw)
                self.shared.acquire_attribute(raw, self.what)
            self.edit.add(ATTRIBUTE, raw, creation_order=order)
        store.delete()
        return True


def _encode(msg: attr_msg.AttributeMessage, sizes) -> bytes:
    w = Writer(sizes)
    attr_msg.encode(w, msg)
    return w.getvalue()


def create_attribute(txn: Transaction, f, obj, name: str, dtype, text: bytes, shared: SharedMessages) -> None:
    """Attribute `name` of `obj` made anew with `dtype` and the value (and shape) `text` says."""
    check_attribute_edit(f, obj, name)
    libver = libver_for_superblock(f.superblock.version)
    Attributes(txn, f, obj, shared).create(name, new_attribute(name, dtype, text, txn.sizes, libver))


def set_attribute(txn: Transaction, f, obj, name: str, text: bytes, shared: SharedMessages) -> None:
    check_attribute_edit(f, obj, name)
    Attributes(txn, f, obj, shared).set(name, text)


def remove_attribute(txn: Transaction, f, obj, name: str, shared: SharedMessages) -> None:
    check_attribute_edit(f, obj, name, removing=True)
    Attributes(txn, f, obj, shared).remove(name)
