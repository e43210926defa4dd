"""The mount's namespace edits: mkdir, rmdir, unlink, rename, link, symlink, setxattr,
removexattr and utimens, each one transaction of the engine's tree editor
(h5fs.model.tree_edit) run in a worker thread.

Names are checked here (what HDF5 can hold, what the mount shows: `D` and `D.npy` are one
dataset); the editor checks the tree (existence, emptiness, cycles). After an edit the adapter's
caches of what changed are dropped (listings, attribute tables, facts, stat numbers) and the
kernel is told of changes it did not make itself (the link count of an object with other names,
attributes of other inodes of the same object).
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import os
from dataclasses import replace

import numpy as np
import pyfuse3
from pyfuse3 import FUSEError

from ..errors import H5fsError, InvalidWrite
from ..model import fortran_body
from ..model import messages as M
from ..model import namespace
from ..model.dataset_create import NPY_CHUNK_BYTES, npy_storage
from ..model.namespace import DIR, NPY, NPY_SUFFIX, POINTS, POINTS_SUFFIX, RAW, SYMLINK, Entry, Numbers
from ..model.npy_header import PREAMBLE, NpyHeaderError, header_end, parse_npy_header
from ..model.replace_like import keeps_storage
from ..model.tree_edit import NamespaceError, TreeEditor
from . import offload, views
from .handles import NpyStream, OpenFile
from .inodes import Node

log = logging.getLogger("h5fs.fuse")

DEFAULT_FILTERS = "gzip:4,shuffle"   # new datasets' compression (-o compression=...)
CREATE_XATTR = b"user.h5fs.create"   # `h5fs create`'s request, set on the parent directory
ATTRIBUTE_XATTR = b"user.h5fs.attribute"   # `h5fs attr --dtype`'s request, set on the object
ROOM = 64 << 20   # free space below this (plus twice the data waiting) makes a new array's close flush
COPY_BLOCK = 1 << 20   # a file of bytes renamed to x.npy is read this much at a time into its array
MAX_EARLY = 64 << 20   # how far into a .npy bytes are held while its header is incomplete (writeback_cache)


def check_length(name: bytes) -> None:
    """ENAMETOOLONG for a name over NAME_MAX, whatever asks for it: the kernel passes names up
    to 1024 bytes (FUSE_NAME_MAX), and POSIX wants ENAMETOOLONG rather than ENOENT for them."""
    if len(name) > namespace.NAME_MAX:
        raise FUSEError(errno.ENAMETOOLONG)


def link_name(name: bytes) -> str:
    """The HDF5 link name for a file name a user gives (UTF-8, no NUL; the kernel already
    refuses '/' and empty names)."""
    check_length(name)
    if not name or b"/" in name or b"\0" in name or name in (b".", b".."):
        raise FUSEError(errno.EINVAL)
    try:
        return name.decode("utf-8")
    except UnicodeDecodeError:
        log.warning("%r: not UTF-8, HDF5 cannot hold it as a link name", name)
        raise FUSEError(errno.EINVAL) from None


class EditSide:
    def __init__(self, ops, editor: TreeEditor, filters: str = DEFAULT_FILTERS, chunk_bytes: int = NPY_CHUNK_BYTES):
        self.ops, self.editor, self.filters = ops, editor, filters
        self.chunk_bytes = chunk_bytes   # of new datasets (-o chunk_kb)
        # (dir inode, name): a view whose dataset went with its twin while a listing was open
        self.gone_twins: set[tuple[int, bytes]] = set()

    # -- what a name stands for -------------------------------------------------------------
    async def _entry(self, parent: Node, name: bytes) -> namespace.Entry | None:
        ops = self.ops
        return await offload.run_sync(namespace.lookup, ops.f, ops._object(parent), parent.path, name)

    async def _link_of(self, parent: Node, name: bytes) -> tuple[str, namespace.Entry]:
        """The link name behind a file name of `parent` (`D.npy` is the link `D`), and its entry."""
        return await offload.run_sync(self._link_now, parent, name)

    def _link_now(self, parent: Node, name: bytes) -> tuple[str, namespace.Entry]:
        """`_link_of` in a worker thread."""
        ops = self.ops
        check_length(name)
        entry = namespace.lookup(ops.f, ops._object(parent), parent.path, name)
        if entry is None:
            raise FUSEError(errno.ENOENT)
        return _base(name, entry).decode("utf-8", "surrogateescape"), entry

    async def _free_name(self, parent: Node, name: bytes) -> str:
        """A new link name for `name`, which must not show in `parent` yet (nor as the `.npy`
        view of a dataset: `x.npy` beside dataset `x` would hide the view)."""
        text = link_name(name)
        if await self._entry(parent, name) is not None:
            raise FUSEError(errno.EEXIST)
        return text

    # -- the edits -------------------------------------------------------------------------------
    async def mkdir(self, parent: Node, name: bytes):
        text, ops = link_name(name), self.ops

        def make() -> namespace.Entry | None:   # one worker trip: the name checked, made, looked up
            # a link of that name the editor refuses itself; a view's name (D.npy) only shows here
            if text.endswith((NPY_SUFFIX, POINTS_SUFFIX)) and \
                    namespace.lookup(ops.f, ops._object(parent), parent.path, name) is not None:
                raise NamespaceError(errno.EEXIST, f"{parent.path}: {text!r} exists")
            address = self.editor.mkdir(ops._object(parent), text)
            return namespace.object_entry(ops.f, parent.path, text, address)

        entry = await self._run(make)
        if entry is not None:
            ops.table.gone(entry.address)   # a node there is a freed object's whose news is on its way
        await self._changed(parent, name)
        if entry is None:
            raise FUSEError(errno.EIO)
        return ops._hand_out(parent, entry)

    async def rmdir(self, parent: Node, name: bytes) -> None:
        text, entry = await self._link_of(parent, name)
        if entry.kind != DIR:
            raise FUSEError(errno.ENOTDIR)
        before = self.ops.table.newest
        left = await self._run(self.editor.rmdir, self.ops._object(parent), text)
        await self._changed(parent, name)
        await self._forget_object(entry.address, left, before)

    async def unlink(self, parent: Node, name: bytes) -> None:
        reading = self.ops.handles.reading(parent.ino)

        def remove() -> tuple[namespace.Entry, int | None, Numbers | None, list[bytes]]:   # one worker trip
            text, entry = self._link_now(parent, name)
            if entry.kind == DIR:
                raise FUSEError(errno.EISDIR)
            shown = [t for t in _other_views(name, entry) if reading and self._shows(parent, t)]
            left = self.editor.unlink(self.ops._object(parent), text)
            # the views that went with it: not a link of that name hiding one, nor a view that never was
            gone = [t for t in shown if not self._shows(parent, t)]
            return entry, left, self._numbers_left(entry.address, left), gone

        before = self.ops.table.newest
        entry, left, numbers, gone = await self._run(remove)
        await self._changed(parent, name, _other_views(name, entry))
        if self.ops.handles.reading(parent.ino):
            self.gone_twins.update((parent.ino, twin) for twin in gone)
        if entry.address is not None:
            await self._forgotten(entry.address, left, numbers, before)

    def _shows(self, parent: Node, name: bytes) -> bool:
        """In a worker: whether `name` is an entry of `parent`."""
        ops = self.ops
        return namespace.lookup(ops.f, ops._object(parent), parent.path, name) is not None

    def unlink_gone_twin(self, parent_ino: int, name: bytes) -> bool:
        """Whether `name` is the other view of a dataset removed while its directory was being
        read (`rm -r` listed both `D` and `D.npy`, removed `D`, and now removes `D.npy`): that
        unlink succeeds, as the file is gone."""
        if (parent_ino, name) in self.gone_twins:
            self.gone_twins.discard((parent_ino, name))
            return True
        return False

    def closed_dir(self, ino: int) -> None:
        if not self.ops.handles.reading(ino):
            self.gone_twins = {key for key in self.gone_twins if key[0] != ino}

    async def rename(self, old_parent: Node, old: bytes, new_parent: Node, new: bytes, flags: int) -> None:
        if flags & ~pyfuse3.RENAME_NOREPLACE:
            raise FUSEError(errno.EINVAL)   # RENAME_EXCHANGE, RENAME_WHITEOUT: not for HDF5 links
        text, entry = await self._link_of(old_parent, old)
        link = new
        suffix = entry.suffix.encode()
        if suffix:   # mv D.npy E.npy renames the dataset (or the soft link D)
            if not new.endswith(suffix) or new == suffix:
                raise FUSEError(errno.EINVAL)
            link = new[:-len(suffix)]
        # a file of bytes renamed to x.npy (rsync's temporary file, np.save then os.replace):
        # its bytes become dataset x's array, as `cp T x.npy` would make it
        array = not suffix and entry.kind == RAW and _array_name(new) and await self._run(self._holds_bytes, old_parent, text, entry)
        if array:
            link = new[:-len(NPY_SUFFIX)]
        new_text = link_name(link)
        existing = await self._entry(new_parent, link)
        if existing is not None:
            if flags & pyfuse3.RENAME_NOREPLACE:
                raise FUSEError(errno.EEXIST)
            if existing.kind == DIR and entry.kind != DIR:
                raise FUSEError(errno.EISDIR)
            if entry.kind == DIR and existing.kind != DIR:
                raise FUSEError(errno.ENOTDIR)
        if array and existing is not None and existing.kind == RAW and existing.address not in (None, entry.address):
            target = await self._run(self._fits, old_parent, text, entry, existing.address,
                                     namespace.join(new_parent.path, new_text))
            if target is not None:   # an array that fits dataset x: x's data, as `cp T x.npy` makes it
                await self._into(old_parent, old, text, entry, target, new_parent, new, link)
                return
        if array:
            await self._to_array(old_parent, text, entry)
        if existing is not None and existing.address is not None and existing.address == entry.address \
                and existing.kind != SYMLINK:
            if array:   # mv D D.npy: D's own bytes became its array
                await self._now_a_view(entry, new_parent, new, link)
            return   # two names of one object: rename(2) does nothing
        before = self.ops.table.newest
        left = await self._run(self.editor.rename, self.ops._object(old_parent), text,
                               self.ops._object(new_parent), new_text)
        link_node = self.ops.table.find_link(old_parent.address, old) if entry.kind == SYMLINK else None
        # the moved object and all below it are known by their new paths (symlink targets,
        # `user.h5fs.path`, messages); a soft link's inode by its new name and text
        if entry.address is not None:
            moved = self.ops.table.moved(namespace.join(old_parent.path, text), namespace.join(new_parent.path, new_text),
                                         None if entry.kind == DIR else entry.address)
            for node in moved:
                for npy in (False, True):
                    self.ops.fact_tables.pop((node.address, npy))
        if link_node is not None:   # the kernel keeps the inode under its new name
            self.ops.table.link_moved(link_node, namespace.join(new_parent.path, link_name(new)))
        for parent, name in ((old_parent, old), (new_parent, new)):
            await self._changed(parent, name, _other_views(name, entry))
        if link_node is not None:   # after `_changed`, which drops what the names had
            self.ops.table.link_renamed(link_node, new_parent.address, new)
        node = None if entry.address is None else self.ops.table.find_object(entry.address)
        if node is not None and node.numbers is not None and node.numbers.ctime_ns is not None:
            await self._refresh(entry.address)   # its change time (TreeEditor.rename)
        if array:
            await self._now_a_view(entry, new_parent, new, link)
        if existing is not None and existing.address is not None and existing.address != entry.address:
            await self._forget_object(existing.address, left, before)

    async def _now_a_view(self, entry: Entry, parent: Node, name: bytes, link: bytes) -> None:
        """The kernel moved T's inode (its bytes) to `name`, the `.npy` view of what T became:
        the inode is that view from now on, and the kernel drops what it holds of it (its size,
        its pages) before the rename returns, so the next open of `name` reads the array. The
        name `link` (a dataset it replaced, or T itself) is looked up again."""
        node = self.ops.table.find_object(entry.address)
        if node is not None:
            old = self.ops.table.becomes_view(node)
            if old is not None:   # the view file the rename replaced
                old.gone = True
            await self.ops.invalidator.data(node)
        await self._changed(parent, name, [link])

    def _fits(self, parent: Node, text: str, entry: Entry, address: int, path: str):
        """In a worker: the dataset at `address` (`path`) when the `.npy` file T's bytes hold
        has a header, and an array that replaces that dataset's data keeping its storage
        (model/replace_like.py); else None."""
        ds, wb = self.ops.f.get(entry.address, namespace.join(parent.path, text)), self.ops.writes.wb
        try:
            end = header_end(bytes(wb.read(ds, 0, PREAMBLE)))
            header = None if end is None else parse_npy_header(bytes(wb.read(ds, 0, end)))
            target = self.ops.f.get(address, path)
            fits = header is not None and keeps_storage(target, header.dtype, header.shape)
        except (NpyHeaderError, H5fsError):   # not an array, or no dataset: the rename says why
            return None
        return target if fits else None

    async def _into(self, parent: Node, name: bytes, text: str, entry: Entry, target, new_parent: Node,
                    new: bytes, link: bytes) -> None:
        """`mv T D.npy` where T's bytes are an array that fits dataset D: they become D's data
        as `cp T D.npy` would make them (`_to_array`), D's storage, attributes and address
        kept, and T goes in the same transaction. The kernel moved T's inode to `new`: it is
        D's `.npy` view from now on (`_now_a_view`); the view's inode D had stays D's view for
        whoever holds it open."""
        before = self.ops.table.newest
        left = await self._to_array(parent, text, entry, into=target)
        numbers = await offload.run_sync(self._numbers_left, entry.address, left) if left else None
        node = self.ops.table.find_object(entry.address)
        held = None
        if node is not None:   # D's view from now on, so no longer T's to forget
            held = self.ops.table.becomes_view(node, target.address, target.path)
        await self._changed(parent, name, _other_views(name, entry))
        await self._forgotten(entry.address, left, numbers, before)
        if node is not None:
            await self.ops.invalidator.data(node)
        await self._refresh(target.address)
        if held is not None and node is not None:
            held.numbers = node.numbers
            await self.ops.invalidator.attributes(held)
            await self.ops.invalidator.data(held)
        await self._changed(new_parent, new, [link])

    def _holds_bytes(self, parent: Node, text: str, entry: Entry) -> bool:
        """Whether the dataset is a file of bytes (one-dimensional uint8), in a worker thread."""
        ds = self.ops.f.get(entry.address, namespace.join(parent.path, text))
        return not ds.sparse and ds.npy_dtype == np.uint8 and len(ds.npy_shape) == 1

    async def _to_array(self, parent: Node, text: str, entry: Entry, into=None) -> int | None:
        """The bytes of file T become its data, the array they hold as a `.npy`, stored as a
        copied-in `.npy` is (`replace_stream`): one transaction at the end, T's attributes kept
        (rsync sets them on its temporary file). Or, `into` a dataset D, D's data, stored as D
        is, T's link removed in the same transaction (returns the hard links left to T). EINVAL,
        T (D) unchanged, when they are not one whole valid `.npy`."""
        ops = self.ops
        ds = ops.f.get(entry.address, namespace.join(parent.path, text))
        stream = NpyStream(ops.table.intern(parent, entry).ino, None, "", bytearray(), replaces=into or ds,
                           keeps=into is not None, moves=None if into is None else (ops._object(parent), text))
        wb = ops.writes.wb
        try:
            size = ds.raw_size
            if size == 0:
                raise InvalidWrite(f"{ds.path}: renamed to a .npy name, but empty: no array")
            for off in range(0, size, COPY_BLOCK):
                data = await offload.run_sync(wb.read, ds, off, min(COPY_BLOCK, size - off))
                await self._stream_write(stream, off, bytes(data))
            await self._replacement_closed(stream)
        finally:
            await self.stream_release(stream)
        return stream.left

    async def link(self, node: Node, new_parent: Node, new: bytes):
        if node.kind not in (RAW, NPY, DIR) or node.address is None:
            raise FUSEError(errno.EPERM)
        link = new
        if node.kind == NPY:   # ln D.npy E.npy links the dataset as E, as mv renames it
            if not new.endswith(NPY_SUFFIX.encode()) or new == NPY_SUFFIX.encode():
                raise FUSEError(errno.EINVAL)
            link = new[:-len(NPY_SUFFIX)]
            if await self._entry(new_parent, new) is not None:
                raise FUSEError(errno.EEXIST)
        text = await self._free_name(new_parent, link)
        await self._run(self.editor.hard_link, node.address, self.ops._object(new_parent), text)
        await self._changed(new_parent, new, [link] if link != new else [])
        await self._refresh(node.address)
        return await self._lookup(new_parent, new)

    async def symlink(self, parent: Node, name: bytes, target: bytes):
        text = await self._free_name(parent, name)
        kind, where = self.link_target(parent, target)
        if kind == "external":
            await self._run(self.editor.external_link, self.ops._object(parent), text, *where)
        else:
            await self._run(self.editor.soft_link, self.ops._object(parent), text, where)
        await self._changed(parent, name, [name + NPY_SUFFIX.encode()])   # a soft link to a dataset: its .npy too
        return await self._lookup(parent, name)

    # -- new files ---------------------------------------------------------------------------
    async def create(self, parent: Node, name: bytes) -> tuple[int, pyfuse3.EntryAttributes]:
        """A new file: `x.npy` becomes dataset `x` once its header is written (`NpyStream`);
        any other name a one-dimensional uint8 dataset with an unlimited dimension holding the
        file's bytes. Returns the handle and the new entry's attributes."""
        ops = self.ops
        text = await self._free_name(parent, name)
        if text.endswith(NPY_SUFFIX) and text != NPY_SUFFIX:
            if await self._entry(parent, name[:-len(NPY_SUFFIX)]) is not None:
                raise FUSEError(errno.EEXIST)
            entry = Entry(name, NPY, namespace.join(parent.path, text), None, Numbers(1, None),
                          suffix=NPY_SUFFIX)
            node = ops.table.intern(parent, entry)
            node.lookups += 1
            stream = NpyStream(node.ino, parent, text[:-len(NPY_SUFFIX)], bytearray())
            ops.writes.paged.add(node.ino)   # the kernel keeps the pages written through it
            attrs = ops._stat(node)
            # looked up again at each use: a file closed before its header came makes no dataset,
            # and its name must go at once (the release that forgets it comes after close returns)
            attrs.entry_timeout = 0
            return ops.handles.open_file(stream), attrs
        attrs = await self._bytes_file(parent, name, text)
        node = ops.table.get(attrs.st_ino)
        return ops.handles.open_file(OpenFile(node.ino, RAW, ops._object(node), b"", 0)), attrs

    async def mknod(self, parent: Node, name: bytes) -> pyfuse3.EntryAttributes:
        """An empty regular file, made before it is opened (`tar --xattrs` extracts a file with
        attributes this way). A `.npy` name is refused: its dataset is made from the header
        written through the handle that creates it, and this one has none."""
        text = await self._free_name(parent, name)
        if text.endswith(NPY_SUFFIX):
            log.warning("%s/%s: a .npy file is made by the open that creates it (O_CREAT), not by mknod",
                        parent.path.rstrip("/"), text)
            raise FUSEError(errno.EPERM)
        return await self._bytes_file(parent, name, text)

    async def _bytes_file(self, parent: Node, name: bytes, text: str) -> pyfuse3.EntryAttributes:
        """A new empty one-dimensional uint8 dataset: a file of any other name."""
        address = await self._run(self.editor.create_dataset, self.ops._object(parent), text, np.uint8, (0,),
                                  maxshape=(None,), chunks=(self.chunk_bytes,), filters=self.filters)
        self.ops.table.gone(address)   # a node there is a freed object's whose news is on its way
        await self._changed(parent, name, [name + NPY_SUFFIX.encode()])
        attrs = await self._lookup(parent, name)
        self.ops.writes.paged.add(attrs.st_ino)
        return attrs

    def replace_stream(self, node: Node) -> NpyStream:
        """`cp y.npy D.npy` (D.npy opened with O_TRUNC, or truncated to 0 through its handle):
        the new array is streamed into a dataset of its own, which gives D its data at close
        (`stream_finish`); D stays whole until then."""
        ds = self.ops.f.get(node.address, node.path.removesuffix(NPY_SUFFIX))
        return NpyStream(node.ino, None, "", bytearray(), replaces=ds)

    def truncated(self, node: Node, state: OpenFile | NpyStream) -> NpyStream:
        """A `.npy` handle truncated to 0 (`dd of=D.npy` opens, then truncates): a new file."""
        if isinstance(state, OpenFile):
            return self.replace_stream(node)
        if state.head or state.header is not None:
            raise InvalidWrite(f"{state.what}: truncated while being written")
        return state

    async def stream_write(self, stream: NpyStream, off: int, buf: bytes) -> int:
        async with stream.lock:
            await self._stream_write(stream, off, buf)
        return len(buf)

    async def _stream_write(self, stream: NpyStream, off: int, buf: bytes) -> None:
        if stream.failed is not None:
            raise InvalidWrite(f"{stream.what}: {stream.failed}")
        if stream.header is None:   # held where it belongs until the header's bytes all came
            end = off + len(buf)
            if end > MAX_EARLY:
                self._fail(stream, InvalidWrite("a write far past the end of a .npy header not yet complete"))
            if end > len(stream.head):
                stream.head.extend(bytes(end - len(stream.head)))
            stream.head[off:end] = buf
            stream.held.add(off, end)
            whole = stream.held.prefix()
            header = None
            try:   # parsed once its bytes all came (the preamble says how many)
                need = header_end(bytes(stream.head[:min(whole, PREAMBLE)]))
                if need is not None and whole >= need:
                    header = parse_npy_header(bytes(stream.head[:need]))
            except (NpyHeaderError, H5fsError) as exc:   # a dtype HDF5 cannot hold, too: close says so
                self._fail(stream, exc)
            if header is not None:
                try:
                    await self._make(stream, header)
                except H5fsError as exc:
                    stream.failed = stream.failed or exc
                    raise
            return
        start = off - stream.header.header_length
        if start < 0:   # the header again: only its own bytes
            if bytes(buf[:-start]) != bytes(stream.head[off:stream.header.header_length]):
                self._fail(stream, InvalidWrite("a write changing the .npy header"))
            buf, start = buf[-start:], 0
        await self._body(stream, start, bytes(buf))

    def _fail(self, stream: NpyStream, exc: Exception) -> None:
        stream.failed = exc
        raise InvalidWrite(f"{stream.what}: {exc}")

    async def _make(self, stream: NpyStream, header) -> None:
        """The header is complete: the dataset is made, and the bytes after it written."""
        if header.fortran_order:
            if header.data_nbytes > fortran_body.MAX_BYTES:
                self._fail(stream, InvalidWrite(
                    f"Fortran-order .npy of {header.data_nbytes} bytes (column-major data is held until whole, "
                    f"up to {fortran_body.MAX_BYTES >> 20} MiB): save it with np.ascontiguousarray"))
            stream.fortran = fortran_body.FortranBody(header.dtype, header.shape)
        chunks, maxshape = npy_storage(header.shape, header.dtype.itemsize, self.chunk_bytes)
        storage = dict(maxshape=maxshape, chunks=chunks, filters=self.filters if chunks is not None else ())
        if stream.replaces is not None:
            address, stream.keeps = await self._run(self._unlinked, stream.replaces, header, storage, stream.keeps)
            stream.header, stream.obj = header, self.ops.f.get(address, f"{stream.replaces.path} (new data)")
        else:
            await self._make_linked(stream, header, storage)
        hl = header.header_length
        held, stream.head = stream.head, stream.head[:hl]
        for a, b in stream.held:   # the array bytes that came with or before the header
            if b > hl:
                await self._body(stream, max(a, hl) - hl, bytes(held[max(a, hl):b]))

    def _unlinked(self, ds, header, storage: dict, keep: bool) -> tuple[int, bool]:
        """In a worker: the dataset that receives an array replacing D's (`ds`) data, and
        whether it is stored as D is: when `keep` and the array fits D (model/replace_like.py),
        else it is stored as a sparse D's sections or as any copied-in array."""
        if keep and keeps_storage(ds, header.dtype, header.shape):
            return self.editor.create_unlinked_like(ds, header.shape), True
        if ds.sparse:
            storage = _sparse_like(ds, header) or storage
        return self.editor.create_unlinked_dataset(ds, header.dtype, header.shape, **storage), False

    async def _make_linked(self, stream: NpyStream, header, storage: dict) -> None:
        ops = self.ops
        address = await self._run(self.editor.create_dataset, ops._object(stream.parent), stream.name,
                                  header.dtype, header.shape, **storage)
        node = ops.table.get(stream.ino)
        stream.header, stream.obj = header, ops.f.get(address, namespace.join(stream.parent.path, stream.name))
        ops.table.gone(address)   # a node there is a freed object's whose news is on its way
        if node is not None:
            ops.table.adopt(node, address)
            node.numbers = await offload.run_sync(namespace.numbers, stream.obj)
        await self._changed(stream.parent, stream.name.encode() + NPY_SUFFIX.encode(), [stream.name.encode()])

    async def _body(self, stream: NpyStream, start: int, data: bytes) -> None:
        if start + len(data) > stream.header.data_nbytes:
            self._fail(stream, InvalidWrite("more array data than its header says"))
        if stream.fortran is not None:   # column-major: into the dataset once whole
            stream.fortran.write(start, data)
            stream.body.add(start, start + len(data))
            return
        wb = self.ops.writes.wb
        if not wb.write_now(stream.obj, start, data):
            await offload.run_sync(wb.write, stream.obj, start, data)
        stream.body.add(start, start + len(data))
        if not stream.unlinked:   # nothing shows an unlinked dataset's numbers
            self.ops.writes.touched.add(stream.obj.address)

    async def stream_finish(self, stream: NpyStream) -> None:
        """At close: a `.npy` file that is not whole (or not valid) answers EINVAL and leaves no
        dataset; a whole one replacing D's data gives it to D."""
        if stream.replaces is not None:
            await self._replacement_closed(stream)
            return
        if stream.failed is None and _incomplete(stream) and not _declared(stream):
            if not stream.head and stream.header is None:   # nothing written yet: dd closes a duplicate first
                return
            stream.failed = InvalidWrite(_cut_short(stream))
        if stream.failed is None:
            await self._fortran_whole(stream)
            await self._landed(stream)
            if stream.failed is None:
                return
        if stream.obj is not None:
            obj, stream.obj = stream.obj, None

            def unlink() -> int | None:   # unless the name went already (rm, mv), or now names another
                entry = namespace.lookup(self.ops.f, self.ops._object(stream.parent), stream.parent.path,
                                         stream.name.encode("utf-8", "surrogateescape"))
                if entry is None or entry.address != obj.address:
                    return None
                return self.editor.unlink(self.ops._object(stream.parent), stream.name)

            before = self.ops.table.newest
            left = await self._run(unlink)
            if left is None:   # removed while open: freed at release
                stream.obj = obj
            else:
                await self._changed(stream.parent, stream.name.encode() + NPY_SUFFIX.encode(), [stream.name.encode()])
                await self._forget_object(obj.address, left, before)
        if isinstance(stream.failed, OSError) and stream.failed.errno:   # ENOSPC: the close says so
            raise OSError(stream.failed.errno, f"{stream.what}: {stream.failed.strerror or stream.failed}")
        raise InvalidWrite(f"{stream.what}: {stream.failed}")

    async def _landed(self, stream: NpyStream) -> None:
        """A new array's data is written at a flush after its close. On a file system that
        might not hold what waits to be written, the close flushes first: a disk that fills up
        then fails the copy (ENOSPC at close, the dataset removed), where a later flush would
        fail with the array made and holding fill values."""
        host = await offload.run_sync(os.statvfs, os.path.dirname(os.path.abspath(self.ops.source)))
        if host.f_bavail * host.f_frsize >= 2 * self.ops.writes.wb.waiting()[0] + ROOM:
            return
        try:
            await self.ops.writes.flush()
        except OSError as exc:
            stream.failed = exc

    async def _replacement_closed(self, stream: NpyStream) -> None:
        """Every close of a descriptor flushes, and some tools close a duplicate first (dd):
        nothing written yet is no error, and an incomplete array is kept for more writes; the
        unlinked dataset goes at release (`stream_release`)."""
        if stream.failed is not None:
            raise InvalidWrite(f"{stream.what}: {stream.failed}")
        if not _incomplete(stream) or _declared(stream):
            await self._fortran_whole(stream)
            if stream.unlinked:
                await self._replace(stream)
        elif stream.head or stream.header is not None:
            raise InvalidWrite(f"{stream.what}: {_cut_short(stream)}")

    async def _fortran_whole(self, stream: NpyStream) -> None:
        """A whole Fortran-order body goes into the dataset, row-major."""
        body, stream.fortran = stream.fortran, None
        if body is None:
            return
        wb = self.ops.writes.wb

        def write_all() -> None:
            try:
                for offset, data in body.blocks():
                    wb.write(stream.obj, offset, data)
            finally:
                body.close()
        try:
            await offload.run_sync(write_all)
        except Exception as exc:
            stream.failed = exc
            raise
        if not stream.unlinked:
            self.ops.writes.touched.add(stream.obj.address)
            await self.ops.writes.changed(stream.obj.address, None)

    async def _replace(self, stream: NpyStream) -> None:
        """The new array is whole: it becomes D's data in one transaction, and the kernel forgets
        what it holds of D (pages, size: the inode stays, as after O_TRUNC on any file)."""
        ops, ds = self.ops, stream.replaces
        try:
            stream.left = await self._run(self.editor.replace_data, ds, stream.obj.address, stream.keeps,
                                          stream.moves)
        except Exception as exc:
            stream.failed = exc
            raise
        stream.obj = ds   # later writes of this handle go to D itself
        ops.writes.paged.add(stream.ino)   # the pages cp wrote
        await ops.writes.changed(ds.address, None, resized=True)

    async def stream_release(self, stream: NpyStream) -> None:
        """The file is closed for good: a replacement that never became D's data is freed; a new
        file closed with nothing written made no dataset, and the kernel forgets its name."""
        if stream.fortran is not None:
            stream.fortran.close()
            stream.fortran = None
        if stream.unlinked:
            obj, stream.obj = stream.obj, None
            await self._run(self.editor.drop_unlinked, obj.address, obj.path)
        elif stream.replaces is None and stream.obj is None:
            name = stream.name.encode("utf-8", "surrogateescape") + NPY_SUFFIX.encode()
            self.ops.invalidator.entry(stream.parent, name)

    async def create_dataset(self, parent: Node, request: bytes) -> None:
        """`h5fs create`: an empty dataset as the request (JSON) describes it."""
        try:
            r = json.loads(request)
            name, shape, dtype = r["name"], tuple(r["shape"]), np.dtype(r["dtype"])
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidWrite(f"{parent.path}: a create request that does not parse: {exc}") from None
        raw = name.encode("utf-8", "surrogateescape")
        text = await self._free_name(parent, raw)
        maxshape = None if r.get("maxshape") is None else tuple(r["maxshape"])
        chunks = None if r.get("chunks") is None else tuple(r["chunks"])
        filters = r.get("filters") or ()
        if filters == "none":
            filters = ()
        await self._run(self.editor.create_dataset, self.ops._object(parent), text, dtype, shape, maxshape=maxshape,
                        chunks=chunks, filters=filters, layout=r.get("layout"), fill=r.get("fill"))
        await self._changed(parent, raw, [raw + NPY_SUFFIX.encode()])
        self.ops.invalidator.entry(parent, raw)

    def link_target(self, parent: Node, target: bytes) -> tuple[str, object]:
        """("soft", HDF5 path) or ("external", (file name, HDF5 path)) for a symlink target:
        relative (kept relative, as HDF5 can: unless it climbs with `..`, which HDF5 paths
        cannot, and is then resolved against the link's group), absolute inside the mount, or
        `FILE:/path`; anything else cannot be an HDF5 link (EPERM)."""
        text = target.decode("utf-8", "surrogateescape")
        head, sep, tail = text.partition(":/")
        root = self.ops.mountpoint.rstrip("/")
        inside = text == root or text.startswith(root + "/")
        if sep and head and not inside:   # what readlink shows of an external link
            return "external", (head, "/" + tail)
        if text.startswith("/"):
            if not inside:
                log.warning("%s: symlink target %r lies outside the mount", parent.path, text)
                raise FUSEError(errno.EPERM)
            path = text[len(root):] or "/"
        else:
            relative = os.path.normpath(text)
            if relative != "." and relative != ".." and not relative.startswith("../"):
                return "soft", relative   # HDF5 resolves it from the link's group, wherever that moves
            path = os.path.join(parent.path, text)
        path = os.path.normpath(path)
        if path.startswith("//"):
            path = path[1:]
        if not path.startswith("/") or path.startswith("/.."):
            log.warning("%s: symlink target %r leaves the file", parent.path, text)
            raise FUSEError(errno.EPERM)
        return "soft", path

    async def setxattr(self, node: Node, name: bytes, value: bytes) -> None:
        if name == CREATE_XATTR and node.kind == DIR:
            await self.create_dataset(node, value)
            return
        if name == ATTRIBUTE_XATTR and node.kind in (RAW, NPY, DIR):
            await self.create_attribute(node, value)
            return
        attr = self._attribute_name(node, name)
        await self._run(self.editor.set_attribute, self.ops._object(node), attr, value)
        self._attributes_changed(node, attr)

    async def create_attribute(self, node: Node, request: bytes) -> None:
        """`h5fs attr --dtype`: attribute `name` made anew with a number, bool or complex dtype
        and the value (and shape) the request's text says."""
        try:
            r = json.loads(request)
            name, dtype, value = r["name"], np.dtype(r["dtype"]), r["value"].encode()
            if not isinstance(name, str):
                raise TypeError("the name is not a string")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidWrite(f"{node.path}: an attribute request that does not parse: {exc}") from None
        await self._run(self.editor.create_attribute, self.ops._object(node), name, dtype, value)
        self._attributes_changed(node, name)

    async def removexattr(self, node: Node, name: bytes) -> None:
        attr = self._attribute_name(node, name)
        if attr not in await self.ops._attributes(node):
            raise FUSEError(pyfuse3.ENOATTR)
        await self._run(self.editor.remove_attribute, self.ops._object(node), attr)
        self._attributes_changed(node, attr)

    async def touch(self, node: Node, mtime_ns: int) -> None:
        await self._run(self.editor.touch, self.ops._object(node), mtime_ns)
        await self._refresh(node.address)

    def _attribute_name(self, node: Node, name: bytes) -> str:
        if node.kind == SYMLINK:
            raise FUSEError(errno.EPERM)   # HDF5 links carry no attributes
        attr = views.attribute_name_for_xattr(name)
        if attr is None:
            # user.h5fs.* facts are read-only; other namespaces are not HDF5 attributes
            raise FUSEError(errno.EPERM if views.fact_for_xattr(name) is not None else errno.ENOTSUP)
        return attr

    # -- telling what changed -----------------------------------------------------------------
    async def _run(self, fn, *args, **kwargs):
        return await offload.run_sync(functools.partial(fn, *args, **kwargs))

    async def _changed(self, parent: Node, name: bytes, twins: list[bytes] = ()) -> None:
        """`name` in `parent` changed through the kernel (which updates its own dentry): the
        listing goes, the kernel forgets the dataset's other views `twins` it may hold, and
        the group's times are read again where it keeps them."""
        self.ops.listings.pop(parent.address)
        for address in self.ops.soft_listings:   # a soft link's target may have come or gone
            self.ops.listings.pop(address)
        self.ops.soft_listings.clear()
        self.ops.table.drop_link(parent.address, name)
        for twin in twins:   # a soft link's `.npy` symlink goes with it
            self.ops.table.drop_link(parent.address, twin)
            self.ops.invalidator.entry(parent, twin)
        if parent.numbers is not None and parent.numbers.mtime_ns is not None:
            # the edit set them (TreeEditor): stat shows them at once (the kernel asks again: it
            # drops a directory's attributes when an entry changes)
            try:
                parent.numbers = await self.ops._consistently(namespace.numbers, self.ops._object(parent))
            except Exception as exc:  # noqa: BLE001 - the edit is committed: logged, the old numbers kept, no EIO
                self.ops._mark_broken(parent, exc)

    async def _lookup(self, parent: Node, name: bytes):
        return await self.ops.lookup(parent.ino, name)

    async def _refresh(self, address: int) -> None:
        """An object's stat numbers (link count, times) changed: every inode of it asks again."""
        ops = self.ops   # the header read in the worker too: it may not be cached
        await self._show(address, await offload.run_sync(lambda: namespace.numbers(ops._by_address(address))))

    async def _show(self, address: int, numbers: Numbers) -> None:
        ops = self.ops
        for node in (ops.table.find_object(address), ops.table.find_view(address)):
            if node is not None:
                node.numbers = numbers
                await ops.invalidator.attributes(node)

    def _numbers_left(self, address: int | None, left: int | None) -> Numbers | None:
        """In a worker: the stat numbers of an object a link to went (`left`: the hard links
        the editor left it), or None when it went with it: freed with its last link, its
        header's bytes not to be read again (they may still decode, as the object it was)."""
        if address is None or not left:
            return None
        try:
            return namespace.numbers(self.ops._by_address(address))
        except Exception:  # noqa: BLE001 - a header that cannot be read: nothing to show
            return None

    async def _forget_object(self, address: int, left: int | None, before: int) -> None:
        """A link to the object went (`left`: the hard links it has now): its link count
        changed, or it is gone (`before`: the table's newest node when the edit began)."""
        numbers = await offload.run_sync(self._numbers_left, address, left) if left else None
        await self._forgotten(address, left, numbers, before)

    async def _forgotten(self, address: int, left: int | None, numbers: Numbers | None, before: int) -> None:
        """`_forget_object` with what `_numbers_left` found (in the caller's worker trip)."""
        ops = self.ops
        ops.attribute_tables.pop(address)
        for npy in (False, True):
            ops.fact_tables.pop((address, npy))
        if numbers is not None:
            await self._show(address, numbers)
        elif left == 0 and address in self.editor.orphans:   # open still: no link left, as fstat says
            node = ops.table.find_object(address) or ops.table.find_view(address)
            if node is not None and node.numbers is not None:
                await self._show(address, replace(node.numbers, nlink=0))
        elif left == 0:   # freed: an object made in its space gets inodes of its own
            ops.table.gone(address, before)

    async def closed(self, address: int | None) -> None:
        """A handle of the object at `address` was closed: freed if its links all went and
        nothing else holds it open."""
        if address in self.editor.orphans and not self.ops.handles.holds(address):
            before = self.ops.table.newest
            if await self._run(self.editor.free_orphan, address):
                self.ops.table.gone(address, before)

    def free_orphans(self) -> None:
        """At unmount (nothing is open any more): free every object whose links all went."""
        for address in list(self.editor.orphans):
            self.editor.free_orphan(address)

    def _attributes_changed(self, node: Node, attr: str) -> None:
        self.ops.attribute_tables.pop(node.address)
        self.ops.xattr_values.pop((node.address, attr))


