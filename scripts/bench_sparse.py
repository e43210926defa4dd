"""Sparse datasets (structured chunk storage) through a read-write mount, against h5py holding the
same elements in a gzip-chunked dense dataset, in the same run.

    python3 scripts/bench_sparse.py [--extent 50000] [--points 250000] [--chunk 1000] [--runs 3]
                                    [--filters SPEC ...] [--h5py-shuffle off,on] [--pwrite all|N|0]
                                    [--random-pwrites 2000] [--libver latest|earliest]
                                    [-o MOUNT_OPTIONS] [--dir /tmp/h5fs-bench-sparse]
    python3 scripts/bench_sparse.py --quick   # 10,000 x 10,000, 10,000 points (100 a chunk, as in the
                                              # full run), 1,000 random pwrites

The data (the issue's configuration by default): an EXTENT x EXTENT float32 dataset in CHUNK x
CHUNK chunks with POINTS defined elements at distinct random places (seed 0, drawn uniformly
over the extent: about POINTS / chunks per chunk, every chunk holding some), each value
rng.random() + 1 as float32 (never the fill value 0). The points are saved once in --dir as
points-*.npy, records [("index", "<u8", (2,)), ("value", "<f4")] in the order drawn (not sorted),
and kept in the page cache. The model is that array sorted in row-major order of its index: what
S.points.npy must read as.

h5fs, per --filters variant (each a fresh copy of an empty h5py file of --libver):
`h5fs mount -o rw FILE MNT`, `h5fs create MNT/S --sparse --shape E,E --dtype f4 --chunks C,C
[--filters SPEC]` (timed apart), then

- write: `cp points.npy MNT/S.points.npy` (the whole defined set replaced at its close: the time
  is cp's, up to that close), then `h5fs umount` timed apart ("until durable" = cp + umount);
- file size: the .h5 file's size after the unmount; `h5fs check` must find it sound;
- read: on a fresh mount each run (`-o ro`: no free-space walk competes with it),
  `np.load(MNT/S.points.npy)` in this process, timed: the first load after the mount ("cold":
  the daemon counts every chunk's elements to state the header, then decodes each chunk row)
  and a second one on the same mount ("warm").
  Every load is compared with the model (indices and values); a few elements of the raw view `S`
  are read with os.pread too (defined ones and undefined ones: the fill value).

h5py (HDF5 of the h5py wheel), per --h5py-shuffle setting: a fresh file (same libver), dataset
(E, E) float32, chunks (C, C), compression="gzip", compression_opts=4, shuffle off or on;

- write (once per setting, given its cost): from the points in memory, group them by chunk, and
  for every chunk holding one build the dense C x C chunk (zeros, the values placed) and write
  it with ds[rows, cols] = chunk (chunks without a point are not written); the time includes
  the grouping, create_dataset and the file's close (no fsync: the favourable side for h5py);
- file size after the close;
- read: open the file, read every chunk with a slice, keep the non-zero elements (np.nonzero),
  then sort them in row-major order into the same record array as S.points.npy, close; timed,
  compared with the model.

Ratios compare h5fs with the h5py setting best on that measure (smallest file, fastest write,
fastest read). Targets (the issue): file at least 2x smaller, reading the defined elements at
least 10x faster (h5fs's cold read is the one judged), writing them at least 2x faster.

pwrite (informational, no target): the same elements written one by one into the raw view
`MNT/S`, `os.pwrite` of 4 bytes at (row * E + col) * 4, then one fsync, into a fresh sparse dataset
made with the first --filters variant: (a) --pwrite of them (default all) in chunk order (sorted
by chunk, then by position: each dense chunk is built once while the write-back budget holds it);
(b) --random-pwrites of them in the order drawn (nearly every write lands in another chunk than
the one before: the time per write is shown and extrapolated to POINTS, not measured). Both checked against their model.

The write is measured once per variant (reported as such); read times are medians of --runs.
A case that fails (an error of the mount, of h5py, data that differs) is reported and the others
go on; every mount is unmounted even on failure.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
from bench_read import table_row, warm
from bench_write import TIMEOUT, Failed, last_lines, lazy_unmount, load, met, mounted

MIB = 1 << 20
SIZE_TARGET = 2.0       # h5py file size / h5fs file size
READ_TARGET = 10.0      # h5py read s / h5fs read s
WRITE_TARGET = 2.0      # h5py write s / h5fs write s
DEFAULT_FILTERS = ("values=gzip:4,selection=gzip:1", "none", "values=shuffle,gzip:4,selection=gzip:4",
                   "values=shuffle,gzip:9,selection=gzip:9")
SPOT_CHECKS = 100       # defined and undefined elements read back through the raw view


def points_dtype() -> np.dtype:
    return np.dtype([("index", "<u8", (2,)), ("value", "<f4")])


# ------------------------------------------------------------------------------------------------ data


@dataclass
class Data:
    extent: int
    count: int
    chunk: int
    source: Path             # the points in the order drawn, a .npy file
    drawn: np.ndarray        # the same, in memory
    model: np.ndarray        # sorted in row-major order: what S.points.npy reads as

    @property
    def shape(self) -> tuple[int, int]:
        return self.extent, self.extent

    @property
    def grid(self) -> int:
        return -(-self.extent // self.chunk)

    def offsets(self, points: np.ndarray) -> list[int]:
        """Byte offsets of these points in the raw view."""
        idx = points["index"].astype(np.int64)
        return ((idx[:, 0] * self.extent + idx[:, 1]) * 4).tolist()


def sort_rowmajor(points: np.ndarray) -> np.ndarray:
    return points[np.lexsort((points["index"][:, 1], points["index"][:, 0]))]


def build_data(workdir: Path, extent: int, count: int, chunk: int) -> Data:
    path = workdir / f"points-{extent}-{count}.npy"
    if path.exists():
        drawn = np.load(path)
    else:
        rng = np.random.default_rng(0)
        linear = rng.choice(extent * extent, count, replace=False)
        drawn = np.empty(count, points_dtype())
        drawn["index"] = np.stack(np.unravel_index(linear, (extent, extent)), axis=1)
        drawn["value"] = (rng.random(count) + 1).astype("<f4")
        part = path.with_suffix(".part.npy")
        np.save(part, drawn)
        part.rename(path)   # an interrupted build leaves no file that looks finished
    if len(drawn) != count or (len(drawn) and int(drawn["index"].max()) >= extent):
        raise SystemExit(f"{path} does not hold {count} points in {extent} x {extent}: delete it")
    return Data(extent, count, chunk, path, drawn, sort_rowmajor(drawn))


def chunk_order(data: Data, points: np.ndarray) -> np.ndarray:
    idx = points["index"].astype(np.int64)
    return points[np.lexsort((idx[:, 1], idx[:, 0], idx[:, 1] // data.chunk, idx[:, 0] // data.chunk))]


def same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Failed unless `got` holds exactly `want`'s records (indices and values), in its order."""
    if got.dtype != want.dtype:
        raise Failed(f"{what}: dtype {got.dtype}, expected {want.dtype}")
    if got.shape != want.shape:
        raise Failed(f"{what}: {got.shape[0]:,} elements, expected {want.shape[0]:,}")
    if not np.array_equal(got["index"], want["index"]):
        bad = int(np.flatnonzero((got["index"] != want["index"]).any(axis=1))[0])
        raise Failed(f"{what}: element {bad} at {tuple(got['index'][bad])}, expected {tuple(want['index'][bad])}")
    if not np.array_equal(got["value"], want["value"]):
        bad = int(np.flatnonzero(got["value"] != want["value"])[0])
        raise Failed(f"{what}: value of {tuple(got['index'][bad])} is {got['value'][bad]}, "
                     f"expected {want['value'][bad]}")


