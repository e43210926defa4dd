"""Files arriving through the mount: a new `x.npy` made into dataset `x` as its header and body
stream in (or replacing D's data, keeping D's storage when the array fits it:
model/replace_like.py), any other new file a dataset of its bytes, and a file of bytes renamed
to `x.npy` (rsync, atomic saves) stored as the array it holds.

What the bytes say and where they go is the model's (model/npy_ingest.py: the header, the
storage, each piece's place, a Fortran-order body, whether a close found a whole array); this
module makes the datasets (editing.py's `quick` and `run`: making a dataset allocates nothing,
a small edit), writes the pieces through the writeback and tells the kernel what changed.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import stat

import numpy as np
import pyfuse3
from pyfuse3 import FUSEError

from ..errors import H5fsError, InvalidWrite
from ..model import namespace
from ..model import npy_ingest
from ..model.namespace import NPY, NPY_SUFFIX, RAW, Entry, Numbers
from ..model.npy_header import NpyHeader, NpyHeaderError
from . import editing, offload, writes
from .editing import changed, entry_of, forget_object, forgotten, free_name, looked_up, quick, run
from .errors import boundary
from .handles import NpyStream, OpenFile
from .inodes import Node
from .mount_state import MountState
from .stat_replies import stat_of

log = logging.getLogger("h5fs.fuse")

ROOM = 64 << 20   # free space below this (plus twice the data waiting) makes a new array's close flush
COPY_BLOCK = 1 << 20   # a file of bytes renamed to x.npy is read this much at a time into its array


# -- new files ---------------------------------------------------------------------------------------
@boundary
async def create(mount: MountState, parent_inode: int, name: bytes) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
    """A new file: `x.npy` becomes dataset `x` once its header is written (`NpyStream`); any
    other name a one-dimensional uint8 dataset with an unlimited dimension holding the file's
    bytes."""
    w = mount.writable()
    parent = mount.dir(parent_inode)
    text = await free_name(mount, parent, name)
    if text.endswith(NPY_SUFFIX) and text != NPY_SUFFIX:
        if await entry_of(mount, parent, name[:-len(NPY_SUFFIX)]) is not None:
            raise FUSEError(errno.EEXIST)
        entry = Entry(name, NPY, namespace.join(parent.path, text), None, Numbers(1, None), suffix=NPY_SUFFIX)
        node = mount.table.intern(parent, entry)
        node.lookups += 1
        stream = NpyStream(node.ino, parent, text[:-len(NPY_SUFFIX)])
        w.paged.add(node.ino)   # the kernel keeps the pages written through it
        attrs = stat_of(mount, node)
        # looked up again at each use: a file closed before its header came makes no dataset,
        # and its name must go at once (the release that forgets it comes after close returns)
        attrs.entry_timeout = 0
        return pyfuse3.FileInfo(fh=mount.handles.open_file(stream)), attrs
    attrs = await _bytes_file(mount, parent, name, text)
    node = mount.table.get(attrs.st_ino)
    fh = mount.handles.open_file(OpenFile(node.ino, RAW, mount.object(node), b"", 0))
    return pyfuse3.FileInfo(fh=fh), attrs


@boundary
async def mknod(mount: MountState, parent_inode: int, name: bytes, mode: int) -> pyfuse3.EntryAttributes:
    """An empty regular file, made before it is opened (`tar --xattrs` extracts a file with
    attributes this way). A `.npy` name is refused: its dataset is made from the header
    written through the handle that creates it, and this one has none."""
    mount.writable()
    if not stat.S_ISREG(mode):   # a device, fifo or socket has no HDF5 counterpart
        raise FUSEError(errno.EPERM)
    parent = mount.dir(parent_inode)
    text = await free_name(mount, parent, name)
    if text.endswith(NPY_SUFFIX):
        log.warning("%s/%s: a .npy file is made by the open that creates it (O_CREAT), not by mknod",
                    parent.path.rstrip("/"), text)
        raise FUSEError(errno.EPERM)
    return await _bytes_file(mount, parent, name, text)


async def _bytes_file(mount: MountState, parent: Node, name: bytes, text: str) -> pyfuse3.EntryAttributes:
    """A new empty one-dimensional uint8 dataset: a file of any other name."""
    w = mount.writes
    address = await quick(mount, w.editor.create_dataset, mount.object(parent), text, np.uint8, (0,),
                          maxshape=(None,), chunks=(w.chunk_bytes,), filters=w.filters)
    mount.table.gone(address)   # a node there is a freed object's whose news is on its way
    await changed(mount, parent, name, [name + NPY_SUFFIX.encode()])
    attrs = await looked_up(mount, parent, name)
    w.paged.add(attrs.st_ino)
    return attrs


def replace_stream(mount: MountState, node: Node) -> NpyStream:
    """`cp y.npy D.npy` (D.npy opened with O_TRUNC, or truncated to 0 through its handle):
    the new array is streamed into a dataset of its own, which gives D its data at close
    (`stream_finish`); D stays whole until then."""
    ds = mount.f.get(node.address, node.path.removesuffix(NPY_SUFFIX))
    return NpyStream(node.ino, None, "", replaces=ds)


def truncated(mount: MountState, node: Node, handle: OpenFile | NpyStream) -> NpyStream:
    """A `.npy` handle truncated to 0 (`dd of=D.npy` opens, then truncates): a new file."""
    if isinstance(handle, OpenFile):
        return replace_stream(mount, node)
    if handle.ingest.started:
        raise InvalidWrite(f"{handle.what}: truncated while being written")
    return handle


# -- the bytes coming in --------------------------------------------------------------------------------
def _refusing(stream: NpyStream, fn, *args):
    """`fn(*args)` of the stream's ingest, a refusal naming the file."""
    try:
        return fn(*args)
    except InvalidWrite as exc:
        raise InvalidWrite(f"{stream.what}: {exc}") from None


