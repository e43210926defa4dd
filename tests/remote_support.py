"""Fixtures for remote-mount tests: one HTTP range server and one moto S3 server per session.

Import what a test module uses (`from remote_support import range_server, s3_server, s3_proxy,
publish, fresh`); nothing here is autouse. s3_proxy is a FaultProxy in front of moto (latency,
faults and counters for S3 as RangeServer has them for HTTP): mount with endpoint=s3_proxy.url.
Both servers listen on 127.0.0.1 only and are stopped at the end of the session, whatever the
tests did. s3_server puts moto's fake credentials and region in os.environ for the session, so
`h5fs mount` (run_h5fs inherits the environment) finds them the way the AWS tools do; the
endpoint is not put there: pass publish()'s `s3_options` to the mount.

The read suite runs on every source through `read_mount` (the `mount` fixture of a read test,
once per source: local, http, s3) and `open_source` (H5File.open, likewise); a module using them
imports range_server and s3_server too.
"""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import h5py
import pytest

from conftest import Mounter
from h5fs.format.checksum import lookup3
from h5fs.model.file import H5File
from h5fs.storage.remote import RemoteOptions
from servers import CREDENTIALS, REGION, FaultProxy, RangeServer, S3Server, environ

BUCKET = "h5fs-test"

# One server of each kind however many test modules import these fixtures: pytest makes a
# session-scoped fixture per importing module, and they all share what is started here.
_started: dict[str, RangeServer | S3Server | FaultProxy] = {}