def template(workdir: Path, libver: str) -> Path:
    path = workdir / f"empty-{libver}.h5"
    if not path.exists():
        part = path.with_suffix(".part")
        with h5py.File(part, "w", libver=libver):
            pass
        part.rename(path)
    return path


# ------------------------------------------------------------------------------------------------ h5py


def h5py_write(data: Data, path: Path, shuffle: bool, libver: str) -> float:
    """The points written as dense gzip chunks; seconds including the grouping and the close."""
    c = data.chunk
    t = time.perf_counter()
    idx = data.drawn["index"].astype(np.int64)
    grid = (idx[:, 0] // c) * data.grid + idx[:, 1] // c
    order = np.argsort(grid, kind="stable")
    grid, idx, values = grid[order], idx[order], data.drawn["value"][order]
    bounds = np.flatnonzero(np.diff(grid)) + 1
    with h5py.File(path, "w", libver=libver) as f:
        ds = f.create_dataset("D", shape=data.shape, dtype="<f4", chunks=(c, c), compression="gzip",
                              compression_opts=4, shuffle=shuffle, track_times=False)
        for part in np.split(np.arange(len(grid)), bounds):
            if not len(part):
                continue
            r0, c0 = divmod(int(grid[part[0]]), data.grid)
            r0, c0 = r0 * c, c0 * c
            r1, c1 = min(r0 + c, data.extent), min(c0 + c, data.extent)
            dense = np.zeros((r1 - r0, c1 - c0), "<f4")
            dense[idx[part, 0] - r0, idx[part, 1] - c0] = values[part]
            ds[r0:r1, c0:c1] = dense
    return time.perf_counter() - t


def h5py_read(data: Data, path: Path) -> tuple[float, np.ndarray]:
    """(seconds, the non-zero elements as S.points.npy's records in row-major order)."""
    c = data.chunk
    t = time.perf_counter()
    rows, cols, vals = [], [], []
    with h5py.File(path, "r") as f:
        ds = f["D"]
        for r0 in range(0, data.extent, c):
            for c0 in range(0, data.extent, c):
                block = ds[r0:r0 + c, c0:c0 + c]
                r, k = np.nonzero(block)
                rows.append(r + r0)
                cols.append(k + c0)
                vals.append(block[r, k])
    r, k = np.concatenate(rows), np.concatenate(cols)
    order = np.lexsort((k, r))
    out = np.empty(len(r), points_dtype())
    out["index"][:, 0], out["index"][:, 1] = r[order], k[order]
    out["value"] = np.concatenate(vals)[order]
    return time.perf_counter() - t, out


# ------------------------------------------------------------------------------------------------ h5fs


def command(*argv: str | Path) -> float:
    """Seconds `argv` took; Failed with its message when it fails."""
    t = time.perf_counter()
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=TIMEOUT, check=False)
    elapsed = time.perf_counter() - t
    if done.returncode:
        raise Failed(f"{' '.join(str(a) for a in argv[:2])}: exit {done.returncode}: "
                     f"{last_lines(done.stderr or done.stdout)}")
    return elapsed


