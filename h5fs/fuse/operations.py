"""pyfuse3 request handlers: a thin adapter over the engine's namespace (h5fs.model.namespace).

The engine answers names, stat numbers, facts and attributes. This module keeps only what the
adapter must: the kernel's inodes and their lookup counts (`inodes`), per-open file and directory
handles (`handles`), where to ask the engine (inline or in a worker thread), and what to tell the
kernel (timeouts, keep_cache, invalidations).

Every handler is wrapped by `errors.boundary`: the one place errors become errno values, which
also counts the requests served (the root fact `user.h5fs.requests`). Only the trio thread runs
handlers and touches the inode table and the handles. What an object header answers (the stat
numbers of most objects, attribute lists and small values kept in the header, most facts) is
answered inline, and so are lookups in compact groups: a thread hop costs more than the work.
On a writable mount, lookups in a group's name index and the stat refreshes after edits are
answered inline too while no commit is under way (`_lookup_beyond`, `_quickly`), as are small
edits (fuse/edits.py). Listings (every child's header), other lookups, heap and index reads,
variable-length data and chunk decoding go through `offload.run_sync`; st_blocks that take a
chunk index walk through `blocks` (stat answers an estimate at once, the inode is invalidated
once it is known; a lookup or getattr waits up to SETTLE_WAIT for it first).

The kernel is told long entry, attribute and negative-entry timeouts and keeps the page cache
of open files: nothing changes under the mount while writes answer EROFS, and what does change
(an estimated st_blocks) is invalidated (`invalidate`). For the same reason recent listings,
attribute tables, facts and formatted values are kept in bounded caches by object address (a
writer must drop what a commit changes, as it invalidates the kernel's copies).
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import stat
import time
from dataclasses import replace
from typing import Sequence

import pyfuse3
from pyfuse3 import FUSEError

from ..errors import H5fsError
from ..logs import Logs
from ..model.dataset_create import NPY_CHUNK_BYTES
from ..model import namespace
from ..model.namespace import DIR, DTYPE, NPY, POINTS, RAW, SYMLINK, Entry, Numbers
from ..format.messages.layout import VIRTUAL
from ..model.tree_edit import TreeEditor
from ..model.writeback import Writeback
from ..storage.byte_source import WouldBlock
from . import offload, views
from .blocks import BlockCounts
from .errors import boundary, warn_once
from .handles import Handles, NpyStream, OpenDir, OpenFile, handle_address
from .inodes import InodeTable, Node
from .invalidate import Invalidator
from .lru import Lru
from .points_stream import PointsStream
from .points_stream import finish as points_finish
from .prefetch import Prefetcher
from .edits import DEFAULT_FILTERS, EditSide, check_length
from .writes import FLUSH_DELAY, WriteSide

log = logging.getLogger("h5fs.fuse")

TIMEOUT = 3600.0        # entry/attr/negative validity: nothing changes unless invalidated
BLKSIZE = 1 << 20       # st_blksize: `cat` and friends read in 1 MiB pieces
SETTLE_WAIT = 0.5       # s a lookup/getattr waits for a chunk index walk before answering an estimate
SMALL_INDEX = 1024      # chunk slots of an index a lookup walks itself (st_blocks) before answering
ATTRIBUTE_TABLES = 256  # objects whose attributes-by-name are kept (listxattr, then getxattr of each)
FACT_TABLES = 256
FREE_INODES = 1 << 32   # statfs of a writable mount: objects an HDF5 file can still take (no inode table)
GONE_TWIN_INO = 1 << 63  # the inode of a view removed with its twin (never in the inode table)
XATTR_VALUES = 1024     # formatted values kept (getfattr asks each value twice: size, then bytes)
LISTED_ENTRIES = 65536   # entries of recent listings kept (`find`, then `getfattr -R`, list each group; ~250 B each)
FH_HANDLERS = frozenset({"read", "release", "flush", "fsync", "write", "readdir", "releasedir"})


class Operations(pyfuse3.Operations):
    def __init__(self, h5file, source: str, *, writeback: Writeback | None = None, info: dict | None = None,
                 mountpoint: str = "/", compression: str | None = None, chunk_bytes: int = NPY_CHUNK_BYTES,
                 owner: tuple[int | None, int | None] = (None, None), umask: int | None = None,
                 flush_delay: float = FLUSH_DELAY, logs: Logs | None = None):
        super().__init__()
        self.f = h5file
        self.source = source
        self.writes = WriteSide(self, writeback) if writeback is not None else None
        editor = TreeEditor(h5file, writeback, in_use=lambda address: self.handles.holds(address))
        self.edits = (EditSide(self, editor, compression or DEFAULT_FILTERS, chunk_bytes)
                      if writeback is not None else None)
        if self.writes is not None:
            self.writes.flush_delay = flush_delay
        self.mountpoint = mountpoint
        self.info = {k: str(v) for k, v in (info or {}).items()}  # extra root facts: pid, file, log
        uid, gid, self.file_size, self.mtime_ns, self.ctime_ns = _source_stat(h5file)
        self.uid = uid if owner[0] is None else owner[0]
        self.gid = gid if owner[1] is None else owner[1]
        self.dir_mode, self.file_mode, self.fixed_mode = _modes(umask, writeback is not None)
        self.logs = logs
        self.started = time.time()
        root = h5file.root
        self.table = InodeTable(root.address, namespace.numbers(root))
        self.handles = Handles()
        self.prefetcher = Prefetcher()
        self.invalidator = Invalidator()
        self.blocks = BlockCounts(self._count_blocks, self._blocks_known)
        # a `.points.npy` view's size: every stored chunk's selection decoded, in a worker
        self.point_sizes = BlockCounts(self._points_size, self._points_known)
        self.requests = 0  # counted by errors.boundary
        self.attribute_tables: Lru[int, dict] = Lru(ATTRIBUTE_TABLES)
        self.fact_tables: Lru[tuple[int, bool], dict[str, str]] = Lru(FACT_TABLES)
        self.xattr_values: Lru[tuple[int, str], bytes] = Lru(XATTR_VALUES)
        self.listings: Lru[int, list[Entry]] = Lru(LISTED_ENTRIES, len)
        # groups whose kept listing shows soft links: whether each has a `.npy` symlink depends on
        # objects elsewhere, so any edit drops these listings (edits.py)
        self.soft_listings: set[int] = set()

    def start(self, nursery) -> None:
        """Background work (prefetch, st_blocks counts) runs in the daemon's nursery."""
        self.prefetcher.nursery = nursery
        self.blocks.nursery = self.point_sizes.nursery = self.invalidator.nursery = nursery
        if self.writes is not None:
            self.writes.start(nursery)

    def close(self) -> None:
        """At unmount: every write into the file, durably."""
        if self.writes is not None:
            self.handles = Handles()   # the session is over: nothing is open any more
            self.edits.free_orphans()
            self.writes.close()

    # ------------------------------------------------------------------ helpers

    def describe_request(self, handler: str, args) -> str:
        """For logs: the mount path of the node a request concerns (and the name, if any)."""
        if not args or not isinstance(args[0], int):
            return ""
        ino = args[0]
        if handler in FH_HANDLERS:
            state = self.handles.files.get(ino) or self.handles.dirs.get(ino)
            if state is None:
                return f"handle {ino}"
            ino = state.ino
        node = self.table.get(ino)
        where = node.path if node else f"inode {ino}"
        if len(args) > 1 and isinstance(args[1], bytes):
            where = namespace.join(where, args[1].decode("utf-8", "replace"))
        return where

    def _node(self, ino: int) -> Node:
        node = self.table.get(ino)
        if node is None:
            raise FUSEError(errno.ESTALE)
        if node.gone:
            raise FUSEError(errno.ENOENT)
        return node

    def _check(self, node: Node) -> None:
        """Answer EIO for a broken object (its reason is logged once)."""
        if node.error is not None:
            _log_broken(node)
            raise FUSEError(errno.EIO)

    def _dir(self, ino: int) -> Node:
        node = self._node(ino)
        self._check(node)
        if node.kind != DIR:
            raise FUSEError(errno.ENOTDIR)
        return node

    async def _consistently(self, fn, *args):
        """`fn(*args)` in a worker. On a read-write mount a failure is tried once more with no
        edit being committed: a commit rewrites structures in place (an old-style group's heap
        and nodes), and a reader meeting them half-written must not take the object for broken."""
        try:
            return await offload.run_sync(fn, *args)
        except H5fsError:
            if self.writes is None:
                raise
        lock = self.writes.wb.commit_lock

        def quiet():
            with lock:
                return fn(*args)
        return await offload.run_sync(quiet)

    def _mark_broken(self, node: Node, exc: BaseException) -> None:
        if isinstance(exc, H5fsError) and not exc.transient:
            node.error = exc
            _log_broken(node)
        elif isinstance(exc, H5fsError):   # a network fault: EIO now, a fresh try next time
            warn_once(f"{node.path}: {exc}")
        else:  # not the file's fault (memory, an interrupted call): EIO now, a fresh try next time
            log.error("%s: %s: %s", node.path, type(exc).__name__, exc)

    def _object(self, node: Node):
        """The engine object a node stands for, named by its HDF5 path (a view's without its
        suffix)."""
        suffix = {NPY: namespace.NPY_SUFFIX, POINTS: namespace.POINTS_SUFFIX}.get(node.kind)
        return self.f.get(node.address, node.path.removesuffix(suffix) if suffix else node.path)

    def _by_address(self, address: int):
        """The engine object at `address`, named by the path the kernel knows it by: what its
        state caches (its data source) names it so in messages."""
        t = self.table
        node = t.find_object(address) or t.find_view(address) or t.find_points(address)
        return self.f.get(address, f"<object at {address}>") if node is None else self._object(node)

    def _known(self, address: int) -> tuple[str, Numbers] | None:
        """The kind and stat numbers of an object the kernel holds an inode of (None: unknown or
        broken), so a listing asked again need not read its children's headers. Called from a
        worker thread: it only reads (one dict lookup, a node's attributes), which the GIL keeps
        whole while the trio thread changes the table."""
        node = self.table.find_object(address)
        if node is None or node.error is not None or node.numbers is None:
            return None
        return node.kind, node.numbers

    # ------------------------------------------------------------------ stat

    def _stat(self, node: Node) -> pyfuse3.EntryAttributes:
        self._check(node)
        a = pyfuse3.EntryAttributes()
        a.st_ino = node.ino
        a.entry_timeout = a.attr_timeout = TIMEOUT
        a.st_uid, a.st_gid = self.uid, self.gid
        a.st_blksize = BLKSIZE
        a.st_ctime_ns = self.ctime_ns
        if node.kind == SYMLINK:
            a.st_mode = stat.S_IFLNK | 0o777
            a.st_size = len(node.target)
            a.st_mtime_ns = a.st_atime_ns = self.mtime_ns
            return a
        n = node.numbers
        a.st_nlink = n.nlink
        a.st_mtime_ns = a.st_atime_ns = self.mtime_ns if n.mtime_ns is None else n.mtime_ns
        # the header's change time, else the .h5 file's; never before the modification time
        # (a data write shows its time at once, the header takes both with the data)
        a.st_ctime_ns = max(self.ctime_ns if n.ctime_ns is None else n.ctime_ns, a.st_mtime_ns)
        if node.kind == DIR:
            a.st_mode = stat.S_IFDIR | self.dir_mode
            return a
        a.st_mode = stat.S_IFREG | (self.file_mode if node.kind in (RAW, NPY, POINTS) else self.fixed_mode)
        if node.kind == RAW:
            a.st_size = n.size
            a.st_blocks = n.blocks if n.blocks is not None else self._counted_blocks(node)
        elif node.kind == NPY:  # a view of the same stored bytes: it allocates nothing of its own
            a.st_size = n.npy_size
        elif node.kind == POINTS:
            a.st_size = self._points_stat_size(node)
            if node.stale:   # an estimate: the kernel must not keep it
                a.attr_timeout = 0
        else:
            a.st_size = n.size
        return a

    def _counted_blocks(self, node: Node) -> int:
        """st_blocks once the index walk is done; until then 0, and the walk is asked for."""
        blocks = self.blocks.get(node.address)
        if blocks is not None:
            node.numbers = replace(node.numbers, blocks=blocks)
            return blocks
        node.stale = True
        self.blocks.want(node.address, node.path)
        return 0

    def _points_stat_size(self, node: Node) -> int:
        """A `.points.npy` view's size once known; until then 0, and the count is asked for."""
        size = self.point_sizes.get(node.address)
        if size is not None:
            return size
        node.stale = True
        self.point_sizes.want(node.address, node.path)
        return 0

    def _points_size(self, address: int, path: str) -> int:
        """Thread-safe: the `.points.npy` view's size, writes not yet in the file flushed first
        (the view lists what the file holds)."""
        if self.writes is not None and self.writes.wb.holds(address):
            self.writes.wb.flush()
        return self.f.get(address, path.removesuffix(namespace.POINTS_SUFFIX)).points_view().size

    async def _points_known(self, address: int, error: BaseException | None) -> None:
        node = self.table.find_points(address)
        if node is None:
            return
        if error is not None:
            self._mark_broken(node, error)
        elif node.stale:
            node.stale = False
            await self.invalidator.attributes(node)

    def _count_blocks(self, address: int, path: str) -> int:
        """Thread-safe: the index walk."""
        return namespace.storage_blocks(self.f.get(address, path))

    async def _lookup_beyond(self, group, path: str, name: bytes) -> Entry | None:
        """A lookup that reads more than object headers (a dense group's name index, a soft
        link's target). On a writable mount while no commit is under way, on the trio thread:
        once the index is cached that is less work than a thread hop (a `mkdir` is looked up
        first), and a chunk index is counted in the background (`_settle`). Otherwise in a
        worker, which counts a small chunk index on the same trip."""
        if self.writes is not None:
            lock = self.writes.wb.commit_lock
            if lock.acquire(blocking=False):
                try:
                    return namespace.lookup(self.f, group, path, name)
                finally:
                    lock.release()
        entry, blocks = await self._consistently(self._lookup_counted, group, path, name)
        if blocks is not None:
            self.blocks.learn(entry.address, blocks)
        return entry

    async def _quickly(self, fn, *args):
        """`fn(*args)`, a read that is little work once the metadata it reads is cached (an
        object's stat numbers after an edit): on a writable mount on the trio thread while no
        commit is under way (nothing it reads is half-written then), else `_consistently`."""
        if self.writes is None:
            return await self._consistently(fn, *args)
        return await offload.run_unless_busy(self.writes.wb.commit_lock, fn, *args, otherwise=self._consistently)

    def _lookup_counted(self, group, path: str, name: bytes) -> tuple[Entry | None, int | None]:
        """In a worker: the entry `name` of `group`, and the st_blocks of a dataset whose small
        chunk index must be walked, counted on the same trip rather than on one of its own
        that the lookup would wait for (`rm` looks up every file it removes)."""
        entry = namespace.lookup(self.f, group, path, name)
        if entry is None or entry.kind != RAW or entry.numbers is None or entry.numbers.blocks is not None:
            return entry, None
        try:
            ds = self.f.get(entry.address, entry.path)
            grid = getattr(ds.source, "grid", None)
            if grid is None or math.prod(grid) > SMALL_INDEX:
                return entry, None
            return entry, namespace.storage_blocks(ds)
        except Exception:  # noqa: BLE001 - the count in the background reports it
            return entry, None

    async def _blocks_known(self, address: int, error: BaseException | None) -> None:
        node = self.table.find_object(address)
        if node is None or node.numbers is None:
            return
        if error is not None:
            self._mark_broken(node, error)
        else:
            node.numbers = replace(node.numbers, blocks=self.blocks.get(address))
        if node.stale:
            node.stale = False
            await self.invalidator.attributes(node)

    async def _settle(self, address: int | None, path: str, numbers) -> None:
        """Give an index walk a moment to finish before a lookup or getattr answers."""
        if numbers is not None and numbers.blocks is None and address is not None:
            await self.blocks.settle(address, path, SETTLE_WAIT)

    def _placeholder_stat(self, node: Node) -> pyfuse3.EntryAttributes:
        """readdirplus attributes for a broken entry: listed, never cached, so that the next
        lookup/getattr asks again and answers EIO."""
        a = pyfuse3.EntryAttributes()
        a.st_ino = node.ino
        a.entry_timeout = a.attr_timeout = 0
        a.st_mode = stat.S_IFREG
        a.st_uid, a.st_gid = self.uid, self.gid
        a.st_mtime_ns = a.st_atime_ns = self.mtime_ns
        a.st_ctime_ns = self.ctime_ns
        return a

    def _hand_out(self, parent: Node, entry: Entry) -> pyfuse3.EntryAttributes:
        """The attributes of `entry`'s inode for a lookup reply, counting the kernel's lookup."""
        node = self.table.intern(parent, entry)
        try:
            attrs = self._stat(node)
        except FUSEError:
            self.table.drop_unknown(node)
            raise
        node.lookups += 1
        return attrs

    # ------------------------------------------------------------------ metadata

    @boundary
    async def lookup(self, parent_inode: int, name: bytes, ctx=None) -> pyfuse3.EntryAttributes:
        parent = self._dir(parent_inode)
        check_length(name)   # a longer link name is not listed either (namespace.entries)
        try:
            group = self._object(parent)
            try:  # a compact group, a child its header describes: no thread hop
                entry = namespace.lookup(self.f, group, parent.path, name, header_only=True)
            except (namespace.BeyondHeader, H5fsError):   # an error: once more, as below
                entry = await self._lookup_beyond(group, parent.path, name)
        except Exception as exc:
            self._mark_broken(parent, exc)
            raise FUSEError(errno.EIO) from None
        if entry is None and self.edits is not None and (parent_inode, name) in self.edits.gone_twins:
            return self._gone_twin()
        if entry is None:  # a negative entry, cached as long as anything else
            neg = pyfuse3.EntryAttributes()
            neg.st_ino = 0
            neg.entry_timeout = TIMEOUT
            return neg
        if entry.kind == RAW:
            await self._settle(entry.address, entry.path, entry.numbers)
        elif entry.kind == POINTS:   # its size is what a reader of the file goes by: waited for
            await self.point_sizes.settle(entry.address, entry.path, math.inf)
        return self._hand_out(parent, entry)

    def _gone_twin(self) -> pyfuse3.EntryAttributes:
        """An empty file that is not cached: only for the unlink of a view already removed."""
        a = pyfuse3.EntryAttributes()
        a.st_ino = GONE_TWIN_INO
        a.entry_timeout = a.attr_timeout = 0
        a.st_mode = stat.S_IFREG | 0o644
        a.st_nlink = 1
        a.st_uid, a.st_gid = self.uid, self.gid
        return a

    @boundary
    async def getattr(self, inode: int, ctx=None) -> pyfuse3.EntryAttributes:
        if inode == GONE_TWIN_INO:
            return self._gone_twin()
        node = self._node(inode)
        if node.kind == RAW and node.error is None:
            await self._settle(node.address, node.path, node.numbers)
        elif node.kind == POINTS and node.error is None:
            await self.point_sizes.settle(node.address, node.path, math.inf)
        return self._stat(node)

    @boundary
    async def forget(self, inode_list) -> None:
        for ino, count in inode_list:
            self.table.forget(ino, count)
            if self.writes is not None and self.table.get(ino) is None:   # its pages went with it
                self.writes.paged.discard(ino)

    @boundary
    async def opendir(self, inode: int, ctx=None) -> int:
        node = self._dir(inode)
        entries = self.listings.get(node.address)  # nothing changes under a read-only mount
        if entries is None:
            try:
                entries = await self._consistently(namespace.entries, self.f, self._object(node), node.path,
                                                   self._known)
            except Exception as exc:
                self._mark_broken(node, exc)
                raise FUSEError(errno.EIO) from None
            self.listings.put(node.address, entries)
            if any(entry.kind == SYMLINK for entry in entries):
                self.soft_listings.add(node.address)
        return self.handles.open_dir(OpenDir(node.ino, entries, node.address))

    @boundary
    async def readdir(self, fh: int, start_id: int, token) -> None:
        listing = self.handles.dirs.get(fh)
        if listing is None:
            raise FUSEError(errno.EBADF)
        parent = self._node(listing.ino)
        entries = listing.entries
        for i in range(start_id, len(entries)):  # the cookie is an index into the snapshot
            entry = entries[i]
            node = self.table.intern(parent, entry)
            try:
                attrs = self._stat(node)
            except (FUSEError, WouldBlock):   # entries already replied must not be sent again
                attrs = self._placeholder_stat(node)
            if not pyfuse3.readdir_reply(token, entry.name, attrs, i + 1):
                self.table.drop_unknown(node)
                return
            node.lookups += 1

    @boundary
    async def releasedir(self, fh: int) -> None:
        listing = self.handles.dirs.pop(fh, None)
        if listing is not None and self.edits is not None:
            self.edits.closed_dir(listing.ino)
            await self.edits.closed(listing.address)

    @boundary
    async def readlink(self, inode: int, ctx=None) -> bytes:
        node = self._node(inode)
        self._check(node)
        if node.kind != SYMLINK:
            raise FUSEError(errno.EINVAL)
        return node.target

    @boundary
    async def statfs(self, ctx=None) -> pyfuse3.StatvfsData:
        """The .h5 file's size as the space used; a writable mount can grow the file into the
        free space of the file system holding it, which `df` then shows as free (a read-only one:
        none), and new objects are not limited by inodes."""
        s = pyfuse3.StatvfsData()
        s.f_bsize = BLKSIZE
        s.f_frsize = 4096
        used = (self.file_size + 4095) // 4096
        s.f_blocks, s.f_bfree, s.f_bavail = used, 0, 0
        s.f_files, s.f_ffree, s.f_favail = len(self.table), 0, 0
        if self.writes is not None:
            host = await offload.run_sync(os.statvfs, os.path.dirname(os.path.abspath(self.source)))
            s.f_bfree = host.f_bfree * host.f_frsize // 4096
            s.f_bavail = host.f_bavail * host.f_frsize // 4096
            s.f_blocks = used + s.f_bfree
            s.f_ffree = s.f_favail = FREE_INODES
            s.f_files += FREE_INODES
        s.f_namemax = namespace.NAME_MAX
        return s

    # ------------------------------------------------------------------ data

    @boundary
    async def open(self, inode: int, flags: int, ctx=None) -> pyfuse3.FileInfo:
        node = self._node(inode)
        self._check(node)
        if node.kind == DIR:
            raise FUSEError(errno.EISDIR)
        if node.kind not in (RAW, NPY, DTYPE, POINTS):
            raise FUSEError(errno.EIO)
        writing = flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND)
        if writing and self.writes is None:
            raise FUSEError(errno.EROFS)
        if writing and node.kind not in (RAW, NPY, POINTS):
            raise FUSEError(errno.EACCES)
        if node.kind == POINTS:
            return await self._open_points(node, writing)
        if flags & os.O_TRUNC:
            if node.kind == NPY:   # a new array replacing the data (cp y.npy D.npy)
                return pyfuse3.FileInfo(fh=self.handles.open_file(self._edits().replace_stream(node)))
            await self.writes.truncate(node, None)
        obj = self._object(node)
        if namespace.numbers_from_header(obj):
            state = _open_state(node, obj)
        else:  # variable-length data is decoded whole, virtual sources opened: in a worker
            state = await offload.run_sync(_open_state, node, obj)
        # a virtual dataset shows its sources' bytes, which writes to them change unseen: on a
        # writable mount its pages are not kept
        keep = self.writes is None or not (node.kind in (RAW, NPY) and obj.layout.layout_class == VIRTUAL)
        if self.writes is not None and keep:
            self.writes.paged.add(inode)
        # pages still being dropped after a write changed them (a new `.npy` header): the kernel
        # drops them itself at this open, before anything reads them
        keep = keep and inode not in self.invalidator.pending
        return pyfuse3.FileInfo(fh=self.handles.open_file(state), keep_cache=keep)

    async def _open_points(self, node: Node, writing: int) -> pyfuse3.FileInfo:
        """`.points.npy`: written, a new set of defined elements (taken at close); read, the
        defined elements as the file holds them (writes not yet in it are flushed first)."""
        if writing:
            stream = PointsStream(node.ino, node.address, node.path.removesuffix(namespace.POINTS_SUFFIX))
            self._edits()   # a read-only mount refuses
            return pyfuse3.FileInfo(fh=self.handles.open_file(stream), direct_io=True)
        if self.writes is not None and self.writes.wb.holds(node.address):
            await self.writes.flush()
        obj = self._object(node)
        view = await offload.run_sync(obj.points_view)
        state = OpenFile(node.ino, POINTS, obj, view.header, view.body_size)
        return pyfuse3.FileInfo(fh=self.handles.open_file(state), keep_cache=False, direct_io=True)

    @boundary
    async def read(self, fh: int, off: int, size: int) -> bytes:
        state = self.handles.files.get(fh)
        if state is None:
            raise FUSEError(errno.EBADF)
        if isinstance(state, (NpyStream, PointsStream)):   # being written, not read (cp does not)
            raise FUSEError(errno.EBADF)
        prefix, ds = state.prefix, state.obj
        out = prefix[off:off + size] if off < len(prefix) else b""
        if state.kind == DTYPE:
            return out
        if self.writes is not None:   # the kernel keeps what it reads: a write elsewhere drops it
            self.writes.paged.add(state.ino)
        boff = max(0, off - len(prefix))
        bsize = min(size - len(out), state.size - boff)
        if bsize <= 0:
            return out
        if state.kind == POINTS:
            body = await offload.run_sync(lambda: ds.points_view().read_body(boff, bsize))
            return out + body if out else body
        raw = state.kind == RAW
        if self.writes is not None and self.writes.wb.holds(ds.address):   # writes not all in the file
            body = await offload.run_sync(self.writes.wb.read, ds, boff, bsize, not raw)
            return out + body if out else body
        body = ds.read_cached(boff, bsize) if raw else ds.read_npy_cached(boff, bsize)
        if body is None:
            if ds.prefetchable:   # this request's chunks decode on every core
                self.prefetcher.spread(ds.decode_jobs(boff, bsize))
            body = await offload.run_sync(ds.read_raw if raw else ds.read_npy_body, boff, bsize)
        if ds.prefetchable:  # the .npy body is the raw view: decode ahead through it
            self.prefetcher.after_read(fh, ds.decode_jobs, boff, bsize, state.size)
        return out + body if out else body

    @boundary
    async def release(self, fh: int) -> None:
        state = self.handles.files.pop(fh, None)
        self.prefetcher.forget(fh)
        if isinstance(state, NpyStream):
            async with state.lock:
                await self._edits().stream_release(state)
        elif isinstance(state, PointsStream):
            state.close()
        if state is not None and self.edits is not None:
            await self.edits.closed(handle_address(state))

    @boundary
    async def flush(self, fh: int) -> None:
        # a `.npy` file being created is checked whole; a closed file's writes are committed
        # (durable with the next group commit: writes.FLUSH_DELAY)
        state = self.handles.files.get(fh)
        if isinstance(state, NpyStream):
            async with state.lock:   # after any write of this open file still under way (a dup)
                await self._edits().stream_finish(state)
        elif isinstance(state, PointsStream) and await points_finish(self, state):
            await self.writes.changed(state.address, None)
        if state is not None and self.writes is not None:
            await self.writes.closed(handle_address(state))

    @boundary
    async def fsync(self, fh: int, datasync: bool) -> None:
        if self.writes is not None:
            await self.writes.flush()

    @boundary
    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        """Every change of the mount into the file (`h5fs umount` asks this first, showing
        progress, so the unmount itself has nothing left to write)."""
        if self.writes is not None:
            await self.writes.flush()

    def status(self) -> dict:
        """What `h5fs status` shows of this daemon (the root's `user.h5fs.status`, JSON)."""
        cache = self.f.chunk_cache
        out = {"file": self.source, "mountpoint": self.mountpoint, "mode": "ro" if self.writes is None else "rw",
               "pid": os.getpid(), "started": round(self.started, 3), "uptime_s": round(time.time() - self.started, 3),
               "dirty_bytes": 0, "chunks_waiting": 0, "flushing": None,
               "cache_bytes": cache.used, "cache_limit_bytes": cache.budget,
               "requests": self.requests, "inodes": len(self.table),
               "errors": 0, "last_errors": [], "log": None, "remote": self.f.source.stats()}
        if self.f.remote is not None:
            out["siblings"] = self.f.sibling_stats()
        if self.writes is not None:
            wb = self.writes.wb
            out["dirty_bytes"], out["chunks_waiting"] = wb.waiting()
            if wb.flushing:
                out["flushing"] = {"done": wb.flush_done, "total": wb.flush_total}
        if self.logs is not None:
            out.update(errors=self.logs.tally.count, last_errors=list(self.logs.tally.last),
                       log=self.logs.destination)
        return out

    # ------------------------------------------------------------------ xattrs

    async def _attributes(self, node: Node) -> dict:
        table = self.attribute_tables.get(node.address)
        if table is None:
            obj = self._object(node)
            if obj.dense_attributes:  # in a fractal heap: I/O
                table = await offload.run_sync(namespace.attributes, obj)
            else:
                table = namespace.attributes(obj)
            self.attribute_tables.put(node.address, table)
        return table

    async def _facts(self, node: Node) -> dict[str, str]:
        key = (node.address, node.kind == NPY)
        if self.writes is not None and node.address is not None and self.writes.pending(node.address):
            await self.writes.flush()   # storage sizes and a sparse dataset's count are the file's
        facts = self.fact_tables.get(key)
        if facts is None:
            obj = self._object(node)
            if obj.facts_from_header:
                facts = namespace.facts(obj, key[1])
            else:  # storage sizes walk the chunk index, external and virtual facts read heaps
                facts = await offload.run_sync(namespace.facts, obj, key[1])
            if node is self.table.root:
                facts.update(self.info)
            self.fact_tables.put(key, facts)
        if node is self.table.root:
            return {**facts, "requests": str(self.requests), "inodes": str(len(self.table)),
                    "invalidations": str(self.invalidator.count)}
        return facts

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
            fact = views.fact_for_xattr(name)
            if fact == "status" and node is self.table.root:   # made when asked: it changes all the time
                return json.dumps(self.status()).encode()
            value = None if fact is None else (await self._facts(node)).get(fact)
            if value is None:
                raise FUSEError(pyfuse3.ENOATTR)
            return value.encode("utf-8", "surrogateescape")
        key = (node.address, attr_name)
        value = self.xattr_values.get(key)
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
            self.xattr_values.put(key, value)
        return value

    # ------------------------------------------------------------------ writes

    @boundary
    async def setattr(self, inode, attr, fields, fh, ctx):
        if self.writes is None:
            raise FUSEError(errno.EROFS)
        node = self._node(inode)
        self._check(node)
        if fields.update_size:
            state = self.handles.files.get(fh) if fh is not None else None
            if node.kind == NPY and attr.st_size == 0 and state is not None:
                self.handles.files[fh] = self._edits().truncated(node, state)
            elif node.kind == POINTS:   # the file being written; no other size is one of the set
                if isinstance(state, PointsStream):
                    state.truncate(attr.st_size)
                elif attr.st_size != 0:
                    raise FUSEError(errno.EINVAL)
            else:
                await self.writes.truncate(node, attr.st_size)
        # HDF5 keeps no owner or mode: chmod and chown change nothing and succeed, as on a
        # `quiet` vfat mount (rsync -a fchmods its temporary files, tar -x and cp -a set modes
        # and owners: refusing would fail them)
        if fields.update_mtime and node.kind != SYMLINK:
            await self._edits().touch(node, attr.st_mtime_ns)
        return self._stat(node)

    @boundary
    async def write(self, fh, off, buf):
        if self.writes is None:
            raise FUSEError(errno.EROFS)
        state = self.handles.files.get(fh)
        if state is None:
            raise FUSEError(errno.EBADF)
        return await self.writes.write(state, off, buf)

    @boundary
    async def create(self, parent_inode, name, mode, flags, ctx):
        edits = self._edits()
        fh, attrs = await edits.create(self._dir(parent_inode), name)
        return pyfuse3.FileInfo(fh=fh), attrs

    @boundary
    async def mknod(self, parent_inode, name, mode, rdev, ctx):
        edits = self._edits()
        if not stat.S_ISREG(mode):   # a device, fifo or socket has no HDF5 counterpart
            raise FUSEError(errno.EPERM)
        return await edits.mknod(self._dir(parent_inode), name)

    def _edits(self) -> EditSide:
        if self.edits is None:
            raise FUSEError(errno.EROFS)
        return self.edits

    @boundary
    async def mkdir(self, parent_inode, name, mode, ctx):
        edits = self._edits()
        return await edits.mkdir(self._dir(parent_inode), name)

    @boundary
    async def unlink(self, parent_inode, name, ctx):
        edits = self._edits()
        if edits.unlink_gone_twin(parent_inode, name):
            return
        await edits.unlink(self._dir(parent_inode), name)

    @boundary
    async def rmdir(self, parent_inode, name, ctx):
        edits = self._edits()
        await edits.rmdir(self._dir(parent_inode), name)

    @boundary
    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        edits = self._edits()
        await edits.rename(self._dir(parent_inode_old), name_old, self._dir(parent_inode_new), name_new, flags)

    @boundary
    async def symlink(self, parent_inode, name, target, ctx):
        edits = self._edits()
        return await edits.symlink(self._dir(parent_inode), name, target)

    @boundary
    async def link(self, inode, new_parent_inode, new_name, ctx):
        edits = self._edits()
        node = self._node(inode)
        self._check(node)
        return await edits.link(node, self._dir(new_parent_inode), new_name)

    @boundary
    async def setxattr(self, inode, name, value, ctx):
        edits = self._edits()
        node = self._node(inode)
        self._check(node)
        await edits.setxattr(node, name, value)

    @boundary
    async def removexattr(self, inode, name, ctx):
        edits = self._edits()
        node = self._node(inode)
        self._check(node)
        await edits.removexattr(node, name)


