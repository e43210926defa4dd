"""Requests on files: open (`open_inode`), read, write, setattr (`set_attributes`: truncation,
times), flush, fsync, release.

Each open gets its own handle (fuse/handles.py). Reads answer from the engine's caches when
they can (no thread hop), else in a worker; filtered chunks are decoded ahead of a sequential
reader (fuse/prefetch.py). The kernel keeps the pages of open files (`keep_cache`) unless what
they show can change unseen. Writes go to the write side (fuse/writes.py), a `.npy` being
created or replaced to its arrival (fuse/npy_arrivals.py), a `.points.npy` to its stream
(fuse/points_stream.py).
"""

from __future__ import annotations

import errno
import os
import time

import pyfuse3
from pyfuse3 import FUSEError

from ..model import namespace
from ..model.namespace import DIR, DTYPE, NPY, POINTS, RAW, SYMLINK
from ..model.npy_header import npy_header
from . import editing, npy_arrivals, offload, writes
from .errors import boundary
from .handles import NpyStream, OpenFile, handle_address
from .inodes import Node
from .mount_state import MountState
from .namespace_edits import touch
from .points_stream import PointsStream
from .points_stream import finish as points_finish
from .stat_replies import stat_of


@boundary(request="open")
async def open_inode(mount: MountState, inode: int, flags: int) -> pyfuse3.FileInfo:
    node = mount.live_node(inode)
    if node.kind == DIR:
        raise FUSEError(errno.EISDIR)
    if node.kind not in (RAW, NPY, DTYPE, POINTS):
        raise FUSEError(errno.EIO)
    writing = flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND)
    if writing and mount.writes is None:
        raise FUSEError(errno.EROFS)
    if writing and node.kind not in (RAW, NPY, POINTS):
        raise FUSEError(errno.EACCES)
    if node.kind == POINTS:
        return await _open_points(mount, node, writing)
    if flags & os.O_TRUNC:
        if node.kind == NPY:   # a new array replacing the data (cp y.npy D.npy)
            return pyfuse3.FileInfo(fh=mount.handles.open_file(npy_arrivals.replace_stream(mount, node)))
        await writes.truncate(mount, node, None)
    obj = mount.object(node)
    if namespace.numbers_from_header(obj):
        handle = _open_handle(node, obj)
    else:  # variable-length data is decoded whole, virtual sources opened: in a worker
        handle = await offload.run_sync(_open_handle, node, obj)
    # a virtual dataset shows its sources' bytes, which writes to them change unseen: on a
    # writable mount its pages are not kept; nor a service's, which other writers change
    keep = mount.refresh is None and (mount.writes is None or not (node.kind in (RAW, NPY) and obj.is_virtual))
    if mount.writes is not None and keep:
        mount.writes.paged.add(inode)
    # pages still being dropped after a write changed them (a new `.npy` header): the kernel
    # drops them itself at this open, before anything reads them
    keep = keep and inode not in mount.invalidator.pending
    return pyfuse3.FileInfo(fh=mount.handles.open_file(handle), keep_cache=keep)


async def _open_points(mount: MountState, node: Node, writing: int) -> pyfuse3.FileInfo:
    """`.points.npy`: written, a new set of defined elements (taken at close); read, the
    defined elements as the file holds them (writes not yet in it are flushed first)."""
    if writing:
        stream = PointsStream(node.ino, node.address, node.path.removesuffix(namespace.POINTS_SUFFIX))
        mount.writable()   # a read-only mount refuses
        return pyfuse3.FileInfo(fh=mount.handles.open_file(stream), direct_io=True)
    if mount.writes is not None and mount.writes.wb.holds(node.address):
        await writes.flush(mount, durable=False)
    obj = mount.object(node)
    view = await offload.run_sync(obj.points_view)
    handle = OpenFile(node.ino, POINTS, obj, view.header, view.body_size)
    return pyfuse3.FileInfo(fh=mount.handles.open_file(handle), keep_cache=False, direct_io=True)


def _open_handle(node: Node, obj) -> OpenFile:
    """What one open file reads: the object, the bytes before the data, the data's size."""
    if node.kind == DTYPE:
        text = namespace.datatype_text(obj)
        return OpenFile(node.ino, DTYPE, obj, text, 0)
    if node.kind == NPY:
        header = npy_header(obj.npy_dtype, obj.npy_shape)
        return OpenFile(node.ino, NPY, obj, header, int(obj.npy_body_size))
    return OpenFile(node.ino, RAW, obj, b"", int(obj.raw_size))


