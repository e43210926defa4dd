"""Network faults and a replaced object under a real remote mount, over both protocols (the HTTP
range server; moto's S3 behind a FaultProxy): a server that answers 500, drops connections or
stalls while tools read. The reads that need the server answer EIO in bounded time and never
wrong bytes, the daemon stays up, its log names the URL, and once the fault clears the same reads
succeed (nothing is remembered as broken). A stalled request holds up only the read waiting for
it. An object replaced while mounted: what was not fetched yet answers EIO, nothing of the new
version is served; a new mount reads the new version.

Every command runs in a subprocess with a timeout: a hung mount fails the test instead of hanging
it. Values are compared with h5py's reading of the local files.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import _daemon_pid, make_h5, run_h5fs, wait_until
from remote_support import (BUCKET, fresh, publish, range_server, s3_proxy,  # noqa: F401 (fixtures)
                            s3_server)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="FUSE mounts need root")
PROTOCOLS = ("http", "s3")
EIO_TEXT = "Input/output error"
FAST = ["block_kb=4", "timeout=1", "retries=1"]
# reads that need bytes no earlier read fetched (small blocks: a block holds few objects); others
# may find theirs fetched with an earlier object (a lookup in a group reads its members' headers)
MUST_FAIL = {"listing", "big"}


def build(f: h5py.File, seed: int = 5) -> None:
    """`early` and the root's attribute lie in the first MiB (fetched at mount); `late` (a dense
    group: a fractal heap and a B-tree of names), its datasets and attributes past a 1.5 MiB
    dataset, written in a second session so that no metadata of theirs sits in the first MiB."""
    rng = np.random.default_rng(seed)
    f.attrs["title"] = "faults"
    f["early"] = np.arange(1000, dtype="<i4") * seed
    f["pad"] = rng.integers(0, 1 << 31, 3 << 18, dtype="<i4")


def build_late(f: h5py.File, seed: int = 5) -> None:
    rng = np.random.default_rng(seed + 1)
    late = f.create_group("late")
    late.attrs["units"] = f"m/s {seed}"
    for i in range(12):
        late.create_dataset(f"d{i:02d}", data=np.arange(100, dtype="<i8") * i * seed).attrs["i"] = i * seed
    # shuffle alone keeps the chunks' sizes: the variant's objects are where the original's are
    late.create_dataset("big", data=rng.random((256, 1024)), chunks=(32, 256), shuffle=True)
    late.create_dataset("words", data=[f"w{i:03d}-{seed}" for i in range(50)], dtype=h5py.string_dtype())
    late["sub/leaf"] = np.arange(7, dtype="<f4") + seed


def make_file(path: Path, seed: int = 5) -> Path:
    make_h5(path, lambda f: build(f, seed), libver="latest")
    with h5py.File(path, "a") as f:
        build_late(f, seed)
    return path


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> Path:
    return make_file(tmp_path_factory.mktemp("faults") / "faults.h5")


@pytest.fixture(scope="module")
def variant(tmp_path_factory) -> Path:
    """A new version of `original`: the same objects at the same addresses, other values (bytes
    of two versions mixed would read as plausible wrong values, not as a broken file)."""
    return make_file(tmp_path_factory.mktemp("faults") / "faults.h5", seed=9)


@pytest.fixture
def remote(request, original, publish, range_server, s3_server, s3_proxy, tmp_path):  # noqa: F811
    """(protocol, faulty server, URL, mount options) of a copy of `original`, published for this
    test only: the HTTP range server, or moto behind the fault proxy."""
    protocol = request.param
    name = f"faults-{tmp_path.name}.h5"
    urls = publish(original, name)
    server = range_server if protocol == "http" else s3_proxy
    fresh(server)
    opts = [f"cache_dir={tmp_path / 'cache'}"]
    if protocol == "s3":
        opts.append(f"endpoint={s3_proxy.url},region=us-east-1")
    try:
        yield protocol, server, urls[protocol], opts
    finally:
        fresh(server)
        (range_server.root / name).unlink(missing_ok=True)
        s3_server.delete(BUCKET, name)


def run(*cmd, timeout: float = 30) -> subprocess.CompletedProcess:
    """A tool's run; its time in `.seconds`."""
    t0 = time.monotonic()
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, timeout=timeout,
                          env={**os.environ, "LC_ALL": "C"})   # ls sorts bytewise, messages in English
    proc.seconds = time.monotonic() - t0
    return proc


