"""A model-checked random exerciser of one file through the mount (fsx's idea, our code):
random read, write, truncate up and down, mapped read and write, close and reopen, each checked
against a bytearray that holds what the file must hold. A watchdog aborts the FUSE connection
when an operation does not return, so a hung mount fails the test instead of hanging it."""

from __future__ import annotations

import mmap
import os
import random
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Callable

from conftest import abort_connection, abort_path

OPS = ("read", "write", "truncate", "mapread", "mapwrite", "reopen")
WEIGHTS = (6, 6, 2, 3, 3, 1)
FULL_CHECK_EVERY = 50   # ops between reads of the whole file (each op checks what it touched)


@dataclass
class Exerciser:
    path: str
    model: bytearray         # what the file holds
    seed: int
    element: int = 1         # bytes per element: sizes are whole elements (a partial write rounds up)
    resizable: bool = True   # truncate and writes past the end allowed
    # writes past the end end on an element boundary: under -o writeback_cache the kernel keeps
    # the size a write made, which the dataset (whole elements) cannot hold
    grow_whole: bool = False
    max_size: int = 256 << 10
    max_op: int = 64 << 10
    done: list[str] = field(default_factory=list)   # the ops so far, for the failure message

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.fd = os.open(self.path, os.O_RDWR)

    def run(self, count: int) -> None:
        try:
            for n in range(count):
                op = self.rng.choices(OPS, WEIGHTS)[0]
                if op == "truncate" and not self.resizable:
                    op = "write"
                getattr(self, "_" + op)()
                assert os.fstat(self.fd).st_size == len(self.model), self._where("size")
                if n % FULL_CHECK_EVERY == FULL_CHECK_EVERY - 1:
                    self._check(0, len(self.model))
            self._check(0, len(self.model))
        finally:
            os.close(self.fd)

    # -- operations ------------------------------------------------------------------------
    def _span(self, limit: int) -> tuple[int, int]:
        """An offset and length inside [0, limit) (length 0 when limit is 0)."""
        if limit <= 0:
            return 0, 0
        off = self.rng.randrange(limit)
        return off, self.rng.randint(0, min(self.max_op, limit - off))

    def _read(self) -> None:
        off, size = self._span(len(self.model))
        self.done.append(f"read {off}+{size}")
        self._check(off, size)

    def _write(self) -> None:
        limit = self.max_size if self.resizable else len(self.model)
        off, size = self._span(limit)
        if self.grow_whole and off + size > len(self.model):
            size = min(self._whole(off + size, up=True), self._whole(limit)) - off
            size = max(size, 0)
        data = self.rng.randbytes(size)
        self.done.append(f"write {off}+{size}")
        assert os.pwrite(self.fd, data, off) == size
        if size:   # a write of nothing grows nothing
            self._grow(off + size)
        self.model[off:off + size] = data
        self._check(off, size)

    def _truncate(self) -> None:
        size = self._whole(self.rng.randrange(self.max_size))
        self.done.append(f"truncate {size} (from {len(self.model)})")
        os.ftruncate(self.fd, size)
        self._resize(size)

    def _mapread(self) -> None:
        off, size = self._span(len(self.model))
        self.done.append(f"mapread {off}+{size}")
        if size == 0:
            return
        with mmap.mmap(self.fd, len(self.model), prot=mmap.PROT_READ) as m:
            assert m[off:off + size] == self.model[off:off + size], self._where("mapread")

    def _mapwrite(self) -> None:
        """As fsx does: the file is first extended by ftruncate when the write ends past it."""
        limit = self.max_size if self.resizable else len(self.model)
        off, size = self._span(limit)
        self.done.append(f"mapwrite {off}+{size} (size {len(self.model)})")
        if size == 0:
            return
        end = self._whole(off + size, up=True)
        if end > len(self.model):
            os.ftruncate(self.fd, end)
            self._resize(end)
        data = self.rng.randbytes(size)
        with mmap.mmap(self.fd, len(self.model)) as m:
            m[off:off + size] = data
            if self.rng.random() < 0.5:
                m.flush()
        self.model[off:off + size] = data
        self._check(off, size)

    def _reopen(self) -> None:
        self.done.append("reopen")
        os.close(self.fd)
        self.fd = os.open(self.path, os.O_RDWR)

    # -- the model -------------------------------------------------------------------------
    def _whole(self, size: int, up: bool = False) -> int:
        return -(-size // self.element) * self.element if up else size - size % self.element

    def _grow(self, end: int) -> None:
        if end > len(self.model):
            self._resize(self._whole(end, up=True))

    def _resize(self, size: int) -> None:
        if size < len(self.model):
            del self.model[size:]
        else:
            self.model.extend(bytes(size - len(self.model)))

    def _check(self, off: int, size: int) -> None:
        got = os.pread(self.fd, size, off)
        if got != self.model[off:off + size]:
            bad = next(i for i, (a, b) in enumerate(zip(got, self.model[off:])) if a != b) if len(got) == size else -1
            raise AssertionError(self._where(f"bytes {off}+{size} differ (first at +{bad}, read {len(got)})"))

    def _where(self, what: str) -> str:
        return f"{what} after op {len(self.done)} (seed {self.seed}); last ops: {self.done[-8:]}"


def run_watched(work: Callable[[], None], device: int, limit: float, trail: Callable[[], list[str]] = list) -> None:
    """`work()`, watched by another process: if it has not returned after `limit` s the mount
    hung, and the watcher aborts its connection (the stuck system calls fail), so the test fails
    instead of hanging. A process, not a thread: a thread stuck in a page fault of a mapped file
    can hold the interpreter's lock."""
    abort = abort_path(device)
    watcher = subprocess.Popen(["sh", "-c", f"sleep {limit} && echo 1 > {abort}"])
    try:
        work()
    except OSError as exc:
        if watcher.poll() is None:
            raise
        raise AssertionError(f"the mount hung: no answer within {limit} s; last ops: {trail()[-8:]}") from exc
    finally:
        watcher.kill()
        watcher.wait()
    assert watcher.returncode != 0, f"the mount hung: no answer within {limit} s; last ops: {trail()[-8:]}"


def both_views(mp: str, n: int, rounds: int) -> None:
    """D mapped and written in its first half while D.npy is mapped and written in its second
    half, and read (what `expected_both_views` says they hold after)."""
    import numpy as np
    from concurrent.futures import ThreadPoolExecutor
    half, block = n // 2, 1000

    def raw() -> None:
        m = np.memmap(f"{mp}/D", dtype="<f4", mode="r+")
        for i in range(rounds):
            start = i * 617 % (half - block)
            m[start:start + block] = i
            m.flush()
        del m

    def npy() -> None:
        fd = os.open(f"{mp}/D.npy", os.O_RDWR)
        try:
            for i in range(rounds):
                a = np.lib.format.open_memmap(f"{mp}/D.npy", mode="r+")
                start = half + i * 911 % (half - block)
                a[start:start + block] = -i
                a.flush()
                del a
                os.pread(fd, 65536, i * 7919 % (n * 4))
        finally:
            os.close(fd)

    with ThreadPoolExecutor(2) as pool:
        for done in [pool.submit(raw), pool.submit(npy)]:
            done.result()


def expected_both_views(data, rounds: int) -> None:
    half, block = len(data) // 2, 1000
    for i in range(rounds):
        start = i * 617 % (half - block)
        data[start:start + block] = i
        start = half + i * 911 % (half - block)
        data[start:start + block] = -i


def run_child(args: list[str], device: int, limit: float) -> None:
    """This module's `args[0](*args[1:])` in a child process (a mapped access to an aborted
    mount is a SIGBUS: it ends the child, not the test run); if it has not returned after `limit`
    s the mount hung: its connection is aborted and the test fails."""
    child = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = child.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        abort_connection(device)
        child.kill()
        child.communicate()
        raise AssertionError(f"the mount hung: {args[0]} got no answer within {limit} s") from None
    assert child.returncode == 0, f"{args[0]} failed ({child.returncode}):\n{out[-3000:]}"


if __name__ == "__main__":
    globals()[sys.argv[1]](sys.argv[2], *map(int, sys.argv[3:]))
