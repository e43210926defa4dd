"""Reads version 1 B-tree nodes (only their used part) and walks a tree's leaves in key order,
refusing cycles, shared children and implausible depths; `extents`: the blocks a tree occupies."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator

from ...errors import FormatError
from ...format.btree_v1 import HEAD, MAX_DEPTH, MAX_ENTRIES, Node, decode_node, key_size, node_size
from ...format.codec import Reader

if TYPE_CHECKING:
    from ..extent_sink import ExtentSink


def read_node(reader, address: int | None, node_type: int, rank: int, what: str) -> Node:
    """The node at `address`, reading only its used part (K is not needed)."""
    s = reader.sizes
    label = f"{what}: B-tree node"
    head = reader.read(address, s.layout(HEAD).size, label)
    used = Reader(head, 0, s, label).fields(HEAD)[3]
    if used > MAX_ENTRIES:
        raise FormatError(f"{what}: B-tree node claims {used} entries")
    size = len(head) + used * (key_size(node_type, s, rank) + s.offset) + key_size(node_type, s, rank)
    return decode_node(reader.read(address, size, label), address, node_type, rank, s, what)


def node_bytes(node: Node, sizes, rank: int) -> int:
    """The used bytes of `node` (its siblings are about as large)."""
    return sizes.layout(HEAD).size + len(node.children) * (key_size(node.node_type, sizes, rank) + sizes.offset) \
        + key_size(node.node_type, sizes, rank)


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
            if len(node.children) > 1 and hasattr(reader, "want"):
                reader.want(node.children, node_bytes(node, reader.sizes, rank))
            for child in reversed(node.children):
                stack.append((child, node.level - 1))


def find_child(reader, address: int, node_type: int, rank: int, cmp3: Callable[[object, object], int],
               what: str, read: Callable = read_node) -> int | None:
    """The child of a leaf entry whose key range holds what `cmp3` looks for, in one descent
    (H5B_find): `cmp3(left key, right key)` is negative below the range, 0 inside it, positive
    above it; None when no range holds it."""
    level = None
    for _ in range(MAX_DEPTH + 1):
        node = read(reader, address, node_type, rank, what)
        if level is not None and node.level != level - 1:
            raise FormatError(f"{what}: B-tree node at {address} has level {node.level}, expected {level - 1}")
        lo, hi, cmp, idx = 0, len(node.children), 1, 0
        while lo < hi and cmp:
            idx = (lo + hi) // 2
            cmp = cmp3(node.keys[idx], node.keys[idx + 1])
            if cmp < 0:
                hi = idx
            else:
                lo = idx + 1
        if cmp:
            return None
        if node.level == 0:
            return node.children[idx]
        address, level = node.children[idx], node.level
    raise FormatError(f"{what}: B-tree depth beyond {MAX_DEPTH}")


def extents(out: ExtentSink, reader, path: str, label: str, root: int, node_type: int, rank: int,
            k: int) -> list[int]:
    """Every node's extent (room for 2K entries); the leaves' children in key order."""
    size = node_size(node_type, reader.sizes, rank, k)
    children: list[int] = []
    stack: list[tuple[int, int | None]] = [(root, None)]
    seen: set[int] = set()
    while stack:
        addr, level = stack.pop()
        if addr in seen:
            out.problem(path, label, f"node at {addr} is reached twice (cycle or shared node)")
            continue
        seen.add(addr)
        if not out.add(addr, size, path, label):
            continue
        with out.guard(path, label):
            node = read_node(reader, addr, node_type, rank, f"{path}: {label}")
            if level is not None and node.level != level:
                raise FormatError(f"{path}: {label}: node at {addr} has level {node.level}, expected {level}")
            if node.level > MAX_DEPTH:
                raise FormatError(f"{path}: {label}: node at {addr} has level {node.level}")
            if node.level:
                stack += [(child, node.level - 1) for child in reversed(node.children)]
            else:
                children += node.children
    return children
