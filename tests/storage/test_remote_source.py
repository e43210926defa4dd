"""The remote byte source (storage/remote) through the engine, against real servers on loopback
(tests/servers.py): what it reads equals h5py on the local original, how many requests it makes
(open, merged runs, parallel runs, read-ahead, a second open from the block cache), the version
pinned, faults retried then failed with an error naming the URL, and a read on the event loop's
thread never waiting for the network."""

from __future__ import annotations

import threading
import time

import h5py
import numpy as np
import pytest

from conftest import make_h5
from h5fs.errors import H5fsError
from h5fs.model.file import H5File
from h5fs.storage.byte_source import NOWAIT, WouldBlock, mark_event_loop_thread
from h5fs.storage.remote import RemoteOptions
from h5fs.storage.remote.client import RemoteChanged, RemoteError, bucket_region
from remote_support import fresh, publish, range_server, s3_server  # noqa: F401 - fixtures

MIB = 1 << 20


def build(f: h5py.File) -> None:
    rng = np.random.default_rng(1)
    f.create_dataset("contiguous", data=rng.integers(0, 1000, (1024, 1024), dtype="<i4"))      # 4 MiB
    f.create_dataset("gzip", data=np.arange(512 * 512, dtype="<f8").reshape(512, 512), chunks=(64, 64),
                     compression="gzip", shuffle=True)
    f.create_dataset("tiles", data=rng.random((512, 512)), chunks=(128, 128))
    g = f.create_group("group")
    g.attrs["title"] = "remote"
    g.create_dataset("small", data=np.arange(10, dtype="<i2"))


@pytest.fixture
def sample(tmp_path, publish):
    path = make_h5(tmp_path / "sample.h5", build, libver="latest")
    return path, publish(path, f"sample-{tmp_path.name}.h5")


def opts(tmp_path, **kw) -> RemoteOptions:
    kw.setdefault("cache_dir", str(tmp_path / "cache"))
    kw.setdefault("endpoint", None)
    return RemoteOptions(**kw)


def open_url(url: str, tmp_path, s3_server=None, **kw) -> H5File:
    if url.startswith("s3://"):
        kw["endpoint"], kw["region"] = s3_server.endpoint, "us-east-1"
    return H5File.open(url, remote=opts(tmp_path, **kw))


