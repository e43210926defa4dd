"""Version 2 B-trees (spec III.A.2): header, internal and leaf nodes, records of types 1-11.

Reading only. Every node's checksum is verified. The widths of the "number of records" fields in
internal nodes follow libhdf5's H5B2__hdr_init exactly:

- leaf capacity  ``max_nrec[0] = (node_size - 10) // record_size``;
- ``max_nrec_size`` (width of every "number of records in child" field) is the encoded size of
  ``max_nrec[0]`` (the leaf capacity is the largest of all levels);
- for each internal level ``d >= 1``: a child pointer is ``sizeof_addr + max_nrec_size +
  (cum_max_nrec_size[d-1] if d > 1 else 0)`` bytes, ``max_nrec[d] = (node_size - 10 - ptr) //
  (record_size + ptr)`` and ``cum_max_nrec[d] = (max_nrec[d] + 1) * cum_max_nrec[d-1] +
  max_nrec[d]``; the "total records in child" field of a node at depth ``d`` is
  ``cum_max_nrec_size[d-1]`` bytes wide.

"Encoded size" is libhdf5's H5VM_limit_enc_size: ``floor(log2(n)) // 8 + 1``, the minimal number
of bytes (255 -> 1, 256 -> 2).

The checksum of a node covers only the bytes actually used (prefix, records, child pointers) and
sits right after them, not at the end of the node.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Iterator, TypeVar

from ..errors import FormatError, Unsupported
from .checksum import verify
from .codec import Reader, Sizes

R = TypeVar("R")

SIG_HEADER, SIG_INTERNAL, SIG_LEAF = b"BTHD", b"BTIN", b"BTLF"
NODE_PREFIX = 10          # signature + version + type + checksum
MAX_DEPTH = 64            # libhdf5 could store up to 65535; real trees are < 10 deep
MAX_NODE_SIZE = 1 << 24   # libhdf5 defaults to 512..4096; refuse absurd sizes

# Record types
HUGE_INDIRECT, HUGE_INDIRECT_FILTERED, HUGE_DIRECT, HUGE_DIRECT_FILTERED = 1, 2, 3, 4
LINK_NAME, LINK_CORDER, SOHM, ATTR_NAME, ATTR_CORDER = 5, 6, 7, 8, 9
CHUNK, CHUNK_FILTERED = 10, 11


def limit_enc_size(n: int) -> int:
    """H5VM_limit_enc_size: bytes libhdf5 uses to encode values up to n."""
    return (max(n, 1).bit_length() - 1) // 8 + 1


@dataclass(frozen=True)
class LevelInfo:
    max_nrec: int          # records a node at this depth can hold
    cum_max_nrec: int      # records a subtree rooted at this depth can hold
    cum_max_nrec_size: int  # bytes of a "total records" field counting such a subtree


@dataclass(frozen=True)
class BTreeV2Header:
    address: int
    version: int
    type: int
    node_size: int
    record_size: int
    depth: int
    split_percent: int
    merge_percent: int
    root_address: int | None
    root_nrecords: int
    total_records: int
    sizes: Sizes
    max_nrec_size: int
    levels: tuple[LevelInfo, ...]   # index = depth (0 = leaves) .. header depth

    def pointer_size(self, depth: int) -> int:
        """Bytes of one child pointer stored in an internal node at `depth` (>= 1)."""
        return self.sizes.offset + self.max_nrec_size + (self.levels[depth - 1].cum_max_nrec_size if depth > 1 else 0)


def _levels(node_size: int, record_size: int, depth: int, sizes: Sizes, what: str) -> tuple[int, tuple[LevelInfo, ...]]:
    leaf_max = (node_size - NODE_PREFIX) // record_size
    if leaf_max < 1:
        raise FormatError(f"{what}: node size {node_size} holds no record of {record_size} bytes")
    max_nrec_size = limit_enc_size(leaf_max)
    levels = [LevelInfo(leaf_max, leaf_max, 0)]
    for d in range(1, depth + 1):
        ptr = sizes.offset + max_nrec_size + (levels[d - 1].cum_max_nrec_size if d > 1 else 0)
        nrec = (node_size - (NODE_PREFIX + ptr)) // (record_size + ptr)
        if nrec < 1:
            raise FormatError(f"{what}: internal nodes at depth {d} hold no record")
        cum = (nrec + 1) * levels[d - 1].cum_max_nrec + nrec
        levels.append(LevelInfo(nrec, cum, limit_enc_size(cum)))
    if max_nrec_size > 8 or any(lv.cum_max_nrec_size > 8 for lv in levels):
        # libhdf5 would overflow its 64-bit counters here: such a tree cannot be real
        raise FormatError(f"{what}: depth {depth} is too large for node size {node_size}")
    return max_nrec_size, tuple(levels)


def decode_header(buf: bytes | memoryview, address: int, sizes: Sizes, what: str = "v2 B-tree header") -> BTreeV2Header:
    c = Reader(buf, 0, sizes, what)
    c.signature(SIG_HEADER)
    version = c.u8()
    if version not in (0, 1):
        raise Unsupported(f"{what}: version {version}")
    btype = c.u8()
    node_size = c.u32()
    record_size = c.u16()
    depth = c.u16()
    split, merge = c.u8(), c.u8()
    root = c.offset()
    root_nrec = c.u16()
    total = c.length()
    end = c.pos
    c.skip(4)
    verify(bytes(c.buf[:end + 4]), what)
    if record_size == 0:
        raise FormatError(f"{what}: zero record size")
    if not NODE_PREFIX < node_size <= MAX_NODE_SIZE:
        raise FormatError(f"{what}: implausible node size {node_size}")
    if depth > MAX_DEPTH:
        raise FormatError(f"{what}: absurd depth {depth}")
    max_nrec_size, levels = _levels(node_size, record_size, depth, sizes, what)
    if root is None and (root_nrec or total):
        raise FormatError(f"{what}: records counted but no root node")
    if root_nrec > levels[depth].max_nrec:
        raise FormatError(f"{what}: root holds {root_nrec} records, at most {levels[depth].max_nrec} fit")
    return BTreeV2Header(address, version, btype, node_size, record_size, depth, split, merge, root,
                         root_nrec, total, sizes, max_nrec_size, levels)


def header_size(sizes: Sizes) -> int:
    return 4 + 1 + 1 + 4 + 2 + 2 + 1 + 1 + sizes.offset + 2 + sizes.length + 4


def read_header(reader, address: int | None, what: str = "v2 B-tree") -> BTreeV2Header:
    buf = reader.read(address, header_size(reader.sizes), f"{what} header")
    return decode_header(buf, address, reader.sizes, f"{what} header at {address}")


@dataclass(frozen=True)
class ChildPointer:
    address: int
    nrecords: int        # records in the child node itself
    total_records: int   # records in the child's subtree


@dataclass(frozen=True)
class Node:
    address: int
    depth: int
    records: tuple[bytes, ...]           # raw record bytes, `record_size` each
    children: tuple[ChildPointer, ...]   # empty for leaves; len(records) + 1 otherwise


class NodeCache:
    """A small LRU of checked, parsed nodes (and their decoded records), so that repeated lookups
    in one tree do not re-read, re-checksum and re-decode the upper levels."""

    def __init__(self, capacity: int = 128):
        self.capacity = capacity
        self._nodes: OrderedDict[tuple, object] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple):
        with self._lock:
            node = self._nodes.get(key)
            if node is not None:
                self._nodes.move_to_end(key)
            return node

    def put(self, key: tuple, node) -> None:
        with self._lock:
            self._nodes[key] = node
            while len(self._nodes) > self.capacity:
                self._nodes.popitem(last=False)


def read_node(reader, hdr: BTreeV2Header, address: int | None, nrec: int, depth: int, what: str = "v2 B-tree",
              cache: NodeCache | None = None) -> Node:
    """One node of `hdr`'s tree holding `nrec` records at `depth` (0 = leaf)."""
    if cache is not None and address is not None:
        hit = cache.get((address, nrec, depth))
        if isinstance(hit, Node):
            return hit
        node = read_node(reader, hdr, address, nrec, depth, what)
        cache.put((address, nrec, depth), node)
        return node
    if not 0 <= depth <= hdr.depth:
        raise FormatError(f"{what}: node depth {depth} outside the tree's depth {hdr.depth}")
    if nrec > hdr.levels[depth].max_nrec:
        raise FormatError(f"{what}: node at {address} claims {nrec} records, at most {hdr.levels[depth].max_nrec} fit")
    ptr_size = hdr.pointer_size(depth) if depth > 0 else 0
    used = 6 + nrec * hdr.record_size + (nrec + 1) * ptr_size
    if used + 4 > hdr.node_size:
        raise FormatError(f"{what}: node at {address} overflows the node size")
    kind = "internal node" if depth else "leaf node"
    label = f"{what} {kind} at {address}"
    buf = reader.read(address, used + 4, label)
    c = Reader(buf, 0, hdr.sizes, label)
    c.signature(SIG_INTERNAL if depth else SIG_LEAF)
    version = c.u8()
    if version != 0:
        raise Unsupported(f"{label}: version {version}")
    btype = c.u8()
    if btype != hdr.type:
        raise FormatError(f"{label}: type {btype} differs from the header's type {hdr.type}")
    verify(buf, label)
    records = tuple(c.bytes(hdr.record_size) for _ in range(nrec))
    children: list[ChildPointer] = []
    if depth:
        tot_size = hdr.levels[depth - 1].cum_max_nrec_size if depth > 1 else 0
        child_max = hdr.levels[depth - 1].max_nrec
        for _ in range(nrec + 1):
            addr = c.offset()
            n = c.uint(hdr.max_nrec_size)
            total = c.uint(tot_size) if depth > 1 else n
            if addr is None:
                raise FormatError(f"{label}: undefined child address")
            if n > child_max or total > hdr.levels[depth - 1].cum_max_nrec or total < n:
                raise FormatError(f"{label}: implausible child record counts {n}/{total}")
            children.append(ChildPointer(addr, n, total))
    return Node(address, depth, records, tuple(children))


