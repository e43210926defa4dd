"""Version 2 B-trees (spec III.A.2): header, internal and leaf nodes, records of types 1-13.

Types 12 and 13 index structured chunks (spec 3.0): address, chunk size, scaled offsets, then the
chunk's section metadata (format/structured_chunk.py), with header version 1; their nodes keep
version 0 (the spec changes only the header).

Decoders verify every checksum; encoders recompute it. Whole structures encode to bytes
(`encode_header`, `encode_node`); records live inside nodes, so their encoders write into a
Writer (`encode_link_name(w, record)`, ..., `record_encoder(type)`), and `encode_records` packs
a node's records at the header's record size.

The widths of the "number of records" fields in internal nodes follow libhdf5's H5B2__hdr_init
exactly:

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
sits right after them, not at the end of the node; libhdf5 zero-fills the rest of the node, and so
does `encode_node`. A record shorter than the record size (a type 7 record of a message in an
object header with offsets narrower than 8 bytes) leaves its tail undefined: it encodes as zeros.

Pure bytes <-> records; h5fs.storage.btree_v2.reader reads and walks trees.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, TypeVar

from ..errors import FormatError, Unsupported
from .checksum import sealed, verify
from .codec import Reader, Sizes, Writer, as_uint, uint_code, uint_field
from .structured_chunk import Composition, SectionMeta, meta_fields, meta_from_fields, meta_layout

R = TypeVar("R")

SIG_HEADER, SIG_INTERNAL, SIG_LEAF = b"BTHD", b"BTIN", b"BTLF"
NODE_PREFIX = 10          # signature + version + type + checksum
MAX_DEPTH = 64            # libhdf5 could store up to 65535; real trees are < 10 deep
MAX_NODE_SIZE = 1 << 24   # libhdf5 defaults to 512..4096; refuse absurd sizes
HEADER_LAYOUT = "4sBBIHHBBOHL"

# Record types
HUGE_INDIRECT, HUGE_INDIRECT_FILTERED, HUGE_DIRECT, HUGE_DIRECT_FILTERED = 1, 2, 3, 4
LINK_NAME, LINK_CORDER, SOHM, ATTR_NAME, ATTR_CORDER = 5, 6, 7, 8, 9
CHUNK, CHUNK_FILTERED = 10, 11
STRUCTURED, STRUCTURED_FILTERED = 12, 13   # structured chunks (spec 3.0): header version 1


def limit_enc_size(n: int) -> int:
    """H5VM_limit_enc_size: bytes libhdf5 uses to encode values up to n."""
    return (max(n, 1).bit_length() - 1) // 8 + 1


@dataclass(frozen=True, slots=True)
class LevelInfo:
    max_nrec: int          # records a node at this depth can hold
    cum_max_nrec: int      # records a subtree rooted at this depth can hold
    cum_max_nrec_size: int  # bytes of a "total records" field counting such a subtree


@dataclass(frozen=True, slots=True)
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

    def pointer_layout(self, depth: int) -> struct.Struct:
        """The Struct of one child pointer of an internal node at `depth` (>= 1)."""
        spec = "O" + uint_code(self.max_nrec_size)
        if depth > 1:
            spec += uint_code(self.levels[depth - 1].cum_max_nrec_size)
        return self.sizes.layout(spec)


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
    sig, version, btype, node_size, record_size, depth, split, merge, root, root_nrec, total = c.fields(HEADER_LAYOUT)
    if sig != SIG_HEADER:
        raise FormatError(f"{what}: bad signature {sig!r}, expected {SIG_HEADER!r}")
    if version not in (0, 1):
        raise Unsupported(f"{what}: version {version}")
    root = sizes.address(root)
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


def encode_header(hdr: BTreeV2Header) -> bytes:
    w = Writer(hdr.sizes)
    w.fields(HEADER_LAYOUT, SIG_HEADER, hdr.version, hdr.type, hdr.node_size, hdr.record_size, hdr.depth,
             hdr.split_percent, hdr.merge_percent, hdr.sizes.raw_address(hdr.root_address), hdr.root_nrecords,
             hdr.total_records)
    return sealed(w.buf)


def header_size(sizes: Sizes) -> int:
    return sizes.layout(HEADER_LAYOUT).size + 4


@dataclass(frozen=True, slots=True)
class ChildPointer:
    address: int
    nrecords: int        # records in the child node itself
    total_records: int   # records in the child's subtree


@dataclass(frozen=True, slots=True)
class Node:
    address: int
    depth: int
    records: tuple[bytes, ...]           # raw record bytes, `record_size` each
    children: tuple[ChildPointer, ...]   # empty for leaves; len(records) + 1 otherwise


def node_label(hdr: BTreeV2Header, address: int | None, depth: int, what: str) -> str:
    return f"{what} {'internal node' if depth else 'leaf node'} at {address}"


def used_size(hdr: BTreeV2Header, address: int | None, nrec: int, depth: int, what: str) -> int:
    """Bytes a node holding `nrec` records at `depth` uses, checksum included; checks both."""
    if not 0 <= depth <= hdr.depth:
        raise FormatError(f"{what}: node depth {depth} outside the tree's depth {hdr.depth}")
    if nrec > hdr.levels[depth].max_nrec:
        raise FormatError(f"{what}: node at {address} claims {nrec} records, at most {hdr.levels[depth].max_nrec} fit")
    ptr_size = hdr.pointer_size(depth) if depth > 0 else 0
    used = 6 + nrec * hdr.record_size + (nrec + 1) * ptr_size
    if used + 4 > hdr.node_size:
        raise FormatError(f"{what}: node at {address} overflows the node size")
    return used + 4


def decode_node(buf: bytes | memoryview, hdr: BTreeV2Header, address: int | None, nrec: int, depth: int,
                what: str = "v2 B-tree") -> Node:
    """A node of `hdr`'s tree holding `nrec` records at `depth` (0 = leaf) from its used bytes
    (`buf` may run on to the end of the node)."""
    size = used_size(hdr, address, nrec, depth, what)
    label = node_label(hdr, address, depth, what)
    c = Reader(buf, 0, hdr.sizes, label)
    sig, version, btype = c.fields("4sBB")
    if sig != (SIG_INTERNAL if depth else SIG_LEAF):
        raise FormatError(f"{label}: bad signature {sig!r}, expected {SIG_INTERNAL if depth else SIG_LEAF!r}")
    if version != 0:
        raise Unsupported(f"{label}: version {version}")
    if btype != hdr.type:
        raise FormatError(f"{label}: type {btype} differs from the header's type {hdr.type}")
    c.need(size - c.pos)
    verify(c.buf[:size], label)
    rs = hdr.record_size
    raw = c.bytes(nrec * rs)
    records = tuple(raw[i:i + rs] for i in range(0, len(raw), rs))
    children: list[ChildPointer] = []
    if depth:
        child = hdr.levels[depth - 1]
        st = hdr.pointer_layout(depth)
        for fields in st.iter_unpack(c.bytes((nrec + 1) * st.size)):
            addr, n = hdr.sizes.address(fields[0]), as_uint(fields[1])
            total = as_uint(fields[2]) if depth > 1 else n
            if addr is None:
                raise FormatError(f"{label}: undefined child address")
            if n > child.max_nrec or total > child.cum_max_nrec or total < n:
                raise FormatError(f"{label}: implausible child record counts {n}/{total}")
            children.append(ChildPointer(addr, n, total))
    return Node(address, depth, records, tuple(children))


def encode_node(hdr: BTreeV2Header, node: Node) -> bytes:
    """The node's whole image (`node_size` bytes): prefix, records, child pointers, checksum,
    zeros."""
    w = Writer(hdr.sizes)
    w.fields("4sBB", SIG_INTERNAL if node.depth else SIG_LEAF, 0, hdr.type)
    for raw in node.records:
        if len(raw) != hdr.record_size:
            raise ValueError(f"record of {len(raw)} bytes in a tree of {hdr.record_size}-byte records")
        w.bytes(raw)
    if node.depth:
        st = hdr.pointer_layout(node.depth)
        tot = hdr.levels[node.depth - 1].cum_max_nrec_size
        for ch in node.children:
            values = [ch.address, uint_field(ch.nrecords, hdr.max_nrec_size)]
            if node.depth > 1:
                values.append(uint_field(ch.total_records, tot))
            w.pack(st, *values)
    out = sealed(w.buf)
    return out + bytes(hdr.node_size - len(out))


def decode_records(hdr: BTreeV2Header, node: Node, decode_record: Callable[[Reader], R], what: str) -> list[R]:
    """The node's records, decoded by `decode_record`, each within its record size (all in one
    struct run when the decoder is one struct filling the record)."""
    rs = hdr.record_size
    raw = b"".join(node.records)
    spec = getattr(decode_record, "spec", None)
    if spec is not None and hdr.sizes.layout(spec).size == rs:
        build = decode_record.build  # type: ignore[attr-defined]
        return [build(hdr.sizes, v) for v in hdr.sizes.layout(spec).iter_unpack(raw)]
    c = Reader(raw, 0, hdr.sizes, f"{what} record")
    out = []
    for end in range(rs, rs * len(node.records) + 1, rs):
        out.append(decode_record(c))
        if c.pos > end:
            raise FormatError(f"{what}: record overruns its {rs} bytes")
        c.pos = end
    return out


def encode_records(hdr: BTreeV2Header, encode_record: Callable[[Writer, R], None], records) -> tuple[bytes, ...]:
    """Raw record bytes for a Node: each record encoded and zero-padded to the record size."""
    out = []
    for rec in records:
        w = Writer(hdr.sizes)
        encode_record(w, rec)
        if w.pos > hdr.record_size:
            raise ValueError(f"record of {w.pos} bytes in a tree of {hdr.record_size}-byte records")
        w.zeros(hdr.record_size - w.pos)
        out.append(w.getvalue())
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Records


@dataclass(frozen=True, slots=True)
class HugeObjectRecord:
    """Types 1-4: a 'huge' fractal heap object stored on its own."""

    address: int | None
    length: int                 # bytes in the file (after filters)
    id: int | None = None       # types 1 and 2: the key stored in the heap ID
    filter_mask: int = 0        # types 2 and 4
    memory_size: int | None = None  # types 2 and 4: size once de-filtered


@dataclass(frozen=True, slots=True)
class LinkNameRecord:       # type 5
    hash: int
    heap_id: bytes          # 7 bytes


@dataclass(frozen=True, slots=True)
class LinkCorderRecord:     # type 6
    corder: int
    heap_id: bytes          # 7 bytes


@dataclass(frozen=True, slots=True)
class SharedMessageRecord:  # type 7
    location: int           # 0: in the SOHM heap, 1: in an object header
    hash: int
    refcount: int = 0
    heap_id: bytes = b""
    msg_type: int = 0
    oh_index: int = 0
    oh_address: int | None = None


@dataclass(frozen=True, slots=True)
class AttrNameRecord:       # type 8
    heap_id: bytes          # 8 bytes
    flags: int
    corder: int
    hash: int


@dataclass(frozen=True, slots=True)
class AttrCorderRecord:     # type 9
    heap_id: bytes
    flags: int
    corder: int


@dataclass(frozen=True, slots=True)
class ChunkRecordV2:        # types 10 to 13
    address: int | None
    scaled: tuple[int, ...]  # chunk-grid coordinates
    size: int = 0            # types 11-13 (type 10: the caller knows the chunk size)
    filter_mask: int = 0     # type 11
    sections: SectionMeta | None = None   # types 12 and 13


def struct_decoder(spec: str, build: Callable[[Sizes, tuple], R]) -> Callable[[Reader], R]:
    """A record decoder made of one struct run (`spec`) and a constructor of the record from its
    fields; `decode_records` decodes a node's records in one run with the two."""
    def decode(c: Reader) -> R:
        return build(c.sizes, c.fields(spec))

    decode.spec, decode.build = spec, build  # type: ignore[attr-defined]
    return decode


