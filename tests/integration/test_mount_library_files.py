"""Files written by the libraries that put their own conventions on top of HDF5 (pandas
`to_hdf` fixed and table, PyTables, AnnData `.h5ad`, a NeXus-style h5py file, xarray
`to_netcdf` through netCDF4), mounted and edited with real tools as a user of each library
would, then read back by the same library: the edits are there, everything else is as the
library read it before, h5py reads the whole file and `h5fs check` passes."""

from __future__ import annotations

import os
import subprocess
import warnings
from functools import partial
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest

from conftest import run_h5fs, wait_until
from write_support import verify_file

anndata = pytest.importorskip("anndata")
tables = pytest.importorskip("tables")
xr = pytest.importorskip("xarray")
netCDF4 = pytest.importorskip("netCDF4")
sparse = pytest.importorskip("scipy.sparse")
pytest.importorskip("hdf5plugin")   # h5py reads PyTables' Blosc and Blosc2 chunks through it


def sh(*args) -> str:
    """Run a real tool on paths in the mount; fail with its stderr."""
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{' '.join(map(str, args))}: {done.stderr}"
    return done.stdout


def dd(data: bytes, target: Path, offset: int, tmp_path: Path) -> None:
    """`dd conv=notrunc` of `data` into `target` at byte `offset`."""
    piece = tmp_path / "piece"
    piece.write_bytes(data)
    sh("dd", f"if={piece}", f"of={target}", "bs=1", f"seek={offset}", "conv=notrunc", "status=none")


def cp_npy(array: np.ndarray, target: Path, tmp_path: Path) -> None:
    """`cp x.npy DIR/NAME.npy`: a new dataset."""
    src = tmp_path / target.name
    np.save(src, array)
    sh("cp", src, target)


# --- the files, each made by its library with deterministic data --------------------------

def frame() -> pd.DataFrame:
    n = 40
    index = pd.date_range("2024-01-01", periods=n, freq="h", name="when")
    return pd.DataFrame({"a": np.arange(n, dtype="i8"), "b": np.linspace(0, 1, n),
                         "s": [f"name{i % 7}" for i in range(n)], "c": np.arange(n, dtype="f4") * 2},
                        index=index)


def make_pandas_fixed(path: Path) -> None:
    frame().to_hdf(path, key="df", format="fixed")
    frame()[["a", "b"]].to_hdf(path, key="other", format="fixed")


def make_pandas_table(path: Path) -> None:
    frame().to_hdf(path, key="t", format="table", data_columns=["a", "s"])
    frame()[["b"]].to_hdf(path, key="spare", format="table")


class Row(tables.IsDescription):
    ident = tables.Int32Col(pos=0)
    name = tables.StringCol(8, pos=1)
    value = tables.Float64Col(pos=2)
    pos = tables.Float32Col(shape=(2,), pos=3)


CARRAYS = {"ca": "zlib", "cb": "blosc:lz4", "cz": "blosc2:zstd"}   # compressed CArrays: name -> complib


def make_pytables(path: Path) -> None:
    with tables.open_file(path, "w", title="root title") as f:
        grp = f.create_group("/", "grp", title="A group")
        tab = f.create_table(grp, "tab", Row, title="rows")
        row = tab.row
        for i in range(20):
            row["ident"], row["name"], row["value"], row["pos"] = i, f"n{i}".encode(), i * 1.5, (i, -i)
            row.append()
        tab.flush()
        ea = f.create_earray("/", "ea", tables.Float64Atom(), shape=(0, 3), title="extendable")
        ea.append(np.arange(30, dtype="f8").reshape(10, 3))
        for name, complib in CARRAYS.items():
            f.create_carray("/", name, obj=(np.arange(64 * 32) % 1000).reshape(64, 32).astype("i2"),
                            filters=tables.Filters(complevel=5, complib=complib, shuffle=True), chunkshape=(16, 16))
        f.create_array("/", "spare", np.arange(5), title="unrelated")
        f.create_array(grp, "small", np.array([1.0, 2.0, 3.0]))


def adata(x_sparse: bool):
    rng = np.random.default_rng(0)
    x = (rng.random((12, 6)) * (rng.random((12, 6)) > 0.6)).astype("f4")
    obs = pd.DataFrame({"cell_type": pd.Categorical([("B", "T", "NK")[i % 3] for i in range(12)]),
                        "n": np.arange(12)}, index=[f"c{i}" for i in range(12)])
    var = pd.DataFrame({"gene": [f"g{i}" for i in range(6)], "hv": [i % 2 == 0 for i in range(6)]},
                       index=[f"g{i}" for i in range(6)])
    a = anndata.AnnData(X=sparse.csr_matrix(x) if x_sparse else x, obs=obs, var=var)
    a.uns["note"] = "hello"
    a.uns["params"] = {"k": 5, "alpha": 0.5}
    a.layers["counts"] = x * 10
    a.obsm["X_pca"] = np.arange(24, dtype="f8").reshape(12, 2)
    return a


