"""Namespace benchmarks through a read-write mount, each against h5py doing the same in the same
run: `cp` of a large `.npy`, many `mkdir` + `setfattr`, `rm -r` of many datasets and the space
it leaves for reuse, `cp -r`, `tar -x` and `rm -r` of many small arrays.

    python3 scripts/bench_namespace.py [--size-mb 1024] [--count 10000] [--libver latest|earliest]
                                       [--cases cp-gzip,cp-none,mkdir-one,mkdir-spread,rm,cp-r,tar-x,rm-r]
                                       [--workdir /tmp/h5fs-bench-namespace]
    python3 scripts/bench_namespace.py --quick    # 64 MiB, 500 objects

One run of each case (no medians: the 1 GiB copy takes minutes on a 2-core machine). Every .h5
file h5py or h5fs starts from is a copy of a template h5py made with --libver (h5fs edits in the
style of the file: `earliest` gives symbol-table groups and version 1 headers, `latest` link
messages and version 2 headers). Cases:

- cp-gzip: `cp data.npy MNT/` of --size-mb MiB of float32 (rows of 4,096, a random walk of
  0.01 steps rounded to 2 decimals, as bench_write.py builds: smooth, so gzip halves it; written
  once into --workdir and kept in the page cache) into an empty file mounted with the default
  compression (gzip:4,shuffle), then an fsync of the new file (the data is then in the .h5 file
  and durable). Against an h5py process that np.load()s the same .npy (not timed) and times
  `create_dataset("data", data=arr, chunks=C, maxshape=(None, 4096), compression="gzip",
  compression_opts=4, shuffle=True)` and the file's close, where C and maxshape are what h5fs
  gives a copied .npy (h5fs.model.dataset_create.npy_storage; the h5fs result is checked to hold
  exactly that chunk shape, gzip and shuffle). h5py's data is then in the page cache only, the
  more favourable side; an fsync of its file is timed after it. Target: h5py s / h5fs s >= 3.0
  (h5fs "3x faster"), and the daemon's peak RSS (VmHWM of the pid in the root's xattr
  user.h5fs.pid, read after the fsync) < 300 MB.
- cp-none: the same with `-o compression=none` against h5py without filters. Target >= 0.5.
- mkdir-one: --count `os.mkdir` + `os.setxattr(user.note, str)` (one attribute each) in ONE group
  (the root), from this Python process (one process driving the mount, no fork per call), then
  `h5fs umount` (everything durable); against h5py doing `create_group` + `attrs["note"] = str`
  in a copy of the same template and closing the file. Target: h5fs (ops + umount) at most 3x
  h5py's time, i.e. h5py s / h5fs s >= 0.33.
- mkdir-spread: the same --count spread over 100 groups (the 100 groups are in the template,
  both sides start from it). Same target.
- rm: a file h5py made with --count small datasets (1,024 float32 each, chunks (1024,), maxshape
  (None,), no filters: what h5fs makes of `cp` of such a .npy with compression=none) in group
  "many": `rm -r MNT/many` + umount, against h5py deleting every dataset and then the group
  (`del g[name]` loop, `del f["many"]`) and closing; the floor removes a copy of the --count
  `.npy` files (copied in untimed). Issue 25's target: within 3x the floor's time.
  Then the space: the same datasets copied back in (`cp -r` of a directory of the .npy files,
  -o compression=none, on a new mount once its free-space walk has finished; h5py: a new
  open creating them again) and the file size after it compared with the size before the rm
  (reported, no target).

- cp-r, tar-x: `cp -r` of a directory of 1,000 `.npy` files of 100 KB each (float32 random walks
  rounded to 0.01), or `tar -xf` of an archive of it, into a mount of an empty file (default
  compression), then `h5fs umount`; against h5py creating the same datasets (the chunks and
  maxshape h5fs gives a copied `.npy`, gzip 4 + shuffle) in a copy of the same file and closing
  it; issue 25's target: within 2x the floor's time.
- rm-r: `rm -r` of those 1,000 datasets (in the file h5py made of them) + umount, against h5py
  deleting them; the floor removes its copy of the files.

The floor (every case): the same operations, timed the same way,
on a fresh mount of scripts/write_floor_fs.py, a pyfuse3 + trio filesystem that does almost
nothing (a tree of dicts; a created file is a plain file in --workdir written with os.pwrite and
fsynced with os.fsync; h5fs's default kernel options: default_permissions, no writeback_cache),
mounted after the h5py side and before h5fs: `cp` + fsync of the new file, or the same os.mkdir +
os.setxattr loop (for mkdir-spread under 100 directories made before timing, as the template
holds 100 groups). It is what pyfuse3, trio and the kernel cost per request plus the copy into
the page cache, which no pyfuse3 daemon mounted with these options gets below. Columns "floor s"
and "h5fs / floor" (floor s / h5fs s: the fraction of the floor's speed h5fs reaches), and in the
targets a line per case saying whether the target time (h5py s / target) is below the floor, i.e.
not reachable through pyfuse3 here (for mkdir the target counts h5fs's umount, the floor only the
operations: a floor has nothing to write at unmount). A floor that fails is reported and the
case's h5fs side still runs.

Ratios are h5py time / h5fs time ("x faster", as bench_write.py). Every h5fs result is read back
with h5py and checked (data, chunks and filters; groups and attributes; what was removed and
copied back). A case that fails (ENOTSUP/EIO from the mount, a daemon that dies, data that
differs, h5py failing) prints its error in the table and the others go on; every mount is
unmounted even on failure (an h5fs without dense link storage edits answers ENOTSUP to the 9th
link of a group in a libver=latest file: the mkdir and rm cases then fail there, the others run).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
from bench_read import NotServing, cpu_seconds, serving, table_row, warm
from bench_write import (
    DURABLE,
    MIB,
    TIMEOUT,
    Daemon,
    Failed,
    last_lines,
    lazy_unmount,
    load,
    met,
    mounted,
    python,
)

from h5fs.model.dataset_create import npy_storage

WIDTH = 4096                 # float32 per row of the big array: 16 KiB
SMALL = 1024                 # float32 per small dataset of the rm case
GROUPS = 100                 # groups of mkdir-spread
RSS_TARGET_MB = 300
CP_TARGETS = {"gzip": 3.0, "none": 0.5}
MKDIR_TARGET = 1 / 3         # h5fs at most 3x h5py's time
FREE_WALK_TIMEOUT = 300.0    # s to wait for the mount's free-space walk before the refill
ARRAYS = 1000               # .npy files of the cp -r / tar -x / rm -r cases
ARRAY_FLOATS = 25_000        # float32 each: 100 KB
CASES = ("cp-gzip", "cp-none", "mkdir-one", "mkdir-spread", "rm", "cp-r", "tar-x", "rm-r")
FLOOR = Path(__file__).with_name("write_floor_fs.py")

H5PY_CP = """import h5py, json, numpy as np, os, sys, time
arr = np.load(sys.argv[2])
opts = json.loads(sys.argv[4])
t = time.perf_counter()
with h5py.File(sys.argv[1], "w", libver=sys.argv[3]) as f:
    f.create_dataset("data", data=arr, chunks=tuple(opts.pop("chunks")),
                     maxshape=tuple(opts.pop("maxshape")), **opts)
