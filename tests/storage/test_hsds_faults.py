"""The HSDS client's transport under real failures: a port nobody listens on, and a scripted
HTTP server on loopback (tests/hsds_support.py) answering 5xx then 200, errors of every kind,
garbage, bodies too big, too short or cut off, dropped connections, no answer at all. What is
retried (GET, PUT, DELETE; never POST) and how often, what each failure's errno and message
are, what the counters say, and that no body a server sends is read past its bound."""

from __future__ import annotations

import errno
import threading
import tracemalloc

import numpy as np
import pytest

from h5fs.storage.hsds import HsdsClient, HsdsError
from hsds_support import ScriptedServer, drop, elapsed, reply, stall, stream
from servers import free_port

GID = "g-00000000-00000000-0000-000000-000001"
DID = "d-00000000-00000000-0000-000000-000002"
DOMAIN = "/home/u/faults.h5"
GROUP = (b'{"id": "' + GID.encode() + b'", "created": 1.0, "lastModified": 2.0, "linkCount": 0, '
         b'"attributeCount": 0}')
OK = reply(200, GROUP)


def client_for(endpoint: str, **settings) -> HsdsClient:
    settings = {"username": "u", "password": "p", "retries": 3, "backoff": 0.01, "timeout": 2.0, **settings}
    return HsdsClient(DOMAIN, endpoint=endpoint, **settings)


def test_no_server_fails_fast_after_bounded_retries():
    endpoint = f"http://127.0.0.1:{free_port()}"
    with client_for(endpoint) as client:
        err, took = elapsed(lambda: client.get_group(GID))
        assert isinstance(err, HsdsError) and err.errno == errno.EIO and err.transient and err.status is None
        assert f"GET /groups/{GID} [{DOMAIN}]" in str(err) and endpoint in str(err) and "after 3 retries" in str(err)
        stats = client.stats()
        assert (stats["requests"], stats["retries"], stats["errors"]) == (4, 3, 1)
        assert took < 2.0, took


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_a_5xx_is_retried_and_counted(status):
    with ScriptedServer(reply(status, b"busy", "text/plain"), OK) as server, client_for(server.endpoint) as client:
        assert client.get_group(GID).id == GID
        assert [(m, p.split("?")[0]) for m, p, _, _ in server.seen] == [("GET", f"/groups/{GID}")] * 2
        stats = client.stats()
        assert (stats["requests"], stats["retries"], stats["errors"]) == (2, 1, 0)
        # what each request carried: the domain, the credentials, JSON wanted
        _, path, headers, _ = server.seen[0]
        assert "domain=%2Fhome%2Fu%2Ffaults.h5" in path and headers["authorization"] == "Basic dTpw"
        assert headers["accept"] == "application/json"


def test_puts_and_deletes_are_retried_posts_never():
    with ScriptedServer(reply(503), reply(201, b"{}"), reply(502), reply(200, b"{}"), reply(500, b"oops", "text/plain"),
                        ) as server, client_for(server.endpoint) as client:
        client.put_attribute(GID, "a", 1)
        client.delete_link(GID, "x")
        err, _ = elapsed(lambda: client.create_group(GID, "g"))
        assert isinstance(err, HsdsError) and err.status == 500 and err.errno == errno.EIO and "oops" in str(err)
        assert [m for m, *_ in server.seen] == ["PUT", "PUT", "DELETE", "DELETE", "POST"]
        assert server.seen[0][3] == server.seen[1][3]         # the same body again
        assert client.stats()["retries"] == 2


def test_retries_are_bounded():
    with ScriptedServer(default=reply(503, b"503: Service Unavailable", "text/plain")) as server, \
            client_for(server.endpoint, retries=2) as client:
        err, _ = elapsed(lambda: client.get_group(GID))
        assert isinstance(err, HsdsError) and err.status == 503 and err.transient
        assert str(err).endswith("503 Service Unavailable (after 2 retries)")
        assert len(server.seen) == 3 and client.stats()["errors"] == 1


@pytest.mark.parametrize("status, err", [(400, errno.EINVAL), (401, errno.EACCES), (403, errno.EPERM),
                                         (404, errno.ENOENT), (409, errno.EEXIST), (410, errno.ENOENT),
                                         (413, errno.EFBIG), (507, errno.ENOSPC), (418, errno.EIO)])
def test_statuses_carry_errnos_and_the_servers_words(status, err):
    with ScriptedServer(default=reply(status, f"{status}: the reason".encode(), "text/plain")) as server, \
            client_for(server.endpoint) as client:
        got, _ = elapsed(lambda: client.get_group(GID))
        assert isinstance(got, HsdsError) and (got.errno, got.status) == (err, status)
        assert str(got) == f"HSDS GET /groups/{GID} [{DOMAIN}]: {status} the reason"
        assert len(server.seen) == 1                       # none of these is retried


