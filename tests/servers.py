"""Real servers on loopback for remote-mount tests and the benchmark.

RangeServer: an HTTP/1.1 file server with byte ranges, validators, conditional requests, added
latency, request counters and injectable faults. S3Server: moto's S3 in server mode, as its own
process. FaultProxy: RangeServer's latency, faults and counters in front of another server (moto).
moto reads a whole object for every request, under a lock per object: a range request costs time
in proportion to the object's size (about 30 ms at 64 MiB), so benchmarks use RangeServer.
Run by hand: `python3 tests/servers.py http DIR [--latency S]` or `... s3 [DIR] [--latency S]`.
"""

from __future__ import annotations

import argparse
import atexit
import email.utils
import http.client
import http.server
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

FAULTS = ("500", "503", "drop", "stall", "no_range", "404", "403")
SMALL_BODY = 256 * 1024    # bodies up to this size go out in one write with the headers


@contextmanager
def environ(values: dict[str, str]) -> Iterator[None]:
    """os.environ with `values` set (a server's client settings), as it was again afterwards."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# HTTP range server

def _etag(st: os.stat_result) -> str:
    return f'"{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}"'


def _etags(header: str) -> list[str]:
    """The entity tags of an If-Match / If-None-Match list (`*` kept as is)."""
    return [t.strip() for t in header.split(",") if t.strip()]


def _weak_equal(a: str, b: str) -> bool:
    return a.removeprefix("W/") == b.removeprefix("W/")


def _http_date(header: str | None) -> float | None:
    if not header:
        return None
    try:
        return email.utils.parsedate_to_datetime(header).timestamp()
    except (TypeError, ValueError):
        return None


def parse_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """One `bytes=` range as a half-open (start, stop), "unsatisfiable", or None when the header is
    absent, malformed or asks for several ranges (a server may then answer with the whole body)."""
    if not header or not header.startswith("bytes=") or "," in header:
        return None
    first, dash, last = header[6:].strip().partition("-")
    if not dash:
        return None
    try:
        if first == "":
            n = int(last)
            if n <= 0 or size == 0:
                return "unsatisfiable"
            return max(0, size - n), size
        start = int(first)
        stop = int(last) + 1 if last else max(size, start + 1)
    except ValueError:
        return None
    if start < 0 or stop <= start:
        return None
    if start >= size:
        return "unsatisfiable"
    return start, min(stop, size)


class _FaultyHandler(http.server.BaseHTTPRequestHandler):
    """Counts each request, sleeps the latency and applies the fault due, before the subclass
    answers."""
    protocol_version = "HTTP/1.1"
    server_version = "h5fs-test/1"
    rs: _LoopbackServer   # set on the per-server subclass

    def log_message(self, format, *args):   # noqa: A002 - the base class's signature
        pass

    def _prelude(self) -> tuple[bool, str | None]:
        """(answered already, the fault due)."""
        rs = self.rs
        fault = rs._begin(self.command)
        if rs.latency > 0:
            time.sleep(rs.latency)
        if fault == "drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return True, fault
        if fault == "stall" and rs._stopping.wait(rs.stall_seconds):
            self.close_connection = True
            return True, fault
        if fault in ("500", "503", "404", "403"):
            self._status_only(int(fault), self.command != "HEAD")
            return True, fault
        return False, fault

    def _status_only(self, code: int, body: bool, headers: dict | None = None) -> None:
        text = b"" if code == 304 else f"{code} {self.responses.get(code, ('',))[0]}\n".encode()
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if code != 304:
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        if body and text:
            self.wfile.write(text)


class _Handler(_FaultyHandler):
    rs: RangeServer

    def do_GET(self):
        self._serve(body=True)

    def do_HEAD(self):
        self._serve(body=False)

    def _serve(self, body: bool) -> None:
        answered, fault = self._prelude()
        if answered:
            return
        path = self.rs._resolve(self.path)
        try:
            fh = open(path, "rb") if path else None
        except OSError:
            fh = None
        if fh is None:
            return self._status_only(404, body)
        with fh:
            st = os.fstat(fh.fileno())
            self._answer(fh, st, body, honour_range=fault != "no_range")

    def _answer(self, fh, st: os.stat_result, body: bool, honour_range: bool) -> None:
        size, etag = st.st_size, _etag(st)
        mtime = int(st.st_mtime)   # HTTP dates have whole seconds
        validators = {"ETag": etag, "Last-Modified": email.utils.formatdate(mtime, usegmt=True)}
        if not self.rs.validators:
            validators = {}
        h = self.headers if self.rs.conditionals else {}
        if (im := h.get("If-Match")) is not None:
            if not any(t == "*" or t == etag for t in _etags(im)):
                return self._status_only(412, body, validators)
        elif (ius := _http_date(h.get("If-Unmodified-Since"))) is not None and mtime > ius:
            return self._status_only(412, body, validators)
        if (inm := h.get("If-None-Match")) is not None:
            if any(t == "*" or _weak_equal(t, etag) for t in _etags(inm)):
                return self._status_only(304, False, validators)
        elif (ims := _http_date(h.get("If-Modified-Since"))) is not None and mtime <= ims:
            return self._status_only(304, False, validators)
        rng = parse_range(self.headers.get("Range"), size) if honour_range else None
        if rng is not None and (if_range := h.get("If-Range")) is not None:
            if if_range.startswith(('"', "W/")):
                rng = rng if if_range == etag else None          # strong comparison only
            elif _http_date(if_range) != mtime:
                rng = None
        if rng == "unsatisfiable":
            return self._status_only(416, body, {**validators, "Content-Range": f"bytes */{size}"})
        if rng is None:
            start, stop, status = 0, size, 200
            extra = {}
        else:
            (start, stop), status = rng, 206
            extra = {"Content-Range": f"bytes {start}-{stop - 1}/{size}"}
        self.send_response(status)
        for k, v in {**validators, **extra, "Accept-Ranges": "bytes",
                     "Content-Type": "application/octet-stream",
                     "Content-Length": str(stop - start)}.items():
            self.send_header(k, v)
        if not body:
            self.end_headers()
            return
        self.rs._sent(start, stop)
        if stop - start <= SMALL_BODY:
            data = os.pread(fh.fileno(), stop - start, start)
            self._headers_buffer.append(b"\r\n")
            self._headers_buffer.append(data)
            self.flush_headers()
        else:
            self.end_headers()
            self.connection.sendfile(fh, start, stop - start)


class _HTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, handler):
        self.connections: set[socket.socket] = set()
        self.conn_lock = threading.Lock()
        super().__init__(addr, handler)

    def get_request(self):
        sock, addr = super().get_request()
        # headers and body leave in separate writes: without NODELAY a delayed ACK stalls 40 ms
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.conn_lock:
            self.connections.add(sock)
        return sock, addr

    def shutdown_request(self, request):
        with self.conn_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], OSError):   # a client that hung up is no error
            super().handle_error(request, client_address)


class _LoopbackServer:
    """A threaded HTTP/1.1 server on 127.0.0.1: lifecycle, added latency, faults and counters.

    stats()["ranges"] holds the half-open (start, stop) byte spans of the GET bodies sent, newest
    last. Faults apply to the next `count` requests (any method) in arrival order.
    """
    handler_base: type[_FaultyHandler]

    def __init__(self, latency: float = 0.0, stall_seconds: float = 30.0):
        self.latency = latency
        self.stall_seconds = stall_seconds
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._fault: str | None = None
        self._fault_left = 0
        self._httpd: _HTTPServer | None = None
        self.port = 0
        self._thread: threading.Thread | None = None
        self.reset_stats()

    # lifecycle
    def start(self):
        handler = type("Handler", (self.handler_base,), {"rs": self})
        self._stopping.clear()
        self._httpd = _HTTPServer(("127.0.0.1", 0), handler)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=type(self).__name__, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()           # wakes stalled handlers
        httpd.shutdown()
        with httpd.conn_lock:
            conns = list(httpd.connections)
        for sock in conns:             # idle keep-alive connections would keep their threads
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        httpd.server_close()
        self._thread.join(5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # faults and counters
    def fault(self, kind: str | None, count: int = 1, stall_seconds: float | None = None) -> None:
        if kind is not None and kind not in FAULTS:
            raise ValueError(f"unknown fault {kind!r}; known: {FAULTS}")
        with self._lock:
            self._fault, self._fault_left = kind, (count if kind else 0)
            if stall_seconds is not None:
                self.stall_seconds = stall_seconds

    def _begin(self, method: str) -> str | None:
        """Counts a request; the fault it is to suffer, if any."""
        with self._lock:
            self._requests += 1
            if method == "GET":
                self._gets += 1
            elif method == "HEAD":
                self._heads += 1
            if self._fault_left > 0:
                self._fault_left -= 1
                return self._fault
            return None

    def _sent(self, start: int, stop: int) -> None:
        with self._lock:
            self._bytes_sent += stop - start
            self._ranges.append((start, stop))

    def stats(self) -> dict:
        with self._lock:
            return dict(requests=self._requests, gets=self._gets, heads=self._heads,
                        bytes_sent=self._bytes_sent, ranges=list(self._ranges))

    def reset_stats(self) -> None:
        with self._lock:
            self._requests = self._gets = self._heads = self._bytes_sent = 0
            self._ranges: deque[tuple[int, int]] = deque(maxlen=100_000)


class RangeServer(_LoopbackServer):
    """Serves the files under `root_dir` at http://127.0.0.1:PORT/NAME with Range support."""
    handler_base = _Handler

    def __init__(self, root_dir, latency: float = 0.0, stall_seconds: float = 30.0):
        super().__init__(latency, stall_seconds)
        self.root = Path(root_dir).resolve()
        # servers that exist too: some ignore conditional headers, some send no validators
        self.conditionals = True    # honour If-Match, If-None-Match, If-(Un)Modified-Since
        self.validators = True      # send ETag and Last-Modified

    def url_of(self, name: str) -> str:
        return f"{self.url}/{urllib.parse.quote(name)}"

    def replace(self, name: str, data: bytes) -> None:
        """A new version of `name`, renamed into place whole: its ETag changes (new inode), and so
        does Last-Modified (mtime moved at least a second past the old one's)."""
        path = self.root / name
        old = path.stat().st_mtime if path.exists() else 0.0
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".replace-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        mtime = max(time.time(), int(old) + 1.0)
        os.utime(tmp, (mtime, mtime))
        os.replace(tmp, path)

    def _resolve(self, raw_path: str) -> Path | None:
        rel = urllib.parse.unquote(urllib.parse.urlsplit(raw_path).path).lstrip("/")
        path = (self.root / rel).resolve()
        return path if path.is_relative_to(self.root) and path != self.root else None


