"""The FUSE adapter against the kernel: inodes released on forget, per-open handles, readdir
snapshots, st_blocks counted in the background and invalidated, `.npy` sizes as numpy's."""

from __future__ import annotations

import os
import subprocess
import threading

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_h5, saved, wait_until
from h5fs.model.npy_header import npy_header, npy_header_size


def fact(mp, name: str) -> int:
    return int(os.getxattr(mp, "user.h5fs." + name))


# -- the .npy header: numpy's own, its size known without building it -------------------------

DTYPES = ["<i4", ">i8", "u1", "?", "<f2", ">f4", "<c16", "S6", "<U7", "V5", "<M8[s]", "<m8[ms]",
          [("id", "<i4"), ("val", "<f8"), ("tag", "S3")],
          [("pos", "<f4", (3,)), ("n", ">u2")],
          [("a", [("x", "<i2"), ("y", "<i2")]), ("b", "u1")],
          np.dtype({"names": ["a", "b"], "formats": ["<i4", "<f8"], "offsets": [4, 16], "itemsize": 32}),
          np.dtype([("a", "<i4"), ("b", "<f4")], align=True),
          [("βeta", "<i4")],                       # latin-1: format 1.0
          [("\u4e2d\u6587", "<f8")],               # not latin-1: format 3.0
          [(f"field{i:04d}", "<i4") for i in range(3000)]]  # header over 64 KiB: format 2.0


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[:24])
@pytest.mark.parametrize("shape", [(), (0,), (7,), (2, 3), (10**12, 0), (0, 12345678901), (1,) * 9])
def test_npy_header_is_numpys(dtype, shape):
    dtype = np.dtype(dtype)
    data = saved(np.zeros(shape, dtype))
    header = npy_header(dtype, shape)
    assert data[:len(header)] == header
    assert len(data) == len(header) + np.zeros(shape, dtype).nbytes
    assert npy_header_size(dtype, shape) == len(header)


@settings(max_examples=150, deadline=None)
@given(dtype=st.sampled_from(DTYPES[:12]),
       first=st.integers(0, 10**12), rest=st.lists(st.integers(0, 9), max_size=4), rank0=st.booleans(),
       names=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=4, unique=True))
def test_npy_header_size_for_any_shape(dtype, first, rest, rank0, names):
    """Every padding case (a header that ends exactly on 64 bytes gets 64 more), descr texts of
    any length, any shape: the computed size is the length of numpy's header."""
    shape = () if rank0 else (first, *rest)
    if np.prod(shape, dtype=object) > 10**5:
        shape += (0,)  # np.save must not write terabytes
    for dt in (np.dtype(dtype), np.dtype([(n, dtype) for n in names])):
        data = saved(np.zeros(shape, dt))
        assert npy_header_size(dt, shape) == len(data) - np.zeros(shape, dt).nbytes
        assert data.startswith(npy_header(dt, shape))


def test_npy_files_are_what_numpy_saves(mount, tmp_path, libver):
    """st_size of `D.npy` and its bytes are those of `np.save` of h5py's data, for many dtypes."""
    arrays = {
        "i4": np.arange(24, dtype="<i4").reshape(2, 3, 4), "be_i8": np.arange(10, dtype=">i8"),
        "u1": np.arange(256, dtype="u1"), "f2": np.linspace(0, 1, 9, dtype="<f2"),
        "be_f4": np.linspace(0, 1, 33, dtype=">f4").reshape(3, 11), "c8": np.arange(5, dtype="<c8") * 1j,
        "bool": np.array([True, False, True]), "scalar": np.float64(42.5), "empty": np.zeros((0, 3), "<i2"),
        "str": np.array([b"alpha", b"beta"], dtype="S6"), "long": np.arange(1000, dtype="<u2"),
        "compound": np.array([(i, i / 2, b"n%d" % i) for i in range(6)],
                             dtype=[("id", "<i4"), ("val", "<f8"), ("tag", "S3")]),
        "nested": np.zeros(4, dtype=[("pos", "<f4", (3,)), ("c", [("x", "<i2"), ("y", "<i2")])]),
        "wide": np.zeros(3, dtype=[(f"f{i:03d}", "<i4") for i in range(200)]),
    }

    def build(f):
        for name, arr in arrays.items():
            f[name] = arr
        f.create_dataset("chunked", data=np.arange(5000, dtype="<f8").reshape(50, 100), chunks=(10, 10),
                         compression="gzip")

    h5 = make_h5(tmp_path / f"dtypes_{libver}.h5", build, libver)
    mp = mount(h5)
    with h5py.File(h5, "r") as f:
        for name in f:
            want = saved(f[name][()])
            path = mp / (name + ".npy")
            assert os.stat(path).st_size == len(want), name
            assert path.read_bytes() == want, name


# -- inodes: released when the kernel forgets them ----------------------------------------------

