"""The h5fs command line: mount/umount contract, errors, options, foreground mode."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess

import numpy as np
import pytest

from conftest import H5FS, force_unmount, is_mounted, make_h5, run_h5fs, wait_until
from h5fs.mount_options import DEFAULT_READAHEAD_KB
from h5fs.fuse.mounts import find_mount, process_alive


def build(f):
    f["x"] = np.arange(5, dtype="<i4")


@pytest.fixture
def h5(tmp_path):
    return make_h5(tmp_path / "f.h5", build)


def test_mount_umount_waits_for_daemon(mount, h5):
    mp = mount(h5)
    pid = int(os.getxattr(mp, "user.h5fs.pid"))
    assert process_alive(pid)
    m = find_mount(str(mp))
    assert m.fstype == "fuse.h5fs" and m.source == str(h5)
    proc = run_h5fs("umount", mp)
    assert proc.returncode == 0, proc.stderr
    assert not is_mounted(mp)
    assert not process_alive(pid)  # umount returned only after the daemon exited
    assert "unmounted" in mount.log_of(mp)


def test_missing_file(tmp_path):
    (tmp_path / "mp").mkdir()
    proc = run_h5fs("mount", tmp_path / "nope.h5", tmp_path / "mp")
    assert proc.returncode != 0
    assert "nope.h5" in proc.stderr and "No such file" in proc.stderr
    assert not is_mounted(tmp_path / "mp")


@pytest.mark.parametrize("content", [b"", b"this is not an HDF5 file\n" * 100,
                                     b"\x89HDF\r\n\x1a\n" + b"\xff" * 200], ids=["empty", "text", "badsuperblock"])
def test_not_hdf5(tmp_path, content):
    bad = tmp_path / "bad.h5"
    bad.write_bytes(content)
    (tmp_path / "mp").mkdir()
    proc = run_h5fs("mount", bad, tmp_path / "mp")
    assert proc.returncode != 0
    assert proc.stderr.startswith("h5fs: ") and str(bad) in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr  # one clear line, no traceback
    assert not is_mounted(tmp_path / "mp")


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_create_refuses_more_than_a_file_can_show(mount, h5, sparse):
    """A shape of more than 2**63-1 bytes is refused (EFBIG, saying why) and leaves no dataset:
    the mount could not show one."""
    mp = mount(h5, "rw")
    proc = run_h5fs("create", mp / "big", "--shape", "1000000000000,1000000000000", "--dtype", "f4",
                    "--chunks", "1000,1000", *(["--sparse"] if sparse else []))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip() == f"h5fs: cannot create {mp / 'big'}: File too large (its data would be more than " \
                                  "the 9223372036854775807 bytes a file can show)", proc.stderr
    assert sorted(os.listdir(mp)) == ["x", "x.npy"]
    assert "more than a file can show" in mount.log_of(mp)
    run_h5fs("umount", mp, check=True)
    assert run_h5fs("check", h5).returncode == 0


@pytest.mark.parametrize("layout", ["contiguous", "compact"])
def test_create_sparse_refuses_another_layout(mount, h5, layout):
    """A sparse dataset is chunked: --sparse with --layout contiguous or compact is a bad argument
    (exit 2, saying why), not a layout silently dropped."""
    mp = mount(h5, "rw")
    proc = run_h5fs("create", mp / "s", "--sparse", "--shape", "100", "--dtype", "f4", "--chunks", "10",
                    "--layout", layout)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"h5fs: --sparse with --layout {layout}: a sparse dataset is chunked " \
                                  "(structured chunks)", proc.stderr
    assert sorted(os.listdir(mp)) == ["x", "x.npy"]
    run_h5fs("create", mp / "s", "--sparse", "--shape", "100", "--dtype", "f4", "--chunks", "10", "--layout",
             "chunked", check=True)
    assert os.getxattr(mp / "s", "user.h5fs.layout") == b"structured-chunk (sparse)"


def test_mountpoint_problems(mount, h5, tmp_path):
    proc = run_h5fs("mount", h5, tmp_path / "missing")
    assert proc.returncode != 0 and "missing" in proc.stderr and "No such file" in proc.stderr
    proc = run_h5fs("mount", h5, h5)
    assert proc.returncode != 0 and "not a directory" in proc.stderr
    mp = mount(h5)
    proc = run_h5fs("mount", h5, mp)
    assert proc.returncode != 0 and "busy" in proc.stderr
    proc = run_h5fs("umount", tmp_path)
    assert proc.returncode != 0 and "not mounted" in proc.stderr


def test_rejected_and_unknown_options(h5, tmp_path):
    (tmp_path / "mp").mkdir()
    proc = run_h5fs("mount", "-o", "max_read=131072", h5, tmp_path / "mp")
    assert proc.returncode != 0 and "max_read" in proc.stderr
    proc = run_h5fs("mount", "-o", "no_such_option", h5, tmp_path / "mp")
    assert proc.returncode != 0 and "no_such_option" in proc.stderr
    assert not is_mounted(tmp_path / "mp")


@pytest.mark.parametrize("foreground", [False, True])
def test_log_path_that_cannot_be_written(h5, tmp_path, foreground):
    """log=PATH in a missing directory (or naming a directory) is a bad option: one line, exit 2,
    nothing mounted."""
    (tmp_path / "mp").mkdir()
    for log, why in ((tmp_path / "missing" / "x.log", "No such file or directory"), (tmp_path, "Is a directory")):
        proc = run_h5fs("mount", *(["-f"] if foreground else []), "-o", f"log={log}", h5, tmp_path / "mp")
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr == f"h5fs: log={log}: cannot write the log there: {why}\n", proc.stderr
        assert not is_mounted(tmp_path / "mp")


def test_options_pass_through(mount, h5):
    mp = mount(h5, "allow_other,noatime", "fsname=myfs")
    m = find_mount(str(mp))
    assert m.source == "myfs"
    line = [ln for ln in open("/proc/self/mountinfo") if ln.split()[4] == str(mp)][0]
    assert "allow_other" in line and "default_permissions" in line and "noatime" in line
    assert open(mp / "x", "rb").read() == np.arange(5, dtype="<i4").tobytes()


def test_readahead_raised(mount, h5):
    mp = mount(h5)
    dev = find_mount(str(mp)).device
    with open(f"/sys/class/bdi/{dev}/read_ahead_kb") as fh:
        assert int(fh.read()) == DEFAULT_READAHEAD_KB


def test_foreground(h5, tmp_path):
    mp = tmp_path / "mp"
    mp.mkdir()
    proc = subprocess.Popen(H5FS + ["mount", "-f", str(h5), str(mp)], stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: is_mounted(mp), 20)
        assert wait_until(lambda: os.path.exists(mp / "x"), 10)
        assert int(os.getxattr(mp, "user.h5fs.pid")) == proc.pid
        assert run_h5fs("umount", mp).returncode == 0
        assert proc.wait(timeout=20) == 0
        assert "ready" in proc.stderr.read()  # -f logs to stderr
    finally:
        if proc.poll() is None or is_mounted(mp):
            force_unmount(mp, proc.pid)
            proc.wait(timeout=10)


def test_sigterm_unmounts(mount, h5):
    mp = mount(h5)
    pid = int(os.getxattr(mp, "user.h5fs.pid"))
    os.kill(pid, signal.SIGTERM)
    assert wait_until(lambda: not process_alive(pid), 20)
    assert not is_mounted(mp)


def test_entry_point_and_default_log(h5, tmp_path):
    exe = shutil.which("h5fs")
    if exe is None:
        pytest.skip("h5fs entry point not on PATH")
    assert subprocess.run([exe, "--help"], capture_output=True).returncode == 0
    mp = tmp_path / "mp"
    mp.mkdir()
    proc = subprocess.run([exe, "mount", str(h5), str(mp)], capture_output=True, text=True, timeout=60)
    try:
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == "" and proc.stderr == ""
        log = os.getxattr(mp, "user.h5fs.log").decode()   # syslog, or a file when /dev/log is absent
        assert log == "syslog" or os.path.exists(log) and "mounted" in open(log).read()
    finally:
        if is_mounted(mp):
            assert subprocess.run([exe, "umount", str(mp)], timeout=60).returncode == 0


def test_mount_returns_only_when_ready(h5, tmp_path, mount):
    """Right after `h5fs mount` returns, the tree answers (no polling needed)."""
    for _ in range(3):
        mp = mount(h5)
        assert os.listdir(mp) == ["x", "x.npy"]
        mount.unmount(mp)


def test_umount_after_daemon_was_killed(mount, h5):
    mp = mount(h5)
    pid = int(os.getxattr(mp, "user.h5fs.pid"))
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not process_alive(pid), 20)
    with pytest.raises(OSError):
        os.listdir(mp)  # ENOTCONN: the mount is left behind
    proc = run_h5fs("umount", mp)
    assert proc.returncode == 0, proc.stderr
    assert not is_mounted(mp)


def test_version():
    import h5fs
    proc = run_h5fs("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"h5fs {h5fs.__version__}"
