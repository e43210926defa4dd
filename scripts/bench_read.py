"""Read benchmarks, each against h5py (and libhdf5's tools) on the same data in the same run.

    python3 scripts/bench_read.py [--size-mib 1024] [--repeat 3] [--cases all|NAME,...] [--no-verify]
                                  [--no-prefault] [--dir /tmp/h5fs-bench]
    python3 scripts/bench_read.py --objects [--runs 3] [--objects-only-small]

Default: the datasets of issue 10, each `--size-mib` MiB of float32 (default 1024; issue 10
quotes 256: `--size-mib 256`), the same random walk (seed 0, rounded to 0.01) in every case of
one shape:

| case | dataset | target (issue 10) |
| --- | --- | --- |
| contiguous | contiguous, 4096 columns | >= 0.9x pass-through |
| chunked | chunks 64 x 4096 (whole rows: 1 MiB), 4096 columns | >= 0.8x pass-through |
| gzip4+shuffle | the same, gzip 4 + shuffle | |
| tiled | chunks 256 x 256, 1024 columns | >= 0.8x pass-through |
| tiled-gzip4+shuffle | the same, gzip 4 + shuffle | >= 2.0x h5py |
| tiled3d | 3-D (n, 512, 512), chunks 64 x 64 x 64 | >= 0.8x pass-through |
| tiled3d-gzip4+shuffle | the same, gzip 4 + shuffle | >= 2.0x h5py |
| small-chunks | chunks 64 x 64 (16 KiB), 1024 columns | >= 0.8x h5py |
| virtual | 4 contiguous sources, each in its own file, as 4 row blocks; 1024 columns | >= 0.5x h5py |

and for all: the h5fs daemon's peak RSS below 300 MB.

Each run, per case: h5py reading the dataset into memory (a fresh process); the first `cat` of a
plain file holding the same bytes as the dataset's raw view (written once from h5py's data,
--dir/raw-<size>m/) through scripts/passthrough_fs.py (a minimal pyfuse3 + trio filesystem
reading with os.pread, mounted afresh, the same 4 MiB read-ahead as h5fs): the pass-through
limit; then the first `cat` of the raw view `data` on a fresh `h5fs mount -o ro`, and the
daemon's peak RSS. On the first run h5fs's bytes are compared with the raw file too (from the
page cache, after the timed read; --no-verify skips it). Before each timed measurement the
script touches and frees the memory it will allocate (the dataset's size + 512 MiB): this VM
hands memory free for ~2 s back to the host, and faulting it in again (~1.5 s/GiB) would
otherwise swamp a 0.3-0.5 s read (--no-prefault to see it). Prints each run, then a markdown table
of medians (MiB/s, h5fs / pass-through, h5fs / h5py, the target met or not). The .h5 and raw
files are read once before timing (the page cache holds them) so every side measures decoding
and serving, not the disk. A case that fails is reported in the table; the others go on.

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
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from math import lcm, prod
from pathlib import Path

import h5py
import numpy as np

MIB = 1 << 20
BLOCK_ROWS = 256              # the data is generated 256 rows at a time (as the first version of this script did)
CAT_TIMEOUT = 1800.0          # one full read, seconds
PASSTHROUGH = Path(__file__).with_name("passthrough_fs.py")
GZIP4_SHUFFLE = (("compression", "gzip"), ("compression_opts", 4), ("shuffle", True))
VIRTUAL_SOURCES = 4


@dataclass(frozen=True)
class Case:
    name: str
    label: str                                  # what the table says the dataset is
    data: str                                   # which data (and shape, at --size-mib): see shape_of
    chunks: tuple[int, ...] | None = None       # None: contiguous
    filters: tuple = ()                         # create_dataset keywords, as (name, value) pairs
    virtual: bool = False                       # VIRTUAL_SOURCES row blocks, each a contiguous dataset in its own file
    target: tuple[str, float] | None = None     # issue 10: h5fs at least this times "pass-through" or "h5py"


CASES = [
    Case("contiguous", "contiguous, 4096 columns", "rows4096", target=("pass-through", 0.9)),
    Case("chunked", "chunks 64 x 4096 (rows), 4096 columns", "rows4096", (64, 4096), target=("pass-through", 0.8)),
    Case("gzip4+shuffle", "chunks 64 x 4096 (rows), gzip 4 + shuffle", "rows4096", (64, 4096), GZIP4_SHUFFLE),
    Case("tiled", "chunks 256 x 256, 1024 columns", "cols1024", (256, 256), target=("pass-through", 0.8)),
    Case("tiled-gzip4+shuffle", "chunks 256 x 256, gzip 4 + shuffle", "cols1024", (256, 256), GZIP4_SHUFFLE,
         target=("h5py", 2.0)),
    Case("tiled3d", "3-D (n, 512, 512), chunks 64 x 64 x 64", "cube512", (64, 64, 64), target=("pass-through", 0.8)),
    Case("tiled3d-gzip4+shuffle", "3-D, chunks 64 x 64 x 64, gzip 4 + shuffle", "cube512", (64, 64, 64),
         GZIP4_SHUFFLE, target=("h5py", 2.0)),
    Case("small-chunks", "chunks 64 x 64 (16 KiB), 1024 columns", "cols1024", (64, 64), target=("h5py", 0.8)),
    Case("virtual", f"virtual, {VIRTUAL_SOURCES} row blocks (contiguous sources, own files), 1024 columns", "cols1024",
         virtual=True, target=("h5py", 0.5)),
]
CASE_NAMES = [c.name for c in CASES]


def shape_of(data: str, mib: int) -> tuple[int, ...]:
    """`mib` MiB of float32: rows of 4096 or 1024 columns, or planes of 512 x 512."""
    n = mib * MIB // 4
    return {"rows4096": (n // 4096, 4096), "cols1024": (n // 1024, 1024), "cube512": (n // 512 ** 2, 512, 512)}[data]


def walk_rows(rows: int, cols: int):
    """The data, BLOCK_ROWS rows at a time: a random walk down each column (seed 0), rounded to
    instrument resolution so it compresses like real data. Any consumer sees the same rows."""
    rng = np.random.default_rng(0)
    level = np.zeros(cols, "f4")
    for r in range(0, rows, BLOCK_ROWS):
        block = np.cumsum(rng.normal(0, 0.01, (min(BLOCK_ROWS, rows - r), cols)).astype("f4"), axis=0) + level
        level = block[-1]
        yield np.round(block, 2)


def fill(targets: list, shape: tuple[int, ...], chunk0: int) -> None:
    """Write the walk over `shape` (rows of shape[-1] elements, row-major) into `targets`: datasets
    holding consecutive blocks along axis 0. Writes cover whole chunks along axis 0 (a partial
    chunk write makes libhdf5 read the chunk back and encode it again)."""
    plane = prod(shape[1:-1])
    unit = lcm(BLOCK_ROWS, chunk0 * plane)
    spans, pos = [], 0
    for d in targets:
        spans.append((d, pos, pos + d.shape[0]))
        pos += d.shape[0]
    written, buf = 0, []

    def flush() -> None:
        nonlocal written, buf
        arr = np.concatenate(buf).reshape(-1, *shape[1:])
        for d, lo, hi in spans:
            a, b = max(lo, written), min(hi, written + len(arr))
            if a < b:
                d[a - lo:b - lo] = arr[a - written:b - written]
        written, buf = written + len(arr), []

    for block in walk_rows(prod(shape[:-1]), shape[-1]):
        buf.append(block)
        if sum(len(b) for b in buf) >= unit:
            flush()
    if buf:
        flush()


def case_chunks(case: Case, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The case's chunk shape, cut to the dataset's shape (a small --size-mib)."""
    return None if case.chunks is None else tuple(min(c, n) for c, n in zip(case.chunks, shape))


