"""A remote HDF5 file's external data files and virtual datasets' source files are the objects
beside it, fetched the same way (same server, same options), compared with h5py reading the
local original. A missing sibling, an absolute local path, writes."""

from __future__ import annotations

import errno
import json
import os
import shutil
import threading
from pathlib import Path

import h5py
import numpy as np
import pytest

from h5fs.errors import FormatError, ReadOnly
from h5fs.model.external import external_write
from h5fs.model.file import H5File
from h5fs.model.virtual_write import virtual_write
from h5fs.model.virtual_files import POOL
from h5fs.storage.byte_source import WouldBlock, mark_event_loop_thread
from h5fs.storage.remote import RemoteOptions
from h5fs.storage.remote.client import RemoteError, RemoteNotFound
from h5fs.storage.remote.siblings import LocalPathRefused
from conftest import run_h5fs
from remote_support import BUCKET, fresh, range_server, s3_server  # noqa: F401 - fixtures
from servers import REGION

PROTOCOLS = ("http", "s3")


@pytest.fixture
def place(range_server, s3_server, tmp_path):  # noqa: F811 - fixtures
    """place(local_dir, proto) -> (URL of `main` under the tree, RemoteOptions): every file under
    `local_dir` published by both servers under a prefix of this test's own, at the same relative
    paths (the s3 keys and the HTTP paths have directories)."""
    prefix = tmp_path.name

    def _place(local_dir: Path, main: str, proto: str) -> tuple[str, RemoteOptions]:
        for path in sorted(local_dir.rglob("*")):
            if path.is_file():
                key = f"{prefix}/{path.relative_to(local_dir).as_posix()}"
                target = range_server.root / key
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
                s3_server.put(BUCKET, key, path)
        cache = str(tmp_path / "block-cache")
        if proto == "http":
            return range_server.url_of(f"{prefix}/{main}"), RemoteOptions(cache_dir=cache)
        return (f"s3://{BUCKET}/{prefix}/{main}",
                RemoteOptions(endpoint=s3_server.endpoint, region=REGION, cache_dir=cache))
    return _place


@pytest.fixture(autouse=True)
def _pool_cleared():
    """Source files opened by one test are not another's."""
    yield
    POOL.clear()


def _h5py_read(path: Path, name: str) -> np.ndarray:
    """What libhdf5 reads from the local original (its external-file prefix is the current
    directory: the file's own, as h5fs resolves names)."""
    old = os.getcwd()
    os.chdir(path.parent)
    try:
        with h5py.File(path, "r") as f:
            return f[name][...]
    finally:
        os.chdir(old)


def _check(ds, expected: np.ndarray) -> None:
    raw = expected.tobytes()
    assert ds.raw_size == len(raw)
    assert ds.read_array().tobytes() == raw
    for step in (7, 100, 4099):
        assert b"".join(bytes(ds.read_raw(o, step)) for o in range(0, len(raw), step)) == raw, step


# ------------------------------------------------------------------------------ external files

