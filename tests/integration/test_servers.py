"""The test servers themselves, driven by the standard library's HTTP client: what remote-mount
tests conclude from them is only as good as their ranges, validators, counters and faults."""

from __future__ import annotations

import email.utils
import http.client
import os
import threading
import time
import urllib.error
import urllib.request

import pytest

from remote_support import BUCKET, fresh, publish, range_server, s3_proxy, s3_server  # noqa: F401,F811 (fixtures)
from servers import FaultProxy, RangeServer, S3Server

SIZE = 100_000
DATA = bytes((i * 7 + i // 251) % 256 for i in range(SIZE))


@pytest.fixture(autouse=True)
def _fresh(range_server):
    fresh(range_server)
    (range_server.root / "obj.bin").write_bytes(DATA)


def request(server: RangeServer, method="GET", path="/obj.bin", **headers):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(method, path, headers={k.replace("_", "-"): v for k, v in headers.items()})
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


@pytest.mark.parametrize("spec, start, stop", [
    ("bytes=10-19", 10, 20), ("bytes=99990-", 99990, SIZE), ("bytes=-25", SIZE - 25, SIZE),
    ("bytes=99000-200000", 99000, SIZE), ("bytes=-200000", 0, SIZE), ("bytes=0-0", 0, 1)])
def test_single_range(range_server, spec, start, stop):
    status, headers, body = request(range_server, Range=spec)
    assert status == 206
    assert body == DATA[start:stop]
    assert headers["Content-Range"] == f"bytes {start}-{stop - 1}/{SIZE}"
    assert int(headers["Content-Length"]) == stop - start
    assert headers["Accept-Ranges"] == "bytes"


def test_whole_object_and_head(range_server):
    status, headers, body = request(range_server)
    assert (status, body) == (200, DATA) and "Content-Range" not in headers
    status, head, body = request(range_server, "HEAD")
    assert status == 200 and body == b"" and int(head["Content-Length"]) == SIZE
    assert head["ETag"] == headers["ETag"] and head["ETag"].startswith('"')
    assert head["Last-Modified"] == headers["Last-Modified"]
    # several ranges at once are not supported: the whole body, as RFC 9110 allows
    assert request(range_server, Range="bytes=0-1,5-6")[0] == 200


@pytest.mark.parametrize("spec", ["bytes=100000-", "bytes=200000-200010", "bytes=-0"])
def test_unsatisfiable_range(range_server, spec):
    status, headers, _ = request(range_server, Range=spec)
    assert status == 416 and headers["Content-Range"] == f"bytes */{SIZE}"


def test_missing_and_outside_root(range_server):
    assert request(range_server, path="/nothing.bin")[0] == 404
    assert request(range_server, path="/../../../../../etc/hostname")[0] == 404
    assert request(range_server, path="/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/hostname")[0] == 404
    assert request(range_server, path="/")[0] == 404


def test_keep_alive(range_server):
    conn = http.client.HTTPConnection("127.0.0.1", range_server.port, timeout=10)
    for start in (0, 5000, 90000):
        conn.request("GET", "/obj.bin", headers={"Range": f"bytes={start}-{start + 9}"})
        resp = conn.getresponse()
        assert resp.read() == DATA[start:start + 10] and not resp.will_close
    conn.close()


def test_conditional_requests(range_server):
    etag = request(range_server, "HEAD")[1]["ETag"]
    rng = {"Range": "bytes=0-9"}
    assert request(range_server, **rng, If_Match=etag)[0] == 206
    assert request(range_server, **rng, If_Match=f'"other", {etag}')[0] == 206
    assert request(range_server, **rng, If_Match="*")[0] == 206
    assert request(range_server, **rng, If_Match='"other"')[0] == 412
    assert request(range_server, **rng, If_None_Match=etag)[0] == 304
    assert request(range_server, **rng, If_None_Match='"other"')[0] == 206
    mtime = os.stat(range_server.root / "obj.bin").st_mtime
    before, after = (email.utils.formatdate(mtime + d, usegmt=True) for d in (-10, 10))
    assert request(range_server, **rng, If_Unmodified_Since=before)[0] == 412
    assert request(range_server, **rng, If_Unmodified_Since=after)[0] == 206
    status, _, body = request(range_server, **rng, If_Range=etag)
    assert (status, body) == (206, DATA[:10])
    status, _, body = request(range_server, **rng, If_Range='"stale"')
    assert (status, body) == (200, DATA)
    status, _, body = request(range_server, **rng, If_Range=before)
    assert (status, body) == (200, DATA)


def test_replace_changes_validators(range_server):
    _, old, _ = request(range_server, "HEAD")
    new_data = DATA[::-1]
    range_server.replace("obj.bin", new_data)
    status, new, body = request(range_server)
    assert body == new_data
    assert new["ETag"] != old["ETag"] and new["Last-Modified"] != old["Last-Modified"]
    assert request(range_server, Range="bytes=0-9", If_Match=old["ETag"])[0] == 412
    assert [p.name for p in range_server.root.iterdir() if p.name.startswith(".")] == []


def test_latency(range_server):
    range_server.latency = 0.2
    t = time.monotonic()
    assert request(range_server, Range="bytes=0-9")[0] == 206
    assert time.monotonic() - t >= 0.2
    # handlers sleep in parallel: 8 concurrent requests take about one latency, not eight
    t = time.monotonic()
    threads = [threading.Thread(target=request, args=(range_server,), kwargs={"Range": "bytes=0-9"})
               for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert 0.2 <= time.monotonic() - t < 0.2 * 4


def test_counters(range_server):
    request(range_server, Range="bytes=10-19")
    request(range_server, Range="bytes=-5")
    request(range_server, "HEAD")
    request(range_server)
    request(range_server, path="/nothing.bin")
    st = range_server.stats()
    assert (st["requests"], st["gets"], st["heads"]) == (5, 4, 1)
    assert st["ranges"] == [(10, 20), (SIZE - 5, SIZE), (0, SIZE)]
    assert st["bytes_sent"] == 10 + 5 + SIZE
    range_server.reset_stats()
    assert range_server.stats() == dict(requests=0, gets=0, heads=0, bytes_sent=0, ranges=[])


@pytest.mark.parametrize("kind, status", [("500", 500), ("503", 503), ("404", 404), ("403", 403)])
def test_status_faults(range_server, kind, status):
    range_server.fault(kind, count=2)
    assert request(range_server, Range="bytes=0-9")[0] == status
    assert request(range_server, "HEAD")[0] == status
    assert request(range_server, Range="bytes=0-9")[0] == 206    # only the next `count`
    range_server.fault(kind, count=5)
    range_server.fault(None)
    assert request(range_server, Range="bytes=0-9")[0] == 206
    assert range_server.stats()["bytes_sent"] == 20


def test_drop_fault(range_server):
    range_server.fault("drop")
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        request(range_server, Range="bytes=0-9")
    assert request(range_server, Range="bytes=0-9")[0] == 206


def test_no_range_fault(range_server):
    range_server.fault("no_range", count=1)
    status, headers, body = request(range_server, Range="bytes=0-9")
    assert (status, body) == (200, DATA) and "Content-Range" not in headers
    assert request(range_server, Range="bytes=0-9")[0] == 206


def test_stall_fault(range_server):
    range_server.fault("stall", stall_seconds=0.5)
    t = time.monotonic()
    status, _, body = request(range_server, Range="bytes=0-9")
    assert (status, body) == (206, DATA[:10]) and time.monotonic() - t >= 0.5
    with pytest.raises(ValueError):
        range_server.fault("teapot")


def stop_ends_a_stalled_request(server, fetch) -> None:
    """`server` (stalling) stops within 3 s while `fetch()` waits on it, which then fails."""
    errors = []

    def stalled():
        try:
            fetch()
        except OSError as e:
            errors.append(e)
    th = threading.Thread(target=stalled)
    th.start()
    while server.stats()["requests"] == 0:
        time.sleep(0.01)
    t = time.monotonic()
    server.stop()
    th.join(5)
    assert time.monotonic() - t < 3 and not th.is_alive() and errors


def test_stop_does_not_wait_for_a_stalled_handler(tmp_path):
    (tmp_path / "f").write_bytes(b"x" * 100)
    server = RangeServer(tmp_path, stall_seconds=60).start()
    server.fault("stall")
    url = server.url
    stop_ends_a_stalled_request(server, lambda: request(server, path="/f"))
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/f", timeout=2)


def test_publish(publish, range_server, s3_server, tmp_path):
    src = tmp_path / "pub.h5"
    src.write_bytes(DATA[:5000])
    urls = publish(src)
    assert urls["http"] == f"{range_server.url}/pub.h5"
    assert urls["s3"] == f"s3://{BUCKET}/pub.h5"
    assert urls["s3_options"] == f"endpoint={s3_server.endpoint},region=us-east-1"
    assert urllib.request.urlopen(urls["http"]).read() == DATA[:5000]
    got = s3_server.client.get_object(Bucket=BUCKET, Key="pub.h5")["Body"].read()
    assert got == DATA[:5000]
    assert os.environ["AWS_ACCESS_KEY_ID"] == "testing" and os.environ["AWS_REGION"] == "us-east-1"


# moto ------------------------------------------------------------------------------------------

def test_s3_range_and_stale_etag(s3_server):
    from botocore.exceptions import ClientError
    c = s3_server.client
    etag = s3_server.put(BUCKET, "r.bin", DATA)
    r = c.get_object(Bucket=BUCKET, Key="r.bin", Range="bytes=100-199", IfMatch=etag)
    assert r["ContentRange"] == f"bytes 100-199/{SIZE}" and r["Body"].read() == DATA[100:200]
    new = s3_server.put(BUCKET, "r.bin", DATA[::-1])
    assert new != etag
    with pytest.raises(ClientError) as exc:
        c.get_object(Bucket=BUCKET, Key="r.bin", Range="bytes=0-9", IfMatch=etag)
    assert exc.value.response["Error"]["Code"] == "PreconditionFailed"
    s3_server.delete(BUCKET, "r.bin")
    with pytest.raises(ClientError) as exc:
        c.head_object(Bucket=BUCKET, Key="r.bin")
    assert exc.value.response["Error"]["Code"] == "404"


def test_s3_anonymous_reads_need_a_policy(s3_server):
    s3_server.create_bucket("h5fs-servers-public")
    s3_server.put("h5fs-servers-public", "p.bin", DATA[:100])
    url = f"{s3_server.endpoint}/h5fs-servers-public/p.bin"
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(url)
    assert exc.value.code == 403
    s3_server.set_public("h5fs-servers-public")
    req = urllib.request.Request(url, headers={"Range": "bytes=10-19"})
    assert urllib.request.urlopen(req).read() == DATA[10:20]
    assert urllib.request.urlopen(urllib.request.Request(url, method="HEAD")).status == 200


def test_s3_server_process_goes_away():
    server = S3Server().start()
    proc = server._proc
    assert urllib.request.urlopen(server.endpoint + "/moto-api/").status == 200
    server.stop()
    assert proc.poll() is not None
    with pytest.raises(OSError):
        urllib.request.urlopen(server.endpoint + "/", timeout=2)


# obstore (h5fs's client) against both servers: the exception each answer becomes ---------------

def _http_store(server: RangeServer):
    from obstore.store import HTTPStore
    return HTTPStore.from_url(server.url, retry_config={"max_retries": 0},
                              client_options={"allow_http": True, "timeout": "500ms"})


@pytest.mark.parametrize("kind, error", [
    ("500", "GenericError"), ("503", "GenericError"), ("drop", "GenericError"),
    ("stall", "GenericError"), ("404", "FileNotFoundError"), ("403", "PermissionDeniedError"),
    ("no_range", "NotSupportedError")])
def test_obstore_sees_faults(range_server, kind, error):
    import obstore
    store = _http_store(range_server)
    range_server.fault(kind, stall_seconds=1.5)
    with pytest.raises(Exception) as exc:
        obstore.get(store, "obj.bin", options={"range": (0, 100)}).bytes()
    assert type(exc.value).__name__ == error
    got = obstore.get(store, "obj.bin", options={"range": (0, 100)})
    assert bytes(got.bytes()) == DATA[:100]


def test_obstore_conditional_get(range_server, s3_server):
    import obstore
    from obstore.exceptions import NotModifiedError, PreconditionError
    from obstore.store import S3Store
    s3_server.put(BUCKET, "obj.bin", DATA)
    s3 = S3Store(BUCKET, endpoint=s3_server.endpoint, region="us-east-1", access_key_id="testing",
                 secret_access_key="testing", client_options={"allow_http": True},
                 virtual_hosted_style_request=False, retry_config={"max_retries": 0})
    for store, replace in ((_http_store(range_server), lambda d: range_server.replace("obj.bin", d)),
                           (s3, lambda d: s3_server.put(BUCKET, "obj.bin", d))):
        meta = obstore.head(store, "obj.bin")
        assert meta["size"] == SIZE
        got = obstore.get(store, "obj.bin", options={"range": (10, 20), "if_match": meta["e_tag"]})
        assert bytes(got.bytes()) == DATA[10:20] and got.meta["e_tag"] == meta["e_tag"]
        with pytest.raises(NotModifiedError):
            obstore.get(store, "obj.bin", options={"if_none_match": meta["e_tag"]})
        replace(DATA[::-1])
        with pytest.raises(PreconditionError):
            obstore.get(store, "obj.bin", options={"range": (10, 20), "if_match": meta["e_tag"]})


# the proxy that gives moto latency, faults and counters -----------------------------------------

def _s3_store(endpoint: str):
    from obstore.store import S3Store
    return S3Store(BUCKET, endpoint=endpoint, region="us-east-1", access_key_id="testing",
                   secret_access_key="testing", virtual_hosted_style_request=False,
                   client_options={"allow_http": True, "timeout": "500ms"}, retry_config={"max_retries": 0})


def test_s3_proxy_forwards_and_counts(s3_server, s3_proxy):
    import obstore
    fresh(s3_proxy)
    s3_server.put(BUCKET, "p.bin", DATA)
    store = _s3_store(s3_proxy.url)
    assert obstore.head(store, "p.bin")["size"] == SIZE
    assert bytes(obstore.get_range(store, "p.bin", start=100, end=300)) == DATA[100:300]
    obstore.put(store, "up.bin", b"through the proxy")     # signed with the proxy's Host: moto accepts
    assert s3_server.client.get_object(Bucket=BUCKET, Key="up.bin")["Body"].read() == b"through the proxy"
    st = s3_proxy.stats()
    assert (st["requests"], st["gets"], st["heads"]) == (3, 1, 1)
    assert st["ranges"] == [(100, 300)] and st["bytes_sent"] == 200
    s3_proxy.latency = 0.1
    t = time.monotonic()
    obstore.get_range(store, "p.bin", start=0, end=10)
    assert time.monotonic() - t >= 0.1
    fresh(s3_proxy)


@pytest.mark.parametrize("kind, error", [
    ("500", "GenericError"), ("drop", "GenericError"), ("stall", "GenericError"),
    ("404", "FileNotFoundError"), ("403", "PermissionDeniedError"), ("no_range", "GenericError")])
def test_s3_proxy_faults(s3_server, s3_proxy, kind, error):
    import obstore
    fresh(s3_proxy)
    s3_server.put(BUCKET, "f.bin", DATA)
    store = _s3_store(s3_proxy.url)
    s3_proxy.fault(kind, stall_seconds=1.5)
    with pytest.raises(Exception) as exc:
        obstore.get(store, "f.bin", options={"range": (0, 100)}).bytes()
    assert type(exc.value).__name__ == error
    assert bytes(obstore.get_range(store, "f.bin", start=0, end=100)) == DATA[:100]
    fresh(s3_proxy)


def test_proxy_stop_with_a_stalled_request(s3_server):
    proxy = FaultProxy(s3_server.endpoint, stall_seconds=60).start()
    url = proxy.url
    proxy.fault("stall")
    stop_ends_a_stalled_request(proxy, lambda: urllib.request.urlopen(url + "/", timeout=10))
