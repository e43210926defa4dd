"""Range requests for one remote object, pinned to the version seen when it was opened.

obstore (Rust's object_store) speaks S3 and HTTP(S), pools connections and releases the GIL
while it waits, so worker threads fetch in parallel. Its own retries are off: ours count them
for `h5fs status`, back off, and give up with an error naming the URL and the bytes. Every
request is conditional on the pinned version (If-Match on the ETag, else If-Unmodified-Since):
once the object changes, every read fails instead of mixing bytes of two versions.
"""

from __future__ import annotations

import errno
import os
import re
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import obstore
from obstore import exceptions as oe

from ...errors import H5fsError
from .credentials import profile_config
from .options import RemoteOptions

BACKOFF = 0.2          # seconds before the first retry; doubled each time
MAX_BACKOFF = 5.0


class RemoteError(H5fsError):
    """A request failed (after retries): the read answers EIO, the log names the URL; the next
    read tries again."""

    errno = errno.EIO
    transient = True


class RemoteChanged(RemoteError):
    """The object is no longer the version the mount pinned: every read fails from now on."""

    transient = False


class RemoteNotFound(RemoteError):
    """No such object (404): an answer about the object, not a network fault; for an object a
    remote file names beside itself, what a missing local file is for a local one."""

    transient = False


@dataclass(frozen=True)
class Version:
    size: int
    etag: str | None
    modified: Any          # datetime of Last-Modified, or None
    version: str | None    # S3 version id, when the bucket keeps versions

    def key(self) -> str:
        """What tells this version apart in the block cache."""
        return f"{self.size}:{self.etag}:{self.modified}:{self.version}"

    @property
    def validated(self) -> bool:
        """Whether a change of the object can be seen (an ETag or a Last-Modified to compare)."""
        return bool(self.etag) or self.modified is not None

    def differs(self, meta: dict) -> str | None:
        """What an answer's own metadata says changed (servers that ignore If-Match or
        If-Unmodified-Since still send it), or None."""
        if int(meta.get("size", self.size)) != self.size:
            return f"its size is {meta['size']}, not {self.size}"
        etag = meta.get("e_tag")
        if self.etag and etag and etag != self.etag:
            return f"its ETag is {etag}, not {self.etag}"
        modified = _modified(meta)
        if self.modified is not None and modified is not None and modified != self.modified:
            return f"it was modified at {modified}, not {self.modified}"
        return None


def _modified(meta: dict):
    """Last-Modified, or None when the server sent none (obstore gives the epoch then)."""
    value = meta.get("last_modified")
    return None if value is None or value.timestamp() == 0 else value