def _external_tree(root: Path) -> Path:
    """data/ext.h5 whose dataset /x lives in three files: one beside it, one in a subdirectory
    (a space in its name), one in the parent directory; the last slot is unlimited."""
    (root / "data" / "sub").mkdir(parents=True)
    data = np.arange(40 * 300, dtype="<f8").reshape(40, 300) * 0.25
    n1, n2 = 11 * 8 * 7, 20 * 300 * 8            # slot boundaries inside rows
    old = os.getcwd()
    os.chdir(root / "data")                        # h5py writes the raw files relative to it
    try:
        with h5py.File("ext.h5", "w") as f:
            ds = f.create_dataset("x", data.shape, data.dtype,
                                  external=[("x-a.bin", 0, n1), ("sub/x b.bin", 16, n2),
                                            ("../up-c.bin", 0, h5py.h5f.UNLIMITED)])
            ds[...] = data
    finally:
        os.chdir(old)
    return root / "data" / "ext.h5"


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_external_files_beside_read_as_h5py(tmp_path, place, proto, range_server):  # noqa: F811
    h5 = _external_tree(tmp_path / "pub")
    expected = _h5py_read(h5, "x")
    url, options = place(tmp_path / "pub", "data/ext.h5", proto)
    with H5File.open(url, remote=options) as f:
        assert f.remote == options
        ds = f.resolve("/x")
        range_server.reset_stats()
        assert bytes(ds.read_raw(0, ds.raw_size)) == expected.tobytes()
        if proto == "http":      # each object: its version (HEAD), then all of it (small) at once
            assert range_server.stats()["heads"] == 3 and range_server.stats()["gets"] == 3
        _check(ds, expected)
        here = url.rsplit("/", 1)[0]
        up = here.rsplit("/", 1)[0]
        assert sorted(src.name for src in f.siblings._sources.values()) == sorted(
            [f"{here}/x-a.bin", f"{here}/sub/x%20b.bin", f"{up}/up-c.bin"])
        assert all(src.options is options for src in f.siblings._sources.values())
    # fetched with the file's options: each object has its own entry in the file's block cache
    assert len(os.listdir(tmp_path / "block-cache")) == 4


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_external_file_missing_is_eio_naming_it(tmp_path, place, proto):
    h5 = _external_tree(tmp_path / "pub")
    head = _h5py_read(h5, "x").tobytes()[:80]
    (tmp_path / "pub" / "data" / "sub" / "x b.bin").unlink()
    with pytest.raises(OSError, match="unable to open external raw data file"):
        _h5py_read(h5, "x")                                     # libhdf5 refuses too
    url, options = place(tmp_path / "pub", "data/ext.h5", proto)
    with H5File.open(url, remote=options) as f:
        ds = f.resolve("/x")
        assert bytes(ds.read_raw(0, 80)) == head                # the first file is there
        with pytest.raises(RemoteNotFound, match=r"x%20b\.bin.*no such object \(404\)") as e:
            ds.read_array()
        assert e.value.errno == 5 and not e.value.transient and "sub/x b.bin" in str(e.value)


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_external_absolute_local_path_is_refused(tmp_path, place, proto):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.arange(100, dtype="<i4").tobytes())
    pub = tmp_path / "pub"
    pub.mkdir()
    with h5py.File(pub / "abs.h5", "w") as f:
        f.create_dataset("x", (100,), "<i4", external=[(str(secret), 0, 400)])
    url, options = place(pub, "abs.h5", proto)
    with H5File.open(url, remote=options) as f:
        ds = f.resolve("/x")
        with pytest.raises(LocalPathRefused, match="absolute local path") as e:
            ds.read_raw(0, 400)
        assert str(secret) in str(e.value) and e.value.errno == 5
        assert not f.siblings._sources


# ---------------------------------------------------------------------------- virtual datasets

