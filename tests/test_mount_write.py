"""Writes through a real read-write mount with real tools (dd, truncate, os.pwrite, numpy.memmap),
compared with a NumPy model of the edits; the file is then read whole by h5py, checked by
`h5fs check` and (libver earliest) read by h5dump."""

from __future__ import annotations

import errno
import os
import stat
import subprocess

import h5py
import numpy as np
import pytest

from conftest import LIBVERS, run_h5fs
from write_support import verify_file


def dd(src: bytes, target, offset: int, tmp_path) -> None:
    """`dd conv=notrunc` of `src` into `target` at byte `offset`."""
    piece = tmp_path / "piece"
    piece.write_bytes(src)
    subprocess.run(["dd", f"if={piece}", f"of={target}", "bs=1", f"seek={offset}", "conv=notrunc",
                    "status=none"], check=True, timeout=60)


def pwrite(path, data: bytes, offset: int, fsync: bool = True) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        assert os.pwrite(fd, data, offset) == len(data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def error_of(fn, *args) -> int:
    try:
        fn(*args)
    except OSError as e:
        return e.errno
    return 0


@pytest.fixture(params=LIBVERS)
def simple(request, tmp_path):
    """A file with contiguous (written and never written), compact and 2-D datasets."""
    path = tmp_path / f"simple_{request.param}.h5"
    with h5py.File(path, "w", libver=request.param) as f:
        f.create_dataset("contig", data=np.arange(1000, dtype="<f8"))
        f.create_dataset("late", shape=(50, 3), dtype=">i4", fillvalue=-7)
        f.create_dataset("zeros", shape=(4096,), dtype="u1")
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        h5py.h5d.create(f.id, b"compact", h5py.h5t.STD_I16LE, h5py.h5s.create_simple((20,)), dcpl=dcpl)
        f["compact"][...] = np.arange(20, dtype="<i2")
        f["contig"].attrs["units"] = "m"
    return path, request.param


def test_overwrite_contiguous_and_compact(mount, simple, tmp_path):
    path, libver = simple
    model = {"contig": np.arange(1000, dtype="<f8"), "late": np.full((50, 3), -7, ">i4"),
             "zeros": np.zeros(4096, "u1"), "compact": np.arange(20, dtype="<i2")}
    mp = mount(path, "rw")
    # dd of whole and partial elements at odd offsets
    raw = bytearray(model["contig"].tobytes())
    raw[13:13 + 27] = bytes(range(27))
    dd(bytes(range(27)), mp / "contig", 13, tmp_path)
    model["contig"] = np.frombuffer(bytes(raw), "<f8")
    # os.pwrite into storage never allocated: the rest keeps the fill value
    pwrite(mp / "late", np.array([[1, 2, 3]], ">i4").tobytes(), 12 * 10)
    model["late"][10] = [1, 2, 3]
    pwrite(mp / "zeros", b"\xff" * 100, 3996)
    model["zeros"][3996:] = 0xFF
    # numpy.memmap over the .npy view (a shared writable mapping) and the raw view
    m = np.lib.format.open_memmap(mp / "compact.npy", mode="r+")
    m[5:8] = [-1, -2, -3]
    m.flush()
    del m
    model["compact"][5:8] = [-1, -2, -3]
    r = np.memmap(mp / "contig", dtype="<f8", mode="r+")
    r[-1] = 42.5
    r.flush()
    del r
    model["contig"] = model["contig"].copy()
    model["contig"][-1] = 42.5
    # reads through the mount see the writes at once, in both views
    for name, want in model.items():
        assert (mp / name).read_bytes() == want.tobytes()
        assert np.array_equal(np.load(mp / f"{name}.npy"), want)
    run_h5fs("umount", mp, check=True)
    data = verify_file(path, h5dump=libver == "earliest")
    for name, want in model.items():
        assert data[name].tobytes() == want.tobytes(), name
    assert data["contig@units"] == "m"


def test_npy_header_is_read_only(mount, simple):
    path, _ = simple
    mp = mount(path, "rw")
    npy = mp / "contig.npy"
    header = npy.read_bytes()[:128]
    assert error_of(pwrite, npy, b"X", 10) == errno.EINVAL
    pwrite(npy, header[:16], 0)   # the header's own bytes may be written back
    assert npy.read_bytes()[:128] == header
    assert error_of(os.truncate, npy, 10) == errno.EINVAL
    run_h5fs("umount", mp, check=True)
    verify_file(path, h5dump=False)


def test_modes_and_read_only_mount(mount, simple):
    path, _ = simple
    mp = mount(path, "rw")
    assert stat.S_IMODE(os.stat(mp / "contig").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(mp).st_mode) == 0o755
    run_h5fs("umount", mp, check=True)
    ro = mount(path, "ro")
    assert stat.S_IMODE(os.stat(ro / "contig").st_mode) == 0o444
    assert error_of(pwrite, ro / "contig", b"x", 0) in (errno.EROFS, errno.EACCES)
    assert error_of(os.truncate, ro / "contig", 0) == errno.EROFS
    run_h5fs("umount", ro, check=True)


def test_one_writer_holds_the_lock(mount, simple, tmp_path):
    path, _ = simple
    mp = mount(path, "rw")
    with pytest.raises(OSError, match="lock"):
        h5py.File(path, "r")
    second = tmp_path / "second"
    second.mkdir()
    proc = run_h5fs("mount", path, second)
    assert proc.returncode != 0 and "in use by another process" in proc.stderr
    run_h5fs("umount", mp, check=True)
    with h5py.File(path, "r"):
        pass


def test_resize_errors(mount, simple):
    path, _ = simple
    mp = mount(path, "rw")
    # contiguous storage cannot grow; a size that is not whole rows is refused first
    assert error_of(os.truncate, mp / "contig", 8 * 2000) == errno.EFBIG
    assert error_of(pwrite, mp / "contig", b"x" * 16, 8 * 999) == errno.EFBIG
    assert error_of(os.truncate, mp / "late", 13) == errno.EINVAL
    run_h5fs("umount", mp, check=True)
    data = verify_file(path, h5dump=False)
    assert np.array_equal(data["contig"], np.arange(1000, dtype="<f8"))
