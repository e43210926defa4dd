"""What a user touches to mount a URL, through the real commands against real servers on loopback
(tests/servers.py: an HTTP range server and moto's S3): `h5fs mount URL`, the errors it reports,
`h5fs check URL`, `h5fs status`, `mount -t fuse.h5fs`, an fstab line and the systemd unit's
command. Every value read is compared with h5py's reading of the local original.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from email.utils import parsedate_to_datetime

import h5py
import numpy as np
import pytest

from conftest import H5FS, _daemon_pid, force_unmount, is_mounted, make_h5, run_h5fs, saved, wait_until
from h5fs import mount_helper
from h5fs.fuse.mounts import find_mount
from units import unit_command
from remote_support import fresh, publish, range_server, s3_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mount(8) and its helpers need root")
PROTOCOLS = ("http", "s3")


def build(f):
    f["x"] = np.arange(1000, dtype="<i4")
    # 2 MiB that gzip hardly shrinks: the file is larger than what a mount fetches first (1 MiB)
    f.create_dataset("big", data=np.random.default_rng(0).random((512, 1024), dtype="<f4"), chunks=(64, 1024),
                     compression="gzip", shuffle=True)
    f["plain"] = np.random.default_rng(1).random((512, 1024), dtype="<f4")   # 2 MiB read by a worker thread
    f["g/y"] = np.linspace(0, 1, 100).reshape(10, 10)
    f.attrs["title"] = "remote run"
    f["g"].attrs["scale"] = np.array([1.5, 2.5], dtype="<f8")


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    return make_h5(tmp_path_factory.mktemp("remote-cli") / "run.h5", build, libver="latest")


@pytest.fixture
def urls(original, publish, range_server):   # noqa: F811 (fixtures)
    fresh(range_server)
    return publish(original)


def mount_args(urls: dict, protocol: str, tmp_path) -> tuple[str, list[str]]:
    """(URL, options) of a mount of the published file that keeps its blocks under tmp_path."""
    opts = [f"cache_dir={tmp_path / 'cache'}"]
    if protocol == "s3":
        opts.append(urls["s3_options"])
    return urls[protocol], opts


def findmnt_source(mp) -> str:
    return subprocess.run(["findmnt", "-n", "-o", "SOURCE", str(mp)], capture_output=True, text=True).stdout.strip()


def last_modified(protocol: str, urls: dict, s3_server) -> int:   # noqa: F811
    """The object's Last-Modified as the server states it, in whole seconds."""
    if protocol == "s3":
        key = urls["s3"].split("/", 3)[3]
        return int(s3_server.client.head_object(Bucket="h5fs-test", Key=key)["LastModified"].timestamp())
    with urllib.request.urlopen(urllib.request.Request(urls["http"], method="HEAD")) as answer:
        return int(parsedate_to_datetime(answer.headers["Last-Modified"]).timestamp())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_mount_a_url_and_read_what_h5py_reads(protocol, urls, original, mount, tmp_path, s3_server):  # noqa: F811
    url, opts = mount_args(urls, protocol, tmp_path)
    mp = mount(url, *opts)
    with h5py.File(original, "r") as f:
        assert (mp / "x").read_bytes() == f["x"][...].tobytes()
        assert (mp / "big").read_bytes() == f["big"][...].tobytes()
        assert (mp / "g" / "y.npy").read_bytes() == saved(f["g/y"][...])
        assert os.getxattr(mp, "user.title").decode() == f.attrs["title"]
        scale = json.loads(os.getxattr(mp / "g", "user.scale"))
        assert scale == f["g"].attrs["scale"].tolist()
    # the mount names the URL as it was given
    assert findmnt_source(mp) == url
    assert os.getxattr(mp, "user.h5fs.file").decode() == url
    # no local file to take the owner from: the mounting user's; times: the object's Last-Modified
    st = os.stat(mp)
    assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())
    assert int(st.st_mtime) == last_modified(protocol, urls, s3_server)
    assert os.statvfs(mp).f_blocks == (original.stat().st_size + 4095) // 4096   # df: the object's size
    # read-only: edits answer EROFS
    for edit in (lambda: open(mp / "x", "r+b"), lambda: os.mkdir(mp / "new"), lambda: os.setxattr(mp, "user.t", b"1")):
        with pytest.raises(OSError) as err:
            edit()
        assert err.value.errno == 30   # EROFS
    assert json.loads(os.getxattr(mp, "user.h5fs.status"))["mode"] == "ro"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_rw_is_refused_with_the_reason(protocol, urls, tmp_path):
    url, opts = mount_args(urls, protocol, tmp_path)
    mp = tmp_path / "mp"
    mp.mkdir()
    proc = run_h5fs("mount", "-o", ",".join(opts + ["rw"]), url, mp)
    assert proc.returncode == 2
    assert f"-o rw: {url} is a remote object, mounted read-only" in proc.stderr
    assert "cannot be written in place" in proc.stderr
    assert not is_mounted(mp)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def failed_mount(url: str, opts: list[str], tmp_path) -> str:
    """`h5fs mount` of what cannot be mounted: exit 1, nothing mounted; its one line of stderr."""
    mp = tmp_path / "mp"
    mp.mkdir(exist_ok=True)
    proc = run_h5fs("mount", *(["-o", ",".join(opts)] if opts else []), url, mp)
    assert not is_mounted(mp)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"h5fs: {url}: "), lines[0]
    return lines[0]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_missing_object_is_one_line_and_exit_1(protocol, urls, tmp_path):
    url, opts = mount_args(urls, protocol, tmp_path)
    missing = url.replace("run.h5", "no-such-file.h5")
    assert missing != url
    assert failed_mount(missing, opts, tmp_path) == f"h5fs: {missing}: no such object (404)"


