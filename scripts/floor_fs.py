"""The floor of the metadata walk: a minimal pyfuse3 + trio filesystem serving an .h5 file's tree
from in-memory dicts, so `scripts/bench_read.py --objects` can tell h5fs's own cost from what
pyfuse3, trio and the kernel cost per request.

    python3 scripts/floor_fs.py FILE MOUNTPOINT     # foreground; prints "ready" once mounted

The tree is built with h5py BEFORE mounting (a benchmark tool, not h5fs run time) and shows what
an h5fs read-only mount shows for groups, datasets and soft/external links: directories, `D` with
the raw size and `D.npy` with the size `numpy.save` gives, the attributes as listed `user.*` xattrs
with h5fs's own names and value text (`h5fs.fuse.views`), `D.npy` answering its dataset's xattrs
by name but listing none, entry/attr timeouts of 3600 s, cached negative lookups. Every handler
answers from a dict lookup; data is not served (the walk never opens a file). Simplifications: the
sizes assume fixed-size datatypes (no vlen bodies), hard links to one object get one inode per
link, named datatypes are left out, times are the file's.

The root answers `user.floor.requests`: the number of FUSE requests served so far (this one
included). The peak RSS is reset after the tree is built (`/proc/self/clear_refs`), so VmHWM
measures serving, not the h5py walk. Unmount with `fusermount3 -u MOUNTPOINT` (or SIGTERM).
"""

from __future__ import annotations

import argparse
import errno
import functools
import gc
import io
import os
import signal
import stat
import sys
from dataclasses import dataclass, field

import h5py
import numpy as np
import pyfuse3
import trio
from numpy.lib.format import dtype_to_descr, write_array_header_1_0, write_array_header_2_0
from pyfuse3 import FUSEError

from h5fs.fuse.mounts import find_mount
from h5fs.fuse.views import XATTR_SIZE_MAX, attribute_xattr_name, format_value

TIMEOUT = 3600.0          # as h5fs read-only
REQUESTS_XATTR = b"user.floor.requests"


@dataclass(eq=False)
class Node:
    attr: pyfuse3.EntryAttributes
    entries: list[tuple[bytes, int]] | None = None   # directories: (name, ino) in listing order
    index: dict[bytes, int] = field(default_factory=dict)
    xattrs: dict[bytes, bytes] = field(default_factory=dict)
    listed: list[bytes] = field(default_factory=list)
    target: bytes | None = None                      # symlinks


