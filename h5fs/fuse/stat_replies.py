"""The attributes a lookup, getattr, readdirplus or create reply hands the kernel: a node's stat
numbers (the engine's, h5fs.model.namespace.Numbers) as pyfuse3.EntryAttributes, with the
mount's owner, modes and timeouts.

The kernel is told long entry and attribute timeouts: nothing changes under the mount unless
invalidated (fuse/invalidate.py); a mount of a service other writers change (HSDS) tells its
`refresh` time instead. An estimate is never kept: st_blocks of a chunk index still
being walked answers 0 and marks the node stale, and the inode is invalidated once the count is
known (fuse/blocks.py); a lookup or getattr waits up to SETTLE_WAIT for it first (`wait_for_blocks`).
"""

from __future__ import annotations

import stat
from dataclasses import replace

import pyfuse3
from pyfuse3 import FUSEError

from ..model.namespace import DIR, NPY, POINTS, RAW, SYMLINK, Entry, Numbers
from .inodes import Node
from .mount_state import MountState

TIMEOUT = 3600.0        # entry/attr/negative validity: nothing changes unless invalidated
BLKSIZE = 1 << 20       # st_blksize: `cat` and friends read in 1 MiB pieces
SETTLE_WAIT = 0.5       # s a lookup/getattr waits for a chunk index walk before answering an estimate
GONE_TWIN_INO = 1 << 63  # the inode of a view removed with its twin (never in the inode table)


def stat_of(mount: MountState, node: Node, *, count: bool = True) -> pyfuse3.EntryAttributes:
    """The attributes of `node` (EIO for a broken object). `count`: a chunk index not counted
    yet is counted in the background (else the reply says 0 blocks, not to be kept: a listing
    counts nothing until a stat asks, so `rm -r` of many datasets walks no index)."""
    mount.check(node)
    a = pyfuse3.EntryAttributes()
    a.st_ino = node.ino
    a.entry_timeout = a.attr_timeout = timeout(mount)
    a.st_uid, a.st_gid = mount.uid, mount.gid
    a.st_blksize = BLKSIZE
    a.st_ctime_ns = mount.ctime_ns
    if node.kind == SYMLINK:
        a.st_mode = stat.S_IFLNK | 0o777
        a.st_size = len(node.target)
        a.st_mtime_ns = a.st_atime_ns = mount.mtime_ns
        return a
    n = node.numbers
    a.st_nlink = n.nlink
    a.st_mtime_ns = a.st_atime_ns = mount.mtime_ns if n.mtime_ns is None else n.mtime_ns
    # the header's change time, else the .h5 file's; never before the modification time
    # (a data write shows its time at once, the header takes both with the data)
    a.st_ctime_ns = max(mount.ctime_ns if n.ctime_ns is None else n.ctime_ns, a.st_mtime_ns)
    if node.kind == DIR:
        a.st_mode = stat.S_IFDIR | mount.dir_mode
        return a
    a.st_mode = stat.S_IFREG | (mount.file_mode if node.kind in (RAW, NPY, POINTS) else mount.fixed_mode)
    if node.kind == RAW:
        a.st_size = n.size
        if n.blocks is not None:
            a.st_blocks = n.blocks
        elif count:
            a.st_blocks = _counted_blocks(mount, node)
        else:
            known = mount.blocks.get(node.address)
            a.st_blocks = known or 0
            if known is None:
                a.attr_timeout = 0
    elif node.kind == NPY:  # a view of the same stored bytes: it allocates nothing of its own
        a.st_size = n.npy_size
    elif node.kind == POINTS:
        a.st_size = _points_size(mount, node)
        if node.stale:   # an estimate: the kernel must not keep it
            a.attr_timeout = 0
    else:
        a.st_size = n.size
    return a


def _counted_blocks(mount: MountState, node: Node) -> int:
    """st_blocks once the index walk is done; until then 0, and the walk is asked for."""
    blocks = mount.blocks.get(node.address)
    if blocks is not None:
        node.numbers = replace(node.numbers, blocks=blocks)
        return blocks
    node.stale = True
    mount.blocks.want(node.address, node.path)
    return 0


def _points_size(mount: MountState, node: Node) -> int:
    """A `.points.npy` view's size once known; until then 0, and the count is asked for."""
    size = mount.point_sizes.get(node.address)
    if size is not None:
        return size
    node.stale = True
    mount.point_sizes.want(node.address, node.path)
    return 0


async def wait_for_blocks(mount: MountState, address: int | None, path: str, numbers: Numbers | None) -> None:
    """Give an index walk a moment to finish before a lookup or getattr answers."""
    if numbers is not None and numbers.blocks is None and address is not None:
        await mount.blocks.wait_for(address, path, SETTLE_WAIT)


def placeholder_stat(mount: MountState, node: Node) -> pyfuse3.EntryAttributes:
    """readdirplus attributes for a broken entry: listed, never cached, so that the next
    lookup/getattr asks again and answers EIO."""
    a = pyfuse3.EntryAttributes()
    a.st_ino = node.ino
    a.entry_timeout = a.attr_timeout = 0
    a.st_mode = stat.S_IFREG
    a.st_uid, a.st_gid = mount.uid, mount.gid
    a.st_mtime_ns = a.st_atime_ns = mount.mtime_ns
    a.st_ctime_ns = mount.ctime_ns
    return a


def gone_twin_stat(mount: MountState) -> pyfuse3.EntryAttributes:
    """An empty file that is not cached: only for the unlink of a view already removed."""
    a = pyfuse3.EntryAttributes()
    a.st_ino = GONE_TWIN_INO
    a.entry_timeout = a.attr_timeout = 0
    a.st_mode = stat.S_IFREG | 0o644
    a.st_nlink = 1
    a.st_uid, a.st_gid = mount.uid, mount.gid
    return a


def negative_entry(mount: MountState) -> pyfuse3.EntryAttributes:
    """A lookup of a name that is not there, cached as long as anything else."""
    neg = pyfuse3.EntryAttributes()
    neg.st_ino = 0
    neg.entry_timeout = timeout(mount)
    return neg


def timeout(mount: MountState) -> float:
    """How long the kernel may keep an entry or attributes without asking again."""
    return TIMEOUT if mount.refresh is None else min(TIMEOUT, mount.refresh)


def hand_out(mount: MountState, parent: Node, entry: Entry) -> pyfuse3.EntryAttributes:
    """The attributes of `entry`'s inode for a lookup reply, counting the kernel's lookup."""
    node = mount.table.intern(parent, entry)
    try:
        attrs = stat_of(mount, node)
    except FUSEError:
        mount.table.drop_unknown(node)
        raise
    node.lookups += 1
    return attrs
