"""`cp y.npy D.npy` over an existing dataset through a real read-write mount: the new array
goes into a dataset of its own and becomes D's data at close, in one transaction (D's address,
hard links and attributes kept); a truncated or malformed `.npy` fails with EINVAL and leaves D
whole, and so does a `kill -9` of the daemon mid-copy. After each, h5py reads the whole file and
`h5fs check` passes."""

from __future__ import annotations

import io
import os
import subprocess

import h5py
import numpy as np
import pytest

from conftest import LIBVERS, run_h5fs
from crash_support import kill_mid_copy
from write_support import verify_file

X = np.arange(100.0).reshape(10, 10)
C = np.arange(1000, dtype="<i4")


def make(path, libver: str) -> None:
    """Contiguous `g/x` (with a second hard link and attributes) and chunked, gzip'd `c`."""
    with h5py.File(path, "w", libver=libver) as f:
        x = f.create_dataset("g/x", data=X)
        x.attrs["units"] = "m"                       # a variable-length string in the global heap
        x.attrs["scale"] = np.array([1.5, 2.5])
        f["g/x_link"] = x
        c = f.create_dataset("c", data=C, chunks=(100,), compression="gzip")
        c.attrs["note"] = "chunked"


@pytest.fixture(params=LIBVERS)
def mounted(request, tmp_path, mount):
    """(file, mountpoint, directory of source files) for a fresh read-write mount."""
    path = tmp_path / f"replace-{request.param}.h5"
    make(path, request.param)
    src = tmp_path / "src"
    src.mkdir()
    return path, mount(path, "rw", "writeback_mb=1"), src   # a small budget: chunks land mid-copy


def cp(src, dst) -> subprocess.CompletedProcess:
    return subprocess.run(["cp", str(src), str(dst)], capture_output=True, text=True, timeout=120)


def unmount_and_verify(path, mp) -> None:
    run_h5fs("umount", mp, check=True)
    verify_file(path, h5dump="earliest" in path.name)


def attributes_kept(f) -> None:
    assert f["g/x"].attrs["units"] == "m" and f["g/x"].attrs["scale"].tolist() == [1.5, 2.5]
    assert f["c"].attrs["note"] == "chunked"


def test_same_dtype_and_shape(mounted):
    path, mp, src = mounted
    np.save(src / "y.npy", X * 2)
    np.save(src / "y3.npy", X * 3)
    assert cp(src / "y.npy", mp / "g" / "x.npy").returncode == 0
    assert np.array_equal(np.load(mp / "g" / "x.npy"), X * 2)
    # dd writes through a duplicate of the descriptor it opened and closed
    subprocess.run(["dd", f"if={src / 'y3.npy'}", f"of={mp / 'g' / 'x.npy'}", "bs=100", "status=none"], check=True)
    assert np.array_equal(np.load(mp / "g" / "x.npy"), X * 3)
    fd = os.open(mp / "g" / "x.npy", os.O_WRONLY)   # no O_TRUNC: truncated to 0 through the descriptor
    try:
        os.ftruncate(fd, 0)
        os.write(fd, _npy_bytes(X * 4))
    finally:
        os.close(fd)
    assert np.array_equal(np.load(mp / "g" / "x.npy"), X * 4)
    subprocess.run(["dd", f"if={src / 'y3.npy'}", f"of={mp / 'g' / 'x.npy'}", "bs=100", "status=none"], check=True)
    assert np.array_equal(np.load(mp / "g" / "x_link.npy"), X * 3)   # one object: every name
    assert (mp / "g" / "x").read_bytes() == (X * 3).tobytes()
    assert os.getxattr(mp / "g" / "x", "user.units") == b"m" and os.stat(mp / "g" / "x").st_nlink == 2
    unmount_and_verify(path, mp)
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["g/x"][()], X * 3) and f["g/x_link"] == f["g/x"]
        assert h5py.h5o.get_info(f["g/x"].id).rc == 2
        attributes_kept(f)


def test_different_dtype_and_shape(mounted):
    path, mp, src = mounted
    big = np.arange(600_000, dtype=">f8").reshape(1000, 600)     # several chunks, some flushed mid-copy
    small = np.array([[1, 2, 3], [4, 5, 6]], dtype="<u2")
    np.save(src / "big.npy", big)
    np.save(src / "small.npy", small)
    assert cp(src / "big.npy", mp / "c.npy").returncode == 0
    assert cp(src / "small.npy", mp / "g" / "x.npy").returncode == 0
    assert os.stat(mp / "c").st_size == big.nbytes and os.getxattr(mp / "c", "user.h5fs.shape") == b"(1000, 600)"
    assert np.array_equal(np.load(mp / "c.npy"), big) and np.load(mp / "c.npy").dtype == big.dtype
    assert np.array_equal(np.load(mp / "g" / "x_link.npy"), small)
    unmount_and_verify(path, mp)
    with h5py.File(path, "r") as f:
        assert f["c"].dtype == big.dtype and np.array_equal(f["c"][()], big)
        assert f["g/x"].dtype == small.dtype and np.array_equal(f["g/x_link"][()], small)
        attributes_kept(f)


def test_truncated_or_malformed_npy_leaves_the_old_data(mounted):
    path, mp, src = mounted
    whole = src / "big.npy"
    np.save(whole, np.arange(600_000, dtype="<f8"))
    size = whole.stat().st_size
    bad = {"in-header.npy": ["head", "-c", "40", str(whole)], "in-data.npy": ["head", "-c", str(size // 2), str(whole)],
           "garbage.npy": ["echo", "not an npy file"]}
    for name, cmd in bad.items():   # what a user makes with `head -c N big.npy > bad.npy`
        (src / name).write_bytes(subprocess.run(cmd, capture_output=True, check=True).stdout)
    (src / "longer.npy").write_bytes(whole.read_bytes() + b"more")
    for name in [*bad, "longer.npy"]:
        for target in (mp / "c.npy", mp / "g" / "x.npy"):
            done = cp(src / name, target)
            assert done.returncode != 0 and "Invalid argument" in done.stderr, (name, done.stderr)
    assert np.array_equal(np.load(mp / "c.npy"), C) and np.array_equal(np.load(mp / "g" / "x.npy"), X)
    unmount_and_verify(path, mp)
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["c"][()], C) and np.array_equal(f["g/x"][()], X)
        attributes_kept(f)


def test_kill_mid_copy_leaves_the_old_data(mounted, mount):
    path, mp, _ = mounted
    new = np.arange(600_000, dtype="<f8")   # past the 1 MiB budget: chunks in the file
    kill_mid_copy(mp, "c.npy", _npy_bytes(new)[:3_000_000])
    with h5py.File(path, "r") as f:   # at once, before any repair
        assert np.array_equal(f["c"][()], C) and np.array_equal(f["g/x"][()], X)
    mp = mount(path, "rw")   # replays the journal; the walk finds the unlinked dataset's space free
    unmount_and_verify(path, mp)
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["c"][()], C)
        attributes_kept(f)


def _npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()
