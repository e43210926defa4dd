"""Read benchmarks, each against h5py (and libhdf5's tools) on the same data in the same run.

    python3 scripts/bench_read.py [--size-mib 1024] [--repeat 3] [--dir /tmp/h5fs-bench]
    python3 scripts/bench_read.py --objects [--runs 3] [--objects-only-small]

Default: the first `cat` of a dataset's raw view after a fresh mount, against h5py reading the
same dataset into memory. Prints medians, ratios (h5py time / h5fs time: above 1 means h5fs is
faster) and the daemon's peak RSS. The .h5 files stay in the page cache (each is read once before
timing) so both sides measure decoding and serving, not the disk.

`--objects`: the metadata walk over many small objects (libver="latest"): 2,000 groups x 10 scalar
datasets, one attribute on every object, and 100 groups x 1,000 datasets. On a fresh mount each
time (page cache dropped before every measurement): h5fs's mount time, `find -ls`, then
`getfattr -R -d` (together, the whole walk); the same walk on scripts/floor_fs.py (a pyfuse3 + trio
filesystem serving the same tree from dicts: what any pyfuse3 daemon pays); h5py's visititems
reading every attribute and shape, `h5dump -A` and `h5ls -r`. Reports the ratios, each daemon's
CPU time over the walk, its FUSE requests (h5fs's `user.h5fs.requests`, the floor's
`user.floor.requests`) and CPU per request, and its peak RSS, as a markdown table.
Files are built once, deterministically, and kept in --dir.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

CASES = {
    "contiguous": {},
    "chunked": {"chunks": True},
    "gzip4+shuffle": {"chunks": True, "compression": "gzip", "compression_opts": 4, "shuffle": True},
}


def build(path: Path, mib: int, opts: dict) -> None:
    rows = mib * 1024 * 1024 // 4 // 4096
    rng = np.random.default_rng(0)
    kw = dict(opts)
    if kw.pop("chunks", False):
        kw["chunks"] = (64, 4096)            # 1 MiB chunks
    with h5py.File(path, "w") as f:
        d = f.create_dataset("data", shape=(rows, 4096), dtype="<f4", **kw)
        level = np.zeros(4096, "f4")
        for r in range(0, rows, 256):
            block = np.cumsum(rng.normal(0, 0.01, (min(256, rows - r), 4096)).astype("f4"), axis=0) + level
            level = block[-1]
            d[r:r + len(block)] = np.round(block, 2)  # instrument resolution: compresses like real data


def warm(path: Path) -> None:
    with open(path, "rb") as fh:
        while fh.read(1 << 24):
            pass


def time_h5py(path: Path) -> float:
    code = ("import h5py,time,sys; f=h5py.File(sys.argv[1]); t=time.perf_counter(); f['data'][()];"
            "print(time.perf_counter()-t)")
    return float(subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                                check=True).stdout)


def daemon_pid(mnt: Path) -> int:
    out = subprocess.run(["getfattr", "--only-values", "-n", "user.h5fs.pid", str(mnt)], capture_output=True,
                         text=True, check=True).stdout
    return int(out)


def peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def time_mount(path: Path, mnt: Path, target: str = "data") -> tuple[float, float]:
    subprocess.run(["h5fs", "mount", "-o", "ro", str(path), str(mnt)], check=True)
    try:
        pid = daemon_pid(mnt)
        t = time.perf_counter()
        subprocess.run(["cat", str(mnt / target)], stdout=subprocess.DEVNULL, check=True)
        elapsed = time.perf_counter() - t
        return elapsed, peak_rss_mib(pid)
    finally:
        subprocess.run(["h5fs", "umount", str(mnt)], check=True)


def bench_datasets(workdir: Path, mib: int, repeat: int) -> None:
    print(f"{'case':16} {'h5py s':>8} {'h5fs s':>8} {'ratio':>6} {'h5fs GB/s':>9} {'peak RSS MiB':>12}")
    for name, opts in CASES.items():
        path = workdir / f"{name}.h5"
        if not path.exists():
            build(path, mib, opts)
        mnt = workdir / "mnt"
        mnt.mkdir(exist_ok=True)
        warm(path)
        ours, theirs, rss = [], [], []
        for _ in range(repeat):
            theirs.append(time_h5py(path))
            t, r = time_mount(path, mnt)
            ours.append(t)
            rss.append(r)
        a, b = statistics.median(theirs), statistics.median(ours)
        print(f"{name:16} {a:8.3f} {b:8.3f} {a / b:6.2f} {mib / 1024 * 1.073741824 / b:9.2f} {max(rss):12.0f}",
              flush=True)


# ------------------------------------------------------------------------------------------------
# The metadata walk over many small objects (issue 6): h5fs against a floor filesystem serving the
# same tree from dicts (scripts/floor_fs.py) and against h5py, h5dump and h5ls on the same file.

OBJECT_FILES = {  # name: (groups, datasets per group, an attribute on each group)
    "2000x10": (2000, 10, True),      # 22,000 objects, 42,001 entries
    "100x1000": (100, 1000, False),   # 100,100 objects, 200,101 entries
}
FLOOR = Path(__file__).with_name("floor_fs.py")
WALK_TIMEOUT = 3600.0
RSS_TARGET_MIB = 300e6 / 2**20   # 300 MB
VISIT = """import h5py, sys, time
t = time.perf_counter()
f = h5py.File(sys.argv[1], "r")
dict(f.attrs)
def visit(name, obj):
    dict(obj.attrs)             # every attribute's value
    if isinstance(obj, h5py.Dataset):
        obj.shape
