"""The floor of namespace edits and writes: a minimal pyfuse3 + trio filesystem that does (almost)
nothing, so `scripts/bench_namespace.py` can tell h5fs's own cost from what pyfuse3, trio and the
kernel cost per request.

    python3 scripts/write_floor_fs.py BACKING_DIR MOUNTPOINT    # foreground

The tree lives in dicts: directories made by mkdir, user xattrs kept as given, regular files made
by create; unlink and rmdir remove names (a backing file stays until the floor is unmounted). Each created file is backed by a plain file in BACKING_DIR (named by its inode): a write
is one `os.pwrite` into it in the trio thread (no worker-thread hop), an fsync one `os.fsync` of
it, setattr changes only the size (`os.ftruncate`). Nothing is cached or batched: what is left is
the cost of each request plus the copy into the page cache that any file system pays.

Mounted as h5fs mounts by default (h5fs/mount_options.py `fuse_options`): `default_permissions`,
`subtype=` and `fsname=`, no writeback_cache, entry/attr/negative timeouts of 3600 s and
st_blksize 1 MiB (h5fs/fuse/stat_replies.py), files opened without keep_cache or direct_io.

Ready handshake (as scripts/passthrough_fs.py): once the mount answers a `stat`, "ready" is
printed on stdout; a failure prints its reason on stderr and exits 1. Unmount with
`fusermount3 -u MOUNTPOINT` (or SIGTERM/SIGINT the daemon). Depends on neither h5fs nor h5py.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import bare_fuse
import pyfuse3
from bare_fuse import fuse_escape
from pyfuse3 import FUSEError

TIMEOUT = 3600.0          # as h5fs (h5fs/fuse/stat_replies.py TIMEOUT)
BLKSIZE = 1 << 20         # as h5fs: cp copies in st_blksize pieces


def _unescape(s: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def is_mount_point(path: str) -> bool:
    """From /proc/self/mountinfo: a stat of a hung FUSE mount point would block."""
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
        return any(_unescape(line.split()[4]) == path for line in fh)


@dataclass(eq=False)
class Node:
    attr: pyfuse3.EntryAttributes
    children: dict[bytes, int] | None = None          # directories: name -> inode
    xattrs: dict[bytes, bytes] = field(default_factory=dict)
    backing: str | None = None                        # regular files: the plain file holding the data


class WriteFloorOperations(pyfuse3.Operations):
    def __init__(self, backing_dir: str):
        super().__init__()
        self.backing_dir = backing_dir
        self.nodes: dict[int, Node] = {}
        self.files: dict[int, Node] = {}              # open fd of a backing file -> its node
        self.listings: dict[int, list[tuple[bytes, int]]] = {}
        self.next_fh = 1
        self.started_ns = time.time_ns()
        root = self._add(stat.S_IFDIR | 0o755, os.getuid(), os.getgid())
        assert root.attr.st_ino == pyfuse3.ROOT_INODE

    def _add(self, mode: int, uid: int, gid: int) -> Node:
        a = pyfuse3.EntryAttributes()
        a.st_ino = pyfuse3.ROOT_INODE + len(self.nodes)
        a.entry_timeout = a.attr_timeout = TIMEOUT
        a.st_mode, a.st_nlink, a.st_uid, a.st_gid = mode, 1, uid, gid
        a.st_blksize = BLKSIZE
        a.st_atime_ns = a.st_mtime_ns = a.st_ctime_ns = self.started_ns   # times are not kept
        node = Node(a, {} if stat.S_ISDIR(mode) else None)
        self.nodes[a.st_ino] = node
        return node

    def _node(self, ino: int) -> Node:
        node = self.nodes.get(ino)
        if node is None:
            raise FUSEError(errno.ESTALE)
        return node

    def _dir(self, ino: int) -> dict[bytes, int]:
        children = self._node(ino).children
        if children is None:
            raise FUSEError(errno.ENOTDIR)
        return children

    def _child(self, parent_inode: int, name: bytes, mode: int, ctx: pyfuse3.RequestContext) -> Node:
        children = self._dir(parent_inode)
        if name in children:
            raise FUSEError(errno.EEXIST)
        node = self._add(mode & ~ctx.umask, ctx.uid, ctx.gid)
        children[name] = node.attr.st_ino
        return node

    # -- names and attributes -------------------------------------------------------------------

    async def lookup(self, parent_inode, name, ctx=None):
        ino = self._dir(parent_inode).get(name)
        if ino is None:   # a negative entry, cached as long as h5fs caches one
            neg = pyfuse3.EntryAttributes()
            neg.st_ino = 0
            neg.entry_timeout = TIMEOUT
            return neg
        return self.nodes[ino].attr

    async def getattr(self, inode, ctx=None):
        return self._node(inode).attr

    async def setattr(self, inode, attr, fields, fh, ctx):
        node = self._node(inode)
        if fields.update_size:   # the only change cp makes (O_TRUNC); other fields are ignored
            if node.backing is None:
                raise FUSEError(errno.EISDIR)
            os.truncate(node.backing, attr.st_size)
            node.attr.st_size = attr.st_size
        return node.attr

    async def forget(self, inode_list):
        return None   # nodes stay for the life of the mount (a benchmark's few thousand)

    async def mkdir(self, parent_inode, name, mode, ctx):
        return self._child(parent_inode, name, stat.S_IFDIR | mode, ctx).attr

    async def setxattr(self, inode, name, value, ctx):
        self._node(inode).xattrs[name] = value

    async def unlink(self, parent_inode, name, ctx):
        children = self._dir(parent_inode)
        ino = children.get(name)
        if ino is None:
            raise FUSEError(errno.ENOENT)
        if self.nodes[ino].children is not None:
            raise FUSEError(errno.EISDIR)
        del children[name]   # the backing file stays: a floor removes names, not storage

    async def rmdir(self, parent_inode, name, ctx):
        children = self._dir(parent_inode)
        ino = children.get(name)
        if ino is None:
            raise FUSEError(errno.ENOENT)
        if self.nodes[ino].children is None:
            raise FUSEError(errno.ENOTDIR)
        if self.nodes[ino].children:
            raise FUSEError(errno.ENOTEMPTY)
        del children[name]

    async def getxattr(self, inode, name, ctx):
        value = self._node(inode).xattrs.get(name)
        if value is None:
            raise FUSEError(pyfuse3.ENOATTR)
        return value

    async def listxattr(self, inode, ctx):
        return list(self._node(inode).xattrs)

    async def statfs(self, ctx):
        st = os.statvfs(self.backing_dir)
        s = pyfuse3.StatvfsData()
        for name in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree",
                     "f_favail", "f_namemax"):
            setattr(s, name, getattr(st, name))
        return s

    # -- directories ----------------------------------------------------------------------------

    async def opendir(self, inode, ctx):
        fh = self.next_fh
        self.next_fh += 1
        self.listings[fh] = list(self._dir(inode).items())   # a snapshot: offsets stay valid
        return fh

    async def readdir(self, fh, start_id, token):
        entries = self.listings[fh]
        for i in range(start_id, len(entries)):
            name, ino = entries[i]
            if not pyfuse3.readdir_reply(token, name, self.nodes[ino].attr, i + 1):
                return

    async def releasedir(self, fh):
        self.listings.pop(fh, None)

    # -- files ----------------------------------------------------------------------------------

    def _open(self, node: Node) -> pyfuse3.FileInfo:
        try:
            fd = os.open(node.backing, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise FUSEError(exc.errno or errno.EIO) from None
        self.files[fd] = node
        return pyfuse3.FileInfo(fh=fd)   # no keep_cache, no direct_io: as h5fs opens a new file

    async def create(self, parent_inode, name, mode, flags, ctx):
        node = self._child(parent_inode, name, stat.S_IFREG | mode, ctx)
        node.backing = os.path.join(self.backing_dir, str(node.attr.st_ino))
        return self._open(node), node.attr

    async def open(self, inode, flags, ctx):
        node = self._node(inode)
        if node.backing is None:
            raise FUSEError(errno.EISDIR)
        return self._open(node)

    async def write(self, fh, off, buf):
        try:
            n = os.pwrite(fh, buf, off)
        except OSError as exc:
            raise FUSEError(exc.errno or errno.EIO) from None
        a = self.files[fh].attr
        a.st_size = max(a.st_size, off + n)
        return n

    async def flush(self, fh):
        return None   # close(2): nothing held back to write

    async def fsync(self, fh, datasync):
        try:
            (os.fdatasync if datasync else os.fsync)(fh)
        except OSError as exc:
            raise FUSEError(exc.errno or errno.EIO) from None

    async def release(self, fh):
        self.files.pop(fh, None)
        os.close(fh)


# ------------------------------------------------------------------ serving


def serve(backing_dir: str, mountpoint: str, on_ready: Callable[[], None], on_fail: Callable[[str], None]) -> int:
    # h5fs's default kernel options (mount_options.fuse_options); pyfuse3 leaves writeback_cache off
    options = {"default_permissions", "subtype=write_floor", "fsname=" + fuse_escape(backing_dir)}
    return bare_fuse.serve(WriteFloorOperations(backing_dir), mountpoint, options, "write_floor",
                           is_mount_point, on_ready, on_fail)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("backing", help="directory for the plain files behind created files")
    ap.add_argument("mountpoint")
    args = ap.parse_args()
    backing, mountpoint = os.path.realpath(args.backing), os.path.realpath(args.mountpoint)

    def fail(msg: str) -> None:
        print(f"write_floor: {msg}", file=sys.stderr, flush=True)

    for path, what in ((backing, "backing directory"), (mountpoint, "mount point")):
        if not os.path.isdir(path):
            fail(f"{what} {path}: not a directory")
            return 1
    if is_mount_point(mountpoint):
        fail(f"{mountpoint}: busy: already a mount point")
        return 1
    return serve(backing, mountpoint, lambda: print("ready", flush=True), fail)


if __name__ == "__main__":
    sys.exit(main())
