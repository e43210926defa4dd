"""Reads the shared object header message table (SMTB) a 0x000F message points to, the records
of its indexes, and what an attribute message shares through it; `extents`: the blocks the table
and its indexes occupy."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import FormatError
from ...format import btree_v2 as bt
from ...format.codec import Reader, Sizes
from ...format.messages import attribute as attr_msg
from ...format.messages import shared as shared_msg
from ...format.messages.sohm_table import (LIST, MAX_INDEXES, SohmIndex, SohmTableMessage, decode_list, decode_table,
                                           list_size, table_size, type_bit)
from ...format.messages.types import DATASPACE, DATATYPE
from ..btree_v2 import reader as bt_reader
from ..fractal_heap import reader as fractal_heap

if TYPE_CHECKING:
    from ..extent_sink import ExtentSink


def read_table(reader, msg: SohmTableMessage) -> list[SohmIndex]:
    """The indexes of the table `msg` points to (reader: a BlockReader)."""
    if msg.nindexes > MAX_INDEXES:
        raise FormatError(f"shared message table: {msg.nindexes} indexes")
    data = reader.read(msg.table_address, table_size(reader.sizes, msg.nindexes), "shared message table")
    return decode_table(Reader(data, 0, reader.sizes, "shared message table"), msg.nindexes)


def extents(out: ExtentSink, reader, path: str, msg: SohmTableMessage) -> list[SohmIndex] | None:
    """The table's and each index's extents (a list with room for its cutoff, or a v2 B-tree,
    and the index's fractal heap); the table's indexes, None when it cannot be read."""
    s, what = reader.sizes, "shared message table"
    if msg.nindexes > MAX_INDEXES or not out.add(msg.table_address, table_size(s, msg.nindexes), path, what):
        return None
    indexes = None
    with out.guard(path, what):
        indexes = read_table(reader, msg)
    for index in indexes or ():
        if index.index_address is None and index.num_messages == 0:
            continue   # emptied: libhdf5 deletes an index (and its heap) with its last message
        if index.index_type == LIST:
            what = "shared message list"
            if out.add(index.index_address, list_size(s, index.list_cutoff), path, what):
                with out.guard(path, what):
                    if index.num_messages > index.list_cutoff:
                        raise FormatError(f"{index.num_messages} messages in a list of {index.list_cutoff}")
                    decode_list(reader.cursor(index.index_address, list_size(s, index.num_messages), what),
                                index.num_messages)
        else:
            bt_reader.extents(out, reader, path, "shared message index", index.index_address)
        if index.heap_address is not None:
            fractal_heap.extents(out, reader, path, "shared message heap", index.heap_address)
    return indexes


def read_records(reader, index: SohmIndex, label: str) -> list[bt.SharedMessageRecord]:
    """The records of one index: its list, or every record of its v2 B-tree (none for an index
    libhdf5 emptied and deleted)."""
    if index.index_address is None:
        return []
    if index.index_type == LIST:
        if index.num_messages > index.list_cutoff:
            raise FormatError(f"{label}: {index.num_messages} messages in a list of {index.list_cutoff}")
        data = reader.read(index.index_address, list_size(reader.sizes, index.num_messages), label)
        return decode_list(Reader(data, 0, reader.sizes, label), index.num_messages)
    return list(bt_reader.iterate(reader, index.index_address, bt.decode_sohm, label, expect_type=bt.SOHM))


def index_for(indexes: list[SohmIndex], mtype: int) -> int | None:
    """The number of the index that keeps messages of type `mtype` (None: the type is not shared)."""
    return next((n for n, index in enumerate(indexes) if index.message_types & type_bit(mtype)), None)


def attribute_refs(body: bytes, sizes: Sizes, what: str) -> list[tuple[int, bytes]]:
    """(message type, heap ID) of the datatype and dataspace an attribute message holds as
    references into the table's heaps (a committed datatype is not one)."""
    msg = attr_msg.decode(Reader(body, 0, sizes, f"{what}: attribute message"))
    out = []
    for is_shared, raw, mtype in ((msg.datatype_shared, msg.datatype_raw, DATATYPE),
                                  (msg.dataspace_shared, msg.dataspace_raw, DATASPACE)):
        if is_shared:
            ref = shared_msg.decode(Reader(raw, 0, sizes, f"{what}: attribute's shared message"))
            if ref.kind == shared_msg.IN_SOHM_HEAP:
                out.append((mtype, ref.heap_id))
    return out