def h5_path(workdir: Path, case: Case, mib: int) -> Path:
    return workdir / f"{case.name}-{mib}m.h5"


def source_paths(workdir: Path, mib: int) -> list[Path]:
    return [workdir / f"virtual-{mib}m-source{i}.h5" for i in range(VIRTUAL_SOURCES)]


def raw_path(workdir: Path, case: Case, mib: int) -> Path:
    """The plain file the pass-through serves: shared by the cases holding the same data."""
    return workdir / f"raw-{mib}m" / f"{case.data}.raw"


def build(case: Case, workdir: Path, mib: int) -> None:
    path = h5_path(workdir, case, mib)
    shape = shape_of(case.data, mib)
    part = path.with_suffix(".part")
    if case.virtual:
        rows = shape[0] // VIRTUAL_SOURCES
        sources = source_paths(workdir, mib)
        files = [h5py.File(p.with_suffix(".part"), "w") for p in sources]
        try:
            fill([f.create_dataset("data", shape=(rows,) + shape[1:], dtype="<f4") for f in files], shape, 1)
        finally:
            for f in files:
                f.close()
        layout = h5py.VirtualLayout(shape=shape, dtype="<f4")
        for i, p in enumerate(sources):
            p.with_suffix(".part").rename(p)
            # a relative name: found in the virtual dataset's directory (libhdf5 and h5fs alike)
            layout[i * rows:(i + 1) * rows] = h5py.VirtualSource(p.name, "data", shape=(rows,) + shape[1:])
        with h5py.File(part, "w") as f:
            f.create_virtual_dataset("data", layout)
    else:
        with h5py.File(part, "w") as f:
            chunks = case_chunks(case, shape)
            d = f.create_dataset("data", shape=shape, dtype="<f4", chunks=chunks, **dict(case.filters))
            fill([d], shape, chunks[0] if chunks else 1)
    part.rename(path)   # an interrupted build leaves no file that looks finished