f.visititems(visit)
print(time.perf_counter() - t)
"""


def build_objects(path: Path, groups: int, per_group: int, group_attrs: bool) -> None:
    part = path.with_suffix(".part")
    with h5py.File(part, "w", libver="latest") as f:
        for g in range(groups):
            grp = f.create_group(f"g{g:04d}")
            if group_attrs:
                grp.attrs["index"] = g
            for i in range(per_group):
                d = grp.create_dataset(f"d{i:05d}", data=np.int32(i), track_times=False)
                d.attrs["index"] = i
    part.rename(path)   # an interrupted build leaves no file that looks finished


def drop_caches() -> None:
    subprocess.run("sync; echo 3 > /proc/sys/vm/drop_caches", shell=True, check=True)


def run_timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    t = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          errors="replace", timeout=WALK_TIMEOUT)
    return time.perf_counter() - t, done


def timed(cmd: list[str]) -> float:
    elapsed, done = run_timed(cmd)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: exit {done.returncode}: {done.stderr[-800:]}")
    return elapsed


def xattr(mnt: Path, name: str) -> str | None:
    done = subprocess.run(["getfattr", "--only-values", "-n", name, str(mnt)], capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process (all its threads)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def is_mounted(mnt: Path) -> bool:
    with open("/proc/self/mountinfo") as fh:
        return any(line.split()[4] == str(mnt) for line in fh)


def unmount(cmd: list[str], mnt: Path) -> None:
    """`cmd`, then a lazy unmount if the mount is still there."""
    try:
        subprocess.run(cmd, timeout=120)
    finally:
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)])


@dataclass
class Walk:
    """One `find -ls` then `getfattr -R -d` on a fresh mount, and what the daemon spent on it."""
    mount: float
    find: float
    getfattr: float
    cpu: float                 # daemon CPU seconds during the walk (mount excluded)
    requests: int | None       # FUSE requests the walk made (None: the daemon does not count)
    rss: float                 # daemon peak RSS, MiB

    @property
    def walk(self) -> float:
        return self.find + self.getfattr

    def __str__(self) -> str:
        return (f"mount {self.mount:.2f} s, find -ls {self.find:.2f} s, getfattr -R -d {self.getfattr:.2f} s, "
                f"daemon CPU {self.cpu:.2f} s, {self.requests} requests, peak RSS {self.rss:.0f} MiB")


def walk(mnt: Path, pid: int, counter: str, mount: float) -> Walk:
    before = xattr(mnt, counter)
    cpu = cpu_seconds(pid)
    find = timed(["find", str(mnt), "-ls"])
    getfattr = timed(["getfattr", "-R", "-d", str(mnt)])
    cpu = cpu_seconds(pid) - cpu
    rss = peak_rss_mib(pid)
    after = xattr(mnt, counter)
    # the second read's own getxattr is counted too: take it off
    requests = int(after) - int(before) - 1 if before is not None and after is not None else None
    return Walk(mount, find, getfattr, cpu, requests, rss)


def walk_h5fs(path: Path, mnt: Path) -> Walk:
    t = time.perf_counter()
    try:
        subprocess.run(["h5fs", "mount", "-o", "ro", str(path), str(mnt)], check=True)
        mount = time.perf_counter() - t
        return walk(mnt, daemon_pid(mnt), "user.h5fs.requests", mount)
    finally:
        unmount(["h5fs", "umount", str(mnt)], mnt)


def walk_floor(path: Path, mnt: Path, log: Path) -> Walk:
    t = time.perf_counter()
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, str(FLOOR), str(path), str(mnt)], stdout=subprocess.PIPE,
                                stderr=err, text=True)
    ready = False
    try:
        ready = proc.stdout.readline().strip() == "ready"
        if not ready:
            raise RuntimeError(f"floor_fs.py did not mount {path}: see {log}")
        os.stat(mnt)   # answers once the floor serves
        return walk(mnt, proc.pid, "user.floor.requests", time.perf_counter() - t)
    finally:
        if ready:
            unmount(["fusermount3", "-u", str(mnt)], mnt)
        try:
            proc.wait(timeout=60 if ready else 0.1)
        except subprocess.TimeoutExpired:   # still building its tree, or hung
            proc.kill()
            proc.wait()
        if is_mounted(mnt):                 # killed between mounting and saying so
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)])


def time_visititems(path: Path) -> float:
    return float(subprocess.run([sys.executable, "-c", VISIT, str(path)], capture_output=True, text=True,
                                check=True).stdout)


def time_h5dump(path: Path) -> float | str:
    """Seconds, or why Debian's h5dump (1.10) could not read the file."""
    elapsed, done = run_timed(["h5dump", "-A", str(path)])
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    if done.returncode or lines:
        return f"h5dump cannot read it (exit {done.returncode}: {lines[0] if lines else 'no message'})"
    return elapsed


