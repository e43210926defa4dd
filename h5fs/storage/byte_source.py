"""Where a file's bytes come from: the one interface every read of an HDF5 file goes through.

A local file keeps the kernel's fast paths (`pread`, `preadv`, `RWF_NOWAIT` against the page
cache) and its fd for the write side; a remote object (storage/remote) serves aligned blocks from
a block cache and fetches what is missing. Callers use two calls:
- `pread(size, position)`: bytes, short only at the end of the file;
- `preadv(buffers, position, flags)`: fills the buffers, returns the bytes read. With
  `flags=RWF_NOWAIT` it never waits for a disk or a network: BlockingIOError when it would
  (callers then move the read to a worker thread).
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from functools import partial
from typing import Any, Callable, Iterator, Sequence

NOWAIT = getattr(os, "RWF_NOWAIT", 0)
URL_SCHEMES = ("s3://", "http://", "https://")


class WouldBlock(BaseException):
    """Raised on the event loop's thread by a read that would wait for a network: the FUSE
    boundary runs `wait` in a worker thread, then answers the request again. A BaseException,
    so that no handler's `except Exception` takes it for a broken object."""

    def __init__(self, wait: Callable[[], None]):
        super().__init__("the read needs bytes not fetched yet")
        self.wait = wait


_loop = threading.local()


def mark_event_loop_thread() -> None:
    """The calling thread must never wait for a network (the daemon's trio thread)."""
    _loop.marked = True


def on_event_loop_thread() -> bool:
    return getattr(_loop, "marked", False)


@contextmanager
def inline() -> Iterator[None]:
    """The calling thread runs work in place of a worker (fuse/offload.py `run_unless_busy`):
    work that may take long raises WouldBlock and is sent to a worker from its start."""
    before = getattr(_loop, "inline", False)
    _loop.inline = True
    try:
        yield
    finally:
        _loop.inline = before


def running_inline() -> bool:
    return getattr(_loop, "inline", False)


def is_url(name: str) -> bool:
    """Whether `name` names a remote object rather than a local path."""
    return name.lower().startswith(URL_SCHEMES)


class ByteSource:
    """Bytes of one file or object (the base class: what every source offers)."""

    name: str         # the path or URL, as errors and logs name it
    size: int         # bytes in the file when it was opened (a local file may grow: `end`)
    fd: int = -1      # a local file's descriptor (the write side uses it); -1 for a remote object

    def pread(self, size: int, position: int) -> bytes:
        raise NotImplementedError

    def preadv(self, buffers: Sequence[Any], position: int, flags: int = 0) -> int:
        raise NotImplementedError

    def end(self) -> int:
        """Where the bytes end now."""
        return self.size

    remote = False    # reads may wait for a network (worth announcing with `want`)

    def want(self, spans: Sequence[tuple[int, int]], wait: bool = True) -> None:
        """Get ready to read these (position, size) spans soon (a remote object fetches them
        all at once, in parallel, returning when they are here, or at once without `wait`; a
        local file has nothing to do)."""

    def owner_and_times(self) -> tuple[int, int, int, int]:
        """(uid, gid, mtime_ns, ctime_ns) the mount shows by default."""
        raise NotImplementedError

    def stats(self) -> dict[str, Any] | None:
        """What `h5fs status` shows about this source (None: nothing to show)."""
        return None

    def stop(self) -> None:
        """The mount is going: give up waiting (a remote object's reads stop retrying)."""

    def close(self) -> None:
        pass


class LocalSource(ByteSource):
    """A local file: the kernel's calls bound to its fd (no wrapper in the read path)."""

    def __init__(self, fd: int, name: str = ""):
        self.fd, self.name = fd, name
        self.size = os.fstat(fd).st_size
        self.pread = partial(os.pread, fd)      # type: ignore[method-assign]
        self.preadv = partial(os.preadv, fd)    # type: ignore[method-assign]

    def end(self) -> int:
        return os.fstat(self.fd).st_size

    def owner_and_times(self) -> tuple[int, int, int, int]:
        st = os.fstat(self.fd)
        return st.st_uid, st.st_gid, st.st_mtime_ns, st.st_ctime_ns

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def as_source(fd_or_source: int | ByteSource) -> ByteSource:
    return LocalSource(fd_or_source) if isinstance(fd_or_source, int) else fd_or_source