def _vds_tree(root: Path, missing: bool = False) -> Path:
    """data/vds.h5: /v maps rows of src-0.h5 (beside it, contiguous), sub/src-1.h5 (chunked,
    gzip) and /local of its own file, as "." and by its own name; with `missing`, a fifth row
    maps gone.h5, not there."""
    (root / "data" / "sub").mkdir(parents=True)
    rows = 5 if missing else 4
    for i, name in enumerate(("src-0.h5", "sub/src-1.h5")):
        with h5py.File(root / "data" / name, "w") as f:
            kw = dict(chunks=(7,), compression="gzip") if i else {}
            f.create_dataset("d", data=np.arange(50, dtype="<i8") * (i + 2) + 1000 * i, **kw)
    lay = h5py.VirtualLayout((rows, 50), "<i8")
    lay[0] = h5py.VirtualSource("src-0.h5", "d", shape=(50,))
    lay[1, 5:45] = h5py.VirtualSource("sub/src-1.h5", "d", shape=(50,))[10:50]
    lay[2] = h5py.VirtualSource(".", "local", shape=(50,))
    lay[3, ::2] = h5py.VirtualSource("vds.h5", "local", shape=(50,))[:25]
    if missing:
        lay[4] = h5py.VirtualSource("gone.h5", "d", shape=(50,))
    with h5py.File(root / "data" / "vds.h5", "w", libver="latest") as f:
        f.create_dataset("local", data=-np.arange(50, dtype="<i8"))
        f.create_virtual_dataset("v", lay, fillvalue=-7)
    return root / "data" / "vds.h5"


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_vds_sources_beside_read_as_h5py(tmp_path, place, proto):
    h5 = _vds_tree(tmp_path / "pub")
    expected = _h5py_read(h5, "v")
    assert expected[1, 0] == -7 and expected[2, 3] == -3 and expected[3, 4] == -2   # fill, own file
    url, options = place(tmp_path / "pub", "data/vds.h5", proto)
    with H5File.open(url, remote=options) as f:
        _check(f.resolve("/v"), expected)
    assert len(os.listdir(tmp_path / "block-cache")) == 3       # vds.h5 and its two sources


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_vds_missing_source_reads_fill_and_no_local_prefix(tmp_path, place, proto, monkeypatch,
                                                           range_server):  # noqa: F811 - fixture
    h5 = _vds_tree(tmp_path / "pub", missing=True)
    expected = _h5py_read(h5, "v")
    assert (expected[4] == -7).all()
    # a local gone.h5 where HDF5_VDS_PREFIX points: a remote file's sources are never looked for there
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    with h5py.File(decoy / "gone.h5", "w") as f:
        f.create_dataset("d", data=np.full(50, 99, "<i8"))
    monkeypatch.setenv("HDF5_VDS_PREFIX", str(decoy))
    url, options = place(tmp_path / "pub", "data/vds.h5", proto)
    with H5File.open(url, remote=options) as f:
        ds = f.resolve("/v")
        _check(ds, expected)
        range_server.reset_stats()
        _check(ds, expected)          # the missing object is remembered: still fill, no request
        if proto == "http":
            assert range_server.stats()["requests"] == 0


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_vds_printf_sources_are_probed_beside(tmp_path, place, proto, range_server):  # noqa: F811
    """A printf mapping's extent comes from the objects beside the file: blocks probed up to the
    first missing one (a 404), as libhdf5 probes files; the subdirectory and "%" survive."""
    pub = tmp_path / "pub"
    (pub / "parts").mkdir(parents=True)
    for i in range(3):
        with h5py.File(pub / "parts" / f"p%{i}.h5", "w") as f:
            f["d"] = np.arange(10, dtype="<i8").reshape(2, 5) + 100 * i
    h5 = pub / "vds.h5"
    with h5py.File(h5, "w", libver="latest") as f:
        vspace = h5py.h5s.create_simple((0, 5), (h5py.h5s.UNLIMITED, 5))
        vspace.select_hyperslab((0, 0), (h5py.h5s.UNLIMITED, 1), (3, 1), (2, 5))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_fill_value(np.array([-5], "<i8"))
        dcpl.set_virtual(vspace, b"parts/p%%%b.h5", b"d", h5py.h5s.create_simple((2, 5)))
        h5py.h5d.create(f.id, b"v", h5py.h5t.STD_I64LE, vspace, dcpl=dcpl)
    expected = _h5py_read(h5, "v")
    assert expected.shape == (8, 5) and expected[6, 0] == 200
    url, options = place(pub, "vds.h5", proto)
    with H5File.open(url, remote=options) as f:
        ds = f.resolve("/v")
        assert ds.shape == expected.shape
        _check(ds, expected)


def test_vds_source_refused_by_the_server_is_eio_naming_it(tmp_path, place, range_server):  # noqa: F811
    """Another failure than 404 is no missing file: EIO naming the URL, not the fill value; the
    next read tries again."""
    h5 = _vds_tree(tmp_path / "pub")
    expected = _h5py_read(h5, "v")
    url, options = place(tmp_path / "pub", "data/vds.h5", "http")
    with H5File.open(url, remote=options) as f:
        ds = f.resolve("/v")
        range_server.fault("403")
        try:
            with pytest.raises(RemoteError, match=r"src-0\.h5.*access denied") as e:
                ds.read_raw(0, 8)
        finally:
            range_server.fault(None)
        assert e.value.errno == 5 and e.value.transient and url.replace("vds.h5", "src-0.h5") in str(e.value)
        _check(ds, expected)


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_vds_absolute_local_source(tmp_path, place, proto):
    """An absolute name is never opened: its base name beside the file is used (as libhdf5 tries
    a missing absolute name's base name in the file's directory), else EIO naming the path."""
    local = tmp_path / "local"
    local.mkdir()
    for name, value in (("near.h5", 1), ("far.h5", 2)):
        with h5py.File(local / name, "w") as f:
            f.create_dataset("d", data=np.full(10, value, "<i4"))
    pub = tmp_path / "pub"
    pub.mkdir()
    with h5py.File(pub / "near.h5", "w") as f:       # what the remote file finds beside it
        f.create_dataset("d", data=np.arange(10, dtype="<i4"))
    for name in ("near.h5", "far.h5"):
        lay = h5py.VirtualLayout((10,), "<i4")
        lay[:] = h5py.VirtualSource(str(local / name), "d", shape=(10,))
        with h5py.File(pub / f"vds-{name}", "w") as f:
            f.create_virtual_dataset("v", lay, fillvalue=-1)
    url, options = place(pub, "vds-near.h5", proto)
    with H5File.open(url, remote=options) as f:
        assert f.resolve("/v").read_array().tolist() == list(range(10))
    url = url.replace("vds-near.h5", "vds-far.h5")
    with H5File.open(url, remote=options) as f:
        with pytest.raises(LocalPathRefused) as e:
            f.resolve("/v").read_array()
        assert str(local / "far.h5") in str(e.value) and e.value.errno == 5