@pytest.fixture(scope="session")
def range_server(tmp_path_factory):
    """A RangeServer (no latency) serving a session temporary directory."""
    if "http" not in _started:
        _started["http"] = RangeServer(tmp_path_factory.mktemp("http-root")).start()
    yield _started["http"]
    _stop("http")


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 with bucket h5fs-test; its credentials and region in os.environ meanwhile."""
    if "s3" not in _started:
        server = S3Server().start()
        _started["s3"] = server
        server.create_bucket(BUCKET)
    try:
        with environ(_client_env()):
            yield _started["s3"]
    finally:
        _stop("s3")


@pytest.fixture(scope="session")
def s3_proxy(s3_server):
    """A FaultProxy (no latency) in front of s3_server."""
    if "s3_proxy" not in _started:
        _started["s3_proxy"] = FaultProxy(s3_server.endpoint).start()
    yield _started["s3_proxy"]
    _stop("s3_proxy")


@pytest.fixture(scope="session")
def publish(range_server, s3_server):
    """publish(path, name=None) -> dict(http=URL, s3=URL, s3_options=mount options): the file
    served by both servers under `name` (default: its own name)."""
    def _publish(path, name: str | None = None) -> dict[str, str]:
        return publish_to(path, range_server, s3_server, name)
    return _publish


def publish_to(path, range_server: RangeServer, s3_server: S3Server,
               name: str | None = None) -> dict[str, str]:
    name = name or Path(path).name
    target = range_server.root / name
    tmp = target.with_name(f".publish-{name}")
    shutil.copyfile(path, tmp)
    os.replace(tmp, target)    # a reader never sees half a file
    s3_server.put(BUCKET, name, path)
    return dict(http=range_server.url_of(name), s3=f"s3://{BUCKET}/{name}",
                s3_options=s3_server.mount_options())


# -- the read suite on every source ----------------------------------------------------------

SOURCES = ("local", "http", "s3")
# An object fetches its first MiB at open: a copy of a small file is then read from the block
# cache alone. The S3 copies carry this much of a user block before the file, and are mounted
# with small blocks, so that every structure and every chunk of theirs is fetched when read.
USER_BLOCK = 1 << 20
S3_BLOCK_KB = 16


def with_user_block(src, dst: Path, size: int = USER_BLOCK) -> None:
    """Write `src` behind `size` bytes of user block, as libhdf5 lays such a file out: the
    superblock's base address is `size` (other addresses are relative to it) and its end-of-file
    address counts the user block; its checksum (versions 2, 3) made again. h5py must read the
    copy (so this helper cannot hide a mistake)."""
    data = bytearray(Path(src).read_bytes())
    assert data[:8] == b"\x89HDF\r\n\x1a\n", "the file has a user block already"
    version, offsets = data[8], data[13] if data[8] < 2 else data[9]
    at = {0: 24, 1: 28}.get(version, 12)   # the base address follows the fixed fields
    fmt = {4: "<I", 8: "<Q"}[offsets]
    base, _, eof = struct.unpack_from(fmt[0] + 3 * fmt[1], data, at)
    assert base == 0
    struct.pack_into(fmt, data, at, size)
    struct.pack_into(fmt, data, at + 2 * offsets, eof + size)
    if version >= 2:
        end = 12 + 4 * offsets
        struct.pack_into("<I", data, end, lookup3(bytes(data[:end])))
    with open(dst, "wb") as fh:
        fh.write(b"\0" * size)
        fh.write(data)
    with h5py.File(src, "r") as a, h5py.File(dst, "r") as b:
        assert a.id.get_create_plist().get_userblock() == 0
        assert b.id.get_create_plist().get_userblock() == size and sorted(a) == sorted(b)


class Published:
    """Copies of local files on the HTTP server (the same bytes) or in S3 (behind a user block,
    see USER_BLOCK), each under a name of its own; `remove` takes them all away again."""

    def __init__(self, request, kind: str, cache_dir: Path):
        self.kind, self.cache_dir = kind, cache_dir
        self._request = request
        self._names: list[str] = []

    def url(self, path, tag: str, exact: bool = False) -> tuple[str, dict]:
        """(URL, RemoteOptions fields) of a new copy of `path` (`exact`: the same bytes in S3 too)."""
        name = f"{tag}-{len(self._names)}-{Path(path).name}"
        http = self._request.getfixturevalue("range_server")
        s3 = self._request.getfixturevalue("s3_server")
        remote = dict(cache_dir=str(self.cache_dir))
        if self.kind == "s3":
            copy = self.cache_dir.parent / f"user-block-{name}"
            if not exact:
                with_user_block(path, copy)
                remote.update(block_kb=S3_BLOCK_KB)
            s3.put(BUCKET, name, path if exact else copy)
            copy.unlink(missing_ok=True)
            url = f"s3://{BUCKET}/{name}"
            remote.update(endpoint=s3.endpoint, region=REGION)
        else:
            shutil.copyfile(path, http.root / name)
            url = http.url_of(name)
        self._names.append(name)
        return url, remote

    def remove(self) -> None:
        if not self._names:
            return
        http = self._request.getfixturevalue("range_server")
        s3 = self._request.getfixturevalue("s3_server")
        for name in self._names:
            (http.root / name).unlink(missing_ok=True)
            s3.delete(BUCKET, name)
        self._names.clear()


class SourceMounter(Mounter):
    """`read_mount(h5path, *options) -> mountpoint`: mounts the local file, or a copy of it on
    the HTTP server or in S3 by its URL (a block cache of its own under the test's directory);
    h5py goes on reading the local original."""

    def __init__(self, tmp_path: Path, published: Published):
        tmp_path.mkdir(exist_ok=True)
        super().__init__(tmp_path)
        self.published = published

    @property
    def kind(self) -> str:
        return self.published.kind

    def target(self, h5path, exact: bool = False) -> tuple[str, list[str]]:
        """(what to mount, its options) for `h5path`: the path itself, or a new copy's URL."""
        if self.kind == "local":
            return str(h5path), []
        url, remote = self.published.url(h5path, self.tmp_path.parent.name, exact)
        return url, [f"{k}={v}" for k, v in remote.items()]

    def __call__(self, h5path, *options: str, expect_ok: bool = True) -> Path:
        target, extra = self.target(h5path)
        mp = super().__call__(target, *options, *extra, expect_ok=expect_ok)
        if self.kind != "local":   # the copy is what is mounted
            assert os.getxattr(mp, "user.h5fs.file").decode() == target
        return mp


@pytest.fixture(params=SOURCES)
def read_mount(request, tmp_path):
    """The `mount` fixture of a read test, once per source (local, http, s3); every mount is
    unmounted, then every copy removed, at teardown."""
    published = Published(request, request.param, tmp_path / "block-cache")
    m = SourceMounter(tmp_path / "sources", published)
    try:
        yield m
    finally:
        problems = m.cleanup()
        published.remove()
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture(params=SOURCES)
def open_source(request, tmp_path):
    """`open_source(path) -> H5File`: the engine on the local file, or on a copy of it on the
    HTTP server or in S3."""
    published = Published(request, request.param, tmp_path / "block-cache")

    def _open(path) -> H5File:
        if request.param == "local":
            return H5File.open(str(path))
        url, remote = published.url(path, tmp_path.name)
        return H5File.open(url, remote=RemoteOptions(**remote))
    try:
        yield _open
    finally:
        published.remove()


def fresh(server) -> None:
    """A server as a test expects to find it: for a RangeServer or FaultProxy no fault, no latency,
    counters at zero (moto's S3Server has none of these)."""
    if isinstance(server, RangeServer):
        server.conditionals = server.validators = True
    if isinstance(server, (RangeServer, FaultProxy)):
        server.fault(None)
        server.latency = 0.0
        server.reset_stats()


def _client_env() -> dict[str, str]:
    return {**CREDENTIALS, "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION}


def _stop(kind: str) -> None:
    server = _started.pop(kind, None)
    if server is not None:
        server.stop()
