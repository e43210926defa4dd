"""Reads global heap objects, keeping decoded collections in the file's metadata cache;
`extents`: the block a collection occupies."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import FormatError
from ...format.codec import Sizes
from ...format.global_heap import Collection, HeapID, collection_size, decode_collection, header_size

if TYPE_CHECKING:
    from ..extent_sink import ExtentSink


class GlobalHeapReader:
    """Reads global heap objects through a BlockReader; decoded collections live in the file's
    metadata cache (`reader.meta`). Thread-safe."""

    def __init__(self, reader):
        self.reader = reader
        self.sizes: Sizes = reader.sizes

    def collection(self, address: int | None) -> Collection:
        if address is None or address == 0:
            raise FormatError("global heap: undefined collection address")
        # its bytes, plus a record and a bytes object per entry
        return self.reader.meta.get(address, "global heap collection", lambda: self._load(address),
                                    lambda col: col.size + 150 * len(col.entries))

    def _load(self, address: int) -> Collection:
        what = f"global heap collection at {address}"
        head = self.reader.read(address, header_size(self.sizes), what)
        size = collection_size(head, self.sizes, address)
        return decode_collection(self.reader.read(address, size, what), self.sizes, address)

    def get(self, collection_addr: int | None, index: int) -> bytes:
        """The data of object `index` in the collection at `collection_addr`."""
        return self.collection(collection_addr).get(index)

    def get_id(self, hid: HeapID) -> bytes:
        return self.get(hid.address, hid.index)


def extents(out: ExtentSink, heap: GlobalHeapReader, path: str, label: str, address: int) -> Collection | None:
    """The collection's extent, raw data (libhdf5's _GHEAP allocations); the collection, None
    when it cannot be read."""
    with out.guard(path, label):
        col = heap.collection(address)
        out.add(address, col.size, path, "global heap collection", raw=True)
        return col
    return None