def make_anndata(path: Path) -> None:
    adata(False).write_h5ad(path)


def make_anndata_csr(path: Path) -> None:
    adata(True).write_h5ad(path)


def make_nexus(path: Path, libver: str = "earliest") -> None:
    with h5py.File(path, "w", libver=libver) as f:
        f.attrs["NX_class"] = "NXroot"
        f.attrs["default"] = "entry"
        entry = f.create_group("entry")
        entry.attrs["NX_class"] = "NXentry"
        entry.attrs["default"] = "data"
        entry["title"] = "run 1"
        instrument = entry.create_group("instrument")
        instrument.attrs["NX_class"] = "NXinstrument"
        det = instrument.create_group("detector")
        det.attrs["NX_class"] = "NXdetector"
        data = det.create_dataset("data", data=np.arange(200, dtype="<i4").reshape(10, 20), chunks=(5, 20),
                                  compression="gzip")
        data.attrs["units"] = "counts"
        data.attrs["target"] = "/entry/instrument/detector/data"
        det["x"] = np.linspace(0, 1, 20)
        det["x"].attrs["units"] = "mm"
        nxdata = entry.create_group("data")
        nxdata.attrs["NX_class"] = "NXdata"
        nxdata.attrs["signal"] = "data"
        nxdata.attrs["axes"] = [".", "x"]
        nxdata["data"] = data                                          # a hard link, as NeXus links
        nxdata["x"] = h5py.SoftLink("/entry/instrument/detector/x")
        entry["sample"] = h5py.SoftLink("/entry/instrument")
        entry.create_dataset("spare", data=np.zeros(3))


def make_netcdf(path: Path) -> None:
    time = pd.date_range("2024-01-01", periods=6, freq="D")
    ds = xr.Dataset(
        {"temp": (("time", "x"), np.arange(24, dtype="f4").reshape(6, 4), {"units": "K", "long_name": "temperature"}),
         "flag": ((), np.int32(7)), "spare": (("x",), np.ones(4))},
        coords={"time": time, "x": ("x", np.array([0.5, 1.5, 2.5, 3.5]), {"units": "m"})},
        attrs={"title": "test", "version": 3})
    ds.to_netcdf(path, engine="netcdf4", unlimited_dims=["time"],
                 encoding={"temp": {"zlib": True, "complevel": 4, "chunksizes": (2, 4)}})


MAKERS = {"pandas-fixed": make_pandas_fixed, "pandas-table": make_pandas_table, "pytables": make_pytables,
          "anndata": make_anndata, "anndata-csr": make_anndata_csr, 
          "nexus": make_nexus, "nexus-latest": partial(make_nexus, libver="latest"), "netcdf": make_netcdf}


def made(kind: str, tmp_path: Path) -> Path:
    path = tmp_path / f"{kind}.h5"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # pandas' PerformanceWarning for pickled object columns
        MAKERS[kind](path)
    return path


# --- read-only: every view and attribute of every file ------------------------------------

def h5py_value(obj: h5py.Dataset) -> np.ndarray:
    """What the mount's D.npy should hold, from h5py: variable-length strings as text, and a
    variable-length sequence as its {length, values} records."""
    if obj.dtype.kind == "O" and h5py.check_string_dtype(obj.dtype):
        return np.asarray(obj.asstr()[()], dtype=object)
    return np.asarray(obj[()])


def same_as_h5py(got: np.ndarray, obj: h5py.Dataset) -> bool:
    want = h5py_value(obj)
    if want.dtype.kind == "O" and h5py.check_string_dtype(obj.dtype):
        return got.shape == want.shape and all(str(g) == w for g, w in zip(got.ravel(), want.ravel()))
    if want.dtype.kind == "O":   # pandas' pickled object blocks: variable-length bytes
        return got.shape == want.shape and all(
            g["values"][:g["length"]].tobytes() == np.asarray(w).tobytes() for g, w in zip(got.ravel(), want.ravel()))
    return got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("kind", list(MAKERS))
