"""Dimension scales and object references through a real read-write mount. Removing a scale
detaches it from its datasets, removing a dataset takes it out of its scales' REFERENCE_LIST
(libhdf5's H5DSdetach_scale rules), `mv` keeps both; h5py, netCDF4 and xarray read the file
after each edit and `h5fs check` passes. A reference to a removed object fails to resolve
however many objects are created after it (no new header takes its address), and `h5fs check`
names every reference that names no object."""

from __future__ import annotations

import os
import shutil

import h5py
import numpy as np
import pytest

import roundtrip_support as R
from conftest import run_h5fs, wait_until
from write_support import verify_file

LIBVERS = ("earliest", "latest")


# (libver, how attributes are stored): in headers; past 8 in dense storage; shared through the
# file's shared-message table (a B-tree index of every message type, however small)
LAYOUTS = ("earliest", "latest", "latest-dense", "latest-shared")


def make_scales(path, layout: str) -> None:
    """d (3x4) with scale x on dimension 0 and y on dimension 1; e (3) with x too."""
    libver, _, storage = layout.partition("-")
    fcpl = R.shared_messages_fcpl() if storage == "shared" else None
    with R.new_file(path, libver, fcpl=fcpl) as f:
        _make_scales(f, storage == "dense")


def _make_scales(f, dense: bool) -> None:
    f["x"] = np.arange(3.0)
    f["y"] = np.arange(4.0)
    f["d"] = np.arange(12.0).reshape(3, 4)
    f["e"] = np.arange(3, dtype="<i4")
    f["x"].make_scale("x")
    f["y"].make_scale("y")
    for name in ("x", "y", "d", "e") if dense else ():
        for k in range(10):
            f[name].attrs[f"a{k}"] = k
    f["d"].dims[0].attach_scale(f["x"])
    f["d"].dims[1].attach_scale(f["y"])
    f["e"].dims[0].attach_scale(f["x"])


def make_netcdf(path) -> None:
    import netCDF4
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("time", 3)
        nc.createDimension("lat", 2)
        t = nc.createVariable("time", "f8", ("time",))
        t[:] = [0.0, 1.0, 2.0]
        lat = nc.createVariable("lat", "f4", ("lat",))
        lat[:] = [10.0, 20.0]
        v = nc.createVariable("temp", "f4", ("time", "lat"))
        v[:] = np.arange(6, dtype="f4").reshape(3, 2)
        w = nc.createVariable("rain", "f4", ("time",))
        w[:] = [1.0, 2.0, 3.0]


def scale_names(path, name: str) -> list[list[str]]:
    """The names of the scales of each dimension of dataset `name`, as h5py resolves them."""
    with h5py.File(path, "r") as f:
        return [[s.name for s in dim.values()] for dim in f[name].dims]


def attached(path, scale: str) -> list[tuple[str, int]]:
    """The (dataset, dimension) pairs the scale's REFERENCE_LIST names, resolved by h5py."""
    with h5py.File(path, "r") as f:
        if "REFERENCE_LIST" not in f[scale].attrs:
            return []
        return sorted((f[ref].name, int(dim)) for ref, dim in f[scale].attrs["REFERENCE_LIST"])


def unmount_and_verify(mount, mp, path, libver: str = "earliest") -> None:
    mount.unmount(mp)
    verify_file(path, h5dump=libver == "earliest")


@pytest.mark.parametrize("libver", LAYOUTS)
def test_rm_scale_detaches_it(tmp_path, mount, libver):
    path = tmp_path / f"scales-{libver}.h5"
    make_scales(path, libver)
    mp = mount(path, "rw")
    walked(mount, mp)
    os.unlink(mp / "x")
    fill_with_objects(mp, "n", 10)   # new objects reuse x's space (issue 23: dset.dims then failed)
    mount.unmount(mp)
    assert scale_names(path, "d") == [[], ["/y"]]
    assert scale_names(path, "e") == [[]]
    with h5py.File(path, "r") as f:
        assert len(f["d"].dims[0]) == 0 and len(f["e"].dims[0]) == 0
        assert "DIMENSION_LIST" not in f["e"].attrs   # H5DSdetach_scale deletes it when no scale is left
        assert h5py.h5ds.is_scale(f["y"].id)
    assert attached(path, "y") == [("/d", 1)]
    verify_file(path, h5dump=libver == "earliest")
    view = netcdf_view(path)   # netCDF-C gives a dimension without a scale a phony one
    assert view["d"][0][0] not in ("x", "y") and view["d"][0][1] == "y" and view["d"][1] == (3, 4)
    assert view["e"][0] == view["d"][0][:1]
    opens_in_xarray(path, {"d": view["d"][0], "e": view["e"][0]})

    mp = mount(path, "rw")   # the last scale of d goes: its DIMENSION_LIST with it
    os.unlink(mp / "y.npy")
    unmount_and_verify(mount, mp, path, libver)
    with h5py.File(path, "r") as f:
        assert {"d", "e"} <= set(f) and not {"x", "y"} & set(f)
        assert "DIMENSION_LIST" not in f["d"].attrs
        assert [len(dim) for dim in f["d"].dims] == [0, 0]
    assert netcdf_view(path)["d"][1] == (3, 4)


