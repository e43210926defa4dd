"""An unlink without a transaction of its own: a link removed from a group whose link edits wait
to land (dense storage or a symbol table: storage/pending_links.py) is one journal record holding
the removal and its object's countdown, as a new group's `mkdir` is (model/fresh_groups.py). The
object is counted down, and freed at no link, when they land (`TreeEditor.land`). An `rm -r` of
a large group pays that record for each name, not a transaction.
"""

from __future__ import annotations

from ..format.messages import link as link_msg
from ..storage.object_header.edit import refcount_of
from ..storage.pending_links import REMOVE, UNREF, Op
from .fresh_groups import times_stay
from .namespace import join, links_deferred
from .objects import H5Object


def unlink(editor, parent: H5Object, name: str) -> tuple[bool, int | None]:
    """Remove the link `name` of `parent`: (True, the hard links left to its object, None for a
    soft or external link) once the journal holds it; (False, None) when it takes a transaction
    (the group's links are not waiting ones, its times change, or the link names a new group).
    FileNotFoundError: no such link."""
    f = editor.f
    store = f.store
    pending = store.pending
    if parent.address in pending.fresh or parent.address in store.damaged or not store.cache_current \
            or not links_deferred(parent) or not times_stay(parent.header):
        return False, None
    link = parent.link(name)
    if link is None:
        raise FileNotFoundError(f"{parent.path}: no link named {name!r}")
    ops = [Op(REMOVE, parent.address, name)]
    left = address = None
    path = join(parent.path, name)
    if link.link_type == link_msg.HARD:
        address = link.address
        if address in pending.fresh:
            return False, None   # (it lands first)
        store.refuse_damaged((address,))   # as a transaction's countdown would
        left = max(0, refcount_of(f.header(address, path), f.sizes) - pending.unrefs_of(address) - 1)
        ops.append(Op(UNREF, address, path))
    store.defer(ops)
    store.relinks += 1   # an object hidden while still in the file: a walk under it is not trusted
    if left == 0 and editor.in_use(address):   # open still, no link left: freed after its close
        editor.orphans[address] = path
    return True, left
