"""Edits of HSDS domains through a read-write mount, with real tools, against the local HSDS of
tests/hsds_server.py. What the mount did is read back through the service's REST API with the
client h5fs's own tests check against h5pyd (tests/storage/test_hsds_client.py): h5pyd 1.0.0
reads a domain through HSDS's summary, which a background scan writes some seconds after the
last change, so right after an edit it may still show the domain as it was.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
from pathlib import Path

import h5pyd
import numpy as np
import pytest

from conftest import _daemon_pid, force_unmount, wait_until
from h5fs.storage.hsds import HsdsClient
from hsds_server import PASSWORD, USER, hsds  # noqa: F401 - the session fixture

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="FUSE mounts need root here")


@pytest.fixture
def domain(hsds, request):   # noqa: F811 - the session fixture
    """A fresh domain: /x (100 float64), /g with an attribute and /g/m (a resizable 2-D int32)."""
    name = hsds.domain(f"edits-{request.node.name[:40]}-{os.getpid()}.h5")
    with h5pyd.File(name, "w", **hsds.h5pyd_kwargs()) as f:
        f["x"] = np.arange(100, dtype="<f8")
        g = f.create_group("g")
        g.attrs["units"] = "m"
        g.attrs["count"] = np.int32(7)
        g.create_dataset("m", data=np.arange(24, dtype="<i4").reshape(6, 4), maxshape=(None, 4), chunks=(2, 4))
    return name


@pytest.fixture
def service(hsds, domain):   # noqa: F811
    with HsdsClient(domain, endpoint=hsds.endpoint, username=USER, password=PASSWORD) as client:
        yield client


def links(client: HsdsClient, path: str) -> dict:
    """The links of the group at `path`, by name, as the service holds them."""
    return {ln.title: ln for ln in client.links(client.resolve(path))}


def values(client: HsdsClient, path: str) -> np.ndarray:
    rec = client.get_dataset(client.resolve(path))
    return client.read(rec.id, rec.dtype, tuple(slice(0, n) for n in rec.shape))


def url(name: str) -> str:
    return f"hsds://{name}"


def test_groups_links_and_names(domain, service, mount):
    mp = mount(url(domain), "rw", "refresh=1")
    os.mkdir(mp / "new")
    os.makedirs(mp / "a/b/c")
    # new groups reach the service in bulk a moment later (model/hsds/creations.py)
    assert wait_until(lambda: {"new", "a", "x", "g"} <= set(links(service, "/")), 5)
    assert set(links(service, "/a/b")) == {"c"}
    os.symlink("g/m", mp / "lnk")
    soft = links(service, "/")["lnk"]
    assert soft.kind == "H5L_TYPE_SOFT" and soft.h5path == "g/m"
    assert np.array_equal(np.load(mp / "lnk.npy"), np.arange(24, dtype="<i4").reshape(6, 4))
    os.rename(mp / "new", mp / "a/renamed")
    assert "new" not in links(service, "/") and "renamed" in links(service, "/a")
    os.rename(mp / "x.npy", mp / "g/y.npy")   # the dataset moves, as its two views
    assert "x" not in links(service, "/") and np.array_equal(values(service, "/g/y"), np.arange(100.0))
    with pytest.raises(OSError) as raised:
        os.rmdir(mp / "a/b")
    assert raised.value.errno == errno.ENOTEMPTY
    os.rmdir(mp / "a/b/c")
    os.unlink(mp / "g/y")
    assert "y" not in links(service, "/g") and set(links(service, "/a/b")) == set()
    assert sorted(os.listdir(mp / "g")) == ["m", "m.npy"]
    with pytest.raises(OSError) as raised:
        os.mkdir(mp / "g")
    assert raised.value.errno == errno.EEXIST


def test_new_groups_with_attributes_reach_the_service_in_bulk(domain, service, mount):
    """mkdir + setxattr answer at once and reach the service together a moment later, in a
    few requests (h5fs status counts them), read back by h5pyd."""
    mp = mount(url(domain), "rw", "refresh=1")
    before = _requests(mp)
    for i in range(50):
        os.mkdir(mp / f"n{i:02d}")
        os.setxattr(mp / f"n{i:02d}", "user.note", f"group {i}".encode())
    os.setxattr(mp / "n07", "user.note", b"set twice")
    os.mkdir(mp / "n07/inner")
    assert os.getxattr(mp / "n03", "user.note") == b"group 3" and os.listdir(mp / "n07") == ["inner"]
    with pytest.raises(OSError) as raised:
        os.mkdir(mp / "n05")
    assert raised.value.errno == errno.EEXIST
    assert wait_until(lambda: len([t for t in links(service, "/") if t.startswith("n")]) == 50, 5)
    assert _requests(mp) - before < 20
    with h5pyd.File(domain, "r", endpoint=service.settings.endpoint, username=USER, password=PASSWORD) as f:
        assert f["n03"].attrs["note"] == "group 3" and f["n07"].attrs["note"] == "set twice"
        assert list(f["n07"]) == ["inner"]
    os.rmdir(mp / "n07/inner")     # an edit of what was just sent: the service's answer
    assert links(service, "/n07") == {}


def _requests(mp: Path) -> int:
    """The requests the mount's daemon sent so far (its `h5fs status` answer)."""
    return json.loads(os.getxattr(mp, "user.h5fs.status"))["hsds"]["requests"]


