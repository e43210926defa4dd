"""HTTP for the HSDS client: pooled connections, timeouts, bounded retries, bounded bodies,
counters, and one exception carrying the errno a file system call answers.

urllib3 2.x: its PoolManager keeps connections alive and is safe to share between the worker
threads h5fs calls from; it is the HTTP layer under requests (which h5pyd uses) without the
session machinery, so a request costs less Python; it waits without an event loop, which a
synchronous storage layer needs. Not measured against alternatives yet (the benchmark of issue 27
will). Its own retries and redirects are off: ours count retries for `h5fs status`, retry only
idempotent methods (GET, PUT, DELETE: a repeated POST would make a second object) and only
failures a repeat can cure (no connection, a connection dropped, 500/502/503/504).
A body is read in pieces up to a bound: a JSON answer up to `max_json`, a binary one exactly the
size the caller expects (checked against Content-Length before anything is read), so no number a
server sends decides how much memory is taken.
"""

from __future__ import annotations

import errno
import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
from urllib3.exceptions import (ConnectTimeoutError, HTTPError, NewConnectionError, ProtocolError,
                                ReadTimeoutError)

from ...errors import H5fsError
from .settings import HsdsSettings

IDEMPOTENT = frozenset({"GET", "PUT", "DELETE"})
RETRY_STATUS = frozenset({500, 502, 503, 504})
PIECE = 1 << 20                # bytes read at a time
ERROR_BODY = 4096              # bytes of an error answer kept for the message
STATUS_ERRNO = {400: errno.EINVAL, 401: errno.EACCES, 403: errno.EPERM, 404: errno.ENOENT,
                405: errno.ENOTSUP, 409: errno.EEXIST, 410: errno.ENOENT, 413: errno.EFBIG,
                501: errno.ENOTSUP, 507: errno.ENOSPC}
JSON = "application/json"
BINARY = "application/octet-stream"


class HsdsError(H5fsError):
    """A request HSDS refused or that failed: `errno` for the file system call (ENOENT for
    404/410, EACCES 401, EPERM 403, EEXIST 409, EINVAL 400, EFBIG 413: a request over the
    service's max_request_size, ENOTSUP 405/501, ENOSPC 507, EIO for anything else and for network
    failures), `status` the HTTP status (None without an answer); the message names the method,
    path, domain and the server's answer. Transient: no answer, or a 5xx."""

    def __init__(self, message: str, err: int = errno.EIO, status: int | None = None,
                 transient: bool = False):
        super().__init__(message)
        self.errno = err
        self.status = status
        self.transient = transient


class TooLarge(HsdsError):
    """A JSON answer longer than the caller's `limit` (an answer it can do without: no error)."""


@dataclass
class Answer:
    status: int
    content_type: str
    body: bytes | bytearray


def segment(name: str) -> str:
    """A name (link title, attribute name) as one path segment: every reserved character
    escaped, '.' too (an unescaped '..' or '.' segment is folded away before HSDS sees it)."""
    return quote(name, safe="").replace(".", "%2E")


