"""The global heap (III.E) read and edited.

Reading (`GlobalHeapReader`): objects by heap ID, decoded collections kept in the file's metadata
cache; `extents`: the block a collection occupies.

Editing, in a transaction, laid out as libhdf5's H5HG.c lays them out, so that libhdf5 keeps
inserting into and removing from the same collections afterwards:

- `insert` (H5HG_insert): the object goes into the first collection of the file's CWFS list
  ("collections with free space", H5Fcwfs.c) with room for its object header and its data
  rounded up to 8 bytes, which then moves one place forward (H5F_cwfs_find_free_heap); with none,
  into a new collection of max(4096, what the object needs) bytes (H5HG__create), added at the
  front of the list (H5F_cwfs_add). Inside a collection (H5HG__alloc) the object takes the start of
  the free-space object, which keeps the rest (its header written when the rest can hold one,
  else the rest is the implied free tail). Its index is the collection's `nused`: one past the
  highest in use when the collection was first read, raised by each insert, never lowered by a
  removal (libhdf5's while it keeps the collection); past 65535 the lowest free one. Refcount 0.
- `remove` (H5HG_remove): the objects after the removed one move down over it, and the room goes
  to the free-space object at the end; a collection left with no objects is freed whole.
  Otherwise it moves one place forward in the list, or joins its end (H5F_cwfs_advance_heap).
- `read` (H5HG_read): an object's bytes; reading a collection puts it on the list, as libhdf5's
  loading it does (H5HG__cache_heap_deserialize -> H5F_cwfs_add, at most 16 collections).
libhdf5 may also extend a collection in place into free file space (H5HG_extend); a new
collection is made instead (the structure libhdf5 reads is the same).

The list and the `nused` counters are this module's memory of one open file (per `Store`), as
libhdf5's are per open file: collections this mount created, read, or removed from. Collections
must be emptied through `remove` (which frees them), never freed whole by other code, or the list
would name space the file no longer holds.

Crash safety: a collection changes by one write of the whole block (write_in_place; a new one by
write_new), so a reader sees it whole, before or after. A collection made by a transaction that
did not commit must never be used: until a later transaction finds it in the file exactly as it
was staged, and its space allocated, it is only used by the transaction that made it.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import CannotWrite, FormatError
from ..format import global_heap as gh
from ..format.codec import Sizes
from ..format.global_heap import Collection, HeapID, collection_size, decode_collection, header_size

if TYPE_CHECKING:
    from .extent_sink import ExtentSink
    from .transaction import Store, Transaction

NCWFS = 16            # H5F_NCWFS: collections the list holds
MAX_INDEX = 65535     # H5HG_MAXIDX
DECODED = 32          # collections kept decoded with the bytes they were staged as
DECODED_BYTES = 1 << 20   # ... each at most this long


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


@dataclass(eq=False)
class _Entry:
    address: int
    free: int                      # its free bytes when last seen (a hint: verified before use)
    staged: bytes | None = None    # while its making transaction may not have committed: the bytes
    maker: weakref.ref | None = None   # ... staged by it, and that transaction


@dataclass(eq=False)
class _Memory:
    """What libhdf5 keeps of the global heap while a file is open."""

    cwfs: list[_Entry] = field(default_factory=list)
    # collection address -> the next object index (H5HG_heap_t.nused: one past the highest index
    # when read, then raised by each insert and never lowered by a removal)
    nused: dict[int, int] = field(default_factory=dict)
    # address -> (bytes, their collection) of collections this mount staged: a transaction finding
    # the same bytes there takes the collection without decoding it (each insert rewrites it), and
    # an insert into it encodes only the new object and the free space after it
    decoded: dict[int, tuple[bytes, gh.Collection]] = field(default_factory=dict)

    def remember(self, data: bytes, col: gh.Collection) -> None:
        self.decoded.pop(col.address, None)
        if len(data) > DECODED_BYTES:   # a collection made for one large object: not kept
            return
        self.decoded[col.address] = (data, col)
        if len(self.decoded) > DECODED:
            del self.decoded[next(iter(self.decoded))]


_MEMORY: weakref.WeakKeyDictionary[Store, _Memory] = weakref.WeakKeyDictionary()


def _memory(txn: Transaction) -> _Memory:
    return _MEMORY.setdefault(txn.store, _Memory())


def _position(cwfs: list[_Entry], address: int) -> int | None:
    return next((i for i, e in enumerate(cwfs) if e.address == address), None)


def _add(cwfs: list[_Entry], entry: _Entry) -> None:
    """H5F_cwfs_add: at the front; a full list drops its last entry with less free space than
    `entry` (none: `entry` is not added)."""
    if len(cwfs) < NCWFS:
        cwfs.insert(0, entry)
        return
    for i in range(NCWFS - 1, -1, -1):
        if cwfs[i].free < entry.free:
            del cwfs[i]
            cwfs.insert(0, entry)
            return


def _advance(cwfs: list[_Entry], entry: _Entry) -> None:
    """Move `entry` one place towards the front (H5F_cwfs_advance_heap)."""
    i = cwfs.index(entry) if entry in cwfs else 0
    if i > 0:
        cwfs[i - 1], cwfs[i] = cwfs[i], cwfs[i - 1]


def _committed(txn: Transaction, entry: _Entry) -> bool:
    """Whether `entry`, made by another transaction, is in the file as that one staged it."""
    allocator = txn.store.allocator
    if entry.address + len(entry.staged) > allocator.eoa or allocator.meets_free(entry.address, len(entry.staged)):
        return False
    try:
        return txn.reader.read(entry.address, len(entry.staged), "global heap collection") == entry.staged
    except FormatError:
        return False


def _load(txn: Transaction, mem: _Memory, address: int) -> gh.Collection:
    known = mem.decoded.get(address)
    col = None
    if known is not None:
        try:
            if txn.reader.read(address, len(known[0]), "global heap collection") == known[0]:
                col = known[1]
        except FormatError:
            pass
    if col is None:
        col = GlobalHeapReader(txn.reader).collection(address)
    if address not in mem.nused:
        mem.nused[address] = max(col.objects, default=0) + 1
    return col


def _usable(txn: Transaction, mem: _Memory, entry: _Entry) -> gh.Collection | None:
    """The collection an entry names, as `txn` sees it; None (and the entry dropped) when it
    cannot be used."""
    if entry.staged is not None and entry.maker() is not txn:
        if not _committed(txn, entry):
            mem.cwfs.remove(entry)
            return None
        entry.staged = entry.maker = None
    try:
        col = _load(txn, mem, entry.address)
    except FormatError:
        mem.cwfs.remove(entry)
        return None
    entry.free = col.free
    return col


def _open(txn: Transaction, mem: _Memory, address: int) -> tuple[gh.Collection, _Entry]:
    """The collection at `address` and its entry; one not listed joins the list as libhdf5's
    loading it does (H5F_cwfs_add, which may leave it out of a full list)."""
    i = _position(mem.cwfs, address)
    entry = mem.cwfs[i] if i is not None else None
    col = _usable(txn, mem, entry) if entry is not None else None
    if col is None:
        col = _load(txn, mem, address)
        entry = _Entry(address, col.free)
        _add(mem.cwfs, entry)
    return col, entry


def _layout(col: gh.Collection) -> tuple[gh.HeapObject, ...]:
    """The objects of a collection laid out as libhdf5 lays them out (objects, then at most one
    free-space object at the end), else CannotWrite."""
    objects = col.entries[:-1] if col.entries and isinstance(col.entries[-1], gh.FreeSpace) else col.entries
    # each entry an object of its own index (the usual case, told without a walk), else one is free space
    if len(col.objects) != len(objects) and any(isinstance(e, gh.FreeSpace) for e in objects):
        raise CannotWrite(f"global heap collection at {col.address}: free space between objects "
                          "(not a layout libhdf5 makes)")
    return objects


def _next_index(mem: _Memory, col: gh.Collection) -> int | None:
    """H5HG__alloc's index: `nused`, or past MAX_INDEX the lowest free one."""
    top = mem.nused[col.address]
    if top <= MAX_INDEX:
        return top
    return next((i for i in range(1, MAX_INDEX + 1) if i not in col.objects), None)