def _decode_all(hdr: BTreeV2Header, node: Node, decode_record: Callable[[Reader], R], what: str) -> list[R]:
    out = []
    for raw in node.records:
        out.append(decode_record(Reader(raw, 0, hdr.sizes, f"{what} record")))
    return out


def _decoded(reader, hdr: BTreeV2Header, addr: int, nrec: int, depth: int, decode_record, what: str,
             cache: NodeCache | None) -> tuple[Node, list]:
    """A node and its decoded records, both cached when a cache is given."""
    if cache is None:
        node = read_node(reader, hdr, addr, nrec, depth, what)
        return node, _decode_all(hdr, node, decode_record, what)
    key = (addr, nrec, depth, decode_record)
    hit = cache.get(key)
    if hit is None:
        node = read_node(reader, hdr, addr, nrec, depth, what)
        hit = (node, _decode_all(hdr, node, decode_record, what))
        cache.put(key, hit)
    return hit


def iterate(reader, address: int | None, decode_record: Callable[[Reader], R] | str | None = None,
            what: str = "v2 B-tree", expect_type: int | None = None,
            header: BTreeV2Header | None = None, cache: NodeCache | None = None) -> Iterator[R]:
    """Every record of the tree whose header is at `address`, in key order.

    Without `decode_record` the decoder is chosen by the header's type (1-9; types 10/11 need
    `chunk_record_decoder`). A string in its place is taken as `what`.
    """
    if isinstance(decode_record, str):
        decode_record, what = None, decode_record
    hdr = header or read_header(reader, address, what)
    if decode_record is None:
        decode_record = record_decoder(hdr.type)
    if expect_type is not None and hdr.type != expect_type:
        raise FormatError(f"{what}: B-tree type {hdr.type}, expected {expect_type}")
    if hdr.root_address is None:
        return
    seen: set[int] = set()
    count = 0

    def walk(addr: int, nrec: int, depth: int) -> Iterator[R]:
        nonlocal count
        if addr in seen:
            raise FormatError(f"{what}: node at {addr} is reached twice (cycle or shared node)")
        seen.add(addr)
        node, recs = _decoded(reader, hdr, addr, nrec, depth, decode_record, what, cache)
        if depth == 0:
            count += len(recs)
            yield from recs
            return
        for i, ch in enumerate(node.children):
            yield from walk(ch.address, ch.nrecords, depth - 1)
            if i < len(recs):
                count += 1
                yield recs[i]

    yield from walk(hdr.root_address, hdr.root_nrecords, hdr.depth)
    if count != hdr.total_records:
        raise FormatError(f"{what}: header counts {hdr.total_records} records, the nodes hold {count}")