@pytest.mark.parametrize("libver", LAYOUTS)
def test_rm_dataset_leaves_scale_reference_list(tmp_path, mount, libver):
    path = tmp_path / f"datasets-{libver}.h5"
    make_scales(path, libver)
    mp = mount(path, "rw")
    os.unlink(mp / "d")
    mount.unmount(mp)
    assert attached(path, "x") == [("/e", 0)]
    assert attached(path, "y") == []
    with h5py.File(path, "r") as f:
        assert "REFERENCE_LIST" not in f["y"].attrs   # emptied: deleted, as libhdf5 does
        assert h5py.h5ds.is_scale(f["y"].id) and h5py.h5ds.is_scale(f["x"].id)
        assert f["y"].attrs["CLASS"] == b"DIMENSION_SCALE"
    assert scale_names(path, "e") == [["/x"]]
    verify_file(path, h5dump=libver == "earliest")
    assert netcdf_view(path)["e"][0] == ("x",)
    opens_in_xarray(path, {"e": ("x",)})


@pytest.mark.parametrize("libver", LAYOUTS)
def test_rm_one_of_two_hard_links_keeps_attachments(tmp_path, mount, libver):
    path = tmp_path / f"links-{libver}.h5"
    make_scales(path, libver)
    mp = mount(path, "rw")
    os.link(mp / "x", mp / "x2")
    os.link(mp / "d", mp / "d2")
    os.unlink(mp / "x")
    os.unlink(mp / "d")
    unmount_and_verify(mount, mp, path, libver)
    assert scale_names(path, "d2") == [["/x2"], ["/y"]]
    assert attached(path, "x2") == [("/d2", 0), ("/e", 0)]


@pytest.mark.parametrize("libver", LIBVERS)
def test_rm_open_scale_detaches_it_at_last_close(tmp_path, mount, libver):
    """A scale removed while open lives on until its last close, attached; the close frees it
    and detaches it."""
    path = tmp_path / f"open-{libver}.h5"
    make_scales(path, libver)
    mp = mount(path, "rw")
    with open(mp / "y", "rb") as held:
        os.unlink(mp / "y")
        assert held.read() == np.arange(4.0).tobytes()
        assert os.listxattr(mp / "d") and "user.DIMENSION_LIST" in os.listxattr(mp / "d")
    unmount_and_verify(mount, mp, path, libver)
    assert scale_names(path, "d") == [["/x"], []]
    assert attached(path, "x") == [("/d", 0), ("/e", 0)]


@pytest.mark.parametrize("libver", LAYOUTS)
def test_mv_keeps_attachments(tmp_path, mount, libver):
    path = tmp_path / f"mv-{libver}.h5"
    make_scales(path, libver)
    mp = mount(path, "rw")
    os.mkdir(mp / "g")
    os.rename(mp / "x", mp / "g" / "xx")
    os.rename(mp / "d", mp / "g" / "dd")
    unmount_and_verify(mount, mp, path, libver)
    assert scale_names(path, "g/dd") == [["/g/xx"], ["/y"]]
    assert attached(path, "g/xx") == [("/e", 0), ("/g/dd", 0)]


@pytest.mark.parametrize("libver", LIBVERS)
def test_rm_r_group_holding_a_scale(tmp_path, mount, libver):
    path = tmp_path / f"rmr-{libver}.h5"
    with h5py.File(path, "w", libver=libver) as f:
        g = f.create_group("g")
        g["x"] = np.arange(3.0)
        g["x"].make_scale("x")
        f["d"] = np.zeros(3)
        f["d"].dims[0].attach_scale(g["x"])
    mp = mount(path, "rw")
    shutil.rmtree(mp / "g")
    unmount_and_verify(mount, mp, path, libver)
    with h5py.File(path, "r") as f:
        assert list(f) == ["d"] and len(f["d"].dims[0]) == 0 and "DIMENSION_LIST" not in f["d"].attrs