async def stream_write(mount: MountState, stream: NpyStream, off: int, buf: bytes) -> int:
    async with stream.lock:
        await _stream_write(mount, stream, off, buf)
    return len(buf)


async def _stream_write(mount: MountState, stream: NpyStream, off: int, buf: bytes) -> None:
    ingest = stream.ingest
    _refusing(stream, ingest.check)
    if ingest.header is not None:
        await _piece(mount, stream, off, buf)
        return
    header = _refusing(stream, ingest.take_head, off, buf)   # held where it belongs until then
    if header is not None:
        try:
            await _make(mount, stream, header)
        except H5fsError as exc:
            ingest.failed = ingest.failed or exc
            raise


async def _make(mount: MountState, stream: NpyStream, header: NpyHeader) -> None:
    """The header is complete: the dataset is made, and the bytes after it written."""
    w, ingest = mount.writes, stream.ingest
    storage = _refusing(stream, ingest.plan, header, w.chunk_bytes, w.filters)
    if stream.replaces is not None:
        address, stream.keeps = await run(mount, npy_ingest.replacement, w.editor, stream.replaces, header, storage,
                                          stream.keeps)
        stream.obj = mount.f.get(address, f"{stream.replaces.path} (new data)")
        pieces = ingest.begin(header)
    else:
        pieces = await _make_linked(mount, stream, header, storage)
    for off, data in pieces:   # the array bytes that came with or before the header
        await _piece(mount, stream, off, data)


async def _make_linked(mount: MountState, stream: NpyStream, header: NpyHeader,
                       storage: dict) -> list[tuple[int, bytes]]:
    address = await quick(mount, mount.writes.editor.create_dataset, mount.object(stream.parent), stream.name,
                          header.dtype, header.shape, **storage)
    node = mount.table.get(stream.ino)
    stream.obj = mount.f.get(address, namespace.join(stream.parent.path, stream.name))
    pieces = stream.ingest.begin(header)
    mount.table.gone(address)   # a node there is a freed object's whose news is on its way
    if node is not None:
        mount.table.adopt(node, address)
        node.numbers = await mount.quickly(namespace.numbers, stream.obj)
    await changed(mount, stream.parent, stream.name.encode() + NPY_SUFFIX.encode(), [stream.name.encode()])
    return pieces


async def _piece(mount: MountState, stream: NpyStream, off: int, buf: bytes) -> None:
    """A piece at `off` of the file once the header is known: into the dataset where the
    ingest says (a Fortran-order body keeps it until whole)."""
    part = _refusing(stream, stream.ingest.to_write, off, buf)
    if part is None:
        return
    start, data = part
    wb = mount.writes.wb
    if not wb.write_now(stream.obj, start, data):
        await offload.run_sync(wb.write, stream.obj, start, data)
    stream.ingest.wrote(start, len(data))
    if not stream.unlinked:   # nothing shows an unlinked dataset's numbers
        mount.writes.touched.add(stream.obj.address)


