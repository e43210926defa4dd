"""Reads the shared object header message table (SMTB) a 0x000F message points to."""

from __future__ import annotations

from ...errors import FormatError
from ...format.codec import Reader
from ...format.messages.sohm_table import MAX_INDEXES, SohmIndex, SohmTableMessage, decode_table, table_size


def read_table(reader, msg: SohmTableMessage) -> list[SohmIndex]:
    """The indexes of the table `msg` points to (reader: a BlockReader)."""
    if msg.nindexes > MAX_INDEXES:
        raise FormatError(f"shared message table: {msg.nindexes} indexes")
    data = reader.read(msg.table_address, table_size(reader.sizes, msg.nindexes), "shared message table")
    return decode_table(Reader(data, 0, reader.sizes, "shared message table"), msg.nindexes)
