"""The file's space map: the extents every structure reachable from the superblock occupies.

`walk(file)` starts at the superblock (its driver information block, the superblock extension
and what that names: B-tree K values, the shared-message table with its lists, B-trees and heap,
the file's free-space managers), then follows every hard link from the root group, each object
header once (and the headers shared messages live in): header blocks, group storage (local heaps,
v1 B-tree and symbol table nodes; dense links and attributes: fractal heap blocks, huge objects,
the heap's free-space manager, v2 B-tree headers and nodes), dataset storage (contiguous data,
every chunk index's blocks and every chunk; an implicit index is the allocation of all the chunks
of the maximum extent), the global heap collections that variable-length data, references,
fill values and virtual dataset mappings name. Every object reference met (old and revised,
object, region and attribute references, DIMENSION_LIST's) must name an object the walk met:
one that names none is a warning (`SpaceMap.warnings`), not a problem: libhdf5 leaves such
references behind whenever it deletes an object. Compact data and messages live inside headers,
external data files outside the file. Every size is the block's size on disk as libhdf5
allocates it (a v1 B-tree node has room for 2K entries, a shared-message list for its cutoff,
a paged array data block holds all its pages).

Space a persistent free-space manager lists is free (`SpaceMap.free`, each section with the slot
of its manager in the File Space Info message, kept in `SpaceMap.file_space`), not used; the
managers' own blocks are used. A file manager's header must describe its section list (counts
and total space: libhdf5 reads the list by them) and its sections be of the type its slot holds
(h5fs.storage.persistent_space). Raw data (chunks, contiguous data, global heap collections, huge
fractal heap objects: libhdf5's H5FD_MEM_DRAW and _GHEAP allocations) is marked `raw`: paged
aggregation keeps it in pages of its own.

The walk checks what it reads (the readers verify checksums and bounds) and never stops at a
broken structure: each failure becomes a Problem naming the object and the structure, and the
walk goes on with the rest. With `chunks=True` every filtered chunk is also decoded (one at a
time), and every attribute's value, as the mount reads it; chunks of variable-length data are
always decoded, to find the global heap objects they name.

The walk reads objects through the file (a model H5File, duck-typed: `header`, `get`, `root_address`,
...) and never imports the model: the layers stay one-way. `used_extents(file)` is what the
write side needs to find free space after mount.
"""

from __future__ import annotations

import bisect
import contextlib
import struct
from collections import Counter, deque
from dataclasses import dataclass, field
from itertools import pairwise
from math import prod
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np

from ..errors import FormatError, H5fsError
from ..format import btree_v1 as b1
from ..format import btree_v2 as bt
from ..format import extensible_array as ea
from ..format import fixed_array as fa
from ..format import fractal_heap as fh
from ..format import free_space_manager as fsm
from ..format import local_heap as lh
from ..format import superblock as sbf
from ..format import symbol_table_node as snod
from ..format.codec import Reader
from ..format.messages import file_space_info, shared, small, sohm_table
from ..format.object_header import REFCOUNT
from ..format.messages import layout as L
from ..format.symbol_table_entry import CACHE_STAB
from .element_refs import heap_id_fields, heap_ids, heap_reference, object_addresses
from .filters import ChunkInfo
from .filters.pipeline import decode_chunk
from .index import ChunkRecord, IndexContext, open_index
from .persistent_space import SLOTS
from .readers import btree_v1 as b1_reader
from .readers import btree_v2 as bt_reader
from .readers import local_heap as lh_reader
from .readers import symbol_table_node as snod_reader
from .readers.fractal_heap import FractalHeap
from .readers.sohm_table import read_table
from .sohm_uses import SharedUses

if TYPE_CHECKING:
    from ..model.file import H5File