decode_huge_indirect = struct_decoder("OLL", lambda s, v: HugeObjectRecord(s.address(v[0]), v[1], id=v[2]))


def encode_huge_indirect(w: Writer, r: HugeObjectRecord) -> None:
    w.fields("OLL", w.sizes.raw_address(r.address), r.length, r.id)


decode_huge_indirect_filtered = struct_decoder(
    "OLILL", lambda s, v: HugeObjectRecord(s.address(v[0]), v[1], id=v[4], filter_mask=v[2], memory_size=v[3]))


def encode_huge_indirect_filtered(w: Writer, r: HugeObjectRecord) -> None:
    w.fields("OLILL", w.sizes.raw_address(r.address), r.length, r.filter_mask, r.memory_size, r.id)


decode_huge_direct = struct_decoder("OL", lambda s, v: HugeObjectRecord(s.address(v[0]), v[1]))


def encode_huge_direct(w: Writer, r: HugeObjectRecord) -> None:
    w.fields("OL", w.sizes.raw_address(r.address), r.length)


decode_huge_direct_filtered = struct_decoder(
    "OLIL", lambda s, v: HugeObjectRecord(s.address(v[0]), v[1], filter_mask=v[2], memory_size=v[3]))


def encode_huge_direct_filtered(w: Writer, r: HugeObjectRecord) -> None:
    w.fields("OLIL", w.sizes.raw_address(r.address), r.length, r.filter_mask, r.memory_size)


