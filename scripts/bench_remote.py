"""Remote mounts (issue 24) against h5py over fsspec and against h5fs on a local copy, on the same
server with the same added latency, in the same run.

    python3 scripts/bench_remote.py [--latency 0.02] [--runs 3] [--size-mib 256] [--dir /tmp/h5fs-bench-remote]
                                    [--cases walk,gzip,plain,random,second]

The server is tests/servers.py's RangeServer (HTTP/1.1, Range, ETag, keep-alive) on loopback,
sleeping `--latency` seconds before each answer and counting requests. Files, built once with
h5py and kept in --dir:
- objects.h5: 2,000 groups x 10 scalar datasets, an attribute on every object (libver latest;
  scripts/bench_read.py's `--objects` file);
- data.h5: `gzip` (gzip 4 + shuffle) and `plain` (unfiltered), each --size-mib MiB of float32 in
  256 x 256 tiles (8192 columns), the random walk of bench_read.py.

Cases, each run on a fresh mount with an empty block cache (unless said) and the page cache dropped:
- walk: mount, then `find -ls` and `getfattr -R -d` of objects.h5 (h5fs); h5py's visititems
  reading every attribute and shape over fsspec's `blockcache` with 64 KiB and 4 MiB blocks;
  h5fs on the local copy. Requests are the server's count.
- gzip, plain: the first `cat` of the dataset's raw view (h5fs); h5py reading the whole dataset
  over fsspec (4 MiB blocks); h5fs `cat` on the local copy.
- random: 1,000 reads of 4 KiB at random offsets of `plain` (seed 0) through a fresh mount; h5py
  reading the same 1,024 elements each over fsspec (4 MiB blocks, and 64 KiB blocks in the first
  run only: ~16,000 requests); h5fs local.
- second: `cat` of both datasets after a remount that keeps the block cache (the first mount read
  them): its requests (a HEAD to validate the version is expected, no data request).
- floor: what the server gives a client that knows exactly what to fetch: data.h5 in 8 MiB
  ranges, 8 at a time (obstore), MiB/s.

Prints each measurement, then markdown tables of medians with the issue's targets and the h5fs
daemon's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
import bench_read as br  # noqa: E402
from servers import RangeServer  # noqa: E402

MIB = 1 << 20
COLS = 8192
TILE = (256, 256)
RANDOM_READS = 1000
FSSPEC = r"""
import json, sys, time
import fsspec, h5py, numpy as np
url, block, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
t = time.perf_counter()
with fsspec.open(url, "rb", block_size=block, cache_type="blockcache") as fh:
    f = h5py.File(fh, "r")
    if mode == "walk":
        dict(f.attrs)
        def visit(name, obj):
            dict(obj.attrs)
            if isinstance(obj, h5py.Dataset):
                obj.shape
        f.visititems(visit)
    elif mode.startswith("read:"):
        f[mode[5:]][()]
    else:
        ds = f["plain"]
        rng = np.random.default_rng(0)
        for off in rng.integers(0, ds.size * 4 // 4096, %d) * 4096:
            e = int(off) // 4
            r, c = divmod(e, ds.shape[1])
            ds[r, c:c + 1024]
    f.close()
print(json.dumps({"seconds": time.perf_counter() - t}))
""" % RANDOM_READS


@dataclass
class Result:
    seconds: float
    requests: int            # requests the server answered (all kinds)
    gets: int = 0
    rss: float = float("nan")


def build(workdir: Path, mib: int) -> tuple[Path, Path]:
    workdir.mkdir(parents=True, exist_ok=True)
    objects = workdir / "objects.h5"
    if not objects.exists():
        br.build_objects(objects, 2000, 10, True)
    data = workdir / f"data-{mib}m.h5"
    if not data.exists():
        rows = mib * MIB // 4 // COLS
        part = data.with_suffix(".part")
        with h5py.File(part, "w") as f:
            gz = f.create_dataset("gzip", (rows, COLS), "<f4", chunks=TILE, compression="gzip",
                                  compression_opts=4, shuffle=True)
            plain = f.create_dataset("plain", (rows, COLS), "<f4", chunks=TILE)
            br.fill([gz], (rows, COLS), TILE[0])
            br.fill([plain], (rows, COLS), TILE[0])
        part.rename(data)
    return objects, data


def mount(source: str, mnt: Path, *options: str) -> float:
    t = time.perf_counter()
    args = ["h5fs", "mount", "-o", "ro"] + [x for o in options for x in ("-o", o)] + [source, str(mnt)]
    subprocess.run(args, check=True)
    return time.perf_counter() - t


def umount(mnt: Path) -> None:
    br.unmount(["h5fs", "umount", str(mnt)], mnt)


class Bench:
    def __init__(self, server: RangeServer, work: Path, objects: Path, data: Path):
        self.server, self.work, self.objects, self.data = server, work, objects, data
        self.mnt = Path(tempfile.mkdtemp(prefix="h5fs-bench-mnt-"))
        self.cache = work / "cache"
        self.slow_done = False

    def url(self, path: Path) -> str:
        return f"{self.server.url}/{path.name}"

    def fresh_cache(self) -> str:
        shutil.rmtree(self.cache, ignore_errors=True)
        return f"cache_dir={self.cache}"

    def counted(self, fn) -> Result:
        """`fn()` -> (seconds, rss); the server's requests during it."""
        br.drop_caches()
        self.server.reset_stats()
        seconds, rss = fn()
        st = self.server.stats()
        return Result(seconds, st["requests"], st["gets"], rss)

    def fsspec(self, path: Path, block: int, mode: str) -> Result:
        def run():
            out = subprocess.run([sys.executable, "-c", FSSPEC, self.url(path), str(block), mode],
                                 capture_output=True, text=True, check=True).stdout
            return json.loads(out)["seconds"], float("nan")
        return self.counted(run)

    def h5fs(self, source: str, action, *options: str) -> Result:
        """Mount `source`, time `action(mnt)` (mount time included for a walk: action says)."""
        def run():
            took = mount(source, self.mnt, *options)
            try:
                pid = br.daemon_pid(self.mnt)
                seconds = action(self.mnt, took)
                return seconds, br.peak_rss_mib(pid)
            finally:
                umount(self.mnt)
        return self.counted(run)

    # -- cases ------------------------------------------------------------------------------
    def walk(self) -> dict[str, Result]:
        def act(mnt: Path, took: float) -> float:
            return took + br.timed(["find", str(mnt), "-ls"]) + br.timed(["getfattr", "-R", "-d", str(mnt)])
        return {"h5fs remote": self.h5fs(self.url(self.objects), act, self.fresh_cache()),
                "h5py+fsspec 64 KiB": self.fsspec(self.objects, 64 << 10, "walk"),
                "h5py+fsspec 4 MiB": self.fsspec(self.objects, 4 << 20, "walk"),
                "h5fs local": self.h5fs(str(self.objects), act)}

    def read(self, name: str) -> dict[str, Result]:
        def act(mnt: Path, took: float) -> float:
            return br.time_cat(mnt / name)
        return {"h5fs remote": self.h5fs(self.url(self.data), act, self.fresh_cache()),
                "h5py+fsspec 4 MiB": self.fsspec(self.data, 4 << 20, f"read:{name}"),
                "h5fs local": self.h5fs(str(self.data), act)}

    def random(self) -> dict[str, Result]:
        def act(mnt: Path, took: float) -> float:
            path = mnt / "plain"
            size = path.stat().st_size
            offsets = np.random.default_rng(0).integers(0, size // 4096, RANDOM_READS) * 4096
            fd = os.open(path, os.O_RDONLY)
            try:
                t = time.perf_counter()
                for off in offsets:
                    os.pread(fd, 4096, int(off))
                return time.perf_counter() - t
            finally:
                os.close(fd)
        out = {"h5fs remote": self.h5fs(self.url(self.data), act, self.fresh_cache()),
               "h5py+fsspec 4 MiB": self.fsspec(self.data, 4 << 20, "random"),
               "h5fs local": self.h5fs(str(self.data), act)}
        if not self.slow_done:   # ~16,000 requests, 6 minutes at 20 ms: measured in the first run only
            out["h5py+fsspec 64 KiB (first run)"] = self.fsspec(self.data, 64 << 10, "random")
            self.slow_done = True
        return out

    def second(self) -> dict[str, Result]:
        def cat_both(mnt: Path, took: float) -> float:
            return br.time_cat(mnt / "gzip") + br.time_cat(mnt / "plain")
        first = self.h5fs(self.url(self.data), cat_both, self.fresh_cache())
        again = self.h5fs(self.url(self.data), cat_both, f"cache_dir={self.cache}")
        return {"h5fs first mount": first, "h5fs second mount": again}

    def floor(self) -> float:
        """MiB/s of data.h5 fetched in 8 MiB ranges, 8 at a time, by obstore."""
        import obstore
        from obstore.store import HTTPStore
        store = HTTPStore.from_url(self.server.url, client_options={"allow_http": True})
        size = self.data.stat().st_size
        step = 8 * MIB
        t = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda s: len(obstore.get_range(store, self.data.name, start=s, end=min(size, s + step))),
                          range(0, size, step)))
        return size / MIB / (time.perf_counter() - t)


