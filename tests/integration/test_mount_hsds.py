"""Mounts of HSDS domains through the real CLI, against the local HSDS of tests/hsds_server.py.

The same tree is written twice, by h5py into a local file and by h5pyd into a domain; both are
mounted and every name, byte, link and xattr of the two mounts must be the same (the local
mount is the oracle of how the views look; h5pyd's reading of the domain is the oracle of the
values). Then what only a service does: credentials from options, another writer's change
showing within `refresh`, `h5fs status`, and a service that stops answering.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import h5py
import h5pyd
import numpy as np
import pytest

from conftest import H5FS, force_unmount, is_mounted, run_h5fs, wait_until
from h5fs import mount_helper
from h5fs.fuse.mounts import find_mount
from hsds_server import PASSWORD, USER, HSDSServer, hsds  # noqa: F401 - the session fixture
from servers import environ
from units import unit_command

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="FUSE mounts need root here")

# the facts that say what an object is (the others say where it is kept: address, layout, storage size)
FACTS = ("kind", "dtype", "shape", "maxshape", "chunks", "filters", "fill_value")


def build(lib, f) -> None:
    """The tree both libraries write (`lib`: h5py or h5pyd)."""
    rng = np.random.default_rng(3)
    f.attrs["title"] = "a run kept in HSDS"
    f.attrs["version"] = np.int32(3)
    f.attrs["scales"] = np.array([0.5, 1.5, 2.5])
    g = f.create_group("climate")
    g.attrs["units"] = "degC"
    g.create_dataset("temperature", data=rng.normal(10, 5, (96, 64)).astype("<f4"), chunks=(32, 64),
                     compression="gzip", shuffle=True)
    g.create_dataset("counts", data=np.arange(1000, dtype=">i4"))
    g.create_dataset("grows", data=np.arange(30, dtype="<i8").reshape(10, 3), maxshape=(None, 3), chunks=(4, 3))
    g.create_dataset("scalar", data=np.float64(2.75))
    g.create_dataset("flags", data=np.array([True, False, True]))
    rec = np.dtype([("id", "<i4"), ("x", "<f8"), ("tag", "S4")])
    g.create_dataset("records", data=np.array([(1, 0.5, b"ab"), (2, 1.5, b"cd")], dtype=rec))
    g.create_dataset("names", data=np.array([b"alpha", b"beta", b"gamma"], dtype="S5"))
    deep = f.create_group("a/b/c")
    deep.create_dataset("cube", data=np.arange(2 * 3 * 4, dtype="<u2").reshape(2, 3, 4))
    deep.attrs["note"] = "three levels down"
    f["latest"] = lib.SoftLink("/climate/temperature")
    f["up"] = lib.SoftLink("/a/b")


@pytest.fixture(scope="module")
def twins(hsds, tmp_path_factory):   # noqa: F811 - the session fixture
    """(local .h5 path, HSDS domain) holding the same tree."""
    local = tmp_path_factory.mktemp("hsds-twin") / "run.h5"
    with h5py.File(local, "w") as f:
        build(h5py, f)
    domain = hsds.domain(f"mount-twin-{os.getpid()}.h5")
    with h5pyd.File(domain, "w", **hsds.h5pyd_kwargs()) as f:
        build(h5pyd, f)
    return local, domain


def url(domain: str) -> str:
    return f"hsds://{domain}"


def tree(root: Path) -> dict[str, tuple]:
    """Every name below `root` and what it shows: a directory, a symlink's text, a file's bytes,
    and the xattrs each carries (HDF5 attributes, and the facts that say what it is)."""
    out: dict[str, tuple] = {}
    for where, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            p = Path(where, name)
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("symlink", os.readlink(p))
                continue
            xattrs = {x: os.getxattr(p, x) for x in sorted(os.listxattr(p))}
            facts = {}
            for fact in FACTS:
                try:
                    facts[fact] = os.getxattr(p, f"user.h5fs.{fact}")
                except OSError as exc:
                    assert exc.errno == errno.ENODATA, (rel, fact)
            body = None if p.is_dir() else p.read_bytes()
            out[rel] = ("dir" if p.is_dir() else "file", os.stat(p).st_size if body is not None else 0,
                        body, xattrs, facts)
    return out


def test_a_domain_shows_as_the_same_file_would(hsds, twins, mount):   # noqa: F811
    local, domain = twins
    mine, theirs = mount(str(local)), mount(url(domain))
    a, b = tree(mine), tree(theirs)
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name] == b[name], name
    with h5pyd.File(domain, "r", **hsds.h5pyd_kwargs()) as f:   # the values are the service's
        assert np.array_equal(np.load(theirs / "climate/temperature.npy"), f["climate/temperature"][...])
        assert (theirs / "climate/counts").read_bytes() == f["climate/counts"][...].tobytes()
    root_attrs = {x: os.getxattr(theirs, x) for x in os.listxattr(theirs)}
    assert root_attrs["user.title"] == b"a run kept in HSDS"


def test_reads_at_any_offset_are_the_service_bytes(hsds, twins, mount):   # noqa: F811
    _, domain = twins
    mp = mount(url(domain))
    with h5pyd.File(domain, "r", **hsds.h5pyd_kwargs()) as f:
        want = f["climate/temperature"][...].tobytes()
    rng = np.random.default_rng(5)
    with open(mp / "climate/temperature", "rb") as fh:
        for _ in range(50):
            offset, size = int(rng.integers(0, len(want))), int(rng.integers(1, 20000))
            assert os.pread(fh.fileno(), size, offset) == want[offset:offset + size]


def test_credentials_from_options_and_the_service_in_status(hsds, twins, mount, tmp_path):   # noqa: F811
    _, domain = twins
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    saved = {k: os.environ.pop(k) for k in ("HS_USERNAME", "HS_PASSWORD", "HS_ENDPOINT")}
    try:
        mp = mount(url(domain), f"endpoint={hsds.endpoint}", f"username={USER}", f"password_file={secret}")
        assert (mp / "climate/counts").read_bytes() == np.arange(1000, dtype=">i4").tobytes()
        status = json.loads(os.getxattr(mp, "user.h5fs.status"))
        assert status["hsds"]["endpoint"] == hsds.endpoint and status["hsds"]["requests"] > 0
        text = run_h5fs("status", mp).stdout
        assert f"HSDS service {hsds.endpoint}" in text
    finally:
        os.environ.update(saved)


def test_a_wrong_password_or_a_missing_domain_is_a_clear_error(hsds, tmp_path):   # noqa: F811
    mp = tmp_path / "mnt"
    mp.mkdir()
    missing = run_h5fs("mount", url(hsds.domain("no-such-domain.h5")), mp)
    assert missing.returncode == 1 and "no-such-domain.h5" in missing.stderr
    secret = tmp_path / "wrong"
    secret.write_text("not the password")
    refused = run_h5fs("mount", "-o", f"password_file={secret}", url(hsds.domain("x.h5")), mp)
    assert refused.returncode == 1 and "x.h5" in refused.stderr
    assert not os.path.ismount(mp)


def test_another_writer_shows_within_refresh(hsds, mount):   # noqa: F811
    domain = hsds.domain(f"mount-refresh-{os.getpid()}.h5")
    with h5pyd.File(domain, "w", **hsds.h5pyd_kwargs()) as f:
        f["x"] = np.arange(4)
        f.attrs["state"] = "before"
    mp = mount(url(domain), "refresh=1")
    assert os.getxattr(mp, "user.state") == b"before" and sorted(os.listdir(mp)) == ["x", "x.npy"]
    with h5pyd.File(domain, "a", **hsds.h5pyd_kwargs()) as f:   # (h5pyd 1.0.0 cannot replace an attribute)
        f.create_group("later")
        f.attrs["added"] = "after"
    began = time.monotonic()
    assert wait_until(lambda: "later" in os.listdir(mp), timeout=10)
    assert wait_until(lambda: xattr(mp, "user.added") == b"after", timeout=10)
    assert time.monotonic() - began < 5   # refresh=1: within a second or two, not at some later time


def xattr(path: Path, name: str) -> bytes | None:
    try:
        return os.getxattr(path, name)
    except OSError as exc:
        assert exc.errno == errno.ENODATA
        return None


def test_a_service_that_stops_answers_eio_and_the_mount_survives(tmp_path, mount):
    server = HSDSServer().start()
    try:
        domain = server.domain("faults.h5")
        with h5pyd.File(domain, "w", **server.h5pyd_kwargs()) as f:
            f["x"] = np.arange(100_000, dtype="<f8")
            f.create_group("g")
        with environ(server.env()):   # the mount finds this service and its user
            mp = mount(url(domain), "timeout=2", "retries=0", "refresh=0")
        assert sorted(os.listdir(mp)) == ["g", "x", "x.npy"]
        server.stop()
        began = time.monotonic()
        with pytest.raises(OSError) as raised:
            (mp / "x").read_bytes()
        assert raised.value.errno == errno.EIO and time.monotonic() - began < 30
        assert os.path.ismount(mp)   # the daemon is alive: it answers the root
        os.stat(mp)
    finally:
        server.stop()


def test_mount_t_fuse_h5fs_and_an_fstab_line(hsds, twins, tmp_path):   # noqa: F811
    """mount(8) with its helper, then an fstab line with mount(8)'s own options among ours."""
    mount_helper.install()   # /sbin/mount.fuse.h5fs, /sbin/umount.h5fs, /usr/local/bin/h5fs
    _, domain = twins
    mp = tmp_path / "mp"
    mp.mkdir()
    fstab = tmp_path / "fstab"
    fstab.write_text(f"{url(domain)} {mp} fuse.h5fs ro,noauto,_netdev,endpoint={hsds.endpoint},refresh=2 0 0\n")
    try:
        for command in (["mount", "-t", "fuse.h5fs", url(domain), str(mp), "-o", f"ro,endpoint={hsds.endpoint}"],
                        ["mount", "-T", str(fstab), str(mp)]):
            proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
            assert proc.returncode == 0, proc.stderr
            m = find_mount(str(mp))
            assert (m.source, m.fstype) == (url(domain), "fuse.h5fs")
            assert (mp / "climate/counts").read_bytes() == np.arange(1000, dtype=">i4").tobytes()
            proc = subprocess.run(["umount", str(mp)], capture_output=True, text=True, timeout=60)
            assert proc.returncode == 0 and not is_mounted(mp), proc.stderr
    finally:
        if is_mounted(mp):
            force_unmount(mp)


def test_the_systemd_unit_serves_a_domain(hsds, twins, tmp_path):   # noqa: F811
    """The service's ExecStart as systemd runs it with FILE=hsds://... in the instance's conf."""
    mount_helper.install()
    _, domain = twins
    mp = tmp_path / "mp"
    mp.mkdir()
    daemon = subprocess.Popen(unit_command("ExecStart", mp, url(domain), f"ro,endpoint={hsds.endpoint}"),
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert wait_until(lambda: is_mounted(mp) or daemon.poll() is not None, 30)
        assert is_mounted(mp), daemon.stderr.read().decode()
        assert (mp / "a/b/c/cube").read_bytes() == np.arange(24, dtype="<u2").tobytes()
        daemon.send_signal(signal.SIGTERM)   # systemctl stop
        assert daemon.wait(timeout=60) == 0 and not is_mounted(mp)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(timeout=30)
        if is_mounted(mp):
            force_unmount(mp)


def test_help_names_hsds_and_its_options():
    text = subprocess.run(H5FS + ["mount", "--help"], capture_output=True, text=True).stdout
    assert "hsds://[HOST:PORT]/DOMAIN" in text
    for name in ("username=NAME", "password_file=PATH", "refresh=S"):
        assert name in text
