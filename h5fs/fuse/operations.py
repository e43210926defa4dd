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
from dataclasses import dataclass
from typing import Sequence

import pyfuse3
import trio
from pyfuse3 import FUSEError

from ..errors import H5fsError
from . import offload, views
from .errors import boundary
from .inodes import BROKEN, DIR, DTYPE, NPY, RAW, SYMLINK, InodeTable, Node
from .prefetch import Prefetcher

log = logging.getLogger("h5fs.fuse")

TIMEOUT = 3600.0        # entry/attr validity: data cannot change under a read-only mount
BLKSIZE = 1 << 20       # st_blksize: `cat` and friends read in 1 MiB pieces
NAME_MAX = 255
LAZY_MAX = 65536        # names remembered per never-listed group
_KIND = {"group": DIR, "dataset": RAW, "datatype": DTYPE}


@dataclass
class StatInfo:
    """The numbers behind a node's stat, computed once (in a worker thread when listing)."""
    nlink: int = 1
    mtime_ns: int = 0
    size: int = 0
    blocks: int = 0
    npy_header: bytes | None = None
    npy_size: int = 0
    npy_error: BaseException | None = None  # the raw view works, the .npy view cannot be served
    text: bytes | None = None


@dataclass
class Child:
    """One prepared directory entry (built in a worker thread, committed in the trio thread)."""
    name: bytes
    path: str
    kind: str
    address: int | None = None
    obj: object = None
    info: StatInfo | None = None
    target: bytes | None = None
    error: BaseException | None = None
    want_npy: bool = False


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
        self.prefetcher = Prefetcher()  # started with the daemon's nursery (daemon._main)
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
        if node.kind == NPY and node.error is None:
            raw = self.table.find_object(node.address)
            if raw is not None and raw.error is not None:
                node.error = raw.error
            elif raw is not None and raw.cache.get("info") is not None and raw.cache["info"].npy_error:
                self._mark_broken(node, raw.cache["info"].npy_error)
        if node.error is not None:
            log.debug("%s: broken object: %s", node.path, node.error)
            raise FUSEError(errno.EIO)

    def _mark_broken(self, node: Node, exc: BaseException) -> None:
        if not isinstance(exc, H5fsError):
            # not the file's fault (memory, an interrupted call): EIO now, a fresh try next time
            log.error("%s: %s: %s", node.path, type(exc).__name__, exc)
            return
        if node.error is None:
            node.error = exc
            log.error("%s: cannot serve this object, answering EIO: %s: %s",
                      node.path, type(exc).__name__, exc)

    # Directory entries are prepared in a worker thread (object headers, sizes, .npy headers:
    # file I/O and checksums that would stall every other request on a big group), then
    # committed to the inode table in the trio thread without an await in between.

    def _prepare(self, dir_path: str, link) -> Child | None:
        """Thread-safe: everything the listing needs about one link (no table access)."""
        name = link.name.encode("utf-8", "surrogateescape")
        if not name or name in (b".", b"..") or len(name) > NAME_MAX or b"/" in name or b"\0" in name:
            log.warning("%s: link %r cannot be shown as a file name, skipped", dir_path, link.name)
            return None
        path = _join(dir_path, link.name)
        kind = link.kind
        if kind == "hard":
            if link.address is None:
                return Child(name, path, BROKEN, error=H5fsError(f"{path}: hard link without an address"))
            obj = None
            try:
                obj = self.f.get(link.address, path)
                ckind = _KIND[obj.kind]
                return Child(name, path, ckind, address=link.address, obj=obj, info=self._stat_info(ckind, obj))
            except Exception as exc:  # a broken object must not hide the rest of its group
                return Child(name, path, BROKEN, address=link.address, obj=obj, error=exc)
        if kind == "soft":
            target = views.soft_link_target(dir_path, link.target or "")
        elif kind == "external":
            target = views.external_link_target(link.filename, link.target)
        else:
            log.warning("%s: link of unknown kind %r skipped", path, kind)
            return None
        return Child(name, path, SYMLINK, target=target.encode("utf-8", "surrogateescape"))

    def _prepare_dir(self, dir_path: str, group) -> list[Child]:
        """Thread-safe: every link of `group`, prepared."""
        out = []
        for link in group.links():
            child = self._prepare(dir_path, link)
            if child is not None:
                out.append(child)
        return out

    def _prepare_name(self, dir_path: str, group, name: bytes) -> Child | None:
        """Thread-safe: the one entry `name` of `group` (for a lookup before any listing)."""
        finder = getattr(group, "link", None)
        if finder is None:
            return None
        text = name.decode("utf-8", "surrogateescape")
        link = finder(text)
        if link is not None:
            return self._prepare(dir_path, link)
        if text.endswith(".npy"):
            link = finder(text[:-4])
            if link is not None and link.kind == "hard":
                child = self._prepare(dir_path, link)
                if child is not None and child.kind == RAW:
                    child.want_npy = True
                    return child
        return None

    def _commit(self, dir_node: Node, child: Child) -> Node:
        """Trio thread: the node of a prepared child (existing nodes win: inodes are stable)."""
        if child.kind == SYMLINK:
            return self.table.link_node(dir_node.ino, child.name, child.path, child.target)
        if child.address is None:
            node = self.table.link_node(dir_node.ino, child.name, child.path, b"")
            node.kind = BROKEN
            self._mark_broken(node, child.error)
            return node
        node = self.table.find_object(child.address)
        if node is not None:
            return node
        node = self.table.object_node(child.address, child.kind, child.path, obj=child.obj)
        if child.error is not None:
            self._mark_broken(node, child.error)
        else:
            self._store_info(node, child.info)
        return node

    async def _load_dir(self, node: Node) -> None:
        """Build a group's entries once: links in display order, `D.npy` right after `D`."""
        while node.entries is None:
            self._check(node)
            if node.kind != DIR:
                raise FUSEError(errno.ENOTDIR)
            loading = node.cache.get("loading")
            if loading is not None:  # another request is building it: wait, then look again
                await loading.wait()
                continue
            loading = node.cache["loading"] = trio.Event()
            try:
                children = await offload.run_sync(self._prepare_dir, node.path, node.obj)
            except Exception as exc:
                self._mark_broken(node, exc)
                raise FUSEError(errno.EIO) from None
            finally:
                del node.cache["loading"]
                loading.set()
            self._install_dir(node, children)

    def _install_dir(self, node: Node, children: list[Child]) -> None:
        taken = {c.name for c in children}
        entries: list[tuple[bytes, int]] = []
        index: dict[bytes, int] = {}

        def add(name: bytes, ino: int) -> bool:
            if name in index:
                log.warning("%s: duplicate link name %r, the first one wins", node.path, name)
                return False
            index[name] = ino
            entries.append((name, ino))
            return True

        for child in children:
            cnode = self._commit(node, child)
            if add(child.name, cnode.ino) and cnode.kind == RAW:
                npy = child.name + b".npy"
                if npy in taken:
                    log.warning("%s.npy: hidden by a link of that name", child.path)
                elif len(npy) <= NAME_MAX:
                    add(npy, self.table.npy_node(cnode).ino)
        node.entries, node.index = entries, index
        node.cache.pop("lazy", None)

    async def _child(self, node: Node, name: bytes) -> Node | None:
        """The entry `name` of a directory, without listing a group that was never listed."""
        if node.entries is not None:
            ino = node.index.get(name)
            return None if ino is None else self.table.get(ino)
        self._check(node)
        if node.kind != DIR:
            raise FUSEError(errno.ENOTDIR)
        lazy = node.cache.setdefault("lazy", {})
        if name in lazy:
            ino = lazy[name]
            return None if ino is None else self.table.get(ino)
        if getattr(node.obj, "link", None) is None:
            await self._load_dir(node)
            return await self._child(node, name)
        try:
            child = await offload.run_sync(self._prepare_name, node.path, node.obj, name)
        except Exception as exc:
            self._mark_broken(node, exc)
            raise FUSEError(errno.EIO) from None
        if node.entries is not None:  # listed meanwhile: the listing is authoritative
            return await self._child(node, name)
        found = None
        if child is not None:
            cnode = self._commit(node, child)
            found = self.table.npy_node(cnode) if child.want_npy else cnode
        lazy = node.cache.setdefault("lazy", {})
        if len(lazy) >= LAZY_MAX:  # bound what lookups of missing names can pile up
            lazy.clear()
        lazy[name] = None if found is None else found.ino
        return found

    def _stat_info(self, kind: str, obj) -> StatInfo:
        """Thread-safe: the numbers a stat needs (may do file I/O, e.g. a chunk index walk)."""
        mtime = getattr(obj, "mtime", None)
        info = StatInfo(nlink=max(1, int(obj.nlink)),
                        mtime_ns=int(mtime * 1e9) if mtime is not None else self.mtime_ns)
        if kind == RAW:
            info.size = int(obj.raw_size)
            info.blocks = (int(obj.storage_size) + 511) // 512
            try:
                info.npy_header = views.npy_header(obj.npy_dtype, obj.npy_shape)
                info.npy_size = len(info.npy_header) + int(obj.npy_body_size)
            except Exception as exc:
                info.npy_error = exc
        elif kind == DTYPE:
            info.text = views.datatype_text(obj.facts())
            info.size = len(info.text)
        return info

    def _store_info(self, node: Node, info: StatInfo) -> None:
        node.cache["info"] = info
        if info.npy_header is not None:
            node.cache["npy_header"] = info.npy_header
        if info.text is not None:
            node.cache["text"] = info.text

    def _info(self, node: Node) -> StatInfo:
        if node.kind == NPY:  # the view shares its dataset's numbers
            node = self.table.find_object(node.address)
        info = node.cache.get("info")
        if info is None:  # the root, or a node whose info was never prepared
            self._store_info(node, self._stat_info(node.kind, node.obj))
            info = node.cache["info"]
        return info

    def _npy_header(self, node: Node) -> bytes:
        return self._info(node).npy_header

    def _datatype_text(self, node: Node) -> bytes:
        return self._info(node).text

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
        a.st_ctime_ns = self.ctime_ns
        # read-only modes until writes exist (every write answers EROFS)
        if node.kind == SYMLINK:
            a.st_mode = stat.S_IFLNK | 0o777
            a.st_nlink = 1
            a.st_size = len(node.target or b"")
            a.st_blocks = 0
            a.st_mtime_ns = a.st_atime_ns = self.mtime_ns
            return a
        info = self._info(node)
        a.st_nlink = info.nlink
        a.st_mtime_ns = a.st_atime_ns = info.mtime_ns
        a.st_blocks = 0
        a.st_size = 0
        if node.kind == DIR:
            a.st_mode = stat.S_IFDIR | 0o555
        elif node.kind == RAW:
            a.st_mode = stat.S_IFREG | 0o444
            a.st_size = info.size
            a.st_blocks = info.blocks
        elif node.kind == NPY:
            # a view of the same stored bytes: it allocates nothing of its own
            a.st_mode = stat.S_IFREG | 0o444
            a.st_size = info.npy_size
        elif node.kind == DTYPE:
            a.st_mode = stat.S_IFREG | 0o444
            a.st_size = info.size
        else:
            raise FUSEError(errno.EIO)
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

    # Facts and attribute lists may read heaps, B-trees and chunk indexes: those are computed in
    # a worker thread on first use (touching no table state), then cached on the node. What
    # the parsed object header alone answers is computed inline: a thread hop costs ~120 us,
    # more than the work, and a recursive getfattr makes hundreds of thousands of these calls.

    async def _facts(self, node: Node) -> dict[str, str]:
        facts = node.cache.get("facts")
        if facts is None:
            if node.obj is None or node.obj.facts_from_header:
                facts = self._compute_facts(node)
            else:
                facts = await offload.run_sync(self._compute_facts, node)
            node.cache["facts"] = facts
        return facts

    def _compute_facts(self, node: Node) -> dict[str, str]:
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
        return facts

    async def _attributes(self, node: Node) -> dict[str, object]:
        attrs = node.cache.get("attributes")
        if attrs is None:
            if node.obj is None or not node.obj.dense_attributes:
                attrs = _attributes_by_name(node.obj)
            else:
                attrs = await offload.run_sync(_attributes_by_name, node.obj)
            node.cache["attributes"] = attrs
        return attrs

    # ------------------------------------------------------------------ metadata

    @boundary
    async def lookup(self, parent_inode: int, name: bytes, ctx=None) -> pyfuse3.EntryAttributes:
        parent = self._node(parent_inode)
        child = await self._child(parent, name)
        if child is None:  # cached negative entry: nothing appears while read-only
            neg = pyfuse3.EntryAttributes()
            neg.st_ino = 0
            neg.entry_timeout = TIMEOUT
            return neg
        return self._stat(child)

    @boundary
    async def getattr(self, inode: int, ctx=None) -> pyfuse3.EntryAttributes:
        return self._stat(self._node(inode))

    @boundary
    async def forget(self, inode_list) -> None:
        return None  # inodes are never reused: nothing to release

    @boundary
    async def opendir(self, inode: int, ctx=None) -> int:
        node = self._node(inode)
        await self._load_dir(node)
        return inode

    @boundary
    async def readdir(self, fh: int, start_id: int, token) -> None:
        node = self._node(fh)
        await self._load_dir(node)
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
            if ds.prefetchable:
                self.prefetcher.after_read(fh, ds.warm, off, end - off, int(ds.raw_size))
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
        body = ds.read_npy_cached(boff, bsize)
        if body is None:
            body = await offload.run_sync(ds.read_npy_body, boff, bsize)
        if ds.prefetchable:  # the body is the raw view: decode ahead through it
            self.prefetcher.after_read(node.ino, ds.warm, boff, bsize, int(ds.raw_size))
        return out + body if out else body

    @boundary
    async def release(self, fh: int) -> None:
        self.prefetcher.forget(fh)

    @boundary
    async def flush(self, fh: int) -> None:
        return None

    # ------------------------------------------------------------------ xattrs

    @boundary
    async def listxattr(self, inode: int, ctx=None) -> Sequence[bytes]:
        node = self._node(inode)
        self._check(node)
        if node.kind in (SYMLINK, NPY):
            # the .npy view answers its object's attributes by name but lists none, so a
            # recursive `getfattr -d` dumps each object once (FUSE requests dominate its cost)
            return []
        names = []
        for name in await self._attributes(node):
            xname = views.attribute_xattr_name(name)
            if xname is None:
                log.warning("%s: attribute %r cannot be shown as an xattr name", node.path, name)
                continue
            names.append(xname)
        # Facts (user.h5fs.*) are readable by name but not listed: `getfattr -d` fetches every
        # listed name, and a dozen facts per file made a recursive dump ~6x slower.
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
                value = (await self._facts(node)).get(name[len(prefix):].decode("utf-8", "replace"))
                if value is not None:
                    return value.encode("utf-8", "surrogateescape")
            raise FUSEError(pyfuse3.ENOATTR)
        key = ("xattr", attr_name)
        value = node.cache.get(key)
        if value is None:
            attr = (await self._attributes(node)).get(attr_name)
            if attr is None:
                raise FUSEError(pyfuse3.ENOATTR)
            text = lambda: views.format_value(attr.value, views.XATTR_SIZE_MAX)  # noqa: E731
            try:  # heap reads or a big value: a worker thread; a small value in the header: inline
                value = text() if attr.value_in_header else await offload.run_sync(text)
            except H5fsError as exc:
                log.error("%s: attribute %r cannot be read: %s", node.path, attr_name, exc)
                raise FUSEError(exc.errno) from None
            if value is None:
                raise FUSEError(errno.E2BIG)
            node.cache[key] = value
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


def _attributes_by_name(obj) -> dict[str, object]:
    """Thread-safe: an object's attributes by name (the first of duplicate names wins)."""
    attrs: dict[str, object] = {}
    if obj is not None:
        for attr in obj.attributes():
            attrs.setdefault(attr.name, attr)
    return attrs