def listing(group: h5py.Group) -> bytes:
    """`ls -1` of the group's directory."""
    names = [*group, *(n + ".npy" for n in group if isinstance(group[n], h5py.Dataset))]
    return "".join(f"{n}\n" for n in sorted(names)).encode()


def expected(path: Path) -> dict[str, bytes]:
    """What the reads below show of `path`, by h5py."""
    with h5py.File(path, "r") as f:
        late = f["late"]
        return {"early": f["early"][()].tobytes(), "big": late["big"][()].tobytes(),
                "words": "".join(s.decode() + "\n" for s in late["words"][()]).encode(),
                "leaf": late["sub/leaf"][()].tobytes(), "units": late.attrs["units"].encode(),
                "d07.i": str(late["d07"].attrs["i"]).encode(), "listing": listing(late),
                "root": listing(f), "title": f.attrs["title"].encode()}


def metadata_reads(mp: Path) -> dict[str, list]:
    """Reads of `late`'s metadata: its listing, an attribute of it and of a dataset in it."""
    return {"listing": ["ls", "-1", mp / "late"],
            "units": ["getfattr", "--only-values", "-n", "user.units", mp / "late"],
            "d07.i": ["getfattr", "--only-values", "-n", "user.i", mp / "late" / "d07"]}


def data_reads(mp: Path) -> dict[str, list]:
    return {"big": ["cat", mp / "late" / "big"], "words": ["cat", mp / "late" / "words"],
            "leaf": ["cat", mp / "late" / "sub" / "leaf"]}


def fails_with_eio(proc: subprocess.CompletedProcess, want: bytes, what: str) -> None:
    assert proc.returncode != 0, f"{what} succeeded while the server failed every request"
    assert EIO_TEXT in proc.stderr.decode(), (what, proc.stderr)
    assert want.startswith(proc.stdout), f"{what}: bytes other than the object's"


def eio_or_right(proc: subprocess.CompletedProcess, want: bytes, what: str) -> None:
    """A read whose bytes may have come with an earlier block: right, or EIO; never wrong."""
    if proc.returncode == 0:
        assert proc.stdout == want, what
    else:
        fails_with_eio(proc, want, what)


def all_right(reads: dict[str, list], want: dict[str, bytes]) -> None:
    for key, cmd in reads.items():
        proc = run(*cmd)
        assert proc.returncode == 0, (key, proc.stderr)
        assert proc.stdout == want[key], key


def daemon_up(mp: Path, pid: int) -> dict:
    """The daemon runs and answers `h5fs status`; its remote entry."""
    assert os.path.exists(f"/proc/{pid}"), "the daemon died"
    proc = run_h5fs("status", "--json", mp, timeout=10)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)[0]["remote"]


@pytest.mark.parametrize("fault", ["500", "drop", "stall"])
@pytest.mark.parametrize("remote", PROTOCOLS, indirect=True)
def test_faults_answer_eio_then_the_same_reads_succeed(remote, fault, original, mount):
    _, server, url, opts = remote
    want = expected(original)
    mp = mount(url, *opts, *FAST)
    pid = _daemon_pid(mp)
    assert run("cat", mp / "early").stdout == want["early"]   # fetched at mount
    # late's links and members' headers fetched, not all a listing needs (big's chunk index):
    # a listing would keep what it could not read as broken, were a network fault taken for the
    # file's
    assert run("getfattr", "-n", "user.i", mp / "late" / "d00").returncode == 0
    # every request fails, its retry too; a stall outlasts the 1 s timeout
    server.fault(fault, 100_000, stall_seconds=1.5)
    try:
        for key, cmd in metadata_reads(mp).items():
            proc = run(*cmd)
            (fails_with_eio if key in MUST_FAIL else eio_or_right)(proc, want[key], key)
            assert proc.seconds < 15, f"{key} took {proc.seconds:.1f} s"
        status = daemon_up(mp, pid)
        assert status["failures"] >= 1 and status["last_errors"]
        # what the mount fetched answers during the fault
        assert run("cat", mp / "early").stdout == want["early"]
    finally:
        fresh(server)
    log = mount.log_of(mp)
    assert url in log and "Traceback" not in log
    all_right(metadata_reads(mp), want)   # fetched again: nothing was remembered as broken
    # the metadata is here now; the data is not
    server.fault(fault, 100_000, stall_seconds=1.5)
    try:
        for key, cmd in data_reads(mp).items():
            proc = run(*cmd)
            (fails_with_eio if key in MUST_FAIL else eio_or_right)(proc, want[key], key)
            assert proc.seconds < 20, f"{key} took {proc.seconds:.1f} s"
        daemon_up(mp, pid)
    finally:
        fresh(server)
    all_right(data_reads(mp), want)
    all_right(metadata_reads(mp), want)
    daemon_up(mp, pid)


