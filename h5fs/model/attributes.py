"""Attributes of an object: compact (in the header) and dense (fractal heap + v2 B-tree).

An object's attribute table (`H5Object.attributes()`) is kept in the object's state in the
file's metadata cache, so invalidating the object forgets it. An Attribute is immutable: its
datatype, dataspace and value, decoded from its own message bytes on first use, are kept on it
(an Attribute from before an invalidation keeps serving its own message, never the new table);
the value's size is charged to the state holding the table."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ..errors import FormatError, H5fsError
from ..format import object_header as oh
from ..format.global_heap import HeapID
from ..format.messages import attribute as attr_msg
from ..format.messages import dataspace as DS
from ..format.messages.shared import IN_SOHM_HEAP, SharedRef
from ..format.object_header import RawMessage
from ..storage.fractal_heap.reader import FractalHeap
from ..storage.btree_v2 import reader as btree_v2
from . import messages as M
from .attribute_values import new_string_attribute
from .cache_size import approx_size
from .dtypes import npy_dtype
from .libver import libver_for_superblock
from .safety_net import guarded
from .varlen_views import decode_elements, needs_decoding

if TYPE_CHECKING:
    from .objects import H5Object

MAX_ATTRIBUTE_BYTES = 64 * 1024 * 1024
TABLE = "_attributes"   # the kind of an object's attribute table in its state (H5Object._attributes)
UNSTORED = HeapID(None, 0)   # the value of an attribute not yet stored: in no heap
DECODED = 900   # memory of an attribute in a table (its records, decoded datatype and dataspace),
                # beyond the bytes of its name, value, datatype and dataspace


class Attribute:
    __slots__ = ("owner", "msg", "name", "index", "_datatype", "_dataspace", "_value")

    def __init__(self, owner: H5Object, msg: attr_msg.AttributeMessage, index: int):
        self.owner = owner
        self.msg = msg
        self.name = msg.name
        self.index = index            # its place in the owner's table
        self._datatype = self._dataspace = self._value = None

    @property
    def what(self) -> str:
        return f"{self.owner.path}: attribute {self.name!r}"

    path = what  # what `guarded` names in its errors

    def _sub(self, mtype: int, raw: bytes, shared: bool):
        return self.owner.decode(RawMessage(mtype, 0x02 if shared else 0, raw))

    @property
    def datatype(self):
        if self._datatype is None:
            self._datatype = self._sub(M.DATATYPE, self.msg.datatype_raw, self.msg.datatype_shared)
        return self._datatype

    @property
    def dataspace(self) -> DS.Dataspace:
        if self._dataspace is None:
            self._dataspace = self._sub(M.DATASPACE, self.msg.dataspace_raw, self.msg.dataspace_shared)
        return self._dataspace

    @property
    def value_in_header(self) -> bool:
        """A small value decoded from the message alone (no shared type, no global heap)."""
        if self.msg.datatype_shared or self.msg.dataspace_shared or len(self.msg.data) > 4096:
            return False
        try:
            return not needs_decoding(self.datatype)
        except H5fsError:
            return False  # the decode will report it, from a worker thread

    @property
    def value(self) -> np.ndarray:
        """The value as stored (0-d for scalars); strings as str (vlen) or bytes ('S'); read-only:
        every caller shares it."""
        if self._value is None:
            self._value = value = self._decode_value()
            _charge(self, _value_nbytes(value))
        return self._value

    @guarded
    def _decode_value(self) -> np.ndarray:
        space, dt = self.dataspace, self.datatype
        count = space.count
        nbytes = count * dt.size
        if len(self.msg.data) < nbytes:   # first: the likelier diagnosis of a huge dataspace
            raise FormatError(f"{self.what}: its message holds {len(self.msg.data)} bytes of value, "
                              f"{count} elements of {dt.size} bytes need {nbytes}")
        if nbytes > MAX_ATTRIBUTE_BYTES:
            raise FormatError(f"{self.what}: a value of {nbytes} bytes (at most {MAX_ATTRIBUTE_BYTES} are read)")
        raw = self.msg.data[:nbytes]
        if needs_decoding(dt):
            values = decode_elements(self.owner.file, dt, raw, count, self.what)
        else:
            values = np.frombuffer(raw, npy_dtype(dt), count)
        # values are (count, *dims of an array datatype): those dims follow the dataspace's, as h5py reads them
        shape = (space.dims if space.kind == DS.SIMPLE else ()) + values.shape[1:]
        values = values[:0] if space.kind == DS.NULL else values.reshape(shape)
        values.flags.writeable = False
        return values


def _charge(attr: Attribute, nbytes: int) -> None:
    """Count `nbytes` in the budget of the state whose table holds `attr`, if one still does."""
    file, address = attr.owner.file, attr.owner.address
    st = file.peek_state(address)
    table = None if st is None else st.values.get(TABLE)
    if table is not None and attr.index < len(table) and table[attr.index] is attr:
        file.charge(address, st, nbytes)


def _value_nbytes(value: np.ndarray) -> int:
    if value.dtype.hasobject:
        return 150 + approx_size(value)
    return 400 + value.nbytes   # two array objects (the decoded one and its shape), a dtype


def read_attributes(obj: H5Object) -> tuple[Attribute, ...]:
    """All attributes of `obj`, in creation order when tracked, else by name."""
    fresh = obj.file.pending.fresh.get(obj.address)
    values: dict[str, np.ndarray] = {}
    if fresh is not None:   # a new group's, waiting to land (storage/pending_objects.py): none stored
        msgs, values = _fresh(obj, dict(fresh.attributes))   # a copy: a setfattr may add one meanwhile
        tracked = bool(obj.header.flags & oh.HDR_TRACK_ORDER)
    else:
        msgs = [_ordered(obj.decode(raw), raw.creation_order) for raw in obj.header.find(M.ATTRIBUTE)]
        info = obj.message(M.ATTRIBUTE_INFO)
        if info is not None and info.heap_address is not None:
            msgs += _dense(obj, info)
        tracked = info is not None and info.track_order and all(m.creation_order is not None for m in msgs)
    msgs.sort(key=(lambda m: m.creation_order) if tracked else (lambda m: m.name))
    owner = obj.detached()  # the table lives in obj's state: no reference back to it
    table = tuple(Attribute(owner, m, i) for i, m in enumerate(msgs))
    if values:
        for attr in table:
            attr._value = values[attr.name]
    return table


def _fresh(obj: H5Object, texts: dict[str, bytes]) -> tuple[list[attr_msg.AttributeMessage], dict[str, np.ndarray]]:
    """The attributes set on a new group (texts by name, in the order set), as they will land
    (h5py's variable-length strings), with their values: no heap holds those yet."""
    libver = libver_for_superblock(obj.file.superblock.version)
    msgs, values = [], {}
    for order, (name, text) in enumerate(texts.items()):
        msgs.append(replace(new_string_attribute(name, text, UNSTORED, obj.file.sizes, libver), creation_order=order))
        value = np.array(text.decode("utf-8", "surrogateescape"))   # as a stored one decodes
        value.flags.writeable = False
        values[name] = value
    return msgs, values


def _ordered(msg: attr_msg.AttributeMessage, creation_order: int | None) -> attr_msg.AttributeMessage:
    """`msg` with the creation order its object header gave it (most headers give none)."""
    return msg if creation_order is None else replace(msg, creation_order=creation_order)


def table_nbytes(table: tuple[Attribute, ...]) -> int:
    """Memory of an attribute table: the handles' slots, the messages, what decoding adds."""
    return sum(DECODED + len(a.name) + len(a.msg.data) + len(a.msg.datatype_raw) + len(a.msg.dataspace_raw)
               for a in table)


def _dense(obj: H5Object, info) -> list[attr_msg.AttributeMessage]:
    what = f"{obj.path}: dense attributes"
    heap = FractalHeap(obj.file.reader, info.heap_address, what)
    by_order = info.index_order and info.order_index_address is not None
    index = info.order_index_address if by_order else info.name_index_address
    out = []
    for rec in btree_v2.iterate(obj.file.reader, index, what=what):
        if rec.flags & 0x02:
            # shared attribute: the ID points into the file's shared-message heap, not this one
            body = obj.file.shared_message_body(SharedRef(IN_SOHM_HEAP, heap_id=rec.heap_id), M.ATTRIBUTE, what)
        else:
            body = RawMessage(M.ATTRIBUTE, 0, heap.get(rec.heap_id))
        out.append(replace(obj.decode(body), creation_order=rec.corder))
    return out
