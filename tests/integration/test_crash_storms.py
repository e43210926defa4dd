"""Crash safety of storms of edits (issue 25): the daemon killed (`kill -9`) at random instants
while a client makes groups (mkdir), sets attributes (setfattr), copies small `.npy` files in (cp),
moves groups and datasets between groups (mv), removes datasets (rm) and groups holding them
(rm -r), and power losses rebuilt from every barrier of a recorded run mixing them with fsyncs.

Right after a kill h5py opens the file as it is and reads every object whole, the tree one the
storm went through (the last group commit's); once the journal is replayed, as the next mount
does, tree, attributes and dataset contents are the ones after the last acknowledged edit or
after the one in flight; after the next mount and unmount `h5fs check` finds the file sound. After
a power loss the tree is one the run went through, holding every edit acknowledged before the
last fsync the surviving writes contain, and every array copied in before it whole (an array
copied in after it may hold its fill value: as on ext4, data not fsync'd may not survive a power
loss, while the file that was to hold it does). The copy in flight at a kill may have left its
dataset with part of its data. H5FS_CRASH_ROUNDS sets the kills per storm."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import threading
import time
from pathlib import Path
from typing import Callable

import h5py
import numpy as np
import pytest

from conftest import run_h5fs, wait_until
from crash_support import kill_daemon, rebuild, recover, replayed_prefixes
from h5fs.check import check
from h5fs.storage.file_writer import read_recording

ROUNDS = int(os.environ.get("H5FS_CRASH_ROUNDS", "2"))
KINDS = ("mkdir", "setfattr", "cp", "mv", "rm", "rm_r")
TOPS = ("/g0", "/g1", "/g2", "/g3")   # groups every storm keeps (edits happen under them)
KEEP = "/data"                        # a dataset no edit touches (the power-loss run fsyncs it)
NO_TIMER = "flush_delay=600"          # no group commit on a timer: only kills and fsyncs decide
# what each storm's file holds before it, per round: (datasets under TOPS, groups of 3 datasets)
FILLS = {"mkdir": (0, 0), "setfattr": (0, 8), "cp": (0, 0), "mv": (24, 8), "rm": (600, 0), "rm_r": (0, 40)}   # rm: enough for a storm at deferred-removal speed

State = dict[str, tuple]   # path -> ("group", attributes) / ("dataset", digest of the values, dtype and shape)


def dataset_entry(a: np.ndarray) -> tuple:
    kind = f"{a.dtype.str}{a.shape}"
    return ("dataset", hashlib.sha1(kind.encode() + a.tobytes()).hexdigest(), kind)


def group_entry(attrs: dict[str, bytes]) -> tuple:
    return ("group", frozenset(attrs.items()))


def snapshot(path) -> State:
    """Every group with its attributes and every dataset read whole (h5py, the file as it is)."""
    out: State = {}
    with h5py.File(path, "r") as f:
        def visit(group, prefix: str) -> None:
            for name in group:
                obj, p = group[name], f"{prefix}/{name}"
                if isinstance(obj, h5py.Group):
                    out[p] = group_entry({k: v.encode() if isinstance(v, str) else bytes(v)
                                          for k, v in obj.attrs.items()})
                    visit(obj, p)
                else:
                    out[p] = dataset_entry(obj[()])
        visit(f, "")
    return out


def make(path, libver: str, datasets: int, groups: int) -> None:
    """KEEP, TOPS, `datasets` datasets spread over them and `groups` groups of 3 datasets (and an
    attribute), every dataset's values its own."""
    with h5py.File(path, "w", libver=libver) as f:
        f.create_dataset(KEEP, data=np.arange(1000, dtype="<i4"))
        for t in TOPS:
            f.create_group(t)
        for i in range(datasets):
            f.create_dataset(f"{TOPS[i % 4]}/d{i}", data=np.arange(64, dtype="<i8") + 1000 * i)
        for i in range(groups):
            g = f.create_group(f"{TOPS[i % 4]}/s{i}")
            g.attrs["origin"] = np.bytes_(f"group {i}")
            for j in range(3):
                g.create_dataset(f"x{j}", data=np.full(50, i * 10 + j, dtype="<f4"))


def under(p: str, g: str) -> bool:
    return p == g or p.startswith(g + "/")


def contents_of(state: State, vouched: set[str]) -> State:
    """`state` with the values of datasets other than `vouched` (digests) left out (their dtype
    and shape kept)."""
    return {p: v if v[0] == "group" or v[1] in vouched else ("dataset", v[2]) for p, v in state.items()}


def within(state: State, before: State, g: str) -> bool:
    """`state` is `before` with part of group g's subtree removed (an `rm -r g` under way)."""
    return all(state.get(p) == v for p, v in before.items() if not under(p, g)) and \
        all(p in before and before[p] == v for p, v in state.items())