# Object header message types the walk follows (IV.A.2; h5fs.model.messages has the whole table,
# a layer above this one).
LINK_INFO, DATATYPE, EXTERNAL, SOHM_TABLE, SYMBOL_TABLE = 0x02, 0x03, 0x07, 0x0F, 0x11
BTREE_K, ATTRIBUTE_INFO, FSINFO = 0x13, 0x15, 0x17
FILE = "(file)"     # the owner named for the file's own structures (superblock and what it names)
SCAN_BYTES = 4 << 20   # contiguous variable-length data is scanned for heap IDs this much at a time
MAX_OVERLAPS = 1000   # overlap problems named one by one; the rest are counted
MAX_NESTING = 8        # vlen data inside vlen data followed this deep
# what decoding a hostile file can raise where a bounds check was missed (as the model's guard)
UNEXPECTED = (ArithmeticError, LookupError, ValueError, TypeError, struct.error, MemoryError, RecursionError,
              AssertionError, BufferError)


@dataclass(frozen=True, slots=True)
class Extent:
    """Bytes [address, address + size) of the file (addresses relative to the superblock, as
    every address in the file), held by `structure` of the object at `path`."""

    address: int
    size: int
    path: str
    structure: str
    raw: bool = False             # raw data (module docstring), not metadata
    slot: int | None = None       # a free section: the slot of the file's manager listing it
    owner: int | None = None      # the header address of the object it belongs to
    seen: int = 0                 # the walk's `clock` when it met the extent

    @property
    def end(self) -> int:
        return self.address + self.size

    @property
    def what(self) -> str:
        return f"{self.path}: {self.structure}"


@dataclass(frozen=True, slots=True)
class Problem:
    path: str
    structure: str
    message: str
    objects: tuple[int, ...] = ()   # header addresses of the objects it concerns (edits refuse them)

    def __str__(self) -> str:
        return f"{self.path}: {self.structure}: {self.message}"


@dataclass
class SpaceMap:
    extents: list[Extent] = field(default_factory=list)   # used, in the order the walk met them
    free: list[Extent] = field(default_factory=list)      # sections of the file's free-space managers
    file_space: file_space_info.FileSpaceInfo | None = None   # the File Space Info message
    problems: list[Problem] = field(default_factory=list)
    # references that name no object the walk met (libhdf5 leaves them when it deletes an
    # object): a warning each, naming the holder; `dangling`, the addresses they name
    warnings: list[Problem] = field(default_factory=list)
    dangling: set[int] = field(default_factory=set)
    objects: int = 0
    chunks: int = 0


Progress = Callable[[int, int], None]   # (objects walked, chunks met)


def walk(file: H5File, chunks: bool = False, progress: Progress | None = None,
         clock: Callable[[], int] = lambda: 0) -> SpaceMap:
    """The space map of an open file (see the module docstring); `chunks`: decode every
    filtered chunk too; `progress(objects, chunks)` is called as the walk goes; each extent
    records `clock()` as it is met (a mount's allocator counts its commits)."""
    return _Walk(file, chunks, progress, clock).run()


def used_extents(file: H5File) -> list[Extent]:
    """Every extent the file uses, by address; H5fsError when the walk met a broken structure
    (what it names could not be followed: the gaps would not all be free)."""
    smap = walk(file)
    if smap.problems:
        raise FormatError(f"space map incomplete: {smap.problems[0]}"
                          + (f" (and {len(smap.problems) - 1} more)" if len(smap.problems) > 1 else ""))
    return sorted(smap.extents, key=lambda e: e.address)


