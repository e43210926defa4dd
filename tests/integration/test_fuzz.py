"""Mutation fuzzing of the engine: small h5py-made files, damaged by byte flips, truncation and
integers spliced into header fields, each walked in-process (tests/walk.py) with a deadline.

Whatever the bytes, opening and walking must end in bounded time with outcomes that are "ok" or
an H5fsError; any other exception is a bug. The default run is deterministic and short (CI);
`H5FS_FUZZ_EXAMPLES=5000` runs that many random examples per seed file, `H5FS_FUZZ_SWEEP=all`
sweeps every byte of every seed. Every crash or hang the
fuzzer finds becomes a file tests/data/fuzz-regress-*.h5, walked by `test_regression`.
"""

from __future__ import annotations

import os
import resource
import signal
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REPO  # noqa: E402
from walk import WalkResult, walk  # noqa: E402

h5py = pytest.importorskip("h5py")

DATA = REPO / "tests" / "data"
EXAMPLES = int(os.environ.get("H5FS_FUZZ_EXAMPLES", "0"))
DEADLINE = float(os.environ.get("H5FS_FUZZ_DEADLINE", "10"))  # seconds per example
SWEEP = os.environ.get("H5FS_FUZZ_SWEEP", "1024")                # bytes swept, or "all"


# ------------------------------------------------------------------------------------- seeds

def _libver(libver: str):
    return (libver, "latest") if libver == "earliest" else libver


def seed_groups(path: Path, libver: str) -> None:
    """Nested groups with attributes, a hard and a soft link, contiguous and compact datasets."""
    with h5py.File(path, "w", libver=_libver(libver)) as f:
        f.attrs["title"] = np.bytes_("seed")
        f.attrs["n"] = np.int32(7)
        g = f.create_group("g")
        g.attrs["vec"] = np.arange(5, dtype="<f8")
        g.create_dataset("d", data=np.arange(24, dtype="<i2").reshape(4, 6))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        space = h5py.h5s.create_simple((6,))
        c = h5py.h5d.create(g.id, b"c", h5py.h5t.STD_U8LE, space, dcpl=dcpl)
        c.write(h5py.h5s.ALL, h5py.h5s.ALL, np.arange(6, dtype="u1"))
        h = g.create_group("h")
        h.create_dataset("s", data=np.float32(1.5))
        f["soft"] = h5py.SoftLink("/g/d")
        f["hard"] = g["d"]


def seed_chunked(path: Path, libver: str) -> None:
    """Chunked + gzip (+ shuffle), fixed and unlimited maximum shapes (latest: fixed array,
    extensible array and v2 B-tree chunk indexes), a fill value."""
    with h5py.File(path, "w", libver=_libver(libver)) as f:
        f.create_dataset("z", data=np.arange(300, dtype="<i4").reshape(15, 20), chunks=(4, 8),
                         compression="gzip", shuffle=True)
        f.create_dataset("u", data=np.arange(50, dtype="<f4"), chunks=(16,), maxshape=(None,),
                         compression="gzip")
        f.create_dataset("w", data=np.arange(60, dtype="<i2").reshape(6, 10), chunks=(4, 4),
                         maxshape=(None, None), fillvalue=-1)


def seed_vlen(path: Path, libver: str) -> None:
    """Variable-length strings: a dataset and attributes (global heap)."""
    with h5py.File(path, "w", libver=_libver(libver)) as f:
        dt = h5py.string_dtype()
        f.create_dataset("s", data=np.array(["alpha", "beta", "γάμμα"], dtype=object), dtype=dt)
        f.attrs.create("names", np.array(["x", "yy"], dtype=object), dtype=dt)
        f.attrs["one"] = "single"


def seed_dense(path: Path, libver: str) -> None:
    """More links and attributes than fit compactly: dense storage in the latest format."""
    with h5py.File(path, "w", libver=_libver(libver)) as f:
        g = f.create_group("many")
        for i in range(10):
            g.create_dataset(f"d{i}", data=np.arange(i + 1, dtype="<i2"))
            g.attrs[f"a{i}"] = np.int16(i)


SEEDS = {
    f"{name}-{libver}": (fn, libver)
    for name, fn in [("groups", seed_groups), ("chunked", seed_chunked), ("vlen", seed_vlen),
                     ("dense", seed_dense)]
    for libver in ("earliest", "latest")
}


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> dict[str, bytes]:
    d = tmp_path_factory.mktemp("seeds")
    out = {}
    for name, (fn, libver) in SEEDS.items():
        p = d / f"{name}.h5"
        fn(p, libver)
        out[name] = p.read_bytes()
    return out


# ---------------------------------------------------------------------------------- mutations

