"""Rewrites messages of an object header in place, inside a transaction."""

from __future__ import annotations

from ..format.object_header import ObjectHeader, RawMessage, encode_block, replace_message
from .transaction import Transaction


def rewrite_message(txn: Transaction, header: ObjectHeader, old: RawMessage, data: bytes) -> ObjectHeader:
    """Stage the header block holding `old` with its data replaced (same stored size, checksum
    recomputed); returns the header as it will be."""
    new, i = replace_message(header, old, data)
    txn.write_in_place(new.blocks[i].address, encode_block(new, i))
    return new


class HeaderEdit:
    """Successive message rewrites of one header in one transaction (each sees the last)."""

    def __init__(self, txn: Transaction, header: ObjectHeader):
        self.txn, self.header = txn, header

    def set(self, mtype: int, data: bytes) -> None:
        old = self.header.first(mtype)
        if old is None:
            raise ValueError(f"object header at {self.header.address}: no message of type {mtype:#x}")
        self.header = rewrite_message(self.txn, self.header, old, data)
