"""New groups that wait to land (model/fresh_groups.py) through a real read-write mount: a burst
of `mkdir` + `setxattr` in one group (it goes dense on the way) answers stat, listdir, getxattr
and listxattr at once, before any group commit; after the unmount libhdf5 (h5py) reads what the
mount showed and a new mount shows it again. A `kill -9` of the daemon mid-burst loses nothing
acknowledged: the next mount shows every mkdir and setxattr that returned."""

from __future__ import annotations

import errno
import os
import random
import stat
import subprocess
import threading
import time
from pathlib import Path

import h5py
import pytest

from conftest import wait_until
from crash_support import kill_daemon
from write_support import verify_file

from h5fs.storage.journal import deferred, journal_path, records
from h5fs.storage.pending_objects import NEW, SETATTR

NO_TIMER = "flush_delay=600"   # no group commit on a timer: the new groups wait until the unmount
OLD = [f"old{i}" for i in range(3)]   # compact at first: the burst takes the group past 8 links


def make(path) -> None:
    """/g keeping times (its new groups do too: their stat times are their own) and OLD groups."""
    with h5py.File(path, "w", libver="latest") as f:
        gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
        gcpl.set_obj_track_times(True)
        h5py.h5g.create(f.id, b"g", gcpl=gcpl)
        for name in OLD:
            f["g"].create_group(name)


def _shown(d) -> tuple:
    """What the mount answers for the directory `d`: stat numbers, entries and attributes."""
    st = os.stat(d)
    return (stat.S_ISDIR(st.st_mode), st.st_nlink, st.st_mtime_ns, st.st_ctime_ns, sorted(os.listdir(d)),
            {x: os.getxattr(d, x) for x in sorted(os.listxattr(d))})


def test_a_burst_of_mkdir_and_setxattr_answers_before_it_lands(tmp_path, mount):
    """60 mkdir + setxattr (a value set twice, a `setfattr -x`) in one group: the journal holds new
    groups, and stat, listdir, getxattr and listxattr answer as they will after the unmount;
    h5py reads every group and attribute; a new mount answers the same."""
    path = tmp_path / "burst.h5"
    make(path)
    mp = mount(path, "rw", NO_TIMER)
    model: dict[str, dict[str, bytes]] = {}
    for i in range(60):
        d = mp / "g" / f"d{i:02d}"
        os.mkdir(d)
        model[d.name] = {"user.n": str(i).encode()}
        os.setxattr(d, "user.n", str(i).encode())
        if i % 5 == 0:
            os.setxattr(d, "user.extra", b"first")
            os.setxattr(d, "user.extra", "é, again".encode())
            model[d.name]["user.extra"] = "é, again".encode()
    kinds = {op[0] for op in deferred(records(Path(journal_path(str(path))).read_bytes()))}
    assert {NEW, SETATTR} <= kinds   # the burst waits as new groups, not transactions
    subprocess.run(["setfattr", "-x", "user.extra", str(mp / "g" / "d55")], check=True)
    del model["d55"]["user.extra"]
    refused = []
    for d in (mp / "g" / "d56", mp / "g" / "old0"):   # a new group and a stored one alike
        with pytest.raises(OSError) as info:
            os.removexattr(d, "user.never")
        refused.append(info.value.errno)
    assert refused[0] == refused[1] == errno.ENODATA
    assert sorted(os.listdir(mp / "g")) == sorted(OLD + list(model))
    shown = {name: _shown(mp / "g" / name) for name in model}
    assert all(s[0] and s[4] == [] and s[5] == attrs for s, attrs in zip(shown.values(), model.values()))
    parent = _shown(mp / "g")
    mount.unmount(mp)
    assert not os.path.exists(journal_path(str(path)))
    with h5py.File(path, "r") as h:
        assert sorted(h["g"]) == sorted(OLD + list(model))
        assert {name: {f"user.{k}": v.encode() for k, v in h["g"][name].attrs.items()} for name in model} == model
        assert all(len(h["g"][name]) == 0 for name in model)
        assert {name: h5py.h5o.get_info(h["g"][name].id).mtime * 10**9 for name in model} == \
            {name: s[2] for name, s in shown.items()}
        assert h5py.h5o.get_info(h["g"].id).mtime * 10**9 == parent[2]
    verify_file(path, h5dump=False)
    mp = mount(path)
    assert {name: _shown(mp / "g" / name) for name in model} == shown and _shown(mp / "g") == parent


