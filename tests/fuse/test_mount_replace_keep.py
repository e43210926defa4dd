"""`cp y.npy D.npy` (and an atomic save: np.save to a temporary file, then os.replace; and
rsync) over an existing dataset D keeps what D is when y has D's dtype and fits its maximum
shape: layout, chunk shape and chunk index type, filters, maximum shape, fill value, attributes
and object header address stay, only the extent and the data change (h5py's `resize` and
write). An array that does not fit (dtype, byte order, rank, beyond the maximum shape, another
shape for contiguous data) gets a layout of its own, as before. libhdf5 is the judge of each
(h5py, the chunk index type from libhdf5's H5Dget_chunk_index_type), netCDF4 and xarray of a
netCDF file; after each, h5py reads the whole file and `h5fs check` passes."""

from __future__ import annotations

import ctypes
import io
import os
import subprocess

import h5py
import netCDF4
import numpy as np
import pytest
import xarray

import roundtrip_support as R
from conftest import LIBVERS, run_h5fs
from crash_support import kill_mid_copy, replayed_prefixes
from h5fs.check import check
from sohm_support import build as build_sohm
from sohm_support import records, remove_everything_with_libhdf5
from write_support import verify_file

C = np.arange(100.0).reshape(10, 10)

# name -> (what h5py makes, the array that replaces it: same dtype, fits the maximum shape)
KEPT = {
    "g/c": (dict(data=C, chunks=(4, 5), maxshape=(20, None), compression="gzip", compression_opts=7, shuffle=True,
                 fletcher32=True, fillvalue=-1.0), np.arange(150.0).reshape(15, 10) * 2),   # grows
    "fixed": (dict(data=np.arange(100, dtype="<i4").reshape(10, 10), chunks=(4, 5), compression="gzip",
                   compression_opts=1), np.arange(48, dtype="<i4").reshape(6, 8) + 7),       # shrinks
    "one": (dict(data=np.arange(8, dtype="<f4"), chunks=(8,), compression="gzip"),           # a single chunk
            np.arange(8, dtype="<f4") * 3),
    "two": (dict(data=np.arange(36, dtype="<u2").reshape(6, 6), chunks=(3, 3), maxshape=(None, None), fillvalue=7),
            np.arange(36, dtype="<u2").reshape(9, 4) * 2),
    "implicit": (dict(data=C, chunks=(4, 5), alloc="early"), C[:8] + 0.5),
    "k": (dict(data=np.arange(10, dtype="<i4")), np.arange(10, dtype="<i4") * 5),            # contiguous
    "m": (dict(data=np.arange(10, dtype="<i4"), layout="compact"), np.arange(10, dtype="<i4") - 3),
    "typed": (dict(data=np.arange(6.0), chunks=(2,), maxshape=(None,), committed=True), np.arange(9.0) / 2),
}


def make(path, libver: str) -> None:
    with h5py.File(path, "w", libver=libver) as f:
        for name, (options, _) in KEPT.items():
            options = dict(options)
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            if options.pop("alloc", None):
                dcpl.set_chunk(options.pop("chunks"))
                dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)   # libhdf5's implicit index (v110 on)
            if options.pop("layout", None):
                dcpl.set_layout(h5py.h5d.COMPACT)
            if options.pop("committed", None):   # its datatype a committed one (a shared message)
                f["t"] = np.dtype("<f8")
                options["dtype"] = f["t"]
            f.create_dataset(name, dcpl=dcpl, **options)
        c = f["g/c"]
        c.attrs["units"] = "m"
        c.attrs["scale"] = np.array([1.5, 2.5])
        f["g/c_link"] = c


def index_type(ds: h5py.Dataset) -> int | None:
    """libhdf5's chunk index type of a chunked dataset (H5Dget_chunk_index_type), None otherwise."""
    if ds.chunks is None:
        return None
    # h5py's own libhdf5 (its wheel's; netCDF4's wheel loads another, which knows no h5py id)
    lib = next(line.split()[-1] for line in open("/proc/self/maps") if "/h5py.libs/libhdf5-" in line)
    kind = ctypes.c_int(-1)
    assert ctypes.CDLL(lib).H5Dget_chunk_index_type(ctypes.c_int64(ds.id.id), ctypes.byref(kind)) >= 0
    return kind.value


def storage(ds: h5py.Dataset) -> dict:
    """What a kept-storage replacement keeps, as libhdf5 reports it."""
    return dict(dtype=ds.dtype.str, layout=ds.id.get_create_plist().get_layout(), chunks=ds.chunks,
                index=index_type(ds), compression=ds.compression, opts=ds.compression_opts, shuffle=ds.shuffle,
                fletcher32=ds.fletcher32, maxshape=ds.maxshape, fill=ds.fillvalue,
                attrs={k: np.asarray(v).tolist() for k, v in ds.attrs.items()}, address=h5py.h5o.get_info(ds.id).addr)


