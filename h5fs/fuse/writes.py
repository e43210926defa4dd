"""The mount's write side: data writes, truncation, fsync and the background flush.

Writes go to the engine's writeback (h5fs.model.writeback) in worker threads. What a write
changes is then told to the kernel and to the adapter's own caches: the object's stat numbers
(size after a resize, st_blocks after a flush), the other view's cached pages (`D` and `D.npy`
show the same bytes), open handles' sizes and `.npy` headers, listings and facts.

Dirty data is committed when its file is closed, up to 8 MiB (Writeback.closed: the journal holds
it, a `kill -9` of the daemon loses none of it), and on fsync, when the writeback's budget is
full, FLUSH_DELAY seconds (-o flush_delay) after the last write or edit and at unmount (`close`);
those group commits make it durable.
"""

from __future__ import annotations

import errno
import logging
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import replace

import trio
from pyfuse3 import FUSEError

from ..errors import CannotWrite, H5fsError, InvalidWrite
from ..format.messages.layout import VIRTUAL
from ..model import namespace
from ..model.namespace import NPY, RAW
from ..model.free_space import find_free_space, hold_freed_space
from ..model.writeback import Writeback
from . import offload
from .handles import NpyStream, OpenFile
from .points_stream import PointsStream

log = logging.getLogger("h5fs.fuse")

FLUSH_DELAY = 2.0    # s without writes before dirty data is flushed
FLUSH_POLL = 0.5     # s between checks
WALKS = 5            # walks for unused space made while the tree keeps changing under them
WALK_PAUSE = 2.0     # s between them, at first
WALK_PAUSE_MAX = 60.0


