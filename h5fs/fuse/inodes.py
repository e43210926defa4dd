"""The inode table: stable inode numbers for what the mount shows.

- One inode per HDF5 object (keyed by its object header address): a group's directory, a
  dataset's raw file `D`, a named datatype's file. Hard links to one object share its inode.
- One more inode per dataset for its `D.npy` view (keyed by the address too, so hard links share it).
- One inode per soft or external link (keyed by the directory's inode and the link name).
- The root group is `pyfuse3.ROOT_INODE`.

Inodes are never reused or freed while mounted (the table only grows with what was visited;
`forget` needs no bookkeeping). Only the trio thread touches the table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyfuse3

# node kinds
DIR = "dir"          # a group
RAW = "raw"          # a dataset's raw view
NPY = "npy"          # a dataset's .npy view
DTYPE = "dtype"      # a named datatype (a small read-only text file)
SYMLINK = "symlink"  # a soft or external link
BROKEN = "broken"    # an object that could not be read: listed, answers EIO


@dataclass(eq=False)
class Node:
    ino: int
    kind: str
    path: str                      # the mount path it was first found at (logs, symlink depth)
    obj: Any = None                # engine object (Group, Dataset, NamedDatatype) or None
    address: int | None = None
    target: bytes | None = None    # symlink text
    error: BaseException | None = None  # why a BROKEN node is broken
    # directory contents, built on first use: ordered (name, ino) and name -> ino
    entries: list[tuple[bytes, int]] | None = None
    index: dict[bytes, int] | None = None
    # per-node caches (immutable engine data)
    cache: dict = field(default_factory=dict)


class InodeTable:
    def __init__(self) -> None:
        self._nodes: dict[int, Node] = {}
        self._keys: dict[tuple, int] = {}
        self._next = pyfuse3.ROOT_INODE + 1

    def __len__(self) -> int:
        return len(self._nodes)

    def get(self, ino: int) -> Node | None:
        return self._nodes.get(ino)

    def add_root(self, obj, address: int) -> Node:
        node = Node(pyfuse3.ROOT_INODE, DIR, "/", obj=obj, address=address)
        self._nodes[node.ino] = node
        self._keys[("obj", address)] = node.ino
        return node

    def _intern(self, key: tuple, make) -> Node:
        ino = self._keys.get(key)
        if ino is not None:
            return self._nodes[ino]
        ino = self._next
        self._next += 1
        node = make(ino)
        self._nodes[ino] = node
        self._keys[key] = ino
        return node

    def find_object(self, address: int) -> Node | None:
        ino = self._keys.get(("obj", address))
        return None if ino is None else self._nodes[ino]

    def object_node(self, address: int, kind: str, path: str, obj=None, error=None) -> Node:
        """The node of the object at `address` (created on first sight)."""
        return self._intern(("obj", address),
                            lambda ino: Node(ino, kind, path, obj=obj, address=address, error=error))

    def npy_node(self, raw: Node) -> Node:
        return self._intern(("npy", raw.address),
                            lambda ino: Node(ino, NPY, raw.path + ".npy", obj=raw.obj, address=raw.address))

    def link_node(self, dir_ino: int, name: bytes, path: str, target: bytes) -> Node:
        return self._intern(("link", dir_ino, name),
                            lambda ino: Node(ino, SYMLINK, path, target=target))