# ---------------------------------------------------------------------------------------------
# A proxy with the same latency, faults and counters, in front of another server (moto)

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
              "upgrade"}


class _ProxyHandler(_FaultyHandler):
    rs: FaultProxy
    _upstream: http.client.HTTPConnection | None = None

    def do_GET(self):
        self._forward()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

    def _forward(self) -> None:
        answered, fault = self._prelude()
        if answered:
            return
        length = int(self.headers.get("Content-Length") or 0)
        payload = self.rfile.read(length) if length else None
        # the Host header goes on unchanged: a signature covers it
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in HOP_BY_HOP and not (fault == "no_range" and k.lower() == "range")}
        resp = self._exchange(payload, headers)
        self.send_response_only(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                self.send_header(k, v)
        body = b"" if self.command == "HEAD" else resp.read()
        self.send_header("Content-Length", resp.getheader("Content-Length", "0")
                         if self.command == "HEAD" else str(len(body)))
        self.end_headers()
        if self.command == "GET" and 200 <= resp.status < 300:
            start = _content_range_start(resp.getheader("Content-Range"))
            self.rs._sent(start, start + len(body))
        if body:
            self.wfile.write(body)

    def _exchange(self, payload, headers) -> http.client.HTTPResponse:
        for attempt in (0, 1):     # a kept-alive upstream connection may have been closed
            if self._upstream is None:
                self._upstream = http.client.HTTPConnection(self.rs.upstream_host, self.rs.upstream_port,
                                                            timeout=60)
            try:
                self._upstream.request(self.command, self.path, body=payload, headers=headers)
                return self._upstream.getresponse()
            except (http.client.RemoteDisconnected, ConnectionError):
                self._upstream.close()
                self._upstream = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def finish(self):
        if self._upstream is not None:
            self._upstream.close()
        super().finish()


def _content_range_start(header: str | None) -> int:
    if header and header.startswith("bytes ") and "-" in header:
        return int(header[6:].split("-", 1)[0])
    return 0


class FaultProxy(_LoopbackServer):
    """Forwards every request to `upstream` ("http://127.0.0.1:PORT", e.g. an S3Server's
    endpoint) with RangeServer's latency, faults and counters; "no_range" drops the Range header."""
    handler_base = _ProxyHandler

    def __init__(self, upstream: str, latency: float = 0.0, stall_seconds: float = 30.0):
        super().__init__(latency, stall_seconds)
        parts = urllib.parse.urlsplit(upstream)
        self.upstream_host, self.upstream_port = parts.hostname, parts.port or 80


# ---------------------------------------------------------------------------------------------
# S3 (moto's server mode)

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
REGION = "us-east-1"


def die_with_parent() -> None:
    # PR_SET_PDEATHSIG: the server goes when the test process goes, even on kill -9 (the signal
    # follows the thread that started it: start servers from the main thread)
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())   # a parent may block them (main() does)