# -- at close ---------------------------------------------------------------------------------------
async def stream_finish(mount: MountState, stream: NpyStream) -> None:
    """At close: a `.npy` file that is not whole (or not valid) answers EINVAL and leaves no
    dataset; a whole one replacing D's data gives it to D."""
    if stream.replaces is not None:
        await _replacement_closed(mount, stream)
        return
    ingest = stream.ingest
    if ingest.failed is None and ingest.incomplete and not ingest.declared(stream.obj):
        if not ingest.started:   # nothing written yet: dd closes a duplicate first
            return
        ingest.failed = InvalidWrite(ingest.cut_short())
    if ingest.failed is None:
        await _fortran_whole(mount, stream)
        await _landed(mount, stream)
        if ingest.failed is None:
            return
    if stream.obj is not None:
        obj, stream.obj = stream.obj, None
        editor = mount.writes.editor

        def unlink() -> int | None:   # unless the name went already (rm, mv), or now names another
            entry = namespace.lookup(mount.f, mount.object(stream.parent), stream.parent.path,
                                     stream.name.encode("utf-8", "surrogateescape"))
            if entry is None or entry.address != obj.address:
                return None
            left = editor.unlink(mount.object(stream.parent), stream.name)
            editor.land()   # its space back now, not at the group commit (a full disk: the next copy fits)
            return left

        before = mount.table.newest
        left = await run(mount, unlink)
        if left is None:   # removed while open: freed at release
            stream.obj = obj
        else:
            await changed(mount, stream.parent, stream.name.encode() + NPY_SUFFIX.encode(), [stream.name.encode()])
            await forget_object(mount, obj.address, left, before)
    failed = ingest.failed
    if isinstance(failed, OSError) and failed.errno:   # ENOSPC: the close says so
        raise OSError(failed.errno, f"{stream.what}: {failed.strerror or failed}")
    raise InvalidWrite(f"{stream.what}: {failed}")


async def _landed(mount: MountState, stream: NpyStream) -> None:
    """A new array's data is written at a flush after its close. On a file system that
    might not hold what waits to be written, the close flushes first: a disk that fills up
    then fails the copy (ENOSPC at close, the dataset removed), where a later flush would
    fail with the array made and holding fill values."""
    if mount.networked:   # a service's space is its own to tell: its refusal fails the flush
        return
    # one system call on the file's own file system, which the trio thread reads anyway
    host = os.statvfs(os.path.dirname(os.path.abspath(mount.source)))
    if host.f_bavail * host.f_frsize >= 2 * mount.writes.wb.waiting()[0] + ROOM:
        return
    try:
        await writes.flush(mount)
    except OSError as exc:
        stream.ingest.failed = exc


async def _replacement_closed(mount: MountState, stream: NpyStream) -> None:
    """Every close of a descriptor flushes, and some tools close a duplicate first (dd):
    nothing written yet is no error, and an incomplete array is kept for more writes; the
    unlinked dataset goes at release (`stream_release`)."""
    ingest = stream.ingest
    _refusing(stream, ingest.check)
    if not ingest.incomplete or ingest.declared(stream.obj):
        await _fortran_whole(mount, stream)
        if stream.unlinked:
            await _replace(mount, stream)
    elif ingest.started:
        raise InvalidWrite(f"{stream.what}: {ingest.cut_short()}")


async def _fortran_whole(mount: MountState, stream: NpyStream) -> None:
    """A whole Fortran-order body goes into the dataset, row-major."""
    ingest = stream.ingest
    if ingest.fortran is None:
        return
    obj = stream.obj
    try:
        await offload.run_sync(ingest.fortran_whole, functools.partial(mount.writes.wb.write, obj))
    except Exception as exc:
        ingest.failed = exc
        raise
    if not stream.unlinked:
        mount.writes.touched.add(obj.address)
        await writes.changed(mount, obj.address, None)


async def _replace(mount: MountState, stream: NpyStream) -> None:
    """The new array is whole: it becomes D's data in one transaction, and the kernel forgets
    what it holds of D (pages, size: the inode stays, as after O_TRUNC on any file)."""
    ds = stream.replaces
    try:
        stream.left = await run(mount, mount.writes.editor.replace_data, ds, stream.obj.address, stream.keeps,
                                stream.moves)
    except Exception as exc:
        stream.ingest.failed = exc
        raise
    stream.obj = ds   # later writes of this handle go to D itself
    mount.writes.paged.add(stream.ino)   # the pages cp wrote
    await writes.changed(mount, ds.address, None, resized=True)


async def stream_release(mount: MountState, stream: NpyStream) -> None:
    """The file is closed for good: a replacement that never became D's data is freed; a new
    file closed with nothing written made no dataset, and the kernel forgets its name."""
    stream.ingest.close()
    if stream.unlinked:
        obj, stream.obj = stream.obj, None
        await run(mount, mount.writes.editor.drop_unlinked, obj.address, obj.path)
    elif stream.replaces is None and stream.obj is None:
        name = stream.name.encode("utf-8", "surrogateescape") + NPY_SUFFIX.encode()
        mount.invalidator.entry(stream.parent, name)


