"""The inode table: which inode numbers the kernel knows, and what each one stands for.

- One inode per HDF5 object the kernel knows (keyed by its object header address): a group's
  directory, a dataset's raw file `D`, a named datatype's file. Hard links to one object share it.
- One more per dataset `.npy` view the kernel knows (keyed by the address too: hard links share it).
- One per soft or external link (keyed by its group's address and the link name).
- The root group is `pyfuse3.ROOT_INODE`, for as long as the mount lives.

A node is a handle (kind, address, path, stat numbers), never an engine object. Each counts
the kernel's lookups of it (every positive lookup reply and readdirplus entry adds one; `forget`
takes them back); at zero it is released, and the next lookup of the same object gets a new
number (numbers are never reused, so the kernel never confuses an old one with a new one).
Only the trio thread touches the table.
"""

from __future__ import annotations

import pyfuse3

from ..model.namespace import DIR, NPY, NPY_SUFFIX, POINTS, POINTS_SUFFIX, SYMLINK, Entry, Numbers, soft_link_text


class Node:
    __slots__ = ("ino", "kind", "key", "address", "path", "numbers", "target", "soft", "error", "lookups", "stale",
                 "gone")

    def __init__(self, ino: int, kind: str, key: object, entry: Entry) -> None:
        self.ino = ino                    # also its age: numbers only grow
        self.kind = kind
        self.key = key                    # its key in the table's index for its kind
        self.address = entry.address
        self.path = entry.path            # the path it was first found by (logs, symlink depth)
        self.numbers = entry.numbers
        self.target = entry.target        # symlink text
        # a soft link's HDF5 target and view suffix: its text follows the link's directory's depth
        self.soft = None if entry.soft_target is None else (entry.soft_target, entry.suffix)
        self.error = entry.error          # set: the object answers EIO
        self.lookups = 0                  # how many times the kernel was handed this inode
        self.stale = False                # the kernel holds an estimate: tell it when the truth is known
        self.gone = False                 # its object was freed: ENOENT until the kernel forgets it

    def __repr__(self) -> str:
        return f"<Node {self.ino} {self.kind} {self.path}>"


