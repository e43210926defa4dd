"""External storage: a contiguous dataset whose bytes live in other files (External Data Files
message, IV.A.2.h), concatenated slot after slot.

Choices (libhdf5's H5D__efl_read / H5D__efl_readvv is the reference):
- Names come from the local heap at the message's heap address. An absolute name is used as is.
  A relative name is resolved against the directory of the HDF5 file. (libhdf5 resolves it
  against the "external file prefix": H5Pset_efile_prefix or the HDF5_EXTFILE_PREFIX variable,
  and with neither, against the *current directory* of the reading process. A daemon's current
  directory means nothing to the user, so we use the file's directory, which is what
  efile_prefix="${ORIGIN}" asks libhdf5 for. The environment variable is not consulted.)
- A remote HDF5 file's names are objects beside it, fetched with its options and pinned for as
  long as it is open (storage/remote/siblings.py); an absolute name, a local path, is refused
  with FormatError (EIO) naming it. A missing object (404) is a missing file.
- A slot size of all ones (H5F_UNLIMITED) means "to the end"; it may only be the last slot.
- A missing or unopenable external file: FormatError (EIO) naming the file, as libhdf5 errors
  ("unable to open external raw data file"). We never invent data for a file we cannot see.
- A file shorter than its slot: the missing tail reads as zero bytes -- exactly what libhdf5 does
  (it memsets the unread part of a short read() to 0; it does not use the fill value).
- Slots that together hold fewer bytes than the dataset: FormatError when the source is built
  (libhdf5 refuses to create such a dataset, and errors when reading past the slots).
- Files are opened read-only on first use as byte sources and kept (thread-safe): a local file's
  fd by the dataset's source, a remote file's objects by the file; `allocated()` is 0: none of
  the data lives inside the .h5 file.

Writing (`external_write`, libhdf5's H5D__efl_write is the reference) changes the external files
in place, the way libhdf5 does; the .h5 file is not touched (a remote file's are never written):
- A file shorter than its slot is extended by the write (the gap reads as zeros, as before).
- A missing file is not created (libhdf5 would create it): reads of it answer EIO, and a write
  that made it appear would turn those errors into zeros nobody wrote. The write answers EIO too.
- A file that exists but cannot be opened for writing (permissions, read-only filesystem,
  immutable): ReadOnly (EROFS) naming it. Every file a write needs is opened before any byte is
  written, so a refused write changes nothing.
- Bytes past the last slot: TooLarge (EFBIG); nothing is written.
- Writable fds are kept per open HDF5 file in a bounded LRU (MAX_WRITERS); files written since
  the last `external_sync_all(f)` are fsynced by it; `external_close_all(f)` syncs and closes.
"""

from __future__ import annotations

import errno
import os
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass

from ..errors import FormatError, ReadOnly, TooLarge
from ..storage.blockio import open_regular
from ..storage.byte_source import ByteSource, LocalSource
from ..storage import local_heap
from ..storage.remote.client import RemoteError
from ..storage.remote.siblings import Siblings
from ..storage.source_registry import EXTERNAL, SourceContext, register_source
from ..storage.sources import RawSource
from . import messages as M

MAX_WRITERS = 64               # writable external fds kept open per HDF5 file

@dataclass(frozen=True)
class Extent:
    path: str          # resolved path of the external file (a URL for a remote HDF5 file)
    name: str          # the name as stored in the HDF5 file
    file_offset: int   # where the slot starts in the external file
    start: int         # where the slot starts in the dataset's bytes
    size: int          # bytes of the dataset this slot holds (clipped to the dataset)


class ExternalOpenError(FormatError):
    """An external data file could not be opened (missing, unreadable)."""


def resolve_name(name: str, f) -> str:
    """Where an external file name of H5File `f` points: for a local file, an absolute name as
    is, a relative one in the file's directory; for a remote file, the sibling object."""
    if f.siblings is not None:
        return f.siblings.resolve(name)
    if os.path.isabs(name):
        return name
    return os.path.join(os.path.dirname(os.path.abspath(f.path)), name)


