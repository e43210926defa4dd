"""Write benchmarks through a read-write mount, each against h5py writing the same data into an
identical fresh file in the same run (issue 7).

    python3 scripts/bench_write.py [--size-mib 1024] [--runs 3] [--pwrites 10000] [--space-rounds 10]
                                   [--cases gzip,chunked,contiguous,pwrite,space] [--libver earliest]
                                   [-o MOUNT_OPTIONS] [--space-remount] [--dir /tmp/h5fs-bench-write]
    python3 scripts/bench_write.py --quick    # 64 MiB, 1 run, 1,000 pwrites, 3 space rounds

The data: float32 rows of 4,096, smooth and rounded to instrument resolution (cumulative sums of
small steps rounded to 2 decimals, as bench_read.py builds), written once to a plain file in --dir
and kept in the page cache. Every .h5 file starts as a copy of an empty template h5py made
(dataset "data", nothing allocated: libhdf5's default incremental allocation for chunks, late for
contiguous storage). Cases:

- gzip, chunked, contiguous: `dd bs=1M conv=notrunc,fsync` of the data into the mount's raw view
  (gzip-4 + shuffle with 1 MiB chunks, uncompressed 1 MiB chunks, contiguous: every write covers
  whole chunks), against an h5py process that reads the same file in 1 MiB pieces, writes each
  with a slice assignment and closes the file (the time includes the close but no fsync: h5py's
  data is then in the page cache only, the more favourable side; an fsync of its file is timed
  after it). `h5fs umount` is timed apart; "until durable" is dd + umount, compared with h5py's
  close + fsync. Targets (h5fs / h5py throughput, dd against h5py up to its close): gzip >= 3.0x,
  the other two >= 0.5x.
- pwrite: random 4 KiB `os.pwrite`s (aligned, distinct positions, fixed seed; new values: the
  data there + 1) then one `fsync`, against h5py doing the same slice writes (1,024 float32 at the
  same element offsets) then closing. Both start from copies of the gzip file h5py filled in the
  same run. Target >= 5x.
- space: every chunk of a fresh gzip file written `--space-rounds` times with `dd` (round r
  writes the data + 0.01 r, so every chunk changes), on ONE mount (fsync after each round, the file
  size read then), or unmounting after each round with --space-remount. Target: size after the
  last round <= 1.3x the size after round 1.
- daemon peak RSS (VmHWM) while the data streams into the gzip dataset: target < 300 MB.

Every h5fs result is read back with h5py and compared with what was written (once per case).
A case that fails (ENOTSUP/EIO from the mount, a daemon that dies, data that differs) is reported
as failed and the others go on; every mount is unmounted even on failure. Prints medians of
--runs, the daemon's CPU time during the writes, and a markdown table with the targets.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
from bench_read import (
    cpu_seconds,
    daemon_pid,
    is_mounted,
    peak_rss_mib,
    table_row,
    warm,
)

WIDTH = 4096                 # float32 per row: 16 KiB
CHUNK = (64, WIDTH)          # 1 MiB chunks
MIB = 1 << 20
GB = 1e9
TIMEOUT = 3600.0             # s for any one dd / h5py / umount step
RSS_TARGET_MB = 300
SPACE_TARGET = 1.3
PWRITE_TARGET = 5.0
PWRITE = 4096                # bytes per pwrite (1,024 float32)


@dataclass(frozen=True)
class Layout:
    label: str
    options: dict
    target: float            # least h5fs / h5py throughput ratio


LAYOUTS = {
    "gzip": Layout("gzip-4 + shuffle, 1 MiB chunks",
                   {"chunks": CHUNK, "compression": "gzip", "compression_opts": 4, "shuffle": True}, 3.0),
    "chunked": Layout("uncompressed, 1 MiB chunks", {"chunks": CHUNK}, 0.5),
    "contiguous": Layout("contiguous", {}, 0.5),
}
CASES = (*LAYOUTS, "pwrite", "space")

# The h5py scripts print the seconds up to the file's close, then the seconds its fsync took.
DURABLE = """
closed = time.perf_counter() - t
fd = os.open(sys.argv[1], os.O_RDONLY)
os.fsync(fd)
print(closed, time.perf_counter() - t - closed)
"""
H5PY_STREAM = """import h5py, numpy as np, os, sys, time
t = time.perf_counter()
with open(sys.argv[2], "rb") as src, h5py.File(sys.argv[1], "r+") as f:
    d, row = f["data"], 0
    while piece := src.read(1 << 20):
        block = np.frombuffer(piece, "<f4").reshape(-1, d.shape[1])
        d[row:row + len(block)] = block
        row += len(block)