def _source_stat(h5file) -> tuple[int, int, int, int, int]:
    """(uid, gid, size, mtime_ns, ctime_ns) the mount shows by default: a local file's own; a
    remote object's (the mounting user's, its Last-Modified)."""
    uid, gid, mtime_ns, ctime_ns = h5file.source.owner_and_times()
    return uid, gid, h5file.source.end(), mtime_ns, ctime_ns


def _modes(umask: int | None, writable: bool) -> tuple[int, int, int]:
    """Permission bits of directories, of the views a writer may write, of the other files.
    Without a umask: 0555 and 0444, plus owner write on a read-write mount."""
    w = 0o222 if writable else 0
    if umask is None:
        return 0o555 | (w & 0o200), 0o444 | (w & 0o200), 0o444
    return (0o555 | w) & ~umask, (0o444 | w) & ~umask, 0o444 & ~umask


def _log_broken(node: Node) -> None:
    exc = node.error
    warn_once(f"{node.path}: cannot serve this object, answering EIO: {type(exc).__name__}: {exc}")


def _open_state(node: Node, obj) -> OpenFile:
    """What one open file reads: the object, the bytes before the data, the data's size."""
    if node.kind == DTYPE:
        text = namespace.datatype_text(obj)
        return OpenFile(node.ino, DTYPE, obj, text, 0)
    if node.kind == NPY:
        header = namespace.npy_header(obj.npy_dtype, obj.npy_shape)
        return OpenFile(node.ino, NPY, obj, header, int(obj.npy_body_size))
    return OpenFile(node.ino, RAW, obj, b"", int(obj.raw_size))