def _with(col: gh.Collection, objects: tuple[gh.HeapObject, ...]) -> gh.Collection:
    """`col` holding `objects`, the rest of its space the free-space object (or the implied tail
    when too small for an object header)."""
    sizes = col.sizes
    rest = col.size - gh.header_size(sizes) - sum(gh.entry_size(o, sizes) for o in objects)
    tail = (gh.FreeSpace(rest),) if rest >= gh.object_header_size(sizes) else ()
    return gh.Collection(col.address, col.size, objects + tail, sizes)


def _stage(txn: Transaction, col: gh.Collection, entry: _Entry, before: gh.Collection | None = None) -> None:
    """Rewrite the collection as `col`; `before`: what it held, when `col` only adds an object."""
    mem = _memory(txn)
    known = mem.decoded.get(col.address)
    if before is not None and known is not None and known[1] is before and before.entries \
            and isinstance(free := before.entries[-1], gh.FreeSpace):
        # a collection this mount staged (built by `_with`): its free space runs to its end
        start = col.size - free.size
        data = known[0][:start] + gh.encode_tail(col, start, col.entries[len(before.entries) - 1:])
    else:
        data = gh.encode_collection(col)
    mem.remember(data, col)
    entry.free = col.free
    if entry.staged is not None:
        entry.staged = data
    txn.write_in_place(col.address, data)   # a block new in this transaction stays a new one


