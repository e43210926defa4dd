"""Objects a remote HDF5 file names beside itself (external raw data files, virtual datasets'
source files): where a name points, and the external files of one remote file, opened once.

A relative name is the sibling object: for http(s) the name joined to the URL's directory
(`urllib.parse.urljoin`, the name percent-encoded so that characters like "#", "?" or ":" stay
part of it); for s3 the same key prefix in the same bucket ("." and ".." segments resolved as
directories are; a name leading out of the bucket is refused). Siblings are fetched with the
file's own RemoteOptions (endpoint, credentials, block cache).

An absolute name is a path on the machine that wrote the file. It is never opened: a mount of
a URL must not read a local file because a remote object says so, or whoever can publish an
object could have the daemon (often root) serve any local file as a dataset's bytes.
"""

from __future__ import annotations

import posixpath
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote, unquote, urljoin, urlsplit

from ...errors import FormatError, H5fsError
from ..byte_source import WouldBlock, on_event_loop_thread
from .client import RemoteNotFound
from .options import RemoteOptions
from .source import RemoteSource, open_remote


class LocalPathRefused(FormatError):
    """A remote file names an absolute local path (see the module docstring)."""


def sibling_url(url: str, name: str) -> str:
    """The URL of the object `name` points to, named by the remote file at `url`."""
    if name.startswith("/"):   # also "//host/...", which urljoin would take to another host
        raise LocalPathRefused(f"{name!r}: an absolute local path named by the remote object {url} is not "
                               f"opened (a remote file may only name objects beside it, by relative names)")
    parts = urlsplit(url)
    if parts.scheme.lower() != "s3":
        return urljoin(url, quote(name, safe="/"))
    key = posixpath.normpath(posixpath.join(posixpath.dirname(unquote(parts.path.lstrip("/"))), name))
    if key == ".." or key.startswith("../"):
        raise FormatError(f"{name!r}: named by {url}, it leads out of bucket {parts.netloc}")
    return f"s3://{parts.netloc}/{quote(key, safe='/')}"


def canonical(url: str) -> str:
    """`url` in one spelling per object: scheme and host lower case, the path decoded, no query."""
    p = urlsplit(url)
    return f"{p.scheme.lower()}://{p.netloc.lower()}{unquote(p.path)}"


def same_object(a: str, b: str) -> bool:
    return canonical(a) == canonical(b)


class Siblings:
    """The external data files of one remote file: each opened once, on first use, with the
    file's options, and pinned to the version seen then for as long as the file is open (a
    rebuilt dataset source finds the same object, never a newer version); closed with the file."""

    def __init__(self, url: str, options: RemoteOptions):
        self.url, self.options = url, options
        self._sources: dict[str, RemoteSource] = {}
        self._missing: dict[str, RemoteNotFound] = {}   # objects that answered 404
        self._opening: dict[str, threading.Lock] = {}   # one open per URL (its block cache entry
        self._lock = threading.Lock()                   # takes an exclusive lock); guards both dicts
        self._closed = False

    def resolve(self, name: str) -> str:
        return sibling_url(self.url, name)

    def open(self, url: str) -> RemoteSource:
        """The source of `url` (RemoteError when it cannot be opened: RemoteNotFound for a 404).
        Opening fetches: on the event loop's thread a worker opens it (WouldBlock)."""
        src = self._sources.get(url)
        if src is not None:
            return src
        missing = self._missing.get(url)
        if missing is not None:   # asked once: a 404 is an answer, not a fault to retry per read
            raise missing
        if on_event_loop_thread():
            raise WouldBlock(lambda: self.open(url))
        with self._lock:
            opening = self._opening.setdefault(url, threading.Lock())
        with opening:
            src = self._sources.get(url)
            if src is None:
                try:
                    src = open_remote(url, self.options)
                except RemoteNotFound as e:
                    self._missing[url] = e
                    raise
                with self._lock:
                    if self._closed:
                        src.close()
                        raise FormatError(f"{url}: {self.url} is closed")
                    self._sources[url] = src
            return src

    def open_all(self, urls: list[str]) -> None:
        """Open these objects together, `requests` at a time: each open costs a round trip or
        two. A failure is left for `open` to report, with what needed the object."""
        todo = [u for u in dict.fromkeys(urls) if u not in self._sources and u not in self._missing]
        if len(todo) < 2:
            return
        if on_event_loop_thread():
            raise WouldBlock(lambda: self.open_all(todo))
        with ThreadPoolExecutor(min(len(todo), self.options.requests), thread_name_prefix="h5fs-open") as pool:
            for fut in [pool.submit(self.open, u) for u in todo]:
                try:
                    fut.result()
                except H5fsError:
                    pass

    def stats(self) -> list[dict]:
        """What `h5fs status` shows of each object opened (RemoteSource.stats)."""
        return [src.stats() for src in list(self._sources.values())]

    def stop(self) -> None:
        for src in list(self._sources.values()):
            src.stop()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sources, self._sources = list(self._sources.values()), {}
        for src in sources:
            src.close()