class ExternalSource(RawSource):
    def __init__(self, size: int, extents: list[Extent], what: str, siblings: Siblings | None = None):
        super().__init__(size)
        self.extents = extents
        self.what = what
        self.siblings = siblings    # a remote file's objects: shared, closed with the file
        self._sources: dict[str, ByteSource] = {}
        self._lock = threading.Lock()

    def _source(self, ext: Extent) -> ByteSource:
        src = self._sources.get(ext.path)
        if src is not None:
            return src
        try:
            src = (self.siblings.open(ext.path) if self.siblings is not None
                   else LocalSource(open_regular(ext.path), ext.path))
        except OSError as e:
            raise ExternalOpenError(f"{self.what}: external data file {ext.name!r} ({ext.path}): "
                                    f"{e.strerror or e}") from e
        except RemoteError as e:   # its kind kept: a network fault is tried again, a 404 is not
            raise type(e)(f"{self.what}: external data file {ext.name!r}: {e}") from e
        with self._lock:
            old = self._sources.get(ext.path)
            if old is not None:
                if self.siblings is None:
                    src.close()
                return old
            self._sources[ext.path] = src
            return src

    def read(self, offset: int, size: int) -> bytes:
        offset, size = self.clip(offset, size)
        if size == 0:
            return b""
        end = offset + size
        if self.siblings is not None:   # the objects this read needs, opened together
            self.siblings.open_all([e.path for e in self.extents if e.path not in self._sources
                                    and e.start < end and offset < e.start + e.size])
        parts = []
        for ext in self.extents:
            lo, hi = max(offset, ext.start), min(end, ext.start + ext.size)
            if lo >= hi:
                continue
            want = hi - lo
            src = self._source(ext)
            pos = ext.file_offset + (lo - ext.start)
            got = []
            have = 0
            while have < want:
                try:
                    chunk = src.pread(want - have, pos + have)
                except OSError as e:
                    raise FormatError(f"{self.what}: reading external data file {ext.name!r}: "
                                      f"{e.strerror or e}") from e
                except RemoteError as e:
                    raise type(e)(f"{self.what}: reading external data file {ext.name!r}: {e}") from e
                if not chunk:
                    break
                got.append(chunk)
                have += len(chunk)
            if have < want:                  # short file: libhdf5 reads zeros past its end
                got.append(bytes(want - have))
            parts.append(b"".join(got))
        data = b"".join(parts)
        if len(data) != size:   # cannot happen when the slots cover the dataset (checked at build)
            raise FormatError(f"{self.what}: external storage covers {len(data)} of {size} bytes requested")
        return data

    def allocated(self) -> int:
        return 0

    def footprint(self) -> int:
        return 512 + 400 * len(self.extents)

    def close(self) -> None:
        with self._lock:
            sources, self._sources = self._sources, {}
        if self.siblings is None:
            for src in sources.values():
                try:
                    src.close()
                except OSError:
                    pass

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _extents(ds, size: int) -> tuple[list[Extent], int]:
    """The slots of `ds`'s External Data Files message, resolved and clipped to `size` bytes,
    and how many of those bytes they hold."""
    efl = ds.message(M.EXTERNAL)
    if efl is None:
        raise FormatError(f"{ds.path}: no external data files message")
    if not efl.slots:
        return [], 0
    heap = local_heap.read(ds.file.reader, efl.heap_address, f"{ds.path}: external file list")
    unlimited = (1 << (8 * ds.file.sizes.length)) - 1
    out: list[Extent] = []
    start = 0
    for i, slot in enumerate(efl.slots):
        raw = heap.string(slot.name_offset)
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            name = os.fsdecode(raw)
        if not name:
            raise FormatError(f"{ds.path}: external file slot {i} has an empty name")
        if slot.size == unlimited:
            if i != len(efl.slots) - 1:
                raise FormatError(f"{ds.path}: unlimited external file slot {i} is not the last")
            length = max(0, size - start)
        else:
            length = slot.size
        take = min(length, max(0, size - start))
        if take > 0:
            try:
                path = resolve_name(name, ds.file)
            except FormatError as e:
                raise type(e)(f"{ds.path}: external file slot {i}: {e}") from e
            out.append(Extent(path, name, slot.file_offset, start, take))
        start += length
    return out, sum(e.size for e in out)


def external_extents(ds, size: int) -> list[Extent]:
    """The slots of `ds`'s External Data Files message, resolved and clipped to `size` bytes."""
    out, covered = _extents(ds, size)
    if covered < size:
        raise FormatError(f"{ds.path}: external files hold {covered} bytes, the dataset needs {size}")
    return out


def external_source(ctx: SourceContext) -> RawSource:
    """The RawSource for a contiguous dataset stored in external files."""
    ds, size = ctx.data, ctx.size
    return ExternalSource(size, external_extents(ds, size), ds.path, ds.file.siblings)


register_source(EXTERNAL, external_source)