def _find(txn: Transaction, mem: _Memory, need: int) -> tuple[gh.Collection, _Entry] | None:
    """H5F_cwfs_find_free_heap: the first listed collection with `need` free bytes."""
    for entry in list(mem.cwfs):
        if entry not in mem.cwfs or entry.free < need:
            continue
        col = _usable(txn, mem, entry)
        if col is None or col.free < need or _next_index(mem, col) is None:
            continue
        try:
            _layout(col)
        except CannotWrite:
            continue
        _advance(mem.cwfs, entry)
        return col, entry
    return None


def _create(txn: Transaction, mem: _Memory, need: int) -> tuple[gh.Collection, _Entry]:
    """H5HG__create: a new collection of at least MIN_COLLECTION bytes, all of it free."""
    sizes = txn.sizes
    size = gh.new_collection_size(need, sizes)
    if size > min(gh.MAX_COLLECTION, (1 << 8 * sizes.length) - 1):
        raise CannotWrite(f"a global heap object taking {need} bytes: too large for a collection of this file")
    address = txn.allocate(size, raw=True)   # libhdf5's sec2 map: global heaps are raw data
    if address + size >= sizes.undefined:
        raise CannotWrite(f"a global heap collection at {address}+{size}: beyond this file's {sizes.offset}-byte addresses")
    col = _with(gh.Collection(address, size, (), sizes), ())
    data = gh.encode_collection(col)
    txn.write_new(address, data)
    entry = _Entry(address, col.free, data, weakref.ref(txn))
    _add(mem.cwfs, entry)
    mem.nused[address] = 1
    return col, entry


def insert(txn: Transaction, data: bytes) -> gh.HeapID:
    """Store `data` as a new global heap object (see the module docstring); its heap ID."""
    return insert_many(txn, [data])[0]


def insert_many(txn: Transaction, items: list[bytes]) -> list[gh.HeapID]:
    """`insert` of each of `items` in turn, each collection they go into staged once (the one
    `_find` takes was checked for a layout libhdf5 makes; a new one has one)."""
    mem, ids = _memory(txn), []
    col = entry = before = None
    for data in items:
        need = gh.object_size(len(data), txn.sizes)
        index = None if col is None or col.free < need else _next_index(mem, col)
        if index is None:
            if col is not None:
                _stage(txn, col, entry, before)
            col, entry = _find(txn, mem, need) or _create(txn, mem, need)
            before, index = col, _next_index(mem, col)
        else:
            _advance(mem.cwfs, entry)   # as `_find` moves the collection it takes
        mem.nused[col.address] = max(mem.nused[col.address], index + 1)
        col = col.with_object(gh.HeapObject(index, 0, bytes(data)))
        ids.append(gh.HeapID(col.address, index))
    if col is not None:
        _stage(txn, col, entry, before)
    return ids


def remove(txn: Transaction, address: int, index: int) -> None:
    """Remove object `index` of the collection at `address` (see the module docstring)."""
    mem = _memory(txn)
    col, entry = _open(txn, mem, address)
    if index not in col.objects:
        raise FormatError(f"global heap collection at {address}: no object {index} to remove")
    objects = tuple(o for o in _layout(col) if o.index != index)
    if objects:
        _stage(txn, _with(col, objects), entry)
        _advance(mem.cwfs, entry)
        return
    txn.free(address, col.size, raw=True)          # H5AC__FREE_FILE_SPACE_FLAG: the collection goes
    del mem.nused[address]
    if entry in mem.cwfs:
        mem.cwfs.remove(entry)


def read(txn: Transaction, address: int, index: int) -> bytes:
    """The bytes of object `index` of the collection at `address`; the collection joins the list
    or moves one place forward (H5HG_read)."""
    mem = _memory(txn)
    col, entry = _open(txn, mem, address)
    _advance(mem.cwfs, entry)
    return col.get(index)
