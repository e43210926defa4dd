"""Directory listings: opendir, readdir (readdirplus) and releasedir.

Listing a group reads every child's header, in a worker (children the kernel holds inodes of
answer from those: `MountState.known`); recent listings are kept by group address. Each open
directory gets a snapshot of its entries (fuse/handles.py) that readdir cookies index.
"""

from __future__ import annotations

import errno

import pyfuse3
from pyfuse3 import FUSEError

from ..model import namespace
from ..model.namespace import SYMLINK
from ..storage.byte_source import WouldBlock
from . import editing
from .errors import boundary
from .handles import OpenDir
from .mount_state import MountState
from .namespace_edits import closed_dir
from .stat_replies import placeholder_stat, stat_of


@boundary
async def opendir(mount: MountState, inode: int) -> int:
    node = mount.dir(inode)
    entries = mount.listings.get(node.address)  # nothing changes under a read-only mount
    if entries is None:
        obj = mount.object(node)
        # a group of a few links in its header is listed on the trio thread when no commit is
        # under way (`rm -r` of a tree opens every group); others in a worker
        read = mount.quickly if namespace.few_links(obj) else mount.consistently
        try:
            entries = await read(namespace.entries, mount.f, obj, node.path, mount.known)
        except Exception as exc:
            mount.mark_broken(node, exc)
            raise FUSEError(errno.EIO) from None
        mount.listings.put(node.address, entries)
        if any(entry.kind == SYMLINK for entry in entries):
            mount.soft_listings.add(node.address)
    return mount.handles.open_dir(OpenDir(node.ino, entries, node.address))


@boundary
async def readdir(mount: MountState, fh: int, start_id: int, token) -> None:
    listing = mount.handles.dirs.get(fh)
    if listing is None:
        raise FUSEError(errno.EBADF)
    parent = mount.node(listing.ino)
    entries = listing.entries
    for i in range(start_id, len(entries)):  # the cookie is an index into the snapshot
        entry = entries[i]
        node = mount.table.intern(parent, entry)
        try:
            attrs = stat_of(mount, node, count=False)
        except (FUSEError, WouldBlock):   # entries already replied must not be sent again
            attrs = placeholder_stat(mount, node)
        if not pyfuse3.readdir_reply(token, entry.name, attrs, i + 1):
            mount.table.drop_unknown(node)
            return
        node.lookups += 1


@boundary
async def releasedir(mount: MountState, fh: int) -> None:
    listing = mount.handles.dirs.pop(fh, None)
    if listing is not None and mount.writes is not None:
        closed_dir(mount, listing.ino)
        await editing.closed(mount, listing.address)