# -- a file of bytes renamed to x.npy (fuse/namespace_edits.py `rename`) ------------------------------------
def holds_bytes(mount: MountState, parent: Node, text: str, entry: Entry) -> bool:
    """In a worker: whether the dataset is a file of bytes (model/npy_ingest.py)."""
    return npy_ingest.holds_bytes(mount.f.get(entry.address, namespace.join(parent.path, text)))


def fits(mount: MountState, parent: Node, text: str, entry: Entry, address: int, path: str):
    """In a worker: the dataset at `address` (`path`) when the `.npy` file T's bytes hold
    has a header, and an array that replaces that dataset's data keeping its storage
    (model/replace_like.py); else None."""
    ds = mount.f.get(entry.address, namespace.join(parent.path, text))
    try:
        target = mount.f.get(address, path)
        ok = npy_ingest.fits(mount.writes.wb, ds, target)
    except (NpyHeaderError, H5fsError):   # not an array, or no dataset: the rename says why
        return None
    return target if ok else None


async def to_array(mount: MountState, parent: Node, text: str, entry: Entry, into=None) -> int | None:
    """The bytes of file T become its data, the array they hold as a `.npy`, stored as a
    copied-in `.npy` is (`replace_stream`): one transaction at the end, T's attributes kept
    (rsync sets them on its temporary file). Or, `into` a dataset D, D's data, stored as D
    is, T's link removed in the same transaction (returns the hard links left to T). EINVAL,
    T (D) unchanged, when they are not one whole valid `.npy`."""
    ds = mount.f.get(entry.address, namespace.join(parent.path, text))
    stream = NpyStream(mount.table.intern(parent, entry).ino, None, "", replaces=into or ds,
                       keeps=into is not None, moves=None if into is None else (mount.object(parent), text))
    wb = mount.writes.wb
    try:
        size = ds.raw_size
        if size == 0:
            raise InvalidWrite(f"{ds.path}: renamed to a .npy name, but empty: no array")
        for off in range(0, size, COPY_BLOCK):
            data = await offload.run_sync(wb.read, ds, off, min(COPY_BLOCK, size - off))
            await _stream_write(mount, stream, off, bytes(data))
        await _replacement_closed(mount, stream)
    finally:
        await stream_release(mount, stream)
    return stream.left


async def into(mount: MountState, parent: Node, name: bytes, text: str, entry: Entry, target, new_parent: Node,
               new: bytes, base: bytes) -> None:
    """`mv T D.npy` where T's bytes are an array that fits dataset D: they become D's data
    as `cp T D.npy` would make them (`to_array`), D's storage, attributes and address
    kept, and T goes in the same transaction. The kernel moved T's inode to `new`: it is
    D's `.npy` view from now on (`now_a_view`); the view's inode D had stays D's view for
    whoever holds it open."""
    before = mount.table.newest
    left = await to_array(mount, parent, text, entry, into=target)
    numbers = await offload.run_sync(editing.numbers_left, mount, entry.address, left) if left else None
    node = mount.table.find_object(entry.address)
    held = None
    if node is not None:   # D's view from now on, so no longer T's to forget
        held = mount.table.becomes_view(node, target.address, target.path)
    await changed(mount, parent, name, namespace.other_views(name, entry))
    await forgotten(mount, entry.address, left, numbers, before)
    if node is not None:
        await mount.invalidator.data(node)
    await editing.refresh(mount, target.address)
    if held is not None and node is not None:
        held.numbers = node.numbers
        await mount.invalidator.attributes(held)
        await mount.invalidator.data(held)
    await changed(mount, new_parent, new, [base])


async def now_a_view(mount: MountState, entry: Entry, parent: Node, name: bytes, base: bytes) -> None:
    """The kernel moved T's inode (its bytes) to `name`, the `.npy` view of what T became:
    the inode is that view from now on, and the kernel drops what it holds of it (its size,
    its pages) before the rename returns, so the next open of `name` reads the array. The
    name `base` (a dataset it replaced, or T itself) is looked up again."""
    node = mount.table.find_object(entry.address)
    if node is not None:
        old = mount.table.becomes_view(node)
        if old is not None:   # the view file the rename replaced
            old.gone = True
        await mount.invalidator.data(node)
    await changed(mount, parent, name, [base])
