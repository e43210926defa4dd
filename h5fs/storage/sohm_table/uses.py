"""`h5fs check`: the file's shared-message table counts exactly the uses its objects make.

Each record of an index (spec III.I) stands for one distinct message (sohm_table/writer.py says
how libhdf5 keeps them). The check counts, over every object header the walk reached:
- references to a heap record: header messages flagged shared, dense attribute records flagged
  shared, and the datatype and dataspace an attribute message holds as shared references (an
  attribute of its own, wherever stored, and each attribute the table's heap holds, once);
- messages kept in their header, flagged shareable: each is either the message a record "in an
  object header" names, or a use of the heap record holding the same bytes (libhdf5 copies the
  message into the heap at its second use and leaves the first header as it was).
A heap record must count what was found, a header record must name a header holding such a
message, and each index must count its records.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Callable

from ...format import btree_v2 as bt
from ...format import checksum
from ...format.codec import Reader
from ...format.messages import attribute_info as ainfo_msg
from ...format.messages import shared as shared_msg
from ...format.messages import sohm_table as T
from ...format.messages.types import ATTRIBUTE, ATTRIBUTE_INFO
from ...format.object_header import FLAG_SHAREABLE
from ..btree_v2 import reader as bt_reader
from ..fractal_heap.reader import FractalHeap
from .reader import attribute_refs, index_for, read_records

IN_HEAP, IN_HEADER = 0, 1

Problem = Callable[[str, str, str], None]   # (path, structure, what is wrong)


class SharedUses:
    """What the walk's object headers use of the table's `indexes`. Each index has its own heap,
    so a heap ID is known with the index its message type belongs to."""

    def __init__(self, f, indexes: list[T.SohmIndex]):
        self.f, self.sizes, self.indexes = f, f.sizes, indexes
        self.heap_refs: Counter[tuple[int, bytes]] = Counter()           # (index, heap ID) -> references
        self.attributes: set[tuple[int, bytes]] = set()                  # those referenced as attributes
        self.kept: dict[tuple[int, int], list[bytes]] = defaultdict(list)  # (type, hash) -> bodies kept in headers
        self.kept_at: set[tuple[int, int, int]] = set()                  # (header, type, hash)

    def _ref(self, mtype: int, heap_id: bytes) -> tuple[int, bytes]:
        """Count a reference to the heap record of a message of type `mtype`."""
        key = (index_for(self.indexes, mtype), heap_id)
        self.heap_refs[key] += 1
        if mtype == ATTRIBUTE:
            self.attributes.add(key)
        return key

    def header(self, address: int, path: str) -> None:
        """Count the uses the object at `address` makes (errors are the caller's to report)."""
        header = self.f.header(address, path)
        for raw in header.messages:
            if raw.shared:
                ref = shared_msg.decode(Reader(raw.data, 0, self.sizes, f"{path}: shared message"))
                if ref.kind == shared_msg.IN_SOHM_HEAP:
                    self._ref(raw.type, ref.heap_id)
                continue
            if raw.flags & FLAG_SHAREABLE:
                body = bytes(raw.data)
                key = (raw.type, checksum.lookup3(body, raw.type))
                self.kept[key].append(body)
                self.kept_at.add((address, *key))
            if raw.type == ATTRIBUTE:
                self.attribute(bytes(raw.data), path)
            elif raw.type == ATTRIBUTE_INFO:
                info = ainfo_msg.decode(Reader(raw.data, 0, self.sizes, f"{path}: attribute info"))
                if info.heap_address is not None:
                    self._dense(info, path)

    def attribute(self, body: bytes, path: str) -> None:
        for mtype, heap_id in attribute_refs(body, self.sizes, path):
            self._ref(mtype, heap_id)

    def _dense(self, info, path: str) -> None:
        heap = None
        for rec in bt_reader.iterate(self.f.reader, info.name_index_address, bt.decode_attr_name,
                                     f"{path}: dense attribute name index", expect_type=bt.ATTR_NAME):
            if rec.flags & 0x02:   # shared: the record holds the table heap's ID
                self._ref(ATTRIBUTE, rec.heap_id)
                continue
            heap = heap or FractalHeap(self.f.reader, info.heap_address, f"{path}: dense attribute heap")
            self.attribute(heap.get(rec.heap_id), path)

    def verify(self, problem: Problem) -> None:
        """Compare with the indexes."""
        tables = []
        for number, index in enumerate(self.indexes):
            label = f"shared message index {number}"
            records = read_records(self.f.reader, index, label)
            if len(records) != index.num_messages:
                problem("shared message table", label, f"counts {index.num_messages} messages, holds {len(records)}")
            heap = None if index.heap_address is None else \
                FractalHeap(self.f.reader, index.heap_address, f"shared message heap {number}")
            tables.append((number, label, records, heap))
        for number, label, records, heap in tables:   # attributes the heap holds use other records
            for rec in records:   # (a heap record does not say its type: the references do)
                if rec.location == IN_HEAP and (number, rec.heap_id) in self.attributes and heap is not None:
                    self.attribute(heap.get(rec.heap_id), label)
        for number, label, records, heap in tables:
            for rec in records:
                if rec.location == IN_HEADER:
                    if (rec.oh_address, rec.msg_type, rec.hash) not in self.kept_at:
                        problem("shared message table", label,
                                f"a record names message type {rec.msg_type:#x} in the header at {rec.oh_address}, "
                                "which holds no such shareable message")
                    continue
                body = heap.get(rec.heap_id) if heap is not None else b""
                copies = sum(b == body for (_, h), bodies in self.kept.items() if h == rec.hash for b in bodies)
                found = self.heap_refs[number, rec.heap_id] + copies
                if found != rec.refcount:
                    problem("shared message table", label,
                            f"the record of heap ID {rec.heap_id.hex()} counts {rec.refcount} uses, {found} found")
