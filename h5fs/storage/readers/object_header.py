"""Reads an object header: block 0, then every continuation block it names. Decoded headers are
kept in the reader's metadata cache under block 0's address (a writer that changes a header
invalidates that address: header_edit counts the object among those its transaction touched)."""

from __future__ import annotations

from ...format.object_header import ObjectHeader, block0_length, decode

HEADER = "object header"   # the kind of a decoded header in the metadata cache


def read(reader, address: int, what: str) -> ObjectHeader:
    """The object header at `address` (reader: a BlockReader), as its cache keeps it."""
    return reader.object_header(address, what)


def decode_at(reader, address: int, what: str) -> ObjectHeader:
    """Read and decode the object header at `address` with all its continuation blocks."""
    first = reader.read_upto(address, 16 + 4096, f"{what}: object header")
    length = block0_length(first, address, what)
    block0 = first[:length] if len(first) >= length else reader.read(address, length, f"{what}: object header")
    return decode(block0, address, reader.sizes, what,
                  lambda addr, n: reader.read(addr, n, f"{what}: object header continuation"))


def nbytes(header: ObjectHeader) -> int:
    """Memory of a decoded object header (calibrated with tracemalloc on libhdf5's headers):
    its records, one per block and per message, and the message bytes (at most the blocks')."""
    blocks = header.blocks
    messages = len(blocks[0].messages) if len(blocks) == 1 else sum(len(b.messages) for b in blocks)
    return 300 + 300 * len(blocks) + 150 * messages + sum(b.length for b in blocks)
