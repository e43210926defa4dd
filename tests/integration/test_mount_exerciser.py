"""Random reads, writes, truncates, mapped reads and writes, closes and reopens through the mount,
each checked against a bytearray model (exerciser_support), under each mount option, on a new
file (a 1-D uint8 dataset) and on a chunked float32 gzip dataset's raw view; then the file is
read whole by h5py and matched with the model, and `h5fs check` passes.
H5FS_EXERCISER_OPS sets the operations per run (a longer run: H5FS_EXERCISER_OPS=200000)."""

from __future__ import annotations

import os
import random
import threading
import time

import h5py
import numpy as np
import pytest

from crash_support import kill_daemon
from exerciser_support import Exerciser, expected_both_views, run_child, run_watched
from write_support import verify_file

OPS = int(os.environ.get("H5FS_EXERCISER_OPS", "250"))
HANG = 60.0 + OPS * 0.5   # s for a whole run before the mount counts as hung
OPTIONS = {"default": (), "writeback_cache": ("writeback_cache",), "compression=none": ("compression=none",)}
N = 20_000   # float32 elements of D at first


def make(path) -> np.ndarray:
    data = np.random.default_rng(5).random(N, dtype="f4")
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("D", data=data, chunks=(1024,), maxshape=(None,), compression="gzip")
    return data


def exercise(mount, tmp_path, options, target: str, seed: int) -> None:
    path = tmp_path / "x.h5"
    data = make(path)
    mp = mount(path, "rw", *options)
    if target == "new":
        name, element, model = "f", 1, bytearray()
        (mp / name).touch()
    else:
        name, element, model = "D", 4, bytearray(data.tobytes())
    ex = Exerciser(str(mp / name), model, seed, element=element, grow_whole="writeback_cache" in options)
    run_watched(lambda: ex.run(OPS), os.stat(mp).st_dev, HANG, lambda: ex.done)
    mount.unmount(mp)
    verify_file(path, h5dump=False)
    with h5py.File(path, "r") as f:
        assert f[name].dtype == ("u1" if target == "new" else "<f4")
        assert f[name][()].tobytes() == bytes(model)


@pytest.mark.parametrize("target", ["new", "D"])
@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_random_operations_match_the_model(mount, tmp_path, option, target):
    exercise(mount, tmp_path, OPTIONS[option], target, seed=len(option) * 10 + len(target))   # fixed: str hashes vary by run


def test_truncate_under_writeback_cache_does_not_hang(mount, tmp_path):
    """Write, truncate to a size the kernel did not hold, read back: with -o writeback_cache the
    truncate's answer once waited for a drop of its own pages that the kernel held for it."""
    path = tmp_path / "x.h5"
    make(path)
    mp = mount(path, "rw", "writeback_cache")
    (mp / "f").touch()
    body = random.Random(1).randbytes(300_000)

    class Repeat(Exerciser):
        def run(self, count: int) -> None:
            try:
                for i in range(count):
                    self.done.append(f"write, truncate {100_000 + i}, read")
                    os.pwrite(self.fd, body, 0)
                    os.ftruncate(self.fd, 100_000 + i)
                    assert os.pread(self.fd, 200_000, 0) == body[:100_000 + i]
            finally:
                os.close(self.fd)

    repeat = Repeat(str(mp / "f"), bytearray(), 0)
    run_watched(lambda: repeat.run(30), os.stat(mp).st_dev, 30.0, lambda: repeat.done)
    mount.unmount(mp)
    verify_file(path, h5dump=False)
    with h5py.File(path, "r") as f:
        assert f["f"][()].tobytes() == body[:100_029]


def test_kill_during_the_exerciser_leaves_a_readable_file(mount, tmp_path):
    """`kill -9` mid-run: h5py reads the file at once (no repair), and after the journal's
    replay at the next mount `h5fs check` passes."""
    path = tmp_path / "x.h5"
    make(path)
    mp = mount(path, "rw")
    pid = int(os.getxattr(mp, "user.h5fs.pid"))
    (mp / "f").touch()
    ex = Exerciser(str(mp / "f"), bytearray(), 3)

    def work() -> None:
        try:
            ex.run(10**6)
        except OSError:   # the daemon is gone (ENOTCONN)
            pass

    writer = threading.Thread(target=work, daemon=True)
    writer.start()
    time.sleep(3.0)
    assert writer.is_alive(), f"the exerciser stopped before the kill: {ex.done[-8:]}"
    kill_daemon(mp, pid)
    writer.join(30)
    with h5py.File(path, "r") as f:
        assert f["D"].shape == (N,)
        f["D"][()]
        if "f" in f:
            assert f["f"].dtype == np.uint8 and f["f"].shape[0] <= ex.max_size
            f["f"][()]
    mp = mount(path, "rw")   # replays the journal the kill left
    mount.unmount(mp)
    verify_file(path, h5dump=False)


@pytest.mark.parametrize("option", ["default", "writeback_cache"])
def test_appends_to_the_npy_view_show_at_once(mount, tmp_path, option):
    """Each append to D.npy grows D and rewrites the header: np.load sees the new shape right
    after, and the write never waits for the kernel to drop the pages it holds for that write
    (it once hung the mount)."""
    path = tmp_path / "x.h5"
    data = make(path)
    mp = mount(path, "rw", *OPTIONS[option])
    want = [data]

    class Appends(Exerciser):
        def run(self, count: int) -> None:
            os.close(self.fd)
            for i in range(count):
                self.done.append(f"append {i}")
                with open(self.path, "r+b") as fh:
                    fh.seek(0, os.SEEK_END)
                    fh.write(np.full(1024, i, "<f4").tobytes())
                want.append(np.full(1024, i, "<f4"))
                assert np.array_equal(np.load(self.path), np.concatenate(want)), self._where("np.load")

    appends = Appends(str(mp / "D.npy"), bytearray(), 0)
    run_watched(lambda: appends.run(30), os.stat(mp).st_dev, 60.0, lambda: appends.done)
    mount.unmount(mp)
    found = verify_file(path, h5dump=False)
    assert np.array_equal(found["D"], np.concatenate(want))


@pytest.mark.parametrize("option", ["default", "writeback_cache"])
def test_writes_to_both_views_at_once(mount, tmp_path, option):
    """D mapped and written in its first half while D.npy is mapped and written in its second
    half (and read): each write drops the other view's pages, whose kernel may hold them for a
    write being answered; neither waits for the other (two such waits once hung the mount)."""
    path = tmp_path / "x.h5"
    data = make(path)
    mp = mount(path, "rw", *OPTIONS[option])
    run_child(["both_views", str(mp), str(N), "150"], os.stat(mp).st_dev, 90.0)
    expected_both_views(data, 150)
    assert np.array_equal(np.load(mp / "D.npy"), data)
    mount.unmount(mp)
    assert np.array_equal(verify_file(path, h5dump=False)["D"], data)
