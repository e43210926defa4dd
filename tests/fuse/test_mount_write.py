"""Writes through a real read-write mount with real tools (dd, truncate, os.pwrite, numpy.memmap),
compared with a NumPy model of the edits; the file is then read whole by h5py, checked by
`h5fs check` and (libver earliest) read by h5dump."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import time
import zlib

import h5py
import numpy as np
import pytest

from conftest import LIBVERS, is_mounted, run_h5fs, tmpfs, wait_until
from crash_support import kill_daemon
from h5fs.format.messages.layout import INDEX_NAMES
from h5fs.model.file import H5File
from write_support import pwrite, verify_file


def dd(src: bytes, target, offset: int, tmp_path) -> None:
    """`dd conv=notrunc` of `src` into `target` at byte `offset`."""
    piece = tmp_path / "piece"
    piece.write_bytes(src)
    subprocess.run(["dd", f"if={piece}", f"of={target}", "bs=1", f"seek={offset}", "conv=notrunc",
                    "status=none"], check=True, timeout=60)


def error_of(fn, *args) -> int:
    try:
        fn(*args)
    except OSError as e:
        return e.errno
    return 0


@pytest.fixture(params=LIBVERS)
def simple(request, tmp_path):
    """A file with contiguous (written and never written), compact and 2-D datasets."""
    path = tmp_path / f"simple_{request.param}.h5"
    with h5py.File(path, "w", libver=request.param) as f:
        f.create_dataset("contig", data=np.arange(1000, dtype="<f8"))
        f.create_dataset("late", shape=(50, 3), dtype=">i4", fillvalue=-7)
        f.create_dataset("zeros", shape=(4096,), dtype="u1")
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        h5py.h5d.create(f.id, b"compact", h5py.h5t.STD_I16LE, h5py.h5s.create_simple((20,)), dcpl=dcpl)
        f["compact"][...] = np.arange(20, dtype="<i2")
        f["contig"].attrs["units"] = "m"
    return path, request.param


def test_overwrite_contiguous_and_compact(mount, simple, tmp_path):
    path, libver = simple
    model = {"contig": np.arange(1000, dtype="<f8"), "late": np.full((50, 3), -7, ">i4"),
             "zeros": np.zeros(4096, "u1"), "compact": np.arange(20, dtype="<i2")}
    mp = mount(path, "rw")
    # dd of whole and partial elements at odd offsets
    raw = bytearray(model["contig"].tobytes())
    raw[13:13 + 27] = bytes(range(27))
    dd(bytes(range(27)), mp / "contig", 13, tmp_path)
    model["contig"] = np.frombuffer(bytes(raw), "<f8")
    # os.pwrite into storage never allocated: the rest keeps the fill value
    pwrite(mp / "late", np.array([[1, 2, 3]], ">i4").tobytes(), 12 * 10)
    model["late"][10] = [1, 2, 3]
    pwrite(mp / "zeros", b"\xff" * 100, 3996)
    model["zeros"][3996:] = 0xFF
    # numpy.memmap over the .npy view (a shared writable mapping) and the raw view
    m = np.lib.format.open_memmap(mp / "compact.npy", mode="r+")
    m[5:8] = [-1, -2, -3]
    m.flush()
    del m
    model["compact"][5:8] = [-1, -2, -3]
    r = np.memmap(mp / "contig", dtype="<f8", mode="r+")
    r[-1] = 42.5
    r.flush()
    del r
    model["contig"] = model["contig"].copy()
    model["contig"][-1] = 42.5
    # reads through the mount see the writes at once, in both views
    for name, want in model.items():
        assert (mp / name).read_bytes() == want.tobytes()
        assert np.array_equal(np.load(mp / f"{name}.npy"), want)
    run_h5fs("umount", mp, check=True)
    data = verify_file(path, h5dump=libver == "earliest")
    for name, want in model.items():
        assert data[name].tobytes() == want.tobytes(), name
    assert data["contig@units"] == "m"


def test_npy_header_is_read_only(mount, simple):
    path, _ = simple
    mp = mount(path, "rw")
    npy = mp / "contig.npy"
    header = npy.read_bytes()[:128]
    assert error_of(pwrite, npy, b"X", 10) == errno.EINVAL
    pwrite(npy, header[:16], 0)   # the header's own bytes may be written back
    assert npy.read_bytes()[:128] == header
    assert error_of(os.truncate, npy, 10) == errno.EINVAL
    log = mount.log_of(mp)
    assert "/contig.npy: a write into the .npy header" in log and ".npy.npy" not in log
    assert os.getxattr(npy, "user.h5fs.path") == b"/contig"
    run_h5fs("umount", mp, check=True)
    verify_file(path, h5dump=False)


def test_modes_and_read_only_mount(mount, simple):
    path, _ = simple
    mp = mount(path, "rw")
    assert stat.S_IMODE(os.stat(mp / "contig").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(mp).st_mode) == 0o755
    run_h5fs("umount", mp, check=True)
    ro = mount(path, "ro")
    assert stat.S_IMODE(os.stat(ro / "contig").st_mode) == 0o444
    assert error_of(pwrite, ro / "contig", b"x", 0) in (errno.EROFS, errno.EACCES)
    assert error_of(os.truncate, ro / "contig", 0) == errno.EROFS
    run_h5fs("umount", ro, check=True)


def test_one_writer_holds_the_lock(mount, simple, tmp_path):
    path, _ = simple
    mp = mount(path, "rw")
    with pytest.raises(OSError, match="lock"):
        h5py.File(path, "r")
    second = tmp_path / "second"
    second.mkdir()
    proc = run_h5fs("mount", path, second)
    assert proc.returncode != 0 and "in use by another process" in proc.stderr
    assert proc.stderr.count(str(path)) == 1, proc.stderr   # the file named once
    proc = run_h5fs("check", path)
    assert proc.returncode == 2 and proc.stderr.startswith(f"h5fs: {path}: the file is in use"), proc.stderr
    assert proc.stderr.count(str(path)) == 1 and proc.stdout == "", proc.stderr
    run_h5fs("umount", mp, check=True)
    with h5py.File(path, "r"):
        pass


def test_resize_errors(mount, simple):
    path, _ = simple
    mp = mount(path, "rw")
    # contiguous storage cannot grow; a size that is not whole rows is refused first
    assert error_of(os.truncate, mp / "contig", 8 * 2000) == errno.EFBIG
    assert error_of(pwrite, mp / "contig", b"x" * 16, 8 * 1000) == errno.EFBIG
    fd = os.open(mp / "contig", os.O_WRONLY)   # a write across the end: what fits, as write(2) does
    try:
        assert os.pwrite(fd, b"x" * 16, 8 * 999) == 8
        with pytest.raises(OSError) as err:
            os.pwrite(fd, b"y" * 8, 8 * 1000)
        assert err.value.errno == errno.EFBIG
    finally:
        os.close(fd)
    assert error_of(os.truncate, mp / "late", 13) == errno.EINVAL
    # nor shrink: `> contig` (O_TRUNC) is refused as not supported, not as a file too large
    assert error_of(os.truncate, mp / "contig", 8 * 10) == errno.ENOTSUP
    assert error_of(os.open, mp / "contig", os.O_WRONLY | os.O_TRUNC) == errno.ENOTSUP
    run_h5fs("umount", mp, check=True)
    data = verify_file(path, h5dump=False)
    want = np.arange(1000, dtype="<f8")
    want[999:] = np.frombuffer(b"x" * 8, "<f8")
    assert np.array_equal(data["contig"], want)


# -- chunked storage: every index type, with and without filters ----------------------------------

COLS = 37


def _create_chunked(f, name: str, index: str, filters: dict, rows: int) -> None:
    """A chunked int32 dataset of `rows` x COLS using chunk index `index`."""
    data = np.arange(rows * COLS, dtype="<i4").reshape(rows, COLS)
    chunks = (7, 8)
    if index == "single":
        f.create_dataset(name, data=data, chunks=data.shape, **filters)
    elif index == "implicit":
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk(chunks)
        dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        h5py.h5d.create(f.id, name.encode(), h5py.h5t.STD_I32LE, h5py.h5s.create_simple(data.shape), dcpl=dcpl)
        f[name][...] = data
    elif index == "fixed-array":
        f.create_dataset(name, data=data, chunks=chunks, **filters)
    elif index == "extensible-array":
        f.create_dataset(name, data=data, chunks=chunks, maxshape=(None, COLS), **filters)
    else:   # v1 (libver earliest) or v2 B-tree (two unlimited dimensions)
        f.create_dataset(name, data=data, chunks=chunks, maxshape=(None, None), **filters)


INDEXES = [("btree-v1", "earliest"), ("single", "latest"), ("implicit", "latest"), ("fixed-array", "latest"),
           ("extensible-array", "latest"), ("btree-v2", "latest")]
FILTERS = {"none": {}, "gzip": {"compression": "gzip", "compression_opts": 4, "shuffle": True}}
RESIZABLE = {"btree-v1", "extensible-array", "btree-v2"}


@pytest.mark.parametrize("filters", sorted(FILTERS))
@pytest.mark.parametrize("index,libver", INDEXES)
def test_random_edits_match_numpy(mount, tmp_path, index, libver, filters):
    """Random overwrites (partial elements too), appends and truncates through the mount, the
    same edits on a NumPy array; reads through the mount follow at once, h5py agrees at the end.
    H5FS_PROPERTY_OPS sets the length, H5FS_SEED another sequence."""
    if index == "implicit" and filters != "none":
        pytest.skip("libhdf5 uses the implicit index only for unfiltered data")
    path = tmp_path / f"{index}-{filters}.h5"
    rows = 40
    with h5py.File(path, "w", libver=libver) as f:
        _create_chunked(f, "d", index, FILTERS[filters], rows)
    with H5File.open(str(path)) as f:   # the index type under test is the one libhdf5 chose
        assert INDEX_NAMES[f.resolve("/d").layout.index.index_type] == index
    model = bytearray(np.arange(rows * COLS, dtype="<i4").tobytes())
    row = 4 * COLS
    # str hashes differ between processes: crc32 gives every run the same sequence (H5FS_SEED another)
    rng = np.random.default_rng(zlib.crc32(f"{index} {filters} {os.environ.get('H5FS_SEED', '')}".encode()))
    mp = mount(path, "rw")
    target = mp / "d"
    for _ in range(int(os.environ.get("H5FS_PROPERTY_OPS", "30"))):
        op = rng.choice(["write", "write", "write", "append", "truncate"] if index in RESIZABLE else ["write"])
        if op == "write":
            start = int(rng.integers(0, len(model)))
            size = int(rng.integers(1, min(3 * row, len(model) - start) + 1))
            data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
            pwrite(target, data, start, fsync=bool(rng.integers(0, 4) == 0))
            model[start:start + size] = data
        elif op == "append":
            data = rng.integers(0, 256, int(rng.integers(1, 3 * row)), dtype=np.uint8).tobytes()
            pwrite(target, data, len(model), fsync=False)
            model += data + bytes(-len(data) % row)   # the last row is completed with fill (0)
        else:
            new = int(rng.integers(1, len(model) // row + 3)) * row
            os.truncate(target, new)
            model = model[:new] + bytes(max(0, new - len(model)))
        assert target.read_bytes() == bytes(model)
    assert np.load(mp / "d.npy").tobytes() == bytes(model)
    run_h5fs("umount", mp, check=True)
    data = verify_file(path, h5dump=libver == "earliest")
    assert data["d"].tobytes() == bytes(model)


def test_closed_file_lands_without_fsync(mount, tmp_path):
    """Writes of a closed file reach the .h5 file within a few seconds: then a killed daemon
    loses nothing."""
    path = tmp_path / "late.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("d", shape=(1000,), chunks=(100,), dtype="<f8", compression="gzip")
    mp = mount(path, "rw")
    pid = int(os.getxattr(mp, "user.h5fs.pid"))
    values = np.linspace(0, 1, 1000)
    pwrite(mp / "d", values.tobytes(), 0, fsync=False)
    time.sleep(4)
    kill_daemon(mp, pid)
    data = verify_file(path, h5dump=False)
    assert np.array_equal(data["d"], values)


def test_unused_space_is_reused(mount, tmp_path):
    """Space libhdf5 left unused (a deleted dataset) is found after mount and new data goes
    there: the file does not grow."""
    path = tmp_path / "holes.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("big", data=np.ones(100_000))
        f.create_dataset("late", shape=(50_000,), dtype="<f8")
        f.create_dataset("after", data=np.arange(10))   # keeps big's space inside the file
    with h5py.File(path, "a") as f:
        del f["big"]
    size = os.path.getsize(path)
    mp = mount(path, "rw")
    deadline = time.monotonic() + 30
    while "unused space found" not in mount.log_of(mp):
        assert time.monotonic() < deadline, mount.log_of(mp)
        time.sleep(0.05)
    values = np.arange(50_000, dtype="<f8")
    pwrite(mp / "late", values.tobytes(), 0)
    run_h5fs("umount", mp, check=True)
    assert os.path.getsize(path) == size
    data = verify_file(path, h5dump=False)
    assert np.array_equal(data["late"], values)


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs: a disk that fills up."""
    with tmpfs(tmp_path / "disk", "4m") as where:
        yield where