def netcdf_view(path) -> dict[str, tuple]:
    """name -> (dimensions, their lengths, values) of every variable, as netCDF4 reads them."""
    import netCDF4
    with netCDF4.Dataset(path) as nc:
        return {name: (v.dimensions, tuple(len(nc.dimensions[d]) for d in v.dimensions), v[:].tolist())
                for name, v in nc.variables.items()}


def opens_in_xarray(path, dims: dict[str, tuple]) -> None:
    """xarray (netCDF4 engine) opens the file and gives these variables these dimensions."""
    import xarray as xr
    with xr.open_dataset(path, engine="netcdf4") as ds:
        assert {name: ds[name].dims for name in dims} == dims


def test_netcdf_rm_coordinate_and_variable(tmp_path, mount):
    """A netCDF-4 variable that loses a coordinate variable loses its scales and
    _Netcdf4Coordinates: netCDF-C then gives it an existing dimension of the same length, else a
    phony one (it refuses a variable naming a dimension gone, or mixing dimensions with and
    without scales)."""
    import xarray as xr
    path = tmp_path / "nc.nc"
    make_netcdf(path)
    mp = mount(path, "rw")
    os.unlink(mp / "lat")   # a coordinate variable: its dimension scale
    unmount_and_verify(mount, mp, path)
    view = netcdf_view(path)
    assert set(view) == {"time", "temp", "rain"}
    dims, lengths, values = view["temp"]
    assert values == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    assert dims[0] == "time" and dims[1] != "lat" and lengths == (3, 2)
    assert view["rain"][:2] == (("time",), (3,))
    with xr.open_dataset(path, engine="netcdf4") as ds:
        assert ds["temp"].values.tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
        assert ds["temp"].dims == dims
    with h5py.File(path, "r") as f:
        assert "DIMENSION_LIST" not in f["temp"].attrs and "_Netcdf4Coordinates" not in f["temp"].attrs
    assert attached(path, "time") == [("/rain", 0)]

    mp = mount(path, "rw")
    os.unlink(mp / "rain")   # a data variable: time's REFERENCE_LIST loses it
    unmount_and_verify(mount, mp, path)
    assert attached(path, "time") == []
    assert set(netcdf_view(path)) == {"time", "temp"}
    with xr.open_dataset(path, engine="netcdf4") as ds:
        assert set(ds.variables) == {"time", "temp"} and ds["time"].values.tolist() == [0.0, 1.0, 2.0]

    mp = mount(path, "rw")
    os.unlink(mp / "time")
    unmount_and_verify(mount, mp, path)
    view = netcdf_view(path)
    assert set(view) == {"temp"} and view["temp"][1] == (3, 2)
    with xr.open_dataset(path, engine="netcdf4") as ds:
        assert ds["temp"].shape == (3, 2)


# -- references to removed objects ---------------------------------------------------------------

def make_references(path, libver: str, **kwargs) -> None:
    """a, referenced from an attribute of the root group, a dataset of references and a region
    reference; a's header at a multiple of 8, where h5fs can place a new header (libhdf5 packs
    headers: a dataset before it, its compound member name of the length that puts it there)."""
    for pad in range(200, 208):
        _make_references(path, libver, pad, **kwargs)
        with h5py.File(path, "r") as f:
            if h5py.h5o.get_info(f["a"].id).addr % 8 == 0:
                return
    raise AssertionError("no padding puts a's header at a multiple of 8")


def _make_references(path, libver: str, pad: int, **kwargs) -> None:
    with h5py.File(path, "w", libver=libver, **kwargs) as f:
        f.create_dataset("pad", shape=(1,), dtype=np.dtype([("p" * pad, "u1")]))
        f["a"] = np.arange(4.0)
        f["b"] = np.arange(3.0)
        f["keep"] = np.zeros(3)
        f.attrs["r"] = f["a"].ref
        f.create_dataset("refs", data=[f["a"].ref, f["keep"].ref], dtype=h5py.ref_dtype)
        f.create_dataset("region", data=[f["a"].regionref[1:3]], dtype=h5py.regionref_dtype)


def walked(mount, mp) -> None:
    """The mount's walk for free space is done: space freed from now on is reused at once."""
    assert wait_until(lambda: "unused space found" in mount.log_of(mp), timeout=60), mount.log_of(mp)


def fill_with_objects(mp, tag: str, n: int = 40) -> None:
    """New groups and datasets through the mount, as many as it takes to reuse freed space."""
    arr = np.arange(4.0)
    src = mp.parent / f"src-{tag}.npy"
    np.save(src, arr)
    for k in range(n):
        shutil.copy(src, mp / f"d{tag}{k}.npy")
        os.mkdir(mp / f"g{tag}{k}")
    src.unlink()


