"""Global heap collections ("GCOL", version 1) and a small caching reader.

A collection: signature, version 1, 3 reserved bytes, collection size (size of lengths, the
whole collection including this header), then objects. Each object: index (u16), reference
count (u16), 4 reserved bytes, object size (size of lengths), data zero-padded to a multiple
of 8. Both headers are padded to a multiple of 8 bytes (libhdf5's H5HG_SIZEOF_HDR and
H5HG_SIZEOF_OBJHDR): with 4-byte lengths they still take 16 bytes, which the spec's tables
do not show. Object 0 is free space; its size counts its own header. When the space left at the end
is too small for an object header it is implied free space (libhdf5 H5HG__cache_heap_deserialize
reads it so; we do the same).

A global heap ID (what vlen elements and region references store): collection address (size of
offsets) + object index (u32).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from ..errors import FormatError
from .codec import Reader, Sizes

SIGNATURE = b"GCOL"
MIN_COLLECTION = 4096          # what libhdf5 allocates; smaller ones are accepted on read
MAX_COLLECTION = 256 * 1024 * 1024


@dataclass(frozen=True)
class HeapObject:
    index: int
    refcount: int
    data: bytes


@dataclass(frozen=True)
class Collection:
    address: int | None
    size: int
    objects: Mapping[int, HeapObject]
    free: int                  # bytes of free space (object 0, explicit or implied)

    def get(self, index: int) -> bytes:
        obj = self.objects.get(index)
        if obj is None:
            raise FormatError(f"global heap: no object {index} in the collection at {self.address}")
        return obj.data


@dataclass(frozen=True)
class HeapID:
    address: int | None        # None: the undefined address (an empty/nil vlen or reference)
    index: int

    @property
    def is_nil(self) -> bool:
        return self.address is None or self.address == 0


def _align8(n: int) -> int:
    return (n + 7) & ~7


def header_size(sizes: Sizes) -> int:
    """Collection header: signature, version, reserved, size; padded to 8 bytes (H5HG_SIZEOF_HDR)."""
    return _align8(8 + sizes.length)


def object_header_size(sizes: Sizes) -> int:
    """Object header: index, refcount, reserved, size; padded to 8 bytes (H5HG_SIZEOF_OBJHDR)."""
    return _align8(8 + sizes.length)


def heap_id_size(sizes: Sizes) -> int:
    return sizes.offset + 4


def decode_heap_id(c: Reader) -> HeapID:
    addr = c.offset()
    return HeapID(addr, c.u32())


def collection_size(head: bytes, sizes: Sizes, address: int | None = None) -> int:
    """The collection size from its first header_size(sizes) bytes (checks the header)."""
    c = Reader(head, 0, sizes, f"global heap collection at {address}")
    c.signature(SIGNATURE)
    version = c.u8()
    if version != 1:
        raise FormatError(f"global heap collection at {address}: version {version}")
    c.skip(3)
    size = c.length()
    if size < header_size(sizes) or size > MAX_COLLECTION:
        raise FormatError(f"global heap collection at {address}: implausible size {size}")
    return size


def decode_collection(buf: bytes | memoryview, sizes: Sizes, address: int | None = None) -> Collection:
    """Decode a whole collection (buf holds at least its `collection size` bytes)."""
    what = f"global heap collection at {address}"
    size = collection_size(bytes(buf[:header_size(sizes)]), sizes, address)
    if len(buf) < size:
        raise FormatError(f"{what}: truncated ({len(buf)} of {size} bytes)")
    c = Reader(memoryview(buf)[:size], header_size(sizes), sizes, what)
    ohdr = object_header_size(sizes)
    objects: dict[int, HeapObject] = {}
    free = 0
    while c.remaining() > 0:
        begin = c.pos
        if c.remaining() < ohdr:
            free += c.remaining()
            break
        index = c.u16()
        refcount = c.u16()
        c.skip(4)
        osize = c.length()
        if index == 0:
            # free space: its size includes this header
            if osize < ohdr or osize > size - begin:
                raise FormatError(f"{what}: free-space object of size {osize} at {begin}")
            free += osize
            c.pos = begin + osize
            continue
        need = ohdr + ((osize + 7) & ~7)
        if need > size - begin:
            raise FormatError(f"{what}: object {index} of {osize} bytes overruns the collection")
        if index in objects:
            raise FormatError(f"{what}: object index {index} appears twice")
        c.pos = begin + ohdr
        objects[index] = HeapObject(index, refcount, c.bytes(osize))
        c.pos = begin + need
    return Collection(address, size, MappingProxyType(objects), free)


class GlobalHeapReader:
    """Reads global heap objects through a BlockReader, caching decoded collections (LRU,
    bounded by count and by bytes). Thread-safe."""

    def __init__(self, reader, max_collections: int = 64, max_bytes: int = 64 * 1024 * 1024):
        self.reader = reader
        self.sizes: Sizes = reader.sizes
        self.max_collections = max_collections
        self.max_bytes = max_bytes
        self._cache: OrderedDict[int, Collection] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def collection(self, address: int | None) -> Collection:
        if address is None or address == 0:
            raise FormatError("global heap: undefined collection address")
        with self._lock:
            col = self._cache.get(address)
            if col is not None:
                self._cache.move_to_end(address)
                return col
        what = f"global heap collection at {address}"
        head = self.reader.read(address, header_size(self.sizes), what)
        size = collection_size(head, self.sizes, address)
        col = decode_collection(self.reader.read(address, size, what), self.sizes, address)
        with self._lock:
            if address not in self._cache:
                self._cache[address] = col
                self._bytes += col.size
                while self._cache and (len(self._cache) > self.max_collections or self._bytes > self.max_bytes):
                    _, old = self._cache.popitem(last=False)
                    self._bytes -= old.size
        return col

    def get(self, collection_addr: int | None, index: int) -> bytes:
        """The data of object `index` in the collection at `collection_addr`."""
        return self.collection(collection_addr).get(index)

    def get_id(self, hid: HeapID) -> bytes:
        return self.get(hid.address, hid.index)

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
            self._bytes = 0