def settled(src) -> None:
    """Wait until no request of `src` is under way (read-ahead included)."""
    deadline = time.monotonic() + 10
    while src.stats()["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.01)


def raw(f: H5File, path: str) -> bytes:
    ds = f.resolve(path)
    return bytes(ds.read_raw(0, ds.raw_size))


@pytest.mark.parametrize("scheme", ["http", "s3"])
def test_reads_equal_h5py(sample, tmp_path, s3_server, scheme):
    path, urls = sample
    with open_url(urls[scheme], tmp_path, s3_server) as f, h5py.File(path) as ref:
        for name in ("contiguous", "gzip", "tiles", "group/small"):
            assert raw(f, "/" + name) == ref[name][()].tobytes(), name
        assert f.source.stats()["requests"] >= 2


def test_open_fetches_the_first_block_with_the_superblock(sample, tmp_path, range_server):
    _, urls = sample
    fresh(range_server)
    with open_url(urls["http"], tmp_path):
        st = range_server.stats()
    assert st["heads"] == 1 and st["gets"] == 1, st
    assert st["ranges"] == [(0, MIB)]


def test_adjacent_blocks_are_one_request(sample, tmp_path, range_server):
    _, urls = sample
    with open_url(urls["http"], tmp_path, block_kb=64) as f:
        ds = f.resolve("/contiguous")
        fresh(range_server)
        assert len(bytes(ds.read_raw(2 * MIB, 2 * MIB))) == 2 * MIB
        st = range_server.stats()
    assert st["gets"] == 1, st["ranges"]


def test_runs_apart_in_the_file_are_fetched_in_parallel(sample, tmp_path, range_server):
    _, urls = sample
    with open_url(urls["http"], tmp_path, block_kb=64) as f:
        size = f.source.size
        spans = [(p, 1000) for p in range(2 * MIB, size - 100_000, 1 * MIB)][:4]
        fresh(range_server)
        range_server.latency = 0.3
        t = time.monotonic()
        f.source.want(spans)
        took = time.monotonic() - t
        assert range_server.stats()["gets"] == len(spans) == 4
        range_server.latency = 0.0
    assert took < 0.9, f"4 requests of 0.3 s each took {took:.2f} s: not in parallel"


def test_a_sequential_reader_is_read_ahead(sample, tmp_path, range_server):
    _, urls = sample
    with open_url(urls["http"], tmp_path, block_kb=64) as f:
        src = f.source
        fresh(range_server)
        for pos in range(MIB, 5 * MIB, 64 * 1024):
            src.pread(64 * 1024, pos)
        settled(src)
        st = range_server.stats()
    assert st["gets"] < 64 // 4, f"{st['gets']} requests for 64 blocks read in order"


def test_nowait_and_the_event_loop_thread_never_fetch(sample, tmp_path, range_server):
    _, urls = sample
    with open_url(urls["http"], tmp_path, block_kb=64) as f:
        src = f.source
        buf = bytearray(100)
        fresh(range_server)
        with pytest.raises(BlockingIOError):
            src.preadv([buf], 3 * MIB, NOWAIT)
        got: list[BaseException] = []

        def loop_thread():
            mark_event_loop_thread()
            try:
                src.pread(100, 3 * MIB)
            except BaseException as e:   # noqa: BLE001 - the test looks at it
                got.append(e)
        t = threading.Thread(target=loop_thread)
        t.start()
        t.join()
        assert len(got) == 1 and isinstance(got[0], WouldBlock)
        assert range_server.stats()["gets"] == 0
        got[0].wait()          # what the FUSE boundary runs in a worker
        assert range_server.stats()["gets"] == 1
        assert src.preadv([buf], 3 * MIB, NOWAIT) == 100


def test_a_second_open_reads_from_the_block_cache(sample, tmp_path, range_server):
    path, urls = sample
    # read-ahead is skipped while its request slots are taken (timing): with slots to spare
    # both opens read ahead the same blocks, and the second finds them all
    with open_url(urls["http"], tmp_path, requests=32) as f:
        first = raw(f, "/gzip") + raw(f, "/contiguous")
        settled(f.source)   # read-ahead still queued at close is dropped, not kept
    fresh(range_server)
    with open_url(urls["http"], tmp_path, requests=32) as f:
        assert raw(f, "/gzip") + raw(f, "/contiguous") == first
        st = range_server.stats()
    assert st["gets"] == 0 and st["heads"] == 1, st


def test_a_replaced_object_fails_every_read_and_refreshes_the_cache(sample, tmp_path, range_server):
    path, urls = sample
    name = urls["http"].rsplit("/", 1)[1]
    with open_url(urls["http"], tmp_path, block_kb=64) as f:
        ds = f.resolve("/contiguous")
        before = bytes(ds.read_raw(0, 1000))
        range_server.replace(name, path.read_bytes()[:-1] + b"\x01")
        with pytest.raises(RemoteChanged, match=urls["http"]):
            ds.read_raw(3 * MIB, 1000)
        with pytest.raises(RemoteChanged):   # blocks of the old version are not served either
            f.source.pread(1000, 0)
        assert before
    fresh(range_server)
    with open_url(urls["http"], tmp_path, block_kb=64) as f:
        assert range_server.stats()["gets"] == 1, "the new version's cache starts empty"


@pytest.mark.parametrize("kind", ["500", "503", "drop"])
def test_transient_faults_are_retried(sample, tmp_path, range_server, kind):
    path, urls = sample
    with open_url(urls["http"], tmp_path, block_kb=64, retries=3) as f, h5py.File(path) as ref:
        fresh(range_server)
        range_server.fault(kind, count=2)
        assert raw(f, "/tiles") == ref["tiles"][()].tobytes()
        assert f.source.stats()["retries"] == 2


@pytest.mark.parametrize("kind", ["500", "drop", "stall"])
def test_persistent_faults_fail_the_read_not_the_source(sample, tmp_path, range_server, kind):
    path, urls = sample
    with open_url(urls["http"], tmp_path, block_kb=64, retries=1, timeout=1.0) as f, h5py.File(path) as ref:
        fresh(range_server)
        range_server.fault(kind, count=2, stall_seconds=5)
        t = time.monotonic()
        with pytest.raises(RemoteError, match=urls["http"]) as err:
            raw(f, "/tiles")
        assert err.value.transient and time.monotonic() - t < 10
        st = f.source.stats()
        assert st["failures"] >= 1 and st["last_errors"]
        range_server.fault(None)
        assert raw(f, "/tiles") == ref["tiles"][()].tobytes(), "the next read tries again"


@pytest.mark.parametrize("kind, words", [("404", "no such object"), ("403", "access denied"),
                                         ("no_range", "range requests")])
def test_unusable_objects_are_refused_at_open(sample, tmp_path, range_server, kind, words):
    _, urls = sample
    fresh(range_server)
    range_server.fault(kind, count=10)
    try:
        with pytest.raises(H5fsError, match=words) as err:
            open_url(urls["http"], tmp_path)
        assert urls["http"] in str(err.value)
    finally:
        range_server.fault(None)


def test_remote_objects_open_read_only(sample, tmp_path):
    _, urls = sample
    with pytest.raises(H5fsError, match="read-only"):
        H5File.open(urls["http"], writable=True, remote=opts(tmp_path))


def test_the_bucket_region_is_asked_of_the_server(s3_server):
    """With no region configured, S3's own answer (x-amz-bucket-region) is used."""
    s3_server.client.create_bucket(Bucket="h5fs-eu", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    assert bucket_region("h5fs-eu", s3_server.endpoint, 5) == "eu-west-1"
    assert bucket_region("h5fs-test", s3_server.endpoint, 5) == "us-east-1"
    assert bucket_region("h5fs-eu", "http://127.0.0.1:9", 1) is None   # nobody answers: the default


def test_a_server_ignoring_conditions_still_never_mixes_versions(sample, tmp_path, range_server):
    """The answer's own ETag is compared with the pinned one."""
    path, urls = sample
    name = urls["http"].rsplit("/", 1)[1]
    fresh(range_server)
    range_server.conditionals = False
    try:
        with open_url(urls["http"], tmp_path, block_kb=64) as f:
            ds = f.resolve("/contiguous")
            bytes(ds.read_raw(0, 1000))
            data = path.read_bytes()
            range_server.replace(name, data[:3 * MIB] + bytes(len(data) - 3 * MIB))   # same size
            with pytest.raises(RemoteChanged, match="ETag"):
                ds.read_raw(3 * MIB, 1000)
    finally:
        fresh(range_server)


def test_without_validators_only_the_size_tells_and_nothing_is_kept(sample, tmp_path, range_server, caplog):
    path, urls = sample
    name = urls["http"].rsplit("/", 1)[1]
    fresh(range_server)
    range_server.validators = False
    try:
        with open_url(urls["http"], tmp_path, block_kb=64) as f:
            assert f.source.stats()["cache"].startswith("private")
            assert "neither an ETag nor a Last-Modified" in caplog.text
            ds = f.resolve("/contiguous")
            range_server.replace(name, path.read_bytes() + b"more")
            with pytest.raises(RemoteChanged, match="size"):
                ds.read_raw(3 * MIB, 1000)
    finally:
        fresh(range_server)
