"""Requests about names and nodes: lookup, getattr (`get_attributes`), forget, readlink and statfs.

A lookup in a compact group (a child its header describes) is answered on the trio thread: a
thread hop costs more than the work. One that reads more (a dense group's name index, a soft
link's target) goes to a worker, which counts a small chunk index's st_blocks on the same trip;
on a writable mount while no commit is under way it stays on the trio thread (`_beyond_header`).
"""

from __future__ import annotations

import errno
import logging
import math
import os

import pyfuse3
import trio
from pyfuse3 import FUSEError

from ..errors import H5fsError
from ..model import namespace
from ..model.namespace import POINTS, RAW, SYMLINK, Entry
from .errors import boundary
from .mount_state import MountState
from .names import check_length
from .stat_replies import BLKSIZE, GONE_TWIN_INO, gone_twin_stat, hand_out, negative_entry, stat_of, wait_for_blocks

SMALL_INDEX = 1024      # chunk slots of an index a lookup walks itself (st_blocks) before answering
FREE_INODES = 1 << 32   # statfs of a writable mount: objects an HDF5 file can still take (no inode table)

log = logging.getLogger("h5fs.fuse")


@boundary
async def lookup(mount: MountState, parent_inode: int, name: bytes) -> pyfuse3.EntryAttributes:
    parent = mount.dir(parent_inode)
    check_length(name)   # a longer link name is not listed either (namespace.entries)
    try:
        group = mount.object(parent)
        try:  # a compact group, a child its header describes: no thread hop
            entry = namespace.lookup(mount.f, group, parent.path, name, header_only=True)
        except (namespace.BeyondHeader, H5fsError):   # an error: once more, as below
            entry = await _beyond_header(mount, group, parent.path, name)
    except Exception as exc:
        mount.mark_broken(parent, exc)
        raise FUSEError(errno.EIO) from None
    if entry is None and mount.writes is not None and (parent_inode, name) in mount.writes.gone_twins:
        return gone_twin_stat(mount)
    if entry is None:
        return negative_entry(mount)
    if entry.kind == RAW:
        await wait_for_blocks(mount, entry.address, entry.path, entry.numbers)
    elif entry.kind == POINTS:   # its size is what a reader of the file goes by: waited for
        await mount.point_sizes.wait_for(entry.address, entry.path, math.inf)
    return hand_out(mount, parent, entry)


async def _beyond_header(mount: MountState, group, path: str, name: bytes) -> Entry | None:
    """A lookup that reads more than object headers (a dense group's name index, a soft
    link's target). On a writable mount while no commit is under way, on the trio thread:
    once the index is cached that is less work than a thread hop (a `mkdir` is looked up
    first), and a chunk index is counted in the background (`wait_for_blocks`). Otherwise in a
    worker, which counts a small chunk index on the same trip."""
    if mount.writes is not None and not mount.networked:
        lock = mount.writes.wb.commit_lock
        if lock.acquire(blocking=False):
            try:
                return namespace.lookup(mount.f, group, path, name)
            finally:
                lock.release()
    entry, blocks = await mount.consistently(_lookup_counted, mount, group, path, name)
    if blocks is not None:
        mount.blocks.learn(entry.address, blocks)
    return entry


def _lookup_counted(mount: MountState, group, path: str, name: bytes) -> tuple[Entry | None, int | None]:
    """In a worker: the entry `name` of `group`, and the st_blocks of a dataset whose small
    chunk index must be walked, counted on the same trip rather than on one of its own
    that the lookup would wait for (`rm` looks up every file it removes)."""
    entry = namespace.lookup(mount.f, group, path, name)
    if entry is None or entry.kind != RAW or entry.numbers is None or entry.numbers.blocks is not None:
        return entry, None
    try:
        ds = mount.f.get(entry.address, entry.path)
        grid = getattr(ds.source, "grid", None)
        if grid is None or math.prod(grid) > SMALL_INDEX:
            return entry, None
        return entry, namespace.storage_blocks(ds)
    except Exception:  # noqa: BLE001 - the count in the background reports it
        return entry, None


@boundary(request="getattr")
async def get_attributes(mount: MountState, inode: int) -> pyfuse3.EntryAttributes:
    if inode == GONE_TWIN_INO:
        return gone_twin_stat(mount)
    node = mount.node(inode)
    if mount.refresh is not None and node.numbers is not None and node.error is None:
        # a service's object: its numbers as the engine has them now (it asks the service once
        # they are `refresh` seconds old); a service not answering leaves the last ones shown
        try:
            node.numbers = await mount.consistently(namespace.numbers, mount.object(node))
        except H5fsError as exc:
            log.warning("%s: stat numbers not refreshed: %s", node.path, exc)
    if node.kind == RAW and node.error is None:
        await wait_for_blocks(mount, node.address, node.path, node.numbers)
    elif node.kind == POINTS and node.error is None:
        await mount.point_sizes.wait_for(node.address, node.path, math.inf)
    return stat_of(mount, node)


@boundary
async def forget(mount: MountState, inode_list) -> None:
    for ino, count in inode_list:
        mount.table.forget(ino, count)
        if mount.writes is not None and mount.table.get(ino) is None:   # its pages went with it
            mount.writes.paged.discard(ino)


@boundary
async def readlink(mount: MountState, inode: int) -> bytes:
    node = mount.live_node(inode)
    if node.kind != SYMLINK:
        raise FUSEError(errno.EINVAL)
    return node.target


@boundary
async def statfs(mount: MountState) -> pyfuse3.StatvfsData:
    """The .h5 file's size as the space used; a writable mount can grow the file into the
    free space of the file system holding it, which `df` then shows as free (a read-only one:
    none), and new objects are not limited by inodes."""
    s = pyfuse3.StatvfsData()
    s.f_bsize = BLKSIZE
    s.f_frsize = 4096
    used = (mount.file_size + 4095) // 4096
    s.f_blocks, s.f_bfree, s.f_bavail = used, 0, 0
    s.f_files, s.f_ffree, s.f_favail = len(mount.table), 0, 0
    if mount.writes is not None and not mount.networked:   # (a service tells no free space)
        # a worker of its own: one syscall, not queued behind the daemon's counts and reads
        host = await trio.to_thread.run_sync(os.statvfs, os.path.dirname(os.path.abspath(mount.source)))
        s.f_bfree = host.f_bfree * host.f_frsize // 4096
        s.f_bavail = host.f_bavail * host.f_frsize // 4096
        s.f_blocks = used + s.f_bfree
        s.f_ffree = s.f_favail = FREE_INODES
        s.f_files += FREE_INODES
    s.f_namemax = namespace.NAME_MAX
    return s