def test_every_view_and_attribute_reads(mount, tmp_path, kind):
    path = made(kind, tmp_path)
    mp = mount(path)
    with h5py.File(path, "r") as f:
        objects = [("", f)]
        f.visititems(lambda name, obj: objects.append((name, obj)) and None)
        assert len(objects) > 3
        for name, obj in objects:
            node = mp / name if name else mp
            assert sorted(os.listxattr(node)) == sorted(f"user.{k}" for k in obj.attrs), name
            for key in obj.attrs:
                text = os.getxattr(node, f"user.{key}").decode()
                value = obj.attrs[key]
                if isinstance(value, str):
                    assert text == value, (name, key)
                elif isinstance(value, bytes):
                    assert text == value.decode(), (name, key)
            if isinstance(obj, h5py.Dataset):
                assert same_as_h5py(np.load(f"{node}.npy"), obj), name
                if obj.dtype.kind != "O":   # fixed-size elements: the raw view is their bytes
                    assert node.read_bytes() == np.ascontiguousarray(obj[()]).tobytes(), name
    listing = subprocess.run(["getfattr", "-R", "-d", "-m", "-", str(mp)], capture_output=True, text=True)
    assert listing.returncode == 0, listing.stderr


# --- edits through the mount, read back by the library that wrote the file ---------------

def read_back(path: Path) -> None:
    """After the unmount: h5py reads the whole file and `h5fs check` passes."""
    verify_file(path, h5dump=False)


def block_of(group: Path, column: str) -> str:
    """The pandas fixed-format block holding `column`, found as a user would: from blockN_items."""
    n = 0
    while (group / f"block{n}_items.npy").exists():
        if column.encode() in np.load(group / f"block{n}_items.npy").tolist():
            return f"block{n}_values"
        n += 1
    raise AssertionError(f"no block holds {column}")


def test_pandas_fixed_edits(mount, tmp_path):
    path = made("pandas-fixed", tmp_path)
    want = pd.read_hdf(path, "df")
    mp = mount(path, "rw")
    df = mp / "df"
    assert {"axis0", "axis1", "block0_values", "block0_items.npy"} <= set(os.listdir(df))
    values = np.lib.format.open_memmap(df / f"{block_of(df, 'b')}.npy", mode="r+")   # shape (rows, 1)
    values[3, 0] = 99.5
    values.flush()
    del values
    want.loc[want.index[3], "b"] = 99.5
    # the datetime index is int64 nanoseconds: move row 0 back one hour
    stamp = np.array([want.index[0].value - 3_600_000_000_000], "<i8")
    dd(stamp.tobytes(), df / "axis1", 0, tmp_path)
    index = want.index.to_numpy().copy()
    index[0] -= np.timedelta64(1, "h")
    want.index = pd.DatetimeIndex(index, name="when")
    sh("rm", "-r", mp / "other")
    sh("mv", df, mp / "renamed")
    sh("mkdir", mp / "extra")
    cp_npy(np.arange(6, dtype="<i4"), mp / "extra" / "numbers.npy", tmp_path)
    sh("setfattr", "-n", "user.note", "-v", "edited through h5fs", mp / "renamed")
    run_h5fs("umount", mp, check=True)

    read_back(path)
    with pd.HDFStore(path, "r") as store:
        assert store.keys() == ["/renamed"]
        got = store["renamed"]
        assert store.get_storer("renamed").attrs.note == "edited through h5fs"
    pd.testing.assert_frame_equal(got, want, check_freq=False)   # pandas keeps the stored freq
    with h5py.File(path, "r") as f:
        assert f["extra/numbers"][()].tolist() == list(range(6))
    # pandas writes into the edited file again: a new key, and the renamed one replaced
    got.to_hdf(path, key="again", format="fixed")
    want.iloc[:5].to_hdf(path, key="renamed", format="fixed")
    pd.testing.assert_frame_equal(pd.read_hdf(path, "again"), want, check_freq=False)
    pd.testing.assert_frame_equal(pd.read_hdf(path, "renamed"), want.iloc[:5], check_freq=False)
    read_back(path)


def test_pandas_table_edits(mount, tmp_path):
    path = made("pandas-table", tmp_path)
    want = pd.read_hdf(path, "t")
    mp = mount(path, "rw")
    # column b is values_block_0 of the table (not indexed: its values may change)
    rows = np.lib.format.open_memmap(mp / "t" / "table.npy", mode="r+")
    assert rows.dtype.names == ("index", "values_block_0", "values_block_1", "a", "s")
    rows["values_block_0"][5, 0] = -2.25
    rows.flush()
    del rows
    want.loc[want.index[5], "b"] = -2.25
    sh("rm", "-r", mp / "spare")
    sh("mkdir", mp / "extra")
    sh("setfattr", "-n", "user.note", "-v", "checked", mp / "t" / "table")
    run_h5fs("umount", mp, check=True)

    read_back(path)
    with pd.HDFStore(path, "r") as store:
        assert store.keys() == ["/t"]
        pd.testing.assert_frame_equal(store["t"], want, check_freq=False)
        # queries on the data columns use PyTables' indexes, which the edit left valid
        pd.testing.assert_frame_equal(store.select("t", where="a > 30"), want[want.a > 30], check_freq=False)
        pd.testing.assert_frame_equal(store.select("t", where="s == 'name3'"), want[want.s == "name3"],
                                      check_freq=False)
        assert store.get_storer("t").table.attrs.note == "checked"
    # pandas appends to the edited table, updating its indexes
    more = frame().iloc[:3]
    more.index = more.index + pd.Timedelta(days=10)
    more["a"] += 100
    more.to_hdf(path, key="t", format="table", append=True, data_columns=["a", "s"])
    want = pd.concat([want, more])
    pd.testing.assert_frame_equal(pd.read_hdf(path, "t"), want, check_freq=False)
    pd.testing.assert_frame_equal(pd.read_hdf(path, "t", where="a > 100"), more[more.a > 100], check_freq=False)
    read_back(path)