class Transport:
    """Requests to one HSDS endpoint; thread-safe; counts what it does."""

    def __init__(self, settings: HsdsSettings):
        self.settings = settings
        self.timeout = urllib3.Timeout(connect=min(settings.timeout, 10.0), read=settings.timeout)
        self.pool = urllib3.PoolManager(num_pools=2, maxsize=settings.connections, retries=False,
                                        cert_reqs="CERT_REQUIRED" if settings.verify_tls else "CERT_NONE")
        self.headers: dict[str, str] = {"Connection": "keep-alive"}
        if settings.username is not None:
            auth = f"{settings.username}:{settings.password or ''}"
            self.headers.update(urllib3.make_headers(basic_auth=auth))
        self._lock = threading.Lock()
        self.requests = self.retries = self.errors = self.bytes_in = self.bytes_out = 0
        self.last_errors: deque[str] = deque(maxlen=5)
        self._stopped = threading.Event()

    # counters ----------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """What `h5fs status` shows: the endpoint, requests sent (retries included), bytes in and
        out (bodies), requests failed for good, retries, the last few errors."""
        with self._lock:
            return {"endpoint": self.settings.endpoint, "requests": self.requests, "retries": self.retries,
                    "errors": self.errors, "bytes_in": self.bytes_in, "bytes_out": self.bytes_out,
                    "last_errors": list(self.last_errors)}

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for name, n in deltas.items():
                setattr(self, name, getattr(self, name) + n)

    def _fail(self, message: str, err: int = errno.EIO, status: int | None = None,
              transient: bool = False) -> HsdsError:
        with self._lock:
            self.errors += 1
            self.last_errors.append(f"{time.strftime('%H:%M:%S')} {message}")
        return HsdsError(message, err, status, transient)

    def stop(self) -> None:
        """No more retries, and a retry's wait ends now (an unmount is under way)."""
        self._stopped.set()

    def close(self) -> None:
        self.stop()
        self.pool.clear()

    # requests ------------------------------------------------------------------------------------
    def request(self, method: str, path: str, params: dict[str, Any] | None = None, *,
                domain: str | None = None, json_body: Any = None, body: bytes | None = None,
                binary: bool = False, expect: int | None = None, limit: int | None = None) -> Answer:
        """One request, retried as the module says. `json_body` goes as JSON, `body` as
        application/octet-stream. `binary` asks for application/octet-stream: then `expect` is
        the exact byte count wanted (or None and `limit` a bound, for variable-length values);
        not `binary`, `limit` bounds a JSON answer (TooLarge past it).
        The answer of a status >= 400 raises HsdsError; so does a body over its bound."""
        params = dict(params or {})
        if domain is not None:
            params["domain"] = domain
        url = self.settings.endpoint + path + ("?" + urlencode(params) if params else "")
        headers = dict(self.headers)
        headers["Accept"] = BINARY if binary else JSON
        if json_body is not None:
            body = json.dumps(json_body, allow_nan=True).encode()
            headers["Content-Type"] = JSON
        elif body is not None:
            headers["Content-Type"] = BINARY
        where = f"{method} {path}" + (f" [{domain}]" if domain else "")
        attempts = self.settings.retries + 1 if method in IDEMPOTENT else 1
        for attempt in range(attempts):
            last = attempt == attempts - 1 or self._stopped.is_set()
            self._count(requests=1, bytes_out=len(body or b""))
            try:
                resp = self.pool.urlopen(method, url, body=body, headers=headers, redirect=False,
                                         retries=False, timeout=self.timeout, preload_content=False)
            except (NewConnectionError, ConnectTimeoutError, ProtocolError) as e:
                if last:
                    raise self._fail(f"HSDS {where}: no answer from {self.settings.endpoint}: {_reason(e)}"
                                     f"{_after(attempt)}", transient=True) from None
                self._wait(attempt)
                continue
            except ReadTimeoutError:
                # not retried: the server has the request; one slow enough to time out once is
                # likely slow again, and the caller's wait would multiply
                raise self._fail(f"HSDS {where}: no answer within {self.settings.timeout:g} s",
                                 transient=True) from None
            except HTTPError as e:
                raise self._fail(f"HSDS {where}: {_reason(e)}", transient=True) from None
            try:
                if resp.status >= 400:
                    if resp.status in RETRY_STATUS and not last:
                        _discard(resp)
                        self._wait(attempt)
                        continue
                    text = _error_text(resp)
                    err = STATUS_ERRNO.get(resp.status, errno.EIO)
                    raise self._fail(f"HSDS {where}: {resp.status} {text}{_after(attempt)}", err, resp.status,
                                     transient=resp.status >= 500)
                if resp.status >= 300:
                    _discard(resp)
                    raise self._fail(f"HSDS {where}: unexpected redirect {resp.status} to "
                                     f"{resp.headers.get('Location')}", status=resp.status)
                answer = self._body(resp, where, binary, expect, limit)
            except (ProtocolError, ReadTimeoutError) as e:     # the connection broke mid-body
                resp.close()
                if last or isinstance(e, ReadTimeoutError):
                    raise self._fail(f"HSDS {where}: the answer broke off: {_reason(e)}{_after(attempt)}",
                                     transient=True) from None
                self._wait(attempt)
                continue
            except HsdsError:
                resp.close()
                raise
            finally:
                resp.release_conn()
            return answer
        raise AssertionError("unreachable")

    def json_request(self, method: str, path: str, params: dict[str, Any] | None = None, *,
                     domain: str | None = None, json_body: Any = None, body: bytes | None = None,
                     limit: int | None = None) -> Any:
        """The parsed JSON answer of one request (None for an empty one); TooLarge past `limit`
        bytes (when under max_json)."""
        answer = self.request(method, path, params, domain=domain, json_body=json_body, body=body, limit=limit)
        return self.parse(answer, f"{method} {path}" + (f" [{domain}]" if domain else ""))

    def parse(self, answer: Answer, where: str) -> Any:
        if not answer.body:
            return None
        if answer.content_type not in (JSON, ""):
            raise self._fail(f"HSDS {where}: answered {answer.content_type}, not JSON")
        try:
            return json.loads(answer.body)
        except ValueError as e:
            raise self._fail(f"HSDS {where}: the answer is not JSON ({e})") from None

    def _wait(self, attempt: int) -> None:
        self._count(retries=1)
        s = self.settings
        self._stopped.wait(min(s.max_backoff, s.backoff * 2 ** attempt))

    def _body(self, resp, where: str, binary: bool, expect: int | None, limit: int | None) -> Answer:
        """The body within its bound: a binary answer to a binary request exactly `expect` bytes
        (or at most `limit`); anything else (JSON, an empty 201 or 204) at most max_json."""
        ctype = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
        data_answer = binary and ctype == BINARY
        exact = expect if data_answer else None
        bound = (exact if exact is not None else limit or self.settings.max_value) if data_answer \
            else self.settings.max_json
        length = _content_length(resp)
        if not binary and limit is not None and limit < bound:
            # the caller's own bound: past it the answer is not wanted (TooLarge), not an error
            if length is not None and length > limit:
                raise TooLarge(f"HSDS {where}: the answer has {length} bytes, over {limit}", errno.EFBIG)
            data = self._read(resp, limit, where, strict=False)
            if len(data) > limit:
                raise TooLarge(f"HSDS {where}: the answer runs past {limit} bytes", errno.EFBIG)
            self._count(bytes_in=len(data))
            return Answer(resp.status, ctype, data)
        if length is not None and (length > bound or (exact is not None and length != exact)):
            wanted = f"exactly {exact}" if exact is not None else f"at most {bound}"
            raise self._fail(f"HSDS {where}: the answer has {length} bytes, {wanted} expected")
        data = self._read(resp, bound, where)
        if exact is not None and len(data) != exact:
            raise self._fail(f"HSDS {where}: {len(data)} bytes of data, {exact} expected")
        self._count(bytes_in=len(data))
        return Answer(resp.status, ctype, data)

    def _read(self, resp, bound: int, where: str, strict: bool = True) -> bytearray:
        """At most `bound` bytes of the body, in pieces; more is an error (the rest unread), or
        with `strict` False, bound + 1 bytes returned."""
        out = bytearray()
        while True:
            piece = resp.read(min(PIECE, bound + 1 - len(out)))
            if not piece:
                return out
            out += piece
            if len(out) > bound:
                if not strict:
                    return out
                raise self._fail(f"HSDS {where}: the answer runs past {bound} bytes")


