"""An object whose last hard link went: its header and everything only it uses become free
space (libhdf5's H5O_delete): header blocks, group storage (symbol table, dense links), dataset
storage (contiguous data, chunks and every chunk index block, an external file list's heap),
dense attribute storage; `free_storage` frees a dataset's data storage alone (its data replaced
by another's). The extents come from the space map's walk of that one object: links
and shared messages are not followed, global heap collections (shared with other objects) are
left as they are, as libhdf5 leaves them.

The first bytes of a freed header that existed before the mount stay unused for the rest of
the mount, zeroed (`free_object`): a reference to the object that something still holds then
resolves to nothing.

Objects a walk cannot read whole keep their space: a broken pointer could name another object's
bytes, and leaking is safe where freeing is not. What the object used of the file's shared message
table is counted down by the caller (storage/sohm_table/writer.py).
"""

from __future__ import annotations

import logging

from ..format.codec import Reader
from ..format.messages import shared
from .space_walk import SpaceWalk
from .transaction import Transaction

log = logging.getLogger("h5fs")

GRAVE = 8   # bytes of a freed object header kept unused and zeroed (module docstring)


class _ObjectWalk(SpaceWalk):
    """The space map walk of one object, without what other objects share (what its values
    name, references and global heap objects, is not read either)."""

    reads_values = False

    def enqueue(self, address, path, queue=None) -> None:
        pass

    def links(self, group, path) -> None:
        pass   # (what they name is counted down by the caller)

    def scan(self, raw, dt, path, where, fields=None, depth=0) -> None:
        pass

    def heap_object(self, path, where, address, index) -> None:
        pass   # a global heap collection (a virtual dataset's mappings) may hold others' objects too


def shared_headers(header, sizes) -> list[int]:
    """Object headers `header` shares messages from (committed datatypes), one per message;
    messages shared through the file's shared-message table are storage/sohm_table/writer.py's."""
    out = []
    for raw in header.messages:
        if raw.shared:
            ref = shared.decode(Reader(raw.data, 0, sizes, "shared message"))
            if ref.kind == shared.IN_OBJECT_HEADER:
                out.append(ref.address)
    return out


def free_object(txn: Transaction, f, address: int, path: str) -> bool:
    """Free the storage of the object at `address` (the file `f` as committed), except, for
    an object older than the mount, the first GRAVE bytes of its header, zeroed: no block
    allocated later can start there, so a reference to the object left somewhere fails to
    resolve (no header version, no signature) instead of naming the old header, or a new
    object that took its place. Zeroed at once in a file the mount's walk found sound; before
    its verdict, by the first transaction after it, unless the walk found the header still in
    use (a link count too low freed it: the space allocator's `bury`). The next mount's walk
    reclaims them unless a reference still names the address (model/free_space.py). False
    when the object could not be walked whole and was left in place (logged)."""
    walk = _ObjectWalk(f, False, None)
    walk.object(address, path)
    if address in txn.store.created:   # no reference can name it: all its space is reused
        txn.store.created.discard(address)   # (a failed transaction makes it a grave later: safe)
        return _free(txn, walk, path, "removed")
    if not _free(txn, walk, path, "removed", grave=address):
        return False
    if txn.store.allocator.bury(address, GRAVE, txn.owners):
        txn.write_in_place(address, bytes(GRAVE))
    return True


def free_storage(txn: Transaction, f, address: int, path: str) -> bool:
    """Free the data storage of the dataset at `address` (the file `f` as committed), its
    header and attributes kept: its data was replaced. False as for `free_object`."""
    walk = _ObjectWalk(f, False, None)
    walk.dataset(f.get(address, path), path)
    return _free(txn, walk, path, "data replaced")


def _free(txn: Transaction, walk: _ObjectWalk, path: str, done: str, grave: int | None = None) -> bool:
    """Free what the walk found, but the first GRAVE bytes at `grave`."""
    if walk.map.problems:
        log.warning("%s: %s, but its storage is kept (it cannot be read whole: %s)", path, done,
                    walk.map.problems[0])
        return False
    for ext in walk.map.extents:
        if ext.address == grave:
            txn.free(ext.address + GRAVE, ext.size - GRAVE, raw=ext.raw)
        else:
            txn.free(ext.address, ext.size, raw=ext.raw)
    return True