def _store(url: str, options: RemoteOptions) -> tuple[Any, str]:
    """(obstore store, path inside it) for `url`."""
    from obstore.store import HTTPStore, S3Store   # the Rust extension loads for remote mounts only
    parts = urlsplit(url)
    client: dict[str, Any] = {"timeout": timedelta(seconds=options.timeout),
                              "connect_timeout": timedelta(seconds=min(options.timeout, 10.0))}
    retry = {"max_retries": 0}
    if parts.scheme.lower() == "s3":
        if not parts.netloc or not parts.path.strip("/"):
            raise H5fsError(f"{url}: an S3 URL names a bucket and a key: s3://BUCKET/KEY")
        config, provider = ({}, None) if options.anonymous else profile_config(options.profile)
        if options.region:
            config["region"] = options.region
        elif "region" not in config and not (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")):
            found = bucket_region(parts.netloc, options.endpoint, options.timeout)
            if found:
                config["region"] = found
        if options.endpoint:
            config["endpoint"] = options.endpoint
            config["virtual_hosted_style_request"] = False   # S3-compatible servers answer on paths
            client["allow_http"] = options.endpoint.lower().startswith("http://")
        if options.anonymous:
            config["skip_signature"] = True
        return (S3Store(parts.netloc, config=config, client_options=client, retry_config=retry,
                        credential_provider=provider), unquote(parts.path.lstrip("/")))
    if options.endpoint or options.anonymous or options.profile or options.region:
        raise H5fsError(f"{url}: endpoint=, region=, anonymous and profile= are for s3:// URLs")
    head, _, name = parts.path.rpartition("/")
    if not name:
        raise H5fsError(f"{url}: the URL names a directory, not a file")
    client["allow_http"] = parts.scheme.lower() == "http"
    base = f"{parts.scheme}://{parts.netloc}{head}"   # no trailing slash: obstore joins with one
    return HTTPStore.from_url(base, client_options=client, retry_config=retry), unquote(name)


def bucket_region(bucket: str, endpoint: str | None, timeout: float) -> str | None:
    """The region S3 says the bucket is in (the `x-amz-bucket-region` header of an unsigned
    HEAD of the bucket, sent with a redirect or a refusal too), as the AWS tools find it when
    none is configured: a user passes nothing but the URL. None when the server does not say."""
    base = endpoint.rstrip("/") + "/" + quote(bucket) if endpoint else f"https://{bucket}.s3.amazonaws.com/"
    request = urllib.request.Request(base, method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=min(timeout, 10.0)) as answer:
            return answer.headers.get("x-amz-bucket-region")
    except urllib.error.HTTPError as e:   # 301 to the bucket's region, 403 without credentials
        return e.headers.get("x-amz-bucket-region")
    except (OSError, ValueError):
        return None


class ObjectClient:
    """Head and range reads of one object; thread-safe; counts what it does."""

    def __init__(self, url: str, options: RemoteOptions):
        self.url, self.options = url, options
        self.store, self.path = _store(url, options)
        self._lock = threading.Lock()
        self.requests = self.bytes = self.retries = self.failures = 0
        self.errors: deque[str] = deque(maxlen=5)
        self.changed: str | None = None        # why reads fail for good, once the object changed
        self._stopped = threading.Event()      # set at unmount: no retries; wakes a retry's backoff
        self.version = self._head()

    def _head(self) -> Version:
        """The object's version and size (a HEAD request); errors that make a mount pointless
        (missing object, no access, no server) are H5fsError with a message a user can act on."""
        meta = self._call(lambda: obstore.head(self.store, self.path), "HEAD")
        return Version(int(meta["size"]), meta.get("e_tag"), _modified(meta), meta.get("version"))

    def get(self, start: int, end: int) -> memoryview:
        """Bytes [start, end) of the pinned version (end clipped to the object)."""
        if self.changed:
            raise RemoteChanged(self.changed)
        end = min(end, self.version.size)
        v = self.version
        opts: dict[str, Any] = {"range": (start, end)}
        if v.etag:
            opts["if_match"] = v.etag
        elif v.modified is not None:
            opts["if_unmodified_since"] = v.modified
        if v.version:
            opts["version"] = v.version
        meta, data = self._call(lambda: _body(obstore.get(self.store, self.path, options=opts), start, end),
                                f"bytes {start}-{end - 1}")
        changed = v.differs(meta)
        if changed:
            self._changed(changed)
        if len(data) != end - start:
            raise RemoteError(f"{self.url}: bytes {start}-{end - 1}: the server sent {len(data)} bytes for "
                              f"{end - start} (does it support range requests?)")
        with self._lock:
            self.bytes += len(data)
        return memoryview(data)

    def _call(self, request, what: str):
        """`request()` with bounded retries of transient failures."""
        for attempt in range(self.options.retries + 1):
            with self._lock:
                self.requests += 1
            try:
                return request()
            except oe.PreconditionError as e:
                self._changed("a conditional request failed", e)
            except (oe.NotFoundError, FileNotFoundError) as e:   # obstore raises the builtin for a 404
                self._failed(f"{what}: not found")
                raise RemoteNotFound(f"{self.url}: no such object (404)") from e
            except (oe.PermissionDeniedError, oe.UnauthenticatedError) as e:
                self._failed(f"{what}: access denied")
                hint = ("; check the credentials, or `anonymous` for a public bucket"
                        if self.url.startswith("s3:") else "")
                raise RemoteError(f"{self.url}: access denied ({_reason(e)}){hint}") from e
            except oe.NotSupportedError as e:   # HTTPStore: the server ignored the range
                self._failed(f"{what}: no range support")
                raise RemoteError(f"{self.url}: the server does not support range requests ({_reason(e)})") from e
            except RemoteError as e:   # an answer that can never be right: no retry
                self._failed(f"{what}: {e}")
                raise RemoteError(f"{self.url}: {e}") from None
            except (oe.BaseError, OSError) as e:   # 5xx, dropped connections, timeouts
                if attempt == self.options.retries or self.stopped:   # an unmount waits for no retry
                    self._failed(f"{what}: {_reason(e)}")
                    raise RemoteError(f"{self.url}: {what}: {_reason(e)} (after {attempt} retries)") from e
                with self._lock:
                    self.retries += 1
                self._stopped.wait(min(MAX_BACKOFF, BACKOFF * 2 ** attempt))
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """No more retries (the mount is going)."""
        self._stopped.set()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def _changed(self, how: str, cause: BaseException | None = None) -> None:
        """The object is not the version pinned: every read fails from now on."""
        self.changed = (f"{self.url} changed since it was mounted ({how}; it is no longer version "
                        f"{self.version.etag or self.version.modified}): remount to read the new one")
        self._failed(self.changed)
        raise RemoteChanged(self.changed) from cause

    def _failed(self, message: str) -> None:
        with self._lock:
            self.failures += 1
            self.errors.append(f"{time.strftime('%H:%M:%S')} {message}")


def _body(result, start: int, end: int):
    """(metadata, bytes) of a range answer, refused unread when it is not the range asked for (a server
    that ignores ranges sends the whole object: never take an unbounded body into memory)."""
    got = tuple(result.range)
    if got != (start, end):
        raise RemoteError(f"the server answered bytes {got[0]}-{got[1] - 1} to a request for {start}-{end - 1} "
                          f"(it does not support range requests)")
    return result.meta, result.bytes()


CONNECT = re.compile(r'ConnectError\(\s*"([^"]+)",(?:.*?(?:message|error): "([^"]+)")?', re.S)
TIMEOUT = re.compile(r"kind: Timeout,")


def _reason(e: BaseException) -> str:
    """The first line of obstore's message, which can run to a page of debug output, with the
    cause its debug part gives for a request that got no answer ("dns error: ...", "tcp connect
    error: Connection refused", "timed out")."""
    text = str(e).strip()
    first = text.splitlines()[0][:300] if text else type(e).__name__
    found = CONNECT.search(text)
    cause = ": ".join(g for g in found.groups() if g) if found else "timed out" if TIMEOUT.search(text) else ""
    return f"{first} ({cause})" if cause else first
