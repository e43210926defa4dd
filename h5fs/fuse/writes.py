"""The mount's write side: data writes, truncation, fsync and the background flush.

Writes go to the engine's writeback (h5fs.model.writeback) in worker threads; a `.npy` view's
offsets are the model's to map (model/npy_view_write.py). What a write changes is then told to
the kernel and to the adapter's own caches: the object's stat numbers (size after a resize,
st_blocks after a flush), the other view's cached pages (`D` and `D.npy` show the same bytes),
open handles' sizes and `.npy` headers, listings and facts. What the write side tracks lives in
the mount state (`MountState.writes`, fuse/mount_state.py).

Dirty data is committed when its file is closed, up to 8 MiB (Writeback.closed: the journal holds
it, a `kill -9` of the daemon loses none of it), and on fsync, when the writeback's budget is
full, `flush_delay` seconds (-o flush_delay) after the last write or edit and at unmount
(`close`); those group commits make it durable.
"""

from __future__ import annotations

import errno
import functools
import logging
import time
from dataclasses import replace

import trio
from pyfuse3 import FUSEError

from ..errors import H5fsError
from ..model import namespace
from ..model.free_space import Progress, find_free_space, space_freed
from ..model.namespace import NPY, RAW
from ..model.npy_view_write import npy_view_truncate, npy_view_write
from ..model.npy_header import npy_header
from . import offload
from .handles import OpenFile
from .inodes import Node
from .mount_state import MountState

log = logging.getLogger("h5fs.fuse")

FLUSH_POLL = 0.5     # s between checks
WALKS = 5            # walks for unused space made while the tree keeps changing under them
WALK_PAUSE = 2.0     # s between them, at first
WALK_PAUSE_MAX = 60.0
WALK_QUIET = 0.5     # s without a request before a walk is made again (it lands what waits first)
WALK_LATEST = 30.0   # s it waits for that at most
WALK_ALONE = 0.05    # s a walk runs before it stands aside for requests (a small file's whole walk)
WALK_SLICE = 0.001   # s it then runs between looks at the requests served
WALK_SHARE = 0.05    # of the time it takes while requests keep coming


class WalkStopped(Exception):
    """The mount is going: its walk for unused space ends where it is."""


def start(mount: MountState, nursery) -> None:
    nursery.start_soon(_flusher, mount)
    if not mount.networked:   # a service frees its own space
        nursery.start_soon(_find_free_space, mount)


async def _find_free_space(mount: MountState) -> None:
    """The walk for unused space, made again while the tree changes under it (WALK_PAUSE s
    apart, doubling up to WALK_PAUSE_MAX, and once the mount is quiet: a walk lands the edits
    waiting first, which would make a burst of edits wait): until one completes, freed space
    is not reused. It stands aside while requests come (`_aside`)."""
    pause = WALK_PAUSE
    try:
        for attempt in range(1, 10**9):
            if await offload.run_sync(find_free_space, mount.f, mount.writes.wb.commit_lock,
                                      _aside(mount)) is not None:
                return
            if attempt == WALKS:
                log.info("the tree kept changing under %d walks for unused space: space freed since mount "
                         "is reused once one completes", WALKS)
            await trio.sleep(pause)
            pause = min(2 * pause, WALK_PAUSE_MAX)
            await _quiet(mount)
    except WalkStopped:
        return
    except Exception as exc:  # noqa: BLE001 - new space keeps coming from the end of the file
        log.warning("free space not reused: %s: %s", type(exc).__name__, exc)


async def _quiet(mount: MountState) -> None:
    """Wait for WALK_QUIET s without a request (WALK_LATEST s at most)."""
    seen, waited = None, 0.0
    while waited < WALK_LATEST and (mount.requests != seen or mount.serving):
        seen = mount.requests
        await trio.sleep(WALK_QUIET)
        waited += WALK_QUIET