""" + DURABLE
H5PY_MKDIR = """import h5py, os, sys, time
count, spread = int(sys.argv[2]), sys.argv[3] == "1"
names = [(f"g{i % 100:02d}/n{i:05d}" if spread else f"n{i:05d}", f"object {i}") for i in range(count)]
t = time.perf_counter()
with h5py.File(sys.argv[1], "r+") as f:
    for name, value in names:
        f.create_group(name).attrs["note"] = value
""" + DURABLE
H5PY_RM = """import h5py, os, sys, time
t = time.perf_counter()
with h5py.File(sys.argv[1], "r+") as f:
    g = f["many"]
    for name in list(g):
        del g[name]
    del f["many"]
""" + DURABLE
H5PY_REFILL = """import h5py, numpy as np, os, sys, time
count = int(sys.argv[2])
t = time.perf_counter()
with h5py.File(sys.argv[1], "r+") as f:
    g = f.create_group("many")
    for i in range(count):
        g.create_dataset(f"d{i:05d}", data=np.arange(i, i + %d, dtype="<f4"), chunks=(%d,), maxshape=(None,))
""" % (SMALL, SMALL) + DURABLE
H5PY_ARRAYS = """import h5py, numpy as np, os, sys, time
from pathlib import Path
from h5fs.model.dataset_create import npy_storage
files = sorted(Path(sys.argv[2]).glob("*.npy"))
arrays = [(p.stem, np.load(p)) for p in files]   # read before timing: the page cache holds them for h5fs too
t = time.perf_counter()
with h5py.File(sys.argv[1], "r+") as f:
    g = f.create_group("arrays")
    for name, arr in arrays:
        chunks, maxshape = npy_storage(arr.shape, arr.dtype.itemsize)
        g.create_dataset(name, data=arr, chunks=chunks, maxshape=maxshape, compression="gzip",
                         compression_opts=4, shuffle=True)
""" + DURABLE
H5PY_RM_ARRAYS = """import h5py, os, sys, time
t = time.perf_counter()
with h5py.File(sys.argv[1], "r+") as f:
    g = f["arrays"]
    for name in list(g):
        del g[name]
    del f["arrays"]
""" + DURABLE
VERIFY_ARRAYS = """import h5py, numpy as np, sys
from pathlib import Path
present = sys.argv[3] == "1"
with h5py.File(sys.argv[1], "r") as f:
    if not present:
        sys.exit(f"arrays still there ({len(f['arrays'])} links)" if "arrays" in f else 0)
    g = f["arrays"]
    files = sorted(Path(sys.argv[2]).glob("*.npy"))
    if len(g) != len(files):
        sys.exit(f"arrays holds {len(g)} links, expected {len(files)}")
    for p in files:
        if not np.array_equal(g[p.stem][()], np.load(p)):
            sys.exit(f"{p.stem} differs")
"""
VERIFY_CP = """import h5py, json, numpy as np, sys
want = json.loads(sys.argv[3])
with h5py.File(sys.argv[1], "r") as f:
    d = f["data"]
    src = np.load(sys.argv[2], mmap_mode="r")
    got = {"chunks": list(d.chunks or ()), "maxshape": list(d.maxshape), "compression": d.compression,
           "compression_opts": d.compression_opts, "shuffle": d.shuffle}
    for key, value in want.items():
        if got[key] != value:
            sys.exit(f"{key}: {got[key]!r}, expected {value!r}")
    if d.shape != src.shape or d.dtype != src.dtype:
        sys.exit(f"shape/dtype {d.shape} {d.dtype}, expected {src.shape} {src.dtype}")
    for row in range(0, d.shape[0], 1024):
        if not np.array_equal(d[row:row + 1024], src[row:row + 1024]):
            sys.exit(f"rows {row}..{row + 1023} differ")
"""
VERIFY_MKDIR = """import h5py, sys
count, spread = int(sys.argv[2]), sys.argv[3] == "1"
with h5py.File(sys.argv[1], "r") as f:
    for i in range(count):
        name = f"g{i % 100:02d}/n{i:05d}" if spread else f"n{i:05d}"
        g = f.get(name)
        if not isinstance(g, h5py.Group):
            sys.exit(f"{name}: missing")
        value = g.attrs.get("note")
        if isinstance(value, bytes):
            value = value.decode()
        if value != f"object {i}":
            sys.exit(f"{name}: attribute note = {value!r}")