def resolves(path) -> list[str]:
    """What the root attribute's and the dataset's references to the removed `a` resolve to
    (names of objects, or 'fails')."""
    out = []
    with h5py.File(path, "r") as f:
        for ref in (f.attrs["r"], f["refs"][0], f["region"][0]):
            try:
                out.append(f[ref].name or "anonymous")
            except Exception:   # noqa: BLE001 - libhdf5's error for a reference to nothing
                out.append("fails")
    return out


@pytest.mark.parametrize("libver", LIBVERS)
def test_reference_to_removed_object_never_resolves(tmp_path, mount, libver):
    path = tmp_path / f"stale-{libver}.h5"
    make_references(path, libver)
    mp = mount(path, "rw")
    walked(mount, mp)
    os.unlink(mp / "a")
    fill_with_objects(mp, "x")
    mount.unmount(mp)
    assert resolves(path) == ["fails"] * 3
    with h5py.File(path, "r") as f:
        assert f[f["refs"][1]].name == "/keep"
    verify_file(path, h5dump=libver == "earliest")


@pytest.mark.parametrize("then", ("edit", "close", "close-persistent"))
@pytest.mark.parametrize("libver", LIBVERS)
def test_reference_to_object_removed_before_the_walk_fails(tmp_path, libver, then):
    """An object removed before the mount's walk has found the file sound keeps its header
    bytes until then (a link count too low may have freed a linked header: tests of damaged
    files); the first transaction after the verdict zeroes them, or the unmount's (also in a
    file whose free-space managers persist, which keeps its length)."""
    from h5fs.model.file import H5File
    from h5fs.model.free_space import find_free_space, hold_freed_space
    from h5fs.model.tree_edit import TreeEditor
    from h5fs.model.writeback import Writeback
    path = tmp_path / f"early-{libver}.h5"
    make_references(path, libver, **(dict(fs_strategy="fsm", fs_persist=True) if then == "close-persistent" else {}))
    f = H5File.open(str(path), writable=True, lock=True)
    wb = Writeback(f, 1 << 20)
    try:
        hold_freed_space(f)   # as a mount starts: freed space waits for the walk
        TreeEditor(f, wb).unlink(f.root, "a")
        assert find_free_space(f) is not None and not f.store.damaged
        if then == "edit":
            TreeEditor(f, wb).touch(f.root)   # an edit that allocates nothing
    finally:
        wb.close()
        f.close()
    assert resolves(path) == ["fails"] * 3
    verify_file(path, h5dump=libver == "earliest")


@pytest.mark.parametrize("libver", LIBVERS)
def test_reference_left_by_libhdf5_never_resolves_to_a_new_object(tmp_path, mount, libver):
    """An object libhdf5 deleted leaves its header as it was (the references resolve to an
    object no link leads to); the mount's walk finds the references and keeps a new header
    from taking the address."""
    path = tmp_path / f"libhdf5-{libver}.h5"
    make_references(path, libver)
    with h5py.File(path, "r+") as f:
        del f["a"]
    assert resolves(path) == ["anonymous"] * 3
    mp = mount(path, "rw")
    walked(mount, mp)
    fill_with_objects(mp, "x")
    mount.unmount(mp)
    assert resolves(path) == ["fails"] * 3   # the old header's remains, overwritten past its first bytes
    verify_file(path, h5dump=libver == "earliest")