@pytest.mark.parametrize("remote", PROTOCOLS, indirect=True)
def test_a_stalled_request_holds_up_only_its_read(remote, original, mount):
    _, server, url, opts = remote
    want = expected(original)
    mp = mount(url, *opts, "block_kb=4", "timeout=5", "retries=0")
    pid = _daemon_pid(mp)
    prompt = {"root": ["ls", "-1", mp], "title": ["getfattr", "--only-values", "-n", "user.title", mp],
              "early": ["dd", f"if={mp / 'early'}", "iflag=direct", "bs=64k", "status=none"]}
    all_right(prompt, want)   # fetched: the root's listing and attributes, early's data
    before = server.stats()["requests"]
    server.fault("stall", 100_000, stall_seconds=6)
    # a read of data (in a worker) and a listing of members whose headers were not fetched (a
    # lookup on the daemon's event loop thread)
    stalled = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for cmd in (["cat", str(mp / "late" / "big")], ["ls", "-1", str(mp / "late")])]
    try:
        assert wait_until(lambda: server.stats()["requests"] >= before + 2, 10), "the reads sent no requests"
        # xattrs, listings and O_DIRECT reads reach the daemon (no kernel cache answers them)
        for key, cmd in prompt.items():
            proc = run(*cmd)
            assert proc.returncode == 0 and proc.stdout == want[key], (key, proc.stderr)
            assert proc.seconds < 1, f"{key} took {proc.seconds:.1f} s while requests stalled"
        assert daemon_up(mp, pid)["in_flight"] >= 1   # the status, of a Python process started meanwhile
        assert all(p.poll() is None for p in stalled), "a stalled read ended before the others were tried"
    finally:   # their EIO once timed out: test_faults_answer_eio_then_the_same_reads_succeed
        fresh(server)
        for p in stalled:
            if p.poll() is None:
                p.kill()
            p.wait()
    all_right({**metadata_reads(mp), **data_reads(mp)}, want)


@pytest.mark.parametrize("remote", PROTOCOLS, indirect=True)
def test_a_replaced_object_serves_nothing_of_the_new_version(remote, original, variant, mount,
                                                             range_server, s3_server):  # noqa: F811
    protocol, _, url, opts = remote
    old, new = expected(original), expected(variant)
    assert old["big"] != new["big"] and old["early"] != new["early"]
    mp = mount(url, *opts, "block_kb=4")
    all_right(metadata_reads(mp), old)
    name = url.rsplit("/", 1)[1]
    if protocol == "http":
        range_server.replace(name, variant.read_bytes())
    else:
        s3_server.put(BUCKET, name, variant)
    proc = run("cat", mp / "late" / "big")   # not fetched yet
    fails_with_eio(proc, old["big"], "big")
    for key, cmd in {**metadata_reads(mp), **data_reads(mp)}.items():
        proc = run(*cmd)
        eio_or_right(proc, old[key], key)
    early = run("dd", f"if={mp / 'early'}", "iflag=direct", "bs=64k", "status=none")
    eio_or_right(early, old["early"], "early")
    log = mount.log_of(mp)
    assert f"{url} changed since it was mounted" in log and "Traceback" not in log
    mount.unmount(mp)
    # a new mount, the same block cache: the new version, none of the old one's blocks
    mp = mount(url, *opts, "block_kb=4")
    all_right({**metadata_reads(mp), **data_reads(mp)}, new)
    assert run("cat", mp / "early").stdout == new["early"]
