"""Crash safety, tested not argued: the daemon killed (`kill -9`) at random instants during
fsync'd writes, and power losses rebuilt from the daemon's recorded writes and barriers. After
each, h5py opens the file (no repair first for a kill) and every element holds its old or a new
value, with every fsync'd write present. H5FS_CRASH_ROUNDS raises the number of kills."""

from __future__ import annotations

import os
import random
import threading
import time

import h5py
import pytest

from conftest import run_h5fs
from crash_support import NAME, Workload, check_promise, initial, kill_daemon, read_dataset, rebuild, replayed_prefixes
from h5fs.check import check
from h5fs.storage.file_writer import read_recording
from write_support import verify_file

N = 20000
ROUNDS = int(os.environ.get("H5FS_CRASH_ROUNDS", "5"))

# layout -> (libver, dataset options): every kind of storage a 1-D dataset can have
LAYOUTS = {
    "contiguous": ("latest", {}),
    "btree-v1": ("earliest", {"chunks": (500,), "maxshape": (None,)}),
    "btree-v1-gzip": ("earliest", {"chunks": (500,), "maxshape": (None,), "compression": "gzip", "shuffle": True}),
    "extensible-array-gzip": ("latest", {"chunks": (500,), "maxshape": (None,), "compression": "gzip"}),
    "fixed-array": ("latest", {"chunks": (500,)}),
}


def make(path, layout: str) -> None:
    libver, options = LAYOUTS[layout]
    with h5py.File(path, "w", libver=libver) as f:
        f.create_dataset(NAME, data=initial(N), **options)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_kill_during_fsynced_writes(mount, tmp_path, layout):
    path = tmp_path / f"{layout}.h5"
    make(path, layout)
    acked: list[tuple[int, int, int]] = []
    rng = random.Random(layout)
    for r in range(ROUNDS):
        mp = mount(path, "rw")
        pid = int(os.getxattr(mp, "user.h5fs.pid"))
        work = Workload(N, seed=r, first=r * 100_000 + 1)
        writer = threading.Thread(target=_run_until_killed, args=(work, mp / NAME))
        writer.start()
        time.sleep(rng.uniform(0.05, 0.6))
        kill_daemon(mp, pid)
        writer.join(30)
        acked += work.acked
        check_promise(read_dataset(path), acked, N)   # at once: no repair, no remount
    mp = mount(path, "rw")   # replays what the last kill left in the journal
    run_h5fs("umount", mp, check=True)
    verify_file(path, h5dump=False)
    check_promise(read_dataset(path), acked, N)


def _run_until_killed(work: Workload, target) -> None:
    try:
        work.run(target, 10**6)
    except OSError:   # the daemon is gone (ENOTCONN): what was acknowledged is recorded
        pass


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_power_loss_at_every_barrier(mount, tmp_path, layout, monkeypatch):
    """Rebuild the file from every prefix of the daemon's writes that ends at an fsync, alone
    and with a random subset of the writes after it applied in random order; the next open
    (journal replay) must leave a file h5py reads with every element old or new."""
    original = tmp_path / "original.h5"
    make(original, layout)
    path = tmp_path / "live.h5"
    path.write_bytes(original.read_bytes())
    recording = tmp_path / "writes.rec"
    monkeypatch.setenv("H5FS_RECORD", str(recording))
    mp = mount(path, "rw")
    work = Workload(N, seed=7)
    work.run(mp / NAME, 30)
    run_h5fs("umount", mp, check=True)
    monkeypatch.delenv("H5FS_RECORD")
    out = str(tmp_path / "replayed.h5")
    for _ in replayed_prefixes(str(original), str(recording), out, seed=1):
        check_promise(read_dataset(out), [], N)
        report = check(out)
        assert report.sound, report.problems
    ops = len(read_recording(str(recording)))
    rebuild(str(original), str(recording), out, ops, [])
    assert run_h5fs("check", "--repair", out).returncode == 0
    check_promise(read_dataset(out), work.acked, N)
    verify_file(out, h5dump=False)