@pytest.mark.parametrize("libver", LIBVERS)
def test_check_warns_of_dangling_references(tmp_path, libver):
    """libhdf5 (h5py's `del`) leaves the references to a deleted object: each holder is named."""
    path = tmp_path / f"dangling-{libver}.h5"
    make_references(path, libver)
    with h5py.File(path, "r+") as f:
        f["x"] = np.arange(3.0)
        f["x"].make_scale("x")
        f["b"].dims[0].attach_scale(f["x"])
        f.create_dataset("chunked", data=[f["a"].ref] * 4, dtype=h5py.ref_dtype, chunks=(2,))
        a, x = (h5py.h5o.get_info(f[name].id).addr for name in ("a", "x"))   # header addresses
        del f["a"], f["x"]
    proc = run_h5fs("check", path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    warnings = sorted(line for line in proc.stdout.splitlines() if line.startswith("warning: "))
    names = lambda addr: f"names the object at {addr}, which does not exist"   # noqa: E731
    assert warnings == sorted([
        f"warning: /: attribute 'r': {names(a)} (a dangling reference)",
        f"warning: /b: attribute 'DIMENSION_LIST': {names(x)} (a dangling reference)",
        f"warning: /chunked: data: {names(a)} (a dangling reference)",
        f"warning: /refs: data: {names(a)} (a dangling reference)",
        f"warning: /region: data: region reference: {names(a)} (a dangling reference)",
    ])
    assert "4 dangling references" not in proc.stdout and "5 dangling references" in proc.stdout


@pytest.mark.parametrize("libver", LIBVERS)
def test_object_made_and_removed_in_one_mount_leaves_nothing(tmp_path, mount, libver):
    """Nothing can reference an object the mount made: its whole header is freed, and the next
    new object takes its place."""
    path = tmp_path / f"new-{libver}.h5"
    make_scales(path, libver)
    np.save(tmp_path / "n.npy", np.arange(1000.0))
    mp = mount(path, "rw")
    walked(mount, mp)
    shutil.copy(tmp_path / "n.npy", mp / "n.npy")
    first = os.getxattr(mp / "n", "user.h5fs.address")
    os.unlink(mp / "n")
    fd = os.open(mp, os.O_RDONLY)   # the removal lands at the group commit (a symbol table defers it)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    shutil.copy(tmp_path / "n.npy", mp / "m.npy")
    assert os.getxattr(mp / "m", "user.h5fs.address") == first
    unmount_and_verify(mount, mp, path, libver)


def attachments(path) -> tuple[frozenset, frozenset]:
    """Every (dataset, dimension, scale) its DIMENSION_LIST names and every (scale, dataset,
    dimension) a REFERENCE_LIST names, by path: h5py resolves each reference (fails if one
    names no object)."""
    dims, refs = set(), set()
    with h5py.File(path, "r") as f:
        for name in f:
            obj = f[name]
            for k, dim in enumerate(obj.dims):
                dims.update((obj.name, k, s.name) for s in dim.values())
            for ref, k in obj.attrs.get("REFERENCE_LIST", ()):
                refs.add((obj.name, f[ref].name, int(k)))
    return frozenset(dims), frozenset(refs)


@pytest.mark.parametrize("libver", LIBVERS)
def test_power_loss_during_scale_removals(tmp_path, mount, libver, monkeypatch):
    """Rebuilt from every barrier of the daemon's writes (and with writes after it dropped or
    reordered), the file is the one before or after each removal: the attachments on both sides
    agree, no reference dangles."""
    from crash_support import rebuild, replayed_prefixes
    from h5fs.check import check
    from h5fs.storage.file_writer import read_recording
    original = tmp_path / "original.h5"
    make_scales(original, libver)
    path = tmp_path / "live.h5"
    path.write_bytes(original.read_bytes())
    recording = tmp_path / "writes.rec"
    monkeypatch.setenv("H5FS_RECORD", str(recording))
    mp = mount(path, "rw")
    states = [attachments(original)]
    for name in ("d", "x", "y"):
        os.unlink(mp / name)
        mount.unmount(mp)
        states.append(attachments(path))
        mp = mount(path, "rw")
    mount.unmount(mp)
    monkeypatch.delenv("H5FS_RECORD")
    assert states[-1] == (frozenset(), frozenset())
    out = str(tmp_path / "replayed.h5")
    for _ in replayed_prefixes(str(original), str(recording), out, seed=1):
        got = attachments(out)
        assert got in states
        assert {(s, d, k) for d, k, s in got[0]} == set(got[1])
        report = check(out)
        assert report.sound and not report.warnings, (report.problems, report.warnings)
    rebuild(str(original), str(recording), out, len(read_recording(str(recording))), [])
    assert attachments(out) == states[-1]


def test_check_warns_of_dangling_revised_references(tmp_path):
    """Revised references (H5R_OBJECT2 held inline, region and attribute references in the
    global heap), written with libhdf5's C API, to objects h5py then deletes."""
    from datatype_support import _write_revised_refs
    path = tmp_path / "revised.h5"
    _write_revised_refs(str(path))
    assert run_h5fs("check", path).stdout.count("warning: ") == 0
    with h5py.File(path, "r+") as f:
        x, g = (h5py.h5o.get_info(f[name].id).addr for name in ("x", "g"))
        del f["x"], f["g"]
    proc = run_h5fs("check", path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    warnings = sorted(line for line in proc.stdout.splitlines() if line.startswith("warning: "))
    assert warnings == sorted([
        f"warning: /refs: data: names the object at {g}, which does not exist (a dangling reference)",
        f"warning: /refs: data: reference: names the object at {x}, which does not exist (a dangling reference)",
    ])