def test_attributes(domain, service, mount):
    mp = mount(url(domain), "rw")
    os.setxattr(mp / "g", "user.note", b"set through the mount")
    os.setxattr(mp / "g", "user.count", b"12")   # an int32 stays one
    os.removexattr(mp / "g", "user.units")
    attrs = {a.name: a for a in service.attributes(service.resolve("/g"), with_values=True)}
    assert set(attrs) == {"note", "count"}
    assert attrs["count"].dtype == np.dtype("<i4") and int(attrs["count"].value) == 12
    assert os.getxattr(mp / "g", "user.note") == b"set through the mount"
    with pytest.raises(OSError) as raised:
        os.getxattr(mp / "g", "user.units")
    assert raised.value.errno == errno.ENODATA


def test_data_written_and_fsynced_is_the_service_s(domain, service, mount):
    mp = mount(url(domain), "rw")
    want = np.arange(100, dtype="<f8")
    rng = np.random.default_rng(1)
    with open(mp / "x", "r+b") as fh:
        for _ in range(20):
            start = int(rng.integers(0, 100))
            n = int(rng.integers(1, 101 - start))
            new = rng.random(n)
            want[start:start + n] = new
            os.pwrite(fh.fileno(), new.astype("<f8").tobytes(), start * 8)
        assert fh.read() == want.tobytes()   # read back before any flush
        os.fsync(fh.fileno())   # the service holds it
    assert np.array_equal(values(service, "/x"), want)
    with open(mp / "g/m", "ab") as fh:   # two more rows of the resizable dataset
        fh.write(np.arange(8, dtype="<i4").tobytes())
    assert values(service, "/g/m").shape == (8, 4)
    assert np.array_equal(np.load(mp / "g/m.npy")[6:], np.arange(8, dtype="<i4").reshape(2, 4))


def test_cp_of_an_npy_file_makes_a_dataset(domain, service, mount, tmp_path):
    mp = mount(url(domain), "rw")
    arr = np.random.default_rng(2).random((300, 40)).astype("<f4")
    src = tmp_path / "a.npy"
    np.save(src, arr)
    shutil.copy(src, mp / "g/copied.npy")
    assert np.array_equal(values(service, "/g/copied"), arr)
    assert np.array_equal(np.load(mp / "g/copied.npy"), arr)


def test_two_mounts_see_each_others_edits_within_refresh(domain, mount):
    one, two = mount(url(domain), "rw", "refresh=1"), mount(url(domain), "rw", "refresh=1")
    assert "made" not in os.listdir(two)
    os.mkdir(one / "made")
    os.setxattr(one / "g", "user.by", b"one")
    assert wait_until(lambda: "made" in os.listdir(two), timeout=10)
    assert wait_until(lambda: b"user.by" in [x.encode() for x in os.listxattr(two / "g")], timeout=10)
    assert os.getxattr(two / "g", "user.by") == b"one"


def test_a_read_only_mount_refuses_edits(domain, mount):
    mp = mount(url(domain))
    for edit in (lambda: os.mkdir(mp / "no"), lambda: os.setxattr(mp / "g", "user.no", b"1"),
                 lambda: Path(mp / "x").write_bytes(b"\0" * 8)):
        with pytest.raises(OSError) as raised:
            edit()
        assert raised.value.errno == errno.EROFS


def test_what_was_fsynced_survives_a_killed_daemon(domain, service, mount):
    mp = mount(url(domain), "rw")
    want = np.full(100, 2.5, dtype="<f8")
    with open(mp / "x", "r+b") as fh:
        fh.write(want.tobytes())
        os.fsync(fh.fileno())
    os.mkdir(mp / "kept")
    dir_fd = os.open(mp, os.O_RDONLY)
    try:
        os.fsync(dir_fd)   # the new group: durable in the service
    finally:
        os.close(dir_fd)
    pid = _daemon_pid(mp)
    os.kill(pid, signal.SIGKILL)
    force_unmount(mp, pid)
    assert np.array_equal(values(service, "/x"), want) and "kept" in links(service, "/")