def test_pytables_edits(mount, tmp_path):
    path = made("pytables", tmp_path)
    with tables.open_file(path, "r") as f:
        rows = f.root.grp.tab.read()
        ea = f.root.ea.read()
        carrays = {name: f.root[name].read() for name in CARRAYS}
        small = f.root.grp.small.read()
    mp = mount(path, "rw")
    assert os.getxattr(mp / "grp", "user.TITLE") == b"A group"
    assert os.getxattr(mp / "grp" / "tab", "user.CLASS") == b"TABLE"
    # a field of one row, through a mapping of the table's .npy view
    view = np.lib.format.open_memmap(mp / "grp" / "tab.npy", mode="r+")
    assert view.dtype == rows.dtype
    view["value"][3] = -1.0
    view["name"][4] = b"edited"
    view.flush()
    del view
    rows["value"][3] = -1.0
    rows["name"][4] = b"edited"
    # two rows appended to the table and to the EArray: `cat >>` onto their raw views
    more = np.zeros(2, rows.dtype)
    more["ident"], more["name"], more["value"], more["pos"] = [20, 21], [b"x", b"y"], [30.0, 31.5], [[1, 2], [3, 4]]
    (tmp_path / "rows.bin").write_bytes(more.tobytes())
    sh("sh", "-c", f"cat {tmp_path / 'rows.bin'} >> {mp / 'grp' / 'tab'}")
    rows = np.concatenate([rows, more])
    sh("truncate", "-s", str(8 * 3 * 8), mp / "ea")   # the EArray shrunk to 8 rows, then 2 appended
    extra = np.arange(100, 106, dtype="<f8").reshape(2, 3)
    (tmp_path / "ea.bin").write_bytes(extra.tobytes())
    sh("sh", "-c", f"cat {tmp_path / 'ea.bin'} >> {mp / 'ea'}")
    ea = np.concatenate([ea[:8], extra])
    # one row of each compressed CArray (zlib, Blosc, Blosc2 chunks), with dd
    for name, values in carrays.items():
        dd(np.full(32, -5, "<i2").tobytes(), mp / name, 40 * 32 * 2, tmp_path)
        values[40] = -5
    sh("rm", mp / "spare")
    sh("mv", mp / "grp" / "small", mp / "grp" / "renamed")
    sh("mv", mp / "grp", mp / "moved")
    sh("mkdir", mp / "newgrp")
    cp_npy(np.arange(12, dtype="<f4").reshape(3, 4), mp / "newgrp" / "arr.npy", tmp_path)
    sh("setfattr", "-n", "user.note", "-v", "edited", mp / "moved")
    run_h5fs("umount", mp, check=True)

    read_back(path)
    with tables.open_file(path, "r") as f:
        assert f.title == "root title"
        assert sorted(f.root._v_children) == sorted([*CARRAYS, "ea", "moved", "newgrp"])
        grp = f.root.moved
        assert grp._v_title == "A group" and grp._v_attrs.note == "edited"
        tab = grp.tab
        assert isinstance(tab, tables.Table) and tab.nrows == 22 and tab.title == "rows"
        assert np.array_equal(tab.read(), rows)
        assert tab.read_where("ident == 21")["value"].tolist() == [31.5]
        assert np.array_equal(grp.renamed.read(), small)
        assert isinstance(f.root.ea, tables.EArray) and f.root.ea.nrows == 10
        assert np.array_equal(f.root.ea.read(), ea)
        for name, values in carrays.items():
            assert f.root[name].filters.complib == CARRAYS[name] and f.root[name].filters.shuffle
            assert np.array_equal(f.root[name].read(), values), name
        assert np.array_equal(f.root.newgrp.arr.read(), np.arange(12, dtype="<f4").reshape(3, 4))
    # PyTables appends to what the mount extended, and writes into the edited chunks
    with tables.open_file(path, "a") as f:
        f.root.moved.tab.append(more)
        f.root.ea.append(extra)
        f.root.ca[41] = 7
        f.root.moved._v_attrs.later = "yes"
    with tables.open_file(path, "r") as f:
        assert np.array_equal(f.root.moved.tab.read(), np.concatenate([rows, more]))
        assert np.array_equal(f.root.ea.read(), np.concatenate([ea, extra]))
        carrays["ca"][41] = 7
        assert np.array_equal(f.root.ca.read(), carrays["ca"])
        assert f.root.moved._v_attrs.later == "yes" and f.root.moved._v_attrs.note == "edited"
    read_back(path)