def _burst(root, acked: dict, inflight: list) -> None:
    """mkdir + setxattr until the daemon is gone; `acked`: each group's attributes once the
    call returned, `inflight`: the group and the attributes the call under way would give it."""
    try:
        for i in range(10**6):
            name = f"k{i:04d}"
            inflight[:] = [name, {}]
            os.mkdir(root / name)
            acked[name] = {}
            inflight[:] = [name, {"user.n": str(i).encode()}]
            os.setxattr(root / name, "user.n", str(i).encode())
            acked[name] = inflight[1]
    except OSError:   # the daemon is gone: the edit in flight may or may not have landed
        pass


def test_a_kill_mid_burst_loses_no_acknowledged_mkdir_or_setxattr(tmp_path, mount):
    """The daemon killed during a burst of mkdir + setxattr, new groups waiting: h5py reads the file
    as it is at once; a read-only mount shows every acknowledged group and attribute (and the edit
    in flight, or not) and writes nothing; so does the next read-write mount, and after its
    unmount libhdf5 reads the same and `h5fs check` passes."""
    path = tmp_path / "killed.h5"
    make(path)
    mp = mount(path, "rw", NO_TIMER)
    pid = int(os.getxattr(mp, "user.h5fs.pid"))
    acked: dict[str, dict[str, bytes]] = {}
    inflight: list = []
    worker = threading.Thread(target=_burst, args=(mp / "g", acked, inflight))
    worker.start()
    try:
        assert wait_until(lambda: len(acked) >= 40, timeout=30)
        time.sleep(random.Random(7).uniform(0.0, 0.2))
    finally:
        kill_daemon(mp, pid)
        worker.join(30)
    assert not worker.is_alive()
    name, attrs = inflight

    def agrees(shown: dict[str, dict[str, bytes]]) -> None:
        assert set(acked) <= set(shown) <= set(acked) | {name}
        assert all(shown[n] == acked.get(n) or n == name and shown[n] == attrs for n in shown)

    journal = Path(journal_path(str(path)))
    assert NEW in {op[0] for op in deferred(records(journal.read_bytes()))}   # new groups waited
    with h5py.File(path, "r") as h:   # the last group commit's tree, whole
        assert set(OLD) <= set(h["g"]) and all(isinstance(h["g"][n], h5py.Group) for n in h["g"])
    before = (path.read_bytes(), journal.read_bytes())
    for options in ((), ("rw",)):   # read-only: the journal read through; then replayed
        mp = mount(path, *options)
        agrees({n: {x: os.getxattr(mp / "g" / n, x) for x in os.listxattr(mp / "g" / n)}
                for n in os.listdir(mp / "g") if n not in OLD})
        mount.unmount(mp)
        if not options:
            assert (path.read_bytes(), journal.read_bytes()) == before
    with h5py.File(path, "r") as h:
        agrees({n: {f"user.{k}": v.encode() for k, v in h["g"][n].attrs.items()} for n in h["g"] if n not in OLD})
    verify_file(path, h5dump=False)


@pytest.mark.parametrize("tool", ["cp", "rsync"])
def test_a_tree_of_directories_copied_in_keeps_names_attributes_and_times(tmp_path, mount, tool):
    """`cp -a` / `rsync -aX` of 40 directories with user xattrs and old times into a dense group:
    each directory waits as a new group until the tool sets its times, which lands it; h5py reads
    every group with its attributes and the source's modification time."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(40):
        d = src / f"s{i:02d}"
        d.mkdir()
        os.setxattr(d, "user.i", str(i).encode())
        if i % 4 == 0:
            os.setxattr(d, "user.more", ("é" * i).encode())
        os.utime(d, ns=(1_500_000_000 * 10**9 + i * 10**9,) * 2)
    path = tmp_path / "tree.h5"
    make(path)
    with h5py.File(path, "a") as h:   # dense already
        for i in range(3, 12):
            h["g"].create_group(f"old{i}")
    mp = mount(path, "rw", NO_TIMER)
    cmd = ["cp", "-a"] if tool == "cp" else ["rsync", "-aX"]
    subprocess.run(cmd + [str(d) for d in sorted(src.iterdir())] + [str(mp / "g")], check=True, capture_output=True)
    want = {d.name: ({x: os.getxattr(d, x) for x in os.listxattr(d)}, d.stat().st_mtime_ns) for d in src.iterdir()}
    assert {d.name: ({x: os.getxattr(d, x) for x in os.listxattr(d)}, d.stat().st_mtime_ns)
            for d in (mp / "g").iterdir() if d.name.startswith("s")} == want
    mount.unmount(mp)
    with h5py.File(path, "r") as h:
        got = {n: ({f"user.{k}": v.encode() for k, v in h["g"][n].attrs.items()},
                   h5py.h5o.get_info(h["g"][n].id).mtime * 10**9) for n in h["g"] if n.startswith("s")}
    assert got == want
    verify_file(path, h5dump=False)