class InodeTable:
    def __init__(self, root_address: int, root_numbers: Numbers) -> None:
        self._objects: dict[int, Node] = {}                # address -> object node
        self._views: dict[int, Node] = {}                  # address -> .npy view node
        self._points: dict[int, Node] = {}                 # address -> .points.npy view node
        self._links: dict[tuple[int, bytes], Node] = {}    # (group address, name) -> link node
        self.root = Node(pyfuse3.ROOT_INODE, DIR, root_address, Entry(b"", DIR, "/", root_address, root_numbers))
        self.root.lookups = 1  # never released
        self._objects[root_address] = self.root
        self._nodes: dict[int, Node] = {self.root.ino: self.root}
        self._next = pyfuse3.ROOT_INODE + 1

    def __len__(self) -> int:
        return len(self._nodes)

    def get(self, ino: int) -> Node | None:
        return self._nodes.get(ino)

    def find_object(self, address: int) -> Node | None:
        return self._objects.get(address)

    def find_view(self, address: int) -> Node | None:
        """The `.npy` view node of the dataset at `address`."""
        return self._views.get(address)

    def find_points(self, address: int) -> Node | None:
        """The `.points.npy` view node of the sparse dataset at `address`."""
        return self._points.get(address)

    def _index(self, kind: str, address: int | None) -> dict:
        if kind == SYMLINK or address is None:
            return self._links
        return self._views if kind == NPY else self._points if kind == POINTS else self._objects

    def intern(self, parent: Node, entry: Entry) -> Node:
        """The node of `entry` in the directory `parent`: the one the kernel already knows (inode
        numbers are stable), or a new one with no lookups yet (`drop_unknown` undoes it)."""
        index = self._index(entry.kind, entry.address)
        key = (parent.address, entry.name) if index is self._links else entry.address
        node = index.get(key)
        if node is None:
            node = Node(self._next, entry.kind, key, entry)
            self._next += 1
            index[key] = node
            self._nodes[node.ino] = node
        return node

    def adopt(self, node: Node, address: int) -> None:
        """A node made before its object existed (a `.npy` file being created) now stands for
        the object at `address`."""
        if self._links.get(node.key) is node:
            del self._links[node.key]
        node.address = node.key = address
        self._index(node.kind, address)[address] = node

    def becomes_view(self, node: Node, address: int | None = None, path: str | None = None) -> Node | None:
        """A dataset's raw-file node stands for its `.npy` view from now on: the kernel moved it
        to that name (`mv T x.npy` made T's bytes its array); or for the view of the dataset at
        `address` (`path`), whose data T's bytes became. A view node the dataset had leaves the
        index (the caller says what it is now) and is returned; the raw file gets a new node at
        its next lookup."""
        if self._objects.get(node.address) is node:
            del self._objects[node.address]
        if address is not None:
            node.address = node.key = address
            node.path = path
        old = self._views.get(node.address)
        node.kind = NPY
        node.path += NPY_SUFFIX
        self._views[node.address] = node
        return None if old is node else old

    def drop_link(self, group_address: int, name: bytes) -> None:
        """A soft or external link is gone or replaced: the next lookup of the name gets a new
        node (the kernel may still hold the old inode until it forgets it)."""
        self._links.pop((group_address, name), None)

    @property
    def newest(self) -> int:
        """The inode number of the node made last (`gone`'s `before`)."""
        return self._next - 1

    def gone(self, address: int, before: int | None = None) -> None:
        """The object at `address` was freed: its nodes (and those of its soft links) leave the
        index, so an object made there later gets inodes of its own, and answer ENOENT until the
        kernel forgets them. `before`: only nodes made by then (`newest` before the edit that
        freed it left the trio thread): an object made in the freed space since, by an edit
        whose reply came first, keeps its nodes. A new object's creator calls it without."""
        for index in (self._objects, self._views, self._points):
            node = index.get(address)
            if node is not None and node is not self.root and (before is None or node.ino <= before):
                del index[address]
                node.gone = True
        for key in [k for k in self._links if k[0] == address]:
            if before is None or self._links[key].ino <= before:
                self._links.pop(key).gone = True

    def moved(self, old: str, new: str, address: int | None = None) -> list[Node]:
        """The link at path `old` is now at `new`: the nodes found through it (its object, its
        views, whatever lies below a group) take their new paths; returns them. `address`: the
        object is no group, only its own nodes can be (no scan of the table)."""
        out = []
        nodes = self._nodes.values() if address is None else \
            [n for n in (self._objects.get(address), self._views.get(address), self._points.get(address)) if n]
        for node in nodes:
            rest = node.path[len(old):] if node.path.startswith(old) else None
            if rest is not None and (rest in ("", NPY_SUFFIX, POINTS_SUFFIX) or rest.startswith("/")):
                self.link_moved(node, new + rest)
                out.append(node)
        return out

    def find_link(self, group_address: int, name: bytes) -> Node | None:
        return self._links.get((group_address, name))

    def link_renamed(self, node: Node, group_address: int, name: bytes) -> None:
        """The kernel keeps the soft link inode `node` under its new name `name` in the group at
        `group_address`: found there from now on (a node the name had stands for nothing now)."""
        if self._links.get(node.key) is node:
            del self._links[node.key]
        self.drop_link(group_address, name)
        node.key = (group_address, name)
        self._links[node.key] = node

    def link_moved(self, node: Node, path: str) -> None:
        """`node` is found at `path` now; a soft link's text follows the depth of its new
        directory (an absolute HDF5 target is shown relative to it)."""
        node.path = path
        if node.soft is not None:
            node.target = soft_link_text(path.rsplit("/", 1)[0] or "/", *node.soft)

    def drop_unknown(self, node: Node) -> None:
        """Release a node interned but never handed out (its reply failed)."""
        if node.lookups == 0:
            self._release(node)

    def forget(self, ino: int, count: int) -> None:
        node = self._nodes.get(ino)
        if node is None or node is self.root:
            return
        node.lookups -= count
        if node.lookups <= 0:
            self._release(node)

    def _release(self, node: Node) -> None:
        del self._nodes[node.ino]
        index = self._index(node.kind, node.address)
        if index.get(node.key) is node:
            del index[node.key]