def described(path) -> dict[str, dict]:
    with h5py.File(path, "r") as f:
        return {name: storage(f[name]) for name in KEPT}


def npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def put(method: str, arr: np.ndarray, target, src) -> None:
    """`arr` onto the mount's `target` (a D.npy) as a user does: cp, an atomic save, rsync."""
    if method == "replace":
        tmp = target.parent / f".{target.name}.tmp"
        with open(tmp, "wb") as out:
            np.save(out, arr)
        os.replace(tmp, target)
        return
    np.save(src / "y.npy", arr)
    cmd = ["cp"] if method == "cp" else ["rsync", "--ignore-times"]
    done = subprocess.run([*cmd, str(src / "y.npy"), str(target)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("libver", LIBVERS)
@pytest.mark.parametrize("method", ("cp", "replace", "rsync"))
def test_a_fitting_array_keeps_the_dataset_storage(tmp_path, mount, libver, method):
    path = tmp_path / f"keep-{libver}.h5"
    make(path, libver)
    before = described(path)
    src = tmp_path / "src"
    src.mkdir()
    mp = mount(path, "rw", "writeback_mb=1")
    for name, (_, new) in KEPT.items():
        put(method, new, mp / f"{name}.npy", src)
        assert np.array_equal(np.load(mp / f"{name}.npy"), new), name
        assert os.stat(mp / name).st_size == new.nbytes
    assert sorted(os.listdir(mp / "g")) == ["c", "c.npy", "c_link", "c_link.npy"]   # no temporary file left
    assert np.array_equal(np.load(mp / "g" / "c_link.npy"), KEPT["g/c"][1])
    assert os.getxattr(mp / "g" / "c", "user.units") == b"m" and os.stat(mp / "g" / "c").st_nlink == 2
    run_h5fs("umount", mp, check=True)
    verify_file(path, h5dump=libver == "earliest")
    assert described(path) == before   # all but the extent, as libhdf5 reports it
    with h5py.File(path, "r") as f:
        for name, (_, new) in KEPT.items():
            assert f[name].shape == new.shape and np.array_equal(f[name][()], new), name
        assert f["g/c_link"] == f["g/c"] and h5py.h5o.get_info(f["g/c"].id).rc == 2
        assert f["typed"].id.get_type().committed() and h5py.h5o.get_info(f["t"].id).rc == 2
    with h5py.File(path, "r+") as f:   # grown further by libhdf5: the dataset's own fill value
        f["g/c"].resize((17, 10))
        assert (f["g/c"][15:] == -1.0).all() and np.array_equal(f["g/c"][:15], KEPT["g/c"][1])


def test_an_array_that_does_not_fit_gets_a_layout_of_its_own(tmp_path, mount):
    """Another dtype, byte order or rank, a shape beyond the maximum, another shape for
    contiguous data: the array is stored as a copied-in one (first dimension unlimited,
    h5fs's chunks and filters), D's address and attributes kept."""
    path = tmp_path / "misfit.h5"
    make(path, "latest")
    before = described(path)
    src = tmp_path / "src"
    src.mkdir()
    misfits = {
        "g/c": np.arange(150, dtype="<f4").reshape(15, 10),    # another dtype
        "fixed": np.arange(10, dtype="<i4"),                    # another rank
        "two": np.arange(36, dtype=">u2").reshape(6, 6),        # the other byte order
        "implicit": np.arange(120.0).reshape(12, 10),           # beyond the maximum shape
        "k": np.arange(12, dtype="<i4"),                        # contiguous, another shape
    }
    mp = mount(path, "rw")
    for name, arr in misfits.items():
        put("cp", arr, mp / f"{name}.npy", src)
        assert np.array_equal(np.load(mp / f"{name}.npy"), arr)
    run_h5fs("umount", mp, check=True)
    verify_file(path, h5dump=False)
    after = described(path)
    with h5py.File(path, "r") as f:
        for name, arr in misfits.items():
            ds = f[name]
            assert ds.dtype == arr.dtype and np.array_equal(ds[()], arr), name
            assert ds.maxshape == (None, *arr.shape[1:]) and ds.chunks is not None, name
            assert after[name]["address"] == before[name]["address"] and after[name]["attrs"] == before[name]["attrs"]
        assert not f["g/c"].fletcher32 and f["g/c"].fillvalue == 0


def test_netcdf_coordinate_stays_a_fixed_dimension(tmp_path, mount):
    """The issue's case: a coordinate `lat` of a fixed dimension replaced by an array of its
    shape stays fixed (netCDF4 says not unlimited, xarray opens the file); a variable along the
    unlimited `time` replaced by a longer array grows, and netCDF4 gives the dimension the
    longest length of the variables along it (the coordinate `time` reads as masked past its
    own values); chunking, zlib and fill value stay."""
    path = tmp_path / "climate.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("lat", 5)
        nc.createDimension("time", None)
        lat = nc.createVariable("lat", "f4", ("lat",))
        lat[:] = np.linspace(-40, 40, 5)
        lat.units = "degrees_north"
        nc.createVariable("time", "f8", ("time",))[:] = np.arange(3.0)
        temp = nc.createVariable("temp", "f4", ("time", "lat"), zlib=True, complevel=5, fill_value=-999.0,
                                 chunksizes=(2, 5))
        temp[:] = np.arange(15, dtype="f4").reshape(3, 5)
        temp.units = "K"
    lat2, temp2 = np.linspace(-45, 45, 5).astype("<f4"), np.arange(25, dtype="<f4").reshape(5, 5) * 10
    src = tmp_path / "src"
    src.mkdir()
    mp = mount(path, "rw")
    put("cp", lat2, mp / "lat.npy", src)
    put("cp", temp2, mp / "temp.npy", src)
    run_h5fs("umount", mp, check=True)
    verify_file(path, h5dump=False)
    with netCDF4.Dataset(path) as nc:
        assert not nc.dimensions["lat"].isunlimited() and len(nc.dimensions["lat"]) == 5
        assert nc.dimensions["time"].isunlimited() and len(nc.dimensions["time"]) == 5
        assert np.array_equal(nc["lat"][:], lat2) and nc["lat"].units == "degrees_north"
        assert np.array_equal(nc["temp"][:], temp2) and nc["temp"].units == "K"
        assert nc["temp"].chunking() == [2, 5] and nc["temp"]._FillValue == -999.0
        filters = nc["temp"].filters()
        assert filters["zlib"] and filters["complevel"] == 5
        assert nc["time"][:3].tolist() == [0.0, 1.0, 2.0] and nc["time"][3:].mask.all()
    with xarray.open_dataset(path) as x:
        assert x.sizes == {"time": 5, "lat": 5}
        assert np.array_equal(x["lat"].values, lat2) and np.array_equal(x["temp"].values, temp2)


def test_shared_messages_counted_as_kept(tmp_path, mount):
    """A dataset whose dataspace, datatype, fill value and filters are all shared through the
    file's shared-message table: the datatype, fill value and filters stay shared as they are,
    the dataspace of the new extent is D's own (one use of the shared one fewer). libhdf5 then
    removes everything down to no use at all: every count was right."""
    path = tmp_path / "sohm.h5"
    build_sohm(path, R.shared_messages_fcpl())
    before = records(path)
    with h5py.File(path, "r") as f:
        kept = storage(f["d3"])
    src = tmp_path / "src"
    src.mkdir()
    mp = mount(path, "rw")
    put("cp", np.arange(60.0) * 4, mp / "d3.npy", src)
    run_h5fs("umount", mp, check=True)
    verify_file(path, h5dump=False)
    assert records(path) != before
    with h5py.File(path, "r") as f:
        assert storage(f["d3"]) == kept and np.array_equal(f["d3"][()], np.arange(60.0) * 4)
    remove_everything_with_libhdf5(path)
    assert all(count == 0 for count, _ in records(path))


def test_kill_mid_copy_leaves_the_old_data_and_storage(tmp_path, mount):
    """A daemon killed while a fitting array streams in: the file reads as before at once (no
    repair), storage as it was; the next mount frees what the copy had written."""
    path = tmp_path / "crash.h5"
    old = np.arange(600_000, dtype="<f8").reshape(1000, 600)
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("big", data=old, chunks=(100, 600), maxshape=(None, 600), compression="gzip",
                         fillvalue=-2.0)
    with h5py.File(path, "r") as f:
        before = storage(f["big"])
    mp = mount(path, "rw", "writeback_mb=1")
    kill_mid_copy(mp, "big.npy", npy_bytes(old[:900] * 2)[:3_000_000])   # past the 1 MiB budget: chunks in the file
    with h5py.File(path, "r") as f:   # at once, before any repair
        assert storage(f["big"]) == before and np.array_equal(f["big"][()], old)
    mp = mount(path, "rw")   # replays the journal; the walk finds the unlinked dataset's space free
    run_h5fs("umount", mp, check=True)
    verify_file(path, h5dump=False)
    with h5py.File(path, "r") as f:
        assert storage(f["big"]) == before and np.array_equal(f["big"][()], old)


def test_power_loss_at_every_barrier_of_a_kept_replacement(tmp_path, mount, monkeypatch):
    """The daemon's writes during a kept-storage replacement, rebuilt from every prefix that
    ends at an fsync (alone and with later writes in random order), then opened as the next
    mount does: D holds the old array or the new one, whole, its storage as it was."""
    original = tmp_path / "original.h5"
    old = np.arange(300_000, dtype="<f8").reshape(500, 600)
    new = old[:450] * -3
    with h5py.File(original, "w", libver="latest") as f:
        f.create_dataset("big", data=old, chunks=(50, 600), maxshape=(None, 600), compression="gzip",
                         fillvalue=-2.0)
    with h5py.File(original, "r") as f:
        before = storage(f["big"])
    path = tmp_path / "live.h5"
    path.write_bytes(original.read_bytes())
    src = tmp_path / "src"
    src.mkdir()
    recording = tmp_path / "writes.rec"
    monkeypatch.setenv("H5FS_RECORD", str(recording))
    mp = mount(path, "rw", "writeback_mb=1")   # chunks of the new array land before it is whole
    put("cp", new, mp / "big.npy", src)
    run_h5fs("umount", mp, check=True)
    monkeypatch.delenv("H5FS_RECORD")
    out = str(tmp_path / "replayed.h5")
    seen = set()
    for _ in replayed_prefixes(str(original), str(recording), out, seed=3):
        with h5py.File(out, "r") as f:
            data = f["big"][()]
            assert storage(f["big"]) == before
        assert np.array_equal(data, old) or np.array_equal(data, new)
        seen.add(data.shape)
        report = check(out)
        assert report.sound, report.problems
    assert seen == {old.shape, new.shape}   # prefixes before the publishing commit, and after


def test_a_descriptor_of_the_view_an_atomic_save_replaced_keeps_reading(tmp_path, mount):
    """`mv T D.npy` keeping D's storage: a descriptor opened on D.npy before the rename still
    reads and stats (D's view, the old data or the new, whole), as POSIX keeps a replaced file's
    descriptors working; a new open reads the new array."""
    path = tmp_path / "f.h5"
    old = np.arange(1000, dtype="<i4")
    new = old * 3 - 7
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("d", data=old, chunks=(100,), maxshape=(None,), compression="gzip")
    mp = mount(path, "rw")
    fd = os.open(mp / "d.npy", os.O_RDONLY)
    try:
        put("replace", new, mp / "d.npy", None)
        size = os.fstat(fd).st_size
        data = os.pread(fd, 1 << 20, 0)
    finally:
        os.close(fd)
    assert data in (npy_bytes(old), npy_bytes(new)) and size == len(data)
    assert np.array_equal(np.load(mp / "d.npy"), new)
    assert sorted(os.listdir(mp)) == ["d", "d.npy"]
    run_h5fs("umount", mp, check=True)
    verify_file(path, h5dump=False)
    with h5py.File(path, "r") as f:
        assert list(f) == ["d"] and np.array_equal(f["d"][()], new)


def test_power_loss_during_an_atomic_save_that_keeps_the_storage(tmp_path, mount, monkeypatch):
    """`np.save` to a temporary file T, then `os.replace(T, D.npy)` keeping D's storage: rebuilt
    from every prefix of the daemon's writes that ends at an fsync, the file has D's old data
    (T there or not) or D's new data without T: the rename is one transaction, as rename(2) is
    atomic."""
    original = tmp_path / "original.h5"
    old = np.arange(20_000, dtype="<f8").reshape(200, 100)
    new = old[:150] * -3
    with h5py.File(original, "w", libver="latest") as f:
        f.create_dataset("big", data=old, chunks=(50, 100), maxshape=(None, 100), compression="gzip")
    path = tmp_path / "live.h5"
    path.write_bytes(original.read_bytes())
    recording = tmp_path / "writes.rec"
    monkeypatch.setenv("H5FS_RECORD", str(recording))
    mp = mount(path, "rw")
    put("replace", new, mp / "big.npy", None)
    run_h5fs("umount", mp, check=True)
    monkeypatch.delenv("H5FS_RECORD")
    with h5py.File(path, "r") as f:
        assert list(f) == ["big"] and np.array_equal(f["big"][()], new)
    out = str(tmp_path / "replayed.h5")
    seen = set()
    for _ in replayed_prefixes(str(original), str(recording), out, seed=5):
        with h5py.File(out, "r") as f:
            data, names = f["big"][()], set(f)
        replaced = np.array_equal(data, new)
        assert replaced or np.array_equal(data, old)
        assert not (replaced and ".big.npy.tmp" in names), "D's new data and T both there"
        seen.add((replaced, ".big.npy.tmp" in names))
        report = check(out)
        assert report.sound, report.problems
    assert (True, False) in seen and (False, True) in seen
