"""The walk that makes a file's space map (storage/space_map.py): every structure reachable from
the superblock, and the extents each occupies.

`walk(file)` starts at the superblock (its driver information block, the superblock extension
and what that names: B-tree K values, the shared-message table with its lists, B-trees and heap,
the file's free-space managers), then follows every hard link from the root group, each object
header once (and the headers shared messages live in): header blocks, group storage (local heaps,
v1 B-tree and symbol table nodes; dense links and attributes: fractal heap blocks, huge objects,
the heap's free-space manager, v2 B-tree headers and nodes), dataset storage (contiguous data,
every chunk index's blocks and every chunk; an implicit index is the allocation of all the chunks
of the maximum extent), the global heap collections that variable-length data, references,
fill values and virtual dataset mappings name. Every object reference met (old and revised,
object, region and attribute references, DIMENSION_LIST's) must name an object the walk met.
Compact data and messages live inside headers, external data files outside the file. Which
blocks each structure occupies its module says (`extents`, storage/extent_sink.py): the
walk is their sink and decides the order.

The walk checks what it reads (the readers verify checksums and bounds) and never stops at a
broken structure: each failure becomes a Problem naming the object and the structure, and the
walk goes on with the rest. With `chunks=True` every filtered chunk is also decoded (one at a
time), and every attribute's value, as the mount reads it; chunks of variable-length data are
always decoded, to find the global heap objects they name.

The walk reads objects through the file (a model H5File, duck-typed as `WalkedFile`: `header`,
`get`, `root_address`, ...) and never imports the model: the layers stay one-way. `used_extents(file)` is what the
write side needs to find free space after mount.
"""

from __future__ import annotations

import contextlib
from collections import Counter, deque
from math import prod
from typing import Any, Callable, Iterator, Protocol

import numpy as np

from ..errors import FormatError, H5fsError
from ..format import btree_v1 as b1
from ..format import free_space_manager as fsm
from ..format.codec import Reader
from ..format.messages import file_space_info, shared, small, sohm_table
from ..format.messages import layout as L
from ..format.messages.types import (ATTRIBUTE_INFO, BTREE_K, DATATYPE, EXTERNAL, FSINFO, LINK_INFO, SOHM_TABLE,
                                     SYMBOL_TABLE)
from ..format.symbol_table_entry import CACHE_STAB
from . import btree_v1, free_space_manager, global_heap, local_heap, symbol_table
from . import superblock as superblock_reader
from .btree_v2 import reader as btree_v2
from .chunked import is_edge, read_chunk
from .element_refs import heap_id_fields, heap_ids, heap_reference, object_addresses
from .fractal_heap import reader as fractal_heap
from .free_space_manager import SLOTS
from .index import IndexContext, fixed_array, open_index
from .index.extensible_array import reader as extensible_array
from .object_header import reader as object_header
from .sohm_table import reader as sohm_reader
from .sohm_table.uses import SharedUses
from .space_map import FILE, UNEXPECTED, Extent, Problem, Progress, SpaceMap



class WalkedFile(Protocol):
    """What the walk asks of the file it walks (the model's H5File, a layer above: never imported)."""

    reader: Any
    sizes: Any
    superblock: Any
    root_address: int | None
    global_heap: Any

    def header(self, address: int, what: str) -> Any: ...

    def get(self, address: int, path: str) -> Any: ...

SCAN_BYTES = 4 << 20   # contiguous variable-length data is scanned for heap IDs this much at a time
MAX_NESTING = 8        # vlen data inside vlen data followed this deep


def walk(file: WalkedFile, chunks: bool = False, progress: Progress | None = None,
         clock: Callable[[], int] = lambda: 0) -> SpaceMap:
    """The space map of an open file (see the module docstring); `chunks`: decode every
    filtered chunk too; `progress(objects, chunks)` is called as the walk goes; each extent
    records `clock()` as it is met (a mount's allocator counts its commits)."""
    return SpaceWalk(file, chunks, progress, clock).run()


def used_extents(file: WalkedFile) -> list[Extent]:
    """Every extent the file uses, by address; H5fsError when the walk met a broken structure
    (what it names could not be followed: the gaps would not all be free)."""
    smap = walk(file)
    if smap.problems:
        raise FormatError(f"space map incomplete: {smap.problems[0]}"
                          + (f" (and {len(smap.problems) - 1} more)" if len(smap.problems) > 1 else ""))
    return sorted(smap.extents, key=lambda e: e.address)