def assert_same_adata(got, want) -> None:
    """Every part of an AnnData object equal (X dense or sparse)."""
    gx, wx = got.X, want.X
    assert sparse.issparse(gx) == sparse.issparse(wx)
    if sparse.issparse(wx):
        assert gx.format == wx.format
        gx, wx = gx.toarray(), wx.toarray()
    assert np.array_equal(gx, wx)
    pd.testing.assert_frame_equal(got.obs, want.obs)
    pd.testing.assert_frame_equal(got.var, want.var)
    assert sorted(got.layers) == sorted(want.layers)
    for key in want.layers:
        assert np.array_equal(got.layers[key], want.layers[key]), key
    assert sorted(got.obsm) == sorted(want.obsm)
    for key in want.obsm:
        assert np.array_equal(got.obsm[key], want.obsm[key]), key
    assert got.uns.keys() == want.uns.keys()
    assert got.uns["note"] == want.uns["note"] and got.uns["params"] == want.uns["params"]


@pytest.mark.parametrize("x_sparse", [False, True], ids=["dense", "csr"])
def test_anndata_edits(mount, tmp_path, x_sparse):
    path = made("anndata-csr" if x_sparse else "anndata", tmp_path)
    want = anndata.read_h5ad(path)
    mp = mount(path, "rw")
    assert os.getxattr(mp, "user.encoding-type") == b"anndata"
    if x_sparse:
        assert os.getxattr(mp / "X", "user.encoding-type") == b"csr_matrix"
        # a stored value of the CSR matrix, through X/data.npy
        data = np.lib.format.open_memmap(mp / "X" / "data.npy", mode="r+")
        data[2] = 42.0
        data.flush()
        del data
        want.X.data[2] = 42.0
    else:
        x = np.lib.format.open_memmap(mp / "X.npy", mode="r+")
        x[2, 3] = 42.0
        x.flush()
        del x
        want.X[2, 3] = 42.0
    # a categorical column's codes: cell 4 becomes category 0 (dd into the int8 codes)
    codes = mp / "obs" / "cell_type" / "codes"
    assert np.load(f"{codes}.npy").dtype == np.int8
    dd(b"\x00", codes, 4, tmp_path)
    want.obs.loc["c4", "cell_type"] = want.obs["cell_type"].cat.categories[0]
    sh("rm", mp / "layers" / "counts")
    del want.layers["counts"]
    # an obs column renamed: its dataset moved, and the dataframe's column-order attribute rewritten
    assert os.getxattr(mp / "obs", "user.column-order") == b"cell_type\nn"
    sh("mv", mp / "obs" / "n", mp / "obs" / "count")
    sh("setfattr", "-n", "user.column-order", "-v", "cell_type\ncount", mp / "obs")
    want.obs = want.obs.rename(columns={"n": "count"})
    sh("mv", mp / "obsm" / "X_pca", mp / "obsm" / "X_umap")
    want.obsm["X_umap"] = want.obsm.pop("X_pca")
    # a new obsm entry and a new uns group, tagged as anndata tags its elements
    new = np.arange(36, dtype="<f8").reshape(12, 3)
    cp_npy(new, mp / "obsm" / "X_new.npy", tmp_path)
    sh("setfattr", "-n", "user.encoding-type", "-v", "array", mp / "obsm" / "X_new")
    sh("setfattr", "-n", "user.encoding-version", "-v", "0.2.0", mp / "obsm" / "X_new")
    want.obsm["X_new"] = new
    sh("mkdir", mp / "uns" / "extra")
    sh("setfattr", "-n", "user.encoding-type", "-v", "dict", mp / "uns" / "extra")
    sh("setfattr", "-n", "user.encoding-version", "-v", "0.1.0", mp / "uns" / "extra")
    cp_npy(np.array([1.5, 2.5]), mp / "uns" / "extra" / "v.npy", tmp_path)
    sh("setfattr", "-n", "user.encoding-type", "-v", "array", mp / "uns" / "extra" / "v")
    sh("setfattr", "-n", "user.encoding-version", "-v", "0.2.0", mp / "uns" / "extra" / "v")
    run_h5fs("umount", mp, check=True)

    read_back(path)
    got = anndata.read_h5ad(path)
    assert np.array_equal(got.uns["extra"]["v"], [1.5, 2.5])
    del got.uns["extra"]
    assert_same_adata(got, want)