@pytest.mark.parametrize("answer, message", [
    (reply(200, b"not json{"), "not JSON"),
    (reply(200, b"<html>hello</html>", "text/html"), "answered text/html, not JSON"),
    (reply(200, b'{"id": 5}'), "'id' is 5"),
    (reply(200, b'[1, 2]'), "not a JSON object"),
    (reply(302, b"", headers={"Location": "http://elsewhere/"}), "unexpected redirect 302"),
])
def test_garbage_answers_are_clear_errors(answer, message):
    with ScriptedServer(answer) as server, client_for(server.endpoint) as client:
        err, _ = elapsed(lambda: client.get_group(GID))
        assert isinstance(err, HsdsError) and err.errno == errno.EIO and message in str(err), str(err)
        assert len(server.seen) == 1


def _peak(fn):
    """(what fn raised or returned, the peak of Python's allocations meanwhile)."""
    tracemalloc.start()
    try:
        out, _ = elapsed(fn)
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_claimed_size_allocates_nothing():
    with ScriptedServer(reply(200, b"{}", length=10 << 30),
                        reply(200, b"x" * 100, "application/octet-stream", length=10 << 30)) as server, \
            client_for(server.endpoint) as client:
        err, peak = _peak(lambda: client.get_group(GID))
        assert isinstance(err, HsdsError) and "10737418240 bytes, at most 67108864 expected" in str(err)
        assert peak < 1 << 20
        err, peak = _peak(lambda: client.read_bytes(DID, (slice(0, 100),), 4))
        assert isinstance(err, HsdsError) and "10737418240 bytes, exactly 400 expected" in str(err)
        assert peak < 1 << 20


def test_an_endless_body_is_cut_at_its_bound():
    mib = 1 << 20
    with ScriptedServer(stream(200, 64 * mib), stream(200, 64 * mib, "application/octet-stream")) as server, \
            client_for(server.endpoint, max_json=mib, max_value=mib) as client:
        err, peak = _peak(lambda: client.get_group(GID))
        assert isinstance(err, HsdsError) and f"runs past {mib} bytes" in str(err)
        assert peak < 4 * mib
        vstr = np.dtype("O", metadata={"vlen": str})       # a variable-length read: no size known
        err, peak = _peak(lambda: client.read(DID, vstr, (slice(0, 10),)))
        assert isinstance(err, HsdsError) and f"runs past {mib} bytes" in str(err)
        assert peak < 4 * mib


@pytest.mark.parametrize("answer, message", [
    (reply(200, b"x" * 100, "application/octet-stream"), "has 100 bytes, exactly 400 expected"),
    (reply(200, b"x" * 100, "application/octet-stream", length=-1), "100 bytes of data, 400 expected"),
    (reply(200, b"x" * 1000, "application/octet-stream", length=-1), "runs past 400 bytes"),
    (reply(200, b'{"value": [1]}'), "answered application/json, not binary data"),
])
def test_binary_reads_are_exactly_the_size_asked(answer, message):
    with ScriptedServer(answer) as server, client_for(server.endpoint) as client:
        err, _ = elapsed(lambda: client.read_bytes(DID, (slice(0, 100),), 4))
        assert isinstance(err, HsdsError) and message in str(err), str(err)
        _, path, headers, _ = server.seen[0]
        assert headers["accept"] == "application/octet-stream" and "select=%5B0%3A100%5D" in path


def test_a_body_cut_off_or_a_dropped_connection_is_retried():
    data = np.arange(100, dtype="<i4")
    with ScriptedServer(reply(200, data.tobytes()[:100], "application/octet-stream", length=400), drop(),
                        reply(200, data.tobytes(), "application/octet-stream")) as server, \
            client_for(server.endpoint) as client:
        got = client.read(DID, "<i4", (slice(0, 100),))
        assert got.tolist() == data.tolist() and len(server.seen) == 3
        stats = client.stats()
        assert (stats["retries"], stats["errors"], stats["bytes_in"]) == (2, 0, 400)


def test_a_silent_server_times_out_without_retries():
    with ScriptedServer(stall(10), OK) as server, client_for(server.endpoint, timeout=0.5) as client:
        err, took = elapsed(lambda: client.get_group(GID))
        assert isinstance(err, HsdsError) and err.errno == errno.EIO and err.transient
        assert "no answer within 0.5 s" in str(err) and 0.4 < took < 2.0, took
        assert len(server.seen) == 1 and client.stats()["retries"] == 0


def test_stop_ends_a_retrying_request():
    with ScriptedServer(default=reply(503)) as server, \
            client_for(server.endpoint, retries=10, backoff=2.0, max_backoff=2.0) as client:
        threading.Timer(0.3, client.stop).start()
        err, took = elapsed(lambda: client.get_group(GID))
        assert isinstance(err, HsdsError) and err.status == 503 and took < 1.5, took
        assert len(server.seen) == 2


def test_a_listing_that_does_not_move_on_is_an_error():
    page = b'{"links": [{"title": "a", "class": "H5L_TYPE_SOFT", "h5path": "/x"}, ' \
           b'{"title": "b", "class": "H5L_TYPE_SOFT", "h5path": "/y"}]}'
    with ScriptedServer(default=reply(200, page)) as server, client_for(server.endpoint) as client:
        err, _ = elapsed(lambda: client.links(GID, page=2))
        assert isinstance(err, HsdsError) and "the page after 'b' starts at 'a'" in str(err)
        assert len(server.seen) == 2 and "Marker=b" in server.seen[1][1] and "Limit=2" in server.seen[1][1]
