"""An object whose last hard link went: its header and everything only it uses become free
space (libhdf5's H5O_delete): header blocks, group storage (symbol table, dense links), dataset
storage (contiguous data, chunks and every chunk index block, an external file list's heap),
dense attribute storage. The extents come from the space map's walk of that one object: links
and shared messages are not followed, global heap collections (shared with other objects) are
left as they are, as libhdf5 leaves them.

Objects a walk cannot read whole keep their space: a broken pointer could name another object's
bytes, and leaking is safe where freeing is not. Objects whose messages live in the file's shared
message table are refused (their table entries would need their counts).
"""

from __future__ import annotations

import logging

from ..errors import CannotWrite
from ..format.codec import Reader
from ..format.messages import shared
from .space_map import _Walk
from .transaction import Transaction

log = logging.getLogger("h5fs")


class _ObjectWalk(_Walk):
    """The space map walk of one object, without what other objects share."""

    def enqueue(self, address, path, queue=None) -> None:
        pass

    def scan(self, raw, dt, path, where, fields=None, depth=0) -> None:
        pass


def shared_headers(header, sizes) -> list[int]:
    """Object headers `header` shares messages from (committed datatypes), one per message."""
    out = []
    for raw in header.messages:
        if raw.shared:
            ref = shared.decode(Reader(raw.data, 0, sizes, "shared message"))
            if ref.kind != shared.IN_OBJECT_HEADER:
                raise CannotWrite(f"object header at {header.address}: a message in the shared message "
                                  "table (removing such objects is not supported)")
            out.append(ref.address)
    return out


def free_object(txn: Transaction, f, address: int, path: str) -> bool:
    """Free the storage of the object at `address` (the file `f` as committed); False when the
    object could not be walked whole and was left in place (logged)."""
    walk = _ObjectWalk(f, False, None)
    walk.object(address, path)
    if walk.map.problems:
        log.warning("%s: removed, but its storage is kept (it cannot be read whole: %s)", path,
                    walk.map.problems[0])
        return False
    for ext in walk.map.extents:
        txn.free(ext.address, ext.size, raw=ext.raw)
    return True