def find(reader, address: int | None, compare: Callable[[R], int],
         decode_record: Callable[[Reader], R] | None = None, what: str = "v2 B-tree",
         header: BTreeV2Header | None = None, cache: NodeCache | None = None) -> R | None:
    """The record for which compare(record) == 0, descending from the root only.

    `compare(record)` answers the sign of (wanted key - record's key): negative when the wanted
    key sorts before the record, 0 on a match, positive after it.
    """
    hdr = header or read_header(reader, address, what)
    if decode_record is None:
        decode_record = record_decoder(hdr.type)
    if hdr.root_address is None:
        return None
    addr, nrec, depth = hdr.root_address, hdr.root_nrecords, hdr.depth
    for _ in range(hdr.depth + 1):
        node, recs = _decoded(reader, hdr, addr, nrec, depth, decode_record, what, cache)
        lo, hi = 0, len(recs)
        while lo < hi:  # first record whose key >= wanted
            mid = (lo + hi) // 2
            if compare(recs[mid]) > 0:
                lo = mid + 1
            else:
                hi = mid
        if lo < len(recs) and compare(recs[lo]) == 0:
            return recs[lo]
        if depth == 0:
            return None
        ch = node.children[lo]
        addr, nrec, depth = ch.address, ch.nrecords, depth - 1
    raise FormatError(f"{what}: descent did not end at a leaf")  # pragma: no cover