def create_sparse(data: Data, mnt: Path, filters: str) -> float:
    spec = ["--filters", filters] if filters != "none" else []
    return command("h5fs", "create", mnt / "S", "--sparse", "--shape", f"{data.extent},{data.extent}",
                   "--dtype", "f4", "--chunks", f"{data.chunk},{data.chunk}", *spec)


def spot_check(data: Data, mnt: Path, model: np.ndarray) -> None:
    """A few elements of the raw view S: defined ones hold their values, undefined ones 0."""
    rng = np.random.default_rng(2)
    fd = os.open(mnt / "S", os.O_RDONLY)
    try:
        if len(model):
            picks = model[rng.choice(len(model), min(SPOT_CHECKS, len(model)), replace=False)]
            for offset, value in zip(data.offsets(picks), picks["value"]):
                got = np.frombuffer(os.pread(fd, 4, offset), "<f4")
                if len(got) != 1 or got[0] != value:
                    raise Failed(f"raw view at byte {offset}: {got}, expected {value}")
        defined = set(data.offsets(model))
        for linear in rng.integers(0, data.extent * data.extent, SPOT_CHECKS).tolist():
            if linear * 4 in defined:
                continue
            got = np.frombuffer(os.pread(fd, 4, linear * 4), "<f4")
            if len(got) != 1 or got[0] != 0:
                raise Failed(f"raw view at byte {linear * 4} (undefined): {got}, expected 0")
    finally:
        os.close(fd)


def load_points(mnt: Path) -> tuple[float, np.ndarray]:
    t = time.perf_counter()
    got = np.load(mnt / "S.points.npy")
    return time.perf_counter() - t, got