class SpaceWalk:
    """The walk, and the sink (storage/extent_sink.py) the structures report their blocks to."""

    reads_values = True   # values are read for the references and heap objects they hold

    def __init__(self, file: WalkedFile, chunks: bool, progress: Progress | None, clock: Callable[[], int] = lambda: 0):
        self.f, self.reader, self.sizes = file, file.reader, file.sizes
        self.clock = clock
        self.sb = sb = file.superblock
        self.map = SpaceMap()
        self.decode_all = chunks
        self.progress = progress
        self.group_k, self.leaf_k, self.chunk_k = sb.group_internal_k, sb.group_leaf_k, sb.indexed_storage_k
        self.queue: deque[tuple[int, str]] = deque()
        self.shared: list[tuple[int, str]] = []     # headers that shared messages name, walked last
        self.seen: set[object] = set()               # addresses (with a kind) already walked
        self.collections: dict[int, object] = {}     # global heap collection address -> Collection | None
        self.references: Counter[int] = Counter()    # header address -> links and shared uses met
        self.counts: dict[int, tuple[int, str]] = {}  # header address -> (its reference count, path)
        self.shared_uses: SharedUses | None = None   # what objects use of a shared-message table
        self.current: int | None = None              # the header address of the object being walked
        self.heap_uses: dict[tuple[int, int], tuple[int | None, str, str]] = {}   # global heap object -> first use
        self.named: dict[int, dict[tuple[str, str], None]] = {}   # object address -> (holder, where) of references to it

    def run(self) -> SpaceMap:
        self.superblock()
        self.enqueue(self.f.root_address, "/")
        self.references[self.f.root_address] += 1   # the superblock's
        while self.queue or self.shared:
            self.object(*(self.queue.popleft() if self.queue else self.shared.pop()))
            self.map.objects += 1
            self.tick()
        self.current = None
        if not self.map.problems:   # with links unread the counts (and the objects met) would be incomplete
            self.reference_counts()
            self.find_dangling()
            if self.shared_uses is not None:
                with self.guard("shared message table", "shared message index"):
                    self.shared_uses.verify(self.problem)
        return self.map

    def reference_counts(self) -> None:
        """Every object's header counts the hard links and shared-message uses that lead to it
        (libhdf5's H5O_link)."""
        for address, (count, path) in self.counts.items():
            found = self.references[address]
            if count != found:
                self.current = address
                self.problem(path, "reference count", f"the header counts {count}, {found} lead to the object")
        self.current = None

    def find_dangling(self) -> None:
        """The object references that name no object header the links and shared messages
        lead to."""
        for address, holders in sorted(self.named.items()):
            if ("header", address) in self.seen:
                continue
            self.map.dangling.add(address)
            for path, where in holders:
                self.map.warnings.append(Problem(path, where, f"names the object at {address}, which does not exist "
                                                              "(a dangling reference)"))

    def tick(self) -> None:
        if self.progress is not None:
            self.progress(self.map.objects, self.map.chunks)

    # -- bookkeeping ------------------------------------------------------------------------

    def problem(self, path: str, structure: str, error: BaseException | str) -> None:
        text = str(error)
        if isinstance(error, UNEXPECTED):
            text = f"malformed ({type(error).__name__}: {error})"
        for prefix in (f"{path}: ", f"{structure}: "):   # readers name the object themselves
            text = text.removeprefix(prefix)
        objects = () if self.current is None else (self.current,)
        self.map.problems.append(Problem(path, structure, text[:500] or type(error).__name__, objects))

    @contextlib.contextmanager
    def guard(self, path: str, structure: str) -> Iterator[None]:
        """Errors inside become a problem of `structure`; the walk goes on after the block."""
        try:
            yield
        except (H5fsError, OSError, *UNEXPECTED) as e:
            self.problem(path, structure, e)

    def add(self, address: int | None, size: int, path: str, structure: str, raw: bool = False) -> bool:
        """Record an extent (`raw`: of raw data); False (and a problem) when it does not lie
        inside the file, so that the caller does not read it."""
        if address is None:
            self.problem(path, structure, "undefined address")
            return False
        eof = self.reader.eof - self.reader.base   # read each time: a mount's writes move it
        if address < 0 or size < 0 or address + size > eof:
            self.problem(path, structure, f"{address}+{size} lies outside the file ({eof} bytes)")
            return False
        if size:
            self.map.extents.append(Extent(address, size, path, structure, raw, owner=self.current, seen=self.clock()))
        return True

    def first_time(self, key: object) -> bool:
        if key in self.seen:
            return False
        self.seen.add(key)
        return True

    def enqueue(self, address: int | None, path: str, queue=None) -> None:
        if address is not None and self.first_time(("header", address)):
            (self.queue if queue is None else queue).append((address, path))

    # -- the superblock -------------------------------------------------------------------------

    def superblock(self) -> None:
        sb = self.sb
        superblock_reader.extents(self, sb, FILE)
        if sb.extension_address is not None:
            self.extension(sb.extension_address)
        entry = sb.root_entry
        if entry is not None and entry.cache_type == CACHE_STAB:
            symbol_table.extents(self, self.reader, "/", entry.btree_address, entry.heap_address, self.group_k,
                                 self.leaf_k)

    def extension(self, address: int) -> None:
        header = None
        with self.guard(FILE, "superblock extension"):
            header = self.f.header(address, "superblock extension")
        if header is None:
            return
        object_header.extents(self, header, FILE, "superblock extension")
        for raw in header.messages:
            with self.guard(FILE, f"superblock extension message {raw.type:#x}"):
                c = Reader(raw.data, 0, self.sizes, "superblock extension message")
                if raw.type == BTREE_K:
                    k = small.decode_btree_k(c)
                    self.chunk_k, self.group_k, self.leaf_k = k.indexed_storage_internal, k.group_internal, k.group_leaf
                elif raw.type == SOHM_TABLE:
                    indexes = sohm_reader.extents(self, self.reader, FILE, sohm_table.decode(c))
                    if indexes is not None:
                        self.shared_uses = SharedUses(self.f, indexes)
                elif raw.type == FSINFO:
                    self.file_space(file_space_info.decode(c))

    def file_space(self, info: file_space_info.FileSpaceInfo) -> None:
        """The file's free-space managers: their blocks are used, the sections they list free."""
        self.map.file_space = info
        types = SLOTS.get(info.strategy, {}) if info.version == 1 else {}
        for slot, addr in enumerate(info.managers):
            if addr is not None:
                label = f"free-space manager {slot}"
                sections = free_space_manager.extents(self, self.reader, FILE, label, addr, fsm.CLIENT_FILE,
                                                      types.get(slot))
                self.map.free += [Extent(a, n, FILE, f"{label} free section", slot=slot) for a, n in sections]

    # -- objects --------------------------------------------------------------------------------

    def object(self, address: int, path: str) -> None:
        header = obj = None
        self.current = address
        with self.guard(path, "object header"):
            header = self.f.header(address, path)
        if header is None:
            return
        object_header.extents(self, header, path)
        with self.guard(path, "reference count"):
            self.counts[address] = (object_header.link_count(header, self.sizes), path)
        for raw in header.messages:
            if raw.shared:
                self.shared_source(raw.type, raw.data, path)
        if self.shared_uses is not None:
            with self.guard(path, "shared message uses"):
                self.shared_uses.header(address, path)
        with self.guard(path, "object header"):
            obj = self.f.get(address, path)
        if obj is None:
            return
        if obj.kind == "group":
            self.group(obj, path)
        elif obj.kind == "dataset":
            self.dataset(obj, path)
        self.attributes(obj, path)

    def shared_source(self, mtype: int, data: bytes, path: str) -> None:
        """A message shared from another object header: that header is walked too."""
        with self.guard(path, f"shared message {mtype:#x}"):
            ref = shared.decode(Reader(data, 0, self.sizes, "shared message"))
            if ref.kind == shared.IN_OBJECT_HEADER:
                self.references[ref.address] += 1
                self.enqueue(ref.address, f"{path} (shared message {mtype:#x})", self.shared)

    def group(self, group, path: str) -> None:
        before = len(self.map.problems)
        with self.guard(path, "group storage"):
            stab = group.message(SYMBOL_TABLE)
            if stab is not None:
                symbol_table.extents(self, self.reader, path, stab.btree_address, stab.heap_address, self.group_k,
                                     self.leaf_k)
            else:
                info = group.message(LINK_INFO)
                if info is not None and info.heap_address is not None:
                    self.dense(path, "dense links", info)
        if len(self.map.problems) > before:
            return   # the links cannot be read either: reported once
        self.links(group, path)

    def links(self, group, path: str) -> None:
        """The objects the group's hard links name: counted and walked."""
        with self.guard(path, "links"):
            for link in group.links():
                if link.kind == "hard":
                    self.references[link.address] += 1
                    self.enqueue(link.address, ("" if path == "/" else path) + "/" + link.name)

    def attributes(self, obj, path: str) -> None:
        with self.guard(path, "attributes"):
            info = obj.message(ATTRIBUTE_INFO)
            if info is not None and info.heap_address is not None:
                self.dense(path, "dense attributes", info)
            for a in obj.attributes() if self.reads_values else ():
                with self.guard(path, f"attribute {a.name!r}"):
                    if a.msg.datatype_shared:
                        self.shared_source(DATATYPE, a.msg.datatype_raw, path)
                    dt, before = a.datatype, len(self.map.problems)
                    self.scan(a.msg.data[:a.dataspace.count * dt.size], dt, path, f"attribute {a.name!r}")
                    if self.decode_all and len(self.map.problems) == before:
                        a.value   # decoded as the mount reads it (bounded): a value it cannot show is damage

    def dense(self, path: str, label: str, info) -> None:
        """Dense links or attributes: the heap and both indexes (what the records name is read
        with the object's links and attributes)."""
        fractal_heap.extents(self, self.reader, path, f"{label} heap", info.heap_address)
        btree_v2.extents(self, self.reader, path, f"{label} name index", info.name_index_address)
        if info.order_index_address is not None:
            btree_v2.extents(self, self.reader, path, f"{label} creation-order index", info.order_index_address)

    # -- datasets ---------------------------------------------------------------------------------

    def dataset(self, ds, path: str) -> None:
        with self.guard(path, "data layout"):
            lay, dt = ds.layout, ds.datatype
            fields = heap_id_fields(dt) if self.reads_values else ()
            if lay.layout_class == L.CONTIGUOUS:
                self.contiguous(ds, path, lay, dt, fields)
            elif lay.chunked:
                self.chunked(ds, path, lay, dt, fields)
            elif lay.layout_class == L.COMPACT:
                self.scan(lay.compact_data[:ds.dataspace.count * dt.size], dt, path, "compact data", fields)
            elif lay.layout_class == L.VIRTUAL and lay.vds_heap_address is not None:
                self.heap_object(path, "virtual dataset mappings", lay.vds_heap_address, lay.vds_heap_index)
            if fields:
                with self.guard(path, "fill value"):
                    self.scan(ds.fill_value or b"", dt, path, "fill value", fields)

    def contiguous(self, ds, path: str, lay: L.DataLayout, dt, fields) -> None:
        external = ds.message(EXTERNAL)
        if external is not None:   # the data lives in other files; their names in a local heap
            local_heap.extents(self, self.reader, path, external.heap_address, "external file list local heap")
            return
        if lay.address is None:
            return
        size = lay.size if lay.size >= 0 else ds.dataspace.count * dt.size
        if not self.add(lay.address, size, path, "contiguous data", raw=True) or not fields:
            return
        step = max(1, SCAN_BYTES // dt.size) * dt.size
        used = min(size, ds.dataspace.count * dt.size)
        for at in range(0, used, step):
            self.scan(self.reader.read(lay.address + at, min(step, used - at), f"{path}: contiguous data"),
                      dt, path, "contiguous data", fields)

    def chunked(self, ds, path: str, lay: L.DataLayout, dt, fields) -> None:
        space, filters = ds.dataspace, ds.filters
        structured = lay.layout_class == L.STRUCTURED   # sections checked by the dataset's codec
        ctx = IndexContext(self.reader, lay, space.dims, space.maxdims, ds.index_filtered, path)
        index = open_index(ctx)
        kind = lay.index.index_type
        if kind == L.IMPLICIT:   # one allocation for the maximum extent: its chunks hold nothing to check
            allocated = index.address is not None and self.add(
                index.address, prod(index.max_grid) * index.nbytes, path,
                "implicit chunk index (every chunk of the maximum extent)", raw=True)
            if not (allocated and fields):
                return
        self.index_blocks(index, kind, path)
        bound = tuple(None if m is None else -(-m // c) for m, c in zip(space.maxdims, lay.chunk_dims))
        ordered = kind in (L.BTREE_V1, L.BTREE_V2)
        decode = bool(fields) or (self.decode_all and bool(filters))
        nbytes = lay.chunk_nbytes
        edges_unfiltered = bool(lay.flags & L.DONT_FILTER_PARTIAL_BOUND_CHUNKS)
        seen: set[tuple[int, ...]] = set()
        prev = None
        with self.guard(path, "chunk index"):
            for rec in index.records():
                label = f"chunk {rec.coords}"
                self.map.chunks += 1
                if self.map.chunks % 256 == 0:
                    self.tick()
                if rec.coords in seen:
                    self.problem(path, label, "indexed twice")
                seen.add(rec.coords)
                if any(b is not None and not 0 <= c < b for c, b in zip(rec.coords, bound)):
                    self.problem(path, label, f"outside the maximum extent {space.maxdims}")
                if ordered and prev is not None and rec.coords <= prev:
                    self.problem(path, label, f"out of order in the index (after chunk {prev})")
                prev = rec.coords
                if not filters and not structured and rec.size != nbytes:
                    self.problem(path, label, f"{rec.size} bytes stored, a chunk is {nbytes}")
                elif kind != L.IMPLICIT and not self.add(rec.address, rec.size, path, label, raw=True):
                    continue   # inside the implicit index's allocation, or outside the file
                elif structured and self.decode_all:
                    with self.guard(path, label):   # checksums, section sizes, selection inside the chunk
                        ds.source.codec.decode(self.reader.read(rec.address, rec.size, f"{path}: {label}"),
                                               rec.sections, ds.source._is_edge(rec.coords), f"{path}: {label}")
                elif decode:
                    with self.guard(path, label):
                        data = read_chunk(self.reader, rec, filters, nbytes, dt.size, f"{path}: {label}",
                                          edges_unfiltered and is_edge(rec.coords, lay.chunk_dims, space.dims))
                        if fields:
                            self.scan(_inside(data, rec.coords, lay.chunk_dims, space.dims, dt.size), dt, path,
                                      label, fields)

    def index_blocks(self, index, kind: int, path: str) -> None:
        """The extents of the chunk index's own blocks (its chunks come from its records)."""
        if kind == L.BTREE_V1 and index.root is not None:
            btree_v1.extents(self, self.reader, path, "chunk index B-tree node", index.root, b1.CHUNK, index.rank,
                             self.chunk_k)
        elif kind == L.BTREE_V2 and index.header is not None:
            btree_v2.extents(self, self.reader, path, "chunk index v2 B-tree", index.header.address)
        elif kind == L.FIXED_ARRAY and index.array is not None:
            fixed_array.extents(self, index.array, path)
        elif kind == L.EXTENSIBLE_ARRAY and index.array is not None:
            extensible_array.extents(self, index.array, path)

    # -- the global heap --------------------------------------------------------------------------

    def scan(self, raw: bytes, dt, path: str, where: str, fields=None, depth: int = 0) -> None:
        """Follow the global heap IDs in `raw` (elements of `dt`) to their collections, and
        record the objects its references name."""
        fields = heap_id_fields(dt) if fields is None else fields
        if not fields or not raw:
            return
        # a reference's holder: the attribute, or the dataset's data (not each chunk)
        holder = where if where.startswith(("attribute ", "fill value")) else "data"
        for target in object_addresses(raw, dt.size, fields, self.sizes.offset):
            self.named.setdefault(target, {})[(path, holder)] = None
        for addr, index, kind, base in heap_ids(raw, dt.size, fields, self.sizes.offset):
            data = self.heap_object(path, f"{where}: {kind}", addr, index)
            target = None if data is None else heap_reference(data, kind, self.sizes.offset)
            if target not in (None, 0, self.sizes.undefined):
                self.named.setdefault(target, {})[(path, f"{holder}: {kind}")] = None
            if data is not None and base is not None and depth < MAX_NESTING:
                self.scan(data, base, path, where, None, depth + 1)

    def heap_object(self, path: str, where: str, address: int, index: int) -> bytes | None:
        """The object's data; its collection recorded the first time it is named."""
        col = self.collections.get(address, False)
        if col is False:
            col = self.collections[address] = global_heap.extents(
                self, self.f.global_heap, path, f"{where}: global heap collection at {address}", address)
        if col is None:
            return None
        obj = col.objects.get(index)
        if obj is None:
            self.problem(path, where, f"names object {index} of the global heap collection at {address}, "
                                      "which has none")
            return None
        first = self.heap_uses.setdefault((address, index), (self.current, path, where))
        if first != (self.current, path, where) and obj.refcount <= 1:   # libhdf5 writes one object per value
            self.map.problems.append(Problem(path, where, f"names object {index} of the global heap collection "
                                                          f"at {address}, which {first[1]}: {first[2]} names too "
                                                          "(an edit of one would free the other's value)",
                                             tuple(a for a in (self.current, first[0]) if a is not None)))
        return obj.data


def _inside(data: bytes, coords, chunk_dims, dims, itemsize: int) -> bytes:
    """The elements of a decoded chunk that lie inside the dataset's extent."""
    shape = tuple(min(k, d - c * k) for c, k, d in zip(coords, chunk_dims, dims))
    if shape == tuple(chunk_dims):
        return data
    if any(n <= 0 for n in shape):
        return b""
    arr = np.frombuffer(data, np.uint8).reshape(tuple(chunk_dims) + (itemsize,))
    return arr[tuple(slice(0, n) for n in shape)].tobytes()