def test_vds_source_reopened_must_be_the_version_first_seen(tmp_path, place, range_server):  # noqa: F811
    """A source file closed (the pool's LRU) and opened again is refused when its object changed
    meanwhile: one mount never serves two versions of a source."""
    h5 = _vds_tree(tmp_path / "pub")
    expected = _h5py_read(h5, "v")
    url, options = place(tmp_path / "pub", "data/vds.h5", "http")
    old = POOL.size
    POOL.size = 0                      # every source file closed once its read is done
    try:
        with H5File.open(url, remote=options) as f:
            ds = f.resolve("/v")
            _check(ds, expected)
            key = url.split("/", 3)[3].replace("vds.h5", "src-0.h5")
            range_server.replace(key, (tmp_path / "pub" / "data" / "src-0.h5").read_bytes())
            with pytest.raises(FormatError, match="src-0.h5 changed since this process first read it") as e:
                ds.read_raw(0, 8)
            assert not e.value.transient
            assert bytes(ds.read_raw(3 * 400, 400)) == expected[3].tobytes()   # its own file: still read
    finally:
        POOL.size = old


# ------------------------------------------------------------------------- the daemon's thread

def _as_the_event_loop(fn):
    """fn() run the way the FUSE boundary runs a handler: on a thread that must never wait for
    a network, each WouldBlock's fetch done elsewhere (here) and fn run again. (result, refetches)."""
    for refetches in range(16):
        out: dict = {}

        def run():
            mark_event_loop_thread()
            try:
                out["value"] = fn()
            except BaseException as exc:   # noqa: B036 - WouldBlock is one
                out["error"] = exc
        t = threading.Thread(target=run)
        t.start()
        t.join()
        if not isinstance(out.get("error"), WouldBlock):
            if "error" in out:
                raise out["error"]
            return out["value"], refetches
        out["error"].wait()
    raise AssertionError("still blocking after 16 fetches")


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_siblings_are_opened_off_the_event_loop(tmp_path, place, proto):
    _external_tree(tmp_path / "pub")
    expected_x = _h5py_read(tmp_path / "pub" / "data" / "ext.h5", "x")
    expected_v = _h5py_read(_vds_tree(tmp_path / "pub2"), "v")
    shutil.copytree(tmp_path / "pub2" / "data", tmp_path / "pub" / "data", dirs_exist_ok=True)
    url, options = place(tmp_path / "pub", "data/ext.h5", proto)
    with H5File.open(url, remote=options) as f:
        ds = f.resolve("/x")
        got, refetches = _as_the_event_loop(lambda: ds.read_raw(0, ds.raw_size))
        assert bytes(got) == expected_x.tobytes() and refetches == 1    # the three objects together
    with H5File.open(url.replace("ext.h5", "vds.h5"), remote=options) as f:
        ds = f.resolve("/v")
        got, refetches = _as_the_event_loop(lambda: ds.read_raw(0, ds.raw_size))
        assert bytes(got) == expected_v.tobytes() and refetches == 1    # the two source files together


# ------------------------------------------------------------------------------------- writes

