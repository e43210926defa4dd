"""Sparse datasets (structured chunk storage) through real read-write mounts, driven by real tools
(`h5fs create --sparse`, os.pwrite, dd, numpy.memmap, cp, mv, rm, truncate, getxattr) and compared
with a NumPy model: the raw view `S`, `S.npy` and the defined elements `S.points.npy`, the
`user.h5fs.*` facts and st_blocks. After each write test the file is unmounted, h5py reads every
object it can (it refuses only the sparse datasets), `h5fs check` passes, the chunk index holds
exactly the chunks the model says have defined elements, and a read-only remount shows the model
again. Crash tests kill the daemon (`kill -9`) while `cp` replaces the defined elements or while
fsync'd random writes flush."""

from __future__ import annotations

import errno
import json
import os
import random
import subprocess
import threading
import time
from math import prod
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import run_h5fs, wait_until
from write_support import pwrite
from crash_support import Workload, check_promise, initial, kill_daemon
from h5fs.format.messages.layout import INDEX_NAMES
from h5fs.model.file import H5File

FILTERS = "values=shuffle,gzip:4,selection=gzip:1"
FILTERS_FACT = "selection=deflate,values=shuffle+deflate"   # each section's pipeline, in section order
SB_VERSION = {"earliest": 0, "latest": 3}                   # what h5py's libver bounds write


# -- the model ---------------------------------------------------------------------------------

