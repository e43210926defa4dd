"""Crash tests' tools: a workload whose every element tells which write put it there, the check
of the crash promise (each element old or new, every fsync'd write present), the rebuild of a
file from a prefix of the daemon's recorded writes (a power loss), and edits of the engine in a
process killed after them (`edit_then_kill`)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field

import h5py
import numpy as np

from conftest import REPO, abort_connection, force_unmount
from h5fs.storage.journal import SUFFIX
from h5fs.storage.file_writer import read_recording

NAME = "d"


def initial(n: int) -> np.ndarray:
    return -np.arange(1, n + 1, dtype="<f8")   # old values: negative, one per element


@dataclass
class Workload:
    """Writes of unique values (write k puts k * 1e7 + element index), each followed by fsync."""

    n: int
    seed: int
    first: int = 1                   # k of the first write (unique across rounds)
    acked: list[tuple[int, int, int]] = field(default_factory=list)   # (k, start, stop) fsync'd

    def run(self, path, count: int) -> None:
        rng = random.Random(self.seed)
        fd = os.open(path, os.O_WRONLY)
        try:
            for k in range(self.first, self.first + count):
                start = rng.randrange(self.n)
                stop = min(self.n, start + rng.randrange(1, max(2, self.n // 8)))
                values = k * 1e7 + np.arange(start, stop, dtype="<f8")
                os.pwrite(fd, values.tobytes(), start * 8)
                os.fsync(fd)
                self.acked.append((k, start, stop))
        finally:
            os.close(fd)


def check_promise(values: np.ndarray, acked: list[tuple[int, int, int]], n: int) -> None:
    """Each element holds its old value or one a write put there, and nothing older than the
    last fsync'd write that covered it."""
    assert values.shape == (n,)
    idx = np.arange(n)
    old = values == initial(n)
    k = np.where(old, 0, np.round((values - idx) / 1e7)).astype(np.int64)
    assert np.all(old | ((k >= 1) & (values == k * 1e7 + idx))), "an element holds a value never written"
    floor = np.zeros(n, np.int64)
    for kk, start, stop in acked:
        floor[start:stop] = kk
    assert np.all(k >= floor), "a write acknowledged by fsync is missing"


def kill_daemon(mp, pid: int) -> None:
    """`kill -9` the daemon, wait until it is gone (its file lock with it), drop the mount."""
    device = os.stat(mp).st_dev
    os.kill(pid, signal.SIGKILL)
    start = time.monotonic()
    aborted = False
    # until reaped: a zombie leader may still have threads exiting that hold the file (and lock)
    while os.path.exists(f"/proc/{pid}"):
        if not aborted and time.monotonic() - start > 2:
            # a thread killed inside the kernel (an entry invalidation waiting for a directory
            # lock that a request to this very daemon holds) leaves only when the connection is
            # aborted, as an administrator does through fusectl
            abort_connection(device)
            aborted = True
        assert time.monotonic() - start < 30, f"daemon {pid} survived SIGKILL"
        time.sleep(0.01)
    force_unmount(mp)


def kill_mid_copy(mp, name: str, npy: bytes) -> None:
    """`cp` of the .npy bytes `npy` (cut short) over `mp/name`, fsync'd, then the daemon killed
    before the copy is closed: the replacement never completes."""
    pid = int(os.getxattr(mp, "user.h5fs.pid"))
    with open(mp / name, "wb") as out:   # cp's open: O_TRUNC
        out.write(npy)
        out.flush()
        os.fsync(out.fileno())
        kill_daemon(mp, pid)
        try:
            out.close()
        except OSError:   # the daemon is gone
            pass


def read_dataset(path) -> np.ndarray:
    with h5py.File(path, "r") as f:
        return f[NAME][()]


def rebuild(original: str, recording: str, out: str, stop: int, extra: list[int]) -> None:
    """`out` (and its journal) as the disk would hold them after the recorded operations
    [0, stop), plus the later writes numbered in `extra` (in that order)."""
    rebuild_writes(original, read_recording(recording), out, list(range(stop)) + extra)


