"""Objects removed while open live on until their last close, as on any file system: `rm`,
`rmdir`, `rm -r` and `mv` over a name leave the open descriptors reading and writing the removed
object (st_nlink 0), nothing else; new objects never take its space meanwhile; the last close
frees it. An inode whose object was freed answers ENOENT, and an object made later at the same
address gets inodes of its own. Both file formats; h5py reads everything and `h5fs check`
passes after each test."""

from __future__ import annotations

import errno
import os
import tempfile

import h5py
import numpy as np
import pytest

from conftest import make_h5
from write_support import verify_file

LIBVERS = ("earliest", "latest")


@pytest.mark.parametrize("libver", LIBVERS)
def test_removed_open_dataset_keeps_its_data_until_closed(tmp_path, mount, libver):
    data = np.arange(256 * 1024, dtype="<f4")   # 1 MiB: the last thing in the file
    path = make_h5(tmp_path / "f.h5", lambda f: f.create_dataset("a", data=data, chunks=(65536,),
                                                                 maxshape=(None,)), libver=libver)
    mp = mount(path, "rw")
    fd = os.open(mp / "a", os.O_RDWR)
    try:
        os.unlink(mp / "a")
        assert os.fstat(fd).st_nlink == 0
        for i in range(5):   # new objects: none may take the removed one's space
            np.save(mp / f"b{i}.npy", np.full(70000, i, "<f4"))
        assert os.pread(fd, data.nbytes, 0) == data.tobytes()
        assert os.pwrite(fd, np.full(10, 666.0, "<f4").tobytes(), 400) == 40
        os.fsync(fd)
        want = data.copy()
        want[100:110] = 666
        assert os.pread(fd, data.nbytes, 0) == want.tobytes()
        for i in range(5):
            assert np.array_equal(np.load(mp / f"b{i}.npy"), np.full(70000, i, "<f4"))
    finally:
        os.close(fd)
    # freed at the close: new data of its size takes its space, the file does not grow
    with open(mp / "b0", "rb") as held:
        os.fsync(held.fileno())   # every change in the file
    size = os.path.getsize(path)
    noise = np.random.default_rng(0).integers(0, 256, data.nbytes * 3 // 4, dtype=np.uint8)
    out = os.open(mp / "noise", os.O_WRONLY | os.O_CREAT)
    try:
        assert os.write(out, noise.tobytes()) == noise.nbytes
        os.fsync(out)
    finally:
        os.close(out)
    assert os.path.getsize(path) - size < noise.nbytes // 2
    mount.unmount(mp)
    found = verify_file(path, h5dump=libver == "earliest")
    assert sorted(found) == [f"b{i}" for i in range(5)] + ["noise"]
    for i in range(5):
        assert np.array_equal(found[f"b{i}"], np.full(70000, i, "<f4"))


def _new_groups_untouched(mount, mp, path, libver: str) -> None:
    """The groups new0..new9 made in freed space have no attribute, through the mount and in
    the file; the file is sound."""
    assert all(os.listxattr(mp / f"new{i}") == [] for i in range(10))
    mount.unmount(mp)
    verify_file(path, h5dump=libver == "earliest")
    with h5py.File(path, "r") as f:
        assert sorted(f) == [f"new{i}" for i in range(10)]
        assert all(len(f[name].attrs) == 0 for name in f)


@pytest.mark.parametrize("libver", LIBVERS)
def test_removed_open_directory_takes_edits_alone(tmp_path, mount, libver):
    def build(f):
        f.create_group("dd/sub")
        f["dd/sub"].attrs["was"] = "here"
    path = make_h5(tmp_path / "f.h5", build, libver=libver)
    mp = mount(path, "rw")
    fd = os.open(mp / "dd" / "sub", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in ("sub", ""):
            os.rmdir(mp / "dd" / name)
        for i in range(10):   # groups made where the removed ones were
            os.mkdir(mp / f"new{i}")
        os.setxattr(fd, "user.ghost", b"boo")
        assert os.getxattr(fd, "user.was") == b"here"
        assert os.fstat(fd).st_nlink == 0
    finally:
        os.close(fd)
    _new_groups_untouched(mount, mp, path, libver)


@pytest.mark.parametrize("libver", LIBVERS)
def test_inode_of_a_freed_object_answers_enoent(tmp_path, mount, libver):
    """A path handle (O_PATH: no open reaches the daemon) outlives its object: edits through it
    answer ENOENT, and groups made in the freed space are not touched."""
    path = make_h5(tmp_path / "f.h5", lambda f: f.create_group("g/sub"), libver=libver)
    mp = mount(path, "rw")
    fd = os.open(mp / "g" / "sub", os.O_PATH)
    try:
        os.rmdir(mp / "g" / "sub")
        os.rmdir(mp / "g")
        for i in range(10):
            os.mkdir(mp / f"new{i}")
        with pytest.raises(OSError) as err:
            os.setxattr(f"/proc/self/fd/{fd}", "user.ghost", b"boo")
        assert err.value.errno == errno.ENOENT
    finally:
        os.close(fd)
    _new_groups_untouched(mount, mp, path, libver)


@pytest.mark.parametrize("libver", LIBVERS)
def test_temporary_file_and_rename_over_an_open_file(tmp_path, mount, libver):
    path = make_h5(tmp_path / "f.h5", lambda f: None, libver=libver)
    mp = mount(path, "rw")
    blob = np.random.default_rng(1).integers(0, 256, 3_000_000, dtype=np.uint8).tobytes()
    with tempfile.TemporaryFile(dir=mp) as tmp:   # created, removed at once, then written
        tmp.write(blob)
        tmp.flush()
        tmp.seek(0)
        assert tmp.read() == blob
    (mp / "log").write_bytes(b"first\n")
    fd = os.open(mp / "log", os.O_WRONLY | os.O_APPEND)
    try:
        (mp / "log.new").write_bytes(b"replacement\n")
        os.rename(mp / "log.new", mp / "log")   # the open file loses its name
        assert os.write(fd, b"second\n" * 1000) == 7000
        os.fsync(fd)
    finally:
        os.close(fd)
    assert (mp / "log").read_bytes() == b"replacement\n"
    mount.unmount(mp)
    found = verify_file(path, h5dump=libver == "earliest")
    assert sorted(found) == ["log"] and found["log"].tobytes() == b"replacement\n"