def _aside(mount: MountState) -> Progress:
    """The walk's progress hook, in its worker. Past its first WALK_ALONE s, while requests are
    being served, the walk runs about WALK_SLICE s then sleeps, taking WALK_SHARE of the time, so a
    burst right after the mount (`rm -r`, `cp -r` of a large tree) does not wait for the GIL
    behind it; alone it runs on. Once the mount is going it ends where it is, unless the mount
    freed space: the unmount gives back what ends the file only on the walk's word."""
    seen, began = mount.requests, time.monotonic()
    alone_until = began + WALK_ALONE

    def pause(objects: int, chunks: int) -> None:
        nonlocal seen, began
        if mount.writes.stopping.is_set():
            if not space_freed(mount.f, mount.writes.wb):
                raise WalkStopped()
            return
        now = time.monotonic()
        if now < alone_until or now - began < WALK_SLICE:
            return
        if mount.requests != seen or mount.serving:
            mount.writes.stopping.wait(WALK_SLICE * (1 / WALK_SHARE - 1))
        seen, began = mount.requests, time.monotonic()

    return pause


async def _flusher(mount: MountState) -> None:
    """Flush `flush_delay` s after the last write (or the last namespace edit, whose journal
    record the flush retires)."""
    w = mount.writes
    while True:
        await trio.sleep(FLUSH_POLL)
        pending = w.wb.pending or w.touched
        if pending and time.monotonic() - w.last_write >= w.flush_delay:
            try:
                await flush(mount, durable=not mount.networked)
            except (OSError, H5fsError) as exc:   # kept dirty: fsync and unmount try again
                w.last_write = time.monotonic()
                log.error("writing changes into the file failed, retrying later: %s", exc)


async def flush(mount: MountState, durable: bool = True) -> None:
    """Everything in the file; then the stat numbers of what changed since the last flush
    (background flushes included) are refreshed. A service's engine sends the data, and waits
    for the service to store it durably only when `durable` (fsync, unmount; about 2 s for HSDS):
    a file's flush is durable either way."""
    w = mount.writes
    durable = durable or not mount.networked   # a file's flush always is
    commit = w.wb.flush if durable else functools.partial(w.wb.flush, durable=False)
    if not w.wb.dirty and not w.touched:
        if w.wb.pending and durable:   # namespace edits: durable, their record retired
            await offload.run_sync(commit)
        return
    touched, w.touched = w.touched, set()
    try:
        await offload.run_sync(commit)   # (the times of the writes with their data: one commit)
    finally:
        for address in touched:
            try:
                await changed(mount, address, None)
            except H5fsError as exc:   # removed since it was written: nothing to refresh
                log.debug("not refreshed after the flush: %s", exc)


async def closed(mount: MountState, address: int | None) -> None:
    """A handle of a dataset was closed: its writes are committed now when they are few
    (Writeback.closed), so a `kill -9` of the daemon loses no small file's data."""
    wb = mount.writes.wb
    if address is None or not wb.holds(address):
        return
    try:
        await offload.run_sync(wb.closed, address)
    except (OSError, H5fsError) as exc:   # kept dirty: the flush tries again
        log.warning("writes of a closed file not committed yet: %s", exc)


def close(mount: MountState) -> None:
    """At unmount: everything into the file, durably."""
    mount.writes.wb.close()


# -- requests -----------------------------------------------------------------------------------
async def write(mount: MountState, handle: OpenFile, off: int, buf: bytes) -> int:
    """Write `buf` at `off` of an open view; returns the bytes taken (all of them)."""
    w = mount.writes
    ds, taken = handle.obj, len(buf)
    if handle.kind == NPY:
        off, buf = npy_view_write(ds, handle.prefix, off, buf)
    elif handle.kind != RAW:
        raise FUSEError(errno.EBADF)
    room = w.wb.room(ds)
    if buf and room is not None and off + len(buf) > room > off:   # what fits is written (EFBIG when nothing does)
        taken -= off + len(buf) - room
        buf = buf[:room - off]
    if buf:
        size = ds.raw_size
        w.paged.add(handle.ino)   # its pages, as written: another writer's change drops them
        if not w.wb.write_now(ds, off, buf):
            await offload.run_sync(w.wb.write, ds, off, bytes(buf))
        w.last_write = time.monotonic()
        w.touched.add(ds.address)
        await changed(mount, ds.address, handle.ino, resized=off + len(buf) > size)
        _stamped(mount, ds.address)
    return taken