def rebuild_writes(original: str, ops: list, out: str, writes: list[int]) -> None:
    """`out` (and its journal): `original` with the recorded writes and truncations numbered in
    `writes` applied in that order (fsyncs skipped)."""
    shutil.copyfile(original, out)
    files = {0: out, 1: out + SUFFIX}
    if os.path.exists(files[1]):
        os.unlink(files[1])
    fds = {tag: os.open(p, os.O_RDWR | os.O_CREAT) for tag, p in files.items()}
    try:
        for i in writes:
            op, tag, offset, data = ops[i]
            if op == b"W":
                os.pwrite(fds[tag], data, offset)
            elif op == b"T":
                os.ftruncate(fds[tag], offset)
    finally:
        for fd in fds.values():
            os.close(fd)


def barriers(recording: str) -> list[int]:
    """Indexes of the recorded fsyncs (of either file)."""
    return [i for i, (op, _, _, _) in enumerate(read_recording(recording)) if op == b"S"]


def durable_at(ops: list, stop: int) -> tuple[list[int], list[int]]:
    """For a power loss right after operation `stop`: the writes the disk surely holds (each
    file's writes before its own last fsync up to there) and those it may or may not hold (the
    rest up to `stop`: a fsync of one file says nothing of the other's writes)."""
    last = {tag: max([i for i in range(stop + 1) if ops[i][0] == b"S" and ops[i][1] == tag], default=-1)
            for tag in (0, 1)}
    sure, maybe = [], []
    for i in range(stop + 1):
        op, tag = ops[i][0], ops[i][1]
        if op != b"S":
            (sure if i < last[tag] else maybe).append(i)
    return sure, maybe


def replayed_prefixes(original: str, recording: str, out: str, seed: int):
    """Rebuild `out` as a power loss just before each recorded fsync after the first would leave
    it (and after the last operation): of each file, the writes before its own last fsync, alone,
    with all the later ones in order, and with a random subset of them in random order (a fsync
    of one file says nothing of the other's writes); then open it writable as the next mount does (journal
    replay). Yields after each the index of the last fsync issued before the power loss."""
    rng = random.Random(seed)
    ops = read_recording(recording)
    marks = barriers(recording)
    assert marks, "the daemon recorded no fsync"
    for b, stop in enumerate(marks):
        end = marks[b + 1] - 1 if b + 1 < len(marks) else len(ops) - 1
        sure, maybe = durable_at(ops, end)
        for extra in ([], maybe, rng.sample(maybe, rng.randrange(len(maybe) + 1))):
            rebuild_writes(original, ops, out, sure + extra)
            recover(out)
            yield stop


def recover(path) -> None:
    """Open `path` writable, as the next mount does first (its journal replayed), and check that
    the journal was taken as the file's own: a crash never leaves one that is set aside."""
    from h5fs.model.file import H5File
    H5File.open(str(path), writable=True).close()
    stale = [p for p in os.listdir(os.path.dirname(os.path.abspath(path))) if ".h5fs-journal.stale-" in p]
    assert not stale, f"a crash's journal was set aside: {stale}"


_EDITOR = """\
import os, sys
sys.path.insert(0, {root!r})
from h5fs.model.file import H5File
from h5fs.model.tree_edit import TreeEditor
from h5fs.model.writeback import Writeback
f = H5File.open({path!r}, writable=True)
ed = TreeEditor(f, Writeback(f, 1 << 20))
"""


def edit_then_kill(path, edits: str) -> None:
    """Run `edits` (Python using `f`, the file at `path` open read-write, and `ed`, its tree
    editor with a writeback) in a process that is then killed with SIGKILL: what they left in
    the journal is a crash's."""
    script = _EDITOR.format(root=str(REPO), path=str(path)) + textwrap.dedent(edits) + "os.kill(os.getpid(), 9)\n"
    proc = subprocess.run([sys.executable, "-c", script])
    assert proc.returncode == -9