def nexus_tree(path: Path) -> dict[str, object]:
    """Every link of the file (soft link targets; a hard link as the first path, in h5py's
    order, of the object it names), every value and every attribute, as h5py reads them."""
    out: dict[str, object] = {}
    first: dict[int, str] = {}
    with h5py.File(path, "r") as f:
        def visit(group: h5py.Group, prefix: str) -> None:
            out[f"{prefix}/@"] = {k: np.asarray(v).tolist() for k, v in group.attrs.items()}
            for name in group:
                link = group.get(name, getlink=True)
                p = f"{prefix}/{name}"
                if isinstance(link, h5py.SoftLink):
                    out[p] = ("soft", link.path)
                    continue
                obj = group[name]
                out[f"{p}#object"] = first.setdefault(h5py.h5o.get_info(obj.id).addr, p)
                if isinstance(obj, h5py.Group):
                    visit(obj, p)
                else:
                    out[p] = np.asarray(obj[()]).tolist()
                    out[f"{p}/@"] = {k: np.asarray(v).tolist() for k, v in obj.attrs.items()}
        visit(f, "")
    return out


@pytest.mark.parametrize("kind", ["nexus", "nexus-latest"])
def test_nexus_edits(mount, tmp_path, kind):
    path = made(kind, tmp_path)
    want = nexus_tree(path)
    mp = mount(path, "rw")
    entry = mp / "entry"
    assert os.getxattr(entry, "user.NX_class") == b"NXentry"
    # the NXdata group's `data` is the detector's dataset: one inode, two names
    linked, original = os.stat(entry / "data" / "data"), os.stat(entry / "instrument" / "detector" / "data")
    assert linked.st_ino == original.st_ino and linked.st_nlink == 2
    # absolute HDF5 targets, shown as paths inside the mount
    assert (entry / "data" / "x").resolve() == (entry / "instrument" / "detector" / "x").resolve()
    assert (entry / "sample").resolve() == (entry / "instrument").resolve()
    assert not os.readlink(entry / "sample").startswith("/")
    # the soft-linked axis reads as a hard-linked one would, through `x.npy`: a symlink too
    assert os.readlink(entry / "data" / "x.npy") == os.readlink(entry / "data" / "x") + ".npy"
    assert np.array_equal(np.load(entry / "data" / "x.npy"), np.linspace(0, 1, 20))
    assert sorted(os.listdir(entry / "data")) == ["data", "data.npy", "x", "x.npy"]
    assert "sample.npy" not in os.listdir(entry)   # a soft link to a group has no .npy
    # a write through one name is seen through the other
    data = np.lib.format.open_memmap(entry / "data" / "data.npy", mode="r+")
    data[7, 3:6] = [-1, -2, -3]
    data.flush()
    del data
    assert np.load(entry / "instrument" / "detector" / "data.npy")[7, 3:6].tolist() == [-1, -2, -3]
    values = np.array(want["/entry/instrument/detector/data"])
    values[7, 3:6] = [-1, -2, -3]
    want["/entry/instrument/detector/data"] = want["/entry/data/data"] = values.tolist()
    # a new NXprocess group holding a new dataset, and the unrelated dataset removed
    sh("mkdir", entry / "process")
    sh("setfattr", "-n", "user.NX_class", "-v", "NXprocess", entry / "process")
    cp_npy(np.arange(4, dtype="<i8"), entry / "process" / "steps.npy", tmp_path)
    sh("rm", entry / "spare")
    del want["/entry/spare"], want["/entry/spare/@"], want["/entry/spare#object"]
    # the title renamed, and a second soft link made with ln -s
    sh("mv", entry / "title", entry / "run_title")
    want["/entry/run_title"] = want.pop("/entry/title")
    want["/entry/run_title/@"] = want.pop("/entry/title/@")
    del want["/entry/title#object"]
    want["/entry/run_title#object"] = "/entry/run_title"
    sh("ln", "-s", "instrument/detector/data", entry / "raw")
    run_h5fs("umount", mp, check=True)

    read_back(path)
    got = nexus_tree(path)
    assert got.pop("/entry/process/@") == {"NX_class": "NXprocess"}
    assert got.pop("/entry/process/steps") == [0, 1, 2, 3]
    assert got.pop("/entry/process/steps/@") == {}
    assert got.pop("/entry/raw") == ("soft", "instrument/detector/data")
    for key in [k for k in got if k.startswith("/entry/process") and k.endswith("#object")]:
        del got[key]
    assert got == want
    with h5py.File(path, "r") as f:
        assert f["/entry/raw"][7, 4] == -2 and f["/entry/data/x"].attrs["units"] == "mm"
    # h5py (NeXus writers use it) writes into the edited file again
    with h5py.File(path, "r+") as f:
        f["/entry/data/data"][0, 0] = 1000
        f["/entry/process"].attrs["date"] = "today"
        f["/entry/process/more"] = np.ones(2)
        f["/entry/data/again"] = f["/entry/process/steps"]
    with h5py.File(path, "r") as f:
        assert f["/entry/instrument/detector/data"][0, 0] == 1000 and f["/entry/data/again"][3] == 3
    read_back(path)