@boundary
async def read(mount: MountState, fh: int, off: int, size: int) -> bytes:
    handle = mount.handles.files.get(fh)
    if handle is None:
        raise FUSEError(errno.EBADF)
    if isinstance(handle, (NpyStream, PointsStream)):   # being written, not read (cp does not)
        raise FUSEError(errno.EBADF)
    prefix, ds = handle.prefix, handle.obj
    out = prefix[off:off + size] if off < len(prefix) else b""
    if handle.kind == DTYPE:
        return out
    if mount.writes is not None:   # the kernel keeps what it reads: a write elsewhere drops it
        mount.writes.paged.add(handle.ino)
    boff = max(0, off - len(prefix))
    bsize = min(size - len(out), handle.size - boff)
    if bsize <= 0:
        return out
    if handle.kind == POINTS:
        body = await offload.run_sync(lambda: ds.points_view().read_body(boff, bsize))
        return out + body if out else body
    raw = handle.kind == RAW
    if mount.writes is not None and mount.writes.wb.holds(ds.address):   # writes not all in the file
        body = await offload.run_sync(mount.writes.wb.read, ds, boff, bsize, not raw)
        return out + body if out else body
    body = ds.read_cached(boff, bsize) if raw else ds.read_npy_cached(boff, bsize)
    if body is None:
        if ds.prefetchable:   # this request's chunks decode on every core
            mount.prefetcher.spread(ds.decode_jobs(boff, bsize))
        body = await offload.run_sync(ds.read_raw if raw else ds.read_npy_body, boff, bsize)
    if ds.prefetchable:  # the .npy body is the raw view: decode ahead through it
        mount.prefetcher.after_read(fh, ds.decode_jobs, boff, bsize, handle.size)
    return out + body if out else body


@boundary
async def write(mount: MountState, fh: int, off: int, buf: bytes) -> int:
    if mount.writes is None:
        raise FUSEError(errno.EROFS)
    handle = mount.handles.files.get(fh)
    if handle is None:
        raise FUSEError(errno.EBADF)
    with mount.writes.answering(handle.ino):
        if isinstance(handle, NpyStream):
            mount.writes.last_write = time.monotonic()
            return await npy_arrivals.stream_write(mount, handle, off, buf)
        if isinstance(handle, PointsStream):
            return handle.write(off, buf)
        return await writes.write(mount, handle, off, buf)


@boundary(request="setattr")
async def set_attributes(mount: MountState, inode: int, attr, fields, fh: int | None) -> pyfuse3.EntryAttributes:
    if mount.writes is None:
        raise FUSEError(errno.EROFS)
    node = mount.live_node(inode)
    if fields.update_size:
        handle = mount.handles.files.get(fh) if fh is not None else None
        if node.kind == NPY and attr.st_size == 0 and handle is not None:
            mount.handles.files[fh] = npy_arrivals.truncated(mount, node, handle)
        elif node.kind == POINTS:   # the file being written; no other size is one of the set
            if isinstance(handle, PointsStream):
                handle.truncate(attr.st_size)
            elif attr.st_size != 0:
                raise FUSEError(errno.EINVAL)
        else:
            await writes.truncate(mount, node, attr.st_size)
    # HDF5 keeps no owner or mode: chmod and chown change nothing and succeed, as on a
    # `quiet` vfat mount (rsync -a fchmods its temporary files, tar -x and cp -a set modes
    # and owners: refusing would fail them)
    if fields.update_mtime and node.kind != SYMLINK:
        await touch(mount, node, attr.st_mtime_ns)
    return stat_of(mount, node)


@boundary
async def release(mount: MountState, fh: int) -> None:
    handle = mount.handles.files.pop(fh, None)
    mount.prefetcher.forget(fh)
    if isinstance(handle, NpyStream):
        async with handle.lock:
            await npy_arrivals.stream_release(mount, handle)
    elif isinstance(handle, PointsStream):
        handle.close()
    if handle is not None and mount.writes is not None:
        await editing.closed(mount, handle_address(handle))


@boundary
async def flush(mount: MountState, fh: int) -> None:
    # a `.npy` file being created is checked whole; a closed file's writes are committed
    # (durable with the next group commit: mount_state.FLUSH_DELAY)
    handle = mount.handles.files.get(fh)
    if isinstance(handle, NpyStream):
        async with handle.lock:   # after any write of this open file still under way (a dup)
            await npy_arrivals.stream_finish(mount, handle)
    elif isinstance(handle, PointsStream) and await points_finish(mount, handle):
        await writes.changed(mount, handle.address, None)
    if handle is not None and mount.writes is not None:
        await writes.closed(mount, handle_address(handle))


@boundary
async def fsync(mount: MountState, fh: int, datasync: bool) -> None:
    if mount.writes is not None:
        await writes.flush(mount)


@boundary
async def fsyncdir(mount: MountState, fh: int, datasync: bool) -> None:
    """Every change of the mount into the file (`h5fs umount` asks this first, showing
    progress, so the unmount itself has nothing left to write)."""
    if mount.writes is not None:
        await writes.flush(mount)