def test_forget_releases_inodes(mount, tmp_path):
    def build(f):
        for g in range(4):
            grp = f.create_group(f"g{g}")
            for i in range(500):
                grp.create_dataset(f"d{i:03d}", data=np.int32(i))
        f["g0"]["d000"].attrs["a"] = 1
        f["alias"] = f["g0"]["d000"]  # a hard link: one inode for both names

    mp = mount(make_h5(tmp_path / "many.h5", build, "latest"))
    subprocess.run(["find", str(mp), "-ls"], check=True, capture_output=True)
    peak = fact(mp, "inodes")
    assert peak >= 4 * 500 * 2  # every dataset's raw and .npy views
    alias = os.stat(mp / "alias")
    assert alias.st_ino == os.stat(mp / "g0" / "d000").st_ino

    with open("/proc/sys/vm/drop_caches", "w") as fh:
        fh.write("2\n")  # the kernel evicts dentries and inodes, and sends FORGETs
    assert wait_until(lambda: fact(mp, "inodes") < peak // 10), fact(mp, "inodes")
    # the same objects are found again, under (new) stable numbers; hard links still share one
    again = os.stat(mp / "g0" / "d000")
    assert again.st_ino == os.stat(mp / "alias").st_ino
    assert os.getxattr(mp / "alias", "user.a") == b"1"
    assert sorted(os.listdir(mp / "g3"))[:2] == ["d000", "d000.npy"]


# -- handles: one per open file, one listing snapshot per open directory -------------------------

def test_concurrent_readers_of_one_file(mount, tmp_path):
    """Readers of one compressed file at different places, interleaved request by request, each
    read right (each open has its own handle and prefetch state)."""
    data = np.arange(3_000_000, dtype="<f4").reshape(3000, 1000)

    def build(f):
        f.create_dataset("big", data=data, chunks=(100, 250), compression="gzip", shuffle=True)

    mp = mount(make_h5(tmp_path / "big.h5", build, "latest"))
    want = data.tobytes()
    errors = []

    def reader(start: int) -> None:
        with open(mp / "big", "rb", buffering=0) as fh:
            fh.seek(start)
            for pos in range(start, start + (4 << 20), 1 << 20):
                if fh.read(1 << 20) != want[pos:pos + (1 << 20)]:
                    errors.append(pos)

    threads = [threading.Thread(target=reader, args=(start,)) for start in (0, 4 << 20, 8 << 20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    np.testing.assert_array_equal(np.load(mp / "big.npy"), data)


def test_readdir_of_a_large_directory(mount, tmp_path):
    """Every entry exactly once, also for two listings of one directory read in lockstep (each
    open directory reads its own snapshot, resumed at its cookies)."""
    n = 2500

    def build(f):
        g = f.create_group("many")
        for i in range(n):
            g.create_dataset(f"d{i:05d}", data=np.int8(i % 100))
        g["soft"] = h5py.SoftLink("/many/d00000")

    mp = mount(make_h5(tmp_path / "big_dir.h5", build, "latest"))
    want = sorted([f"d{i:05d}" for i in range(n)] + [f"d{i:05d}.npy" for i in range(n)] + ["soft", "soft.npy"])
    first, second = os.scandir(mp / "many"), os.scandir(mp / "many")
    a, b = [], []
    for x, y in zip(first, second):
        a.append(x.name)
        b.append(y.name)
    a += [x.name for x in first]
    b += [y.name for y in second]
    assert sorted(a) == sorted(b) == want
    assert sorted(os.listdir(mp / "many")) == want


# -- st_blocks: counted when a stat asks -----------------------------------------------------------

def test_st_blocks_after_background_count(mount, tmp_path, libver):
    def build(f):
        g = f.create_group("chunked")
        for i in range(20):  # gzip, several chunks each: the index must be walked
            g.create_dataset(f"z{i:02d}", data=np.arange(4000 * (i + 1), dtype="<i4") % 7,
                             chunks=(500,), compression="gzip", maxshape=(None,) if i % 2 else None)
        f.create_dataset("direct", data=np.zeros(10000), chunks=(1000,), compression="gzip")
        big = f.create_group("big")   # links beyond the header: looked up in a worker
        for i in range(12):
            big.create_dataset(f"b{i:02d}", data=np.arange(700 * (i + 1)) % 5, chunks=(300,), compression="gzip")

    h5 = make_h5(tmp_path / f"blocks_{libver}.h5", build, libver)
    with h5py.File(h5, "r") as f:
        want = {name: (ds.id.get_storage_size() + 511) // 512 for name, ds in f["chunked"].items()}
        direct = (f["direct"].id.get_storage_size() + 511) // 512
        big = {name: (ds.id.get_storage_size() + 511) // 512 for name, ds in f["big"].items()}
    mp = mount(h5)
    assert os.stat(mp / "direct").st_blocks == direct  # a lookup waits for the walk
    # a small index is walked on the lookup's own worker trip
    assert {n: os.stat(mp / "big" / n).st_blocks for n in big} == big
    before = fact(mp, "invalidations")
    # readdirplus: estimates the kernel may not keep, and no count started (`rm -r` walks no index)
    names = os.listdir(mp / "chunked")
    assert len(names) == 40
    # the first stat of each asks again, and waits for its count
    assert {n: os.stat(mp / "chunked" / n).st_blocks for n in want} == want
    assert fact(mp, "invalidations") == before
    assert all(os.stat(mp / "chunked" / (n + ".npy")).st_blocks == 0 for n in want)
