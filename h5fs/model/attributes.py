"""Attributes of an object: compact (in the header) and dense (fractal heap + v2 B-tree)."""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from ..errors import FormatError, H5fsError
from ..format.messages import attribute as attr_msg
from ..format.messages import dataspace as S
from ..format.messages.shared import IN_SOHM_HEAP, SharedRef
from ..format.object_header import RawMessage
from . import messages as M
from .objects import guarded

if TYPE_CHECKING:
    from .objects import H5Object

MAX_ATTRIBUTE_BYTES = 64 * 1024 * 1024


class Attribute:
    def __init__(self, owner: H5Object, msg: attr_msg.AttributeMessage):
        self.owner = owner
        self.msg = msg
        self.name = msg.name

    @property
    def what(self) -> str:
        return f"{self.owner.path}: attribute {self.name!r}"

    path = what  # what `guarded` names in its errors

    def _sub(self, mtype: int, raw: bytes, shared: bool):
        return self.owner.decode(RawMessage(mtype, 0x02 if shared else 0, raw))

    @cached_property
    def datatype(self):
        return self._sub(M.DATATYPE, self.msg.datatype_raw, self.msg.datatype_shared)

    @cached_property
    def dataspace(self) -> S.Dataspace:
        return self._sub(M.DATASPACE, self.msg.dataspace_raw, self.msg.dataspace_shared)

    @cached_property
    def value_in_header(self) -> bool:
        """A small value decoded from the message alone (no shared type, no global heap)."""
        from .varlen_views import needs_decoding
        if self.msg.datatype_shared or self.msg.dataspace_shared or len(self.msg.data) > 4096:
            return False
        try:
            return not needs_decoding(self.datatype)
        except H5fsError:
            return False  # the decode will report it, from a worker thread

    @cached_property
    @guarded
    def value(self) -> np.ndarray:
        """The value as stored (0-d for scalars); strings as str (vlen) or bytes ('S')."""
        from .dtypes import npy_dtype
        from .varlen_views import decode_elements, needs_decoding
        space, dt = self.dataspace, self.datatype
        count = space.count
        nbytes = count * dt.size
        if nbytes > MAX_ATTRIBUTE_BYTES:
            raise FormatError(f"{self.what}: {nbytes} bytes of data")
        if len(self.msg.data) < nbytes:
            raise FormatError(f"{self.what}: holds {len(self.msg.data)} bytes, needs {nbytes}")
        raw = self.msg.data[:nbytes]
        if needs_decoding(dt):
            values = decode_elements(self.owner.file, dt, raw, count, self.what)
        else:
            values = np.frombuffer(raw, npy_dtype(dt), count)
        if space.kind == S.NULL:
            return values[:0]
        return values.reshape(space.dims if space.kind == S.SIMPLE else ())


def read_attributes(obj: H5Object) -> list[Attribute]:
    """All attributes of `obj`, in creation order when tracked, else by name."""
    msgs = [replace(obj.decode(raw), creation_order=raw.creation_order) for raw in obj.header.find(M.ATTRIBUTE)]
    info = obj.message(M.ATTRIBUTE_INFO)
    if info is not None and info.heap_address is not None:
        msgs += _dense(obj, info)
    tracked = info is not None and info.track_order and all(m.creation_order is not None for m in msgs)
    msgs.sort(key=(lambda m: m.creation_order) if tracked else (lambda m: m.name))
    return [Attribute(obj, m) for m in msgs]


def _dense(obj: H5Object, info) -> list[attr_msg.AttributeMessage]:
    from ..format import btree_v2
    from ..format.fractal_heap import FractalHeap
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