decode_link_name = struct_decoder("I7s", lambda s, v: LinkNameRecord(*v))


def encode_link_name(w: Writer, r: LinkNameRecord) -> None:
    w.fields("I7s", r.hash, r.heap_id)


decode_link_corder = struct_decoder("Q7s", lambda s, v: LinkCorderRecord(*v))


def encode_link_corder(w: Writer, r: LinkCorderRecord) -> None:
    w.fields("Q7s", r.corder, r.heap_id)


def decode_sohm(c: Reader) -> SharedMessageRecord:
    loc, h = c.fields("BI")
    if loc == 0:
        refcount, heap_id = c.fields("I8s")
        return SharedMessageRecord(loc, h, refcount=refcount, heap_id=heap_id)
    if loc == 1:
        _, mtype, idx, addr = c.fields("BBHO")   # a reserved byte first
        return SharedMessageRecord(loc, h, msg_type=mtype, oh_index=idx, oh_address=c.sizes.address(addr))
    raise FormatError(f"{c.what}: unknown shared message location {loc}")


def encode_sohm(w: Writer, r: SharedMessageRecord) -> None:
    w.fields("BI", r.location, r.hash)
    if r.location == 0:
        w.fields("I8s", r.refcount, r.heap_id)
    else:
        w.fields("BBHO", 0, r.msg_type, r.oh_index, w.sizes.raw_address(r.oh_address))