def test_refused_connection_is_one_line_and_exit_1(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/run.h5"
    line = failed_mount(url, ["retries=1"], tmp_path)
    assert "Connection refused" in line and "after 1 retries" in line


def test_unknown_host_is_one_line_and_exit_1(tmp_path):
    url = "http://no-such-host.invalid/run.h5"   # .invalid never resolves (RFC 2606)
    line = failed_mount(url, ["retries=0", "timeout=5"], tmp_path)
    assert "dns error" in line


def test_refused_s3_endpoint_is_one_line_and_exit_1(tmp_path):
    url = "s3://h5fs-test/run.h5"
    line = failed_mount(url, [f"endpoint=http://127.0.0.1:{closed_port()}", "retries=0"], tmp_path)
    assert "Connection refused" in line


@pytest.mark.parametrize("fault, count, opts, expect", [
    ("403", 1, [], "access denied"),
    ("no_range", 2, ["block_kb=64"], "does not support range requests"),   # HEAD, then the first GET
    ("stall", 1, ["timeout=1", "retries=0"], "timed out"),
])
def test_server_faults_at_mount_are_one_line_and_exit_1(fault, count, opts, expect, urls, range_server,  # noqa: F811
                                                        tmp_path):
    stall = range_server.stall_seconds
    range_server.fault(fault, count, stall_seconds=5)
    try:
        line = failed_mount(urls["http"], opts + [f"cache_dir={tmp_path / 'cache'}"], tmp_path)
    finally:
        fresh(range_server)
        range_server.stall_seconds = stall
    assert expect in line, line


def test_remote_options_on_a_local_file_exit_2(original, tmp_path):
    mp = tmp_path / "mp"
    mp.mkdir()
    proc = run_h5fs("mount", "-o", "ro,block_kb=64,requests=4", original, mp)
    assert proc.returncode == 2
    assert f"-o block_kb,requests: options of a URL (s3://, http(s)://); {original} is a local file" in proc.stderr
    assert not is_mounted(mp)
    proc = run_h5fs("check", "-o", "timeout=5", original)
    assert proc.returncode == 2 and "options of a URL" in proc.stderr


def test_s3_options_on_an_http_url_exit_2(urls, tmp_path):
    mp = tmp_path / "mp"
    mp.mkdir()
    proc = run_h5fs("mount", "-o", "anonymous", urls["http"], mp)
    assert proc.returncode == 2 and "-o anonymous: options of an s3:// URL" in proc.stderr


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_check_a_url(protocol, urls, original, tmp_path):
    url, opts = mount_args(urls, protocol, tmp_path)
    proc = run_h5fs("check", "-o", ",".join(opts), url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    local = run_h5fs("check", original)
    assert local.returncode == 0
    # the same walk, the same verdict and figures as on the local original
    assert proc.stdout.strip() == local.stdout.strip().replace(str(original), url)
    missing = url.replace("run.h5", "no-such-file.h5")
    proc = run_h5fs("check", "-o", ",".join(opts), missing)
    assert proc.returncode == 2 and proc.stderr.strip() == f"h5fs: {missing}: no such object (404)"
    proc = run_h5fs("check", "--repair", "-o", ",".join(opts), url)
    assert proc.returncode == 2 and "a remote object is only read" in proc.stderr
    proc = run_h5fs("check", "-o", "cache_mb=4", url)
    assert proc.returncode == 2 and "check takes only the options of a URL" in proc.stderr


def test_status_shows_the_remote_source(urls, original, range_server, mount, tmp_path):  # noqa: F811
    mp = mount(urls["http"], f"cache_dir={tmp_path / 'cache'}", "block_kb=64")
    assert len((mp / "big").read_bytes()) == 512 * 1024 * 4
    entry = settled(mp)
    served = range_server.stats()
    remote = entry["remote"]
    assert remote["url"] == urls["http"] and entry["file"] == urls["http"]
    # what the daemon counts is what the server saw (no faults: no retries)
    assert remote["requests"] == served["requests"] >= 2   # a HEAD and at least one GET
    assert remote["bytes_fetched"] == served["bytes_sent"] > 0
    assert remote["retries"] == remote["failures"] == 0 and remote["last_errors"] == []
    assert remote["cache_misses"] > 0 and remote["block_kb"] == 64
    assert remote["cache"].startswith(str(tmp_path / "cache"))
    assert remote["cache_bytes"] >= remote["bytes_fetched"] - 64 * 1024
    text = run_h5fs("status", mp)
    assert text.returncode == 0
    assert f"remote: {remote['requests']} requests, " in text.stdout
    assert f"block cache: {remote['cache_hits']} hits, {remote['cache_misses']} misses" in text.stdout
    assert f"in {remote['cache']} (64 KiB blocks)" in text.stdout


def settled(mp) -> dict:
    """`h5fs status --json` of the mount once no request (read-ahead too) is in flight."""
    box = {}

    def idle() -> bool:
        proc = run_h5fs("status", "--json", mp)
        assert proc.returncode == 0, proc.stderr
        box["entry"] = json.loads(proc.stdout)[0]
        return box["entry"]["remote"]["in_flight"] == 0

    assert wait_until(idle, 30, 0.1)
    return box["entry"]


def test_status_names_the_last_errors(urls, original, range_server, mount, tmp_path):  # noqa: F811
    mp = mount(urls["http"], f"cache_dir={tmp_path / 'cache'}", "block_kb=64", "retries=1")
    range_server.fault("500", 1000)   # every request fails, its retry too: the read answers EIO
    try:
        with pytest.raises(OSError) as err:
            (mp / "big").read_bytes()
        assert err.value.errno == 5
        remote = settled(mp)["remote"]
    finally:
        fresh(range_server)
    assert remote["failures"] >= 1 and remote["retries"] == remote["failures"]   # each failed after 1 retry
    assert "500" in remote["last_errors"][-1]
    text = run_h5fs("status", mp).stdout
    assert f"{remote['retries']} retries, {remote['failures']} failures" in text
    assert "last request errors:" in text and remote["last_errors"][-1] in text
    with h5py.File(original, "r") as f:   # the mount survives: the next read fetches again
        assert (mp / "big").read_bytes() == f["big"][...].tobytes()


def test_a_replaced_object_answers_eio_naming_the_url(urls, original, range_server, mount, tmp_path):  # noqa: F811
    mp = mount(urls["http"], f"cache_dir={tmp_path / 'cache'}", "block_kb=4")
    with h5py.File(original, "r") as f:
        assert (mp / "x").read_bytes() == f["x"][...].tobytes()
    range_server.replace("run.h5", original.read_bytes())   # same bytes, a new version (ETag)
    with pytest.raises(OSError) as err:
        (mp / "big").read_bytes()   # past what the mount fetched first
    assert err.value.errno == 5
    with pytest.raises(OSError) as err:   # from then on every read that reaches the daemon
        (mp / "g" / "y.npy").read_bytes()
    assert err.value.errno == 5
    remote = json.loads(run_h5fs("status", "--json", mp).stdout)[0]["remote"]
    assert remote["changed"].startswith(f"{urls['http']} changed since it was mounted")
    assert remote["changed"] in run_h5fs("status", mp).stdout
    log = mount.log_of(mp)
    assert f"{urls['http']} changed since it was mounted" in log and "Traceback" not in log


def test_profile_of_the_shared_files(urls, original, mount, tmp_path, monkeypatch):
    """profile= takes a profile of the credentials file (moto takes any keys: what is checked is
    that the profile is looked up, found or named as missing)."""
    creds = tmp_path / "credentials"
    creds.write_text("[lab]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    url, opts = mount_args(urls, "s3", tmp_path)
    mp = mount(url, *opts, "profile=lab")
    with h5py.File(original, "r") as f:
        assert (mp / "x").read_bytes() == f["x"][...].tobytes()
    line = failed_mount(url, opts + ["profile=nobody"], tmp_path)
    assert "AWS profile 'nobody' is in neither" in line


def test_anonymous_reads_a_public_bucket_and_is_refused_by_a_private_one(original, s3_server, mount,  # noqa: F811
                                                                         tmp_path):
    s3_server.create_bucket("h5fs-public")   # its own bucket: the shared one stays private
    s3_server.put("h5fs-public", "run.h5", original)
    s3_server.set_public("h5fs-public")
    s3_server.put("h5fs-test", "private-run.h5", original)
    opts = [s3_server.mount_options(), "anonymous", f"cache_dir={tmp_path / 'cache'}"]
    mp = mount("s3://h5fs-public/run.h5", *opts)
    with h5py.File(original, "r") as f:
        assert (mp / "big").read_bytes() == f["big"][...].tobytes()
    line = failed_mount("s3://h5fs-test/private-run.h5", opts, tmp_path)
    assert "access denied" in line and "403" in line


def test_a_url_with_a_query_string_is_refused(urls, tmp_path):
    mp = tmp_path / "mp"
    mp.mkdir()
    url = urls["http"] + "?X-Amz-Signature=abc"
    proc = run_h5fs("mount", url, mp)
    assert proc.returncode == 2 and "a URL with a query string (a presigned URL) is not supported" in proc.stderr
    assert not is_mounted(mp)


def test_a_url_with_a_password_is_refused(urls, tmp_path):
    """It would be shown to every user: /proc/mounts, the status xattr, the log."""
    mp = tmp_path / "mp"
    mp.mkdir()
    url = urls["http"].replace("http://", "http://reader:s3cret@")
    proc = run_h5fs("mount", url, mp)
    assert proc.returncode == 2 and "user name or password" in proc.stderr and "s3cret" not in proc.stderr
    assert not is_mounted(mp)


@pytest.mark.parametrize("how", ["sigterm", "umount -z"])
def test_stopping_during_a_stall_takes_one_timeout(how, urls, range_server, mount, tmp_path):  # noqa: F811
    """systemctl stop, or a lazy h5fs umount, while a read waits for a stalled server: the
    daemon gives the read up and exits once the request under way times out, without the
    retries a read would get (a plain umount of a mount in use is EBUSY, as for any mount)."""
    url, opts = mount_args(urls, "http", tmp_path)
    mp = mount(url, *opts, "timeout=2", "retries=3")
    pid = _daemon_pid(mp)
    range_server.fault("stall", count=100, stall_seconds=60)
    before = range_server.stats()["gets"]
    reader = subprocess.Popen(["cat", str(mp / "plain")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: range_server.stats()["gets"] > before, 10)   # the read waits on the server
        time.sleep(0.3)
        started = time.monotonic()
        if how == "sigterm":
            os.kill(pid, signal.SIGTERM)
        else:
            assert run_h5fs("umount", "-z", mp).returncode == 0
        assert wait_until(lambda: not os.path.exists(f"/proc/{pid}"), 30)
        took = time.monotonic() - started
        # the request under way ends at its 2 s timeout; four attempts with backoff would take 9 s
        assert took < 5, f"the daemon took {took:.1f} s to stop"
        assert reader.wait(timeout=10) != 0
    finally:
        range_server.fault(None)
        if reader.poll() is None:
            reader.kill()


# -- mount(8), fstab and the systemd unit ---------------------------------------------------------

@pytest.fixture(scope="module")
def helpers():
    mount_helper.install()   # /sbin/mount.fuse.h5fs, /sbin/umount.h5fs, /usr/local/bin/h5fs


def unmounted_by(command: list[str], mp) -> None:
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert not is_mounted(mp)


def test_mount_t_fuse_h5fs_with_an_http_url(helpers, urls, original, tmp_path):
    mp = tmp_path / "mp"
    mp.mkdir()
    try:
        proc = subprocess.run(["mount", "-t", "fuse.h5fs", urls["http"], str(mp), "-o",
                               f"ro,nofail,block_kb=256,cache_dir={tmp_path / 'cache'},log={tmp_path / 'log'}"],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        m = find_mount(str(mp))
        assert (m.source, m.fstype) == (urls["http"], "fuse.h5fs") and findmnt_source(mp) == urls["http"]
        with h5py.File(original, "r") as f:
            assert (mp / "g" / "y").read_bytes() == f["g/y"][...].tobytes()
        assert json.loads(os.getxattr(mp, "user.h5fs.status"))["remote"]["block_kb"] == 256
        unmounted_by(["umount", str(mp)], mp)
    finally:
        if is_mounted(mp):
            force_unmount(mp)


def test_mount_t_fuse_h5fs_refuses_rw_of_a_url(helpers, urls, tmp_path):
    mp = tmp_path / "mp"
    mp.mkdir()
    proc = subprocess.run(["mount", "-t", "fuse.h5fs", urls["http"], str(mp), "-o", "rw"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "mounted read-only" in proc.stderr
    assert not is_mounted(mp)


def test_fstab_line_with_an_s3_url(helpers, urls, original, tmp_path):
    mp = tmp_path / "mp"
    mp.mkdir()
    fstab = tmp_path / "fstab"
    fstab.write_text(f"{urls['s3']} {mp} fuse.h5fs ro,noauto,_netdev,{urls['s3_options']},"
                     f"cache_dir={tmp_path / 'cache'} 0 0\n")
    try:
        proc = subprocess.run(["mount", "-T", str(fstab), str(mp)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert findmnt_source(mp) == urls["s3"]
        with h5py.File(original, "r") as f:
            assert (mp / "x").read_bytes() == f["x"][...].tobytes()
        unmounted_by(["umount", str(mp)], mp)
    finally:
        if is_mounted(mp):
            force_unmount(mp)


def test_systemd_unit_command_with_a_url(helpers, urls, original, tmp_path):
    """The service's ExecStart as systemd runs it with FILE=URL in the instance's conf."""
    mp = tmp_path / "mp"
    mp.mkdir()
    cmd = unit_command("ExecStart", mp, urls["http"], f"ro,cache_dir={tmp_path / 'cache'}")
    assert cmd[0] == "/usr/local/bin/h5fs"
    daemon = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert wait_until(lambda: is_mounted(mp) or daemon.poll() is not None, 30)
        assert is_mounted(mp), daemon.stderr.read().decode()
        assert findmnt_source(mp) == urls["http"]
        assert (mp / "x").read_bytes() == np.arange(1000, dtype="<i4").tobytes()
        daemon.send_signal(signal.SIGTERM)   # systemctl stop
        assert daemon.wait(timeout=60) == 0
        assert not is_mounted(mp)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(timeout=30)
        if is_mounted(mp):
            force_unmount(mp)


def test_help_names_urls_and_their_options():
    proc = subprocess.run(H5FS + ["mount", "--help"], capture_output=True, text=True)
    assert "s3://BUCKET/KEY" in proc.stdout
    for name in ("endpoint=URL", "region=NAME", "anonymous", "profile=NAME", "cache_dir=DIR", "disk_cache_mb=N",
                 "block_kb=N", "requests=N", "retries=N", "timeout=S"):
        assert name in proc.stdout
