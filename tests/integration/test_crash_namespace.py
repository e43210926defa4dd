"""Crash safety of namespace edits: the daemon killed (`kill -9`) at random instants while a
client makes groups, soft links, hard links, renames and removals through the mount, and power
losses rebuilt from every barrier of the daemon's recorded writes. Right after a kill, h5py opens
the file and reaches every object through every link (no dangling hard link, no link to freed
space) and the tree is one the edits went through (the last group commit's: acknowledged edits
wait in the journal); once the journal is replayed, as the next mount does, it is the one after
the last acknowledged edit or after the one in flight. After a power loss the tree is one the
edits went through, and after the next mount `h5fs check` finds the file sound.
H5FS_CRASH_ROUNDS sets the kills."""

from __future__ import annotations

import os
import random
import threading
import time

import h5py
import numpy as np
import pytest

from conftest import run_h5fs, wait_until
from crash_support import kill_daemon, rebuild, recover, replayed_prefixes
from h5fs.check import check
from oracle import tree
from h5fs.storage.file_writer import read_recording

ROUNDS = int(os.environ.get("H5FS_CRASH_ROUNDS", "5"))
# (libver, the most links the edited group holds): 6 keeps a new-style group's links compact, 12
# takes them past 8 into dense storage and back below 6, again and again
CASES = [("earliest", 6), ("latest", 6), ("latest", 12)]


def make(path, libver: str) -> None:
    with h5py.File(path, "w", libver=libver) as f:
        f.create_dataset("data", data=np.arange(1000, dtype="<i4"))
        f.create_group("keep")


def names(path) -> set[tuple[str, str]]:
    """Every link as (path, kind), every hard link's object read whole on the way."""
    out = set()
    for p, entry in tree(path).items():
        if entry[0] == "dataset":
            assert entry[2] == list(range(1000)), p
        out.add((p, entry[0]))
    return out


class Edits:
    """Namespace edits through the mount (mkdir, ln -s, ln, mv, rmdir, rm), each step's tree
    recorded once acknowledged."""

    def __init__(self, root, seed: int, tag: str, most: int = 6):
        self.root, self.rng, self.tag, self.most = root, random.Random(seed), tag, most
        self.model = {("/data", "dataset"), ("/keep", "group")}
        self.done: list[set] = []          # the model after each acknowledged edit
        self.pending: set | None = None    # the model the edit in flight would give

    def step(self, i: int) -> None:
        g = f"/keep/{self.tag}{i}"
        children = [(p, k) for p, k in self.model if p.startswith("/keep/")]
        empty = [p for p, k in children if k == "group" and not any(q.startswith(p + "/") for q, _ in self.model)]
        links = [p for p, k in children if k != "group"]
        kinds = ["rmdir", "unlink"] if len(children) >= self.most else \
            ["mkdir", "symlink", "link", "rename", "rmdir", "unlink"]
        kind = self.rng.choice(kinds)
        if kind == "rename" and not empty or kind == "rmdir" and not empty or kind == "unlink" and not links:
            kind = "unlink" if links else "rmdir" if empty else "mkdir"
        victim = self.rng.choice(sorted(empty if kind in ("rename", "rmdir") else links)) \
            if kind in ("rename", "rmdir", "unlink") else None
        new = {e for e in self.model if e[0] != victim}
        if kind in ("mkdir", "symlink", "link", "rename"):
            new.add((g, {"symlink": "soft", "link": "dataset"}.get(kind, "group")))
        self.pending = new
        if kind == "mkdir":
            os.mkdir(self.root / g[1:])
        elif kind == "symlink":
            os.symlink("../data", self.root / g[1:])
        elif kind == "link":
            os.link(self.root / "data", self.root / g[1:])
        elif kind == "rename":
            os.rename(self.root / victim[1:], self.root / g[1:])
        elif kind == "rmdir":
            os.rmdir(self.root / victim[1:])
        else:
            os.unlink(self.root / victim[1:])
        self.model, self.pending = new, None
        self.done.append(new)


def _edit_until_killed(edits: Edits) -> None:
    try:
        for i in range(10**6):
            edits.step(i)
    except OSError:   # the daemon is gone: the edit in flight may or may not have landed
        pass


@pytest.mark.parametrize("libver,most", CASES)
def test_kill_during_namespace_edits(mount, tmp_path, libver, most):
    path = tmp_path / f"ns-{libver}.h5"
    make(path, libver)
    rng = random.Random(libver)
    model = names(path)
    for r in range(ROUNDS):
        mp = mount(path, "rw")
        pid = int(os.getxattr(mp, "user.h5fs.pid"))
        edits = Edits(mp, seed=r, tag=f"r{r}_", most=most)
        edits.model = model
        worker = threading.Thread(target=_edit_until_killed, args=(edits,))
        worker.start()
        assert wait_until(lambda: edits.done, timeout=30)   # then a random instant of the edits
        time.sleep(rng.uniform(0.0, 0.5))
        kill_daemon(mp, pid)
        worker.join(30)
        assert names(path) in [model] + edits.done   # at once: no repair, no remount
        recover(path)   # what the next mount does first
        model = names(path)
        assert model == edits.model or model == edits.pending, sorted(model ^ edits.model)
    mp = mount(path, "rw")   # replays a journal the last kill left
    run_h5fs("umount", mp, check=True)
    report = check(str(path))
    assert report.sound, report.problems


@pytest.mark.parametrize("libver,most", CASES)
def test_power_loss_during_namespace_edits(mount, tmp_path, libver, most, monkeypatch):
    original = tmp_path / "original.h5"
    make(original, libver)
    path = tmp_path / "live.h5"
    path.write_bytes(original.read_bytes())
    recording = tmp_path / "writes.rec"
    monkeypatch.setenv("H5FS_RECORD", str(recording))
    mp = mount(path, "rw")
    edits = Edits(mp, seed=3, tag="p", most=most)
    steps = 40 if most <= 6 else 120   # long enough to pass 8 links
    for i in range(steps):
        edits.step(i)
    edits.most = 0   # then the group empties: back below the dense minimum, and to no link
    for i in range(steps, steps + 40):
        if any(p.startswith("/keep/") for p, _ in edits.model):
            edits.step(i)
    run_h5fs("umount", mp, check=True)
    monkeypatch.delenv("H5FS_RECORD")
    if most > 8:   # the group went dense on the way, and came back
        assert max(sum(p.startswith("/keep/") for p, _ in state) for state in edits.done) > 8
    states = [{("/data", "dataset"), ("/keep", "group")}] + edits.done
    out = str(tmp_path / "replayed.h5")
    for _ in replayed_prefixes(str(original), str(recording), out, seed=1):
        assert names(out) in states
        report = check(out)
        assert report.sound, report.problems
    ops = len(read_recording(str(recording)))
    rebuild(str(original), str(recording), out, ops, [])
    assert names(out) == states[-1]