decode_attr_name = struct_decoder("8sBII", lambda s, v: AttrNameRecord(*v))


def encode_attr_name(w: Writer, r: AttrNameRecord) -> None:
    w.fields("8sBII", r.heap_id, r.flags, r.corder, r.hash)


decode_attr_corder = struct_decoder("8sBI", lambda s, v: AttrCorderRecord(*v))


def encode_attr_corder(w: Writer, r: AttrCorderRecord) -> None:
    w.fields("8sBI", r.heap_id, r.flags, r.corder)


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


def chunk_type(filtered: bool, structured: bool) -> int:
    if structured:
        return STRUCTURED_FILTERED if filtered else STRUCTURED
    return CHUNK_FILTERED if filtered else CHUNK


def _chunk_layout(rank: int, filtered: bool, size_width: int, comp: Composition | None = None) -> str:
    if not 1 <= rank <= 32:
        raise FormatError(f"v2 B-tree chunk records: rank {rank} out of range")
    if (filtered or comp is not None) and not 1 <= size_width <= 8:
        raise FormatError(f"v2 B-tree chunk records: chunk size width {size_width} out of range")
    if comp is not None:   # types 12/13: address, size, scaled offsets, section metadata
        return "O" + uint_code(size_width) + "Q" * rank + meta_layout(comp, filtered)
    return "O" + (uint_code(size_width) + "I" if filtered else "") + "Q" * rank


@lru_cache(maxsize=256)
def chunk_record_decoder(rank: int, filtered: bool, size_width: int = 0,
                         comp: Composition | None = None) -> Callable[[Reader], ChunkRecordV2]:
    """Decoder for type 10 (filtered=False) or 11 records of a `rank`-dimensional dataset, or
    with `comp` types 12/13 (one struct per record; the same function for the same arguments,
    so it can key a cache)."""
    spec = _chunk_layout(rank, filtered, size_width, comp)
    if comp is not None:
        return struct_decoder(spec, lambda s, v: ChunkRecordV2(
            s.address(v[0]), v[2:2 + rank], as_uint(v[1]), 0, meta_from_fields(comp, filtered, v[2 + rank:])))
    if filtered:
        return struct_decoder(spec, lambda s, v: ChunkRecordV2(s.address(v[0]), v[3:], as_uint(v[1]), v[2]))
    return struct_decoder(spec, lambda s, v: ChunkRecordV2(s.address(v[0]), v[1:]))


