"""Files arriving through the mount as arrays: a new `x.npy` made into dataset `x` as its header
and body stream in (or replacing D's data, keeping D's storage when the array fits it:
model/replace_like.py), any other new file a dataset of its bytes, and a file of bytes renamed
to `x.npy` (rsync, atomic saves) stored as the array it holds. The namespace side of each
(names, links, what the kernel is told) is EditSide's (fuse/edits.py), whose base this is.
"""

from __future__ import annotations

import errno
import logging
import os

import numpy as np
import pyfuse3
from pyfuse3 import FUSEError

from ..errors import H5fsError, InvalidWrite
from ..model import fortran_body
from ..model import messages as M
from ..model import namespace
from ..model.dataset_create import npy_storage
from ..model.namespace import NPY, NPY_SUFFIX, RAW, Entry, Numbers
from ..model.npy_header import PREAMBLE, NpyHeaderError, header_end, parse_npy_header
from ..model.replace_like import keeps_storage
from . import offload
from .handles import NpyStream, OpenFile
from .inodes import Node

log = logging.getLogger("h5fs.fuse")

ROOM = 64 << 20   # free space below this (plus twice the data waiting) makes a new array's close flush
COPY_BLOCK = 1 << 20   # a file of bytes renamed to x.npy is read this much at a time into its array
MAX_EARLY = 64 << 20   # how far into a .npy bytes are held while its header is incomplete (writeback_cache)


class NpyArrivals:
    """EditSide's handling of arrays arriving (its `ops`, `editor`, `filters`, `chunk_bytes` and
    the namespace helpers `_run`, `_quick`, `_changed`, `_lookup`, `_free_name`, `_forgotten` are
    used). Making a dataset allocates nothing (a small edit: `_quick`); its data is written through
    the writeback."""

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
        await self._changed(parent, name, namespace.other_views(name, entry))
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
        address = await self._quick(self.editor.create_dataset, self.ops._object(parent), text, np.uint8, (0,),
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
        address = await self._quick(self.editor.create_dataset, ops._object(stream.parent), stream.name,
                                    header.dtype, header.shape, **storage)
        node = ops.table.get(stream.ino)
        stream.header, stream.obj = header, ops.f.get(address, namespace.join(stream.parent.path, stream.name))
        ops.table.gone(address)   # a node there is a freed object's whose news is on its way
        if node is not None:
            ops.table.adopt(node, address)
            node.numbers = await ops._quickly(namespace.numbers, stream.obj)
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
        # one system call on the file's own file system, which the trio thread reads anyway
        host = os.statvfs(os.path.dirname(os.path.abspath(self.ops.source)))
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