def h5py_slabs(path: Path):
    """The dataset as h5py reads it, ~64 MiB along axis 0 at a time, as raw bytes."""
    with h5py.File(path, "r") as f:
        d = f["data"]
        step = max(1, 64 * MIB // (d.dtype.itemsize * prod(d.shape[1:])))
        for i in range(0, d.shape[0], step):
            yield np.ascontiguousarray(d[i:i + step]).tobytes()


def write_raw(path: Path, raw: Path) -> None:
    """The dataset's raw view (its element bytes, row-major, as stored: '<f4') from h5py's data."""
    raw.parent.mkdir(exist_ok=True)
    part = raw.with_suffix(".part")
    with open(part, "wb") as out:
        for piece in h5py_slabs(path):
            out.write(piece)
    part.rename(raw)


def first_difference(pieces, raw: Path) -> str | None:
    """None when the byte pieces equal the file `raw`, else where they first differ."""
    pos = 0
    with open(raw, "rb") as fh:
        for piece in pieces:
            want = fh.read(len(piece))
            if piece != want:
                n = min(len(piece), len(want))
                i = next((k for k in range(0, n, 4096) if piece[k:k + 4096] != want[k:k + 4096]), n)
                return f"differs from {raw.name} in bytes {pos + i}..{pos + i + 4095}"
            pos += len(piece)
        if fh.read(1):
            return f"ends at byte {pos}, {raw.name} goes on"
    return None


def file_pieces(path: Path, size: int = 16 * MIB):
    with open(path, "rb") as fh:
        while piece := fh.read(size):
            yield piece


def prepare(case: Case, workdir: Path, mib: int) -> list[Path]:
    """Build the case's files unless --dir holds them; return every file a measurement reads."""
    path, raw = h5_path(workdir, case, mib), raw_path(workdir, case, mib)
    built = not path.exists()
    if built:
        t = time.perf_counter()
        build(case, workdir, mib)
        print(f"  built {path.name} in {time.perf_counter() - t:.1f} s", flush=True)
    if not raw.exists():
        write_raw(path, raw)
    elif built:  # another case's data: the same bytes, or the comparison means nothing
        problem = first_difference(h5py_slabs(path), raw)
        if problem:
            raise RuntimeError(f"{path.name} as h5py reads it {problem}")
    return [path, raw] + (source_paths(workdir, mib) if case.virtual else [])


def warm(path: Path) -> None:
    """Put `path` in the page cache the same way for every file: dropped from it first, then read
    whole in 16 MiB pieces. How a file was written decides the size of its page-cache folios
    (h5py's small writes leave 4 KiB pages, one large write leaves large folios), and reading
    from 4 KiB pages took twice as long here (134 against 70 us per MiB): without the drop the
    pass-through, serving a file written in one piece, would be measured against an .h5 file
    at a handicap no FUSE daemon can change. Read back from the disk, both get the folios the
    kernel's read-ahead makes."""
    with open(path, "rb") as fh:
        os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
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


def readahead_kb(mnt: Path) -> str:
    """The mount's bdi read-ahead, as the kernel has it."""
    device = None
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            f = line.split()
            if f[4] == str(mnt):
                device = f[2]
    try:
        with open(f"/sys/class/bdi/{device}/read_ahead_kb") as fh:
            return fh.read().strip()
    except OSError:
        return "?"


def time_cat(path: Path) -> float:
    """The first full read: `cat FILE > /dev/null` (st_blksize 1 MiB: cat reads 1 MiB at a time)."""
    t = time.perf_counter()
    proc = subprocess.Popen(["cat", str(path)], stdout=subprocess.DEVNULL)
    # a blocking wait: Popen.wait(timeout) polls every 50 ms, a 10% error on a 0.4 s read
    watchdog = threading.Timer(CAT_TIMEOUT, proc.kill)
    watchdog.start()
    try:
        status = proc.wait()
    finally:
        watchdog.cancel()
    elapsed = time.perf_counter() - t
    if status:
        raise RuntimeError(f"cat {path}: exit {status}" + (f" (killed after {CAT_TIMEOUT:.0f} s)" if status < 0 else ""))
    return elapsed


@dataclass
class Read:
    seconds: float
    readahead: str
    rss: float = float("nan")        # h5fs: the daemon's peak RSS, MiB
    check: str | None = None         # h5fs, first run: None (same bytes as the raw file) or the difference


def time_h5fs(path: Path, mnt: Path, raw: Path | None) -> Read:
    """The first `cat` of the raw view after a fresh mount; the daemon's peak RSS; with `raw`, then
    the view compared with the raw file (from the page cache: h5fs keeps it on read-only mounts)."""
    try:
        subprocess.run(["h5fs", "mount", "-o", "ro", str(path), str(mnt)], check=True, timeout=120)
        pid = daemon_pid(mnt)
        r = Read(0.0, readahead_kb(mnt))
        r.seconds = time_cat(mnt / "data")
        r.rss = peak_rss_mib(pid)
        if raw is not None:
            r.check = first_difference(file_pieces(mnt / "data"), raw)
        return r
    finally:
        unmount(["h5fs", "umount", str(mnt)], mnt)


def time_passthrough(raw: Path, mnt: Path, log: Path) -> Read:
    """The first `cat` of the raw file through scripts/passthrough_fs.py, freshly mounted."""
    with serving(PASSTHROUGH, [raw.parent], mnt, log, "a"):
        ra = readahead_kb(mnt)
        return Read(time_cat(mnt / raw.name), ra)


class NotServing(RuntimeError):
    """A minimal filesystem did not mount."""


@contextmanager
def serving(script: Path, args: list, mnt: Path, log: Path, mode: str = "w") -> Iterator[subprocess.Popen]:
    """One of the minimal filesystems (`script ARGS... MNT`) serving `mnt` once it said "ready"
    (its stderr to `log`); unmounted and ended whatever happens."""
    with open(log, mode) as err:
        proc = subprocess.Popen([sys.executable, str(script), *map(str, args), str(mnt)], stdout=subprocess.PIPE,
                                stderr=err, text=True)
    ready = False
    try:
        ready = proc.stdout.readline().strip() == "ready"
        if not ready:   # it said why on stderr
            raise NotServing(f"{script.name} did not mount: {log.read_text(errors='replace')[-500:]}")
        yield proc
    finally:
        if ready:
            unmount(["fusermount3", "-u", str(mnt)], mnt)
        try:
            proc.wait(timeout=60 if ready else 5)
        except subprocess.TimeoutExpired:   # still building its tree, or hung
            proc.kill()
            proc.wait()
        proc.stdout.close()
        if is_mounted(mnt):                 # killed between mounting and saying so
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)])


