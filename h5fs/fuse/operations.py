"""pyfuse3 request handlers: the tree of an HDF5 file, read-only for now.

Every handler is wrapped by `errors.boundary` (the one place errors become errno values).
Only the trio thread runs these handlers and touches the inode table; blocking data work
(`read_raw`, `read_npy_body`) goes through `offload.run_sync` after the engine's decoded-chunk
cache has been asked (`read_cached`).

File handles are inode numbers: a read-only view needs no per-open state.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from typing import Sequence

import pyfuse3
from pyfuse3 import FUSEError

from ..errors import H5fsError
from . import offload, views
from .errors import boundary
from .inodes import BROKEN, DIR, DTYPE, NPY, RAW, SYMLINK, InodeTable, Node

log = logging.getLogger("h5fs.fuse")

TIMEOUT = 3600.0        # entry/attr validity: data cannot change under a read-only mount
BLKSIZE = 1 << 20       # st_blksize: `cat` and friends read in 1 MiB pieces
NAME_MAX = 255
_KIND = {"group": DIR, "dataset": RAW, "datatype": DTYPE}


def _join(dir_path: str, name: str) -> str:
    return ("/" if dir_path == "/" else dir_path + "/") + name


class Operations(pyfuse3.Operations):
    def __init__(self, h5file, source: str, *, readonly: bool = True, info: dict | None = None):
        super().__init__()
        self.f = h5file
        self.source = source
        self.readonly = readonly
        self.info = dict(info or {})   # extra root facts: pid, file, log
        st = os.stat(source)
        self.uid, self.gid = st.st_uid, st.st_gid
        self.file_size = st.st_size
        self.mtime_ns = st.st_mtime_ns
        self.ctime_ns = st.st_ctime_ns
        self.table = InodeTable()
        root = h5file.root
        self.table.add_root(root, root.address)

    # ------------------------------------------------------------------ helpers

    def describe_request(self, args) -> str:
        """For logs: the mount path of the node a request concerns (and the name, if any)."""
        if not args or not isinstance(args[0], int):
            return ""
        node = self.table.get(args[0])
        where = node.path if node else f"inode {args[0]}"
        if len(args) > 1 and isinstance(args[1], bytes):
            where = _join(where, args[1].decode("utf-8", "replace"))
        return where

    def _node(self, ino: int) -> Node:
        node = self.table.get(ino)
        if node is None:
            raise FUSEError(errno.ESTALE)
        return node

    def _check(self, node: Node) -> None:
        """Answer EIO for a broken object (its reason was logged when first seen)."""
        if node.error is not None:
            log.debug("%s: broken object: %s", node.path, node.error)
            raise FUSEError(errno.EIO)

    def _mark_broken(self, node: Node, exc: BaseException) -> None:
        if node.error is None:
            node.error = exc
            log.error("%s: cannot serve this object, answering EIO: %s: %s",
                      node.path, type(exc).__name__, exc)

    def _object_node(self, address: int | None, path: str, dir_ino: int, name: bytes) -> Node:
        """The node of the object a hard link points to; a broken one if it cannot be read."""
        if address is None:
            exc = H5fsError(f"{path}: hard link without an address")
            node = self.table.link_node(dir_ino, name, path, b"")
            node.kind = BROKEN
            self._mark_broken(node, exc)
            return node
        existing = self.table.find_object(address)
        if existing is not None:
            return existing
        try:
            obj = self.f.get(address, path)
            kind = _KIND[obj.kind]
        except Exception as exc:  # a broken object must not hide the rest of its group
            node = self.table.object_node(address, BROKEN, path)
            self._mark_broken(node, exc)
            return node
        return self.table.object_node(address, kind, path, obj=obj)

    def _load_dir(self, node: Node) -> None:
        """Build a group's entries once: links in display order, `D.npy` right after `D`."""
        if node.entries is not None:
            return
        self._check(node)
        if node.kind != DIR:
            raise FUSEError(errno.ENOTDIR)
        try:
            links = node.obj.links()
        except Exception as exc:
            self._mark_broken(node, exc)
            raise FUSEError(errno.EIO) from None
        names = []
        for link in links:
            name = link.name.encode("utf-8", "surrogateescape")
            if not name or name in (b".", b"..") or len(name) > NAME_MAX or b"/" in name or b"\0" in name:
                log.warning("%s: link %r cannot be shown as a file name, skipped", node.path, link.name)
                continue
            names.append((name, link))
        taken = {name for name, _ in names}
        entries: list[tuple[bytes, int]] = []
        index: dict[bytes, int] = {}

        def add(name: bytes, ino: int) -> None:
            if name in index:
                log.warning("%s: duplicate link name %r, the first one wins", node.path, name)
                return
            index[name] = ino
            entries.append((name, ino))

        for name, link in names:
            path = _join(node.path, link.name)
            if link.kind == "hard":
                child = self._object_node(link.address, path, node.ino, name)
                add(name, child.ino)
                if child.kind == RAW:
                    npy = name + b".npy"
                    if npy in taken:
                        log.warning("%s.npy: hidden by a link of that name", path)
                    elif len(npy) <= NAME_MAX:
                        add(npy, self.table.npy_node(child).ino)
            elif link.kind == "soft":
                target = views.soft_link_target(node.path, link.target or "")
                add(name, self.table.link_node(node.ino, name, path, target.encode("utf-8", "surrogateescape")).ino)
            elif link.kind == "external":
                target = views.external_link_target(link.filename, link.target)
                add(name, self.table.link_node(node.ino, name, path, target.encode("utf-8", "surrogateescape")).ino)
            else:
                log.warning("%s: link of unknown kind %r skipped", path, link.kind)
        node.entries, node.index = entries, index

    def _npy_header(self, node: Node) -> bytes:
        header = node.cache.get("npy_header")
        if header is None:
            ds = node.obj
            header = node.cache["npy_header"] = views.npy_header(ds.npy_dtype, ds.npy_shape)
        return header

    def _datatype_text(self, node: Node) -> bytes:
        text = node.cache.get("text")
        if text is None:
            text = node.cache["text"] = views.datatype_text(node.obj.facts())
        return text

    def _times(self, a: pyfuse3.EntryAttributes, obj) -> None:
        mtime = getattr(obj, "mtime", None) if obj is not None else None
        a.st_mtime_ns = int(mtime * 1e9) if mtime is not None else self.mtime_ns
        a.st_atime_ns = a.st_mtime_ns
        a.st_ctime_ns = self.ctime_ns

    def _stat(self, node: Node) -> pyfuse3.EntryAttributes:
        self._check(node)
        a = node.cache.get("attr")
        if a is not None:
            return a
        try:
            a = self._make_stat(node)
        except FUSEError:
            raise
        except Exception as exc:
            self._mark_broken(node, exc)
            raise FUSEError(errno.EIO) from None
        node.cache["attr"] = a
        return a

    def _make_stat(self, node: Node) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = node.ino
        a.generation = 0
        a.entry_timeout = a.attr_timeout = TIMEOUT
        a.st_uid, a.st_gid = self.uid, self.gid
        a.st_blksize = BLKSIZE
        a.st_rdev = 0
        w = 0 if self.readonly else 0o200
        obj = node.obj
        if node.kind == DIR:
            a.st_mode = stat.S_IFDIR | 0o555 | w
            a.st_nlink = max(1, int(obj.nlink))
            a.st_size = 0
            a.st_blocks = 0
        elif node.kind == RAW:
            a.st_mode = stat.S_IFREG | 0o444 | w
            a.st_nlink = max(1, int(obj.nlink))
            a.st_size = int(obj.raw_size)
            a.st_blocks = (int(obj.storage_size) + 511) // 512
        elif node.kind == NPY:
            # a view of the same stored bytes: it allocates nothing of its own
            a.st_mode = stat.S_IFREG | 0o444 | w
            a.st_nlink = max(1, int(obj.nlink))
            a.st_size = len(self._npy_header(node)) + int(obj.npy_body_size)
            a.st_blocks = 0
        elif node.kind == DTYPE:
            a.st_mode = stat.S_IFREG | 0o444
            a.st_nlink = max(1, int(obj.nlink))
            a.st_size = len(self._datatype_text(node))
            a.st_blocks = 0
        elif node.kind == SYMLINK:
            a.st_mode = stat.S_IFLNK | 0o777
            a.st_nlink = 1
            a.st_size = len(node.target or b"")
            a.st_blocks = 0
        else:
            raise FUSEError(errno.EIO)
        self._times(a, obj)
        return a

    def _placeholder_stat(self, node: Node) -> pyfuse3.EntryAttributes:
        """readdirplus attributes for a broken entry: listed, never cached, so that the next
        lookup/getattr asks again and answers EIO."""
        a = pyfuse3.EntryAttributes()
        a.st_ino = node.ino
        a.entry_timeout = a.attr_timeout = 0
        a.st_mode = stat.S_IFREG
        a.st_nlink = 1
        a.st_uid, a.st_gid = self.uid, self.gid
        a.st_mtime_ns = a.st_atime_ns = self.mtime_ns
        a.st_ctime_ns = self.ctime_ns
        return a

    def _facts(self, node: Node) -> dict[str, str]:
        facts = node.cache.get("facts")
        if facts is not None:
            return facts
        facts = {}
        if node.obj is not None:
            for key, value in node.obj.facts().items():
                if key.startswith("attr."):
                    log.warning("%s: engine fact %r clashes with the attribute namespace", node.path, key)
                    continue
                facts[str(key)] = value if isinstance(value, str) else str(value)
            facts["kind"] = node.obj.kind
            facts["address"] = str(node.address)
            facts["path"] = getattr(node.obj, "path", node.path) or node.path
        if node.kind == NPY:
            facts["view"] = "npy"
        if node.ino == pyfuse3.ROOT_INODE:
            facts.update({k: str(v) for k, v in self.info.items()})
        node.cache["facts"] = facts
        return facts

    def _attributes(self, node: Node) -> dict[str, object]:
        attrs = node.cache.get("attributes")
        if attrs is None:
            attrs = {}
            if node.obj is not None:
                for attr in node.obj.attributes():
                    attrs.setdefault(attr.name, attr)
            node.cache["attributes"] = attrs
        return attrs

    # ------------------------------------------------------------------ metadata

    @boundary
    async def lookup(self, parent_inode: int, name: bytes, ctx=None) -> pyfuse3.EntryAttributes:
        parent = self._node(parent_inode)
        self._load_dir(parent)
        ino = parent.index.get(name)
        if ino is None:
            neg = pyfuse3.EntryAttributes()
            neg.st_ino = 0
            neg.entry_timeout = TIMEOUT
            return neg
        return self._stat(self.table.get(ino))

    @boundary
    async def getattr(self, inode: int, ctx=None) -> pyfuse3.EntryAttributes:
        return self._stat(self._node(inode))

    @boundary
    async def forget(self, inode_list) -> None:
        return None  # inodes are never reused: nothing to release

    @boundary
    async def opendir(self, inode: int, ctx=None) -> int:
        node = self._node(inode)
        self._load_dir(node)
        return inode

    @boundary
    async def readdir(self, fh: int, start_id: int, token) -> None:
        node = self._node(fh)
        self._load_dir(node)
        entries = node.entries
        for i in range(start_id, len(entries)):   # resume directly at start_id: O(1)
            name, ino = entries[i]
            child = self.table.get(ino)
            try:
                attr = self._stat(child)
            except FUSEError:
                attr = self._placeholder_stat(child)
            if not pyfuse3.readdir_reply(token, name, attr, i + 1):
                return

    @boundary
    async def releasedir(self, fh: int) -> None:
        return None

    @boundary
    async def readlink(self, inode: int, ctx=None) -> bytes:
        node = self._node(inode)
        self._check(node)
        if node.kind != SYMLINK:
            raise FUSEError(errno.EINVAL)
        return node.target

    @boundary
    async def statfs(self, ctx=None) -> pyfuse3.StatvfsData:
        s = pyfuse3.StatvfsData()
        s.f_bsize = BLKSIZE
        s.f_frsize = 4096
        s.f_blocks = (self.file_size + 4095) // 4096
        s.f_bfree = s.f_bavail = 0
        s.f_files = len(self.table)
        s.f_ffree = s.f_favail = 0
        s.f_namemax = NAME_MAX
        return s

    # ------------------------------------------------------------------ data

    @boundary
    async def open(self, inode: int, flags: int, ctx=None) -> pyfuse3.FileInfo:
        node = self._node(inode)
        self._check(node)
        if node.kind == DIR:
            raise FUSEError(errno.EISDIR)
        if node.kind not in (RAW, NPY, DTYPE):
            raise FUSEError(errno.EIO)
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND):
            raise FUSEError(errno.EROFS)
        self._stat(node)  # a broken dataset fails here rather than on read
        return pyfuse3.FileInfo(fh=inode, keep_cache=True)

    @boundary
    async def read(self, fh: int, off: int, size: int) -> bytes:
        node = self._node(fh)
        self._check(node)
        if node.kind == RAW:
            ds = node.obj
            end = min(off + size, int(ds.raw_size))
            if off >= end:
                return b""
            data = ds.read_cached(off, end - off)
            if data is None:
                data = await offload.run_sync(ds.read_raw, off, end - off)
            return data
        if node.kind == NPY:
            return await self._read_npy(node, off, size)
        if node.kind == DTYPE:
            return self._datatype_text(node)[off:off + size]
        raise FUSEError(errno.EIO)

    async def _read_npy(self, node: Node, off: int, size: int) -> bytes:
        ds = node.obj
        header = self._npy_header(node)
        hlen = len(header)
        out = header[off:off + size] if off < hlen else b""
        boff = max(0, off - hlen)
        bsize = min(size - len(out), int(ds.npy_body_size) - boff)
        if bsize <= 0:
            return out
        cached = getattr(ds, "read_npy_cached", None)
        body = cached(boff, bsize) if cached is not None else None
        if body is None:
            body = await offload.run_sync(ds.read_npy_body, boff, bsize)
        return out + body if out else body

    @boundary
    async def release(self, fh: int) -> None:
        return None

    @boundary
    async def flush(self, fh: int) -> None:
        return None

    # ------------------------------------------------------------------ xattrs

    @boundary
    async def listxattr(self, inode: int, ctx=None) -> Sequence[bytes]:
        node = self._node(inode)
        self._check(node)
        if node.kind == SYMLINK:
            return []
        names = []
        for name in self._attributes(node):
            xname = views.attribute_xattr_name(name)
            if xname is None:
                log.warning("%s: attribute %r cannot be shown as an xattr name", node.path, name)
                continue
            names.append(xname)
        names.extend(views.fact_xattr_name(k) for k in self._facts(node))
        return names

    @boundary
    async def getxattr(self, inode: int, name: bytes, ctx=None) -> bytes:
        node = self._node(inode)
        self._check(node)
        if node.kind == SYMLINK:
            raise FUSEError(pyfuse3.ENOATTR)
        attr_name = views.attribute_name_for_xattr(name)
        if attr_name is None:
            prefix = views.FACT_PREFIX.encode()
            if name.startswith(prefix) and not name.startswith(views.ESCAPED_ATTR_PREFIX.encode()):
                value = self._facts(node).get(name[len(prefix):].decode("utf-8", "replace"))
                if value is not None:
                    return value.encode("utf-8", "surrogateescape")
            raise FUSEError(pyfuse3.ENOATTR)
        key = ("xattr", attr_name)
        value = node.cache.get(key)
        if value is None:
            attr = self._attributes(node).get(attr_name)
            if attr is None:
                raise FUSEError(pyfuse3.ENOATTR)
            try:
                value = views.format_value(attr.value)
            except H5fsError as exc:
                log.error("%s: attribute %r cannot be read: %s", node.path, attr_name, exc)
                raise FUSEError(exc.errno) from None
            node.cache[key] = value
        if len(value) > views.XATTR_SIZE_MAX:
            raise FUSEError(errno.E2BIG)
        return value

    # ------------------------------------------------------------------ writes: not yet

    @boundary
    async def setattr(self, inode, attr, fields, fh, ctx):
        raise FUSEError(errno.EROFS)

    @boundary
    async def write(self, fh, off, buf):
        raise FUSEError(errno.EROFS)

    @boundary
    async def create(self, parent_inode, name, mode, flags, ctx):
        raise FUSEError(errno.EROFS)

    @boundary
    async def mknod(self, parent_inode, name, mode, rdev, ctx):
        raise FUSEError(errno.EROFS)

    @boundary
    async def mkdir(self, parent_inode, name, mode, ctx):
        raise FUSEError(errno.EROFS)

    @boundary
    async def unlink(self, parent_inode, name, ctx):
        raise FUSEError(errno.EROFS)

    @boundary
    async def rmdir(self, parent_inode, name, ctx):
        raise FUSEError(errno.EROFS)

    @boundary
    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        raise FUSEError(errno.EROFS)

    @boundary
    async def symlink(self, parent_inode, name, target, ctx):
        raise FUSEError(errno.EROFS)

    @boundary
    async def link(self, inode, new_parent_inode, new_name, ctx):
        raise FUSEError(errno.EROFS)

    @boundary
    async def setxattr(self, inode, name, value, ctx):
        raise FUSEError(errno.EROFS)

    @boundary
    async def removexattr(self, inode, name, ctx):
        raise FUSEError(errno.EROFS)