class S3Server:
    """moto's S3 at http://127.0.0.1:PORT in a child process (path-style requests)."""

    def __init__(self):
        self.port = 0
        self._proc: subprocess.Popen | None = None
        self._client = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "S3Server":
        self.port = free_port()
        env = {**os.environ, **CREDENTIALS}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, preexec_fn=die_with_parent)
        atexit.register(self.stop)
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"moto server exited with {self._proc.returncode}")
            try:
                urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1).close()
                return self
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto server did not answer on {self.endpoint}")
                time.sleep(0.1)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> "S3Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def env(self) -> dict[str, str]:
        """What a client needs in its environment to reach this server."""
        return {**CREDENTIALS, "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION,
                "AWS_ENDPOINT_URL": self.endpoint}

    def mount_options(self) -> str:
        return f"endpoint={self.endpoint},region={REGION}"

    @property
    def client(self):
        if self._client is None:
            import boto3
            from botocore.config import Config
            self._client = boto3.client(
                "s3", endpoint_url=self.endpoint, region_name=REGION,
                aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                config=Config(s3={"addressing_style": "path"}))
        return self._client

    def create_bucket(self, name: str) -> None:
        self.client.create_bucket(Bucket=name)

    def put(self, bucket: str, key: str, path_or_bytes) -> str:
        """Uploads a file (path) or bytes; the new object's ETag."""
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            return self.client.put_object(Bucket=bucket, Key=key, Body=bytes(path_or_bytes))["ETag"]
        self.client.upload_file(str(path_or_bytes), bucket, key)
        return self.client.head_object(Bucket=bucket, Key=key)["ETag"]

    def delete(self, bucket: str, key: str) -> None:
        self.client.delete_object(Bucket=bucket, Key=key)

    def set_public(self, bucket: str) -> None:
        """Anonymous (unsigned) reads of the bucket's objects, by a bucket policy. moto refuses
        unsigned requests to a private bucket with 403, and checks HEAD against "s3:HeadObject"
        (AWS checks it against s3:GetObject), so the policy names both."""
        import json
        policy = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": "*", "Action": ["s3:GetObject", "s3:HeadObject"],
            "Resource": [f"arn:aws:s3:::{bucket}/*"]}]}
        self.client.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))


# ---------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=("http", "s3"))
    ap.add_argument("dir", nargs="?", help="files to serve (http) or upload to bucket h5fs-test (s3)")
    ap.add_argument("--latency", type=float, default=0.0,
                    help="seconds slept before each answer (s3: by a FaultProxy in front of moto)")
    args = ap.parse_args(argv)
    if args.kind == "http":
        servers = [RangeServer(args.dir or ".", latency=args.latency).start()]
        print(servers[0].url, flush=True)
    else:
        s3 = S3Server().start()
        servers = [s3]
        s3.create_bucket("h5fs-test")
        for path in sorted(Path(args.dir).iterdir()) if args.dir else []:
            if path.is_file():
                s3.put("h5fs-test", path.name, path)
                print(f"s3://h5fs-test/{path.name}")
        env = s3.env()
        if args.latency:
            servers.insert(0, FaultProxy(s3.endpoint, latency=args.latency).start())
            env["AWS_ENDPOINT_URL"] = servers[0].url
        print(env["AWS_ENDPOINT_URL"], " ".join(f"{k}={v}" for k, v in env.items()), flush=True)
    signal.sigwait({signal.SIGINT, signal.SIGTERM})
    for server in servers:
        server.stop()
    return 0


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    sys.exit(main())