def check_file(path: Path) -> str:
    """`h5fs check`'s summary line; Failed when it finds a problem."""
    done = subprocess.run(["h5fs", "check", str(path)], capture_output=True, text=True, timeout=TIMEOUT, check=False)
    if done.returncode:
        raise Failed(f"h5fs check: exit {done.returncode}: {last_lines(done.stdout + done.stderr, 3)}")
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "sound"


# ------------------------------------------------------------------------------------------------ results


@dataclass
class Result:
    name: str
    label: str
    size: int = 0                 # bytes of the .h5 file
    write: float = float("nan")   # s, once
    create: float = float("nan")  # h5fs create s
    umount: float = float("nan")  # h5fs umount s after the write
    reads: list[float] = field(default_factory=list)       # cold (h5fs) / each run (h5py)
    warm_reads: list[float] = field(default_factory=list)  # h5fs: the second load on a mount
    mounts: list[float] = field(default_factory=list)      # h5fs mount s before each read run
    cpu_write: float = float("nan")   # daemon CPU s during the cp
    cpu_read: list[float] = field(default_factory=list)   # daemon CPU s of the cold load
    rss: float = 0.0                  # daemon peak RSS MiB, largest seen
    check: str = ""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.reads) and self.size > 0

    @property
    def read(self) -> float:
        return statistics.median(self.reads)


def attempt(result: Result, step: Callable[[Result], None]) -> Result:
    try:
        step(result)
    except Exception as exc:   # noqa: BLE001 -- any failure ends this case only
        result.error = str(exc) if isinstance(exc, Failed) else f"{type(exc).__name__}: {exc}"
        print(f"  {result.name}: FAILED: {result.error}", flush=True)
    return result


@dataclass
class Pwrite:
    label: str
    count: int = 0
    seconds: float = float("nan")   # the pwrites and the fsync
    fsync: float = float("nan")     # of which the fsync
    umount: float = float("nan")
    size: int = 0
    cpu: float = float("nan")
    rss: float = 0.0
    error: str | None = None