# ---------------------------------------------------------------------------------------------
# Records


@dataclass(frozen=True)
class HugeObjectRecord:
    """Types 1-4: a 'huge' fractal heap object stored on its own."""

    address: int | None
    length: int                 # bytes in the file (after filters)
    id: int | None = None       # types 1 and 2: the key stored in the heap ID
    filter_mask: int = 0        # types 2 and 4
    memory_size: int | None = None  # types 2 and 4: size once de-filtered


@dataclass(frozen=True)
class LinkNameRecord:       # type 5
    hash: int
    heap_id: bytes          # 7 bytes


@dataclass(frozen=True)
class LinkCorderRecord:     # type 6
    corder: int
    heap_id: bytes          # 7 bytes


@dataclass(frozen=True)
class SharedMessageRecord:  # type 7
    location: int           # 0: in the SOHM heap, 1: in an object header
    hash: int
    refcount: int = 0
    heap_id: bytes = b""
    msg_type: int = 0
    oh_index: int = 0
    oh_address: int | None = None


@dataclass(frozen=True)
class AttrNameRecord:       # type 8
    heap_id: bytes          # 8 bytes
    flags: int
    corder: int
    hash: int


@dataclass(frozen=True)
class AttrCorderRecord:     # type 9
    heap_id: bytes
    flags: int
    corder: int


@dataclass(frozen=True)
class ChunkRecordV2:        # types 10 and 11
    address: int | None
    scaled: tuple[int, ...]  # chunk-grid coordinates
    size: int = 0            # type 11 only (type 10: the caller knows the chunk size)
    filter_mask: int = 0


def decode_huge_indirect(c: Reader) -> HugeObjectRecord:
    return HugeObjectRecord(c.offset(), c.length(), id=c.length())


def decode_huge_indirect_filtered(c: Reader) -> HugeObjectRecord:
    addr, length, mask, msize = c.offset(), c.length(), c.u32(), c.length()
    return HugeObjectRecord(addr, length, id=c.length(), filter_mask=mask, memory_size=msize)


def decode_huge_direct(c: Reader) -> HugeObjectRecord:
    return HugeObjectRecord(c.offset(), c.length())


