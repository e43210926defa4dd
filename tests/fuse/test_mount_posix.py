"""POSIX answers of a read-write mount to the namespace system calls, driven with os calls
(what pjdfstest checks for mkdir, rmdir, unlink, link, symlink, truncate, open and rename),
in old- and new-format files; then h5py reads the whole file and `h5fs check` passes."""

from __future__ import annotations

import errno
import os
import time

import h5py
import numpy as np
import pytest

from conftest import make_h5, run_h5fs
from write_support import verify_file

NAME_MAX = 255   # POSIX {NAME_MAX} of the mount (statvfs f_namemax)


def _errno(fn, *args) -> int:
    with pytest.raises(OSError) as ei:
        fn(*args)
    return ei.value.errno


def test_names_over_name_max(tmp_path, mount, libver):
    """A name of 256 bytes is ENAMETOOLONG for every call that takes one, looked up or made
    (the kernel passes names up to 1024 bytes: before, a lookup answered ENOENT); one of 255
    works. A link of the file whose name is longer (h5py can make one) is neither listed nor
    found by its name."""
    long_link = "L" * 300
    path = make_h5(tmp_path / "f.h5", lambda f: (f.create_dataset("d", data=np.arange(4)),
                                                  f.create_group("g"),
                                                  f.create_group(long_link)), libver)
    mp = mount(path, "rw")
    assert os.statvfs(mp).f_namemax == NAME_MAX
    too_long, longest = "n" * (NAME_MAX + 1), "m" * NAME_MAX
    where = mp / "g"
    d = mp / "d"

    assert _errno(os.stat, mp / long_link) == errno.ENAMETOOLONG
    assert long_link not in os.listdir(mp)
    for name in (too_long, "x" * 1000):
        target = where / name
        assert _errno(os.lstat, target) == errno.ENAMETOOLONG
        assert _errno(os.unlink, target) == errno.ENAMETOOLONG
        assert _errno(os.rmdir, target) == errno.ENAMETOOLONG
        assert _errno(os.truncate, target, 3) == errno.ENAMETOOLONG
        assert _errno(os.open, target, os.O_RDONLY) == errno.ENAMETOOLONG
        assert _errno(os.open, target, os.O_CREAT | os.O_WRONLY, 0o644) == errno.ENAMETOOLONG
        assert _errno(os.mkdir, target) == errno.ENAMETOOLONG
        assert _errno(os.symlink, "d", target) == errno.ENAMETOOLONG
        assert _errno(os.link, d, target) == errno.ENAMETOOLONG
        assert _errno(os.rename, d, target) == errno.ENAMETOOLONG
        assert _errno(os.rename, target, where / "y") == errno.ENAMETOOLONG
        assert _errno(os.link, target, where / "y") == errno.ENAMETOOLONG

    os.mkdir(where / longest)
    os.rename(where / longest, where / (longest[:-1] + "k"))
    os.rmdir(where / (longest[:-1] + "k"))
    assert os.listdir(where) == []
    assert sorted(os.listdir(mp)) == ["d", "d.npy", "g"]

    run_h5fs("umount", mp, check=True)
    data = verify_file(path, h5dump=libver == "earliest")
    np.testing.assert_array_equal(data["d"], np.arange(4))
    with h5py.File(path, "r") as f:
        assert sorted(f) == sorted(["d", "g", long_link])
        assert list(f["g"]) == []


def _file_keeping_times(path) -> None:
    """A new-format file whose objects keep their times (libhdf5's default, which h5py turns
    off): version 2 headers with access, modification, change and birth times."""
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fcpl.set_obj_track_times(True)
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_LATEST, h5py.h5f.LIBVER_LATEST)
    h5py.h5f.create(str(path).encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl).close()
    with h5py.File(path, "r+", libver="latest") as f:
        for name in ("still", "made", "emptied", "from", "to", "linked", "dropped"):
            f.create_group(name, track_times=True)
        for name in ("emptied/x", "from/x", "dropped/x"):
            f.create_dataset(name, data=np.arange(3), track_times=True)
        f["dropped/y"] = f["dropped/x"]   # a second hard link


def _times(path, name) -> tuple[int, int]:
    """(modification, change) time of an object as libhdf5 reads them from the file."""
    with h5py.File(path, "r") as f:
        info = h5py.h5o.get_info(f[name].id)
        return info.mtime, info.ctime


def test_edits_set_times_the_file_keeps(tmp_path, mount):
    """In a file that keeps times, a group whose entries change gets new modification and change
    times, and an object a hard link to comes, goes or is renamed a new change time (POSIX, as
    pjdfstest checks them); stat shows them at once and libhdf5 reads them from the file.
    A new dataset in such a group keeps times too. Before, only `touch` set a time."""
    path = tmp_path / "f.h5"
    _file_keeping_times(path)
    made = _times(path, "still")
    assert made[0] > 0 and made[1] > 0   # the file does keep them
    while int(time.time()) <= max(made):   # the edits' second is a later one
        time.sleep(0.05)
    mp = mount(path, "rw")
    begin = int(time.time())

    os.mkdir(mp / "made" / "sub")
    os.unlink(mp / "emptied" / "x")
    os.rename(mp / "from" / "x", mp / "to" / "x")
    os.link(mp / "to" / "x", mp / "linked" / "x2")
    os.symlink("x2", mp / "linked" / "soft")
    os.unlink(mp / "dropped" / "y")
    with open(mp / "made" / "new.bin", "wb") as fh:
        fh.write(b"abc")

    changed = ("made", "emptied", "from", "to", "linked", "dropped")
    shown = {name: os.stat(mp / name) for name in changed + ("still",)}
    shown["to/x"] = os.stat(mp / "to" / "x")
    shown["dropped/x"] = os.stat(mp / "dropped" / "x")
    for name in changed:
        assert int(shown[name].st_mtime) >= begin, name
        assert int(shown[name].st_ctime) >= begin, name
    assert (int(shown["still"].st_mtime), int(shown["still"].st_ctime)) == made
    for name in ("to/x", "dropped/x"):   # renamed and linked; a link gone: its change time only
        assert int(shown[name].st_ctime) >= begin, name
        assert int(shown[name].st_mtime) < begin, name

    run_h5fs("umount", mp, check=True)
    verify_file(path, h5dump=False)
    for name in changed + ("still", "to/x", "dropped/x"):
        assert _times(path, name) == (int(shown[name].st_mtime), int(shown[name].st_ctime)), name
    new = _times(path, "made/new.bin")
    assert new[0] >= begin and new[1] >= begin
    with h5py.File(path, "r") as f:
        assert f["made/new.bin"][()].tobytes() == b"abc"
        assert h5py.h5o.get_info(f["to/x"].id).rc == 2