@dataclass
class Bench:
    workdir: Path
    data: Data
    runs: int
    libver: str
    options: list[str]

    @property
    def mnt(self) -> Path:
        return self.workdir / "mnt"

    def log(self, name: str) -> Path:
        return self.workdir / f"h5fs-{name}.log"

    def fresh(self, name: str) -> Path:
        return Path(shutil.copyfile(template(self.workdir, self.libver), self.workdir / name))

    # -- h5py
    def h5py_case(self, shuffle: bool) -> Result:
        name = f"h5py gzip-4{' + shuffle' if shuffle else ''}"
        label = f"dense, chunks {self.data.chunk}x{self.data.chunk}, gzip 4, shuffle {'on' if shuffle else 'off'}"

        def step(r: Result) -> None:
            path = self.workdir / f"h5py-{'shuffle' if shuffle else 'gzip'}.h5"
            path.unlink(missing_ok=True)
            r.write = h5py_write(self.data, path, shuffle, self.libver)
            r.size = path.stat().st_size
            print(f"  {name}: write {r.write:.2f} s, file {r.size / MIB:.2f} MiB ({load()})", flush=True)
            warm(path)
            for n in range(self.runs):
                seconds, got = h5py_read(self.data, path)
                same(got, self.data.model, f"{name} read")
                r.reads.append(seconds)
                print(f"  {name}: read {n + 1}/{self.runs} {seconds:.2f} s ({load()})", flush=True)
        return attempt(Result(name, label), step)

    # -- h5fs
    def h5fs_case(self, filters: str, index: int) -> Result:
        name = f"h5fs sparse, {filters}"
        label = f"sparse, chunks {self.data.chunk}x{self.data.chunk}, filters {filters}"

        def step(r: Result) -> None:
            path, log = self.fresh(f"h5fs-{index}.h5"), self.log(f"variant{index}")
            log.unlink(missing_ok=True)
            warm(self.data.source)
            with mounted(path, self.mnt, self.options, log) as daemon:
                r.create = create_sparse(self.data, self.mnt, filters)
                cpu = daemon.cpu()
                r.write = command("cp", self.data.source, self.mnt / "S.points.npy")
                r.cpu_write, r.rss = daemon.cpu() - cpu, daemon.rss()
                _, got = load_points(self.mnt)
                same(got, self.data.model, f"{name}: S.points.npy after the cp")
            r.umount = daemon.umount
            r.size = path.stat().st_size
            r.check = check_file(path)
            print(f"  {name}: create {r.create:.2f} s, cp {r.write:.2f} s, umount {r.umount:.2f} s, "
                  f"file {r.size / MIB:.2f} MiB; {r.check} ({load()})", flush=True)
            warm(path)
            for n in range(self.runs):
                t = time.perf_counter()
                with mounted(path, self.mnt, ["ro", *self.options], log) as daemon:
                    r.mounts.append(time.perf_counter() - t)
                    cpu = daemon.cpu()
                    cold, got = load_points(self.mnt)
                    r.cpu_read.append(daemon.cpu() - cpu)
                    same(got, self.data.model, f"{name}: S.points.npy, first load after a mount")
                    again, got = load_points(self.mnt)
                    same(got, self.data.model, f"{name}: S.points.npy, second load")
                    if n == 0:
                        spot_check(self.data, self.mnt, self.data.model)
                    r.rss = max(r.rss, daemon.rss())
                r.reads.append(cold)
                r.warm_reads.append(again)
                print(f"  {name}: read {n + 1}/{self.runs}: first load {cold:.3f} s, second {again:.3f} s "
                      f"(mount {r.mounts[-1]:.2f} s) ({load()})", flush=True)
        return attempt(Result(name, label), step)

    def pwrite_case(self, filters: str, points: np.ndarray, label: str, tag: str) -> Pwrite:
        out = Pwrite(label, len(points))
        path, log = self.fresh(f"h5fs-pwrite-{tag}.h5"), self.log(f"pwrite-{tag}")
        log.unlink(missing_ok=True)
        pieces = [v.tobytes() for v in points["value"]]
        offsets = self.data.offsets(points)
        model = sort_rowmajor(points)
        try:
            with mounted(path, self.mnt, self.options, log) as daemon:
                create_sparse(self.data, self.mnt, filters)
                fd = os.open(self.mnt / "S", os.O_WRONLY)
                try:
                    cpu = daemon.cpu()
                    t = time.perf_counter()
                    for piece, offset in zip(pieces, offsets):
                        os.pwrite(fd, piece, offset)
                    f = time.perf_counter()
                    os.fsync(fd)
                    out.seconds = time.perf_counter() - t
                    out.fsync = time.perf_counter() - f
                    out.cpu, out.rss = daemon.cpu() - cpu, daemon.rss()
                finally:
                    os.close(fd)
                _, got = load_points(self.mnt)
                same(got, model, f"pwrite {tag}: S.points.npy")
                spot_check(self.data, self.mnt, model)
            out.umount = daemon.umount
            out.size = path.stat().st_size
            check_file(path)
            print(f"  pwrite {tag}: {out.count:,} pwrites + fsync {out.seconds:.2f} s (fsync {out.fsync:.2f} s), "
                  f"umount {out.umount:.2f} s, file {out.size / MIB:.2f} MiB ({load()})", flush=True)
        except Exception as exc:   # noqa: BLE001 -- reported in the table
            out.error = str(exc) if isinstance(exc, Failed) else f"{type(exc).__name__}: {exc}"
            print(f"  pwrite {tag}: FAILED: {out.error}", flush=True)
        return out


# ------------------------------------------------------------------------------------------------ report


def mib(n: int) -> str:
    return f"{n / MIB:.2f}"


def best(results: list[Result], key: Callable[[Result], float]) -> Result | None:
    done = [r for r in results if r.ok]
    return min(done, key=key) if done else None


