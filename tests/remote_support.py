"""Fixtures for remote-mount tests: one HTTP range server and one moto S3 server per session.

Import what a test module uses (`from remote_support import range_server, s3_server, s3_proxy,
publish, fresh`); nothing here is autouse. s3_proxy is a FaultProxy in front of moto (latency,
faults and counters for S3 as RangeServer has them for HTTP): mount with endpoint=s3_proxy.url. Both servers listen on 127.0.0.1 only and are stopped at the end
of the session, whatever the tests did. s3_server puts moto's fake credentials and region in
os.environ for the session, so `h5fs mount` (run_h5fs inherits the environment) finds them the way
the AWS tools do; the endpoint is not put there: pass publish()'s `s3_options` to the mount.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from servers import CREDENTIALS, REGION, FaultProxy, RangeServer, S3Server

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
    saved = {k: os.environ.get(k) for k in _client_env()}
    os.environ.update(_client_env())
    try:
        yield _started["s3"]
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
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
