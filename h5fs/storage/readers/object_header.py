"""Reads an object header: block 0, then every continuation block it names."""

from __future__ import annotations

from ...format.object_header import ObjectHeader, block0_length, decode


def read(reader, address: int, what: str) -> ObjectHeader:
    """Read the object header at `address` (reader: a BlockReader) with all continuation blocks."""
    first = reader.read_upto(address, 16 + 4096, f"{what}: object header")
    length = block0_length(first, address, what)
    block0 = first[:length] if len(first) >= length else reader.read(address, length, f"{what}: object header")
    return decode(block0, address, reader.sizes, what,
                  lambda addr, n: reader.read(addr, n, f"{what}: object header continuation"))
