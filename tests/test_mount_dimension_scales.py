"""Dimension scales and object references through a real read-write mount. Removing a scale
detaches it from its datasets, removing a dataset takes it out of its scales' REFERENCE_LIST
(libhdf5's H5DSdetach_scale rules), `mv` keeps both; h5py, netCDF4 and xarray read the file
after each edit and `h5fs check` passes. A reference to a removed object fails to resolve
however many objects are created after it (no new header takes its address), and `h5fs check`
names every reference that names no object."""

from __future__ import annotations

import os
import shutil
import subprocess

import h5py
import numpy as np
import pytest

from conftest import run_h5fs
from write_support import verify_file

LIBVERS = ("earliest", "latest")


def make_scales(path, libver: str) -> None:
    """d (3x4) with scale x on dimension 0 and y on dimension 1; e (3) with x too."""
    with h5py.File(path, "w", libver=libver) as f:
        f["x"] = np.arange(3.0)
        f["y"] = np.arange(4.0)
        f["d"] = np.arange(12.0).reshape(3, 4)
        f["e"] = np.arange(3, dtype="<i4")
        f["x"].make_scale("x")
        f["y"].make_scale("y")
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


@pytest.mark.parametrize("libver", LIBVERS)
def test_rm_scale_detaches_it(tmp_path, mount, libver):
    path = tmp_path / f"scales-{libver}.h5"
    make_scales(path, libver)
    mp = mount(path, "rw")
    os.unlink(mp / "x")
    mount.unmount(mp)
    assert scale_names(path, "d") == [[], ["/y"]]
    assert scale_names(path, "e") == [[]]
    with h5py.File(path, "r") as f:
        assert len(f["d"].dims[0]) == 0 and len(f["e"].dims[0]) == 0
        assert "DIMENSION_LIST" not in f["e"].attrs   # H5DSdetach_scale deletes it when no scale is left
        assert h5py.h5ds.is_scale(f["y"].id)
    assert attached(path, "y") == [("/d", 1)]
    verify_file(path, h5dump=libver == "earliest")

    mp = mount(path, "rw")   # the last scale of d goes: its DIMENSION_LIST with it
    os.unlink(mp / "y.npy")
    unmount_and_verify(mount, mp, path, libver)
    with h5py.File(path, "r") as f:
        assert set(f) == {"d", "e"}
        assert "DIMENSION_LIST" not in f["d"].attrs
        assert [len(dim) for dim in f["d"].dims] == [0, 0]


@pytest.mark.parametrize("libver", LIBVERS)
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


@pytest.mark.parametrize("libver", LIBVERS)
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