"""
VERIFY_RM = """import h5py, numpy as np, sys
count, refilled = int(sys.argv[2]), sys.argv[3] == "1"
with h5py.File(sys.argv[1], "r") as f:
    if not refilled:
        if "many" in f:
            sys.exit(f"many still there ({len(f['many'])} links)")
        sys.exit(0)
    g = f["many"]
    if len(g) != count:
        sys.exit(f"many holds {len(g)} links, expected {count}")
    for i in range(count):
        if not np.array_equal(g[f"d{i:05d}"][()], np.arange(i, i + %d, dtype="<f4")):
            sys.exit(f"d{i:05d} differs")
""" % SMALL


def run_checked(code: str, *args, what: str) -> None:
    try:
        python(code, *args)
    except Failed as exc:
        raise Failed(f"{what}: {exc}") from None


def h5py_times(code: str, *args) -> tuple[float, float]:
    try:
        closed, fsync = python(code, *args).split()
    except Failed as exc:
        raise Failed(f"h5py: {exc}") from None
    return float(closed), float(fsync)


def command(*argv: str | Path) -> float:
    """Seconds `argv` took; Failed with its message when it fails."""
    t = time.perf_counter()
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=TIMEOUT, check=False)
    elapsed = time.perf_counter() - t
    if done.returncode:
        raise Failed(f"{argv[0]} {argv[1]}: exit {done.returncode}: {last_lines(done.stderr)}")
    return elapsed


def wait_for_log(log: Path, needles: tuple[str, ...], timeout: float) -> str:
    """The first log line holding one of `needles` (the mount's free-space walk ends with one)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            for line in log.read_text(errors="replace").splitlines():
                if any(n in line for n in needles):
                    return line
        except OSError:
            pass
        time.sleep(0.1)
    raise Failed(f"no free-space walk result in {log} after {timeout:.0f} s")


def unused(path: Path) -> str:
    """`h5fs check`'s account of the used and unused bytes of `path`."""
    done = subprocess.run(["h5fs", "check", str(path)], capture_output=True, text=True, timeout=TIMEOUT, check=False)
    found = re.search(r"(\d+) bytes used, (\d+) unused .* of (\d+) allocated", done.stdout)
    if done.returncode or not found:
        return f"exit {done.returncode}: {last_lines(done.stdout + done.stderr)}"
    used, free, allocated = (int(x) for x in found.groups())
    return f"{used / MIB:.2f} MiB used, {free / MIB:.2f} MiB unused ({free / allocated:.0%} of {allocated / MIB:.2f} MiB)"


@contextmanager
def floor_mounted(backing: Path, mnt: Path, log: Path) -> Iterator[int]:
    """scripts/write_floor_fs.py serving `mnt`, its files kept in `backing`: the daemon's pid.
    Unmounted whatever happens."""
    try:
        with serving(FLOOR, [backing], mnt, log) as proc:
            yield proc.pid
    except NotServing as exc:
        raise Failed(str(exc)) from None


def mkdir_setxattr(root: Path, count: int, spread: bool, done: list[int]) -> float:
    """Seconds of `count` os.mkdir + os.setxattr under `root` from this process (names made
    before timing; done[0] counts the pairs, for the error message of a failure)."""
    names = [(str(root / (f"g{i % GROUPS:02d}/n{i:05d}" if spread else f"n{i:05d}")), f"object {i}".encode())
             for i in range(count)]
    t = time.perf_counter()
    for path, value in names:
        os.mkdir(path)
        os.setxattr(path, "user.note", value)
        done[0] += 1
    return time.perf_counter() - t


def rm_r(target: Path) -> tuple[float, str]:
    """Seconds of `rm -r target`, and what was odd about it ("" when nothing was).

    rm lists D and D.npy (one dataset): D.npy is gone once D is removed, rm says so and then
    leaves the (empty) directory. Only that is tolerated (reported, and the directory removed
    with a timed rmdir, as `rm -rf` would): anything else fails the case."""
    t = time.perf_counter()
    done = subprocess.run(["rm", "-r", str(target)], capture_output=True, text=True, timeout=TIMEOUT, check=False)
    elapsed = time.perf_counter() - t
    if not done.returncode:
        return elapsed, ""
    lines = done.stderr.strip().splitlines()
    vanished = [x for x in lines if x.endswith(".npy': No such file or directory")]
    if len(vanished) != len(lines):
        raise Failed(f"rm -r: exit {done.returncode}: {last_lines(done.stderr)}")
    t = time.perf_counter()
    os.rmdir(target)
    elapsed += time.perf_counter() - t
    return elapsed, (f"rm -r exit {done.returncode}: {len(vanished):,} x 'cannot remove D.npy: No such file or "
                     "directory' (the view listed beside D is gone with D), so rm left the emptied directory: "
                     "removed here with rmdir (timed); rm -rf exits 0")


# ------------------------------------------------------------------------------------------------ files


def build_npy(path: Path, mib: int) -> None:
    """(mib * 64, 4096) float32, deterministically: per column a random walk of 0.01 steps, rounded."""
    rows = mib * MIB // 4 // WIDTH
    if path.exists():
        try:
            if np.load(path, mmap_mode="r").shape == (rows, WIDTH):
                return
        except ValueError:
            pass
    part = path.with_name(path.name + ".part")
    out = np.lib.format.open_memmap(part, mode="w+", dtype="<f4", shape=(rows, WIDTH))
    rng = np.random.default_rng(0)
    start = np.zeros(WIDTH, "f4")
    for row in range(0, rows, 1024):               # 16 MiB at a time
        walk = start + np.cumsum(rng.normal(0, 0.01, (min(1024, rows - row), WIDTH)).astype("f4"), axis=0)
        start = walk[-1]
        out[row:row + len(walk)] = np.round(walk, 2)
    out.flush()
    del out
    part.rename(path)


def template(path: Path, libver: str, fill: Callable[[h5py.File], None] = lambda f: None) -> Path:
    if not path.exists():
        part = path.with_name(path.name + ".part")
        with h5py.File(part, "w", libver=libver) as f:
            fill(f)
        part.rename(path)
    return path


def copy_of(source: Path, target: Path) -> Path:
    """A fresh copy of `source`; a journal an interrupted earlier run left beside `target`
    belongs to the file it replaces, and would be replayed into the copy."""
    target.unlink(missing_ok=True)
    Path(f"{target}.h5fs-journal").unlink(missing_ok=True)
    return Path(shutil.copyfile(source, target))


def build_small_npys(directory: Path, count: int) -> None:
    """The rm case's datasets as .npy files (for the refill): dNNNNN.npy = arange(i, i + 1024)."""
    marker = directory.with_name(directory.name + ".complete")   # not inside: cp -r copies the directory
    if marker.exists():
        return
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        np.save(directory / f"d{i:05d}.npy", np.arange(i, i + SMALL, dtype="<f4"))
    marker.touch()


def build_arrays(directory: Path) -> Path:
    """ARRAYS .npy files of 100 KB (a0000.npy...: random walks rounded to 0.01, as real data
    compresses) in `directory`, and a tar archive of it beside it: the archive's path."""
    archive = directory.with_suffix(".tar")
    if archive.exists():
        return archive
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    for i in range(ARRAYS):
        np.save(directory / f"a{i:04d}.npy", np.round(np.cumsum(rng.normal(0, 0.01, ARRAY_FLOATS)), 2).astype("<f4"))
    part = archive.with_name(archive.name + ".part")
    subprocess.run(["tar", "-cf", str(part), "-C", str(directory.parent), directory.name], check=True)
    part.rename(archive)
    return archive


def fill_many(count: int) -> Callable[[h5py.File], None]:
    def fill(f: h5py.File) -> None:
        g = f.create_group("many")
        for i in range(count):
            g.create_dataset(f"d{i:05d}", data=np.arange(i, i + SMALL, dtype="<f4"), chunks=(SMALL,),
                             maxshape=(None,))
    return fill


def fill_groups(f: h5py.File) -> None:
    for j in range(GROUPS):
        f.create_group(f"g{j:02d}")


# ------------------------------------------------------------------------------------------------ results


@dataclass
class Result:
    name: str
    label: str
    target: float | None              # least h5py s / h5fs s (None: no target)
    basis: str = "h5fs s"             # which h5fs time the target compares
    h5py: float | None = None         # up to its close
    h5py_fsync: float | None = None   # the fsync after the close
    h5fs: float | None = None         # the operations (cp + fsync, mkdir loop, rm -r)
    umount: float | None = None
    cpu: float | None = None          # daemon CPU s during the operations
    rss: float | None = None          # daemon peak RSS, MiB
    checked: str = ""
    error: str | None = None
    floor: float | None = None        # the same operations on write_floor_fs.py (None: no floor case)
    floor_cpu: float | None = None    # its daemon's CPU s during them
    floor_error: str | None = None
    sizes: dict[str, int] = field(default_factory=dict)   # rm: file sizes
    notes: list[str] = field(default_factory=list)

    @property
    def durable(self) -> float | None:
        return None if self.h5fs is None or self.umount is None else self.h5fs + self.umount

    def compared(self) -> float | None:
        """The h5fs seconds the target is about."""
        return self.durable if self.basis == "h5fs + umount s" else self.h5fs


def attempt(result: Result, step: Callable[[Result], None]) -> Result:
    """Run one case; any failure is kept in `result` and printed, the other cases go on."""
    t = time.perf_counter()
    try:
        step(result)
    except Exception as exc:   # noqa: BLE001 -- reported in the table
        result.error = str(exc) if isinstance(exc, Failed) else f"{type(exc).__name__}: {exc}"
        print(f"  {result.name}: FAILED: {result.error}", flush=True)
        if not isinstance(exc, Failed):
            traceback.print_exc()
    print(f"  {result.name}: done in {time.perf_counter() - t:.1f} s ({load()})", flush=True)
    return result


# ------------------------------------------------------------------------------------------------ cases


@dataclass
class Bench:
    workdir: Path
    mib: int
    count: int
    libver: str

    @property
    def mnt(self) -> Path:
        return self.workdir / "mnt"

    @property
    def floor_mnt(self) -> Path:
        return self.workdir / "mnt-floor"

    @property
    def npy(self) -> Path:
        return self.workdir / f"data-{self.mib}MiB.npy"

    def log(self, name: str) -> Path:
        log = self.workdir / f"h5fs-{name}.log"
        log.unlink(missing_ok=True)
        return log

    def empty(self) -> Path:
        return template(self.workdir / f"empty-{self.libver}.h5", self.libver)

    def measure(self, result: Result, daemon: Daemon, ops: Callable[[], float]) -> None:
        cpu = daemon.cpu()
        result.h5fs = ops()
        result.cpu, result.rss = daemon.cpu() - cpu, daemon.rss()

    def floor(self, result: Result, ops: Callable[[Path], float]) -> None:
        """`ops` (given the mount's root) timed on a fresh write_floor_fs.py mount. A failure is
        kept in result.floor_error and printed: the h5fs side runs regardless."""
        backing = self.workdir / "floor-backing"
        shutil.rmtree(backing, ignore_errors=True)
        backing.mkdir()
        try:
            with floor_mounted(backing, self.floor_mnt, self.workdir / f"floor-{result.name}.log") as pid:
                cpu = cpu_seconds(pid)
                result.floor = ops(self.floor_mnt)
                result.floor_cpu = cpu_seconds(pid) - cpu
            print(f"  {result.name}: floor {result.floor:.2f} s, daemon CPU {result.floor_cpu:.2f} s ({load()})",
                  flush=True)
        except Exception as exc:   # noqa: BLE001 -- reported in the table
            result.floor = None
            result.floor_error = str(exc) if isinstance(exc, (Failed, OSError)) else f"{type(exc).__name__}: {exc}"
            print(f"  {result.name}: floor FAILED: {result.floor_error}", flush=True)
            if not isinstance(exc, (Failed, OSError)):
                traceback.print_exc()
        finally:
            shutil.rmtree(backing, ignore_errors=True)   # 1 GiB after a cp

    def cp_fsync(self, target: Path) -> float:
        """`cp` of the .npy to `target`, then an fsync of the new file: the seconds of both."""
        seconds = command("cp", self.npy, target)
        t = time.perf_counter()
        fd = os.open(target, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return seconds + time.perf_counter() - t

    # -- cp -----------------------------------------------------------------------------------
    def cp(self, compression: str, result: Result) -> None:
        build_npy(self.npy, self.mib)
        arr = np.load(self.npy, mmap_mode="r")
        chunks, maxshape = npy_storage(arr.shape, arr.dtype.itemsize)
        want = {"chunks": list(chunks), "maxshape": list(maxshape)}
        want |= ({"compression": "gzip", "compression_opts": 4, "shuffle": True} if compression == "gzip"
                 else {"compression": None, "shuffle": False})
        del arr
        result.notes.append(f"chunks {tuple(chunks)}, maxshape {tuple(maxshape)}")
        theirs = self.workdir / f"cp-{compression}-h5py.h5"
        theirs.unlink(missing_ok=True)
        warm(self.npy)
        result.h5py, result.h5py_fsync = h5py_times(H5PY_CP, theirs, self.npy, self.libver, json.dumps(want))
        print(f"  {result.name}: h5py {result.h5py:.2f} s + fsync {result.h5py_fsync:.2f} s ({load()})", flush=True)

        def floor_ops(root: Path) -> float:
            warm(self.npy)
            seconds = self.cp_fsync(root / "data.npy")
            if (size := (root / "data.npy").stat().st_size) != self.npy.stat().st_size:
                raise Failed(f"the floor's copy holds {size:,} bytes, expected {self.npy.stat().st_size:,}")
            return seconds
        self.floor(result, floor_ops)

        ours = copy_of(self.empty(), self.workdir / f"cp-{compression}-h5fs.h5")
        options = [] if compression == "gzip" else ["compression=none"]
        with mounted(ours, self.mnt, options, self.log(f"cp-{compression}")) as daemon:
            warm(self.npy)
            self.measure(result, daemon, lambda: self.cp_fsync(self.mnt / "data.npy"))
        result.umount = daemon.umount
        print(f"  {result.name}: h5fs cp + fsync {result.h5fs:.2f} s, umount {result.umount:.2f} s, "
              f"daemon CPU {result.cpu:.2f} s, peak RSS {result.rss:.0f} MiB ({load()})", flush=True)
        run_checked(VERIFY_CP, ours, self.npy, json.dumps(want), what="h5py reads back")
        result.checked = "data, chunks, filters"
        result.notes.append(f"file {ours.stat().st_size / MIB:.0f} MiB (h5py's {theirs.stat().st_size / MIB:.0f})")

    # -- mkdir + setfattr ---------------------------------------------------------------------
    def mkdir(self, spread: bool, result: Result) -> None:
        kind = "spread" if spread else "one"
        start = (template(self.workdir / f"groups-{self.libver}.h5", self.libver, fill_groups) if spread
                 else self.empty())
        theirs = copy_of(start, self.workdir / f"mkdir-{kind}-h5py.h5")
        result.h5py, result.h5py_fsync = h5py_times(H5PY_MKDIR, theirs, self.count, int(spread))
        print(f"  {result.name}: h5py {result.h5py:.2f} s + fsync {result.h5py_fsync:.2f} s ({load()})", flush=True)

        def floor_ops(root: Path) -> float:
            groups = [root / f"g{j:02d}" for j in range(GROUPS)] if spread else [root]
            if spread:   # as the template's groups: made before timing
                for group in groups:
                    group.mkdir()
            done = [0]
            try:
                seconds = mkdir_setxattr(root, self.count, spread, done)
            except OSError as exc:
                raise Failed(f"after {done[0]:,} of {self.count:,} mkdir + setxattr: {exc}") from None
            made = sum(len(os.listdir(g)) for g in groups)
            if made != self.count:
                raise Failed(f"the floor lists {made:,} directories, expected {self.count:,}")
            return seconds
        self.floor(result, floor_ops)

        ours = copy_of(start, self.workdir / f"mkdir-{kind}-h5fs.h5")
        done = [0]
        try:
            with mounted(ours, self.mnt, [], self.log(f"mkdir-{kind}")) as daemon:
                self.measure(result, daemon, lambda: mkdir_setxattr(self.mnt, self.count, spread, done))
        except Failed as exc:
            raise Failed(f"after {done[0]:,} of {self.count:,} mkdir + setxattr: {exc}") from None
        result.umount = daemon.umount
        print(f"  {result.name}: h5fs {result.h5fs:.2f} s, umount {result.umount:.2f} s, daemon CPU "
              f"{result.cpu:.2f} s, peak RSS {result.rss:.0f} MiB ({load()})", flush=True)
        run_checked(VERIFY_MKDIR, ours, self.count, int(spread), what="h5py reads back")
        result.checked = "groups, attributes"

    # -- rm -r and reuse ----------------------------------------------------------------------
    def rm(self, result: Result) -> None:
        start = template(self.workdir / f"many-{self.count}-{self.libver}.h5", self.libver, fill_many(self.count))
        npys = self.workdir / f"small-npy-{self.count}"
        build_small_npys(npys, self.count)
        sizes = result.sizes
        sizes["before"] = start.stat().st_size

        theirs = copy_of(start, self.workdir / "rm-h5py.h5")
        warm(theirs)
        result.h5py, result.h5py_fsync = h5py_times(H5PY_RM, theirs, self.count)
        sizes["h5py after rm"] = theirs.stat().st_size
        print(f"  {result.name}: h5py {result.h5py:.2f} s + fsync {result.h5py_fsync:.2f} s ({load()})", flush=True)

        def floor_ops(root: Path) -> float:
            command("cp", "-r", npys, root / "many")   # not timed
            return rm_r(root / "many")[0]
        self.floor(result, floor_ops)

        ours = copy_of(start, self.workdir / "rm-h5fs.h5")
        warm(ours)
        quirk = ""
        with mounted(ours, self.mnt, [], self.log("rm")) as daemon:
            def ops() -> float:
                nonlocal quirk
                elapsed, quirk = rm_r(self.mnt / "many")
                return elapsed
            self.measure(result, daemon, ops)
        result.umount = daemon.umount
        sizes["h5fs after rm"] = ours.stat().st_size
        print(f"  {result.name}: h5fs rm -r {result.h5fs:.2f} s, umount {result.umount:.2f} s, daemon CPU "
              f"{result.cpu:.2f} s, peak RSS {result.rss:.0f} MiB ({load()})" + (f"; {quirk}" if quirk else ""),
              flush=True)
        run_checked(VERIFY_RM, ours, self.count, 0, what="h5py after rm -r")
        result.checked = "removed"
        if quirk:
            result.notes.append(quirk)

        # the same data back in: h5py in a new open, h5fs on a new mount once it knows its free space
        refill, _ = h5py_times(H5PY_REFILL, theirs, self.count)
        sizes["h5py after refill"] = theirs.stat().st_size
        log = self.log("refill")
        with mounted(ours, self.mnt, ["compression=none"], log) as daemon:
            found = wait_for_log(log, ("unused space found", "free space not reused"), FREE_WALK_TIMEOUT)
            seconds = command("cp", "-r", npys, self.mnt / "many")
            refill_rss = daemon.rss()
        sizes["h5fs after refill"] = ours.stat().st_size
        run_checked(VERIFY_RM, ours, self.count, 1, what="h5py after the refill")
        result.checked = "removed, refilled" + ("; BUT " + quirk if quirk else "")
        for who, path in (("h5fs", ours), ("h5py", theirs)):
            result.notes.append(f"after the refill, h5fs check of {who}'s file: {unused(path)}")
        result.notes.append(f"refill: h5py {refill:.2f} s, h5fs cp -r {seconds:.2f} s + umount {daemon.umount:.2f} s, "
                            f"daemon peak RSS {refill_rss:.0f} MiB; "
                            f"free-space walk: {found.split(' ', 2)[-1].strip()[:120]}")
        print(f"  {result.name}: refill h5py {refill:.2f} s, h5fs cp -r {seconds:.2f} s ({load()})", flush=True)


    # -- many small arrays: cp -r, tar -x, rm -r -------------------------------------------------
    @property
    def arrays_dir(self) -> Path:
        return self.workdir / f"arrays-{ARRAYS}"

    def arrays(self, how: str, result: Result) -> None:
        """`cp -r` (how "cp") or `tar -xf` (how "tar") of ARRAYS .npy files of 100 KB into a
        mount of an empty file, then its umount; h5py making the same datasets (the mount's
        chunks, gzip 4 + shuffle) in a copy of the same file; the floor doing the same copy."""
        archive = build_arrays(self.arrays_dir)
        for p in self.arrays_dir.glob("*.npy"):
            warm(p)
        warm(archive)
        theirs = copy_of(self.empty(), self.workdir / f"arrays-{how}-h5py.h5")
        result.h5py, result.h5py_fsync = h5py_times(H5PY_ARRAYS, theirs, self.arrays_dir)
        print(f"  {result.name}: h5py {result.h5py:.2f} s + fsync {result.h5py_fsync:.2f} s ({load()})", flush=True)

        def copy(root: Path) -> float:
            if how == "cp":
                return command("cp", "-r", self.arrays_dir, root / "arrays")
            t = time.perf_counter()
            done = subprocess.run(["tar", "-xf", str(archive), "-C", str(root), "--transform",
                                   f"s,^{self.arrays_dir.name},arrays,"], capture_output=True, text=True,
                                  timeout=TIMEOUT, check=False)
            if done.returncode:
                raise Failed(f"tar -x: exit {done.returncode}: {last_lines(done.stderr)}")
            return time.perf_counter() - t

        def floor_ops(root: Path) -> float:
            seconds = copy(root)
            if (made := len(os.listdir(root / "arrays"))) != ARRAYS:
                raise Failed(f"the floor lists {made:,} files, expected {ARRAYS:,}")
            return seconds
        self.floor(result, floor_ops)

        ours = copy_of(self.empty(), self.workdir / f"arrays-{how}-h5fs.h5")
        with mounted(ours, self.mnt, [], self.log(f"arrays-{how}")) as daemon:
            self.measure(result, daemon, lambda: copy(self.mnt))
        result.umount = daemon.umount
        print(f"  {result.name}: h5fs {result.h5fs:.2f} s, umount {result.umount:.2f} s, daemon CPU "
              f"{result.cpu:.2f} s, peak RSS {result.rss:.0f} MiB ({load()})", flush=True)
        run_checked(VERIFY_ARRAYS, ours, self.arrays_dir, "1", what="h5py reads back")
        result.checked = "data"

    def arrays_rm(self, result: Result) -> None:
        """`rm -r` of the ARRAYS datasets h5py made (the h5py side of cp-r), then the umount;
        h5py deleting them; the floor removing its copy of the files."""
        build_arrays(self.arrays_dir)
        start = self.workdir / "arrays-rm-start.h5"
        if not start.exists():
            part = copy_of(self.empty(), self.workdir / "arrays-rm-start.part")
            h5py_times(H5PY_ARRAYS, part, self.arrays_dir)
            part.rename(start)
        theirs = copy_of(start, self.workdir / "arrays-rm-h5py.h5")
        warm(theirs)
        result.h5py, result.h5py_fsync = h5py_times(H5PY_RM_ARRAYS, theirs)
        print(f"  {result.name}: h5py {result.h5py:.2f} s + fsync {result.h5py_fsync:.2f} s ({load()})", flush=True)

        def floor_ops(root: Path) -> float:
            command("cp", "-r", self.arrays_dir, root / "arrays")   # not timed
            return rm_r(root / "arrays")[0]
        self.floor(result, floor_ops)

        ours = copy_of(start, self.workdir / "arrays-rm-h5fs.h5")
        warm(ours)
        quirk = ""
        with mounted(ours, self.mnt, [], self.log("arrays-rm")) as daemon:
            def ops() -> float:
                nonlocal quirk
                elapsed, quirk = rm_r(self.mnt / "arrays")
                return elapsed
            self.measure(result, daemon, ops)
        result.umount = daemon.umount
        print(f"  {result.name}: h5fs rm -r {result.h5fs:.2f} s, umount {result.umount:.2f} s, daemon CPU "
              f"{result.cpu:.2f} s, peak RSS {result.rss:.0f} MiB ({load()})", flush=True)
        run_checked(VERIFY_ARRAYS, ours, self.arrays_dir, "0", what="h5py after rm -r")
        result.checked = "removed"
        if quirk:
            result.notes.append(quirk)


# ------------------------------------------------------------------------------------------------ report


def fmt(value: float | None, spec: str = ".2f") -> str:
    return "" if value is None else format(value, spec)


def ratio(a: float | None, b: float | None) -> str:
    return "" if a is None or b is None or b <= 0 else f"{a / b:.2f}x"


def result_row(r: Result) -> str:
    h5py_durable = None if r.h5py is None or r.h5py_fsync is None else r.h5py + r.h5py_fsync
    status = f"FAILED: {r.error}" if r.error else r.checked
    floor = "FAILED (below)" if r.floor_error else fmt(r.floor)
    return table_row(f"{r.name}: {r.label}", fmt(r.h5py), fmt(r.h5py_fsync), fmt(r.h5fs), fmt(r.umount), floor,
                     ratio(r.h5py, r.h5fs), ratio(r.floor, r.h5fs), ratio(h5py_durable, r.durable), fmt(r.cpu),
                     fmt(r.rss, ".0f"), status)


def floor_row(r: Result) -> str | None:
    """Whether the target lies below the floor: then no pyfuse3 daemon meets it on this machine."""
    if r.target is None or (r.floor is None and r.floor_error is None):
        return None
    if r.floor_error or r.h5py is None:
        measured = f"floor FAILED: {r.floor_error}" if r.floor_error else "no target time (h5py FAILED)"
        return table_row(f"{r.name} against the floor", measured, "", "")
    limit = r.h5py / r.target
    verdict = ("<", "not reachable through pyfuse3 here") if limit < r.floor else (">=", "above the floor")
    return table_row(f"{r.name} against the floor",
                     f"target {limit:.2f} s {verdict[0]} floor {r.floor:.2f} s: {verdict[1]}",
                     f"h5fs at most {limit:.2f} s ({r.basis}); floor = the same operations on {FLOOR.name}", "")


def target_rows(results: list[Result]) -> list[str]:
    rows = []
    for r in results:
        if r.target is None:
            goal = "none set (shown only)"
        elif r.target >= 1:
            goal = f">= {r.target:.1f}x ({r.basis} vs h5py to close)"
        else:
            goal = f">= {r.target:.2f}x, h5fs <= {1 / r.target:.0f}x h5py's time ({r.basis} vs h5py to close)"
        ours = r.compared()
        if r.h5py is None or ours is None:
            rows.append(table_row(r.name, f"FAILED: {r.error}", goal, "NOT met" if r.target is not None else ""))
        else:
            value = r.h5py / ours
            verdict = "" if r.target is None else met(value >= r.target and not r.error)
            note = f" (then FAILED: {r.error})" if r.error else ""
            rows.append(table_row(r.name, f"{value:.3f}x h5py{note}", goal, verdict))
        if (row := floor_row(r)) is not None:
            rows.append(row)
        if r.name == "cp-gzip":
            goal = f"< {RSS_TARGET_MB} MB"
            if r.rss is None:
                rows.append(table_row("daemon peak RSS (cp-gzip)", "FAILED (above)", goal, "NOT met"))
            else:
                mb = r.rss * MIB / 1e6
                rows.append(table_row("daemon peak RSS (cp-gzip)", f"{mb:.0f} MB ({r.rss:.0f} MiB)", goal,
                                      met(mb < RSS_TARGET_MB)))
        if r.name == "rm" and "before" in r.sizes:
            s = {k: v / MIB for k, v in r.sizes.items()}
            for who in ("h5fs", "h5py"):
                if f"{who} after refill" in s:
                    rows.append(table_row(
                        f"space reuse ({who})", f"{s[f'{who} after refill'] / s['before']:.3f}x the size before: "
                        f"{s['before']:.1f} MiB before rm, {s[f'{who} after rm']:.1f} after rm, "
                        f"{s[f'{who} after refill']:.1f} after the refill", "none set (shown only)", ""))
    return rows


def report(results: list[Result], args: argparse.Namespace) -> None:
    print(f"\nNamespace edits through the mount, libver={args.libver}, {args.size_mb} MiB .npy, "
          f"{args.count:,} objects, one run; h5fs s = cp + fsync of the new file / the os.mkdir + "
          "os.setxattr loop of ONE Python process (no fork per call) / rm -r; h5py s includes its close, "
          "h5py + fsync adds an fsync of its file; durable = h5fs s + umount s, compared with h5py + fsync; "
          "ratios = h5py s / h5fs s (\"x faster\"); floor s = the same operations on a fresh "
          f"{FLOOR.name} mount (a pyfuse3 + trio fs that does almost nothing), h5fs / floor = floor s / h5fs s "
          "(the fraction of the floor's speed h5fs reaches); daemon CPU during the operations; results read "
          f"back by h5py; {os.cpu_count()} cores, {load()} at the end.\n")
    print(table_row("case", "h5py s", "h5py fsync s", "h5fs s", "umount s", "floor s", "h5py / h5fs",
                    "h5fs / floor", "durable: h5py + fsync / h5fs + umount", "daemon CPU s", "peak RSS MiB",
                    "checked"))
    print(table_row(*["---"] * 12))
    for r in results:
        print(result_row(r))
    notes = [f"- {r.name}: {note}" for r in results for note in r.notes]
    notes += [f"- {r.name}: floor daemon CPU {r.floor_cpu:.2f} s" for r in results if r.floor_cpu is not None]
    notes += [f"- {r.name}: floor FAILED: {r.floor_error}" for r in results if r.floor_error]
    if notes:
        print("\n" + "\n".join(notes))
    print("\n" + table_row("target", "measured", "goal", ""))
    print(table_row(*["---"] * 4))
    print("\n".join(target_rows(results)), flush=True)


# ------------------------------------------------------------------------------------------------ main


def run(args: argparse.Namespace) -> None:
    bench = Bench(args.workdir, args.size_mb, args.count, args.libver)
    for mnt in (bench.mnt, bench.floor_mnt):
        mnt.mkdir(exist_ok=True)
        lazy_unmount(mnt)
    size = f"{args.size_mb / 1024:g} GiB" if args.size_mb >= 1024 else f"{args.size_mb} MiB"
    spec = {
        "cp-gzip": (Result("cp-gzip", f"cp {size} .npy, gzip:4,shuffle (default)", CP_TARGETS["gzip"]),
                    lambda r: bench.cp("gzip", r)),
        "cp-none": (Result("cp-none", f"cp {size} .npy, -o compression=none", CP_TARGETS["none"]),
                    lambda r: bench.cp("none", r)),
        "mkdir-one": (Result("mkdir-one", f"{args.count:,} mkdir + setxattr in one group", MKDIR_TARGET,
                             "h5fs + umount s"), lambda r: bench.mkdir(False, r)),
        "mkdir-spread": (Result("mkdir-spread", f"{args.count:,} mkdir + setxattr over {GROUPS} groups",
                                MKDIR_TARGET, "h5fs + umount s"), lambda r: bench.mkdir(True, r)),
        "rm": (Result("rm", f"rm -r of {args.count:,} datasets", None, "h5fs + umount s"), bench.rm),
        "cp-r": (Result("cp-r", f"cp -r of {ARRAYS:,} .npy files of 100 KB", None, "h5fs + umount s"),
                 lambda r: bench.arrays("cp", r)),
        "tar-x": (Result("tar-x", f"tar -x of {ARRAYS:,} .npy files of 100 KB", None, "h5fs + umount s"),
                  lambda r: bench.arrays("tar", r)),
        "rm-r": (Result("rm-r", f"rm -r of {ARRAYS:,} datasets of 100 KB", None, "h5fs + umount s"),
                 bench.arrays_rm),
    }
    results = []
    for name in args.cases:
        result, step = spec[name]
        print(f"{name}: {result.label}", flush=True)
        results.append(attempt(result, step))
    report(results, args)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: 64 MiB, 500 objects")
    ap.add_argument("--size-mb", type=int, help="MiB of the .npy, a multiple of 16 (default 1024)")
    ap.add_argument("--count", type=int, help="objects of the mkdir and rm cases (default 10,000)")
    ap.add_argument("--libver", default="latest", choices=("earliest", "latest"), help="the .h5 files' libver")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {','.join(CASES)}")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "h5fs-bench-namespace")
    args = ap.parse_args()
    for key, quick, full in (("size_mb", 64, 1024), ("count", 500, 10000)):
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else full)
    args.cases = [c for c in args.cases.split(",") if c]
    if unknown := set(args.cases) - set(CASES):
        ap.error(f"unknown cases: {', '.join(sorted(unknown))}")
    if args.size_mb <= 0 or args.size_mb % 16:
        ap.error("--size-mb must be a positive multiple of 16")
    if args.count <= 0:
        ap.error("--count must be positive")
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"h5fs measured: the package in {Path(importlib.util.find_spec('h5fs').origin).parent}; "
          f"{os.cpu_count()} cores; h5py {h5py.__version__}, libhdf5 {h5py.version.hdf5_version}", flush=True)
    try:
        run(args)
    finally:
        for mnt in ("mnt", "mnt-floor"):
            lazy_unmount(args.workdir / mnt)
    print(f"\nfiles kept in {args.workdir} (delete to rebuild)")


if __name__ == "__main__":
    main()