def test_netcdf_edits(mount, tmp_path):
    path = made("netcdf", tmp_path)
    with xr.open_dataset(path, engine="netcdf4") as ds:
        want = ds.load()
    mp = mount(path, "rw")
    assert os.getxattr(mp / "x", "user.CLASS") == b"DIMENSION_SCALE"
    assert os.getxattr(mp / "temp", "user.units") == b"K"
    temp = np.lib.format.open_memmap(mp / "temp.npy", mode="r+")   # zlib chunks of (2, 4)
    temp[4, 1] = -40.0
    temp.flush()
    del temp
    want["temp"][4, 1] = -40.0
    dd(np.array([9.5], "<f8").tobytes(), mp / "x", 3 * 8, tmp_path)   # a coordinate value
    want = want.assign_coords(x=[0.5, 1.5, 2.5, 9.5])
    want["x"].attrs["units"] = "m"
    # a new time step on the unlimited dimension: both variables along it grow by one row
    assert os.getxattr(mp / "time", "user.h5fs.maxshape") == b"(unlimited,)"
    sh("truncate", "-s", str(7 * 8), mp / "time")
    dd(np.array([6], "<i8").tobytes(), mp / "time", 6 * 8, tmp_path)   # "days since 2024-01-01"
    sh("truncate", "-s", str(7 * 4 * 4), mp / "temp")
    dd(np.arange(100, 104, dtype="<f4").tobytes(), mp / "temp", 6 * 16, tmp_path)
    step = want.isel(time=[-1]).copy(deep=True)
    step["time"] = [np.datetime64("2024-01-07", "ns")]
    step["temp"][0] = np.arange(100, 104, dtype="f4")
    want = xr.concat([want, step], dim="time", data_vars="minimal")
    sh("rm", mp / "flag")                                   # a scalar variable: no dimension scales
    want = want.drop_vars("flag")
    sh("mv", mp / "spare", mp / "ones")
    want = want.rename({"spare": "ones"})
    sh("setfattr", "-n", "user.comment", "-v", "edited through h5fs", mp / "temp")
    want["temp"].attrs["comment"] = "edited through h5fs"
    sh("mkdir", mp / "extra")
    cp_npy(np.arange(5, dtype="<i4"), mp / "extra" / "n.npy", tmp_path)
    run_h5fs("umount", mp, check=True)

    read_back(path)
    with xr.open_dataset(path, engine="netcdf4") as got:
        xr.testing.assert_identical(got.load(), want)
    with xr.open_dataset(path, engine="netcdf4", group="extra") as extra:
        assert extra["n"].values.tolist() == [0, 1, 2, 3, 4]
    # netCDF-4 lists attributes in creation order: the new one last
    with netCDF4.Dataset(path, "a") as nc:
        assert nc["temp"].ncattrs() == ["_FillValue", "units", "long_name", "comment"]
        # and netCDF4 writes into the edited file again: one more time step, an attribute, a
        # variable in the group made by mkdir
        nc["time"][7] = 7
        nc["temp"][7] = np.arange(4)
        nc.setncattr("history", "appended")
        nc["extra"].createDimension("k", 2)
        nc["extra"].createVariable("w", "f4", ("k",))[:] = [1, 2]
    with xr.open_dataset(path, engine="netcdf4") as got:
        assert got.sizes["time"] == 8 and got["temp"][7].values.tolist() == [0, 1, 2, 3]
        assert got.attrs["history"] == "appended" and got["temp"][4, 1] == -40
    with xr.open_dataset(path, engine="netcdf4", group="extra") as extra:
        assert extra["w"].values.tolist() == [1, 2] and extra["n"].values.tolist() == [0, 1, 2, 3, 4]
    read_back(path)