def _content_length(resp) -> int | None:
    if resp.headers.get("Content-Encoding", "identity").lower() != "identity":
        return None    # the length counts compressed bytes
    value = resp.headers.get("Content-Length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _discard(resp) -> None:
    """A small body read and dropped so the connection is reused; a big one closes it."""
    length = _content_length(resp)
    if length is not None and length <= ERROR_BODY:
        resp.drain_conn()
    else:
        resp.close()


def _error_text(resp) -> str:
    """The first line of an error answer (HSDS sends "404: Not Found" as text), bounded."""
    try:
        raw = resp.read(ERROR_BODY)
    except (HTTPError, OSError):
        raw = b""
    _discard(resp)
    text = raw.decode("utf-8", "replace").strip()
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
            text = str(parsed.get("message") or parsed.get("reason") or text) if isinstance(parsed, dict) else text
        except ValueError:
            pass
    first = text.splitlines()[0] if text else (resp.reason or "")
    return first.removeprefix(f"{resp.status}: ")[:300]      # HSDS writes "404: Not Found"


def _reason(e: BaseException) -> str:
    """urllib3's message without the pool's repr it wraps around the cause."""
    cause = getattr(e, "reason", None) or e
    text = str(cause)
    if ": " in text and text.startswith("<"):
        text = text.split(": ", 1)[1]
    return text[:300] or type(e).__name__


def _after(attempt: int) -> str:
    return f" (after {attempt} retries)" if attempt else ""