@pytest.mark.parametrize("proto", ("http",))
def test_writes_through_a_remote_file_are_refused(tmp_path, place, proto):
    root = tmp_path / "pub"
    h5 = _external_tree(root)
    _vds_tree(tmp_path / "pub2")
    shutil.copytree(tmp_path / "pub2" / "data", root / "data", dirs_exist_ok=True)
    before = {p: p.read_bytes() for p in root.rglob("*.bin")}
    url, options = place(root, "data/ext.h5", proto)
    with pytest.raises(ReadOnly, match="read-only"):
        H5File.open(url, writable=True, remote=options)
    with H5File.open(url, remote=options) as f:
        with pytest.raises(ReadOnly, match="remote object"):
            external_write(f.resolve("/x"), 0, bytes(8))
    with H5File.open(url.replace("ext.h5", "vds.h5"), remote=options) as f:
        ds = f.resolve("/v")
        with pytest.raises(ReadOnly, match="remote object"):
            virtual_write(ds, 2 * 50 * 8, bytes(8), lambda *a: pytest.fail("written"))
    assert {p: p.read_bytes() for p in root.rglob("*.bin")} == before
    assert not (Path.cwd() / "x-a.bin").exists() and h5.exists()


# ------------------------------------------------------------------------------------- a mount

@pytest.mark.parametrize("proto", PROTOCOLS)
def test_through_a_mount(tmp_path, place, proto, mount, s3_server, range_server):  # noqa: F811 - fixture
    """The real CLI mounts the URL: the external dataset and the VDS (a missing source among
    its sources) read as h5py reads the local original; a local absolute path answers EIO;
    nothing can be written; `h5fs status` counts each object's requests."""
    root = tmp_path / "pub"
    h5 = _vds_tree(root, missing=True)
    secret = tmp_path / "secret.bin"
    secret.write_bytes(bytes(range(256)) * 4)
    old = os.getcwd()
    os.chdir(h5.parent)
    try:
        with h5py.File(h5, "a") as f:
            data = np.arange(3000, dtype="<u2")
            f.create_dataset("x", data=data, external=[("x-a.bin", 0, 2000), ("sub/x b.bin", 8, 4000)])
            f.create_dataset("abs", (1024,), "u1", external=[(str(secret), 0, 1024)])
    finally:
        os.chdir(old)
    expected_v, expected_x = _h5py_read(h5, "v"), _h5py_read(h5, "x")
    assert (expected_v[4] == -7).all() and (expected_x == data).all()
    url, _ = place(root, "data/vds.h5", proto)
    opts = [f"cache_dir={tmp_path / 'block-cache'}"]
    if proto == "s3":
        opts.append(f"endpoint={s3_server.endpoint},region={REGION}")
    fresh(range_server)
    mp = mount(url, *opts)
    assert (mp / "x").read_bytes() == expected_x.tobytes()
    assert (mp / "v").read_bytes() == expected_v.tobytes()
    # h5fs status: each object beside the file, its own counters (what the server saw, over HTTP)
    status = json.loads(os.getxattr(mp, "user.h5fs.status"))
    here = url.rsplit("/", 1)[0]
    siblings = {r["url"]: r for r in status["siblings"]}
    assert sorted(siblings) == sorted(f"{here}/{n}" for n in ("x-a.bin", "sub/x%20b.bin", "src-0.h5", "sub/src-1.h5"))
    assert all(r["requests"] >= 2 and r["failures"] == 0 for r in siblings.values())
    if proto == "http":    # the missing gone.h5: one request, remembered
        counted = status["remote"]["requests"] + sum(r["requests"] for r in siblings.values())
        assert range_server.stats()["requests"] == counted + 1
    text = run_h5fs("status", mp).stdout
    assert f"beside it: {here}/sub/x%20b.bin: {siblings[f'{here}/sub/x%20b.bin']['requests']} requests" in text
    with open(mp / "v", "rb") as fh:        # pieces at odd offsets
        fh.seek(1203)
        assert fh.read(999) == expected_v.tobytes()[1203:2202]
    with pytest.raises(OSError) as e:
        (mp / "abs").read_bytes()
    assert e.value.errno == errno.EIO
    assert str(secret) in mount.log_of(mp)
    for name in ("v", "x"):
        with pytest.raises(OSError) as e:
            with open(mp / name, "r+b") as fh:
                fh.write(b"\0" * 8)
        assert e.value.errno == errno.EROFS
    assert (mp / "v").read_bytes() == expected_v.tobytes()