def _incomplete(stream: NpyStream) -> bool:
    return stream.header is None or stream.body.prefix() < stream.header.data_nbytes


def _cut_short(stream: NpyStream) -> str:
    if stream.header is not None and stream.header.fortran_order and not stream.body.starts:
        return ("only the header of a Fortran-order array: a dataset's .npy view is in C order, so "
                "its data must come with it (np.save), not through a mapping (open_memmap)")
    return "truncated: the file ends before its array data does"


def _declared(stream: NpyStream) -> bool:
    """A header and no array data at all, what `np.lib.format.open_memmap(mode="w+")` writes and
    closes before it maps the file (its pages then fill the data): a dataset of fill values, as
    h5py's `create_dataset` without data. Only when the dataset's `.npy` view shows that very
    header, so that a mapping at its length lands on the dataset's elements (a Fortran-order
    header does not: its data would come transposed). Data cut short stays an error."""
    obj = stream.obj
    if stream.header is None or stream.body.starts or obj is None:
        return False
    return bytes(stream.head) == namespace.npy_header(obj.npy_dtype, obj.npy_shape)


def _sparse_like(ds, header) -> dict | None:
    """Storage for an array replacing sparse dataset `ds`'s data: sparse as `ds` is (its chunks,
    section filters and fill value), when the array has its rank and dtype and fits its chunks;
    None otherwise (the array is stored as any copied-in one)."""
    shape = header.shape
    if len(shape) != len(ds.shape) or header.dtype != ds.npy_element_dtype or not shape:
        return None
    maxshape = ds.maxshape
    if any(m is not None and d > m for d, m in zip(shape, maxshape)):
        maxshape = (None, *shape[1:])
    if any(m is not None and c > m for c, m in zip(ds.chunks, maxshape)):
        return None
    fill = ds.fill_value
    return dict(layout="sparse", chunks=ds.chunks, maxshape=maxshape, filters=ds.message(M.FILTERS) or "",
                fill=None if fill is None else np.frombuffer(fill, header.dtype)[0])


def _array_name(name: bytes) -> bool:
    """A file name that names an array's `.npy` view (`x.npy`, not a sparse dataset's points)."""
    return name.endswith(NPY_SUFFIX.encode()) and not name.endswith(POINTS_SUFFIX.encode()) \
        and name != NPY_SUFFIX.encode()


def _base(name: bytes, entry: namespace.Entry) -> bytes:
    """The link name behind a view's file name (`D` for `D.npy` and `D.points.npy`, soft link
    `L` for the symlink `L.npy`)."""
    return name[:-len(entry.suffix)] if entry.suffix else name


def _other_views(name: bytes, entry: namespace.Entry) -> list[bytes]:
    """The names of a dataset's other views (`D.npy` for `D`, `D` for `D.npy`, and a sparse
    dataset's `D.points.npy`); a soft link's and its `.npy` symlink's, each other's (an external
    link has none)."""
    if entry.kind not in (RAW, NPY, POINTS, SYMLINK) or (entry.kind == SYMLINK and entry.soft_target is None):
        return []
    base = _base(name, entry)
    views = [base, base + NPY_SUFFIX.encode()]
    if entry.numbers is not None and entry.numbers.sparse:
        views.append(base + POINTS_SUFFIX.encode())
    return [v for v in views if v != name]
