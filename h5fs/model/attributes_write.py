"""Attributes set and removed inside a transaction, as libhdf5 stores them (H5Oattribute.c):
attribute messages in the object's header (compact), or, in version 2 headers past the
attribute phase change (8 by default), a fractal heap indexed by v2 B-trees (dense), named by
the attribute info message that a version 2 header gets with its first attribute.

`setfattr -n user.A -v V` replaces the value of an attribute A, parsed as the mount shows it
and keeping its datatype and shape (model/attribute_values.py), or creates A as h5py writes a
Python str: a variable-length UTF-8 string. Values in the global heap go with the value they
belonged to.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import CannotWrite, NotFound
from ..format import object_header as oh
from ..format.codec import Reader, Writer
from ..format.messages import attribute as attr_msg
from ..format.messages import attribute_info as ainfo_msg
from ..format.messages import dataspace as S
from ..format.messages import datatype as T
from ..storage.header_writer import HeaderEdit, NoRoom
from ..storage.readers.object_header import read as read_header
from ..storage.transaction import Transaction
from .attribute_values import create_string_attribute, release_value, store_value
from .libver import libver_for_superblock

ATTRIBUTE, ATTRIBUTE_INFO = 0x0C, 0x15
MAX_COMPACT = 8   # libhdf5's attribute phase change when the header stores none


class _Attributes:
    """The attributes of one object, edited in one transaction."""

    def __init__(self, txn: Transaction, f, obj):
        self.txn, self.f, self.what = txn, f, obj.path
        self.edit = HeaderEdit(txn, read_header(txn.reader, obj.address, obj.path))

    def _decode(self, raw) -> attr_msg.AttributeMessage:
        return attr_msg.decode(Reader(raw.data, 0, self.txn.sizes, f"{self.what}: attribute message"))

    def info(self):
        raw = self.edit.header.first(ATTRIBUTE_INFO)
        return None if raw is None else ainfo_msg.decode(Reader(raw.data, 0, self.txn.sizes, f"{self.what}: attribute info"))

    def compact(self, name: str):
        for raw in self.edit.header.find(ATTRIBUTE):
            msg = self._decode(raw)
            if msg.name == name:
                return raw, msg
        return None

    def _dense(self) -> bool:
        info = self.info()
        return info is not None and info.heap_address is not None

    def set(self, name: str, text: bytes) -> None:
        if self._dense():
            raise CannotWrite(f"{self.what}: attributes in dense storage cannot be edited yet")
        found = self.compact(name)
        if found is not None:
            raw, msg = found
            if msg.datatype_shared:
                raise CannotWrite(f"{self.what}: attribute {name!r} has a shared (committed) datatype")
            dt = T.decode(Reader(msg.datatype_raw, 0, self.txn.sizes, f"{self.what}: attribute {name!r}"))
            space = S.decode(Reader(msg.dataspace_raw, 0, self.txn.sizes, f"{self.what}: attribute {name!r}"))
            data = store_value(self.txn, text, dt, space, old=msg.data[:space.count * dt.size])
            self.edit.replace(raw, _encode(replace(msg, data=data), self.txn.sizes))
            return
        libver = libver_for_superblock(self.f.superblock.version)
        msg = create_string_attribute(self.txn, name, text, libver)
        order = 0
        if self.edit.header.version > 1:
            info = self.info()
            if info is None:   # a version 2 header's first attribute brings the attribute info
                track = bool(self.edit.header.flags & oh.HDR_TRACK_ORDER)
                info = ainfo_msg.AttributeInfo(track, bool(self.edit.header.flags & oh.HDR_INDEX_ORDER),
                                               0 if track else None, None, None, None)
                self._set_info(info, add=True)
            if info.track_order:
                order = info.max_creation_index or 0
                self._set_info(replace(info, max_creation_index=order + 1))
            if len(self.edit.header.find(ATTRIBUTE)) + 1 > self._max_compact():
                raise CannotWrite(f"{self.what}: more attributes than compact storage holds "
                                  "(dense attribute storage cannot be written yet)")
        try:
            self.edit.add(ATTRIBUTE, _encode(msg, self.txn.sizes), creation_order=order)
        except NoRoom as exc:
            raise CannotWrite(f"{self.what}: attribute {name!r} does not fit in the object header: {exc}") from exc

    def _max_compact(self) -> int:
        h = self.edit.header
        return h.attr_max_compact if h.attr_max_compact is not None else MAX_COMPACT

    def _set_info(self, info, add: bool = False) -> None:
        w = Writer(self.txn.sizes)
        ainfo_msg.encode(w, info)
        if add:
            self.edit.add(ATTRIBUTE_INFO, w.getvalue())
        else:
            self.edit.set(ATTRIBUTE_INFO, w.getvalue())

    def remove(self, name: str) -> None:
        if self._dense():
            raise CannotWrite(f"{self.what}: attributes in dense storage cannot be edited yet")
        found = self.compact(name)
        if found is None:
            raise NotFound(f"{self.what}: no attribute {name!r}")
        raw, msg = found
        if not msg.datatype_shared:
            dt = T.decode(Reader(msg.datatype_raw, 0, self.txn.sizes, f"{self.what}: attribute {name!r}"))
            space = S.decode(Reader(msg.dataspace_raw, 0, self.txn.sizes, f"{self.what}: attribute {name!r}"))
            release_value(self.txn, msg.data[:space.count * dt.size], dt, space)
        self.edit.remove(raw)


def _encode(msg: attr_msg.AttributeMessage, sizes) -> bytes:
    w = Writer(sizes)
    attr_msg.encode(w, msg)
    return w.getvalue()


def set_attribute(txn: Transaction, f, obj, name: str, text: bytes) -> None:
    _Attributes(txn, f, obj).set(name, text)


def remove_attribute(txn: Transaction, f, obj, name: str) -> None:
    _Attributes(txn, f, obj).remove(name)
