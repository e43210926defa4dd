"""Reads through a real mount of every layout and chunk shape, ranks 1-4, against h5py's bytes:
chunks tiled on every axis, partial edge chunks, chunks spanning whole rows, chunks larger than
the dataset, chunks never allocated (fill value), every chunk index (libver earliest: v1
B-tree; latest: single chunk, implicit, fixed array, extensible array, v2 B-tree), odd element
sizes, chunks stored in a random order; filtered, contiguous and virtual datasets beside them. Random offsets and sizes with
os.pread on the raw view and on the `.npy` view."""

from __future__ import annotations

import os
import random

import h5py
import numpy as np
import pytest

from conftest import make_h5, saved
from remote_support import range_server, read_mount, s3_server  # noqa: F401 (fixtures)

# (shape, chunks): tiled on every axis, partial edges, whole rows, larger than the dataset
SHAPES = [
    ((1000,), (64,)), ((100,), (256,)), ((37, 53), (8, 16)), ((64, 256), (16, 256)), ((20, 30), (64, 64)),
    ((300, 50), (7, 9)), ((50, 40), (50, 7)), ((9, 10, 11), (4, 3, 5)), ((16, 8, 32), (4, 8, 32)),
    ((5, 6, 7, 8), (2, 3, 4, 5)), ((512, 1024), (64, 128)), ((32, 64, 64), (8, 16, 16)),
    ((300, 10), (100, 2000)),   # a part spread thin over a chunk far wider than the dataset
]
DTYPES = ["<i4", "<f8", "u1", ">i2", np.dtype([("a", "<i4"), ("b", "u1"), ("c", "<i2")])]   # the last: 7 bytes
RNG = np.random.default_rng(7)


