"""Version 1 B-trees (III.A.1): group nodes (type 0) and raw-data chunk nodes (type 1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from ..errors import FormatError
from .codec import Reader

GROUP, CHUNK = 0, 1
MAX_ENTRIES = 65536
MAX_DEPTH = 64


@dataclass(frozen=True)
class ChunkKey:
    size: int
    filter_mask: int
    offsets: tuple[int, ...]     # element offsets, one per dimension plus a trailing 0


@dataclass(frozen=True)
class Node:
    node_type: int
    level: int
    keys: tuple                  # int heap offsets (groups) or ChunkKey (chunks); len = entries + 1
    children: tuple[int, ...]


def key_size(node_type: int, sizes, rank: int) -> int:
    return sizes.length if node_type == GROUP else 8 + 8 * (rank + 1)


def read_node(reader, address: int | None, node_type: int, rank: int, what: str) -> Node:
    s = reader.sizes
    head = reader.cursor(address, 8 + 2 * s.offset, f"{what}: B-tree node")
    head.signature(b"TREE")
    ntype, level, used = head.u8(), head.u8(), head.u16()
    if ntype != node_type:
        raise FormatError(f"{what}: B-tree node type {ntype}, expected {node_type}")
    if used > MAX_ENTRIES:
        raise FormatError(f"{what}: B-tree node claims {used} entries")
    head.skip(2 * s.offset)  # sibling addresses: traversal goes through the parents
    ks = key_size(node_type, s, rank)
    body_size = (used + 1) * ks + used * s.offset
    c = Reader(reader.read(address, head.pos + body_size, f"{what}: B-tree node"), head.pos, s, what)
    keys, children = [], []
    for i in range(used + 1):
        keys.append(_key(c, node_type, rank))
        if i < used:
            child = c.offset()
            if child is None:
                raise FormatError(f"{what}: B-tree node has an undefined child address")
            children.append(child)
    return Node(ntype, level, tuple(keys), tuple(children))


def _key(c: Reader, node_type: int, rank: int):
    if node_type == GROUP:
        return c.length()
    return ChunkKey(c.u32(), c.u32(), tuple(c.u64() for _ in range(rank + 1)))


def iterate_leaves(reader, address: int, node_type: int, rank: int, what: str,
                   read: Callable = read_node) -> Iterator[tuple[object, int, object]]:
    """Yield (left key, child address, right key) for every entry of every leaf, in key order."""
    seen: set[int] = set()
    leaves: set[int] = set()
    stack = [(address, None)]
    while stack:
        addr, expect_level = stack.pop()
        if addr in seen:
            raise FormatError(f"{what}: B-tree cycle at address {addr}")
        seen.add(addr)
        node = read(reader, addr, node_type, rank, what)
        if expect_level is not None and node.level != expect_level:
            raise FormatError(f"{what}: B-tree node at {addr} has level {node.level}, expected {expect_level}")
        if node.level > MAX_DEPTH:
            raise FormatError(f"{what}: B-tree depth {node.level} is implausible")
        if node.level == 0:
            for i, child in enumerate(node.children):
                # a child shared by two entries is no tree: left alone it multiplies what it
                # holds (a 4 MB file could list a symbol table node's 65536 links 65536 times)
                if child in leaves:
                    raise FormatError(f"{what}: B-tree entries share the child at address {child}")
                leaves.add(child)
                yield node.keys[i], child, node.keys[i + 1]
        else:
            for child in reversed(node.children):
                stack.append((child, node.level - 1))
