"""Shared fixtures: build HDF5 files with h5py (the oracle) and mount them with the real CLI."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from contextlib import contextmanager
import sys
import time
from pathlib import Path

import pytest

# h5py's libhdf5 and its plugins load before any test module imports netCDF4 (which bundles its
# own libhdf5): imported the other way round, h5py's plugin filters fail ("error during user
# callback") for the rest of the run
import h5py  # noqa: E402
import hdf5plugin  # noqa: F401,E402

H5FS = [sys.executable, "-m", "h5fs.cli"]
REPO = Path(__file__).resolve().parent.parent


_RUN_LOG_LEVEL = logging.root.level   # as the run set it, before any h5pyd.File


@pytest.fixture(autouse=True)
def _root_log_level():
    """Each test starts and ends with the root logger's level as the run set it: h5pyd.File
    sets it to ERROR (h5pyd/_hl/files.py), also from a fixture opening a domain before the test,
    which would hide the warnings later tests read in caplog."""
    logging.root.setLevel(_RUN_LOG_LEVEL)
    yield
    logging.root.setLevel(_RUN_LOG_LEVEL)


def bad_corpus() -> list[Path]:
    """The malformed files of `../shared/corpus/bad` (or $H5FS_BAD_CORPUS). CI puts `../shared`
    beside the checkout: a corpus missing fails the collection loudly, never skips."""
    corpus = Path(os.environ.get("H5FS_BAD_CORPUS", REPO.parent / "shared" / "corpus" / "bad"))
    files = sorted(corpus.glob("*.h5"))
    if not files:
        raise RuntimeError(f"no malformed-file corpus at {corpus}: put ../shared beside the checkout "
                           "or set H5FS_BAD_CORPUS")
    return files
LIBVERS = ("earliest", "latest")


def run_h5fs(*args, timeout: float = 60, check: bool = False) -> subprocess.CompletedProcess:
    """Run the real CLI (`python -m h5fs.cli ...`)."""
    proc = subprocess.run(H5FS + [str(a) for a in args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"h5fs {' '.join(map(str, args))} failed ({proc.returncode}): {proc.stderr}")
    return proc


def fuse_mounts() -> dict[str, str]:
    """mount point -> fstype of every FUSE mount (from /proc/self/mountinfo)."""
    out = {}
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            mp = left.split()[4].replace("\\040", " ")
            fstype = right.split()[0]
            if fstype.startswith("fuse"):
                out[mp] = fstype
    return out


def is_mounted(path) -> bool:
    return os.path.realpath(path) in fuse_mounts()


def _daemon_pid(mp: Path) -> int | None:
    # getxattr on a hung mount would block: ask from a subprocess with a timeout
    try:
        proc = subprocess.run(["getfattr", "--only-values", "-n", "user.h5fs.pid", str(mp)],
                              capture_output=True, text=True, timeout=5)
        return int(proc.stdout) if proc.returncode == 0 else None
    except (subprocess.TimeoutExpired, ValueError):
        return None


def _mount_device(mp) -> int | None:
    """The FUSE device number of the mount at `mp`, from the mount table (a stat of a hung mount
    would block)."""
    from h5fs.fuse.mounts import find_mount
    m = find_mount(str(mp))
    if m is None or not m.fstype.startswith("fuse"):
        return None
    major, minor = m.device.split(":")
    return os.makedev(int(major), int(minor))


def abort_path(device: int) -> str:
    """The fusectl file that aborts the connection of `device` (fusectl mounted if it was not)."""
    path = f"/sys/fs/fuse/connections/{os.minor(device)}/abort"
    if not os.path.exists(path):
        subprocess.run(["mount", "-t", "fusectl", "none", "/sys/fs/fuse/connections"], capture_output=True)
    return path


def abort_connection(device: int) -> None:
    """Abort a FUSE connection through fusectl, as an administrator does: every request waiting on
    it fails at once, so a hung daemon cannot leave `sync` or a later test blocked."""
    path = abort_path(device)
    try:
        with open(path, "w") as fh:
            fh.write("1")
    except OSError:
        pass  # gone meanwhile


def force_unmount(mp: Path, pid: int | None = None) -> None:
    """Abort the connection, lazy-unmount and kill the daemon: the fallback when a clean umount
    did not work."""
    device = _mount_device(mp)
    if device is not None:
        abort_connection(device)
    subprocess.run(["fusermount3", "-u", "-z", str(mp)], capture_output=True, timeout=30)
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Mounter:
    """Mounts files with the real CLI in the background (read-only unless "rw" is among the
    options); `cleanup` always unmounts."""

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.mounts: list[tuple[Path, Path]] = []  # (mountpoint, log)

    def __call__(self, h5path, *options: str, expect_ok: bool = True) -> Path:
        n = len(self.mounts)
        mp = self.tmp_path / f"mnt{n}"
        mp.mkdir(exist_ok=True)
        log = self.tmp_path / f"mnt{n}.log"
        args = ["mount", "-o", f"log={log}"]
        if "rw" not in options:  # read tests compare with h5py while mounted: a shared lock
            args += ["-o", "ro"]
        for opt in options:
            args += ["-o", opt]
        proc = run_h5fs(*args, h5path, mp)
        if proc.returncode != 0:
            if is_mounted(mp):  # must not happen; clean up anyway
                self.mounts.append((mp, log))
            text = log.read_text() if log.exists() else ""
            raise AssertionError(f"mount failed ({proc.returncode}): {proc.stderr}\n{text}")
        self.mounts.append((mp, log))
        assert is_mounted(mp), "h5fs mount returned 0 but nothing is mounted"
        return mp

    def log_of(self, mp: Path) -> str:
        for m, log in self.mounts:
            if m == mp:
                return log.read_text() if log.exists() else ""
        raise KeyError(mp)

    def unmount(self, mp: Path) -> None:
        pid = _daemon_pid(mp) if is_mounted(mp) else None
        try:
            proc = run_h5fs("umount", mp, timeout=60)
            ok = proc.returncode == 0
        except subprocess.TimeoutExpired:
            ok = False
        if not ok or is_mounted(mp):
            force_unmount(mp, pid)
            raise AssertionError(f"clean unmount of {mp} failed: forced")

    def cleanup(self) -> list[str]:
        problems = []
        for mp, log in self.mounts:
            if is_mounted(mp):
                try:
                    self.unmount(mp)
                except Exception as exc:
                    problems.append(str(exc))
            text = log.read_text() if log.exists() else ""
            if "unexpected error" in text or "Traceback" in text:
                problems.append(f"daemon log of {mp} shows an unexpected exception:\n{text}")
        return problems


@pytest.fixture
def mount(tmp_path):
    """`mount(h5path, *options) -> mountpoint`; every mount is unmounted at teardown, even when
    the test fails (clean `h5fs umount` first, then lazy unmount + kill). Teardown fails if the
    daemon logged an unexpected exception."""
    m = Mounter(tmp_path)
    try:
        yield m
    finally:
        problems = m.cleanup()
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture(scope="module", autouse=True)
def _no_mounts_left_behind(tmp_path_factory):
    """After each test module, whatever it left mounted is aborted and detached, so one hung mount
    cannot block the rest of the run (a global `sync` waits for every mounted file system)."""
    yield
    base = str(tmp_path_factory.getbasetemp())
    for mp in fuse_mounts():
        if mp.startswith(base):
            force_unmount(Path(mp))
    from h5fs import utab
    utab.prune()   # the umount-helper lines of daemons a test killed


@contextmanager
def tmpfs(where: Path, size: str, mode: str = "0755"):
    """A small tmpfs mounted at `where` (made here): a disk that fills up; unmounted after."""
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode={mode}", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def make_h5(path: Path, build, libver: str = "earliest", **kwargs) -> Path:
    """Create `path` with h5py (`libver` 'earliest' or 'latest') and fill it with `build(f)`."""
    with h5py.File(path, "w", libver=libver, **kwargs) as f:
        build(f)
    return path


@pytest.fixture(params=LIBVERS)
def libver(request) -> str:
    return request.param


def wait_until(pred, timeout: float = 10.0, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()


def saved(arr) -> bytes:
    """What np.save writes for `arr` (format 2.0/3.0 warnings silenced; h5py's opaque marker,
    dtype metadata, is not saved)."""
    import io
    import warnings

    import numpy as np
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()