""" + DURABLE
H5PY_PWRITE = """import h5py, numpy as np, os, sys, time
plan = np.load(sys.argv[2])
elements, values = plan["elements"].tolist(), plan["values"]
t = time.perf_counter()
with h5py.File(sys.argv[1], "r+") as f:
    d = f["data"]
    for e, v in zip(elements, values):
        row, col = divmod(e, d.shape[1])
        d[row, col:col + len(v)] = v
""" + DURABLE
VERIFY = """import h5py, numpy as np, sys
def data(path):
    return h5py.File(path, "r")["data"] if path.endswith(".h5") else np.memmap(path, "<f4", "r").reshape(-1, int(sys.argv[3]))
a, b = data(sys.argv[1]), data(sys.argv[2])
if a.shape != b.shape:
    sys.exit(f"shape {a.shape}, expected {b.shape}")
for row in range(0, a.shape[0], 1024):
    if not np.array_equal(a[row:row + 1024], b[row:row + 1024]):
        sys.exit(f"rows {row}..{row + 1023} differ")
"""


class Failed(Exception):
    """A step of a case failed: the message says which and why."""


def last_lines(text: str, n: int = 2) -> str:
    return " / ".join(line for line in text.strip().splitlines()[-n:]) or "no message"


def h5py_times(code: str, *args: Path) -> tuple[float, float]:
    """(seconds up to the close, seconds of the fsync after it) of an h5py script."""
    closed, fsync = python(code, *args).split()
    return float(closed), float(fsync)


def python(code: str, *args: Path | int) -> str:
    """Run `code` in a fresh interpreter; its stdout, or Failed with its error."""
    done = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)
    if done.returncode:
        raise Failed(last_lines(done.stderr))
    return done.stdout


# ------------------------------------------------------------------------------------------------ files


def build_source(path: Path, mib: int) -> None:
    """The data, deterministically: per column a random walk of 0.01-sized steps, rounded to 2 decimals."""
    if path.exists() and path.stat().st_size == mib * MIB:
        return
    part = path.with_suffix(".part")
    rng = np.random.default_rng(0)
    start = np.zeros(WIDTH, "f4")
    with open(part, "wb") as out:
        for _ in range(mib // 16):            # 16 MiB = 1,024 rows at a time
            walk = start + np.cumsum(rng.normal(0, 0.01, (1024, WIDTH)).astype("f4"), axis=0)
            start = walk[-1]
            out.write(np.round(walk, 2).astype("<f4").tobytes())
    part.rename(path)   # an interrupted build leaves no file that looks finished


def build_template(path: Path, mib: int, layout: Layout, libver: str) -> None:
    if path.exists():
        return
    part = path.with_suffix(".part")
    with h5py.File(part, "w", libver=libver) as f:
        f.create_dataset("data", shape=(mib * MIB // 4 // WIDTH, WIDTH), dtype="<f4", track_times=False,
                         **layout.options)
    part.rename(path)


def shifted_source(source: Path, out: Path, delta: float) -> None:
    """`source` + delta at the same resolution, written to `out` (64 MiB at a time)."""
    data = np.memmap(source, "<f4", "r")
    step = 64 * MIB // 4
    with open(out, "wb") as fh:
        fh.writelines(np.round(data[i:i + step] + np.float32(delta), 2).astype("<f4").tobytes()
                      for i in range(0, len(data), step))


def pwrite_plan(source: Path, path: Path, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct aligned 4 KiB places (seed 1) and their new values; saved to `path` for h5py."""
    data = np.memmap(source, "<f4", "r")
    per = PWRITE // 4
    blocks = np.random.default_rng(1).choice(len(data) // per, count, replace=False)
    elements = blocks * per
    values = np.round(data[elements[:, None] + np.arange(per)] + np.float32(1), 2).astype("<f4")
    np.savez(path, elements=elements, values=values)
    return elements, values


def verify(written: Path, expected: Path) -> None:
    """h5py reads `written` back: its data must equal `expected` (an .h5 file or raw float32)."""
    try:
        python(VERIFY, written, expected, WIDTH)
    except Failed as exc:
        raise Failed(f"h5py reads other data than was written: {exc}") from None


# ------------------------------------------------------------------------------------------------ mounts


@dataclass
class Daemon:
    mnt: Path
    pid: int = 0
    umount: float = float("nan")     # s that `h5fs umount` took

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def rss(self) -> float:
        return peak_rss_mib(self.pid)


LOG_RECORD = re.compile(r".* (?:ERROR|WARNING) (.*)")
LOG_EXCEPTION = re.compile(r"\w+(?:Error|Exception)\b.*")


def log_reason(log: Path) -> str:
    """The daemon log's first error or warning (the root cause: later ones tend to follow from
    it), with the exception ending its traceback."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return f"no log at {log}"
    found = [m for line in lines if (m := LOG_RECORD.fullmatch(line) or LOG_EXCEPTION.fullmatch(line))]
    if not found:
        return f"nothing in {log}"
    reason = found[0][found[0].lastindex or 0]
    if len(found) > 1 and found[1].re is LOG_EXCEPTION:
        reason += f": {found[1][0]}"
    return f"{reason} ({log})"


def lazy_unmount(mnt: Path) -> None:
    if is_mounted(mnt):
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False)


@contextmanager
def mounted(path: Path, mnt: Path, options: list[str], log: Path) -> Iterator[Daemon]:
    """A read-write mount of `path`; unmounted (timed into `.umount`) whatever happens."""
    daemon = Daemon(mnt)
    try:
        done = subprocess.run(["h5fs", "mount", "-o", ",".join([f"log={log}", *options]), str(path), str(mnt)],
                              capture_output=True, text=True, timeout=120, check=False)
        if done.returncode:
            raise Failed(f"h5fs mount: {last_lines(done.stderr)}")
    except BaseException:
        lazy_unmount(mnt)
        raise
    error = None
    try:
        daemon.pid = daemon_pid(mnt)
        yield daemon
    except (OSError, Failed) as exc:
        raise Failed(f"{exc}; daemon log: {log_reason(log)}") from None
    finally:
        t = time.perf_counter()
        try:
            done = subprocess.run(["h5fs", "umount", str(mnt)], capture_output=True, text=True, timeout=TIMEOUT,
                                  check=False)
            if done.returncode:
                error = f"h5fs umount: exit {done.returncode}: {last_lines(done.stderr)} (see {log})"
        except subprocess.TimeoutExpired:
            error = f"h5fs umount: no exit in {TIMEOUT:.0f} s (see {log})"
        daemon.umount = time.perf_counter() - t
        lazy_unmount(mnt)
    if error:
        raise Failed(error)


def dd(source: Path, target: Path) -> float:
    t = time.perf_counter()
    done = subprocess.run(["dd", f"if={source}", f"of={target}", "bs=1M", "conv=notrunc,fsync", "status=none"],
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)
    elapsed = time.perf_counter() - t
    if done.returncode:
        raise Failed(done.stderr.strip().splitlines()[0] if done.stderr.strip() else f"dd: exit {done.returncode}")
    return elapsed


# ------------------------------------------------------------------------------------------------ cases


@dataclass
class H5fsRun:
    seconds: float   # the writes up to their fsync
    umount: float
    cpu: float       # daemon CPU s during the writes (the umount's flush not included: the daemon is gone)
    rss: float       # daemon peak RSS, MiB


@dataclass
class Case:
    name: str
    label: str
    nbytes: int
    target: float
    h5py: list[float] = field(default_factory=list)        # up to the close
    h5py_fsync: list[float] = field(default_factory=list)  # the fsync after the close
    h5fs: list[H5fsRun] = field(default_factory=list)
    error: str | None = None

    def measured_h5py(self, times: tuple[float, float]) -> None:
        self.h5py.append(times[0])
        self.h5py_fsync.append(times[1])

    def attempt(self, step: Callable[[], H5fsRun]) -> None:
        """One h5fs measurement; a failure is kept (later runs skip the case) and printed."""
        if self.error:
            return
        try:
            self.h5fs.append(step())
        except Exception as exc:   # noqa: BLE001 -- any failure ends this case only
            self.error = str(exc) if isinstance(exc, Failed) else f"{type(exc).__name__}: {exc}"
            print(f"  {self.name}: FAILED: {self.error}", flush=True)

    def median(self, key: Callable[[H5fsRun], float]) -> float:
        return statistics.median(key(r) for r in self.h5fs)


@dataclass
class Bench:
    workdir: Path
    mib: int
    options: list[str]
    libver: str

    @property
    def source(self) -> Path:
        return self.workdir / f"source-{self.mib}MiB.f32"

    @property
    def mnt(self) -> Path:
        return self.workdir / "mnt"

    def log(self, name: str) -> Path:
        return self.workdir / f"h5fs-{name}.log"

    def fresh(self, layout: str, name: str) -> Path:
        """A copy of the empty template for `layout`."""
        template = self.workdir / f"empty-{layout}-{self.mib}MiB-{self.libver}.h5"
        build_template(template, self.mib, LAYOUTS[layout], self.libver)
        return Path(shutil.copyfile(template, self.workdir / name))

    def stream_h5py(self, layout: str) -> tuple[tuple[float, float], Path]:
        path = self.fresh(layout, f"h5py-{layout}.h5")
        warm(self.source)
        return h5py_times(H5PY_STREAM, path, self.source), path

    def stream_h5fs(self, layout: str, check: bool) -> H5fsRun:
        path, log = self.fresh(layout, f"h5fs-{layout}.h5"), self.log(layout)
        with mounted(path, self.mnt, self.options, log) as daemon:
            warm(self.source)
            cpu = daemon.cpu()
            seconds = dd(self.source, self.mnt / "data")
            cpu, rss = daemon.cpu() - cpu, daemon.rss()
        if check:
            verify(path, self.source)
        return H5fsRun(seconds, daemon.umount, cpu, rss)

    def pwrite_h5fs(self, path: Path, elements: np.ndarray, values: np.ndarray) -> H5fsRun:
        pieces = [v.tobytes() for v in values]
        positions = (elements * 4).tolist()
        with mounted(path, self.mnt, self.options, self.log("pwrite")) as daemon:
            fd = os.open(self.mnt / "data", os.O_WRONLY)
            try:
                cpu = daemon.cpu()
                t = time.perf_counter()
                for piece, position in zip(pieces, positions):
                    os.pwrite(fd, piece, position)
                os.fsync(fd)
                seconds = time.perf_counter() - t
                cpu, rss = daemon.cpu() - cpu, daemon.rss()
            finally:
                os.close(fd)
        return H5fsRun(seconds, daemon.umount, cpu, rss)

    def pwrite(self, case: Case, filled: Path, count: int, check: bool) -> None:
        """Both sides from copies of the gzip file h5py filled."""
        plan = self.workdir / "pwrite-plan.npz"
        elements, values = pwrite_plan(self.source, plan, count)
        theirs = Path(shutil.copyfile(filled, self.workdir / "pwrite-h5py.h5"))
        ours = Path(shutil.copyfile(filled, self.workdir / "pwrite-h5fs.h5"))
        warm(theirs)
        case.measured_h5py(h5py_times(H5PY_PWRITE, theirs, plan))

        def step() -> H5fsRun:
            run = self.pwrite_h5fs(ours, elements, values)
            if check:
                verify(ours, theirs)
            return run
        case.attempt(step)


@dataclass
class Space:
    sizes: list[int] = field(default_factory=list)   # .h5 bytes after each round
    seconds: list[float] = field(default_factory=list)
    final: int = 0                                    # after the unmount
    rss: float = 0.0                                  # daemon peak RSS, MiB
    error: str | None = None

    @property
    def ratio(self) -> float:
        return self.sizes[-1] / self.sizes[0]


def space(bench: Bench, rounds: int, remount: bool) -> Space:
    """Every chunk of a fresh gzip file written `rounds` times, each round with other values."""
    out = Space()
    path, log = bench.fresh("gzip", "space-h5fs.h5"), bench.log("space")
    data = bench.workdir / "space-round.f32"

    def one_round(daemon: Daemon, r: int) -> None:
        shifted_source(bench.source, data, 0.01 * r)
        out.seconds.append(dd(data, bench.mnt / "data"))
        out.sizes.append(path.stat().st_size)
        out.rss = max(out.rss, daemon.rss())
        print(f"  space round {r}/{rounds}: {out.seconds[-1]:.2f} s, file {out.sizes[-1] / MIB:.1f} MiB "
              f"({load()})", flush=True)

    try:
        if remount:
            for r in range(1, rounds + 1):
                with mounted(path, bench.mnt, bench.options, log) as daemon:
                    one_round(daemon, r)
        else:
            with mounted(path, bench.mnt, bench.options, log) as daemon:
                for r in range(1, rounds + 1):
                    one_round(daemon, r)
        out.final = path.stat().st_size
        verify(path, data)
    except Exception as exc:   # noqa: BLE001 -- reported in the table
        out.error = str(exc) if isinstance(exc, Failed) else f"{type(exc).__name__}: {exc}"
        print(f"  space: FAILED: {out.error}", flush=True)
    return out


# ------------------------------------------------------------------------------------------------ report


def load() -> str:
    """The 1-minute load average: other work on the machine shows in every figure."""
    return f"load {os.getloadavg()[0]:.1f}"


def met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def gbps(nbytes: int, seconds: float) -> str:
    return f"{nbytes / seconds / GB:.3g}"


def case_row(case: Case) -> str:
    theirs = statistics.median(case.h5py)
    synced = statistics.median(a + b for a, b in zip(case.h5py, case.h5py_fsync))
    cells = [f"{case.name}: {case.label}", f"{theirs:.2f}", f"{synced:.2f}", gbps(case.nbytes, theirs)]
    if not case.h5fs:
        return table_row(*cells, f"FAILED: {case.error}", *[""] * 8)
    ours, umount = case.median(lambda r: r.seconds), case.median(lambda r: r.umount)
    durable = case.median(lambda r: r.seconds + r.umount)
    return table_row(*cells, f"{ours:.2f}", f"{umount:.2f}", gbps(case.nbytes, ours), f"{theirs / ours:.2f}x",
                     gbps(case.nbytes, durable), f"{synced / durable:.2f}x", f"{case.median(lambda r: r.cpu):.2f}",
                     f"{max(r.rss for r in case.h5fs):.0f}", "yes" if not case.error else f"FAILED later: {case.error}")


def target_rows(cases: dict[str, Case], room: Space | None) -> list[str]:
    rows = []
    for case in cases.values():
        goal = f">= {case.target:.1f}x h5py"
        if case.error:
            rows.append(table_row(case.name, "FAILED (above)", goal, "NOT met"))
            continue
        ratio = statistics.median(case.h5py) / case.median(lambda r: r.seconds)
        rows.append(table_row(case.name, f"{ratio:.3f}x h5py", goal, met(ratio >= case.target)))
    if room is not None:
        goal = f"<= {SPACE_TARGET}x after round 1"
        if room.error:
            rows.append(table_row("space", f"FAILED: {room.error}", goal, "NOT met"))
        else:
            rows.append(table_row(
                "space", f"{room.ratio:.3f}x ({room.sizes[0] / MIB:.1f} MiB after round 1, {room.sizes[-1] / MIB:.1f} "
                f"after round {len(room.sizes)}, {room.final / MIB:.1f} after the unmount)", goal,
                met(room.ratio <= SPACE_TARGET)))
    gzip = cases.get("gzip")
    if gzip is not None and gzip.h5fs:
        rss = max(r.rss for r in gzip.h5fs)
        rows.append(table_row("daemon peak RSS (gzip stream)", f"{rss * MIB / 1e6:.0f} MB ({rss:.0f} MiB)",
                              f"< {RSS_TARGET_MB} MB", met(rss * MIB / 1e6 < RSS_TARGET_MB)))
    return rows


def report(cases: dict[str, Case], room: Space | None, args: argparse.Namespace, remount: bool) -> None:
    print(f"\nWrites through the mount (-o {','.join(args.options) or 'defaults'}), {args.size_mib} MiB of float32, "
          f"libver={args.libver}, medians of {args.runs} run(s); h5fs s = dd conv=fsync (pwrite: the pwrites "
          "and the fsync); h5py s includes its close, h5py + fsync adds an fsync of its file; until durable = "
          "h5fs s + umount s, compared with h5py + fsync; daemon CPU during the writes; data read back by h5py; "
          f"{os.cpu_count()} cores, {load()} at the end.\n")
    print(table_row("case", "h5py s", "h5py + fsync s", "h5py GB/s", "h5fs s", "umount s", "h5fs GB/s", "h5fs / h5py",
                    "until durable GB/s", "durable / h5py + fsync", "daemon CPU s", "peak RSS MiB", "data checked"))
    print(table_row(*["---"] * 13))
    for case in cases.values():
        print(case_row(case))
    if room is not None and not room.error:
        rewrite = statistics.median(room.seconds[1:] or room.seconds)
        print(f"\nspace: {len(room.sizes)} rounds on {'a mount each' if remount else 'one mount'}; file after each "
              f"round (MiB): {', '.join(f'{s / MIB:.1f}' for s in room.sizes)}; median rewrite round "
              f"{rewrite:.2f} s ({gbps(args.size_mib * MIB, rewrite)} GB/s); daemon peak RSS {room.rss:.0f} MiB")
    print("\n" + table_row("target", "measured", "goal", ""))
    print(table_row(*["---"] * 4))
    print("\n".join(target_rows(cases, room)), flush=True)


# ------------------------------------------------------------------------------------------------ main


def run(args: argparse.Namespace) -> None:
    bench = Bench(args.dir, args.size_mib, args.options, args.libver)
    bench.mnt.mkdir(exist_ok=True)
    for log in args.dir.glob("h5fs-*.log"):   # the reasons quoted for failures are this run's
        log.unlink()
    build_source(bench.source, args.size_mib)
    nbytes = args.size_mib * MIB
    cases = {name: Case(name, layout.label, nbytes, layout.target)
             for name, layout in LAYOUTS.items() if name in args.cases}
    if "pwrite" in args.cases:
        cases["pwrite"] = Case("pwrite", f"{args.pwrites:,} random 4 KiB pwrite + fsync into gzip",
                               args.pwrites * PWRITE, PWRITE_TARGET)
    for n in range(args.runs):
        check = n == 0
        for name in LAYOUTS:
            if name not in cases and not (name == "gzip" and "pwrite" in cases):
                continue
            times, filled = bench.stream_h5py(name)
            print(f"  run {n + 1}/{args.runs} {name}: h5py {times[0]:.2f} s + fsync {times[1]:.2f} s ({load()})",
                  flush=True)
            if name in cases:
                cases[name].measured_h5py(times)
                cases[name].attempt(functools.partial(bench.stream_h5fs, name, check))
                if cases[name].h5fs and not cases[name].error:
                    r = cases[name].h5fs[-1]
                    print(f"  run {n + 1}/{args.runs} {name}: h5fs dd {r.seconds:.2f} s, umount {r.umount:.2f} s, "
                          f"daemon CPU {r.cpu:.2f} s, peak RSS {r.rss:.0f} MiB ({load()})", flush=True)
            if name == "gzip" and "pwrite" in cases:
                bench.pwrite(cases["pwrite"], filled, args.pwrites, check)
                done = cases["pwrite"]
                print(f"  run {n + 1}/{args.runs} pwrite: h5py {done.h5py[-1]:.2f} s"
                      + ("" if done.error else f", h5fs {done.h5fs[-1].seconds:.2f} s") + f" ({load()})", flush=True)
    room = space(bench, args.space_rounds, args.space_remount) if "space" in args.cases else None
    report(cases, room, args, args.space_remount)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: 64 MiB, 1 run, 1,000 pwrites, 3 space rounds")
    ap.add_argument("--size-mib", type=int, help="data size, a multiple of 16 (default 1024)")
    ap.add_argument("--runs", type=int, help="runs per measurement (default 3)")
    ap.add_argument("--pwrites", type=int, help="random 4 KiB writes (default 10,000)")
    ap.add_argument("--space-rounds", type=int, help="rounds of the space case (default 10)")
    ap.add_argument("--space-remount", action="store_true", help="unmount after every space round")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {','.join(CASES)}")
    ap.add_argument("--libver", default="earliest", choices=("earliest", "latest"), help="the .h5 files' libver")
    ap.add_argument("-o", dest="options", default="", help="extra h5fs mount options (writeback_mb=N,writeback_cache)")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "h5fs-bench-write")
    args = ap.parse_args()
    quick = {"size_mib": 64, "runs": 1, "pwrites": 1000, "space_rounds": 3}
    full = {"size_mib": 1024, "runs": 3, "pwrites": 10000, "space_rounds": 10}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.cases = [c for c in args.cases.split(",") if c]
    args.options = [o for o in args.options.split(",") if o]
    if unknown := set(args.cases) - set(CASES):
        ap.error(f"unknown cases: {', '.join(sorted(unknown))}")
    if args.size_mib % 16:
        ap.error("--size-mib must be a multiple of 16")
    args.dir.mkdir(parents=True, exist_ok=True)
    print(f"h5fs measured: the package in {Path(importlib.util.find_spec('h5fs').origin).parent}; "
          f"{os.cpu_count()} cores", flush=True)
    try:
        run(args)
    finally:
        lazy_unmount(args.dir / "mnt")
    print(f"\nfiles kept in {args.dir} (delete to rebuild)")


if __name__ == "__main__":
    main()
