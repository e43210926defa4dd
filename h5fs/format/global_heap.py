"""Global heap collections ("GCOL", version 1), decoded losslessly and encoded back (pure bytes <->
records; h5fs.storage.global_heap reads collections from the file).

A collection: signature, version 1, 3 reserved bytes, collection size (size of lengths, the
whole collection including this header), then objects. Each object: index (u16), reference
count (u16), 4 reserved bytes, object size (size of lengths), data zero-padded to a multiple
of 8. Both headers are padded to a multiple of 8 bytes (libhdf5's H5HG_SIZEOF_HDR and
H5HG_SIZEOF_OBJHDR): with 4-byte lengths they still take 16 bytes, which the spec's tables
do not show. Object 0 is free space; its size counts its own header. When the space left at the end
is too small for an object header it is implied free space (libhdf5 H5HG__cache_heap_deserialize
reads it so; we do the same).

A record keeps the objects and free-space objects in stored order (`entries`), so it encodes back
to the same bytes. Undefined bytes encode as zeros, as libhdf5 writes them: reserved fields, the
padding of headers and data, the free-space object's refcount and the contents of free space
(libhdf5 may leave old bytes there after removing an object: those may differ).

A global heap ID (what vlen elements and region references store): collection address (size of
offsets) + object index (u32).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from ..errors import FormatError
from .codec import DEFAULT_SIZES, Reader, Sizes, Writer

SIGNATURE = b"GCOL"
MIN_COLLECTION = 4096          # what libhdf5 allocates; smaller ones are accepted on read
MAX_COLLECTION = 256 * 1024 * 1024
HEADER = "4sB3xL"          # signature, version, reserved, collection size
OBJECT = "HH4xL"           # index, refcount, reserved, object size


@dataclass(frozen=True, slots=True)
class HeapObject:
    index: int
    refcount: int
    data: bytes


@dataclass(frozen=True, slots=True)
class FreeSpace:
    """An explicit free-space object (index 0)."""

    size: int                  # bytes, its own object header included


@dataclass(frozen=True, slots=True)
class Collection:
    address: int | None
    size: int
    entries: tuple[HeapObject | FreeSpace, ...]   # in stored order
    sizes: Sizes = DEFAULT_SIZES
    version: int = 1
    objects: Mapping[int, HeapObject] = field(init=False, repr=False, compare=False)
    free: int = field(init=False, repr=False, compare=False)  # free-space objects + the implied tail

    def __post_init__(self) -> None:
        objects = {e.index: e for e in self.entries if isinstance(e, HeapObject)}
        explicit = sum(e.size for e in self.entries if isinstance(e, FreeSpace))
        used = header_size(self.sizes) + sum(entry_size(e, self.sizes) for e in self.entries)
        object.__setattr__(self, "objects", MappingProxyType(objects))
        object.__setattr__(self, "free", explicit + self.size - used)

    def with_object(self, obj: HeapObject) -> Collection:
        """This collection, its objects laid out without free space between them, with `obj`
        after the last: the rest of its space the free-space object (or the implied tail when
        too small for an object header). Built from this one's bookkeeping: a collection holds
        hundreds of small objects, and an insert should not count them all again."""
        objects = self.entries[:-1] if self.entries and isinstance(self.entries[-1], FreeSpace) else self.entries
        rest = self.free - entry_size(obj, self.sizes)
        tail = (FreeSpace(rest),) if rest >= object_header_size(self.sizes) else ()
        new = object.__new__(Collection)
        for name, value in (("address", self.address), ("size", self.size), ("entries", objects + (obj,) + tail),
                            ("sizes", self.sizes), ("version", self.version),
                            ("objects", MappingProxyType({**self.objects, obj.index: obj})), ("free", rest)):
            object.__setattr__(new, name, value)
        return new

    def get(self, index: int) -> bytes:
        obj = self.objects.get(index)
        if obj is None:
            raise FormatError(f"global heap: no object {index} in the collection at {self.address}")
        return obj.data


@dataclass(frozen=True, slots=True)
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


def entry_size(entry: HeapObject | FreeSpace, sizes: Sizes) -> int:
    """Bytes an entry takes in its collection."""
    if isinstance(entry, FreeSpace):
        return entry.size
    return object_size(len(entry.data), sizes)


def object_size(nbytes: int, sizes: Sizes) -> int:
    """Bytes an object of `nbytes` bytes takes in a collection: its header and its data padded
    to 8 bytes (H5HG__alloc's `need`)."""
    return object_header_size(sizes) + _align8(nbytes)


def new_collection_size(need: int, sizes: Sizes) -> int:
    """The size libhdf5 gives a new collection for an object taking `need` bytes (H5HG_insert ->
    H5HG__create): at least MIN_COLLECTION, else the object and the collection header, aligned."""
    return max(MIN_COLLECTION, _align8(need + header_size(sizes)))


def heap_id_size(sizes: Sizes) -> int:
    return sizes.offset + 4


def decode_heap_id(c: Reader) -> HeapID:
    addr, index = c.fields("OI")
    return HeapID(c.sizes.address(addr), index)


def encode_heap_id(w: Writer, hid: HeapID) -> None:
    w.fields("OI", w.sizes.raw_address(hid.address), hid.index)


def collection_size(head: bytes, sizes: Sizes, address: int | None = None) -> int:
    """The collection size from its first header_size(sizes) bytes (checks the header)."""
    what = f"global heap collection at {address}"
    sig, version, size = Reader(head, 0, sizes, what).fields(HEADER)
    if sig != SIGNATURE:
        raise FormatError(f"{what}: bad signature {sig!r}, expected {SIGNATURE!r}")
    if version != 1:
        raise FormatError(f"{what}: version {version}")
    if size < header_size(sizes) or size > MAX_COLLECTION:
        raise FormatError(f"{what}: implausible size {size}")
    return size


def decode_collection(buf: bytes | memoryview, sizes: Sizes, address: int | None = None) -> Collection:
    """Decode a whole collection (buf holds at least its `collection size` bytes)."""
    what = f"global heap collection at {address}"
    size = collection_size(bytes(buf[:header_size(sizes)]), sizes, address)
    if len(buf) < size:
        raise FormatError(f"{what}: truncated ({len(buf)} of {size} bytes)")
    c = Reader(memoryview(buf)[:size], header_size(sizes), sizes, what)
    ohdr = object_header_size(sizes)
    layout = sizes.layout(OBJECT)
    entries: list[HeapObject | FreeSpace] = []
    seen: set[int] = set()
    while c.remaining() >= ohdr:   # less than an object header left: implied free space
        begin = c.pos
        index, refcount, osize = c.unpack(layout)
        if index == 0:
            # free space: its size includes this header
            if osize < ohdr or osize > size - begin:
                raise FormatError(f"{what}: free-space object of size {osize} at {begin}")
            entries.append(FreeSpace(osize))
            c.pos = begin + osize
            continue
        need = ohdr + _align8(osize)
        if need > size - begin:
            raise FormatError(f"{what}: object {index} of {osize} bytes overruns the collection")
        if index in seen:
            raise FormatError(f"{what}: object index {index} appears twice")
        seen.add(index)
        c.pos = begin + ohdr
        entries.append(HeapObject(index, refcount, c.bytes(osize)))
        c.pos = begin + need
    return Collection(address, size, tuple(entries), sizes)


def encode_collection(col: Collection) -> bytes:
    """The collection's `size` bytes."""
    w = Writer(col.sizes)
    w.fields(HEADER, SIGNATURE, col.version, col.size)
    w.align(8)
    return w.getvalue() + encode_tail(col, w.pos, col.entries)


def encode_tail(col: Collection, start: int, entries: tuple[HeapObject | FreeSpace, ...]) -> bytes:
    """Bytes [start, size) of the collection: `entries` (its last ones) from `start` on (an
    8-aligned offset past the header), then zeros. An insert encodes only what it changes: a
    collection holds hundreds of small objects."""
    w = Writer(col.sizes)
    for e in entries:   # `start` is 8-aligned: alignment within `w` is alignment in the collection
        begin = w.pos
        if isinstance(e, FreeSpace):
            w.fields(OBJECT, 0, 0, e.size)
            w.zeros(e.size - (w.pos - begin))
        else:
            w.fields(OBJECT, e.index, e.refcount, len(e.data))
            w.align(8)
            w.bytes(e.data)
            w.align(8)
    if start + w.pos > col.size:
        raise ValueError(f"global heap collection: {start + w.pos} bytes of entries in a {col.size}-byte collection")
    w.zeros(col.size - start - w.pos)
    return w.getvalue()