def external_facts(ds) -> dict[str, str]:
    """Readable facts naming the external files, e.g. {"external": "raw1.bin[0:400]; raw2.bin[0:]"}."""
    efl = ds.message(M.EXTERNAL)
    if efl is None:
        return {}
    heap = local_heap.read(ds.file.reader, efl.heap_address, f"{ds.path}: external file list")
    unlimited = (1 << (8 * ds.file.sizes.length)) - 1
    items = []
    for slot in efl.slots:
        name = heap.string(slot.name_offset).decode("utf-8", "replace")
        end = "" if slot.size == unlimited else str(slot.file_offset + slot.size)
        items.append(f"{name}[{slot.file_offset}:{end}]")
    return {"external": "; ".join(items)}


# ------------------------------------------------------------------------------- writing

class _Writers:
    """Writable fds of one HDF5 file's external files (bounded LRU) and the paths written since
    the last sync (an fd evicted before the sync is reopened to fsync its file)."""

    def __init__(self):
        self._fds: OrderedDict[str, int] = OrderedDict()
        self._dirty: set[str] = set()
        self._lock = threading.Lock()

    def _fd(self, ext: Extent, what: str) -> int:
        """The writable fd of `ext`'s file (the lock held)."""
        fd = self._fds.get(ext.path)
        if fd is not None:
            self._fds.move_to_end(ext.path)
            return fd
        try:
            fd = open_regular(ext.path, writable=True, create=True)   # libhdf5 creates it too
        except OSError as e:
            text = f"{what}: external data file {ext.name!r} ({ext.path}): {e.strerror or e}"
            if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ETXTBSY):
                raise ReadOnly(f"{text}: cannot be written") from e
            raise ExternalOpenError(text) from e
        self._fds[ext.path] = fd
        while len(self._fds) > MAX_WRITERS:
            os.close(self._fds.popitem(last=False)[1])
        return fd

    def open(self, extents: list[Extent], what: str) -> None:
        """Open every file of `extents` for writing (or raise before anything is written)."""
        with self._lock:
            for ext in extents:
                self._fd(ext, what)

    def pwrite(self, ext: Extent, position: int, data: memoryview, what: str) -> None:
        with self._lock:
            fd = self._fd(ext, what)
            self._dirty.add(ext.path)
            while data:
                n = os.pwrite(fd, data, position)
                position += n
                data = data[n:]

    def sync(self) -> None:
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            for path in sorted(dirty):
                fd = self._fds.get(path)
                if fd is not None:
                    os.fsync(fd)
                    continue
                fd = open_regular(path)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    def close(self) -> None:
        with self._lock:
            fds, self._fds = list(self._fds.values()), OrderedDict()
        for fd in fds:
            os.close(fd)


_writers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # H5File -> _Writers
_writers_lock = threading.Lock()


def _file_writers(f) -> _Writers:
    with _writers_lock:
        w = _writers.get(f)
        if w is None:
            w = _writers[f] = _Writers()
            weakref.finalize(f, w.close)
        return w


def external_write(ds, offset: int, data: bytes) -> None:
    """Write `data` at byte `offset` of the raw view of `ds` (contiguous, stored in external
    files) into those files, in place."""
    if ds.file.remote is not None:   # a remote file's names must never become local writes
        raise ReadOnly(f"{ds.path}: {ds.file.path} is a remote object, read-only")
    if not data:
        return
    end = offset + len(data)
    source = ds.source
    if isinstance(source, ExternalSource) and end <= source.size:
        extents = source.extents
    else:
        extents, covered = _extents(ds, end)
        if covered < end:
            raise TooLarge(f"{ds.path}: writing bytes {offset}..{end} past the {covered} bytes its "
                           f"external data files hold")
    pieces = [(ext, max(offset, ext.start), min(end, ext.start + ext.size)) for ext in extents]
    pieces = [p for p in pieces if p[1] < p[2]]
    w = _file_writers(ds.file)
    w.open([ext for ext, _, _ in pieces], ds.path)
    view = memoryview(data)
    for ext, lo, hi in pieces:
        w.pwrite(ext, ext.file_offset + lo - ext.start, view[lo - offset:hi - offset], ds.path)


def external_sync_all(f) -> None:
    """fsync every external data file written through `f` (an H5File) since the last call."""
    with _writers_lock:
        w = _writers.get(f)
    if w is not None:
        w.sync()


def external_close_all(f) -> None:
    """Sync, then close every writable external fd `f` (an H5File) holds."""
    with _writers_lock:
        w = _writers.pop(f, None)
    if w is not None:
        w.sync()
        w.close()


__all__ = ["ExternalSource", "ExternalOpenError", "external_source", "external_extents", "external_facts",
           "resolve_name", "external_write", "external_sync_all", "external_close_all"]