def median(results: list[Result]) -> Result:
    return Result(statistics.median(r.seconds for r in results), int(statistics.median(r.requests for r in results)),
                  int(statistics.median(r.gets for r in results)), statistics.median(r.rss for r in results))


def show(case: str, sides: dict[str, list[Result]], mib: float | None) -> list[str]:
    rows = []
    for side, results in sides.items():
        m = median(results)
        speed = f"{mib / m.seconds:.0f} MiB/s" if mib else ""
        rss = "" if m.rss != m.rss else f"{m.rss:.0f} MiB"
        rows.append(f"| {case} | {side} | {m.seconds:.2f} s | {speed} | {m.requests} ({m.gets} GET) | {rss} |")
    return rows


def verdicts(medians: dict[str, dict[str, Result]], mib: int) -> list[str]:
    out = []
    w = medians.get("walk")
    if w:
        remote, ref, local = w["h5fs remote"], w["h5py+fsspec 64 KiB"], w["h5fs local"]
        out.append(f"- walk: {remote.requests} requests vs {ref.requests} (h5py+fsspec 64 KiB): "
                   f"{remote.requests / ref.requests:.2f}x (target <= 0.2x); time {remote.seconds:.2f} s vs local "
                   f"{local.seconds:.2f} s: {remote.seconds / local.seconds:.2f}x (target <= 1.3x)")
    for name in ("gzip", "plain"):
        r = medians.get(name)
        if r:
            ratio = r["h5py+fsspec 4 MiB"].seconds / r["h5fs remote"].seconds
            out.append(f"- first read of {name}: {mib / r['h5fs remote'].seconds:.0f} MiB/s, {ratio:.1f}x h5py+fsspec "
                       f"4 MiB (target >= 3x); local {mib / r['h5fs local'].seconds:.0f} MiB/s")
    s = medians.get("second")
    if s:
        out.append(f"- second mount: {s['h5fs second mount'].gets} GET requests (target: none for data), "
                   f"{s['h5fs second mount'].requests} in all")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--latency", type=float, default=0.02)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/h5fs-bench-remote"))
    ap.add_argument("--cases", default="walk,gzip,plain,random,second")
    args = ap.parse_args()
    objects, data = build(args.dir, args.size_mib)
    served = args.dir / "served"
    served.mkdir(exist_ok=True)
    for p in (objects, data):
        if not (served / p.name).exists():
            os.link(p, served / p.name)
    cases = args.cases.split(",")
    with RangeServer(served, latency=args.latency) as server:
        bench = Bench(server, args.dir, served / objects.name, served / data.name)
        runs: dict[str, dict[str, list[Result]]] = {}
        for i in range(args.runs):
            for case in cases:
                got = {"walk": bench.walk, "gzip": lambda: bench.read("gzip"), "plain": lambda: bench.read("plain"),
                       "random": bench.random, "second": bench.second}[case]()
                for side, r in got.items():
                    runs.setdefault(case, {}).setdefault(side, []).append(r)
                    print(f"run {i + 1} {case} {side}: {r.seconds:.2f} s, {r.requests} requests ({r.gets} GET), "
                          f"peak RSS {r.rss:.0f} MiB", flush=True)
        floor = bench.floor()
        os.rmdir(bench.mnt)
    print(f"\nlatency {args.latency * 1000:.0f} ms per request; medians of {args.runs} runs; "
          f"server floor {floor:.0f} MiB/s (8 MiB ranges, 8 in flight)\n")
    print("| case | side | time | speed | requests | daemon peak RSS |\n| --- | --- | --- | --- | --- | --- |")
    sizes = {"gzip": args.size_mib, "plain": args.size_mib, "second": 2 * args.size_mib}
    for case, sides in runs.items():
        print("\n".join(show(case, sides, sizes.get(case))))
    print()
    print("\n".join(verdicts({c: {s: median(r) for s, r in sides.items()} for c, sides in runs.items()}, args.size_mib)))


if __name__ == "__main__":
    main()