class Model:
    """A sparse dataset as raw element bytes: an element is defined when its bytes differ from
    the fill value's (writing the fill value undefines it)."""

    def __init__(self, shape, dtype, fill=None):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.fill = np.array(0 if fill is None else fill, self.dtype).tobytes()
        self.raw = bytearray(self.fill * prod(self.shape))

    @property
    def isz(self) -> int:
        return self.dtype.itemsize

    def write(self, offset: int, data: bytes) -> None:
        assert offset + len(data) <= len(self.raw)
        self.raw[offset:offset + len(data)] = data

    def write_elements(self, index, values) -> None:
        """Elements at a multi-dimensional `index` (a tuple of slices/ints) set to `values`."""
        a = self.array().copy()
        a[index] = values
        self.raw = bytearray(a.tobytes())

    def array(self) -> np.ndarray:
        return np.frombuffer(bytes(self.raw), self.dtype).reshape(self.shape)

    def mask(self) -> np.ndarray:
        rows = np.frombuffer(bytes(self.raw), np.uint8).reshape(-1, self.isz)
        return (rows != np.frombuffer(self.fill, np.uint8)).any(axis=1).reshape(self.shape)

    @property
    def defined(self) -> int:
        return int(self.mask().sum())

    @property
    def points_dtype(self) -> np.dtype:
        return np.dtype([("index", "<u8", (len(self.shape),)), ("value", self.dtype)])

    def points(self) -> np.ndarray:
        mask = self.mask()
        out = np.empty(int(mask.sum()), self.points_dtype)
        out["index"] = np.argwhere(mask)          # row-major order
        out["value"] = self.array()[mask]          # row-major order too
        return out

    def set_points(self, pts: np.ndarray) -> None:
        """`cp pts.npy S.points.npy`: exactly these elements, the last record of an index wins,
        a fill value defines nothing."""
        rows = np.empty((prod(self.shape), self.isz), np.uint8)
        rows[...] = np.frombuffer(self.fill, np.uint8)
        values = np.frombuffer(np.ascontiguousarray(pts["value"]).astype(self.dtype).tobytes(), np.uint8)
        values = values.reshape(-1, self.isz)
        for i, idx in enumerate(np.asarray(pts["index"]).reshape(len(pts), len(self.shape))):
            rows[np.ravel_multi_index(tuple(int(x) for x in idx), self.shape)] = values[i]
        self.raw = bytearray(rows.tobytes())

    def resize(self, rows: int) -> None:
        row = prod(self.shape[1:]) * self.isz
        keep = bytes(self.raw[:rows * row])
        self.shape = (rows,) + self.shape[1:]
        self.raw = bytearray(keep + self.fill * (prod(self.shape) - len(keep) // self.isz))

    def chunks(self, chunk) -> set[tuple[int, ...]]:
        """Chunks holding at least one defined element (those the index must list)."""
        return {tuple(int(c) for c in idx // np.array(chunk)) for idx in np.argwhere(self.mask())}

    def section0_bound(self, chunk) -> int:
        """An upper bound of the stored selections' bytes: per stored chunk, libhdf5's own
        H5Sencode of its defined elements as a point list (h5fs stores the smallest encoding)
        and the 4-byte checksum."""
        mask, total = self.mask(), 0
        for coords in self.chunks(chunk):
            box = tuple(slice(c * k, min((c + 1) * k, d)) for c, k, d in zip(coords, chunk, self.shape))
            local = np.argwhere(mask[box])
            space = h5py.h5s.create_simple(tuple(chunk))
            space.select_elements(local)
            total += len(space.encode()) + 4
        return total


# -- tools -------------------------------------------------------------------------------------

def make_base(path: Path, libver: str) -> dict[str, np.ndarray]:
    """A file of ordinary objects beside which sparse datasets are made; returns what h5py must
    read back from it (unchanged by every test)."""
    with h5py.File(path, "w", libver=libver) as f:
        f.attrs["title"] = "sparse tests"
        g = f.create_group("g")
        g.attrs["note"] = "keep"
        g.create_dataset("dense", data=np.arange(200, dtype="<i4").reshape(20, 10), chunks=(5, 5),
                         compression="gzip")
        x = f.create_dataset("x", data=np.linspace(0, 1, 50))
        x.attrs["units"] = "m"
    with open(path, "rb") as fh:
        head = fh.read(9)
    assert head[:8] == b"\x89HDF\r\n\x1a\n" and head[8] == SB_VERSION[libver], "not the superblock asked for"
    return {"/@title": "sparse tests", "/g@note": "keep", "/g/dense": np.arange(200, dtype="<i4").reshape(20, 10),
            "/x": np.linspace(0, 1, 50), "/x@units": "m"}


def create(mp: Path, name: str, shape, dtype, chunks, maxshape=None, fill=None, filters=None) -> Path:
    """`h5fs create NAME --sparse ...` through the mount."""
    args = ["create", mp / name, "--sparse", "--shape", ",".join(map(str, shape)), "--dtype", dtype,
            "--chunks", ",".join(map(str, chunks))]
    if maxshape is not None:
        args += ["--maxshape", ",".join("None" if m is None else str(m) for m in maxshape)]
    if fill is not None:
        args += ["--fill", repr(fill)]
    if filters is not None:
        args += ["--filters", filters]
    run_h5fs(*args, check=True)
    return mp / name


def fsync(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def dd(src: bytes, target: Path, offset: int, tmp_path: Path) -> None:
    piece = tmp_path / "piece"
    piece.write_bytes(src)
    subprocess.run(["dd", f"if={piece}", f"of={target}", "bs=1", f"seek={offset}", "conv=notrunc",
                    "status=none"], check=True, timeout=60)


def cp(src: Path, dst: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["cp", str(src), str(dst)], capture_output=True, text=True, timeout=120)


def fact(path: Path, name: str) -> str:
    return os.getxattr(path, f"user.h5fs.{name}").decode()


def npy_data_offset(path: Path) -> int:
    with open(path, "rb") as fh:
        major, _ = np.lib.format.read_magic(fh)
        (np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0)(fh)
        return fh.tell()


def write_points(path: Path, indices, values, dtype, index_dtype="<u8") -> np.ndarray:
    indices = np.asarray(indices)
    pts = np.empty(len(indices), [("index", index_dtype, (indices.shape[1],)), ("value", dtype)])
    pts["index"] = indices
    pts["value"] = values
    np.save(path, pts)
    return pts


def check_views(mp: Path, name: str, model: Model, tmp_path: Path, defined: bool = True) -> None:
    """The three views of sparse dataset `name` show the model; `defined`: the fact too."""
    s = mp / name
    raw = s.read_bytes()
    assert os.stat(s).st_size == len(model.raw)
    assert raw == bytes(model.raw), f"{name}: raw view differs from the model"
    arr = np.load(mp / f"{name}.npy", allow_pickle=False)
    assert arr.dtype == model.dtype and arr.shape == model.shape
    assert arr.tobytes() == bytes(model.raw), f"{name}.npy differs from the model"
    want = model.points()
    body = (mp / f"{name}.points.npy").read_bytes()
    assert os.stat(mp / f"{name}.points.npy").st_size == len(body)
    copy = tmp_path / "copied.points.npy"
    assert cp(mp / f"{name}.points.npy", copy).returncode == 0
    for got in (np.load(mp / f"{name}.points.npy", allow_pickle=False), np.load(copy, allow_pickle=False)):
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        assert got.shape == want.shape, f"{name}.points.npy: {got.shape} elements, the model has {want.shape}"
        assert np.array_equal(got["index"], want["index"]), f"{name}.points.npy: indices differ"
        assert got["value"].tobytes() == want["value"].tobytes(), f"{name}.points.npy: values differ"
    if defined:
        assert fact(s, "defined") == str(model.defined)


def read_non_sparse(path: Path, sparse: set[str]) -> dict[str, object]:
    """What h5py reads of the file: every object and attribute except the sparse datasets,
    which it must refuse one by one (the rest of the file stays readable)."""
    out: dict[str, object] = {}
    with h5py.File(path, "r") as f:
        def walk(group, prefix):
            for key, value in group.attrs.items():
                out[f"{prefix or '/'}@{key}"] = value
            for name in group:
                p = f"{prefix}/{name}"
                if p in sparse:
                    with pytest.raises((KeyError, OSError)):
                        group[name]
                    continue
                obj = group[name]
                if isinstance(obj, h5py.Group):
                    walk(obj, p)
                else:
                    out[p] = obj[()]
                    for key, value in obj.attrs.items():
                        out[f"{p}@{key}"] = value
        walk(f, "")
        for p in sparse:
            assert p in f, f"{p}: no longer linked"
    return out


def verify(path: Path, sparse: set[str], base: dict[str, object]) -> None:
    """h5py reads the rest of the file as it was made, `h5fs check` passes."""
    got = read_non_sparse(path, sparse)
    assert set(got) == set(base), (sorted(got), sorted(base))
    for key, want in base.items():
        assert np.array_equal(np.asarray(got[key]), np.asarray(want)), key
    proc = run_h5fs("check", path, timeout=120)
    assert proc.returncode == 0, f"h5fs check: {proc.stdout}{proc.stderr}"


def stored_chunks(path: Path, name: str) -> tuple[str, set[tuple[int, ...]], int]:
    """(index type, chunk coordinates the index lists, their bytes) as the file holds them."""
    with H5File.open(str(path)) as f:
        ds = f.resolve(name)
        records = list(ds.source.index.records())
        return (INDEX_NAMES[ds.layout.index.index_type], {tuple(r.coords) for r in records},
                sum(r.size for r in records))


def storage(s: Path) -> int:
    return int(fact(s, "storage_size"))


def blocks_match(s: Path) -> bool:
    return os.stat(s).st_blocks == (storage(s) + 511) // 512


def check_storage(s: Path, model: Model, chunk, filtered: bool) -> int:
    """storage_size and st_blocks agree with what the model holds; returns storage_size."""
    size = storage(s)
    if model.defined == 0:
        assert size == 0
    elif filtered:
        assert size > 0
    else:
        # unfiltered: the values, plus for each chunk its selection and checksum
        low = model.defined * model.isz + 5 * len(model.chunks(chunk))
        high = model.defined * model.isz + model.section0_bound(chunk)
        assert low <= size <= high, (low, size, high)
    assert wait_until(lambda: blocks_match(s), timeout=5), (os.stat(s).st_blocks, storage(s))
    return size


# -- every index type, filtered and not --------------------------------------------------------

INDEXES = {   # index -> (shape, chunks, maxshape): shapes not multiples of the chunks, but "single"
    "single": ((9, 7), (9, 7), None),
    "fixed-array": ((23, 17), (5, 4), None),
    "extensible-array": ((23, 17), (5, 4), (None, 17)),
    "btree-v2": ((23, 17), (5, 4), (None, None)),
}
MATRIX = [   # (index, filtered, libver): each index in both formats, filtered and not
    ("single", False, "earliest"), ("single", True, "latest"),
    ("fixed-array", False, "earliest"), ("fixed-array", True, "latest"),
    ("extensible-array", False, "latest"), ("extensible-array", True, "earliest"),
    ("btree-v2", False, "latest"), ("btree-v2", True, "earliest"),
]


@pytest.mark.parametrize("index,filtered,libver", MATRIX,
                         ids=[f"{i}-{'gzip' if f else 'none'}-{v}" for i, f, v in MATRIX])
def test_writes_match_model(mount, tmp_path, index, filtered, libver):
    """Random point writes, block writes, partial-element writes, dd and memmap writes through
    both views, fill-value writes that undefine; a whole chunk cleared is freed."""
    shape, chunk, maxshape = INDEXES[index]
    fill = -1.5
    path = tmp_path / f"sparse-{index}-{libver}.h5"
    base = make_base(path, libver)
    mp = mount(path, "rw")
    s = create(mp, "S", shape, "<f4", chunk, maxshape, fill, FILTERS if filtered else None)
    model = Model(shape, "<f4", fill)
    assert sorted(os.listdir(mp)) == ["S", "S.npy", "S.points.npy", "g", "x", "x.npy"]
    assert fact(s, "layout") == "structured-chunk (sparse)"
    assert fact(s, "index") == index
    assert fact(s, "filters") == (FILTERS_FACT if filtered else "none")
    assert fact(s, "shape") == str(shape) and fact(s, "chunks") == str(chunk)
    assert os.stat(s).st_blocks == 0 and storage(s) == 0
    check_views(mp, "S", model, tmp_path)

    rng = np.random.default_rng(MATRIX.index((index, filtered, libver)))
    n, isz = prod(shape), 4
    fd = os.open(s, os.O_WRONLY)
    try:
        for e in rng.choice(n, 25, replace=False):         # random single elements
            v = np.float32(rng.integers(1, 1000)).tobytes()
            os.pwrite(fd, v, int(e) * isz)
            model.write(int(e) * isz, v)
        for _ in range(3):                                  # blocks spanning chunks and rows
            start = int(rng.integers(0, n - 1))
            count = int(rng.integers(1, min(2 * shape[1] + 3, n - start)))
            v = rng.integers(-50, 50, count).astype("<f4")
            os.pwrite(fd, v.tobytes(), start * isz)
            model.write(start * isz, v.tobytes())
        # a write of partial elements at an odd offset: two elements get new bytes
        off = (n // 2) * isz + 2
        os.pwrite(fd, b"\x11\x22\x33\x44", off)
        model.write(off, b"\x11\x22\x33\x44")
    finally:
        os.close(fd)
    dd(np.array([3.25, 4.5, 5.75], "<f4").tobytes(), s, 4 * isz, tmp_path)
    model.write(4 * isz, np.array([3.25, 4.5, 5.75], "<f4").tobytes())
    # through the .npy view: os.pwrite past its header, and a memmap
    hdr = npy_data_offset(mp / "S.npy")
    pwrite(mp / "S.npy", np.array([9.5, 10.5], "<f4").tobytes(), hdr + (n - 2) * isz, fsync=False)
    model.write((n - 2) * isz, np.array([9.5, 10.5], "<f4").tobytes())
    m = np.lib.format.open_memmap(mp / "S.npy", mode="r+")
    m[1:3, 1:3] = [[21, 22], [23, 24]]
    m.flush()
    del m
    model.write_elements((slice(1, 3), slice(1, 3)), [[21, 22], [23, 24]])
    # writing the fill value undefines: some defined elements, and an element never defined
    defined_now = np.flatnonzero(model.mask().ravel())
    fill_bytes = np.float32(fill).tobytes()
    for e in rng.choice(defined_now, 5, replace=False):
        pwrite(s, fill_bytes, int(e) * isz, fsync=False)
        model.write(int(e) * isz, fill_bytes)
    undefined_now = np.flatnonzero(~model.mask().ravel())
    pwrite(s, fill_bytes, int(undefined_now[0]) * isz, fsync=False)
    check_views(mp, "S", model, tmp_path, defined=False)   # reading the points flushes the writes
    fsync(s)
    assert fact(s, "defined") == str(model.defined)
    before = check_storage(s, model, chunk, filtered)

    # clear every element of the chunk holding most defined elements: the chunk goes
    counts = {c: 0 for c in model.chunks(chunk)}
    for idx in np.argwhere(model.mask()):
        counts[tuple(int(c) for c in idx // np.array(chunk))] += 1
    victim = max(sorted(counts), key=counts.get)
    box = tuple(slice(c * k, min((c + 1) * k, d)) for c, k, d in zip(victim, chunk, shape))
    width = box[1].stop - box[1].start
    for r in range(box[0].start, box[0].stop):
        pwrite(s, fill_bytes * width, (r * shape[1] + box[1].start) * isz, fsync=False)
    model.write_elements(box, fill)
    fsync(s)
    assert victim not in model.chunks(chunk)
    assert fact(s, "defined") == str(model.defined)
    after = check_storage(s, model, chunk, filtered)
    assert after < before, f"clearing chunk {victim} did not free its storage ({before} -> {after})"
    check_views(mp, "S", model, tmp_path)
    run_h5fs("umount", mp, check=True)

    verify(path, {"/S"}, base)
    kind, coords, nbytes = stored_chunks(path, "/S")
    assert kind == index
    assert coords == model.chunks(chunk), "the index does not list exactly the chunks with defined elements"
    ro = mount(path, "ro")
    check_views(ro, "S", model, tmp_path)
    assert fact(ro / "S", "layout") == "structured-chunk (sparse)" and fact(ro / "S", "index") == index
    assert storage(ro / "S") == nbytes == after
    assert os.stat(ro / "S").st_blocks == (after + 511) // 512


def test_defined_fact_counts_writes_not_yet_flushed(mount, tmp_path):
    """A write is visible at once through the views; `user.h5fs.defined` and the size of
    `S.points.npy` must count it at once too, not only after the flush (FLUSH_DELAY, about two
    seconds later): a tool reading st_size (mmap, np.load(mmap_mode=...)) would see a cut file."""
    path = tmp_path / "lag.h5"
    base = make_base(path, "latest")
    mp = mount(path, "rw")
    s = create(mp, "S", (12, 10), "<f4", (4, 4), fill=-1.0)
    model = Model((12, 10), "<f4", -1.0)
    v = np.array([1, 2, 3], "<f4").tobytes()
    pwrite(s, v, 4 * 13, fsync=False)
    model.write(4 * 13, v)
    assert s.read_bytes() == bytes(model.raw)       # the write shows through the raw view
    assert fact(s, "defined") == str(model.defined)
    pwrite(s, np.float32(-1.0).tobytes(), 4 * 14, fsync=False)   # undefined again, not yet flushed
    pwrite(s, np.float32(6.0).tobytes(), 4 * 119, fsync=False)   # a chunk not stored yet
    model.write(4 * 14, np.float32(-1.0).tobytes())
    model.write(4 * 119, np.float32(6.0).tobytes())
    assert fact(s, "defined") == str(model.defined)
    size = os.stat(mp / "S.points.npy").st_size
    assert size == len((mp / "S.points.npy").read_bytes())
    check_views(mp, "S", model, tmp_path)
    run_h5fs("umount", mp, check=True)
    verify(path, {"/S"}, base)


def test_fill_writes_undefine_and_free(mount, tmp_path):
    """Integers with the default fill value (0), unfiltered (S) and filtered (Z): writing 0
    undefines; a chunk left with nothing defined leaves the index; with nothing defined the
    dataset stores nothing."""
    path = tmp_path / "undefine.h5"
    base = make_base(path, "latest")
    mp = mount(path, "rw")
    shape, chunk = (8, 12), (4, 4)
    models = {}
    for name, filtered in (("S", False), ("Z", True)):
        s = create(mp, name, shape, "<i4", chunk, filters=FILTERS if filtered else None)
        model = models[name] = Model(shape, "<i4")
        a = np.arange(1, 17, dtype="<i4").reshape(4, 4)
        for r in range(4):   # chunk (0, 0) whole, and two elements of chunk (1, 2)
            pwrite(s, a[r].tobytes(), r * 12 * 4, fsync=False)
        model.write_elements((slice(0, 4), slice(0, 4)), a)
        pwrite(s, np.array([5, 6], "<i4").tobytes(), (5 * 12 + 9) * 4, fsync=True)
        model.write_elements((5, slice(9, 11)), [5, 6])
        assert fact(s, "defined") == "18" == str(model.defined)
        full = check_storage(s, model, chunk, filtered)
        # a zero written over a zero defines nothing; over a value, undefines it
        pwrite(s, bytes(8), (7 * 12 + 10) * 4, fsync=False)
        pwrite(s, bytes(4), (5 * 12 + 9) * 4, fsync=True)
        model.write_elements((5, 9), 0)
        assert fact(s, "defined") == "17" == str(model.defined)
        check_views(mp, name, model, tmp_path)
        # chunk (1, 2) emptied: it goes
        pwrite(s, bytes(4), (5 * 12 + 10) * 4, fsync=True)
        model.write_elements((5, 10), 0)
        assert model.chunks(chunk) == {(0, 0)}
        one = check_storage(s, model, chunk, filtered)
        assert one < full, f"{name}: emptying chunk (1, 2) freed nothing ({full} -> {one})"
        # nothing defined: no storage
        pwrite(s, bytes(len(model.raw)), 0, fsync=True)
        model.write(0, bytes(len(model.raw)))
        assert fact(s, "defined") == "0"
        assert storage(s) == 0 and wait_until(lambda: os.stat(s).st_blocks == 0, timeout=5)
        check_views(mp, name, model, tmp_path)
        pwrite(s, np.array([-3], "<i4").tobytes(), 4 * 95, fsync=True)   # the last element, in an edge chunk
        model.write(4 * 95, np.array([-3], "<i4").tobytes())
        check_views(mp, name, model, tmp_path)
    run_h5fs("umount", mp, check=True)
    verify(path, {"/S", "/Z"}, base)
    ro = mount(path, "ro")
    for name, model in models.items():
        assert stored_chunks(path, f"/{name}")[1] == model.chunks(chunk) == {(1, 2)}
        check_views(ro, name, model, tmp_path)


OTHERS = {   # case -> datasets (name, shape, chunks, maxshape, dtype, fill)
    "big-endian": [("S", (9, 11), (4, 5), None, ">i4", 7)],
    "3d-and-1d": [("T", (5, 6, 7), (2, 4, 3), (None, 6, 7), "<f8", None),
                  ("U", (301,), (64,), (None,), "u1", 255)],
}


@pytest.mark.parametrize("case", sorted(OTHERS))
def test_other_dtypes_and_ranks(mount, tmp_path, case):
    """Big-endian values, three dimensions, one-byte elements: random writes through the raw
    view, then a new set through .points.npy (its value dtype the dataset's, byte order included)."""
    path = tmp_path / f"{case}.h5"
    base = make_base(path, "latest")
    mp = mount(path, "rw")
    rng = np.random.default_rng(sorted(OTHERS).index(case))
    models = {}
    for name, shape, chunk, maxshape, dtype, fill in OTHERS[case]:
        s = create(mp, name, shape, dtype, chunk, maxshape, fill, filters="values=shuffle,gzip:2")
        model = models[name] = Model(shape, dtype, fill)
        n, isz = prod(shape), model.isz
        for e in rng.choice(n, 40, replace=False):
            v = np.array(rng.integers(1, 250), dtype).tobytes()
            pwrite(s, v, int(e) * isz, fsync=False)
            model.write(int(e) * isz, v)
        fsync(s)
        check_views(mp, name, model, tmp_path)
        flat = rng.choice(n, 25, replace=False)
        pts = write_points(tmp_path / "pts.npy", np.stack(np.unravel_index(flat, shape), axis=1),
                           rng.integers(1, 250, 25), dtype)
        model.set_points(pts)
        done = cp(tmp_path / "pts.npy", mp / f"{name}.points.npy")
        assert done.returncode == 0, done.stderr
        check_views(mp, name, model, tmp_path)
    run_h5fs("umount", mp, check=True)
    verify(path, {f"/{name}" for name in models}, base)
    ro = mount(path, "ro")
    for name, shape, chunk, *_ in OTHERS[case]:
        assert stored_chunks(path, f"/{name}")[1] == models[name].chunks(chunk)
        check_views(ro, name, models[name], tmp_path)


@pytest.fixture
def with_points(mount, tmp_path):
    """A latest-format file with sparse `S` (int32, default fill 0, fixed array of 3 x 3 chunks
    with edges) holding a few elements; (path, base, mountpoint, model)."""
    path = tmp_path / "points.h5"
    base = make_base(path, "latest")
    mp = mount(path, "rw")
    s = create(mp, "S", (10, 8), "<i4", (4, 3), filters=FILTERS)
    model = Model((10, 8), "<i4")
    pwrite(s, np.array([7, 8, 9], "<i4").tobytes(), 4 * 20, fsync=True)
    model.write(4 * 20, np.array([7, 8, 9], "<i4").tobytes())
    return path, base, mp, model


def test_cp_points_replaces_the_defined_set(with_points, mount, tmp_path):
    path, base, mp, model = with_points
    s = mp / "S"
    rng = np.random.default_rng(5)
    idx = np.stack([rng.integers(0, 10, 30), rng.integers(0, 8, 30)], axis=1)
    values = rng.integers(-20, 20, 30).astype("<i4")
    values[values == 0] = 1
    idx[7] = idx[3]             # an index given twice: the last record wins
    values[7] = values[3] + 100
    values[11] = 0              # a fill value: defines nothing
    pts = write_points(tmp_path / "pts.npy", idx, values, "<i4")
    pwrite(s, np.array([99, 98], "<i4").tobytes(), 4 * 60, fsync=False)   # not flushed: replaced with the old set
    model.set_points(pts)
    done = cp(tmp_path / "pts.npy", mp / "S.points.npy")
    assert done.returncode == 0, done.stderr
    check_views(mp, "S", model, tmp_path)
    # unsorted, every element of one chunk and none elsewhere: the others' chunks go
    idx = np.array([[r, c] for r in range(4) for c in range(3, 6)])[::-1]
    pts = write_points(tmp_path / "pts2.npy", idx, np.arange(1, 13), "<i4")
    model.set_points(pts)
    assert cp(tmp_path / "pts2.npy", mp / "S.points.npy").returncode == 0
    check_views(mp, "S", model, tmp_path)
    check_storage(s, model, (4, 3), True)
    # raw writes go on from the new set
    pwrite(s, np.array([42], "<i4").tobytes(), 4 * 79, fsync=False)
    model.write(4 * 79, np.array([42], "<i4").tobytes())
    check_views(mp, "S", model, tmp_path)
    fsync(s)   # what lands is still the model
    check_views(mp, "S", model, tmp_path)
    run_h5fs("umount", mp, check=True)
    verify(path, {"/S"}, base)
    assert stored_chunks(path, "/S")[1] == model.chunks((4, 3)) == {(0, 1), (2, 2)}
    ro = mount(path, "ro")
    check_views(ro, "S", model, tmp_path)
    done = cp(tmp_path / "pts.npy", ro / "S.points.npy")   # a read-only mount refuses
    assert done.returncode != 0 and "Read-only file system" in done.stderr, done.stderr
    check_views(ro, "S", model, tmp_path)


def test_cp_points_duplicate_ending_in_fill(with_points, tmp_path):
    """An index given twice, a value then the fill value: the last record wins, so the
    element ends undefined (as the same two writes through the raw view leave it)."""
    path, base, mp, model = with_points
    pts = write_points(tmp_path / "dup.npy", [[1, 1], [2, 2], [1, 1]], [5, 6, 0], "<i4")
    model.set_points(pts)
    assert model.defined == 1
    assert cp(tmp_path / "dup.npy", mp / "S.points.npy").returncode == 0
    check_views(mp, "S", model, tmp_path)
    run_h5fs("umount", mp, check=True)
    verify(path, {"/S"}, base)


def test_cp_npy_over_sparse(with_points, mount, tmp_path):
    """`cp y.npy S.npy` (README): an array of S's rank and dtype replaces the data and S stays
    sparse (chunks, section filters, fill value), growing past a fixed first dimension makes it
    unlimited; an array of another dtype makes S an ordinary dataset."""
    path, base, mp, model = with_points
    s = mp / "S"
    rng = np.random.default_rng(8)
    y = rng.integers(0, 4, (10, 8)).astype("<i4")
    y[y < 2] = 0   # the fill value: undefined
    np.save(tmp_path / "y.npy", y)
    assert cp(tmp_path / "y.npy", mp / "S.npy").returncode == 0
    model.write(0, y.tobytes())
    check_views(mp, "S", model, tmp_path)
    assert fact(s, "layout") == "structured-chunk (sparse)" and fact(s, "filters") == FILTERS_FACT
    assert fact(s, "chunks") == "(4, 3)"
    # more rows than the fixed first dimension: still sparse, the first dimension unlimited
    z = np.zeros((13, 8), "<i4")
    z[12, 7], z[0, 0] = 5, 6
    np.save(tmp_path / "z.npy", z)
    assert cp(tmp_path / "z.npy", mp / "S.npy").returncode == 0
    model = Model((13, 8), "<i4")
    model.write(0, z.tobytes())
    check_views(mp, "S", model, tmp_path)
    assert fact(s, "maxshape") == "(unlimited, 8)" and fact(s, "index") == "extensible-array"
    run_h5fs("umount", mp, check=True)
    verify(path, {"/S"}, base)
    assert stored_chunks(path, "/S")[1] == model.chunks((4, 3)) == {(0, 0), (3, 2)}
    # another dtype: an ordinary dataset, which h5py reads
    mp = mount(path, "rw")
    w = np.arange(6.0)
    np.save(tmp_path / "w.npy", w)
    assert cp(tmp_path / "w.npy", mp / "S.npy").returncode == 0
    assert sorted(os.listdir(mp)) == ["S", "S.npy", "g", "x", "x.npy"]
    assert np.array_equal(np.load(mp / "S.npy"), w)
    run_h5fs("umount", mp, check=True)
    verify(path, set(), dict(base, **{"/S": w}))


def _npy_bytes(pts: np.ndarray) -> bytes:
    import io
    buf = io.BytesIO()
    np.save(buf, pts)
    return buf.getvalue()


BAD_POINTS = {
    "outside-extent": lambda: _npy_bytes(np.array([([1, 1], 3), ([10, 0], 4)],
                                                  [("index", "<u8", (2,)), ("value", "<i4")])),
    "outside-second-dim": lambda: _npy_bytes(np.array([([0, 8], 3)], [("index", "<u8", (2,)), ("value", "<i4")])),
    "wrong-value-dtype": lambda: _npy_bytes(np.array([([1, 1], 3)], [("index", "<u8", (2,)), ("value", "<f8")])),
    "wrong-rank": lambda: _npy_bytes(np.array([([1, 1, 1], 3)], [("index", "<u8", (3,)), ("value", "<i4")])),
    "not-records": lambda: _npy_bytes(np.arange(12, dtype="<i4")),
    "truncated": lambda: _npy_bytes(np.array([([1, 1], 3), ([2, 2], 4)],
                                             [("index", "<u8", (2,)), ("value", "<i4")]))[:-3],
    "garbage": lambda: bytes(random.Random(3).randrange(256) for _ in range(300)),
    "header-only": lambda: _npy_bytes(np.array([([1, 1], 3)], [("index", "<u8", (2,)), ("value", "<i4")]))[:128],
}


def test_cp_invalid_points_is_einval_and_changes_nothing(with_points, mount, tmp_path):
    path, base, mp, model = with_points
    s = mp / "S"
    before = storage(s)
    for name, make in BAD_POINTS.items():
        src = tmp_path / f"{name}.npy"
        src.write_bytes(make())
        done = cp(src, mp / "S.points.npy")
        assert done.returncode != 0 and "Invalid argument" in done.stderr, (name, done.returncode, done.stderr)
        check_views(mp, "S", model, tmp_path)
        assert storage(s) == before, name
    # the same through os.write and close: close answers EINVAL
    fd = os.open(mp / "S.points.npy", os.O_WRONLY | os.O_TRUNC)
    os.write(fd, BAD_POINTS["outside-extent"]())
    with pytest.raises(OSError) as ei:
        os.close(fd)
    assert ei.value.errno == errno.EINVAL
    check_views(mp, "S", model, tmp_path)
    # then a valid empty set: everything undefined, nothing stored
    pts = write_points(tmp_path / "none.npy", np.zeros((0, 2), int), [], "<i4")
    model.set_points(pts)
    assert cp(tmp_path / "none.npy", mp / "S.points.npy").returncode == 0
    check_views(mp, "S", model, tmp_path)
    assert storage(s) == 0
    run_h5fs("umount", mp, check=True)
    verify(path, {"/S"}, base)
    assert stored_chunks(path, "/S")[1] == set()
    ro = mount(path, "ro")
    check_views(ro, "S", model, tmp_path)


def test_writes_into_a_damaged_chunk_are_lost_naming_the_dataset(mount, tmp_path):
    """A chunk whose selection fails its checksum: a write into it cannot land (fsync answers
    EIO), and the log names the dataset and the chunk, also after the flush of a write into a
    healthy chunk had the dataset's stat numbers made again."""
    path = tmp_path / "damaged.h5"
    make_base(path, "latest")
    mp = mount(path, "rw")
    create(mp, "S", (100, 100), "<f4", (10, 10))
    pts = np.zeros(2, dtype=[("index", "<u8", (2,)), ("value", "<f4")])
    pts["index"], pts["value"] = [[0, 0], [55, 55]], [1234.5, 2345.5]
    np.save(tmp_path / "pts.npy", pts)
    assert cp(tmp_path / "pts.npy", mp / "S.points.npy").returncode == 0
    run_h5fs("umount", mp, check=True)
    data = bytearray(path.read_bytes())
    at = data.find(np.float32(2345.5).tobytes())   # chunk (5, 5): its selection, checksum, then values
    data[at - 6] ^= 0xFF
    path.write_bytes(bytes(data))
    mp = mount(path, "rw")
    pwrite(mp / "S", np.float32(7.5).tobytes(), (10 * 100 + 10) * 4)   # chunk (1, 1): lands
    with pytest.raises(OSError) as exc:
        pwrite(mp / "S", np.float32(8.5).tobytes(), (56 * 100 + 56) * 4)
    assert exc.value.errno == errno.EIO
    run_h5fs("umount", mp, check=True)
    lost = [line for line in mount.log_of(mp).splitlines() if "writes lost" in line]
    assert len(lost) == 1 and lost[0].endswith(
        "/S: writes lost, the dataset is broken in the file: /S chunk (5, 5) section 0: section checksum mismatch"), lost


# -- rm, mv, rm -r -------------------------------------------------------------------------------

@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_rm_mv_rm_r(mount, tmp_path, libver):
    path = tmp_path / f"ns-{libver}.h5"
    base = make_base(path, libver)
    mp = mount(path, "rw")
    os.mkdir(mp / "h")
    os.makedirs(mp / "k" / "deeper")
    models = {}
    for name, where in (("A", mp), ("B", mp), ("C", mp / "h"), ("D", mp / "k"), ("E", mp / "k" / "deeper")):
        create(where, name, (6, 6), "<f8", (3, 4), fill=2.0, filters=FILTERS if name == "B" else None)
        m = Model((6, 6), "<f8", 2.0)
        v = np.arange(1, 7, dtype="<f8") * (ord(name) - 60)
        pwrite(where / name, v.tobytes(), 8 * 9, fsync=True)
        m.write(8 * 9, v.tobytes())
        models[name] = m
    subprocess.run(["setfattr", "-n", "user.note", "-v", "sparse A", str(mp / "A")], check=True)
    # mv renames the dataset: its three views go with it
    subprocess.run(["mv", str(mp / "A"), str(mp / "h" / "T")], check=True)
    assert sorted(os.listdir(mp)) == ["B", "B.npy", "B.points.npy", "g", "h", "k", "x", "x.npy"]
    assert sorted(os.listdir(mp / "h")) == ["C", "C.npy", "C.points.npy", "T", "T.npy", "T.points.npy"]
    check_views(mp / "h", "T", models["A"], tmp_path)
    assert fact(mp / "h" / "T", "layout") == "structured-chunk (sparse)"
    # writes go on under the new name
    pwrite(mp / "h" / "T", np.float64(-4).tobytes(), 0, fsync=True)
    models["A"].write(0, np.float64(-4).tobytes())
    check_views(mp / "h", "T", models["A"], tmp_path)
    # rm removes all three views
    subprocess.run(["rm", str(mp / "B")], check=True)
    # (at once: test_rm_takes_every_view_at_once)
    assert wait_until(lambda: not any(os.path.exists(mp / v) for v in ("B", "B.npy", "B.points.npy")), 2)
    # rm -r of a group holding sparse datasets (D in it, E a level down)
    assert sorted(os.listdir(mp / "k")) == ["D", "D.npy", "D.points.npy", "deeper"]
    subprocess.run(["rm", "-r", str(mp / "k")], check=True)
    assert sorted(os.listdir(mp)) == ["g", "h", "x", "x.npy"]
    run_h5fs("umount", mp, check=True)
    verify(path, {"/h/T", "/h/C"}, base)
    with h5py.File(path, "r") as f:
        assert sorted(f) == ["g", "h", "x"] and sorted(f["h"]) == ["C", "T"]
    ro = mount(path, "ro")
    check_views(ro / "h", "T", models["A"], tmp_path)
    check_views(ro / "h", "C", models["C"], tmp_path)
    assert os.getxattr(ro / "h" / "T", "user.note") == b"sparse A"


def test_rm_takes_every_view_at_once(mount, tmp_path):
    """Once `rm S` returns, S.npy and S.points.npy go too, even when the kernel had looked them
    up before: 40 datasets removed one after the other. The kernel is told to forget the other
    views after the unlink's reply (telling it before would wait on the directory lock the
    unlink holds), so each view is given a moment to go. (The datasets are made by the request
    `h5fs create --sparse` sends, the setxattr of user.h5fs.create on the parent, to keep the
    test short.)"""
    path = tmp_path / "rm.h5"
    base = make_base(path, "latest")
    mp = mount(path, "rw")
    lingering = []
    for i in range(40):
        name = f"S{i}"
        request = {"name": name, "shape": [6, 6], "dtype": "<f8", "chunks": [3, 4], "maxshape": None,
                   "filters": "none", "fill": None, "layout": "sparse"}
        os.setxattr(mp, "user.h5fs.create", json.dumps(request).encode())
        views = [name, f"{name}.npy", f"{name}.points.npy"]
        for view in views:
            os.stat(mp / view)   # the kernel knows each view
        os.unlink(mp / name)
        if not wait_until(lambda: not any(os.path.exists(mp / view) for view in views), timeout=2):
            lingering += [view for view in views if os.path.exists(mp / view)]
    assert not lingering, f"views still found right after rm of their dataset: {lingering}"
    assert sorted(os.listdir(mp)) == ["g", "x", "x.npy"]
    run_h5fs("umount", mp, check=True)
    verify(path, set(), base)


# -- resizing along the unlimited first dimension ------------------------------------------------

@pytest.mark.parametrize("index", ["extensible-array", "btree-v2"])
def test_truncate_and_grow(mount, tmp_path, index):
    _, _, maxshape = INDEXES[index]
    shape, chunk, fill = (10, 7), (4, 3), 2.5
    path = tmp_path / f"resize-{index}.h5"
    base = make_base(path, "latest")
    mp = mount(path, "rw")
    s = create(mp, "S", shape, "<f4", chunk, (None, 7) if index == "extensible-array" else maxshape, fill,
               filters=FILTERS if index == "btree-v2" else None)
    model = Model(shape, "<f4", fill)
    # a sparse dataset of fixed dimensions cannot grow: EFBIG
    f = create(mp, "F", (6, 4), "<i2", (4, 4), fill=-1)
    fixed = Model((6, 4), "<i2", -1)
    for attempt in (lambda: os.truncate(f, 8 * 8), lambda: pwrite(f, b"\x01\x00", 6 * 8, fsync=False)):
        with pytest.raises(OSError) as ei:
            attempt()
        assert ei.value.errno == errno.EFBIG
    check_views(mp, "F", fixed, tmp_path)
    rng = np.random.default_rng(11)
    values = rng.integers(1, 100, shape).astype("<f4")
    values[rng.random(shape) < 0.4] = fill
    pwrite(s, values.tobytes(), 0, fsync=True)
    model.write(0, values.tobytes())
    check_views(mp, "S", model, tmp_path)
    row = 7 * 4
    # shrink with truncate(1): rows 5.. go, the chunk row cut in two keeps rows 4
    subprocess.run(["truncate", "-s", str(5 * row), str(s)], check=True)
    model.resize(5)
    assert fact(s, "shape") == "(5, 7)"
    check_views(mp, "S", model, tmp_path)
    # grow again: the new rows, the cut chunk's rows included, read as the fill value, undefined
    subprocess.run(["truncate", "-s", str(13 * row), str(s)], check=True)
    model.resize(13)
    assert fact(s, "shape") == "(13, 7)"
    check_views(mp, "S", model, tmp_path)
    # writing past the end grows too
    pwrite(s, np.array([1, 2], "<f4").tobytes(), 14 * row + 5 * 4, fsync=True)
    model.resize(15)
    model.write(14 * row + 5 * 4, np.array([1, 2], "<f4").tobytes())
    check_views(mp, "S", model, tmp_path)
    # not whole rows: EINVAL, nothing changes
    with pytest.raises(OSError) as ei:
        os.truncate(s, 5 * row + 4)
    assert ei.value.errno == errno.EINVAL
    # to nothing: every chunk freed
    os.truncate(s, 0)
    model.resize(0)
    check_views(mp, "S", model, tmp_path)
    assert storage(s) == 0
    subprocess.run(["truncate", "-s", str(6 * row), str(s)], check=True)
    model.resize(6)
    pwrite(s, np.array([8], "<f4").tobytes(), 5 * row, fsync=True)
    model.write(5 * row, np.array([8], "<f4").tobytes())
    check_views(mp, "S", model, tmp_path)
    run_h5fs("umount", mp, check=True)
    verify(path, {"/S", "/F"}, base)
    assert stored_chunks(path, "/S")[1] == model.chunks(chunk)
    ro = mount(path, "ro")
    check_views(ro, "S", model, tmp_path)
    check_views(ro, "F", fixed, tmp_path)
    assert fact(ro / "S", "shape") == "(6, 7)"


# -- crashes -----------------------------------------------------------------------------------

CRASH_SHAPE, CRASH_CHUNK = (240, 300), (40, 50)
KILLS = int(os.environ.get("H5FS_CRASH_ROUNDS", "1"))   # kills per crash test (test_crash.py's knob)


def _points_models(count: int, n_points: int) -> list[np.ndarray]:
    rng = np.random.default_rng(17)
    out = []
    for k in range(count):
        flat = rng.choice(prod(CRASH_SHAPE), n_points, replace=False)
        pts = np.empty(n_points, [("index", "<u8", (2,)), ("value", "<f4")])
        pts["index"] = np.stack(np.unravel_index(flat, CRASH_SHAPE), axis=1)
        pts["value"] = (k + 1) * 1000 + rng.integers(1, 999, n_points)
        out.append(pts)
    return out


def _model_of(pts: np.ndarray) -> Model:
    m = Model(CRASH_SHAPE, "<f4")
    m.set_points(pts)
    return m


def _sparse_now(mp: Path, name: str, shape, dtype) -> tuple[bytes, np.ndarray]:
    arr = np.load(mp / f"{name}.npy", allow_pickle=False)
    assert arr.shape == shape and arr.dtype == np.dtype(dtype)
    return arr.tobytes(), np.load(mp / f"{name}.points.npy", allow_pickle=False)


def _after_kill(path: Path, base) -> None:
    """Right after the kill h5py reads the ordinary objects; `h5fs check --repair` finishes what
    the crash interrupted and finds the file sound; a plain check then agrees."""
    got = read_non_sparse(path, {"/S"})
    assert np.array_equal(got["/g/dense"], base["/g/dense"])
    proc = run_h5fs("check", "--repair", path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run_h5fs("check", path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_kill_during_points_replacement(mount, tmp_path):
    """`cp` of a 40,000-point file over S.points.npy in a loop, the daemon killed at a random
    instant: the defined set is the last replaced one or the one being replaced."""
    path = tmp_path / "crash-points.h5"
    base = make_base(path, "latest")
    models = _points_models(4, 40_000)
    files = []
    for k, pts in enumerate(models):
        files.append(tmp_path / f"p{k}.npy")
        np.save(files[-1], pts)
    mp = mount(path, "rw")
    create(mp, "S", CRASH_SHAPE, "<f4", CRASH_CHUNK, (None, CRASH_SHAPE[1]), filters=FILTERS)
    assert cp(files[0], mp / "S.points.npy").returncode == 0
    state = {"done": 0, "pending": None, "count": 0}
    rng = random.Random(1)
    for r in range(KILLS):
        if r:
            mp = mount(path, "rw")
        pid = int(os.getxattr(mp, "user.h5fs.pid"))
        stop = threading.Event()

        def loop():
            k = state["done"]
            while not stop.is_set():
                k = (k + 1) % len(models)
                state["pending"] = k
                if cp(files[k], mp / "S.points.npy").returncode != 0:
                    return
                state["done"], state["pending"] = k, None
                state["count"] += 1

        worker = threading.Thread(target=loop)
        worker.start()
        time.sleep(rng.uniform(0.5, 1.2))
        kill_daemon(mp, pid)
        stop.set()
        worker.join(60)
        assert not worker.is_alive()
        _after_kill(path, base)
        ro = mount(path, "ro")
        raw, pts = _sparse_now(ro, "S", CRASH_SHAPE, "<f4")
        run_h5fs("umount", ro, check=True)
        candidates = [state["done"]] + ([state["pending"]] if state["pending"] is not None else [])
        matched = [k for k in candidates if raw == bytes(_model_of(models[k]).raw)]
        assert matched, f"the data is none of the sets {candidates} (last replaced, being replaced)"
        want = _model_of(models[matched[0]]).points()
        assert np.array_equal(pts["index"], want["index"]) and np.array_equal(pts["value"], want["value"])
        state["done"], state["pending"] = matched[0], None
    assert state["count"] >= KILLS, "the kills did not come while replacements went on"
    mp = mount(path, "rw")
    m = _model_of(models[state["done"]])
    check_views(mp, "S", m, tmp_path)
    run_h5fs("umount", mp, check=True)
    verify(path, {"/S"}, base)
    assert stored_chunks(path, "/S")[1] == m.chunks(CRASH_CHUNK)


def test_kill_during_fsynced_random_writes(mount, tmp_path):
    """Random fsync'd writes through S (crash_support's workload: each value tells which write
    put it there), the daemon killed at a random instant: every element holds its old value or
    one a write put there, and every fsync'd write is present."""
    n = 20_000
    path = tmp_path / "crash-writes.h5"
    base = make_base(path, "earliest")
    mp = mount(path, "rw")
    s = create(mp, "S", (n,), "<f8", (500,), (None,), filters="values=gzip:1")
    pts = np.empty(n, [("index", "<u8", (1,)), ("value", "<f8")])
    pts["index"][:, 0] = np.arange(n)
    pts["value"] = initial(n)   # every element defined, none the fill value (0)
    src = tmp_path / "initial.npy"
    np.save(src, pts)
    assert cp(src, mp / "S.points.npy").returncode == 0
    assert fact(s, "defined") == str(n)
    acked: list[tuple[int, int, int]] = []
    rng = random.Random(2)
    for r in range(KILLS):
        if r:
            mp = mount(path, "rw")
        pid = int(os.getxattr(mp, "user.h5fs.pid"))
        work = Workload(n, seed=r, first=r * 100_000 + 1)

        def run():
            try:
                work.run(mp / "S", 10**6)
            except OSError:
                pass

        writer = threading.Thread(target=run)
        writer.start()
        time.sleep(rng.uniform(0.2, 0.8))
        kill_daemon(mp, pid)
        writer.join(30)
        assert not writer.is_alive()
        acked += work.acked
        _after_kill(path, base)
        ro = mount(path, "ro")
        raw, points = _sparse_now(ro, "S", (n,), "<f8")
        run_h5fs("umount", ro, check=True)
        values = np.frombuffer(raw, "<f8")
        check_promise(values, acked, n)
        assert points.dtype == np.dtype([("index", "<u8", (1,)), ("value", "<f8")])
        assert len(points) == n and np.array_equal(points["index"][:, 0], np.arange(n))
        assert points["value"].tobytes() == raw
    assert acked, "no write was acknowledged before the kills"
    run_h5fs("check", path, check=True)
    verify(path, {"/S"}, base)