def space_problems(used: list[Extent], free: list[Extent], eoa: int) -> list[Problem]:
    """Extents (sorted by address) past the end of allocation, extents that overlap, free
    sections something uses; each problem names the objects concerned."""
    out = [Problem(e.path, e.structure, f"{e.address}+{e.size} lies past the end of allocation ({eoa})", _owners(e))
           for e in used if e.end > eoa]
    overlaps, reach = 0, None
    for e in used:
        if reach is not None and e.address < reach.end:
            overlaps += 1
            if overlaps <= MAX_OVERLAPS:
                out.append(Problem(e.path, e.structure, f"{e.address}+{e.size} overlaps {reach.what} at "
                                                        f"{reach.address}+{reach.size}", _owners(e, reach)))
        if reach is None or e.end > reach.end:
            reach = e
    if overlaps > MAX_OVERLAPS:
        out.append(Problem(FILE, "space map", f"{overlaps - MAX_OVERLAPS} more overlapping extents"))
    starts = [e.address for e in used]
    reaches, furthest = [], None   # reaches[i]: the extent reaching furthest among used[:i + 1]
    for e in used:
        furthest = e if furthest is None or e.end > furthest.end else furthest
        reaches.append(furthest)
    for s in free:
        i = bisect.bisect_left(starts, s.end) - 1
        if s.end > eoa:
            out.append(Problem(s.path, s.structure, f"{s.address}+{s.size} lies past the end of allocation ({eoa})"))
        elif i >= 0 and reaches[i].end > s.address:
            hit = reaches[i]
            out.append(Problem(s.path, s.structure, f"{s.address}+{s.size} is listed free but {hit.what} uses "
                                                    f"{hit.address}+{hit.size}", _owners(hit)))
    return out


def _owners(*extents: Extent) -> tuple[int, ...]:
    return tuple(e.owner for e in extents if e.owner is not None)


def gaps(extents: list[Extent], end: int) -> list[tuple[int, int]]:
    """(address, size) of the space below `end` no extent covers (extents sorted by address)."""
    out, reach = [], 0
    for e in extents:
        if e.address > reach:
            out.append((reach, min(e.address, end) - reach))
        reach = max(reach, e.end)
        if reach >= end:
            return [g for g in out if g[1] > 0]
    if reach < end:
        out.append((reach, end - reach))
    return [g for g in out if g[1] > 0]


def read_chunk(reader, rec: ChunkRecord, filters, nbytes: int, itemsize: int, what: str,
               unfiltered: bool = False) -> bytes:
    """A chunk's decoded bytes (`unfiltered`: stored without the pipeline, an edge chunk of a
    dataset that does not filter them)."""
    data = reader.read(rec.address, rec.size, what)
    if filters and not unfiltered:
        data = decode_chunk(filters, data, rec.filter_mask, ChunkInfo(nbytes, itemsize, what))
    if len(data) != nbytes:
        raise FormatError(f"{what}: holds {len(data)} bytes, a chunk is {nbytes}")
    return data


# -- the walk ------------------------------------------------------------------------------------