def test_disk_full_answers_enospc_and_keeps_the_file(mount, small_disk):
    path = small_disk / "f.h5"
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("d", shape=(0, 1024), maxshape=(None, 1024), chunks=(16, 1024), dtype="<f8")
    mp = mount(path, "rw")
    rng = np.random.default_rng(0)
    durable = b""
    fd = os.open(mp / "d", os.O_WRONLY)
    try:
        with pytest.raises(OSError) as failure:
            while True:
                block = rng.random((64, 1024)).tobytes()   # 512 KiB a write, fsync'd
                os.pwrite(fd, block, len(durable))
                os.fsync(fd)
                durable += block
    finally:
        os.close(fd)
    assert failure.value.errno == errno.ENOSPC
    # what could not be written is still in memory: `h5fs umount` says so and keeps the mount
    proc = run_h5fs("umount", mp)
    assert proc.returncode == 1 and "No space left on device" in proc.stderr and is_mounted(mp)
    run_h5fs("umount", "-z", mp, check=True)   # the user gives up on it
    assert wait_until(lambda: not is_mounted(mp))
    data = verify_file(path, h5dump=True)
    assert data["d"].tobytes()[:len(durable)] == durable


def test_cp_onto_a_full_disk_fails_and_leaves_no_dataset(mount, small_disk, tmp_path):
    """`cp` of a .npy larger than the disk's free space: cp fails with ENOSPC (at the latest at
    its close) and no dataset is left, whatever the unmount then does; a copy that fits lands."""
    path = small_disk / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_group("g")
    big, small = tmp_path / "big.npy", tmp_path / "small.npy"
    np.save(big, np.random.default_rng(0).random(700_000))   # 5.6 MB on a 4 MiB disk
    np.save(small, np.arange(1000.0))
    mp = mount(path, "rw", "compression=none")
    done = subprocess.run(["cp", str(big), str(mp / "g")], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "No space left on device" in done.stderr, done.stderr
    assert sorted(os.listdir(mp / "g")) == []
    subprocess.run(["cp", str(small), str(mp / "g")], check=True)
    assert np.array_equal(np.load(mp / "g" / "small.npy"), np.arange(1000.0))
    run_h5fs("umount", mp, check=True)
    data = verify_file(path, h5dump=False)
    assert set(data) == {"g/small"}


def test_kernel_writeback_cache(mount, tmp_path):
    """With the kernel's writeback cache the kernel batches writes (and reads pages to fill
    partial ones) before they reach the daemon: the file must end up the same."""
    path = tmp_path / "wbc.h5"
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("d", data=np.zeros((300, 50), "<i2"), chunks=(16, 16), maxshape=(None, 50))
    model = np.zeros((300, 50), "<i2")
    mp = mount(path, "rw", "writeback_cache")
    m = np.memmap(mp / "d", dtype="<i2", mode="r+", shape=(300, 50))
    m[10:20, 5:9] = 7
    m.flush()
    del m
    model[10:20, 5:9] = 7
    pwrite(mp / "d", np.full(50 * 20, 3, "<i2").tobytes(), 300 * 100)   # 20 rows appended
    model = np.concatenate([model, np.full((20, 50), 3, "<i2")])
    assert (mp / "d").read_bytes() == model.tobytes()
    run_h5fs("umount", mp, check=True)
    data = verify_file(path, h5dump=True)
    assert np.array_equal(data["d"], model)


def test_kernel_writeback_cache_cp(mount, tmp_path):
    """With the writeback cache the kernel sends a file's pages in parallel requests, in any
    order: `cp` of .npy files (the header arriving with, before or after later pages) and of
    other files must still make whole datasets."""
    path = tmp_path / "wbc-cp.h5"
    with h5py.File(path, "w", libver="latest"):
        pass
    src = tmp_path / "src"
    src.mkdir()
    rng = np.random.default_rng(3)
    arrays = {f"a{i}": rng.random((n, 64)).astype("<f4") for i, n in enumerate((1, 1000, 40000, 100000))}
    for name, arr in arrays.items():
        np.save(src / f"{name}.npy", arr)
    blob = rng.integers(0, 256, 5_000_000, dtype=np.uint8).tobytes()
    (src / "blob.bin").write_bytes(blob)
    mp = mount(path, "rw", "writeback_cache", "compression=none")
    subprocess.run(["cp", *sorted(src.iterdir()), mp], check=True)
    for name, arr in arrays.items():
        assert np.array_equal(np.load(mp / f"{name}.npy"), arr)
    # a closed writer's bytes show in the dataset's other view (the kernel writes back at close)
    patch = np.full((10, 64), 7, "<f4")
    subprocess.run(["dd", f"of={mp / 'a2'}", "bs=2560", "seek=3", "conv=notrunc", "status=none"],
                   input=patch.tobytes(), check=True)
    arrays["a2"][30:40] = patch
    assert np.array_equal(np.load(mp / "a2.npy"), arrays["a2"])
    run_h5fs("umount", mp, check=True)
    data = verify_file(path, h5dump=True)
    for name, arr in arrays.items():
        assert np.array_equal(data[name], arr)
    assert data["blob.bin"].tobytes() == blob


def test_npy_pieces_in_any_order(mount, tmp_path):
    """A `.npy` written in pieces out of order (the header's own bytes among them, a later write
    over an earlier one) becomes the array the last writes say; one whose first bytes never came
    is refused at close and leaves nothing."""
    path = tmp_path / "order.h5"
    with h5py.File(path, "w", libver="latest"):
        pass
    dt = np.dtype([(f"f{i}", "<f4") for i in range(300)])   # a header of ~6 KiB: two pages
    arr = np.zeros(50, dt)
    arr["f7"] = np.arange(50)
    np.save(tmp_path / "a.npy", arr)
    raw = bytearray((tmp_path / "a.npy").read_bytes())
    mp = mount(path, "rw", "compression=none")
    fd = os.open(mp / "a.npy", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        stale = bytes(len(raw) - 9000)
        os.pwrite(fd, stale, 9000)                  # stale bytes first, rewritten below
        os.pwrite(fd, raw[4096:], 4096)             # the header's second page and the data
        os.pwrite(fd, raw[64:4096], 64)
        os.pwrite(fd, raw[:64], 0)                  # the header's start comes last
    finally:
        os.close(fd)
    assert np.array_equal(np.load(mp / "a.npy"), arr)
    fd = os.open(mp / "b.npy", os.O_WRONLY | os.O_CREAT, 0o644)
    os.pwrite(fd, raw[200:], 200)                   # never its first bytes
    with pytest.raises(OSError) as ei:
        os.close(fd)
    assert ei.value.errno == errno.EINVAL
    assert not (mp / "b.npy").exists() and not (mp / "b").exists()
    run_h5fs("umount", mp, check=True)
    data = verify_file(path, h5dump=False)
    assert set(data) == {"a"} and data["a"].tobytes() == arr.tobytes()


@pytest.mark.parametrize("filters", sorted(FILTERS))
def test_fio_verify(mount, tmp_path, filters):
    """fio's own random writes with checksums, fsync'd every 16, then read back and verified
    through the mount; then by h5py against what fio left in the mount."""
    path = tmp_path / f"fio-{filters}.h5"
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("d", shape=(4 << 20,), dtype="u1", chunks=(65536,), maxshape=(None,), **FILTERS[filters])
    mp = mount(path, "rw")
    proc = subprocess.run(["fio", "--name=verify", f"--filename={mp / 'd'}", "--rw=randwrite", "--bs=4k",
                           "--size=4m", "--verify=crc32c", "--do_verify=1", "--allow_file_create=0",
                           "--ioengine=psync", "--fsync=16", "--randseed=7", "--verify_state_save=0"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "err= 0" in proc.stdout, proc.stdout + proc.stderr
    seen = (mp / "d").read_bytes()
    run_h5fs("umount", mp, check=True)
    data = verify_file(path, h5dump=True)
    assert data["d"].tobytes() == seen


WRITER = """
import os, sys, numpy as np
path, first, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(seed)
fd = os.open(path, os.O_RDWR)
for _ in range(60):
    at = first + int(rng.integers(0, count - 512))
    data = rng.integers(0, 256, int(rng.integers(1, 512)), dtype=np.uint8).tobytes()
    os.pwrite(fd, data, at)
    assert os.pread(fd, len(data), at) == data, "a read after a write did not return the written bytes"
os.close(fd)
"""


def test_concurrent_writers(mount, tmp_path):
    """Processes writing different parts of one dataset and another dataset at once, each
    reading back what it wrote; the final file holds every process's last writes."""
    path = tmp_path / "many.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("a", shape=(1 << 16,), dtype="u1", chunks=(4096,), compression="gzip")
        f.create_dataset("b", shape=(1 << 16,), dtype="u1", chunks=(1000,))
    mp = mount(path, "rw")
    part = 1 << 14
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(mp / name), str(i * part), str(part), str(i)])
             for name in ("a", "b") for i in range(4)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    seen = {name: (mp / name).read_bytes() for name in ("a", "b")}
    run_h5fs("umount", mp, check=True)
    data = verify_file(path, h5dump=False)
    for name in ("a", "b"):
        assert data[name].tobytes() == seen[name]


def test_external_and_virtual_written_through(mount, tmp_path):
    """An external dataset is written into its raw data files; a virtual dataset into its
    sources in the same file; a source in another file answers EROFS."""
    path = tmp_path / "through.h5"
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f.create_dataset("s", data=np.zeros(10, "<i4"))
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("ext", shape=(100,), dtype="<i4", external=[(str(tmp_path / "raw0.bin"), 0, 200),
                                                                  (str(tmp_path / "raw1.bin"), 16, 200)])
        f["ext"][...] = np.arange(100, dtype="<i4")
        f.create_dataset("a", data=np.zeros(10, "<i4"))
        f.create_dataset("b", data=np.zeros(10, "<i4"), chunks=(4,), compression="gzip")
        layout = h5py.VirtualLayout(shape=(20,), dtype="<i4")
        layout[:10] = h5py.VirtualSource(".", "a", shape=(10,))
        layout[10:] = h5py.VirtualSource(".", "b", shape=(10,))
        f.create_virtual_dataset("v", layout)
        far = h5py.VirtualLayout(shape=(10,), dtype="<i4")
        far[:] = h5py.VirtualSource(str(other), "s", shape=(10,))
        f.create_virtual_dataset("far", far)
    mp = mount(path, "rw")
    pwrite(mp / "ext", np.arange(40, 60, dtype="<i4").tobytes() * 1, 4 * 40)   # across the two files
    pwrite(mp / "v", np.arange(5, 15, dtype="<i4").tobytes(), 4 * 5)          # across both sources
    assert error_of(pwrite, mp / "far", b"\0\0\0\0", 0) == errno.EROFS
    run_h5fs("umount", mp, check=True)
    data = verify_file(path, h5dump=False)
    want_ext = np.arange(100, dtype="<i4")
    want_ext[40:60] = np.arange(40, 60)
    assert np.array_equal(data["ext"], want_ext)
    want_v = np.zeros(20, "<i4")
    want_v[5:15] = np.arange(5, 15)
    assert np.array_equal(data["v"], want_v) and np.array_equal(data["b"][:5], np.arange(10, 15))
    assert "other.h5" in mount.log_of(mp)


def test_broken_dataset_answers_eio_and_is_left_alone(mount, tmp_path):
    """A write that must read a chunk the file holds corrupt answers EIO and changes nothing;
    the other datasets stay writable."""
    path = tmp_path / "broken.h5"
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("bad", data=np.arange(1000, dtype="<f8"), chunks=(100,), compression="gzip")
        f.create_dataset("good", data=np.zeros(10, "<i4"))
        info = f["bad"].id.get_chunk_info(3)
    raw = bytearray(path.read_bytes())
    raw[info.byte_offset:info.byte_offset + 16] = b"\xff" * 16   # chunk 3's deflate stream
    path.write_bytes(bytes(raw))
    mp = mount(path, "rw")
    assert error_of(pwrite, mp / "bad", b"\0" * 8, 8 * 305) == errno.EIO
    pwrite(mp / "good", np.arange(10, dtype="<i4").tobytes(), 0)
    run_h5fs("umount", mp, check=True)
    assert path.read_bytes()[info.byte_offset:info.byte_offset + info.size] == \
        bytes(raw[info.byte_offset:info.byte_offset + info.size])
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["good"][()], np.arange(10))
        assert np.array_equal(f["bad"][:300], np.arange(300))
    assert "bad" in mount.log_of(mp)


def test_views_agree_at_once(mount, tmp_path):
    """A write through one view of a dataset shows at once through the other, however the pages
    came to the kernel: a `.npy` written by np.save (its pages cached as written) changed through
    `D` before any open of it, then read by a descriptor kept open while `D` is changed by pwrite
    and by np.memmap, over and over; and a `.npy` grown by a write past its end shows its new
    shape in its header."""
    path = tmp_path / "v.h5"
    h5py.File(path, "w", libver="latest").close()
    mp = mount(path, "rw")
    want = np.random.default_rng(3).standard_normal((300, 100))
    np.save(mp / "d.npy", want)
    reader = None
    try:
        for round_ in range(3):
            fd = os.open(mp / "d", os.O_WRONLY)
            try:
                os.pwrite(fd, np.full((10, 100), 7.0 + round_).tobytes(), (50 + round_) * 100 * 8)
            finally:
                os.close(fd)
            want[50 + round_:60 + round_] = 7.0 + round_
            if reader is None:
                reader = os.open(mp / "d.npy", os.O_RDONLY)
            size = os.fstat(reader).st_size
            assert os.pread(reader, size, 0)[-want.nbytes:] == want.tobytes(), round_
            m = np.memmap(mp / "d", dtype="<f8", mode="r+", shape=want.shape)
            m[200:210] = -1.0 - round_
            m.flush()
            del m
            want[200:210] = -1.0 - round_
            assert os.pread(reader, size, 0)[-want.nbytes:] == want.tobytes(), round_
    finally:
        if reader is not None:
            os.close(reader)
    assert np.array_equal(np.load(mp / "d.npy"), want)
    np.save(mp / "g.npy", np.zeros((10, 5), "<f4"))
    assert np.load(mp / "g.npy").shape == (10, 5)
    size = os.path.getsize(mp / "g.npy")
    fd = os.open(mp / "g.npy", os.O_WRONLY)
    try:
        os.pwrite(fd, np.full(5, 9, "<f4").tobytes(), size)
    finally:
        os.close(fd)
    grown = np.load(mp / "g.npy")
    assert grown.shape == (11, 5) and (grown[10] == 9).all()
    mount.unmount(mp)
    found = verify_file(path, h5dump=False)
    assert np.array_equal(found["d"], want) and found["g"].shape == (11, 5)


@pytest.mark.parametrize("libver", LIBVERS)
def test_writes_update_the_modification_time(mount, tmp_path, libver):
    """A write changes the dataset's modification time where its header keeps one: stat shows
    it at once, the header has it after the flush (a later mount shows it), so `rsync -a` and
    `make` see the change."""
    path = tmp_path / "t.h5"
    with h5py.File(path, "w", libver=libver) as f:
        f.create_dataset("d", data=np.arange(1000, dtype="<i4"), track_times=True)
        f.create_dataset("c", data=np.arange(1000, dtype="<i4"), chunks=(100,), maxshape=(None,),
                         track_times=True)
    mp = mount(path, "rw")
    for name in ("d", "c"):
        os.utime(mp / name, ns=(0, 978307200 * 10**9))   # 2001-01-01
        assert os.stat(mp / name).st_mtime_ns == 978307200 * 10**9
    before = time.time()
    for name in ("d", "c"):
        pwrite(mp / name, np.full(3, -1, "<i4").tobytes(), 40, fsync=False)
        assert os.stat(mp / name).st_mtime >= int(before), name
    os.truncate(mp / "c", 8000)
    assert os.stat(mp / "c").st_mtime >= int(before)
    mount.unmount(mp)
    verify_file(path, h5dump=libver == "earliest")
    mp = mount(path, "ro")
    for name in ("d", "c"):
        assert os.stat(mp / name).st_mtime >= int(before), name