def report(h5py_results: list[Result], h5fs_results: list[Result], pwrites: list[Pwrite],
           args: argparse.Namespace, data: Data) -> None:
    small = best(h5py_results, lambda r: r.size)
    fast_write = best(h5py_results, lambda r: r.write)
    fast_read = best(h5py_results, lambda r: r.read)
    per_chunk = data.count / data.grid ** 2
    print(f"\nSparse dataset {data.extent:,} x {data.extent:,} float32, {data.count:,} defined elements (seed 0, "
          f"about {per_chunk:.0f} per chunk), chunks {data.chunk:,} x {data.chunk:,} ({data.grid ** 2:,} chunks), "
          f"libver={args.libver}, mount options {','.join(args.options) or 'defaults'}. Write once per variant "
          f"(h5fs: cp of the points .npy, up to its close; h5py: grouping + dense chunk writes + close, no fsync); "
          f"read: median of {args.runs} runs (h5fs: np.load of S.points.npy, first load after a fresh mount, and a "
          f"second one on it; h5py: every chunk read by a slice, np.nonzero, sorted into the same records); "
          f"every read compared with the model; {os.cpu_count()} cores, {load()} at the end.\n")
    print(table_row("variant", "file MiB", "write s", "h5fs create s", "umount s", "read s (h5fs: first load)",
                    "h5fs second load s", "h5fs mount s", "daemon CPU cp s", "daemon CPU load s",
                    "daemon peak RSS MiB", "size: h5py best / this", "write: h5py best / this",
                    "read: h5py best / this"))
    print(table_row(*["---"] * 14))
    for r in [*h5py_results, *h5fs_results]:
        if not r.ok:
            print(table_row(r.name, f"FAILED: {r.error}", *[""] * 12))
            continue
        ours = r in h5fs_results
        cells = [r.name, mib(r.size), f"{r.write:.3f}", f"{r.create:.3f}" if ours else "",
                 f"{r.umount:.2f}" if ours else "", f"{r.read:.3f}",
                 f"{statistics.median(r.warm_reads):.3f}" if ours else "",
                 f"{statistics.median(r.mounts):.2f}" if ours else "",
                 f"{r.cpu_write:.2f}" if ours else "", f"{statistics.median(r.cpu_read):.2f}" if ours else "",
                 f"{r.rss:.0f}" if ours else ""]
        if ours and small and fast_write and fast_read:
            cells += [f"{small.size / r.size:.2f}x", f"{fast_write.write / r.write:.1f}x",
                      f"{fast_read.read / r.read:.1f}x"]
        else:
            cells += [""] * 3
        print(table_row(*cells))
    if pwrites:
        print(f"\npwrite into the raw view (one 4-byte os.pwrite per element, then fsync; filters "
              f"{args.filters[0]}; no target):\n")
        print(table_row("order", "pwrites", "s (pwrites + fsync)", "of which fsync s", "us / pwrite",
                        f"extrapolated to {data.count:,} s", "umount s", "file MiB", "daemon CPU s",
                        "daemon peak RSS MiB"))
        print(table_row(*["---"] * 10))
        for p in pwrites:
            if p.error:
                print(table_row(p.label, f"{p.count:,}", f"FAILED: {p.error}", *[""] * 7))
                continue
            each = p.seconds / p.count
            print(table_row(p.label, f"{p.count:,}", f"{p.seconds:.2f}", f"{p.fsync:.2f}", f"{each * 1e6:.0f}",
                            f"{each * data.count:.0f}" if p.count != data.count else "(measured)",
                            f"{p.umount:.2f}", mib(p.size), f"{p.cpu:.2f}", f"{p.rss:.0f}"))
    print("\n" + table_row("target", "h5fs variant", "measured", "goal", ""))
    print(table_row(*["---"] * 5))
    if not (small and fast_write and fast_read):
        print(table_row("all", "", "no h5py result to compare with", "", "NOT met"))
        return
    for r in h5fs_results:
        if not r.ok:
            print(table_row("all", r.name, f"FAILED: {r.error}", "", "NOT met"))
            continue
        size, write, read = small.size / r.size, fast_write.write / r.write, fast_read.read / r.read
        print(table_row("file size", r.name, f"{size:.2f}x smaller ({mib(r.size)} MiB vs {small.name} "
                        f"{mib(small.size)} MiB)", f">= {SIZE_TARGET:.0f}x", met(size >= SIZE_TARGET)))
        print(table_row("get all defined elements", r.name, f"{read:.1f}x faster ({r.read:.3f} s vs "
                        f"{fast_read.name} {fast_read.read:.2f} s)", f">= {READ_TARGET:.0f}x",
                        met(read >= READ_TARGET)))
        print(table_row("write them", r.name, f"{write:.1f}x faster ({r.write:.3f} s vs {fast_write.name} "
                        f"{fast_write.write:.2f} s; until durable {r.write + r.umount:.2f} s)",
                        f">= {WRITE_TARGET:.0f}x", met(write >= WRITE_TARGET)))
    print(flush=True)


