"""Shared Object Header Message Table message (0x000F) and the SOHM table it points to (III.I)."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError
from .. import checksum
from ..codec import Reader

MAX_INDEXES = 32


def type_bit(mtype: int) -> int:
    """The bit of an index's message-type flags that tracks message type `mtype`.

    The spec's table (III.I) numbers the bits 0-4 for dataspace, datatype, fill value, filter
    pipeline and attribute; libhdf5 (H5O_SHMESG_*_FLAG) stores 1 << message type instead, and
    real files win.
    """
    return 1 << mtype


@dataclass(frozen=True)
class SohmIndex:
    index_type: int          # 0 list, 1 v2 B-tree
    message_types: int
    heap_address: int | None
    index_address: int | None


@dataclass(frozen=True)
class SohmTableMessage:
    table_address: int | None
    nindexes: int


def decode(c: Reader) -> SohmTableMessage:
    if c.u8() != 0:
        raise FormatError("shared message table message: unknown version")
    return SohmTableMessage(c.offset(), c.u8())


def read_table(reader, msg: SohmTableMessage) -> list[SohmIndex]:
    if msg.nindexes > MAX_INDEXES:
        raise FormatError(f"shared message table: {msg.nindexes} indexes")
    s = reader.sizes
    entry = 1 + 1 + 2 + 4 + 2 + 2 + 2 + 2 * s.offset
    size = 4 + msg.nindexes * entry + 4
    data = reader.read(msg.table_address, size, "shared message table")
    checksum.verify(data, "shared message table")
    c = Reader(data, 0, s, "shared message table")
    c.signature(b"SMTB")
    out = []
    for _ in range(msg.nindexes):
        c.u8()  # version
        itype = c.u8()
        flags = c.u16()
        c.u32()  # minimum message size
        c.u16(); c.u16(); c.u16()  # list cutoff, B-tree cutoff, number of messages
        index_addr = c.offset()
        out.append(SohmIndex(itype, flags, c.offset(), index_addr))
    return out