async def truncate(mount: MountState, node: Node, size: int | None) -> None:
    """Resize a view to `size` bytes (None: no data left, as O_TRUNC asks)."""
    w = mount.writes
    with w.answering(node.ino):
        ds = mount.object(node)
        if node.kind == NPY:
            size = npy_view_truncate(ds, size)
        elif node.kind != RAW:
            raise FUSEError(errno.EINVAL)
        size = size or 0
        await offload.run_sync(w.wb.truncate, ds, size)
        w.last_write = time.monotonic()
        # the kernel drops the truncated inode's own pages when its size changes
        await changed(mount, node.address, node.ino, resized=True)
        _stamped(mount, node.address)


def _stamped(mount: MountState, address: int) -> None:
    """Written now (whole seconds, as HDF5 keeps times): stat shows the new modification
    time of an object that keeps one at once, its header at the flush."""
    seconds = time.time_ns() // 1_000_000_000
    mount.writes.wb.stamp(address, seconds)
    for node in (mount.table.find_object(address), mount.table.find_view(address)):
        if node is not None and node.numbers is not None and node.numbers.mtime_ns is not None:
            node.numbers = replace(node.numbers, mtime_ns=seconds * 1_000_000_000)


# -- telling what changed -------------------------------------------------------------------------
async def changed(mount: MountState, address: int, writer_ino: int | None, resized: bool = False) -> None:
    """A dataset's bytes (and maybe its size) changed: refresh the stat numbers of its two
    views, drop the pages the kernel holds of the view not written or truncated (`writer_ino`:
    the kernel updated that one's itself), and after a resize the open handles' sizes and
    `.npy` headers. The pages of a view being written or truncated (the writer's own after a
    new `.npy` header; the other view's while a write to it is answered too) are dropped
    without waiting: the kernel may hold them until that answer, and two writes, one to each
    view, each waiting for the other's pages would never end."""
    w, table = mount.writes, mount.table
    nodes = [n for n in (table.find_object(address), table.find_view(address), table.find_points(address))
             if n is not None]
    stale = nodes
    if writer_ino is not None and mount.by_address(address).is_virtual:
        # written through to its sources: whatever the kernel holds may show them
        stale = [n for n in (table.get(ino) for ino in list(w.paged)) if n is not None]
    for node in stale:
        # the writer's own pages are as it wrote them, but a `.npy` view's header says a new shape
        if (node.ino != writer_ino or resized and node.kind == NPY) and node.ino in w.paged:
            w.paged.discard(node.ino)
            if node.ino == writer_ino or node.ino in w.serving:
                mount.invalidator.data_later(node)
            else:
                await mount.invalidator.data(node)
    mount.point_sizes.forget(address)   # a `.points.npy` size is counted again when asked
    if not resized and writer_ino is not None:
        points = table.find_points(address)
        if points is not None:
            await mount.invalidator.attributes(points)
        return   # the same size; st_blocks and facts change at the flush
    numbers = await mount.quickly(namespace.numbers, mount.by_address(address))
    for npy in (False, True):
        mount.fact_tables.pop((address, npy))
    mount.blocks.forget(address)
    if resized:
        mount.listings.clear()
    for node in nodes:   # a new size, or st_blocks after a flush
        node.numbers = numbers
        await mount.invalidator.attributes(node)
    if resized:
        for fh, handle in list(mount.handles.files.items()):
            if isinstance(handle, OpenFile) and handle.obj.address == address:
                mount.handles.files[fh] = _reopened(handle)


def _reopened(handle: OpenFile) -> OpenFile:
    """The handle with the dataset's current size (and `.npy` header)."""
    ds = handle.obj
    if handle.kind == NPY:
        return OpenFile(handle.ino, NPY, ds, npy_header(ds.npy_dtype, ds.npy_shape), int(ds.npy_body_size))
    return OpenFile(handle.ino, RAW, ds, b"", int(ds.raw_size))