def decode_huge_direct_filtered(c: Reader) -> HugeObjectRecord:
    addr, length, mask = c.offset(), c.length(), c.u32()
    return HugeObjectRecord(addr, length, filter_mask=mask, memory_size=c.length())


def decode_link_name(c: Reader) -> LinkNameRecord:
    return LinkNameRecord(c.u32(), c.bytes(7))


def decode_link_corder(c: Reader) -> LinkCorderRecord:
    return LinkCorderRecord(c.u64(), c.bytes(7))


def decode_sohm(c: Reader) -> SharedMessageRecord:
    loc = c.u8()
    h = c.u32()
    if loc == 0:
        return SharedMessageRecord(loc, h, refcount=c.u32(), heap_id=c.bytes(8))
    if loc == 1:
        c.skip(1)
        mtype = c.u8()
        idx = c.u16()
        return SharedMessageRecord(loc, h, msg_type=mtype, oh_index=idx, oh_address=c.offset())
    raise FormatError(f"{c.what}: unknown shared message location {loc}")


def decode_attr_name(c: Reader) -> AttrNameRecord:
    return AttrNameRecord(c.bytes(8), c.u8(), c.u32(), c.u32())


def decode_attr_corder(c: Reader) -> AttrCorderRecord:
    return AttrCorderRecord(c.bytes(8), c.u8(), c.u32())


def chunk_size_width(chunk_nbytes: int, sizes: Sizes, wide: bool = False) -> int:
    """Bytes of the 'chunk size' field of filtered chunk records (v2 B-tree type 11, fixed and
    extensible array elements).

    libhdf5 (H5D__bt2/farray/earray_crt_context) allows one byte more than the unfiltered
    chunk size needs: ``1 + (log2(nbytes) + 8) // 8``, at most 8. libhdf5 2.0's layout message
    version 5 (`DataLayout.wide_chunk_sizes`) uses `size of lengths` instead.
    """
    if wide:
        return sizes.length
    return min(8, 1 + ((max(chunk_nbytes, 1).bit_length() - 1) + 8) // 8)


def chunk_record_decoder(rank: int, filtered: bool, size_width: int = 0) -> Callable[[Reader], ChunkRecordV2]:
    """Decoder for type 10 (filtered=False) or 11 records of a `rank`-dimensional dataset."""
    if not 1 <= rank <= 32:
        raise FormatError(f"v2 B-tree chunk records: rank {rank} out of range")
    if filtered and not 1 <= size_width <= 8:
        raise FormatError(f"v2 B-tree chunk records: chunk size width {size_width} out of range")

    def decode(c: Reader) -> ChunkRecordV2:
        addr = c.offset()
        if filtered:
            size = c.uint(size_width)
            mask = c.u32()
        else:
            size = mask = 0
        scaled = tuple(c.u64() for _ in range(rank))
        return ChunkRecordV2(addr, scaled, size, mask)

    return decode


def chunk_record_size(sizes: Sizes, rank: int, filtered: bool, size_width: int = 0) -> int:
    return sizes.offset + (size_width + 4 if filtered else 0) + 8 * rank


RECORD_DECODERS: dict[int, Callable[[Reader], object]] = {
    HUGE_INDIRECT: decode_huge_indirect, HUGE_INDIRECT_FILTERED: decode_huge_indirect_filtered,
    HUGE_DIRECT: decode_huge_direct, HUGE_DIRECT_FILTERED: decode_huge_direct_filtered,
    LINK_NAME: decode_link_name, LINK_CORDER: decode_link_corder, SOHM: decode_sohm,
    ATTR_NAME: decode_attr_name, ATTR_CORDER: decode_attr_corder,
}


def record_decoder(btype: int, rank: int = 0, size_width: int = 0) -> Callable[[Reader], object]:
    """The decoder for records of B-tree type `btype` (types 10/11 need the rank, 11 the width)."""
    if btype in RECORD_DECODERS:
        return RECORD_DECODERS[btype]
    if btype == CHUNK:
        return chunk_record_decoder(rank, False)
    if btype == CHUNK_FILTERED:
        return chunk_record_decoder(rank, True, size_width)
    raise Unsupported(f"v2 B-tree record type {btype}")