def measure_objects(path: Path, workdir: Path, runs: int) -> dict[str, list]:
    """`runs` rounds of every measurement, each on a fresh mount after dropping the caches."""
    out: dict[str, list] = {"h5fs": [], "floor": [], "visititems": [], "h5dump": [], "h5ls": []}
    steps = {
        "h5fs": lambda: walk_h5fs(path, workdir / "mnt"),
        "floor": lambda: walk_floor(path, workdir / "mnt-floor", workdir / "floor.log"),
        "visititems": lambda: time_visititems(path),
        "h5dump": lambda: time_h5dump(path),
        "h5ls": lambda: timed(["h5ls", "-r", str(path)]),
    }
    (workdir / "mnt").mkdir(exist_ok=True)
    (workdir / "mnt-floor").mkdir(exist_ok=True)
    for run in range(runs):
        for name, step in steps.items():
            drop_caches()
            out[name].append(step())
            value = out[name][-1]
            print(f"  {path.name} run {run + 1}/{runs} {name}: "
                  f"{f'{value:.2f} s' if isinstance(value, float) else value} (load {os.getloadavg()[0]:.1f})",
                  flush=True)
    return out


def median_walk(walks: list[Walk]) -> Walk:
    """Field-wise medians (the whole walk is the median of the runs' sums); the peak RSS is the
    largest."""
    req = [w.requests for w in walks]
    return Walk(statistics.median(w.mount for w in walks), statistics.median(w.find for w in walks),
                statistics.median(w.getfattr for w in walks), statistics.median(w.cpu for w in walks),
                None if None in req else int(statistics.median(req)), max(w.rss for w in walks))