def npy_header_size(dtype: np.dtype, shape: tuple[int, ...]) -> int:
    """The length of the header `numpy.save` writes (format 1.0, or 2.0 when that is too small)."""
    header = {"descr": dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    for write in (write_array_header_1_0, write_array_header_2_0):
        buf = io.BytesIO()
        try:
            write(buf, header)
            return len(buf.getvalue())
        except ValueError:
            continue
    raise ValueError(f"no .npy header format holds {header}")


def symlink_text(dir_path: str, link: h5py.SoftLink | h5py.ExternalLink) -> bytes:
    """What h5fs shows: an absolute soft link relative to its directory, `FILE:OBJECT` for an
    external one."""
    if isinstance(link, h5py.ExternalLink):
        text = f"{link.filename}:{link.path}"
    elif link.path.startswith("/"):
        depth = len([c for c in dir_path.split("/") if c])
        text = "/".join([".."] * depth + [c for c in link.path.split("/") if c]) or "."
    else:
        text = link.path
    return text.encode("utf-8", "surrogateescape")


def _attributes(obj) -> dict[bytes, bytes]:
    """An object's attributes as h5fs shows them: xattr name -> value text."""
    out = {}
    for name, value in obj.attrs.items():
        xname = attribute_xattr_name(name)
        text = format_value(value, XATTR_SIZE_MAX)
        if xname is not None and text is not None:
            out[xname] = text
    return out


class Tree:
    """Inode -> Node for the whole file, built once from h5py."""

    def __init__(self, source: str):
        self.st = os.stat(source)
        self.nodes: dict[int, Node] = {}
        with h5py.File(source, "r") as f:
            root = self._add(stat.S_IFDIR | 0o555, nlink=_nlink(f), xattrs=_attributes(f))
            self._walk(f, root, "/")

    def _add(self, mode: int, size: int = 0, blocks: int = 0, *, nlink: int = 1,
             xattrs: dict[bytes, bytes] | None = None, listed: bool = True) -> Node:
        a = pyfuse3.EntryAttributes()
        a.st_ino = pyfuse3.ROOT_INODE + len(self.nodes)
        a.entry_timeout = a.attr_timeout = TIMEOUT
        a.st_mode, a.st_size, a.st_blocks, a.st_nlink = mode, size, blocks, nlink
        a.st_uid, a.st_gid = self.st.st_uid, self.st.st_gid
        a.st_blksize = 1 << 20
        a.st_mtime_ns = a.st_atime_ns = self.st.st_mtime_ns
        a.st_ctime_ns = self.st.st_ctime_ns
        xattrs = xattrs if xattrs is not None else {}
        node = Node(a, [] if stat.S_ISDIR(mode) else None, xattrs=xattrs, listed=list(xattrs) if listed else [])
        self.nodes[a.st_ino] = node
        return node

    def _walk(self, group: h5py.Group, dir_node: Node, dir_path: str) -> None:
        def entry(name: str, node: Node) -> None:
            raw = name.encode("utf-8", "surrogateescape")
            dir_node.entries.append((raw, node.attr.st_ino))
            dir_node.index[raw] = node.attr.st_ino

        for name in group:
            link = group.get(name, getlink=True)
            if isinstance(link, (h5py.SoftLink, h5py.ExternalLink)):
                text = symlink_text(dir_path, link)
                node = self._add(stat.S_IFLNK | 0o777, len(text), listed=False)
                node.target = text
                entry(name, node)
                continue
            obj = group[name]
            if isinstance(obj, h5py.Group):
                node = self._add(stat.S_IFDIR | 0o555, nlink=_nlink(obj), xattrs=_attributes(obj))
                entry(name, node)
                self._walk(obj, node, dir_path.rstrip("/") + "/" + name)
            elif isinstance(obj, h5py.Dataset):
                size = obj.dtype.itemsize * obj.size if obj.shape is not None else 0
                nlink, xattrs = _nlink(obj), _attributes(obj)
                blocks = (obj.id.get_storage_size() + 511) // 512
                entry(name, self._add(stat.S_IFREG | 0o444, size, blocks, nlink=nlink, xattrs=xattrs))
                npy_size = npy_header_size(obj.dtype, obj.shape or ()) + size
                entry(name + ".npy", self._add(stat.S_IFREG | 0o444, npy_size, nlink=nlink, xattrs=xattrs,
                                               listed=False))


def _nlink(obj) -> int:
    return h5py.h5o.get_info(obj.id).rc


def counted(handler):
    """Count every request the handler serves."""
    @functools.wraps(handler)
    async def wrapper(self, *args):
        self.requests += 1
        return await handler(self, *args)
    return wrapper


class FloorOperations(pyfuse3.Operations):
    def __init__(self, tree: Tree):
        super().__init__()
        self.nodes = tree.nodes
        self.requests = 0

    def _node(self, ino: int) -> Node:
        node = self.nodes.get(ino)
        if node is None:
            raise FUSEError(errno.ESTALE)
        return node

    @counted
    async def lookup(self, parent_inode, name, ctx=None):
        ino = self._node(parent_inode).index.get(name)
        if ino is None:
            neg = pyfuse3.EntryAttributes()
            neg.st_ino = 0
            neg.entry_timeout = TIMEOUT
            return neg
        return self.nodes[ino].attr

    @counted
    async def getattr(self, inode, ctx=None):
        return self._node(inode).attr

    @counted
    async def forget(self, inode_list):
        return None

    @counted
    async def opendir(self, inode, ctx=None):
        if self._node(inode).entries is None:
            raise FUSEError(errno.ENOTDIR)
        return inode

    @counted
    async def readdir(self, fh, start_id, token):
        entries = self.nodes[fh].entries
        for i in range(start_id, len(entries)):
            name, ino = entries[i]
            if not pyfuse3.readdir_reply(token, name, self.nodes[ino].attr, i + 1):
                return

    @counted
    async def releasedir(self, fh):
        return None

    @counted
    async def readlink(self, inode, ctx=None):
        target = self._node(inode).target
        if target is None:
            raise FUSEError(errno.EINVAL)
        return target

    @counted
    async def listxattr(self, inode, ctx=None):
        return self._node(inode).listed

    @counted
    async def getxattr(self, inode, name, ctx=None):
        if inode == pyfuse3.ROOT_INODE and name == REQUESTS_XATTR:
            return str(self.requests).encode()
        value = self._node(inode).xattrs.get(name)
        if value is None:
            raise FUSEError(pyfuse3.ENOATTR)
        return value

    @counted
    async def statfs(self, ctx=None):
        s = pyfuse3.StatvfsData()
        s.f_bsize = s.f_frsize = 4096
        s.f_files = len(self.nodes)
        s.f_namemax = 255
        return s


async def _serve() -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_stop_on_signal)
        await pyfuse3.main()
        nursery.cancel_scope.cancel()


async def _stop_on_signal() -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            pyfuse3.terminate()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("mountpoint")
    args = ap.parse_args()
    ops = FloorOperations(Tree(args.file))
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # reset VmHWM: the peak from here on is serving's
    except OSError as exc:
        print(f"floor: peak RSS not reset ({exc}): VmHWM includes the h5py walk", file=sys.stderr)
    pyfuse3.init(ops, args.mountpoint, {"ro", "default_permissions", "subtype=floor", "fsname=h5fs-floor"})
    print("ready", flush=True)
    try:
        trio.run(_serve)
    finally:
        # fusermount3 -u ends pyfuse3.main with the mount gone; a signal leaves it to us
        pyfuse3.close(unmount=find_mount(args.mountpoint) is not None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