class Storm:
    """Edits through the mount, each recorded once acknowledged: `history[j]` is the tree after
    the j-th (`history[0]` before any), `removing[j]` the group the j-th removed with `rm -r`
    (its unlinks are edits of their own: a state between j-1 and j may be seen)."""

    def __init__(self, root: Path, kinds: tuple[str, ...], seed: int, tag: str, scratch: Path, start: State):
        self.root, self.kinds, self.tag, self.scratch = root, kinds, tag, scratch
        self.rng = random.Random(seed)
        self.history: list[State] = [start]
        self.removing: dict[int, str] = {}
        self.pending: State | None = None     # the tree the edit in flight would give
        self.pending_group: str | None = None  # the group an `rm -r` in flight removes
        self.pending_copy: str | None = None   # the dataset a cp in flight makes

    @property
    def model(self) -> State:
        return self.history[-1]

    def step(self, i: int) -> bool:
        """One edit of a kind drawn from `kinds` (False: none of them has anything left to do)."""
        for kind in self.rng.sample(self.kinds, len(self.kinds)):
            if getattr(self, "_" + kind)(f"{self.tag}{i}"):
                return True
        return False

    def _groups(self, nested: bool = True) -> list[str]:
        return sorted(p for p, v in self.model.items() if v[0] == "group" and (nested or p in TOPS))

    def _edit(self, new: State, action, group: str | None = None, copy: str | None = None) -> bool:
        self.pending, self.pending_group, self.pending_copy = new, group, copy
        action()
        self.history.append(new)
        if group is not None:
            self.removing[len(self.history) - 1] = group
        self.pending = self.pending_group = self.pending_copy = None
        return True

    def _mkdir(self, name: str) -> bool:
        parent = self.rng.choice([p for p in self._groups() if p.count("/") <= 2])
        p = f"{parent}/{name}"
        return self._edit({**self.model, p: group_entry({})}, lambda: os.mkdir(self.root / p[1:]))

    def _setfattr(self, name: str) -> bool:
        g = self.rng.choice(self._groups())
        attr, value = f"a{self.rng.randrange(12)}", f"{name} ".encode() + b"v" * self.rng.randrange(40)
        attrs = dict(self.model[g][1]) | {attr: value}
        return self._edit({**self.model, g: group_entry(attrs)},
                          lambda: os.setxattr(self.root / g[1:], f"user.{attr}", value))

    def _cp(self, name: str) -> bool:
        parent = self.rng.choice(self._groups())
        values = np.random.default_rng(self.rng.randrange(1 << 32))
        dtype = self.rng.choice(["<f8", "<i4", "<u2"])
        arr = (values.random(self.rng.randrange(20_000, 100_000) // np.dtype(dtype).itemsize) * 1e4).astype(dtype)
        src = self.scratch / f"{name}.npy"
        np.save(src, arr)
        p = f"{parent}/{name}"
        done = self._edit({**self.model, p: dataset_entry(arr)},
                          lambda: shutil.copyfile(src, self.root / f"{p[1:]}.npy"), copy=p)
        src.unlink()
        return done

    def _mv(self, name: str) -> bool:
        movable = sorted(p for p in self.model if p.count("/") >= 2)
        if not movable:
            return False
        src = self.rng.choice(movable)
        parent = self.rng.choice([g for g in self._groups() if not under(g, src) and g != src.rsplit("/", 1)[0]])
        dst = f"{parent}/{name}"
        new = {dst + p[len(src):] if under(p, src) else p: v for p, v in self.model.items()}
        return self._edit(new, lambda: os.rename(self.root / src[1:], self.root / dst[1:]))

    def _rm(self, name: str) -> bool:
        victims = sorted(p for p, v in self.model.items() if v[0] == "dataset" and p != KEEP)
        if not victims:
            return False
        p = self.rng.choice(victims)
        return self._edit({q: v for q, v in self.model.items() if q != p}, lambda: os.unlink(self.root / p[1:]))

    def _rm_r(self, name: str) -> bool:
        victims = sorted(p for p in self._groups() if p.count("/") >= 2)
        if not victims:
            return False
        g = self.rng.choice(victims)
        new = {q: v for q, v in self.model.items() if not under(q, g)}
        return self._edit(new, lambda: shutil.rmtree(self.root / g[1:], onerror=_gone_is_removed), group=g)

    def went_through(self, state: State, since: int = 0, view: Callable[[State], State] = lambda s: s) -> bool:
        """`state` is the tree after edit j >= since, or one an `rm -r` left on its way to it
        (both seen through `view`)."""
        state = view(state)
        for j in range(since, len(self.history)):
            if state == view(self.history[j]):
                return True
            g = self.removing.get(j)
            if g is not None and j > since and within(state, view(self.history[j - 1]), g):
                return True
        return False

    def after_last_or_pending(self, state: State, view: Callable[[State], State] = lambda s: s) -> bool:
        state = view(state)
        if state == view(self.model) or self.pending is not None and state == view(self.pending):
            return True
        if self.pending_copy is not None:   # the copy in flight: its dataset made, its data partly written
            def unwritten(s: State) -> State:
                return {p: ("dataset", v[2]) if p == self.pending_copy else v for p, v in s.items()}
            return unwritten(state) == unwritten(view(self.pending))
        return self.pending_group is not None and within(state, view(self.model), self.pending_group)


def _gone_is_removed(func, path, exc_info) -> None:
    """rm -r lists D and D.npy, two names of one dataset: D.npy is gone once D is removed."""
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]


def _edit_until_killed(storm: Storm) -> None:
    try:
        for i in range(10**6):
            if not storm.step(i):
                return
    except OSError:   # the daemon is gone: the edit in flight may or may not have landed
        pass


def differences(state: State, model: State) -> list[str]:
    return sorted(f"{p}: {state.get(p, 'absent')!s:.60} != {model.get(p, 'absent')!s:.60}"
                  for p in state.keys() | model.keys() if state.get(p) != model.get(p))[:10]


CASES = [pytest.param(kind, libver, id=f"{kind}-{libver}") for kind in KINDS for libver in ("earliest", "latest")]


@pytest.mark.parametrize("kind,libver", CASES)
def test_kill_during_storm(mount, tmp_path, kind, libver):
    path = tmp_path / f"{kind}-{libver}.h5"
    datasets, groups = FILLS[kind]
    make(path, libver, datasets * ROUNDS, groups * ROUNDS)
    scratch = tmp_path / "npy"
    scratch.mkdir()
    rng = random.Random(f"{kind}-{libver}")
    model = snapshot(path)
    for r in range(ROUNDS):
        mp = mount(path, "rw", NO_TIMER)
        pid = int(os.getxattr(mp, "user.h5fs.pid"))
        storm = Storm(mp, (kind,), seed=r, tag=f"r{r}_", scratch=scratch, start=model)
        worker = threading.Thread(target=_edit_until_killed, args=(storm,))
        worker.start()
        assert wait_until(lambda: len(storm.history) > 1, timeout=30)   # then a random instant of the storm
        time.sleep(rng.uniform(0.0, 0.3))
        kill_daemon(mp, pid)
        worker.join(30)
        assert storm.went_through(snapshot(path)), "the file as the kill left it"   # (a) no replay
        recover(path)   # (b) what the next mount does first
        model = snapshot(path)
        assert storm.after_last_or_pending(model), differences(model, storm.model)
    mp = mount(path, "rw")   # (c) replays a journal the last kill left
    run_h5fs("umount", mp, check=True)
    report = check(str(path))
    assert report.sound, report.problems
    assert snapshot(path) == model


def _sync(mp: Path, i: int) -> None:
    """fsync of an open file of the mount, or of its root directory (fsyncdir)."""
    fd = os.open(mp / KEEP[1:], os.O_RDONLY) if i % 2 else os.open(mp, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def last_barrier(recording: str) -> int:
    """The index of the last fsync recorded so far."""
    ops = read_recording(recording)
    return max(i for i, (op, _, _, _) in enumerate(ops) if op == b"S")


# (the edits mixed, whether only the data fsync'd is compared, libver): all but cp; every kind; every
# kind, the contents of datasets copied in since the last fsync the prefix holds not compared
MIXES = [pytest.param(kinds, synced_data, libver, id=f"{name}-{libver}")
         for name, kinds, synced_data in (("no-cp", tuple(k for k in KINDS if k != "cp"), False),
                                          ("all", KINDS, True))
         for libver in ("earliest", "latest")]


@pytest.mark.parametrize("kinds,synced_data,libver", MIXES)
def test_power_loss_during_storms(mount, tmp_path, kinds, synced_data, libver, monkeypatch):
    original = tmp_path / "original.h5"
    make(original, libver, datasets=24, groups=12)
    path = tmp_path / "live.h5"
    path.write_bytes(original.read_bytes())
    scratch = tmp_path / "npy"
    scratch.mkdir()
    recording = str(tmp_path / "writes.rec")
    monkeypatch.setenv("H5FS_RECORD", recording)
    mp = mount(path, "rw", NO_TIMER)
    storm = Storm(mp, kinds, seed=5, tag="p", scratch=scratch, start=snapshot(original))
    rng = random.Random(libver)
    synced: list[tuple[int, int]] = []   # (last fsync recorded when a client's fsync returned, edits before it)
    i, next_sync = 0, rng.randint(2, 6)
    while i < 60:
        assert storm.step(i)
        i += 1
        if i == next_sync:
            acked = len(storm.history) - 1
            _sync(mp, i)
            synced.append((last_barrier(recording), acked))
            next_sync += rng.randint(2, 6)
    run_h5fs("umount", mp, check=True)
    monkeypatch.delenv("H5FS_RECORD")
    out = str(tmp_path / "replayed.h5")
    for stop in replayed_prefixes(str(original), recording, out, seed=1):
        since = max([acked for mark, acked in synced if mark <= stop], default=0)
        report = check(out)
        assert report.sound, report.problems
        state, view = snapshot(out), (lambda s: s)
        if synced_data:
            vouched = {v[1] for v in storm.history[since].values() if v[0] == "dataset"}
            view = lambda s: contents_of(s, vouched)   # noqa: E731
        assert storm.went_through(state, since, view), \
            f"prefix to the fsync at {stop}: {differences(state, storm.history[since])}"
    rebuild(str(original), recording, out, len(read_recording(recording)), [])
    recover(out)
    assert snapshot(out) == storm.model