@pytest.mark.parametrize("kind", ["nexus", "nexus-latest"])
def test_soft_link_npy_views(mount, tmp_path, kind):
    """A soft link to a dataset has a `.npy` symlink beside it, to the target's `.npy` view:
    made, renamed and removed with the link."""
    path = made(kind, tmp_path)
    mp = mount(path, "rw")
    nxdata = mp / "entry" / "data"
    data = np.arange(200, dtype="<i4").reshape(10, 20)
    assert not (nxdata / "raw.npy").exists()   # a negative entry the kernel caches
    sh("ln", "-s", "../instrument/detector/data", nxdata / "raw")
    # the kernel is told to drop its negative entry as the ln returns: asynchronously
    assert wait_until(lambda: os.path.lexists(nxdata / "raw.npy"), timeout=5)
    assert os.readlink(nxdata / "raw.npy") == os.readlink(nxdata / "raw") + ".npy"
    assert np.array_equal(np.load(nxdata / "raw.npy"), data)
    sh("ln", "-s", "../instrument", nxdata / "inst")   # a group: no .npy
    sh("ln", "-s", "x", nxdata / "chained")            # a soft link to a soft link to a dataset
    assert sorted(os.listdir(nxdata)) == ["chained", "chained.npy", "data", "data.npy", "inst", "raw", "raw.npy",
                                          "x", "x.npy"]
    assert np.array_equal(np.load(nxdata / "chained.npy"), np.linspace(0, 1, 20))
    # the target removed elsewhere, then made again: the listing follows
    detector = mp / "entry" / "instrument" / "detector"
    sh("mv", detector / "x", detector / "x_old")
    assert "x.npy" not in os.listdir(nxdata) and os.path.islink(nxdata / "x")
    sh("cp", detector / "x_old.npy", detector / "x.npy")
    assert "x.npy" in os.listdir(nxdata)
    sh("rm", detector / "x_old")
    # (the kernel drops its entry of the other name asynchronously, as for a dataset's views)
    sh("mv", nxdata / "raw.npy", nxdata / "linked.npy")   # renames the soft link
    assert "raw" not in os.listdir(nxdata) and wait_until(lambda: not os.path.lexists(nxdata / "raw"), timeout=5)
    assert not os.path.lexists(nxdata / "raw.npy")
    assert np.array_equal(np.load(nxdata / "linked.npy"), data)
    sh("rm", nxdata / "x.npy")                             # removes the soft link x
    assert "x" not in os.listdir(nxdata) and wait_until(lambda: not os.path.lexists(nxdata / "x"), timeout=5)
    sh("rm", "-r", nxdata)
    assert sorted(os.listdir(mp / "entry")) == ["instrument", "sample", "spare", "spare.npy", "title", "title.npy"]
    run_h5fs("umount", mp, check=True)

    read_back(path)
    with h5py.File(path, "r") as f:
        assert "data" not in f["entry"] and np.array_equal(f["entry/instrument/detector/data"][()], data)
        assert f["entry"].get("sample", getlink=True).path == "/entry/instrument"


@pytest.mark.parametrize("kind", ["nexus", "nexus-latest"])
def test_soft_links_follow_their_group_to_another_depth(mount, tmp_path, kind):
    """An NXdata group moved deeper: its soft links (absolute HDF5 targets, shown relative to
    their directory) still point at the detector's datasets, the kernel's inodes of them too."""
    path = made(kind, tmp_path)
    mp = mount(path, "rw")
    entry = mp / "entry"
    x = np.linspace(0, 1, 20)
    assert np.array_equal(np.load(entry / "data" / "x.npy"), x)   # the kernel now holds their inodes
    assert os.readlink(entry / "data" / "x") == "../../entry/instrument/detector/x"
    sh("mkdir", entry / "plots")
    sh("mv", entry / "data", entry / "plots" / "first")
    moved = entry / "plots" / "first"
    assert os.readlink(moved / "x") == "../../../entry/instrument/detector/x"
    assert os.readlink(moved / "x.npy") == "../../../entry/instrument/detector/x.npy"
    assert np.array_equal(np.fromfile(moved / "x"), x) and np.array_equal(np.load(moved / "x.npy"), x)
    sh("mv", entry / "plots", mp / "plots")   # and up again
    assert np.array_equal(np.load(mp / "plots" / "first" / "x.npy"), x)
    # the links themselves moved: to the root, then (by their .npy name) two groups down
    sh("mv", mp / "plots" / "first" / "x", mp / "x_root")
    assert os.readlink(mp / "x_root") == "entry/instrument/detector/x"
    assert np.array_equal(np.fromfile(mp / "x_root"), x)
    sh("mv", mp / "x_root.npy", entry / "instrument" / "x_deep.npy")
    assert os.readlink(entry / "instrument" / "x_deep.npy") == "../../entry/instrument/detector/x.npy"
    assert np.array_equal(np.load(entry / "instrument" / "x_deep.npy"), x)
    run_h5fs("umount", mp, check=True)

    read_back(path)
    with h5py.File(path, "r") as f:
        assert "x" not in f["plots/first"] and "x_root" not in f
        assert f["entry/instrument"].get("x_deep", getlink=True).path == "/entry/instrument/detector/x"
        assert np.array_equal(f["entry/instrument/x_deep"][()], x)
