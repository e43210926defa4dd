"""Reads an object header: block 0, then every continuation block it names. Decoded headers are
kept in the reader's metadata cache under block 0's address (a writer that changes a header
invalidates that address: HeaderEdit counts the object among those its transaction touched).
`extents`: the blocks a header occupies."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...format.codec import Reader
from ...format.messages.small import decode_refcount
from ...format.messages.types import REFCOUNT
from ...format.object_header import ObjectHeader, block0_length, decode

if TYPE_CHECKING:
    from ..extent_sink import ExtentSink

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


def link_count(header: ObjectHeader, sizes) -> int:
    """The header's count of the links to its object: v1's prefix field, v2's reference count
    message (1 without one)."""
    if header.version == 1:
        return header.refcount
    raw = header.first(REFCOUNT)
    return 1 if raw is None else decode_refcount(Reader(raw.data, 0, sizes, "reference count message"))


def extents(out: ExtentSink, header: ObjectHeader, path: str, label: str = "object header") -> None:
    """Block 0's and every continuation block's extent."""
    for i, block in enumerate(header.blocks):
        out.add(block.address, block.length, path, label if i == 0 else f"{label} continuation block")
