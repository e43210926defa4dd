"""POSIX answers of a read-write mount to the namespace system calls, driven with os calls
(what pjdfstest checks for mkdir, rmdir, unlink, link, symlink, truncate, open and rename),
in old- and new-format files; then h5py reads the whole file and `h5fs check` passes."""

from __future__ import annotations

import errno
import os

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
