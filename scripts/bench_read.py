"""Read benchmark: the first `cat` of a dataset's raw view after a fresh mount, against h5py
reading the same dataset into memory, in the same run. Prints medians, ratios (h5py time / h5fs
time: above 1 means h5fs is faster) and the daemon's peak RSS.

    python3 scripts/bench_read.py [--size-mib 1024] [--repeat 3] [--dir /tmp/h5fs-bench]
    python3 scripts/bench_read.py --objects 100000   # also the many-small-objects case

The .h5 files stay in the page cache (each is read once before timing) so both sides measure
decoding and serving, not the disk.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
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


def build_objects(path: Path, count: int) -> None:
    groups = max(1, count // 1000)
    with h5py.File(path, "w", libver="latest") as f:
        for g in range(groups):
            grp = f.create_group(f"g{g:04d}")
            for i in range(count // groups):
                d = grp.create_dataset(f"d{i:05d}", data=np.int32(i))
                d.attrs["index"] = i


def bench_objects(workdir: Path, count: int, repeat: int) -> None:
    path = workdir / f"objects{count}.h5"
    if not path.exists():
        build_objects(path, count)
    warm(path)
    mnt = workdir / "mnt"
    mnt.mkdir(exist_ok=True)
    code = ("import h5py,time,sys; f=h5py.File(sys.argv[1]); t=time.perf_counter(); n=[0]\n"
            "def v(name, o):\n    n[0]+=1; dict(o.attrs)\n"
            "f.visititems(v); print(time.perf_counter()-t)")
    rows = {"mount": [], "find": [], "getfattr": [], "h5py visititems": []}
    for _ in range(repeat):
        rows["h5py visititems"].append(float(subprocess.run([sys.executable, "-c", code, str(path)],
                                                            capture_output=True, text=True, check=True).stdout))
        t = time.perf_counter()
        subprocess.run(["h5fs", "mount", "-o", "ro", str(path), str(mnt)], check=True)
        rows["mount"].append(time.perf_counter() - t)
        try:
            t = time.perf_counter()
            subprocess.run(f"find {mnt} | wc -l", shell=True, check=True, stdout=subprocess.DEVNULL)
            rows["find"].append(time.perf_counter() - t)
            t = time.perf_counter()
            subprocess.run(["getfattr", "-R", "-d", str(mnt)], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            rows["getfattr"].append(time.perf_counter() - t)
        finally:
            subprocess.run(["h5fs", "umount", str(mnt)], check=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    base = med["h5py visititems"]
    print(f"\n{count} small objects: h5py visititems+attrs {base:.2f} s; mount {med['mount']:.2f} s; "
          f"find {med['find']:.2f} s ({med['find'] / base:.2f}x h5py); "
          f"getfattr -R -d {med['getfattr']:.2f} s ({med['getfattr'] / base:.2f}x h5py)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--objects", type=int, default=0, help="also time a file with this many small objects")
    ap.add_argument("--skip-datasets", action="store_true")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "h5fs-bench")
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    if not args.skip_datasets:
        bench_datasets(args.dir, args.size_mib, args.repeat)
    if args.objects:
        bench_objects(args.dir, args.objects, args.repeat)
    print(f"\nfiles kept in {args.dir} (delete to rebuild); {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
