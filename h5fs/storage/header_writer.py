"""Rewrites a message of an object header in place, inside a transaction."""

from __future__ import annotations

from ..format.object_header import ObjectHeader, RawMessage, encode_block, replace_message
from .transaction import Transaction


def rewrite_message(txn: Transaction, header: ObjectHeader, old: RawMessage, data: bytes) -> ObjectHeader:
    """Stage the header block holding `old` with its data replaced (checksum recomputed);
    returns the header as it will be."""
    new, i = replace_message(header, old, data)
    txn.write_in_place(new.blocks[i].address, encode_block(new, i))
    return new
