"""Version 1 B-trees (III.A.1): group nodes (type 0) and raw-data chunk nodes (type 1).

A node: "TREE", node type, level (0 = leaf), entries used, left and right sibling addresses, then
keys and children interleaved (key 0, child 0, key 1, ..., key N). Every node of a tree has room
for 2K children (K: the superblock's group internal node K for groups, its indexed storage K for
chunks), so its size depends on K: `encode_node` takes it. The unused slots are undefined;
libhdf5 zero-fills them (H5B__cache_serialize), and so does `encode_node`.

Group keys are heap offsets (`size of lengths` wide). Chunk keys: chunk size (u32), filter mask
(u32) and one u64 element offset per dimension plus a trailing 0 for the element dimension.

Pure bytes <-> records; h5fs.storage.btree_v1 reads nodes and walks trees.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import FormatError
from .codec import Reader, Sizes, Writer

SIGNATURE = b"TREE"
HEAD = "4sBBHOO"   # signature, node type, level, entries used, left sibling, right sibling
GROUP, CHUNK = 0, 1
MAX_ENTRIES = 65536
MAX_DEPTH = 64


@dataclass(frozen=True, slots=True)
class ChunkKey:
    size: int
    filter_mask: int
    offsets: tuple[int, ...]     # element offsets, one per dimension plus a trailing 0


@dataclass(frozen=True, slots=True)
class Node:
    node_type: int
    level: int
    keys: tuple                  # int heap offsets (groups) or ChunkKey (chunks); len = entries + 1
    children: tuple[int, ...]
    left: int | None = None      # sibling at the same level (None: the undefined address)
    right: int | None = None
    address: int | None = None


def key_size(node_type: int, sizes: Sizes, rank: int) -> int:
    return sizes.length if node_type == GROUP else 8 + 8 * (rank + 1)


def node_size(node_type: int, sizes: Sizes, rank: int, k: int) -> int:
    """Bytes of a node with room for 2K children."""
    return sizes.layout(HEAD).size + 2 * k * sizes.offset + (2 * k + 1) * key_size(node_type, sizes, rank)


def _key_spec(node_type: int, rank: int) -> str:
    return "L" if node_type == GROUP else f"II{rank + 1}Q"


def decode_node(buf: bytes, address: int | None, node_type: int, rank: int, sizes: Sizes,
                what: str = "B-tree node") -> Node:
    """A node from its bytes (at least its used part: header, used + 1 keys, used children)."""
    c = Reader(buf, 0, sizes, what)
    sig, ntype, level, used, left, right = c.fields(HEAD)
    if sig != SIGNATURE:
        raise FormatError(f"{what}: bad signature {sig!r}, expected {SIGNATURE!r}")
    if ntype != node_type:
        raise FormatError(f"{what}: B-tree node type {ntype}, expected {node_type}")
    if used > MAX_ENTRIES:
        raise FormatError(f"{what}: B-tree node claims {used} entries")
    key_spec = _key_spec(node_type, rank)
    entry = sizes.layout(key_spec + "O")   # a key and the child after it
    if node_type == CHUNK and used and sizes.offset in (2, 4, 8) \
            and len(buf) >= c.pos + used * entry.size + sizes.layout(key_spec).size:
        keys, children = _chunk_entries(buf, c.pos, used, rank, sizes, what)
        return Node(ntype, level, keys, children, sizes.address(left), sizes.address(right), address)
    keys, children = [], []
    for _ in range(used):
        *key, child = c.unpack(entry)
        child = sizes.address(child)
        if child is None:
            raise FormatError(f"{what}: B-tree node has an undefined child address")
        keys.append(_key(node_type, key))
        children.append(child)
    keys.append(_key(node_type, c.fields(key_spec)))
    return Node(ntype, level, tuple(keys), tuple(children), sizes.address(left), sizes.address(right), address)


def _chunk_entries(buf: bytes, pos: int, used: int, rank: int, sizes: Sizes, what: str) -> tuple[tuple, tuple]:
    """A chunk node's `used` keys and children from byte `pos` on, and its last key, decoded
    through one NumPy view of the entries (a node holds up to 2K chunks, and a dataset of small
    chunks tens of thousands: one struct unpack each was most of a first read's time)."""
    entry = np.dtype([("size", "<u4"), ("mask", "<u4"), ("offsets", "<u8", (rank + 1,)),
                      ("child", f"<u{sizes.offset}")])
    table = np.frombuffer(buf, entry, used, pos)
    children = table["child"].tolist()
    if sizes.undefined in children:
        raise FormatError(f"{what}: B-tree node has an undefined child address")
    end = pos + used * entry.itemsize
    size, mask = np.frombuffer(buf, "<u4", 2, end).tolist()
    keys = [ChunkKey(s, m, tuple(o)) for s, m, o in
            zip(table["size"].tolist(), table["mask"].tolist(), table["offsets"].tolist())]
    keys.append(ChunkKey(size, mask, tuple(np.frombuffer(buf, "<u8", rank + 1, end + 8).tolist())))
    return tuple(keys), tuple(children)


def _key(node_type: int, fields) -> int | ChunkKey:
    return fields[0] if node_type == GROUP else ChunkKey(fields[0], fields[1], tuple(fields[2:]))


def encode_node(node: Node, sizes: Sizes, k: int) -> bytes:
    """The whole node, with room for 2K children."""
    if len(node.keys) != len(node.children) + 1 or len(node.children) > 2 * k:
        raise ValueError(f"B-tree node: {len(node.children)} children and {len(node.keys)} keys, room for {2 * k}")
    rank = 0 if node.node_type == GROUP else len(node.keys[0].offsets) - 1
    w = Writer(sizes)
    w.fields(HEAD, SIGNATURE, node.node_type, node.level, len(node.children),
             sizes.raw_address(node.left), sizes.raw_address(node.right))
    key_spec = _key_spec(node.node_type, rank)
    for i, key in enumerate(node.keys):
        if node.node_type == GROUP:
            w.fields(key_spec, key)
        else:
            w.fields(key_spec, key.size, key.filter_mask, *key.offsets)
        if i < len(node.children):
            w.offset(node.children[i])
    w.zeros(node_size(node.node_type, sizes, rank, k) - w.pos)
    return w.getvalue()
