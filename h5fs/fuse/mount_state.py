"""What one mount keeps, made once and passed to every request handler (fuse/operations.py).

`MountState`: the open file and how the mount shows it (owner, modes, times), the kernel's
inodes (`inodes`) and the open handles (`handles`), bounded caches of what the kernel asked for
by object address (listings, attribute tables, facts, formatted values: nothing changes under a
read-only mount, and a writer drops what a commit changes, as it invalidates the kernel's
copies), st_blocks and `.points.npy` sizes counted in the background (`blocks`), the
invalidator, and on a writable mount `writes` (`Writable`: the writeback, the tree editor and
what the write side keeps). Also the helpers every handler shares: the node an inode number
stands for, the engine object a node stands for, and how to ask the engine (`quickly`,
`consistently`). Only the trio thread changes any of it.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import replace
from typing import Callable

from pyfuse3 import FUSEError

from ..errors import H5fsError
from ..logs import Logs
from ..model import namespace
from ..model.dataset_create import NPY_CHUNK_BYTES
from ..model.free_space import hold_freed_space
from ..model.namespace import NPY, POINTS, Entry, Numbers
from ..model.tree_edit import TreeEditor
from ..model.writeback import Writeback
from . import offload
from .blocks import BlockCounts
from .errors import warn_once
from .handles import Handles
from .inodes import InodeTable, Node
from .invalidate import Invalidator
from .lru import Lru
from .prefetch import Prefetcher

log = logging.getLogger("h5fs.fuse")

# an engine's own tree editor, made with the mount's writeback and its `in_use` (model/hsds)
EditorFactory = Callable[[Writeback, Callable[[int], bool]], object]
ATTRIBUTE_TABLES = 256  # objects whose attributes-by-name are kept (listxattr, then getxattr of each)
FACT_TABLES = 256
XATTR_VALUES = 1024     # formatted values kept (getfattr asks each value twice: size, then bytes)
LISTED_ENTRIES = 65536   # entries of recent listings kept (`find`, then `getfattr -R`, list each group; ~250 B each)
FH_HANDLERS = frozenset({"read", "release", "flush", "fsync", "write", "readdir", "releasedir"})
DEFAULT_FILTERS = "gzip:4,shuffle"   # new datasets' compression (-o compression=...)
FLUSH_DELAY = 2.0    # s without writes before dirty data is flushed (-o flush_delay)


class Writable:
    """What only a writable mount keeps: the engine's writeback and tree editor, how new
    datasets are stored, and what the write side (fuse/writes.py) tracks of the kernel."""

    def __init__(self, h5file, writeback: Writeback, in_use: Callable[[int], bool], filters: str,
                 chunk_bytes: int, flush_delay: float, editor: EditorFactory | None = None):
        self.wb = writeback
        if editor is None:   # a file's: the engine's tree editor
            hold_freed_space(writeback.f)   # freed space waits for the walk to find the file sound
            self.editor = TreeEditor(h5file, writeback, in_use=in_use)
        else:   # another engine's (an HSDS domain's: model/hsds)
            self.editor = editor(writeback, in_use)
        self.filters = filters
        self.chunk_bytes = chunk_bytes   # of new datasets (-o chunk_kb)
        self.flush_delay = flush_delay
        self.last_write = 0.0   # the last write or edit (the group commit waits `flush_delay` after it)
        # inodes whose pages the kernel may hold: opened with keep_cache, created, read or
        # written since their pages were last dropped
        self.paged: set[int] = set()
        self.touched: set[int] = set()  # datasets written since the last flush here
        # inodes with a write or truncate being answered: the kernel may hold their pages (locked,
        # under writeback, its writes held back) until the answer
        self.serving: Counter[int] = Counter()
        # (dir inode, name): a view whose dataset went with its twin while a listing was open
        self.gone_twins: set[tuple[int, bytes]] = set()
        self.stopping = threading.Event()   # set at unmount: background walks end (fuse/writes.py)

    def pending(self, address: int) -> bool:
        """Whether writes to the dataset are not all in the file, or its stat numbers and facts
        not yet refreshed since they landed (a background flush of the writeback)."""
        return self.wb.holds(address) or address in self.touched

    @contextmanager
    def answering(self, ino: int):
        """A write or truncate of inode `ino` is being answered (`serving`)."""
        self.serving[ino] += 1
        try:
            yield
        finally:
            self.serving[ino] -= 1
            if not self.serving[ino]:
                del self.serving[ino]


class MountState:
    def __init__(self, h5file, source: str, *, writeback: Writeback | None = None, info: dict | None = None,
                 mountpoint: str = "/", compression: str | None = None, chunk_bytes: int = NPY_CHUNK_BYTES,
                 owner: tuple[int | None, int | None] = (None, None), umask: int | None = None,
                 flush_delay: float = FLUSH_DELAY, logs: Logs | None = None, editor: EditorFactory | None = None):
        self.f = h5file
        self.source = source
        self.handles = Handles()
        # what the engine answered is kept as long as it may be trusted: a file's until an edit
        # here changes it, a service's `refresh` seconds (other writers change it unseen)
        self.refresh: float | None = h5file.refresh
        # an engine whose answers may all need a network (HSDS): nothing of it runs on the trio
        # thread, not even an edit or a read that a file would answer from its cached headers
        self.networked = self.refresh is not None
        self.writes = None if writeback is None else Writable(
            h5file, writeback, lambda address: self.handles.holds(address), compression or DEFAULT_FILTERS,
            chunk_bytes, flush_delay, editor)
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
        self.prefetcher = Prefetcher()
        self.invalidator = Invalidator()
        self.blocks = BlockCounts(self._count_blocks, self._blocks_known)
        # a `.points.npy` view's size: every stored chunk's selection decoded, in a worker
        self.point_sizes = BlockCounts(self._points_size, self._points_known)
        self.requests = 0  # counted by errors.boundary
        self.serving = 0   # requests being answered (errors.boundary)
        ttl = self.refresh
        self.attribute_tables: Lru[int, dict] = Lru(ATTRIBUTE_TABLES, ttl=ttl)
        self.fact_tables: Lru[tuple[int, bool], dict[str, str]] = Lru(FACT_TABLES, ttl=ttl)
        self.xattr_values: Lru[tuple[int, str], bytes] = Lru(XATTR_VALUES, ttl=ttl)
        self.listings: Lru[int, list[Entry]] = Lru(LISTED_ENTRIES, len, ttl=ttl)
        # groups whose kept listing shows soft links: whether each has a `.npy` symlink depends on
        # objects elsewhere, so any edit drops these listings (fuse/editing.py)
        self.soft_listings: set[int] = set()

    def start(self, nursery) -> None:
        """Background work (prefetch, st_blocks counts, invalidations) runs in the daemon's nursery."""
        self.prefetcher.nursery = nursery
        self.blocks.nursery = self.point_sizes.nursery = self.invalidator.nursery = nursery

    def writable(self) -> Writable:
        """The write side; EROFS on a read-only mount."""
        if self.writes is None:
            raise FUSEError(errno.EROFS)
        return self.writes

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

    # -- nodes and the objects they stand for ----------------------------------------------------
    def node(self, ino: int) -> Node:
        node = self.table.get(ino)
        if node is None:
            raise FUSEError(errno.ESTALE)
        if node.gone:
            raise FUSEError(errno.ENOENT)
        return node

    def check(self, node: Node) -> None:
        """Answer EIO for a broken object (its reason is logged once)."""
        if node.error is not None:
            log_broken(node)
            raise FUSEError(errno.EIO)

    def live_node(self, ino: int) -> Node:
        """The node of `ino`, checked (`check`)."""
        node = self.node(ino)
        self.check(node)
        return node

    def dir(self, ino: int) -> Node:
        node = self.live_node(ino)
        if node.kind != namespace.DIR:
            raise FUSEError(errno.ENOTDIR)
        return node

    def mark_broken(self, node: Node, exc: BaseException) -> None:
        if isinstance(exc, H5fsError) and not exc.transient:
            node.error = exc
            log_broken(node)
        elif isinstance(exc, H5fsError):   # a network fault: EIO now, a fresh try next time
            warn_once(f"{node.path}: {exc}")
        else:  # not the file's fault (memory, an interrupted call): EIO now, a fresh try next time
            log.error("%s: %s: %s", node.path, type(exc).__name__, exc)

    def object(self, node: Node):
        """The engine object a node stands for, named by its HDF5 path (a view's without its
        suffix)."""
        suffix = {NPY: namespace.NPY_SUFFIX, POINTS: namespace.POINTS_SUFFIX}.get(node.kind)
        return self.f.get(node.address, node.path.removesuffix(suffix) if suffix else node.path)

    def by_address(self, address: int):
        """The engine object at `address`, named by the path the kernel knows it by: what its
        state caches (its data source) names it so in messages."""
        t = self.table
        node = t.find_object(address) or t.find_view(address) or t.find_points(address)
        return self.f.get(address, f"<object at {address}>") if node is None else self.object(node)

    def known(self, address: int) -> tuple[str, Numbers] | None:
        """The kind and stat numbers of an object the kernel holds an inode of (None: unknown or
        broken), so a listing asked again need not read its children's headers. Called from a
        worker thread: it only reads (one dict lookup, a node's attributes), which the GIL keeps
        whole while the trio thread changes the table."""
        node = self.table.find_object(address)
        if node is None or node.error is not None or node.numbers is None:
            return None
        return node.kind, node.numbers

    # -- asking the engine -------------------------------------------------------------------------
    async def consistently(self, fn, *args):
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

    async def quickly(self, fn, *args):
        """`fn(*args)`, a read that is little work once the metadata it reads is cached (an
        object's stat numbers after an edit): on a writable mount on the trio thread while no
        commit is under way (nothing it reads is half-written then), else `consistently`."""
        if self.writes is None or self.networked:
            return await self.consistently(fn, *args)
        return await offload.run_unless_busy(self.writes.wb.commit_lock, fn, *args, otherwise=self.consistently)

    # -- counted in the background (`blocks`, `point_sizes`) ----------------------------------------
    def _count_blocks(self, address: int, path: str) -> int:
        """Thread-safe: the index walk."""
        return namespace.storage_blocks(self.f.get(address, path))

    async def _blocks_known(self, address: int, error: BaseException | None) -> None:
        node = self.table.find_object(address)
        if node is None or node.numbers is None:
            return
        if error is not None:
            self.mark_broken(node, error)
        else:
            node.numbers = replace(node.numbers, blocks=self.blocks.get(address))
        if node.stale:
            node.stale = False
            await self.invalidator.attributes(node)

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
            self.mark_broken(node, error)
        elif node.stale:
            node.stale = False
            await self.invalidator.attributes(node)

    def status(self) -> dict:
        """What `h5fs status` shows of this daemon (the root's `user.h5fs.status`, JSON)."""
        cache = self.f.chunk_cache
        out = {"file": self.source, "mountpoint": self.mountpoint, "mode": "ro" if self.writes is None else "rw",
               "pid": os.getpid(), "started": round(self.started, 3), "uptime_s": round(time.time() - self.started, 3),
               "dirty_bytes": 0, "chunks_waiting": 0, "flushing": None,
               "cache_bytes": cache.used, "cache_limit_bytes": cache.budget,
               "requests": self.requests, "inodes": len(self.table),
               "errors": 0, "last_errors": [], "log": None, **self.f.status()}
        if self.writes is not None:
            wb = self.writes.wb
            out["dirty_bytes"], out["chunks_waiting"] = wb.waiting()
            if wb.flushing:
                out["flushing"] = {"done": wb.flush_done, "total": wb.flush_total}
        if self.logs is not None:
            out.update(errors=self.logs.tally.count, last_errors=list(self.logs.tally.last),
                       log=self.logs.destination)
        return out


def log_broken(node: Node) -> None:
    exc = node.error
    warn_once(f"{node.path}: cannot serve this object, answering EIO: {type(exc).__name__}: {exc}")


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