class WriteSide:
    def __init__(self, ops, writeback: Writeback):
        self.ops, self.wb = ops, writeback
        self.last_write = 0.0
        self.flush_delay = FLUSH_DELAY   # -o flush_delay
        # inodes whose pages the kernel may hold: opened with keep_cache, created, read or
        # written since their pages were last dropped
        self.paged: set[int] = set()
        self.touched: set[int] = set()  # datasets written since the last flush here
        # inodes with a write or truncate being answered: the kernel may hold their pages (locked,
        # under writeback, its writes held back) until the answer
        self.serving: Counter[int] = Counter()
        hold_freed_space(writeback.f)   # freed space waits for the walk to find the file sound

    def start(self, nursery) -> None:
        nursery.start_soon(self._flusher)
        nursery.start_soon(self._find_free_space)

    async def _find_free_space(self) -> None:
        """The walk for unused space, made again while the tree changes under it (WALK_PAUSE s
        apart, doubling up to WALK_PAUSE_MAX): until one completes, freed space is not reused."""
        pause = WALK_PAUSE
        try:
            for attempt in range(1, 10**9):
                if await offload.run_sync(find_free_space, self.ops.f, self.wb.commit_lock) is not None:
                    return
                if attempt == WALKS:
                    log.info("the tree kept changing under %d walks for unused space: space freed since mount "
                             "is reused once one completes", WALKS)
                await trio.sleep(pause)
                pause = min(2 * pause, WALK_PAUSE_MAX)
        except Exception as exc:  # noqa: BLE001 - new space keeps coming from the end of the file
            log.warning("free space not reused: %s: %s", type(exc).__name__, exc)

    async def _flusher(self) -> None:
        """Flush `flush_delay` s after the last write (or the last namespace edit, whose journal
        record the flush retires)."""
        while True:
            await trio.sleep(FLUSH_POLL)
            pending = self.wb.pending or self.touched
            if pending and time.monotonic() - self.last_write >= self.flush_delay:
                try:
                    await self.flush()
                except (OSError, H5fsError) as exc:   # kept dirty: fsync and unmount try again
                    self.last_write = time.monotonic()
                    log.error("writing changes into the file failed, retrying later: %s", exc)

    async def flush(self) -> None:
        """Everything in the file; then the stat numbers of what changed since the last flush
        (background flushes included) are refreshed."""
        if not self.wb.dirty and not self.touched:
            if self.wb.pending:   # namespace edits: durable, their record retired
                await offload.run_sync(self.wb.flush)
            return
        touched, self.touched = self.touched, set()
        try:
            await offload.run_sync(self.ops.edits.editor.stamp)   # its record retired by the flush's fsync
            await offload.run_sync(self.wb.flush)
        finally:
            for address in touched:
                try:
                    await self.changed(address, None)
                except H5fsError as exc:   # removed since it was written: nothing to refresh
                    log.debug("not refreshed after the flush: %s", exc)

    async def closed(self, address: int | None) -> None:
        """A handle of a dataset was closed: its writes are committed now when they are few
        (Writeback.closed), so a `kill -9` of the daemon loses no small file's data."""
        if address is None or not self.wb.holds(address):
            return
        try:
            await offload.run_sync(self.wb.closed, address)
        except (OSError, H5fsError) as exc:   # kept dirty: the flush tries again
            log.warning("writes of a closed file not committed yet: %s", exc)

    def pending(self, address: int) -> bool:
        """Whether writes to the dataset are not all in the file, or its stat numbers and facts
        not yet refreshed since they landed (a background flush of the writeback)."""
        return self.wb.holds(address) or address in self.touched

    def close(self) -> None:
        """At unmount: everything into the file, durably."""
        self.ops.edits.editor.stamp()
        self.wb.close()

    # -- requests -----------------------------------------------------------------------------
    @contextmanager
    def _serving(self, ino: int):
        self.serving[ino] += 1
        try:
            yield
        finally:
            self.serving[ino] -= 1
            if not self.serving[ino]:
                del self.serving[ino]

    async def write(self, state: OpenFile, off: int, buf: bytes) -> int:
        """Write `buf` at `off` of an open view; returns the bytes taken (all of them)."""
        with self._serving(state.ino):
            return await self._write(state, off, buf)

    async def _write(self, state: OpenFile, off: int, buf: bytes) -> int:
        if isinstance(state, NpyStream):
            self.last_write = time.monotonic()
            return await self.ops.edits.stream_write(state, off, buf)
        if isinstance(state, PointsStream):
            return state.write(off, buf)
        ds, taken = state.obj, len(buf)
        if state.kind == NPY:
            if ds.converted:
                raise CannotWrite(f"{ds.path}: the .npy view converts its elements: write the raw view")
            head = state.prefix
            if off < len(head):  # the header is read-only: only its own bytes may be written back
                part = buf[:len(head) - off]
                if bytes(part) != head[off:off + len(part)]:
                    raise InvalidWrite(f"{ds.path}.npy: a write into the .npy header")
                buf, off = buf[len(part):], len(head)
            off -= len(head)
        elif state.kind != RAW:
            raise FUSEError(errno.EBADF)
        room = self.wb.room(ds)
        if buf and room is not None and off + len(buf) > room > off:   # what fits is written (EFBIG when nothing does)
            taken -= off + len(buf) - room
            buf = buf[:room - off]
        if buf:
            size = ds.raw_size
            self.paged.add(state.ino)   # its pages, as written: another writer's change drops them
            if not self.wb.write_now(ds, off, buf):
                await offload.run_sync(self.wb.write, ds, off, bytes(buf))
            self.last_write = time.monotonic()
            self.touched.add(ds.address)
            await self.changed(ds.address, state.ino, resized=off + len(buf) > size)
            self._stamped(ds.address)
        return taken

    async def truncate(self, node, size: int | None) -> None:
        """Resize a view to `size` bytes (None: no data left, as O_TRUNC asks)."""
        with self._serving(node.ino):
            await self._truncate(node, size)

    async def _truncate(self, node, size: int | None) -> None:
        ds = self.ops.f.get(node.address, node.path)
        if node.kind == NPY:
            head = len(namespace.npy_header(ds.npy_dtype, ds.npy_shape))
            size = head if size is None else size
            if size < head:
                raise InvalidWrite(f"{node.path}: truncating into the .npy header")
            size -= head
        elif node.kind != RAW:
            raise FUSEError(errno.EINVAL)
        size = size or 0
        await offload.run_sync(self.wb.truncate, ds, size)
        self.last_write = time.monotonic()
        # the kernel drops the truncated inode's own pages when its size changes
        await self.changed(node.address, node.ino, resized=True)
        self._stamped(node.address)

    def _stamped(self, address: int) -> None:
        """Written now (whole seconds, as HDF5 keeps times): stat shows the new modification
        time of an object that keeps one at once, its header at the flush."""
        seconds = time.time_ns() // 1_000_000_000
        self.wb.stamp(address, seconds)
        for node in (self.ops.table.find_object(address), self.ops.table.find_view(address)):
            if node is not None and node.numbers is not None and node.numbers.mtime_ns is not None:
                node.numbers = replace(node.numbers, mtime_ns=seconds * 1_000_000_000)

    # -- telling what changed ---------------------------------------------------------------
    async def changed(self, address: int, writer_ino: int | None, resized: bool = False) -> None:
        """A dataset's bytes (and maybe its size) changed: refresh the stat numbers of its two
        views, drop the pages the kernel holds of the view not written or truncated (`writer_ino`:
        the kernel updated that one's itself), and after a resize the open handles' sizes and
        `.npy` headers. The pages of a view being written or truncated (the writer's own after a
        new `.npy` header; the other view's while a write to it is answered too) are dropped
        without waiting: the kernel may hold them until that answer, and two writes, one to each
        view, each waiting for the other's pages would never end."""
        ops = self.ops
        nodes = [n for n in (ops.table.find_object(address), ops.table.find_view(address),
                             ops.table.find_points(address)) if n is not None]
        stale = nodes
        if writer_ino is not None and ops._by_address(address).layout.layout_class == VIRTUAL:
            # written through to its sources: whatever the kernel holds may show them
            stale = [n for n in (ops.table.get(ino) for ino in list(self.paged)) if n is not None]
        for node in stale:
            # the writer's own pages are as it wrote them, but a `.npy` view's header says a new shape
            if (node.ino != writer_ino or resized and node.kind == NPY) and node.ino in self.paged:
                self.paged.discard(node.ino)
                if node.ino == writer_ino or node.ino in self.serving:
                    ops.invalidator.data_later(node)
                else:
                    await ops.invalidator.data(node)
        ops.point_sizes.forget(address)   # a `.points.npy` size is counted again when asked
        if not resized and writer_ino is not None:
            points = ops.table.find_points(address)
            if points is not None:
                await ops.invalidator.attributes(points)
            return   # the same size; st_blocks and facts change at the flush
        numbers = await ops._quickly(namespace.numbers, ops._by_address(address))
        for npy in (False, True):
            ops.fact_tables.pop((address, npy))
        ops.blocks.forget(address)
        if resized:
            ops.listings.clear()
        for node in nodes:   # a new size, or st_blocks after a flush
            node.numbers = numbers
            await ops.invalidator.attributes(node)
        if resized:
            for fh, state in list(ops.handles.files.items()):
                if isinstance(state, OpenFile) and state.obj.address == address:
                    ops.handles.files[fh] = _reopened(state)


def _reopened(state: OpenFile) -> OpenFile:
    """The handle with the dataset's current size (and `.npy` header)."""
    ds = state.obj
    if state.kind == NPY:
        return OpenFile(state.ino, NPY, ds, namespace.npy_header(ds.npy_dtype, ds.npy_shape), int(ds.npy_body_size))
    return OpenFile(state.ino, RAW, ds, b"", int(ds.raw_size))