INTERESTING = [0, 1, 2, 7, 8, 0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000,
               0xFFFFFFFF, 1 << 32, 1 << 40, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, (1 << 64) - 2]


@st.composite
def mutation(draw, size: int):
    kind = draw(st.sampled_from(["flip", "byte", "int", "int", "truncate", "copy"]))
    pos = draw(st.integers(0, max(0, size - 1)))
    if kind == "flip":
        return ("flip", pos, 1 << draw(st.integers(0, 7)))
    if kind == "byte":
        return ("byte", pos, draw(st.integers(0, 255)))
    if kind == "int":
        width = draw(st.sampled_from([1, 2, 4, 8]))
        value = draw(st.one_of(st.sampled_from(INTERESTING), st.integers(0, (1 << 64) - 1)))
        return ("int", pos, width, value & ((1 << (8 * width)) - 1))
    if kind == "truncate":
        return ("truncate", pos)
    src = draw(st.integers(0, max(0, size - 1)))
    return ("copy", pos, src, draw(st.integers(1, 64)))


def apply(data: bytes, ops) -> bytes:
    buf = bytearray(data)
    for op in ops:
        kind, pos = op[0], op[1]
        if pos >= len(buf) and kind != "truncate":
            continue
        if kind == "flip":
            buf[pos] ^= op[2]
        elif kind == "byte":
            buf[pos] = op[2]
        elif kind == "int":
            width = op[2]
            buf[pos:pos + width] = op[3].to_bytes(width, "little")[:len(buf) - pos]
        elif kind == "truncate":
            del buf[pos:]
        elif kind == "copy":
            src, n = op[2], op[3]
            piece = bytes(buf[src:src + n])
            buf[pos:pos + len(piece)] = piece
    return bytes(buf)


# ------------------------------------------------------------------------------------ harness

class WalkTimeout(BaseException):
    """Raised by SIGALRM inside a walk that overran its deadline (BaseException: the walker's
    per-step `except Exception` must not swallow it)."""


def _on_alarm(signum, frame):
    raise WalkTimeout(f"walk exceeded {DEADLINE} s")


@pytest.fixture(scope="module")
def bounded_memory():
    """Cap this process's address space while fuzzing: a huge allocation sized from the file
    raises MemoryError (a bug the walker records) instead of exhausting the machine."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/status") as fh:
        vm = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
    cap = vm + (2 << 30)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def walk_bytes(data: bytes, workdir: Path) -> WalkResult:
    fd, name = tempfile.mkstemp(suffix=".h5", dir=workdir)
    try:
        os.write(fd, data)
        os.close(fd)
        old = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, DEADLINE)
        try:
            return walk(name)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    finally:
        os.unlink(name)


def check(data: bytes, workdir: Path) -> None:
    res = walk_bytes(data, workdir)
    assert not res.bugs, res.summary()


def _settings(default: int):
    n = EXAMPLES or default
    return settings(max_examples=n, deadline=None, database=None, derandomize=not EXAMPLES,
                    suppress_health_check=list(HealthCheck), print_blob=True)


# --------------------------------------------------------------------------------------- tests

@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_seed_walks_clean(seeds, seed, tmp_path):
    """The unmutated seeds walk with no error at all (else the fuzzer would test nothing)."""
    res = walk_bytes(seeds[seed], tmp_path)
    assert res.refused is None and not res.bugs and not res.errors, res.summary()


@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_fuzz(seeds, seed, tmp_path, bounded_memory):
    data = seeds[seed]

    @_settings(300)
    @given(st.lists(mutation(len(data)), min_size=1, max_size=4))
    def run(ops):
        check(apply(data, ops), tmp_path)

    run()


@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_fuzz_every_byte(seeds, seed, tmp_path, bounded_memory):
    """Deterministic sweep: each byte of the first SWEEP bytes set to 0xFF (one file per byte);
    H5FS_FUZZ_SWEEP=all sweeps the whole file with 0xFF, 0x00, 0x80 and 0x01."""
    data = seeds[seed]
    full = SWEEP == "all"
    end = len(data) if full else min(len(data), int(SWEEP))
    for pos in range(end):
        for value in ((0xFF, 0x00, 0x80, 0x01) if full else (0xFF,)):
            if data[pos] != value:
                check(apply(data, [("byte", pos, value)]), tmp_path)


REGRESSIONS = sorted(p.name for p in DATA.glob("fuzz-regress-*.h5")) if DATA.is_dir() else []


@pytest.mark.parametrize("name", REGRESSIONS or [pytest.param("none", marks=pytest.mark.skip("no regression files"))])
def test_regression(name, tmp_path, bounded_memory):
    check((DATA / name).read_bytes(), tmp_path)