def table_row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def report_objects(name: str, res: dict[str, list]) -> tuple[list[str], str]:
    """Table rows and the verdict on the targets for one file."""
    base = statistics.median(res["visititems"])
    walks = {tool: (median_walk(res[tool]), statistics.median(w.walk for w in res[tool]))
             for tool in ("h5fs", "floor")}
    floor_whole = walks["floor"][1]
    rows = []
    for tool, (w, whole) in walks.items():
        requests, note = w.requests, ""
        if requests is None:
            requests, note = walks["floor"][0].requests, " (the floor's: no user.h5fs.requests)"
        per_request = f"{w.cpu / requests * 1e6:.0f}" if requests else ""
        rows.append(table_row(name, tool, f"{w.mount:.2f}" if tool == "h5fs" else "", f"{w.find:.2f}",
                              f"{w.getfattr:.2f}", f"{whole:.2f}", f"{whole / base:.2f}x",
                              f"{whole / floor_whole:.2f}x", f"{w.cpu:.2f}", f"{requests}{note}", per_request,
                              f"{w.rss:.0f}"))
    for tool, key in (("h5py visititems", "visititems"), ("h5dump -A", "h5dump"), ("h5ls -r", "h5ls")):
        failed = next((t for t in res[key] if isinstance(t, str)), None)
        t = 0.0 if failed else statistics.median(res[key])
        rows.append(table_row(name, tool, "", "", "", failed or f"{t:.2f}", "" if failed else f"{t / base:.2f}x",
                              *[""] * 5))
    ours, whole = walks["h5fs"]
    met = lambda ok: "met" if ok else "NOT met"  # noqa: E731
    verdict = (f"{name}: whole walk {whole / base:.2f}x visititems (target <= 1.5x: {met(whole / base <= 1.5)}), "
               f"{whole / floor_whole:.2f}x the floor (target about 1.7x); mount {ours.mount:.2f} s "
               f"(target < 1 s: {met(ours.mount < 1)}); daemon peak RSS {ours.rss:.0f} MiB")
    if name == "100x1000":
        verdict += f" (target < 300 MB = {RSS_TARGET_MIB:.0f} MiB: {met(ours.rss < RSS_TARGET_MIB)})"
    return rows, verdict


def print_table(rows: list[str], verdicts: list[str]) -> None:
    print(table_row("file", "tool", "mount s", "find -ls s", "getfattr -R -d s", "whole walk s", "/ visititems",
                    "/ floor", "daemon CPU s", "FUSE requests", "CPU / request us", "peak RSS MiB"))
    print(table_row(*["---"] * 12))
    print("\n".join(rows))
    print("\n" + "\n".join(verdicts) + "\n", flush=True)


def bench_objects(workdir: Path, runs: int, only_small: bool) -> None:
    print(f"h5fs measured: the package in {Path(importlib.util.find_spec('h5fs').origin).parent}", flush=True)
    rows, verdicts = [], []
    for name, (groups, per_group, group_attrs) in OBJECT_FILES.items():
        if only_small and name != "2000x10":
            continue
        path = workdir / f"objects-{name}.h5"
        if not path.exists():
            build_objects(path, groups, per_group, group_attrs)
        print(f"{path}: {groups} groups x {per_group} datasets, {runs} runs", flush=True)
        r, verdict = report_objects(name, measure_objects(path, workdir, runs))
        print_table(r, [verdict])   # now, in case a later file fails
        rows += r
        verdicts.append(verdict)
    print(f"Metadata walk, medians of {runs} runs, page cache dropped before each measurement; "
          "whole walk = `find -ls` then `getfattr -R -d` on one fresh mount; daemon CPU and requests "
          "count the walk only (not the mount); the floor's peak RSS is reset after its h5py build.\n")
    print_table(rows, verdicts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--repeat", "--runs", dest="repeat", type=int, default=3, help="runs per measurement")
    ap.add_argument("--objects", action="store_true",
                    help="time the metadata walk over many small objects instead of the datasets")
    ap.add_argument("--objects-only-small", action="store_true", help="with --objects: skip the 100,000-object file")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "h5fs-bench")
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    if args.objects:
        bench_objects(args.dir, args.repeat, args.objects_only_small)
    else:
        bench_datasets(args.dir, args.size_mib, args.repeat)
    print(f"\nfiles kept in {args.dir} (delete to rebuild); {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