def _values(shape, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    raw = RNG.integers(0, 256, (int(np.prod(shape)), dtype.itemsize), dtype=np.uint8)
    if dtype.kind == "f":
        return RNG.standard_normal(shape).astype(dtype)
    return raw.view(dtype).reshape(shape)


def _implicit(f: h5py.File, name: str, data: np.ndarray, chunks, maxshape) -> None:
    """Early allocation with fixed maximum dimensions: libhdf5's implicit index."""
    space = h5py.h5s.create_simple(data.shape, maxshape)
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk(chunks)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    h5py.h5d.create(f.id, name.encode(), h5py.h5t.py_create(data.dtype), space, dcpl=dcpl)
    f[name][...] = data


def build(f: h5py.File, latest: bool) -> None:
    for i, (shape, chunks) in enumerate(SHAPES):
        dtype = DTYPES[i % len(DTYPES)]
        data = _values(shape, dtype)
        bigger = tuple(max(s, c) for s, c in zip(shape, chunks))   # h5py wants chunks within maxshape
        f.create_dataset(f"fixed{i}", data=data, chunks=chunks, maxshape=bigger)
        f.create_dataset(f"grow{i}", data=data, chunks=chunks, maxshape=(None,) + bigger[1:])
        f.create_dataset(f"free{i}", data=data, chunks=chunks, maxshape=(None,) * len(shape))
        # chunks never allocated: only a corner written, the rest is the fill value
        fill = np.frombuffer(b"\xa5" * np.dtype(dtype).itemsize, dtype)[0]
        holes = f.create_dataset(f"holes{i}", shape, dtype, chunks=chunks, maxshape=bigger, fillvalue=fill)
        corner = tuple(slice(0, max(1, s // 2)) for s in shape)
        holes[corner] = data[corner]
        if latest:
            _implicit(f, f"implicit{i}", data, chunks, bigger)
    # chunks written one by one in a random order: runs of neighbours in the file are broken
    # at random (a read of whole chunks takes one preadv per run)
    scrambled = f.create_dataset("scrambled", (64, 256), "<i4", chunks=(8, 16))
    data = _values((64, 256), "<i4")
    corners = [(r, c) for r in range(0, 64, 8) for c in range(0, 256, 16)]
    for r, c in random.Random(3).sample(corners, len(corners)):
        scrambled[r:r + 8, c:c + 16] = data[r:r + 8, c:c + 16]
    f.create_dataset("single", data=_values((30, 40), "<i4"), chunks=(30, 40))
    f.create_dataset("gzip", data=np.arange(37 * 53, dtype="<i4").reshape(37, 53) % 11, chunks=(8, 16),
                     compression="gzip", shuffle=True)
    f.create_dataset("contiguous", data=_values((37, 53), "<f8"))
    # virtual: two chunked sources side by side, one contiguous below them
    a, b, c = _values((20, 30), "<i4"), _values((20, 25), "<i4"), _values((7, 55), "<i4")
    f.create_dataset("va", data=a, chunks=(6, 7))
    f.create_dataset("vb", data=b, chunks=(20, 5))
    f.create_dataset("vc", data=c)
    layout = h5py.VirtualLayout((30, 55), "<i4")
    layout[0:20, 0:30] = h5py.VirtualSource(f["va"])
    layout[0:20, 30:55] = h5py.VirtualSource(f["vb"])
    layout[22:29, :] = h5py.VirtualSource(f["vc"])
    f.create_virtual_dataset("virtual", layout, fillvalue=-1)
    # strided mappings (an unfiltered and a filtered source interleaved by columns), overlapping
    # ones (the later wins), and a 1-D source behind a 2-D block (paired element by element)
    f.create_dataset("sa", data=_values((20, 30), "<f8"), chunks=(3, 7))
    f.create_dataset("sb", data=_values((20, 30), "<f8"), chunks=(6, 6), compression="gzip")
    f.create_dataset("flat", data=_values((120,), "<f8"))
    layout = h5py.VirtualLayout((25, 60), "<f8")
    layout[0:20, ::2] = h5py.VirtualSource(f["sa"])
    layout[0:20, 1::2] = h5py.VirtualSource(f["sb"])
    layout[10:20, 10:40] = h5py.VirtualSource(f["sa"])[5:15, 0:30]
    layout[21:25, 7:37] = h5py.VirtualSource(f["flat"])
    f.create_virtual_dataset("virtual_strided", layout, fillvalue=0.5)


def _random_reads(fd: int, want: bytes, rng: random.Random, n: int) -> None:
    size = len(want)
    assert os.pread(fd, size + 100, 0) == want
    step = rng.choice([1000, 4096, size // 5 + 1])   # a sequential reader (reads ahead)
    for off in range(0, size, step):
        assert os.pread(fd, step, off) == want[off:off + step], (off, step)
    for _ in range(n):
        off = rng.randrange(size + 1)
        length = rng.choice([1, 3, 7, 64, 1000, rng.randrange(1, size + 2), size])
        assert os.pread(fd, length, off) == want[off:off + length], (off, length)


@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_random_reads_match_h5py(tmp_path, read_mount, libver):
    path = make_h5(tmp_path / "shapes.h5", lambda f: build(f, libver == "latest"), libver=libver)
    mp = read_mount(path)
    rng = random.Random(libver)
    with h5py.File(path, "r") as f:
        names = sorted(f)
        indexes = set()
        for name in names:
            ds = f[name]
            # libhdf5 2.0 reading a whole virtual dataset leaves some unmapped elements 0 instead
            # of the fill value (next to a mapping of another rank); row by row it fills them
            arr = np.concatenate([ds[i:i + 1] for i in range(len(ds))]) if ds.is_virtual else ds[()]
            if ds.chunks is not None and not ds.is_virtual:
                indexes.add(os.getxattr(mp / name, "user.h5fs.index").decode())
            for view, want in ((name, arr.tobytes()), (name + ".npy", saved(arr))):
                # O_DIRECT: every read reaches the daemon as asked (no page cache, no read-ahead)
                fd = os.open(mp / view, os.O_RDONLY | os.O_DIRECT)
                try:
                    _random_reads(fd, want, rng, 60)
                finally:
                    os.close(fd)
    expected = {"earliest": 1, "latest": 5}[libver]
    assert len(indexes) == expected, indexes


def test_unflushed_write_reads_back(tmp_path, mount):
    """Writes still in memory (dirty chunks, not in the file) read back through the direct path:
    into a stored chunk, into a chunk never allocated, across chunk edges."""
    data = np.arange(60 * 70, dtype="<i4").reshape(60, 70)

    def fn(f):
        d = f.create_dataset("d", (60, 70), "<i4", chunks=(16, 16), fillvalue=-5)
        d[:30] = data[:30]
    path = make_h5(tmp_path / "w.h5", fn, libver="latest")
    mp = mount(path, "rw")
    want = np.full((60, 70), -5, "<i4")
    want[:30] = data[:30]
    fd = os.open(mp / "d", os.O_RDWR)
    try:
        for row, col, values in ((3, 5, [1, 2, 3]), (40, 60, [7] * 9), (15, 14, list(range(20))), (59, 69, [9])):
            assert os.pwrite(fd, np.asarray(values, "<i4").tobytes(), (row * 70 + col) * 4) == 4 * len(values)
            want.reshape(-1)[row * 70 + col:row * 70 + col + len(values)] = values
            assert os.pread(fd, want.nbytes, 0) == want.tobytes()
            off = (row * 70 + col - 3) * 4 + 1
            assert os.pread(fd, 50, off) == want.tobytes()[off:off + 50]
        os.fsync(fd)
        assert os.pread(fd, want.nbytes, 0) == want.tobytes()
    finally:
        os.close(fd)
    mount.unmount(mp)
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["d"][()], want)
