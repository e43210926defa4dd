"""An unlink or rmdir without a transaction of its own: a link removed from a group is one journal
record holding the removal and its object's countdown, as a new group's `mkdir` is
(model/fresh_groups.py). The object is counted down, and freed at no link, when they land
(`TreeEditor.land`). An `rm -r` of a large group pays that record for each name, not a
transaction; a group it empties and removes is freed whole, its own removals never landing in
its storage (`doomed`). A group keeping its links in its header has its removals landed before
any transaction reads that header (`PendingLinks.in_headers`).
"""

from __future__ import annotations

from ..format.messages import link as link_msg
from ..storage.object_header.edit import refcount_of
from ..storage.pending_links import REMOVE, UNREF, Op
from .fresh_groups import times_stay
from .namespace import join, links_from_header, links_deferred
from .objects import H5Object


def unlink(editor, parent: H5Object, name: str, group: bool = False) -> tuple[bool, int | None]:
    """Remove the link `name` of `parent`: (True, the hard links left to its object, None for a
    soft or external link) once the journal holds it; (False, None) when it takes a transaction
    (the group keeps times that change, it or the object is a new group, or the file is damaged
    there).
    `group` (rmdir): the link must name a group that shows no link (its removals may wait:
    they land with it, or go with its storage when it is freed, `doomed`), else (False, None).
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
    if group and not _empty_group(f, link, path):
        return False, None   # (the transaction's rmdir says why)
    if link.link_type == link_msg.HARD:
        address = link.address
        if address in pending.fresh:
            return False, None   # (it lands first)
        store.refuse_damaged((address,))   # as a transaction's countdown would
        left = max(0, refcount_of(f.header(address, path), f.sizes) - pending.unrefs_of(address) - 1)
        ops.append(Op(UNREF, address, path))
    store.defer(ops)
    if links_from_header(parent):   # a transaction reading its header lands it first (TreeEditor._edit)
        pending.in_headers.add(parent.address)
    store.relinks += 1   # an object hidden while still in the file: a walk under it is not trusted
    if left == 0 and editor.in_use(address):   # open still, no link left: freed after its close
        editor.orphans[address] = path
    return True, left


def _empty_group(f, link, path: str) -> bool:
    """Whether a hard link names a group whose links, as shown, are none."""
    if link.link_type != link_msg.HARD:
        return False
    obj = f.get(link.address, path)
    return obj.kind == "group" and not obj.links()


def doomed(editor, pending) -> list[int]:
    """Groups whose deferred link edits are all removals and that the waiting countdowns free
    (no link left, not open): their storage goes whole, so their removals need not land (an
    `rm -r`'s last `rmdir` leaves the emptied group's name index and heap alone)."""
    out = []
    for group in pending.groups():
        if pending.of(group) or group in editor.f.store.damaged or editor.in_use(group):
            continue
        try:
            count = refcount_of(editor.f.header(group, f"group at {group}"), editor.f.sizes)
        except Exception:  # noqa: BLE001 - its edits land as any others (and report it)
            continue
        if count - pending.unrefs_of(group) <= 0:
            out.append(group)
    return out