@dataclass
class CaseResult:
    case: Case
    mib: float
    h5py: list[float] = field(default_factory=list)
    passthrough: list[Read] = field(default_factory=list)
    h5fs: list[Read] = field(default_factory=list)
    error: str | None = None

    def rate(self, seconds: list[float]) -> float | None:
        return self.mib / statistics.median(seconds) if seconds else None

    @property
    def rates(self) -> tuple[float | None, float | None, float | None]:
        return (self.rate(self.h5py), self.rate([r.seconds for r in self.passthrough]),
                self.rate([r.seconds for r in self.h5fs]))

    @property
    def rss(self) -> float | None:
        return max((r.rss for r in self.h5fs), default=None)

    @property
    def check(self) -> str | None:
        return next((r.check for r in self.h5fs if r.check), None)

    def verdict(self) -> tuple[str, str]:
        if self.case.target is None:
            return "", ""
        base, minimum = self.case.target
        h5py_rate, pt_rate, ours = self.rates
        against = pt_rate if base == "pass-through" else h5py_rate
        target = f">= {minimum:g}x {base}"
        if ours is None or against is None:
            return target, "not measured"
        return target, "met" if ours / against >= minimum else "NOT met"


def prefault(nbytes: int) -> None:
    """Touch `nbytes` of memory and free it at once. A virtual machine whose balloon reports free
    pages to the host (virtio-balloon free page reporting, as on these machines) hands memory
    freed for ~2 s back to the host, and touching it again costs ~1.5 s per GiB (measured: h5py
    reading 1 GiB contiguous in 0.3 s right after another read, 1.3-1.9 s after a 5-10 s pause).
    That cost would land on whichever side allocates first (h5py's array, the page cache of the
    file read through FUSE, the daemon's chunk cache): touched just before a measurement, the
    memory it allocates is backed again."""
    try:
        with open("/proc/meminfo") as fh:
            avail = next(int(line.split()[1]) << 10 for line in fh if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        avail = nbytes * 2
    block = np.empty(min(nbytes, avail // 2), np.uint8)
    block.fill(1)
    del block


def measure_case(case: Case, workdir: Path, mib: int, repeat: int, verify: bool, touch: bool) -> CaseResult:
    paths = prepare(case, workdir, mib)
    path, raw = paths[0], paths[1]
    for p in paths:
        warm(p)
    res = CaseResult(case, raw.stat().st_size / MIB)
    # what one measurement allocates: the dataset (h5py's array, or the page cache of the file read
    # through FUSE) and the daemon's caches
    touch_bytes = raw.stat().st_size + 512 * MIB if touch else 0
    for run in range(repeat):
        prefault(touch_bytes)
        res.h5py.append(time_h5py(path))
        prefault(touch_bytes)
        res.passthrough.append(time_passthrough(raw, workdir / "mnt-passthrough", workdir / "passthrough.log"))
        prefault(touch_bytes)
        res.h5fs.append(time_h5fs(path, workdir / "mnt", raw if verify and run == 0 else None))
        pt, ours = res.passthrough[-1], res.h5fs[-1]
        print(f"  {case.name} run {run + 1}/{repeat}: h5py {res.h5py[-1]:.3f} s, pass-through {pt.seconds:.3f} s "
              f"(read_ahead_kb {pt.readahead}), h5fs {ours.seconds:.3f} s (read_ahead_kb {ours.readahead}, "
              f"peak RSS {ours.rss:.0f} MiB){'' if ours.check is None else ', h5fs ' + ours.check} "
              f"(load {os.getloadavg()[0]:.1f})", flush=True)
    return res


def fmt(x: float | None, spec: str = ".0f") -> str:
    return "" if x is None else format(x, spec)


def report_datasets(results: list[CaseResult], repeat: int) -> None:
    print(f"\nFirst full read (`cat`) of the raw view after a fresh mount, medians of {repeat} runs, MiB/s; "
          "h5py reads the dataset into memory; the pass-through serves a plain file holding the same bytes "
          "(scripts/passthrough_fs.py); all files in the page cache.\n")
    print(table_row("case", "dataset", "MiB", "h5py MiB/s", "pass-through MiB/s", "h5fs MiB/s", "h5fs / pass-through",
                    "h5fs / h5py", "target (issue 10)", "", "h5fs peak RSS MiB"))
    print(table_row(*["---"] * 11))
    for r in results:
        if r.error:
            print(table_row(r.case.name, r.case.label, "", "", "", "", "", "", *r.verdict()[:1], f"failed: {r.error}",
                            ""))
            continue
        h5py_rate, pt_rate, ours = r.rates
        target, met = r.verdict()
        if r.check:
            met += f"; h5fs bytes WRONG: {r.check}"
        print(table_row(r.case.name, r.case.label, f"{r.mib:.0f}", fmt(h5py_rate), fmt(pt_rate), fmt(ours),
                        fmt(ours / pt_rate if ours and pt_rate else None, ".2f"),
                        fmt(ours / h5py_rate if ours and h5py_rate else None, ".2f"), target, met, fmt(r.rss)))
    measured = [r for r in results if r.rss is not None]
    if measured:
        worst = max(measured, key=lambda r: r.rss)
        ok = "met" if worst.rss < RSS_TARGET_MIB else "NOT met"
        print(f"\nh5fs daemon peak RSS: at most {worst.rss:.0f} MiB ({worst.case.name}); target < 300 MB "
              f"= {RSS_TARGET_MIB:.0f} MiB: {ok}")
    ras = {f"h5fs {r.readahead}" for res in results for r in res.h5fs}
    ras |= {f"pass-through {r.readahead}" for res in results for r in res.passthrough}
    print(f"read_ahead_kb seen on the mounts: {', '.join(sorted(ras))}")
    wrong = [r.case.name for r in results if r.check]
    if wrong:
        print(f"h5fs served wrong bytes for: {', '.join(wrong)}")


def bench_datasets(workdir: Path, mib: int, repeat: int, names: list[str], verify: bool, touch: bool) -> None:
    print(f"h5fs measured: the package in {Path(importlib.util.find_spec('h5fs').origin).parent}; "
          f"h5py {h5py.__version__} (HDF5 {h5py.version.hdf5_version}); {mib} MiB per dataset, {repeat} runs",
          flush=True)
    (workdir / "mnt").mkdir(exist_ok=True)
    (workdir / "mnt-passthrough").mkdir(exist_ok=True)
    results = []
    for case in CASES:
        if case.name not in names:
            continue
        shape = shape_of(case.data, mib)
        chunks = case_chunks(case, shape)
        cut = f" (chunks cut to {chunks})" if chunks != case.chunks else ""
        print(f"{case.name}: {case.label}, shape {shape}{cut}", flush=True)
        try:
            results.append(measure_case(case, workdir, mib, repeat, verify, touch))
        except Exception as exc:  # noqa: BLE001 - report it, go on with the other cases
            print(f"  {case.name} failed: {exc}", flush=True)
            results.append(CaseResult(case, mib, error=str(exc).splitlines()[0][:200] if str(exc) else repr(exc)))
    report_datasets(results, repeat)


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
    with serving(FLOOR, [path], mnt, log) as proc:
        os.stat(mnt)   # answers once the floor serves
        return walk(mnt, proc.pid, "user.floor.requests", time.perf_counter() - t)


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


def parse_cases(text: str) -> list[str]:
    names = CASE_NAMES if text == "all" else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASE_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown case(s) {', '.join(unknown) or '(none)'}; "
                                         f"cases: {', '.join(CASE_NAMES)}, or all")
    return names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=1024, help="MiB of float32 per dataset (default %(default)s)")
    ap.add_argument("--repeat", "--runs", dest="repeat", type=int, default=3, help="runs per measurement")
    ap.add_argument("--cases", type=parse_cases, default=CASE_NAMES,
                    help=f"comma-separated, in any order (run in table order), or all (default): {', '.join(CASE_NAMES)}")
    ap.add_argument("--no-verify", dest="verify", action="store_false",
                    help="skip comparing h5fs's bytes with the raw file (first run of each case)")
    ap.add_argument("--no-prefault", dest="prefault", action="store_false",
                    help="do not touch (and free) memory before each measurement (see prefault())")
    ap.add_argument("--objects", action="store_true",
                    help="time the metadata walk over many small objects instead of the datasets")
    ap.add_argument("--objects-only-small", action="store_true", help="with --objects: skip the 100,000-object file")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "h5fs-bench")
    args = ap.parse_args()
    if args.size_mib < 1:
        ap.error("--size-mib must be at least 1")
    args.dir = args.dir.resolve()
    args.dir.mkdir(parents=True, exist_ok=True)
    if args.objects:
        bench_objects(args.dir, args.repeat, args.objects_only_small)
    else:
        bench_datasets(args.dir, args.size_mib, args.repeat, args.cases, args.verify, args.prefault)
    print(f"\nfiles kept in {args.dir} (delete to rebuild); {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