@lru_cache(maxsize=256)
def chunk_record_encoder(rank: int, filtered: bool, size_width: int = 0,
                         comp: Composition | None = None) -> Callable[[Writer, ChunkRecordV2], None]:
    """Encoder for type 10 (filtered=False) or 11 records of a `rank`-dimensional dataset, or
    with `comp` types 12/13."""
    spec = _chunk_layout(rank, filtered, size_width, comp)

    def encode(w: Writer, r: ChunkRecordV2) -> None:
        if len(r.scaled) != rank:
            raise ValueError(f"chunk record of rank {len(r.scaled)} in a rank-{rank} index")
        if comp is not None:
            w.fields(spec, w.sizes.raw_address(r.address), uint_field(r.size, size_width), *r.scaled,
                     *meta_fields(comp, filtered, r.sections))
            return
        head = (uint_field(r.size, size_width), r.filter_mask) if filtered else ()
        w.fields(spec, w.sizes.raw_address(r.address), *head, *r.scaled)

    return encode


def chunk_record_size(sizes: Sizes, rank: int, filtered: bool, size_width: int = 0,
                      comp: Composition | None = None) -> int:
    return sizes.layout(_chunk_layout(rank, filtered, size_width, comp)).size


RECORD_DECODERS: dict[int, Callable[[Reader], object]] = {
    HUGE_INDIRECT: decode_huge_indirect, HUGE_INDIRECT_FILTERED: decode_huge_indirect_filtered,
    HUGE_DIRECT: decode_huge_direct, HUGE_DIRECT_FILTERED: decode_huge_direct_filtered,
    LINK_NAME: decode_link_name, LINK_CORDER: decode_link_corder, SOHM: decode_sohm,
    ATTR_NAME: decode_attr_name, ATTR_CORDER: decode_attr_corder,
}

RECORD_ENCODERS: dict[int, Callable[[Writer, object], None]] = {
    HUGE_INDIRECT: encode_huge_indirect, HUGE_INDIRECT_FILTERED: encode_huge_indirect_filtered,
    HUGE_DIRECT: encode_huge_direct, HUGE_DIRECT_FILTERED: encode_huge_direct_filtered,
    LINK_NAME: encode_link_name, LINK_CORDER: encode_link_corder, SOHM: encode_sohm,
    ATTR_NAME: encode_attr_name, ATTR_CORDER: encode_attr_corder,
}


def record_decoder(btype: int, rank: int = 0, size_width: int = 0,
                   comp: Composition | None = None) -> Callable[[Reader], object]:
    """The decoder for records of B-tree type `btype` (types 10-13 need the rank, 11-13 the
    width, 12/13 the composition)."""
    if btype in RECORD_DECODERS:
        return RECORD_DECODERS[btype]
    if btype in (CHUNK, CHUNK_FILTERED):
        return chunk_record_decoder(rank, btype == CHUNK_FILTERED, size_width if btype == CHUNK_FILTERED else 0)
    if btype in (STRUCTURED, STRUCTURED_FILTERED) and comp is not None:
        return chunk_record_decoder(rank, btype == STRUCTURED_FILTERED, size_width, comp)
    raise Unsupported(f"v2 B-tree record type {btype}")


def record_encoder(btype: int, rank: int = 0, size_width: int = 0,
                   comp: Composition | None = None) -> Callable[[Writer, object], None]:
    """The encoder for records of B-tree type `btype` (types 10-13 need the rank, 11-13 the
    width, 12/13 the composition)."""
    if btype in RECORD_ENCODERS:
        return RECORD_ENCODERS[btype]
    if btype in (CHUNK, CHUNK_FILTERED):
        return chunk_record_encoder(rank, btype == CHUNK_FILTERED, size_width if btype == CHUNK_FILTERED else 0)
    if btype in (STRUCTURED, STRUCTURED_FILTERED) and comp is not None:
        return chunk_record_encoder(rank, btype == STRUCTURED_FILTERED, size_width, comp)
    raise Unsupported(f"v2 B-tree record type {btype}")
