"""What the HSDS client's tests share: a client on a fresh domain of the session's local HSDS
(tests/hsds_server.py), h5pyd on the same domain (the oracle), the comparison of a value the
client read with h5pyd's, and a scripted HTTP server on loopback for faults HSDS will not make
on request (answers in a given order: statuses, garbage, lying lengths, stalls, dropped
connections), recording what it was asked."""

from __future__ import annotations

import http.server
import itertools
import re
import socket
import threading
import time
from collections import deque
from typing import Any, Callable

import h5pyd
import numpy as np
import pytest

from h5fs.storage.hsds import HsdsClient
from hsds_server import PASSWORD, USER, HSDSServer, hsds  # noqa: F401 - the session fixture

_serial = itertools.count()


def domain_for(server: HSDSServer, request: pytest.FixtureRequest, suffix: str = "") -> str:
    """A domain no other test uses, named after the test."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:80]
    return server.domain(f"{name}{suffix}-{next(_serial)}.h5")


@pytest.fixture
def new_client(hsds, request):
    """`new_client(domain=None, **settings) -> HsdsClient` as USER (a fresh domain name unless
    given; nothing created); every client closed at teardown."""
    made: list[HsdsClient] = []

    def make(domain: str | None = None, **settings: Any) -> HsdsClient:
        settings = {"endpoint": hsds.endpoint, "username": USER, "password": PASSWORD, **settings}
        client = HsdsClient(domain or domain_for(hsds, request), **settings)
        made.append(client)
        return client
    yield make
    for client in made:
        client.close()


def h5pyd_file(server: HSDSServer, domain: str, mode: str = "r") -> h5pyd.File:
    return h5pyd.File(domain, mode, **server.h5pyd_kwargs())


def _plain(value: Any) -> Any:
    """An element as comparable Python: text as bytes (h5pyd gives str or bytes by context), a
    sequence as a list, a record as a tuple of such."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value)
    if isinstance(value, np.void) and value.dtype.names:
        return tuple(_plain(value[n]) for n in value.dtype.names)
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()] if value.dtype.kind != "O" else [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def assert_same(ours: np.ndarray, theirs: Any, what: str = "") -> None:
    """The client's array equals h5pyd's: byte for byte for fixed-size types (NaN payloads and
    -0.0 included), element by element for variable-length ones."""
    theirs = np.asarray(theirs)
    assert ours.shape == theirs.shape, (what, ours.shape, theirs.shape)
    if ours.dtype.kind != "O" and not any(ours.dtype.fields[n][0].kind == "O" for n in ours.dtype.names or ()):
        assert ours.tobytes() == np.ascontiguousarray(theirs, dtype=ours.dtype).tobytes(), what
        return
    a, b = ours.reshape(-1), theirs.reshape(-1)
    assert len(a) == len(b), what
    for i, (x, y) in enumerate(zip(a, b)):
        mine, oracle = _plain(x), _plain(y)
        assert mine == oracle or _empty_sequence(mine, oracle), f"{what}[{i}]: {x!r} != {y!r}"


def _empty_sequence(mine: Any, oracle: Any) -> bool:
    """h5pyd reads an empty variable-length sequence as 0 (h5json's readElement never sets an
    element whose count is 0), also inside a record."""
    if isinstance(mine, tuple) and isinstance(oracle, tuple) and len(mine) == len(oracle):
        return all(m == o or _empty_sequence(m, o) for m, o in zip(mine, oracle))
    return mine == [] and oracle == 0


# ---------------------------------------------------------------------------------------------
# a scripted HTTP server

Action = Callable[[http.server.BaseHTTPRequestHandler], None]


def reply(status: int, body: bytes = b"", ctype: str = "application/json", length: int | None = None,
          headers: dict[str, str] | None = None) -> Action:
    """An answer; `length` a Content-Length other than the body's (a lie), -1 for none (the body
    then ends when the connection closes)."""
    def act(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        if length != -1:
            h.send_header("Content-Length", str(len(body) if length is None else length))
        else:
            h.close_connection = True
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)
        h.wfile.flush()
        if length is not None:
            h.close_connection = True
    return act


def stream(status: int, total: int, ctype: str = "application/json", piece: int = 1 << 16) -> Action:
    """`total` bytes of filler, no Content-Length, sent until the client stops reading."""
    def act(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.end_headers()
        h.close_connection = True
        sent = 0
        try:
            while sent < total:
                h.wfile.write(b" " * min(piece, total - sent))
                sent += min(piece, total - sent)
        except OSError:
            pass
        h.server.streamed.append(sent)     # type: ignore[attr-defined]
    return act


def drop() -> Action:
    """The connection closed without an answer."""
    def act(h: http.server.BaseHTTPRequestHandler) -> None:
        h.close_connection = True
        h.connection.shutdown(socket.SHUT_RDWR)
    return act


def stall(seconds: float) -> Action:
    """No answer for `seconds` (then the connection closes)."""
    def act(h: http.server.BaseHTTPRequestHandler) -> None:
        h.server.stop_event.wait(seconds)   # type: ignore[attr-defined]
        h.close_connection = True
    return act


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(size) if size else b""
        server = self.server
        with server.lock:          # type: ignore[attr-defined]
            server.seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body))   # type: ignore[attr-defined]
            action = server.script.popleft() if server.script else server.default   # type: ignore[attr-defined]
        action(self)

    do_GET = do_PUT = do_POST = do_DELETE = _serve

    def log_message(self, *args: Any) -> None:
        pass


class ScriptedServer:
    """An HTTP/1.1 server on 127.0.0.1 answering each request with the next action of `script`
    (then `default`); `seen` holds (method, path, headers (lower-case names), body) of every
    request."""

    def __init__(self, *script: Action, default: Action | None = None):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.script = deque(script)               # type: ignore[attr-defined]
        self.httpd.default = default or reply(500, b"no script left", "text/plain")   # type: ignore[attr-defined]
        self.httpd.seen = []                            # type: ignore[attr-defined]
        self.httpd.streamed = []                        # type: ignore[attr-defined]
        self.httpd.lock = threading.Lock()              # type: ignore[attr-defined]
        self.httpd.stop_event = threading.Event()       # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def seen(self) -> list:
        return self.httpd.seen      # type: ignore[attr-defined]

    @property
    def streamed(self) -> list[int]:
        return self.httpd.streamed  # type: ignore[attr-defined]

    def __enter__(self) -> "ScriptedServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.stop_event.set()  # type: ignore[attr-defined]
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


def elapsed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """(what fn raised or returned, seconds it took)."""
    t = time.monotonic()
    try:
        out = fn()
    except Exception as e:     # the tests look at the exception itself
        out = e
    return out, time.monotonic() - t