class _Walk:
    def __init__(self, file: H5File, chunks: bool, progress: Progress | None, clock: Callable[[], int] = lambda: 0):
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

    # -- superblock ---------------------------------------------------------------------------

    def superblock(self) -> None:
        sb = self.sb
        self.add(0, len(sbf.encode(sb)), FILE, "superblock")
        if sb.driver_info is not None:
            self.add(sb.driver_info_address, sbf.DRIVER_HEAD_SIZE + len(sb.driver_info.data), FILE,
                     "driver information block")
        if sb.extension_address is not None:
            self.extension(sb.extension_address)
        entry = sb.root_entry
        if entry is not None and entry.cache_type == CACHE_STAB:
            self.symbol_table("/", entry.btree_address, entry.heap_address)

    def extension(self, address: int) -> None:
        header = None
        with self.guard(FILE, "superblock extension"):
            header = self.f.header(address, "superblock extension")
        if header is None:
            return
        self.header_blocks(header, FILE, "superblock extension")
        for raw in header.messages:
            with self.guard(FILE, f"superblock extension message {raw.type:#x}"):
                c = Reader(raw.data, 0, self.sizes, "superblock extension message")
                if raw.type == BTREE_K:
                    k = small.decode_btree_k(c)
                    self.chunk_k, self.group_k, self.leaf_k = k.indexed_storage_internal, k.group_internal, k.group_leaf
                elif raw.type == SOHM_TABLE:
                    self.sohm(sohm_table.decode(c))
                elif raw.type == FSINFO:
                    info = self.map.file_space = file_space_info.decode(c)
                    types = SLOTS.get(info.strategy, {}) if info.version == 1 else {}
                    for slot, addr in enumerate(info.managers):
                        if addr is not None:
                            self.free_space_manager(FILE, f"free-space manager {slot}", addr, fsm.CLIENT_FILE, slot,
                                                    types.get(slot))

    def sohm(self, msg: sohm_table.SohmTableMessage) -> None:
        s, what = self.sizes, "shared message table"
        if msg.nindexes > sohm_table.MAX_INDEXES or not self.add(msg.table_address,
                                                                 sohm_table.table_size(s, msg.nindexes), FILE, what):
            return
        indexes = []
        with self.guard(FILE, what):
            indexes = read_table(self.reader, msg)
            self.shared_uses = SharedUses(self.f, indexes)
        for index in indexes:
            if index.index_address is None and index.num_messages == 0:
                continue   # emptied: libhdf5 deletes an index (and its heap) with its last message
            if index.index_type == sohm_table.LIST:
                what = "shared message list"
                if self.add(index.index_address, sohm_table.list_size(s, index.list_cutoff), FILE, what):
                    with self.guard(FILE, what):
                        if index.num_messages > index.list_cutoff:
                            raise FormatError(f"{index.num_messages} messages in a list of {index.list_cutoff}")
                        sohm_table.decode_list(self.reader.cursor(index.index_address, sohm_table.list_size(
                            s, index.num_messages), what), index.num_messages)
            else:
                self.btree_v2(FILE, "shared message index", index.index_address)
            if index.heap_address is not None:
                self.fractal_heap(FILE, "shared message heap", index.heap_address)

    # -- objects --------------------------------------------------------------------------------

    def header_blocks(self, header, path: str, label: str = "object header") -> None:
        for i, block in enumerate(header.blocks):
            self.add(block.address, block.length, path, label if i == 0 else f"{label} continuation block")

    def object(self, address: int, path: str) -> None:
        header = obj = None
        self.current = address
        with self.guard(path, "object header"):
            header = self.f.header(address, path)
        if header is None:
            return
        self.header_blocks(header, path)
        with self.guard(path, "reference count"):
            self.counts[address] = (_refcount(header, self.sizes), path)
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
                self.symbol_table(path, stab.btree_address, stab.heap_address)
            else:
                info = group.message(LINK_INFO)
                if info is not None and info.heap_address is not None:
                    self.dense(path, "dense links", info)
        if len(self.map.problems) > before:
            return   # the links cannot be read either: reported once
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
            for a in obj.attributes():
                with self.guard(path, f"attribute {a.name!r}"):
                    if a.msg.datatype_shared:
                        self.shared_source(DATATYPE, a.msg.datatype_raw, path)
                    dt, before = a.datatype, len(self.map.problems)
                    self.scan(a.msg.data[:a.dataspace.count * dt.size], dt, path, f"attribute {a.name!r}")
                    if self.decode_all and len(self.map.problems) == before:
                        a.value   # decoded as the mount reads it (bounded): a value it cannot show is damage

    # -- group storage --------------------------------------------------------------------------

    def local_heap(self, path: str, address: int | None, label: str):
        s = self.sizes
        if not self.first_time(("local heap", address)) or not self.add(address, lh.prefix_size(s), path, label):
            return None
        with self.guard(path, label):
            heap = lh_reader.read(self.reader, address, f"{path}: {label}")
            self.add(heap.data_address, len(heap.data), path, f"{label} data segment")
            return heap
        return None

    def symbol_table(self, path: str, btree: int | None, heap_address: int | None) -> None:
        if not self.first_time(("symbol table", btree, heap_address)):
            return
        heap = self.local_heap(path, heap_address, "symbol table local heap")
        if btree is None:
            return
        s, names = self.sizes, []
        leaves = self.btree_v1(path, "symbol table B-tree node", btree, b1.GROUP, 0, self.group_k)
        for addr in leaves:
            label = "symbol table node"
            if not self.add(addr, snod.node_size(s, 2 * self.leaf_k), path, label):
                continue
            with self.guard(path, label):
                node = snod_reader.read_node(self.reader, addr, 2 * self.leaf_k, f"{path}: {label} at {addr}")
                if heap is not None:
                    names += [heap.string(e.name_offset) for e in node.entries]
        if any(a >= b for a, b in pairwise(names)):
            self.problem(path, "symbol table", "link names out of order (or repeated) in the B-tree")

    def btree_v1(self, path: str, label: str, root: int, node_type: int, rank: int, k: int) -> list[int]:
        """Every node's extent (room for 2K entries); returns the leaves' children in key order."""
        size = b1.node_size(node_type, self.sizes, rank, k)
        out: list[int] = []
        stack: list[tuple[int, int | None]] = [(root, None)]
        seen: set[int] = set()
        while stack:
            addr, level = stack.pop()
            if addr in seen:
                self.problem(path, label, f"node at {addr} is reached twice (cycle or shared node)")
                continue
            seen.add(addr)
            if not self.add(addr, size, path, label):
                continue
            with self.guard(path, label):
                node = b1_reader.read_node(self.reader, addr, node_type, rank, f"{path}: {label}")
                if level is not None and node.level != level:
                    raise FormatError(f"node at {addr} has level {node.level}, expected {level}")
                if node.level > b1.MAX_DEPTH:
                    raise FormatError(f"node at {addr} has level {node.level}")
                if node.level:
                    stack += [(child, node.level - 1) for child in reversed(node.children)]
                else:
                    out += node.children
        return out

    def dense(self, path: str, label: str, info) -> None:
        """Dense links or attributes: the heap and both indexes (what the records name is read
        with the object's links and attributes)."""
        self.fractal_heap(path, f"{label} heap", info.heap_address)
        self.btree_v2(path, f"{label} name index", info.name_index_address)
        if info.order_index_address is not None:
            self.btree_v2(path, f"{label} creation-order index", info.order_index_address)

    # -- heaps and trees ------------------------------------------------------------------------

    def fractal_heap(self, path: str, label: str, address: int | None) -> None:
        if not self.first_time(("fractal heap", address)):
            return
        heap = None
        with self.guard(path, label):
            heap = FractalHeap(self.reader, address, f"{path}: {label}")
        if heap is None:
            return
        h = heap.header
        self.add(address, fh.header_size(self.sizes, h.filter_len), path, f"{label} header")
        if h.root_address is not None and h.root_rows == 0:
            entry = fh.DirectEntry(h.root_address, h.root_filtered_size, h.root_filter_mask)
            self.heap_direct(heap, path, label, entry, h.start_block_size, 0)
        elif h.root_address is not None:
            self.heap_indirect(heap, path, label)
        if h.huge_btree_address is not None:
            for rec in self.btree_v2(path, f"{label} huge-object index", h.huge_btree_address, records=True):
                self.add(rec.address, rec.length, path, f"{label} huge object", raw=True)
        if h.free_space_manager_address is not None:
            self.free_space_manager(path, f"{label} free-space manager", h.free_space_manager_address,
                                    fsm.CLIENT_HEAP)

    def heap_direct(self, heap: FractalHeap, path: str, label: str, entry, size: int, offset: int) -> None:
        what = f"{label} direct block"
        if self.add(entry.address, entry.filtered_size if heap.geometry.filtered else size, path, what):
            with self.guard(path, what):
                heap.read_direct(entry.address, size, offset, entry.filtered_size, entry.filter_mask)

    def heap_indirect(self, heap: FractalHeap, path: str, label: str) -> None:
        h, g = heap.header, heap.geometry
        what = f"{label} indirect block"
        stack = [(h.root_address, h.root_rows, 0)]
        while stack:
            addr, nrows, offset = stack.pop()
            ib = None
            if self.add(addr, fh.indirect_block_size(g, nrows), path, what):
                with self.guard(path, what):
                    ib = heap.read_indirect(addr, nrows, offset)   # each step down is smaller: no cycle
            if ib is None:
                continue
            for i, entry in enumerate(ib.direct):
                row, col = divmod(i, g.width)
                size = g.row_block_size[row]
                if entry.address is not None:
                    self.heap_direct(heap, path, label, entry, size, offset + fh.row_offset(h, row) + col * size)
            for j, child in enumerate(ib.indirect):
                row, col = divmod(j, g.width)
                row += g.max_direct_rows
                size = g.row_block_size[row]
                if child is not None:
                    stack.append((child, fh.rows_for_block(g, size), offset + fh.row_offset(h, row) + col * size))

    def btree_v2(self, path: str, label: str, address: int | None, records: bool = False) -> list:
        """The header's and every node's extent; the records of types 1-9 when `records`."""
        hdr, out = None, []
        if not self.add(address, bt.header_size(self.sizes), path, f"{label} header"):
            return out
        with self.guard(path, f"{label} header"):
            hdr = bt_reader.read_header(self.reader, address, f"{path}: {label}")
        if hdr is None or hdr.root_address is None:
            return out
        what, before = f"{label} node", len(self.map.problems)
        stack, seen, total = [(hdr.root_address, hdr.root_nrecords, hdr.depth)], set(), 0
        while stack:
            addr, nrec, depth = stack.pop()
            if addr in seen:
                self.problem(path, what, f"node at {addr} is reached twice (cycle or shared node)")
                continue
            seen.add(addr)
            if not self.add(addr, hdr.node_size, path, what):
                continue
            with self.guard(path, what):
                node = bt_reader.read_node(self.reader, hdr, addr, nrec, depth, f"{path}: {label}")
                if records:
                    out += bt.decode_records(hdr, node, bt.record_decoder(hdr.type), f"{path}: {label}")
                total += nrec
                stack += [(ch.address, ch.nrecords, depth - 1) for ch in node.children]
        if total != hdr.total_records and len(self.map.problems) == before:
            self.problem(path, f"{label} header", f"counts {hdr.total_records} records, the nodes hold {total}")
        return out

    def free_space_manager(self, path: str, label: str, address: int, client: int, slot: int | None = None,
                           stype: int | None = None) -> None:
        """A manager's blocks; a file manager's sections (its `slot`, of section type `stype`
        where the strategy fixes it) are free space."""
        s = self.sizes
        if not self.first_time(("free-space manager", address)) or \
                not self.add(address, fsm.header_size(s), path, f"{label} header"):
            return
        with self.guard(path, label):
            h = fsm.decode_header(self.reader.read(address, fsm.header_size(s), label), address, s, label)
            if h.client != client:
                raise FormatError(f"manager of client {h.client}, expected {client}")
            if h.sections_address is None and client == fsm.CLIENT_FILE and (h.total_sections or h.total_space):
                raise FormatError(f"counts {h.total_sections} sections of {h.total_space} bytes and has no list")
            if h.sections_address is None or not self.add(h.sections_address, h.sections_alloc_size, path,
                                                          f"{label} section list"):
                return
            if h.sections_size > h.sections_alloc_size:
                raise FormatError(f"section list of {h.sections_size} bytes in {h.sections_alloc_size}")
            found = fsm.decode_sections(self.reader.read(h.sections_address, h.sections_size, label), h, s, label)
            if client == fsm.CLIENT_FILE:
                total = sum(st.size * len(st.sections) for st in found.sets)
                counts = h.total_sections, h.serial_sections, h.ghost_sections, h.total_space
                if counts != (found.sections, found.sections, 0, total):
                    self.problem(path, f"{label} header", f"counts {h.total_sections} sections ({h.serial_sections} "
                                 f"serialized, {h.ghost_sections} ghosts) of {h.total_space} bytes, its list "
                                 f"{found.sections} of {total}")
                wrong = [sec for st in found.sets for sec in st.sections if stype is not None and sec.type != stype]
                if wrong:
                    self.problem(path, f"{label} section list", f"{len(wrong)} sections of type {wrong[0].type} "
                                 f"(at {wrong[0].offset}; this manager's are of type {stype})")
                self.map.free += [Extent(sec.offset, st.size, path, f"{label} free section", slot=slot)
                                  for st in found.sets for sec in st.sections]

    # -- datasets ---------------------------------------------------------------------------------

    def dataset(self, ds, path: str) -> None:
        with self.guard(path, "data layout"):
            lay, dt = ds.layout, ds.datatype
            fields = heap_id_fields(dt)
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
            self.local_heap(path, external.heap_address, "external file list local heap")
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
                                          self.edge_unfiltered(lay, rec.coords, space.dims))
                        if fields:
                            self.scan(_inside(data, rec.coords, lay.chunk_dims, space.dims, dt.size), dt, path,
                                      label, fields)

    @staticmethod
    def edge_unfiltered(lay: L.DataLayout, coords: tuple[int, ...], dims: tuple[int, ...]) -> bool:
        return bool(lay.flags & L.DONT_FILTER_PARTIAL_BOUND_CHUNKS) and \
            any((c + 1) * k > d for c, k, d in zip(coords, lay.chunk_dims, dims))

    def index_blocks(self, index, kind: int, path: str) -> None:
        """The extents of the chunk index's own blocks (its chunks come from its records)."""
        if kind == L.BTREE_V1 and index.root is not None:
            self.btree_v1(path, "chunk index B-tree node", index.root, b1.CHUNK, index.rank, self.chunk_k)
        elif kind == L.BTREE_V2 and index.header is not None:
            self.btree_v2(path, "chunk index v2 B-tree", index.header.address)
        elif kind == L.FIXED_ARRAY and index.array is not None:
            self.fixed_array(index.array, path)
        elif kind == L.EXTENSIBLE_ARRAY and index.array is not None:
            self.extensible_array(index.array, path)

    def fixed_array(self, arr, path: str) -> None:
        s, h = self.sizes, arr.header
        self.add(h.address, fa.header_size(s), path, "chunk index fixed array header")
        if h.dblock_address is None:
            return
        pages = sum(h.page_count(p) * h.element_size + 4 for p in range(h.npages))
        what = "chunk index fixed array data block"
        if self.add(h.dblock_address, fa.dblock_size(h, s) + pages, path, what):
            with self.guard(path, what):
                arr.dblock()   # its pages are read with the records

    def extensible_array(self, arr, path: str) -> None:
        s, h = self.sizes, arr.header
        label = "chunk index extensible array"
        self.add(h.address, ea.header_size(s), path, f"{label} header")
        if h.iblock_address is None:
            return
        ib = None
        what = f"{label} index block"
        if self.add(h.iblock_address, ea.index_block_size(h, s, arr.iblock_ndblk_addrs, arr.iblock_nsblk_addrs),
                    path, what):
            with self.guard(path, what):
                ib = arr.index_block_record()
        if ib is None:
            return
        blocks = [(u, addr) for u in range(arr.iblock_nsblks) for addr in
                  ib.dblock_addresses[arr.sblk_info[u].start_dblk:][:arr.sblk_info[u].ndblks]]
        for k, saddr in enumerate(ib.sblock_addresses):
            u = arr.iblock_nsblks + k
            what = f"{label} super block"
            if saddr is None or not self.add(saddr, ea.super_block_size(h, s, arr.bitmap_size(u),
                                                                        arr.sblk_info[u].ndblks), path, what):
                continue
            with self.guard(path, what):
                blocks += [(u, addr) for addr in arr.super_block_record(u, saddr).dblock_addresses]
        page = arr.page_nelmts * h.element_size + 4
        what = f"{label} data block"
        for u, addr in blocks:
            npages, nelmts = arr.npages(u), arr.sblk_info[u].dblk_nelmts
            stored = 0 if npages else nelmts
            if addr is not None and self.add(addr, ea.data_block_size(h, s, stored) + npages * page, path, what):
                with self.guard(path, what):
                    arr.data_block_record(addr, stored)

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
            col = self.collections[address] = None
            with self.guard(path, f"{where}: global heap collection at {address}"):
                col = self.f.global_heap.collection(address)
                self.add(address, col.size, path, "global heap collection", raw=True)
                self.collections[address] = col
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


def _refcount(header, sizes) -> int:
    """An object header's link count: v1's prefix field, v2's reference count message (1
    without one)."""
    if header.version == 1:
        return header.refcount
    raw = header.first(REFCOUNT)
    return 1 if raw is None else small.decode_refcount(Reader(raw.data, 0, sizes, "reference count message"))
