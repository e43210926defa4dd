"""Writes answer EROFS (for now), `-o ro`, and broken objects that do not hide the rest."""

from __future__ import annotations

import errno
import os
import stat
import subprocess

import h5py
import numpy as np
import pytest

from conftest import make_h5


def build_small(f):
    f["a"] = np.arange(10, dtype="<i4")
    f["b"] = np.arange(20, dtype="<f8")
    f["c"] = np.arange(30, dtype="<i2")
    f.create_group("g").attrs["x"] = np.int32(1)
    f.create_dataset("z", data=np.arange(40000, dtype="<i4"), chunks=(1000,), compression="gzip")


def _errno(fn, *args) -> int:
    with pytest.raises(OSError) as e:
        fn(*args)
    return e.value.errno


@pytest.mark.parametrize("ro", [False, True], ids=["rw", "ro"])
def test_writes_answer_erofs(mount, tmp_path, ro):
    h5 = make_h5(tmp_path / "small.h5", build_small)
    before = h5.read_bytes()
    mp = mount(h5, "ro") if ro else mount(h5)
    a = mp / "a"
    assert _errno(os.open, a, os.O_WRONLY) == errno.EROFS
    assert _errno(os.open, a, os.O_RDWR) == errno.EROFS
    assert _errno(os.open, mp / "new", os.O_WRONLY | os.O_CREAT, 0o644) == errno.EROFS
    assert _errno(os.truncate, a, 0) == errno.EROFS
    assert _errno(os.mkdir, mp / "newdir") == errno.EROFS
    assert _errno(os.rmdir, mp / "g") == errno.EROFS
    assert _errno(os.unlink, a) == errno.EROFS
    assert _errno(os.rename, a, mp / "a2") == errno.EROFS
    assert _errno(os.symlink, "a", mp / "ln") == errno.EROFS
    assert _errno(os.link, a, mp / "hl") == errno.EROFS
    assert _errno(os.chmod, a, 0o600) == errno.EROFS
    assert _errno(os.setxattr, a, "user.q", b"1") == errno.EROFS
    assert _errno(os.removexattr, mp / "g", "user.x") == errno.EROFS
    res = subprocess.run(["dd", "if=/dev/zero", f"of={a}", "bs=4", "count=1", "conv=notrunc", "status=none"],
                         capture_output=True, text=True)
    assert res.returncode != 0 and "Read-only file system" in res.stderr
    res = subprocess.run(["setfattr", "-n", "user.y", "-v", "2", str(mp / "g")], capture_output=True, text=True)
    assert res.returncode != 0 and "Read-only file system" in res.stderr
    # reads still work, the file is untouched
    assert open(a, "rb").read() == np.arange(10, dtype="<i4").tobytes()
    mode = os.stat(a).st_mode
    if ro:
        assert stat.S_IMODE(mode) == 0o444 and stat.S_IMODE(os.stat(mp).st_mode) == 0o555
        opts = [line.split()[5] for line in open("/proc/self/mountinfo") if line.split()[4] == str(mp)]
        assert opts and "ro" in opts[0].split(",")
    assert h5.read_bytes() == before


def _address(mount, h5, name) -> int:
    mp = mount(h5)
    addr = int(os.getxattr(mp / name, "user.h5fs.address"))
    mount.unmount(mp)
    return addr


def test_broken_object_header(mount, tmp_path, libver):
    h5 = make_h5(tmp_path / f"broken_{libver}.h5", build_small, libver)
    addr = _address(mount, h5, "b")  # relative to the superblock, which h5py puts at 0
    with open(h5, "r+b") as fh:
        fh.seek(addr)
        fh.write(b"\xff" * 16)
    mp = mount(h5)
    assert os.listdir(mp) == ["a", "a.npy", "b", "c", "c.npy", "g", "z", "z.npy"]
    assert _errno(os.stat, mp / "b") == errno.EIO
    assert _errno(open, mp / "b", "rb") == errno.EIO
    res = subprocess.run(["ls", "-l", str(mp)], capture_output=True, text=True)
    assert res.returncode != 0 and "Input/output error" in res.stderr
    assert len([ln for ln in res.stdout.splitlines() if ln.endswith((" a", " c", " g", " z"))]) == 4
    # the rest is browsable
    assert open(mp / "a", "rb").read() == np.arange(10, dtype="<i4").tobytes()
    np.testing.assert_array_equal(np.load(mp / "c.npy"), np.arange(30, dtype="<i2"))
    assert os.getxattr(mp / "g", "user.x") == b"1"
    assert os.stat(mp / "z").st_size == 160000
    # the log names the object and why
    log = mount.log_of(mp)
    assert "/b" in log and "EIO" in log


def test_broken_chunk_data(mount, tmp_path, libver):
    h5 = make_h5(tmp_path / f"badchunk_{libver}.h5", build_small, libver)
    with h5py.File(h5, "r") as f:
        info = f["z"].id.get_chunk_info(3)
    with open(h5, "r+b") as fh:
        fh.seek(info.byte_offset + 2)
        fh.write(b"\x00\xff" * ((info.size - 4) // 2))
    mp = mount(h5)
    z = mp / "z"
    assert os.stat(z).st_size == 160000  # metadata is fine
    with open(z, "rb", buffering=0) as fh:
        assert fh.read(4000) == np.arange(1000, dtype="<i4").tobytes()  # chunk 0 is fine
        fh.seek(3 * 4000)
        with pytest.raises(OSError) as e:
            fh.read(4000)
        assert e.value.errno == errno.EIO
    assert open(mp / "a", "rb").read() == np.arange(10, dtype="<i4").tobytes()
    assert "/z" in mount.log_of(mp)


def test_hard_link_cycle_terminates(mount, tmp_path, libver):
    """A group hard-linked inside its own subtree has one inode; the kernel will not put a
    directory below itself, so the back edge answers ELOOP, and the tools that walk the tree
    (find, du, ls -R) finish instead of looping. A second link elsewhere is the same directory."""
    def build(f):
        a = f.create_group("a")
        a.create_group("b")["data"] = np.arange(5, dtype="<i4")
        a["b"]["back"] = a  # /a/b/back is /a again
        f.create_group("x")["alias"] = a
    mp = mount(make_h5(tmp_path / "cycle.h5", build, libver))
    assert "back" in os.listdir(mp / "a" / "b")
    with pytest.raises(OSError) as e:
        os.stat(mp / "a" / "b" / "back")
    assert e.value.errno == errno.ELOOP
    for cmd in (["find", str(mp)], ["du", "-s", str(mp)], ["ls", "-R", str(mp)]):
        subprocess.run(cmd, capture_output=True, timeout=30)  # a loop would time out here
    assert os.stat(mp / "x" / "alias").st_ino == os.stat(mp / "a").st_ino
    assert os.stat(mp / "a").st_nlink == 3
    with open(mp / "x" / "alias" / "b" / "data", "rb") as fh:
        assert fh.read() == np.arange(5, dtype="<i4").tobytes()
