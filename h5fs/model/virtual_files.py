"""The source files of virtual datasets: where a mapping's file name points (local paths,
HDF5_VDS_PREFIX, the objects beside a remote file; printf-style names) and the pool of open
source files every virtual dataset shares (model/virtual.py's docstring says how each is found
and kept)."""

from __future__ import annotations

import os
import posixpath
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from ..errors import FormatError, H5fsError
from ..storage.byte_source import WouldBlock, on_event_loop_thread
from ..storage.remote import RemoteOptions
from ..storage.remote.client import RemoteError, RemoteNotFound
from ..storage.remote.siblings import canonical, sibling_url
from ..storage.unfiltered_read import Miss

POOL_SIZE = 64                 # source files kept open
# How the pool opens a source file (H5File.open): given by its users, as the file module reaches
# this one (through Dataset and the virtual dataset's source)
OpenFile = Callable[..., Any]


def _identity(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class PoolEntry:
    def __init__(self, file, ident):
        self.file = file        # None: a remote object known to be missing
        self.ident = ident
        self.users = 0
        self.evicted = False
        self.datasets: dict[str, object] = {}


class _Pool:
    """Open source files, shared by every virtual dataset; bounded LRU, closed when unused."""

    def __init__(self, size: int):
        self.size = size
        self._entries: OrderedDict[object, PoolEntry] = OrderedDict()
        self._lock = threading.Lock()
        self._opening: dict[tuple, threading.Lock] = {}   # one open per remote key (see _acquire_remote)
        self._pinned: dict[tuple, str | None] = {}   # remote key -> version first seen (None: missing)

    def acquire(self, path: str, open_file: OpenFile, opened_only: bool = False,
                remote: RemoteOptions | None = None) -> PoolEntry | None:
        """The open file at `path` (its use count raised), or None when there is no such file
        (`open_file` opens it; `opened_only`: Miss rather than open it, for a read that must not
        wait); `remote`: the options `path`, a URL, is fetched with."""
        if remote is not None:
            return self._acquire_remote(path, remote, opened_only, open_file)
        # a file replaced, changed or removed since it was opened is opened again (or missing);
        # files are told apart by device and inode (every name of one file shares its entry)
        try:
            ident = _identity(os.stat(path))
        except (FileNotFoundError, NotADirectoryError):
            ident = None
        except OSError as exc:
            raise FormatError(f"virtual dataset source file {path}: {exc.strerror or exc}") from exc
        key = path if ident is None else ident[:2]
        stale = None
        with self._lock:
            e = self._entries.get(key)
            if e is not None:
                if e.ident == ident:
                    self._entries.move_to_end(key)
                    e.users += 1
                    return e
                del self._entries[key]
                e.evicted = True
                if e.users == 0:
                    stale = e.file
        if stale is not None:
            stale.close()
        if ident is None:
            return None
        if opened_only:
            raise Miss
        try:
            f = open_file(os.path.realpath(path))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise FormatError(f"virtual dataset source file {path}: {exc.strerror or exc}") from exc
        except H5fsError as exc:
            raise FormatError(f"virtual dataset source file {path}: {exc}") from exc
        return self._insert(key, f, ident)

    def _acquire_remote(self, url: str, options: RemoteOptions, opened_only: bool,
                        open_file: OpenFile) -> PoolEntry | None:
        """A remote source file, keyed by its URL (and options) rather than a stat: while in the
        pool it is the version pinned when it was opened (checking for a newer one would cost a
        request per read; a changed object answers EIO from its conditional reads instead). A
        missing object (404) is remembered as missing: a hole in the mapping costs one request
        per mount, not one per read. An object opened again after eviction must still be the
        version first seen (or still missing): a mount never serves two versions of a source.
        One open per URL at a time (its block cache entry is locked by one user); on the event
        loop's thread, which never waits for a network, a worker opens it (WouldBlock)."""
        key = ("remote", canonical(url), options)
        found = self._lookup(key)
        if found is not None or opened_only:
            return self._found(found, opened_only)
        if on_event_loop_thread():
            raise WouldBlock(lambda: self._open_remote(key, url, options, open_file, keep=False))
        return self._open_remote(key, url, options, open_file, keep=True)

    def _open_remote(self, key, url: str, options: RemoteOptions, open_file: OpenFile, keep: bool) -> PoolEntry | None:
        """Open the remote file under `key` unless another thread did; its entry (used once
        when `keep`, else not used: for the request answered again once it is open)."""
        with self._lock:
            opening = self._opening.setdefault(key, threading.Lock())
        with opening:
            found = self._lookup(key)
            if found is not None:
                e = self._found(found, False)
            else:
                try:
                    f = open_file(url, remote=options)
                except RemoteNotFound:
                    f = None
                except RemoteError as exc:    # a network fault stays one (transient): tried again next time
                    raise type(exc)(f"virtual dataset source file: {exc}") from exc
                except H5fsError as exc:
                    raise FormatError(f"virtual dataset source file {url}: {exc}") from exc
                ident = None if f is None else f.source.client.version.key()
                first = self._pinned.setdefault(key, ident)
                if first != ident:
                    if f is not None:
                        f.close()
                    raise FormatError(f"virtual dataset source file {url} changed since this process first read "
                                      f"it ({'missing' if first is None else 'version ' + first} then, "
                                      f"{'missing' if ident is None else 'version ' + ident} now): remount to "
                                      f"read it")
                e = self._insert(key, f, ident)
        if e is not None and not keep:
            self.release(e)
        return e

    def open_all(self, urls: list[str], options: RemoteOptions, open_file: OpenFile) -> None:
        """Open these remote files together, `requests` at a time (each open costs round trips),
        and leave them in the pool unused. A failure is left for the read's own open to report,
        with the mapping that needed the file."""
        with self._lock:
            todo = {k: u for k, u in ((("remote", canonical(u), options), u) for u in urls)
                    if k not in self._entries}
        if len(todo) < 2:
            return
        if on_event_loop_thread():
            raise WouldBlock(lambda: self.open_all(urls, options, open_file))
        with ThreadPoolExecutor(min(len(todo), options.requests), thread_name_prefix="h5fs-open") as pool:
            for fut in [pool.submit(self._open_remote, k, u, options, open_file, False) for k, u in todo.items()]:
                try:
                    fut.result()
                except H5fsError:
                    pass

    def _lookup(self, key) -> PoolEntry | None:
        """The entry under `key` (its use count raised unless it stands for a missing object)."""
        with self._lock:
            e = self._entries.get(key)
            if e is not None:
                self._entries.move_to_end(key)
                if e.file is not None:
                    e.users += 1
            return e

    @staticmethod
    def _found(e: PoolEntry | None, opened_only: bool) -> PoolEntry | None:
        if e is None and opened_only:
            raise Miss
        return None if e is None or e.file is None else e

    def _insert(self, key, f, ident) -> PoolEntry | None:
        """Keep the file `f` just opened (None: missing) under `key`; its entry, used once."""
        close = []
        with self._lock:
            e = self._entries.get(key)
            if e is not None and e.ident == ident:     # another thread opened it meanwhile
                if f is not None:
                    close.append(f)
            else:
                if e is not None:
                    e.evicted = True
                    if e.users == 0 and e.file is not None:
                        close.append(e.file)
                e = self._entries[key] = PoolEntry(f, ident)
            if e.file is not None:
                e.users += 1
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                _, old = self._entries.popitem(last=False)
                old.evicted = True
                if old.users == 0 and old.file is not None:
                    close.append(old.file)
        for x in close:
            x.close()
        return e if e.file is not None else None

    def remote_files(self) -> list:
        """The remote source files open now."""
        with self._lock:
            return [e.file for key, e in self._entries.items() if key[0] == "remote" and e.file is not None]

    def release(self, e: PoolEntry) -> None:
        with self._lock:
            e.users -= 1
            done = e.evicted and e.users == 0
        if done:
            e.file.close()

    def clear(self) -> None:
        with self._lock:
            entries, self._entries = list(self._entries.values()), OrderedDict()
            self._pinned.clear()
            self._opening.clear()
            for e in entries:
                e.evicted = True
            idle = [e for e in entries if e.users == 0 and e.file is not None]
        for e in idle:
            e.file.close()


POOL = _Pool(POOL_SIZE)


def substitute(name: str, block: int | None) -> str:
    """A source name with "%b" replaced by the block number and "%%" by "%" (H5Dvirtual.c)."""
    if "%" not in name:
        return name
    out, i = [], 0
    while i < len(name):
        ch = name[i]
        if ch == "%" and i + 1 < len(name) and name[i + 1] in "b%":
            if name[i + 1] == "b":
                if block is None:
                    raise FormatError(f"source name {name!r}: %b in a mapping that is not printf-style")
                out.append(str(block))
            else:
                out.append("%")
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def has_printf(name: str) -> bool:
    return "%b" in name.replace("%%", "")


def source_candidates(name: str, vds_path: str) -> list[str]:
    """Paths tried for a source file name, in order (see the module docstring)."""
    origin = os.path.dirname(os.path.abspath(vds_path))
    out = []
    if os.path.isabs(name):
        out.append(name)
        rel = os.path.basename(name)
    else:
        rel = name
    env = os.environ.get("HDF5_VDS_PREFIX")
    if env:
        for p in env.split(":"):
            if p:
                out.append(os.path.join(p.replace("${ORIGIN}", origin), rel))
    out.append(os.path.join(origin, rel))
    return out


def remote_source_candidates(name: str, url: str) -> list[str]:
    """URLs tried for a source file name of the remote virtual dataset at `url`: the object
    beside it (HDF5_VDS_PREFIX names local directories: not applied). An absolute name is a local
    path, never opened (storage/remote/siblings.py); its base name is tried beside the file, as
    libhdf5 tries a missing absolute name's base name in the file's directory."""
    if name.startswith("/"):
        base = posixpath.basename(name)
        return [sibling_url(url, base)] if base else []
    return [sibling_url(url, name)]