# ------------------------------------------------------------------------------------------------ main


def run(args: argparse.Namespace) -> None:
    t = time.perf_counter()
    data = build_data(args.dir, args.extent, args.points, args.chunk)
    print(f"points: {data.source} ({data.count:,} in {data.extent:,} x {data.extent:,}, "
          f"{time.perf_counter() - t:.1f} s)", flush=True)
    bench = Bench(args.dir, data, args.runs, args.libver, args.options)
    bench.mnt.mkdir(exist_ok=True)
    h5fs_results = [bench.h5fs_case(spec, i) for i, spec in enumerate(args.filters)]
    pwrites = []
    if args.pwrite:
        n = data.count if args.pwrite == "all" else min(int(args.pwrite), data.count)
        ordered = chunk_order(data, data.drawn[:n])
        pwrites.append(bench.pwrite_case(args.filters[0], ordered, "chunk by chunk", "ordered"))
    if args.random_pwrites:
        n = min(args.random_pwrites, data.count)
        pwrites.append(bench.pwrite_case(args.filters[0], data.drawn[:n], "as drawn (random)", "random"))
    h5py_results = [bench.h5py_case(shuffle) for shuffle in args.h5py_shuffle]
    report(h5py_results, h5fs_results, pwrites, args, data)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 10,000 x 10,000, 10,000 points, 3 read runs, 1,000 random pwrites")
    ap.add_argument("--extent", type=int, help="rows = columns of the dataset (default 50,000)")
    ap.add_argument("--points", type=int, help="defined elements (default 250,000)")
    ap.add_argument("--chunk", type=int, default=1000, help="chunk rows = columns (default 1,000)")
    ap.add_argument("--runs", type=int, help="read runs (default 3)")
    ap.add_argument("--filters", action="append",
                    help="h5fs create --filters of a sparse variant, repeatable ('none': no filters; default: "
                         + "; ".join(DEFAULT_FILTERS) + ")")
    ap.add_argument("--h5py-shuffle", default="off,on", help="h5py variants: off, on or off,on (default)")
    ap.add_argument("--pwrite", default="all", help="elements pwritten chunk by chunk: all (default), N, or 0")
    ap.add_argument("--random-pwrites", type=int, help="elements pwritten in the order drawn (default 2,000; 0: none)")
    ap.add_argument("--libver", default="latest", choices=("earliest", "latest"), help="the .h5 files' libver")
    ap.add_argument("-o", dest="options", default="", help="extra h5fs mount options (writeback_mb=N, ...)")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "h5fs-bench-sparse")
    args = ap.parse_args()
    quick = {"extent": 10000, "points": 10000, "runs": 3, "random_pwrites": 1000}
    full = {"extent": 50000, "points": 250000, "runs": 3, "random_pwrites": 2000}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.filters = args.filters or list(DEFAULT_FILTERS)
    args.options = [o for o in args.options.split(",") if o]
    try:
        args.h5py_shuffle = [{"off": False, "on": True}[s] for s in args.h5py_shuffle.split(",") if s]
    except KeyError:
        ap.error("--h5py-shuffle: off, on or off,on")
    if args.pwrite != "all" and not args.pwrite.isdigit():
        ap.error("--pwrite: all or a number")
    if args.pwrite == "0":
        args.pwrite = ""
    if args.points > args.extent * args.extent or args.chunk < 1 or args.extent < 1:
        ap.error("--points must fit in --extent squared; --chunk and --extent positive")
    args.dir.mkdir(parents=True, exist_ok=True)
    print(f"h5fs measured: the package in {Path(importlib.util.find_spec('h5fs').origin).parent}; h5py "
          f"{h5py.__version__} (HDF5 {h5py.version.hdf5_version}); {os.cpu_count()} cores", flush=True)
    try:
        run(args)
    finally:
        lazy_unmount(args.dir / "mnt")
    print(f"files kept in {args.dir} (the points file is reused; delete it to rebuild)")


if __name__ == "__main__":
    main()
