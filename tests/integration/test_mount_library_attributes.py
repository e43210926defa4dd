"""setfattr on attributes written by netCDF-4, PyTables and h5py behaves as those libraries do
when a user sets the attribute: a fixed-length string (how netCDF-4 and PyTables store every text
attribute, at exactly its length) is stored at the new text's length, its padding and character
set kept, in the header or in dense storage; a one-element number (how netCDF stores every numeric
attribute) takes its value alone. Each file is read back with the library that wrote it, every
other attribute and all data unchanged; h5py then reads the whole file and `h5fs check` passes.
Text that cannot be held stays EINVAL, the reason in the daemon's log."""

from __future__ import annotations

import ctypes
import glob
import os
import shutil
import subprocess

import h5py
import netCDF4
import numpy as np
import pytest
import tables

import roundtrip_support as R
from h5fs.model import messages as M
from h5fs.model.file import H5File
from h5fs.model.tree_edit import TreeEditor
from h5fs.model.writeback import Writeback
from write_support import verify_file

PADS = {"nullterm": h5py.h5t.STR_NULLTERM, "nullpad": h5py.h5t.STR_NULLPAD, "spacepad": h5py.h5t.STR_SPACEPAD}
CSETS = {"ascii": h5py.h5t.CSET_ASCII, "utf8": h5py.h5t.CSET_UTF8}


def setfattr(target, name: str, value: str) -> subprocess.CompletedProcess:
    return subprocess.run(["setfattr", "-n", f"user.{name}", "-v", value, str(target)],
                          capture_output=True, text=True, timeout=60)


def set_ok(target, name: str, value: str) -> None:
    proc = setfattr(target, name, value)
    assert proc.returncode == 0, proc.stderr


def snapshot(path) -> dict[str, object]:
    """Every dataset and attribute as h5py reads them (read_everything's walk), values holding
    object references as the names they point to: a reference read by another open of the file
    compares unequal."""
    with h5py.File(path, "r") as f:
        def plain(value):
            if isinstance(value, h5py.Reference):
                return f[value].name
            if isinstance(value, np.ndarray):
                return [plain(v) for v in value.tolist()] if value.dtype.hasobject else value.tolist()
            if isinstance(value, (tuple, list)):
                return [plain(v) for v in value]
            return value
        out: dict[str, object] = {}

        def visit(name, obj):
            for key, value in obj.attrs.items():
                if isinstance(value, h5py.Empty):   # a null dataspace
                    out[f"{name}@{key}"] = ("empty", value.dtype)
                    continue
                value = np.asarray(value)
                out[f"{name}@{key}"] = (value.dtype.descr, value.shape, plain(value)) if value.dtype.hasobject else value
            if isinstance(obj, h5py.Dataset):
                out[name] = obj[()]
        visit("/", f)
        f.visititems(visit)
    return out


def unchanged(before: dict, after: dict, edited: set[str]) -> None:
    """Every dataset and attribute h5py reads is as it was, but the edited ones."""
    assert set(after) - edited == set(before) - edited
    for key, value in before.items():
        if key in edited:
            continue
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(after[key], value, err_msg=key)
            assert after[key].dtype == value.dtype, key
        else:
            assert after[key] == value, key


def string_type(obj, name: str) -> tuple[int, int, int, tuple | None]:
    """(size, padding, character set, shape) of a fixed-length string attribute, as libhdf5 reads it."""
    aid = obj.attrs.get_id(name)
    t = aid.get_type()
    assert isinstance(t, h5py.h5t.TypeStringID) and not t.is_variable_str(), name
    return t.get_size(), t.get_strpad(), t.get_cset(), aid.shape


def raw_strings(obj, name: str) -> list[bytes]:
    """The elements' stored bytes, padding included (read with the file's own type)."""
    aid = obj.attrs.get_id(name)
    t = aid.get_type()
    out = np.zeros(aid.shape, dtype=f"S{t.get_size()}")
    aid.read(out, mtype=t)
    return [bytes(x).ljust(t.get_size(), b"\0") for x in out.reshape(-1)]


def is_dense(path, name: str) -> bool:
    with h5py.File(path, "r") as f:
        address = h5py.h5o.get_info(f[name].id).addr
    with H5File.open(str(path)) as hf:
        info = hf.get(address, name).message(M.ATTRIBUTE_INFO)
    return info is not None and info.heap_address is not None


# ------------------------------------------------------------------------------------- netCDF-4

def build_netcdf(path) -> None:
    with netCDF4.Dataset(path, "w") as d:
        d.createDimension("x", 4)
        t = d.createVariable("t", "i2", ("x",), fill_value=-1)
        t.units = "K"
        t.long_name = "air temperature"
        t.scale_factor = 0.01
        t.add_offset = np.float32(273.15)
        t.set_auto_maskandscale(False)
        t[:] = [1, 2, 3, 4]
        many = d.createVariable("many", "f8", ("x",))   # more than 8 attributes: dense storage
        for i in range(10):
            many.setncattr(f"note{i}", f"n{i}")
        many.valid_max = 10.0
        many[:] = [0.5, 1.5, 2.5, 3.5]
        d.title = "netCDF test"
        d.history = "made by the test"


def test_netcdf_attributes(tmp_path, mount):
    """netCDF4's setncattr as a user types it: units K -> degC, a shorter long_name, a scalar
    scale_factor, a longer global title, the empty string, dense attributes; netCDF4 reads back
    the new strings and scalars, with ncattr types it wrote."""
    p = tmp_path / "nc.nc"
    build_netcdf(p)
    assert is_dense(p, "many")
    before = snapshot(p)
    mp = mount(p, "rw")
    set_ok(mp / "t", "units", "degC")
    set_ok(mp / "t", "long_name", "T")
    set_ok(mp / "t", "scale_factor", "0.02")
    set_ok(mp / "t", "add_offset", "-1.5")
    set_ok(mp, "title", "a longer title of the netCDF file")
    set_ok(mp, "history", "")
    set_ok(mp / "many", "note3", "a much longer note three")
    set_ok(mp / "many", "valid_max", "99")
    assert os.getxattr(mp / "t", "user.units") == b"degC"   # the mount shows the new values at once
    assert os.getxattr(mp / "many", "user.note3") == b"a much longer note three"
    mount.unmount(mp)
    with netCDF4.Dataset(p) as d:
        t = d["t"]
        assert t.getncattr("units") == "degC"
        assert t.getncattr("long_name") == "T"
        assert t.getncattr("scale_factor") == np.float64(0.02)
        assert np.ndim(t.getncattr("scale_factor")) == 0
        assert t.getncattr("add_offset") == np.float32(-1.5) and t.getncattr("add_offset").dtype == np.float32
        assert t.getncattr("_FillValue") == -1
        assert d.getncattr("title") == "a longer title of the netCDF file"
        assert d.getncattr("history") == ""
        assert d["many"].getncattr("note3") == "a much longer note three"
        assert d["many"].getncattr("note4") == "n4" and d["many"].getncattr("valid_max") == 99.0
        assert list(t[:]) == [-1.5 + 0.02 * k for k in (1, 2, 3, 4)]   # unpacked with the new attributes
        assert list(d["many"][:]) == [0.5, 1.5, 2.5, 3.5]
        assert d.dimensions["x"].size == 4
    with h5py.File(p, "r") as f:   # netCDF's own form kept: NULL-terminated ASCII, exactly the text
        assert string_type(f["t"], "units") == (4, h5py.h5t.STR_NULLTERM, h5py.h5t.CSET_ASCII, ())
        assert raw_strings(f["t"], "units") == [b"degC"]
        assert string_type(f, "history") == (1, h5py.h5t.STR_NULLTERM, h5py.h5t.CSET_ASCII, ())
        assert f["t"].attrs["scale_factor"].shape == (1,) and f["t"].attrs["scale_factor"].dtype == "<f8"
    verify_file(p, h5dump=False)
    after = snapshot(p)
    unchanged(before, after, {"t@units", "t@long_name", "t@scale_factor", "t@add_offset", "/@title",
                              "/@history", "many@note3", "many@valid_max"})


def test_netcdf_values_that_cannot_be_held(tmp_path, mount):
    """Text into a number and a list of the wrong length stay EINVAL, the reason logged; the
    file is as it was."""
    p = tmp_path / "nc.nc"
    build_netcdf(p)
    before = snapshot(p)
    mp = mount(p, "rw")
    for name, value in (("scale_factor", "degC"), ("scale_factor", "[0.1, 0.2]"), ("add_offset", "[[1]]")):
        proc = setfattr(mp / "t", name, value)
        assert proc.returncode != 0 and "Invalid argument" in proc.stderr, (name, value)
    log = mount.log_of(mp)
    assert "'degC' is not a number" in log
    assert "2 items where the shape (1,) needs 1" in log
    mount.unmount(mp)
    verify_file(p, h5dump=False)
    unchanged(before, snapshot(p), set())


def test_netcdf_refuses_what_netcdf_refuses(tmp_path, mount):
    """netCDF-C refuses a variable's _FillValue once the variable exists (NC_ELATEFILL) and its
    own reserved attributes (NC_ENAMEINUSE): EINVAL with the reason logged. Removing a variable's
    _FillValue, and a global _FillValue, netCDF-C allows (the twin edits by the netCDF library on
    a copy say so)."""
    p = tmp_path / "nc.nc"
    build_netcdf(p)
    twin = tmp_path / "twin.nc"
    shutil.copy(p, twin)
    libnc = ctypes.CDLL(glob.glob(os.path.join(os.path.dirname(netCDF4.__file__), "..", "netcdf4.libs",
                                               "libnetcdf*"))[0])
    ncid, varid = ctypes.c_int(), ctypes.c_int()
    assert libnc.nc_open(str(twin).encode(), 1, ctypes.byref(ncid)) == 0
    assert libnc.nc_inq_varid(ncid, b"t", ctypes.byref(varid)) == 0
    assert libnc.nc_put_att(ncid, varid, b"_FillValue", 3, 1, ctypes.byref(ctypes.c_short(-5))) == -122
    assert libnc.nc_put_att_text(ncid, varid, b"_Netcdf4Coordinates", 1, b"x") == -42
    assert libnc.nc_put_att_text(ncid, -1, b"_FillValue", 2, b"ok") == 0
    assert libnc.nc_del_att(ncid, varid, b"_FillValue") == 0
    assert libnc.nc_close(ncid) == 0

    before = snapshot(p)
    mp = mount(p, "rw")
    for target, name, value in ((mp / "t", "_FillValue", "-5"), (mp / "t", "_Netcdf4Coordinates", "[1]"),
                                (mp / "x", "CLASS", "DIMENSION_SCALE"), (mp / "x", "NAME", "x"),
                                (mp, "_NCProperties", "version=2")):
        proc = setfattr(target, name, value)
        assert proc.returncode != 0 and "Invalid argument" in proc.stderr, name
    proc = subprocess.run(["setfattr", "-x", "user._Netcdf4Dimid", str(mp / "x")], capture_output=True, text=True)
    assert proc.returncode != 0 and "Invalid argument" in proc.stderr
    log = mount.log_of(mp)
    assert "NC_ELATEFILL" in log and "'_Netcdf4Dimid' is netCDF-4's own" in log
    set_ok(mp, "_FillValue", "ok")
    subprocess.run(["setfattr", "-x", "user._FillValue", str(mp / "t")], check=True, timeout=60)
    mount.unmount(mp)
    verify_file(p, h5dump=False)
    after = snapshot(p)
    unchanged(before, after, {"t@_FillValue", "/@_FillValue"})
    with netCDF4.Dataset(p) as d, netCDF4.Dataset(twin) as t:
        assert d.getncattr("_FillValue") == t.getncattr("_FillValue") == b"ok"   # netCDF4 gives this one as bytes
        assert "_FillValue" not in d["t"].ncattrs() and "_FillValue" not in t["t"].ncattrs()
        assert d["t"].ncattrs() == t["t"].ncattrs()


def test_new_text_attributes_as_the_library_writes_them(tmp_path, mount):
    """A new text attribute in a netCDF-4 file is NC_CHAR (fixed-length ASCII), in a PyTables file
    a fixed-length UTF-8 string ("" a null dataspace), as setncattr and PyTables' attrs write
    them on a twin file; in an h5py file a variable-length UTF-8 string, as h5py writes a str."""
    nc, pt, hp = tmp_path / "nc.nc", tmp_path / "pt.h5", tmp_path / "f.h5"
    build_netcdf(nc)
    build_pytables(pt)
    build_h5py(hp, "earliest")
    twins = {}
    for path in (nc, pt, hp):
        twins[path] = tmp_path / f"twin-{path.name}"
        shutil.copy(path, twins[path])
    with netCDF4.Dataset(twins[nc], "a") as d:
        d["t"].comment = "new comment"
        d.institution = ""
    with tables.open_file(twins[pt], "a") as h:
        h.root.arr._v_attrs.comment = "new comment é"
        h.root.tab._v_attrs.note = ""
    with h5py.File(twins[hp], "a") as f:
        f["d"].attrs["comment"] = "new comment"
    edits = {nc: [("t", "comment", "new comment"), ("/", "institution", "")],
             pt: [("arr", "comment", "new comment é"), ("tab", "note", "")],
             hp: [("d", "comment", "new comment")]}
    for path, todo in edits.items():
        mp = mount(path, "rw")
        for obj, name, value in todo:
            set_ok(mp / obj.strip("/"), name, value)
        mount.unmount(mp)
        verify_file(path, h5dump=False)
        with h5py.File(path, "r") as f, h5py.File(twins[path], "r") as t:
            for obj, name, value in todo:
                mine, theirs = f[obj].attrs.get_id(name), t[obj].attrs.get_id(name)
                assert mine.get_type() == theirs.get_type(), (path.name, name)
                assert mine.get_space().get_simple_extent_type() == theirs.get_space().get_simple_extent_type()
                assert mine.shape == theirs.shape
                if mine.shape is not None:
                    assert f[obj].attrs[name] == t[obj].attrs[name]
    with netCDF4.Dataset(nc) as d:
        assert d["t"].getncattr("comment") == "new comment" and d.getncattr("institution") == ""
    with tables.open_file(pt) as h:
        assert h.root.arr._v_attrs.comment == "new comment é" and h.root.tab._v_attrs.note == ""


# ------------------------------------------------------------------------------------- PyTables

def build_pytables(path) -> None:
    class Row(tables.IsDescription):
        x = tables.Int32Col()
        y = tables.Float64Col()

    with tables.open_file(path, "w", title="file title") as h:
        a = h.create_array("/", "arr", np.arange(6), title="an array")
        a._v_attrs.empty = ""        # PyTables stores "" with a null dataspace
        tab = h.create_table("/", "tab", Row, title="a table")
        tab.append([(1, 0.5), (2, 1.5)])


def test_pytables_titles(tmp_path, mount):
    """TITLE longer and shorter, the root's TITLE emptied, PyTables' empty attribute set: PyTables
    reads exactly the new text (no NUL padding), and the nodes' CLASS, VERSION and data stay."""
    p = tmp_path / "pt.h5"
    build_pytables(p)
    before = snapshot(p)
    mp = mount(p, "rw")
    set_ok(mp / "arr", "TITLE", "new title of the array")
    set_ok(mp / "tab", "TITLE", "new title")
    set_ok(mp, "TITLE", "")
    set_ok(mp / "arr", "empty", "now set")
    mount.unmount(mp)
    with tables.open_file(p) as h:
        assert h.root.arr._v_attrs.TITLE == "new title of the array"
        assert h.root.tab._v_attrs.TITLE == "new title"
        assert h.root._v_attrs.TITLE == ""
        assert h.root.arr._v_attrs.empty == "now set"
        assert h.root.arr.title == "new title of the array" and h.root.tab.title == "new title"
        assert h.root.arr._v_attrs.CLASS == "ARRAY" and h.root.tab._v_attrs.CLASS == "TABLE"
        assert h.root.tab._v_attrs.VERSION == before["tab@VERSION"].item().decode()
        assert list(h.root.arr[:]) == list(range(6))
        assert h.root.tab[:].tolist() == [(1, 0.5), (2, 1.5)]
    with h5py.File(p, "r") as f:   # PyTables' form kept: NULL-terminated UTF-8, exactly the text
        assert string_type(f["tab"], "TITLE") == (9, h5py.h5t.STR_NULLTERM, h5py.h5t.CSET_UTF8, ())
        assert string_type(f["arr"], "empty") == (7, h5py.h5t.STR_NULLTERM, h5py.h5t.CSET_UTF8, ())
    verify_file(p, h5dump=False)
    after = snapshot(p)
    unchanged(before, after, {"arr@TITLE", "tab@TITLE", "/@TITLE", "arr@empty"})


# ----------------------------------------------------------------------------------------- h5py

def fixed_string(obj, name: str, values: list[bytes], size: int, pad: int, cset: int, shape=()) -> None:
    """A fixed-length string attribute of this padding and character set, its bytes padded so."""
    t = h5py.h5t.C_S1.copy()
    t.set_size(size)
    t.set_strpad(pad)
    t.set_cset(cset)
    space = h5py.h5s.create(h5py.h5s.SCALAR) if shape == () else h5py.h5s.create_simple(shape)
    fill = b" " if pad == h5py.h5t.STR_SPACEPAD else b"\0"
    data = np.array([v.ljust(size, fill) for v in values], dtype=f"S{size}").reshape(shape)
    h5py.h5a.create(obj.id, name.encode(), t, space).write(data, mtype=t)


def build_h5py(path, libver: str) -> None:
    with h5py.File(path, "w", libver=libver) as f:
        d = f.create_dataset("d", data=np.arange(10, dtype="i4"))
        for pad in PADS:
            for cset in CSETS:
                fixed_string(d, f"{pad}_{cset}", [b"abc"], 8, PADS[pad], CSETS[cset])
        fixed_string(d, "one", [b"only"], 4, PADS["nullterm"], CSETS["ascii"], shape=(1,))
        fixed_string(d, "three", [b"ab", b"cde", b"f"], 3, PADS["spacepad"], CSETS["utf8"], shape=(3,))
        d.attrs.create("n1", [7], dtype="<i4")
        d.attrs.create("n11", [[2.5]], dtype=">f4")
        d.attrs["vlen"] = "variable"
        g = f.create_group("g")   # 12 attributes: dense storage in a version 2 header
        for i in range(12):
            fixed_string(g, f"s{i:02d}", [f"value {i}".encode()], 8, PADS["nullpad"], CSETS["utf8"])


EDITS = {   # name -> (setfattr text, stored elements expected: the text at its own length)
    "one": ("a longer single string", [b"a longer single string"]),
    "three": ("longer\nx\n", [b"longer", b"x     ", b"      "]),
    **{f"{pad}_{cset}": (f"{pad} {cset} é", [f"{pad} {cset} é".encode()]) for pad in PADS for cset in CSETS},
}


def test_h5py_fixed_strings_and_one_element_numbers(tmp_path, mount, libver):
    """Each padding and character set, a 1-element and a 3-element string array, one-element
    numbers of shape (1,) and (1, 1), dense attributes (libver latest), an empty string: the
    datatype's size follows the text, everything else about the attribute stays."""
    p = tmp_path / "f.h5"
    build_h5py(p, libver)
    assert is_dense(p, "g") == (libver == "latest")
    with h5py.File(p, "r") as f:
        types = {name: string_type(f["d"], name) for name in EDITS}
        dense_type = string_type(f["g"], "s05")
    before = snapshot(p)
    mp = mount(p, "rw")
    for name, (text, _) in EDITS.items():
        set_ok(mp / "d", name, text)
    set_ok(mp / "d", "n1", "-9")
    set_ok(mp / "d", "n11", "[[0.75]]")
    set_ok(mp / "d", "vlen", "a variable-length string")
    set_ok(mp / "g", "s05", "a value longer than eight bytes")
    set_ok(mp / "g", "s06", "")
    set_ok(mp / "g", "s07", "short")
    assert os.getxattr(mp / "d", "user.one") == b"a longer single string"   # the mount shows the new values at once
    assert os.getxattr(mp / "g", "user.s05") == b"a value longer than eight bytes"
    mount.unmount(mp)
    with h5py.File(p, "r") as f:
        d = f["d"]
        for name, (_, stored) in EDITS.items():
            size, pad, cset, shape = types[name]
            assert string_type(d, name) == (len(stored[0]), pad, cset, shape), name
            assert raw_strings(d, name) == stored, name
        assert d.attrs["nullpad_utf8"] == "nullpad utf8 é".encode()
        n1, n11 = d.attrs["n1"], d.attrs["n11"]
        assert n1.dtype == "<i4" and n1.shape == (1,) and n1[0] == -9
        assert n11.dtype == ">f4" and n11.shape == (1, 1) and n11[0, 0] == 0.75
        assert d.attrs["vlen"] == "a variable-length string"
        g = f["g"]
        assert string_type(g, "s05") == (len("a value longer than eight bytes"),) + dense_type[1:]
        assert g.attrs["s05"] == b"a value longer than eight bytes"
        assert string_type(g, "s06") == (1,) + dense_type[1:] and g.attrs["s06"] == b""
        assert string_type(g, "s07") == (5,) + dense_type[1:] and g.attrs["s07"] == b"short"
    assert is_dense(p, "g") == (libver == "latest")
    verify_file(p, h5dump=libver == "earliest")
    after = snapshot(p)
    unchanged(before, after, {f"d@{n}" for n in EDITS} | {"d@n1", "d@n11", "d@vlen", "g@s05", "g@s06", "g@s07"})


def test_h5py_values_that_cannot_be_held(tmp_path, mount):
    """A one-element number takes no text and no list of another length; a string array takes
    its number of lines only."""
    p = tmp_path / "f.h5"
    build_h5py(p, "earliest")
    before = snapshot(p)
    mp = mount(p, "rw")
    for name, value in (("n1", "seven"), ("n1", "[1, 2]"), ("n11", "[0.5, 1]"), ("three", "a\nb")):
        proc = setfattr(mp / "d", name, value)
        assert proc.returncode != 0 and "Invalid argument" in proc.stderr, (name, value)
    assert "2 lines for 3 string elements" in mount.log_of(mp)
    mount.unmount(mp)
    verify_file(p, h5dump=True)
    unchanged(before, snapshot(p), set())


def types_only_fcpl():
    """One shared-message index of datatypes and dataspaces: attribute messages stay in headers."""
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    R.c_call("H5Pset_shared_mesg_nindexes", fcpl.id, 1)
    R.c_call("H5Pset_shared_mesg_index", fcpl.id, 0, 1 << M.DATATYPE | 1 << M.DATASPACE, 1)
    return fcpl


@pytest.mark.parametrize("shared", ["attributes", "datatypes"])
def test_shared_string_datatype(tmp_path, mount, shared):
    """Fixed-length strings whose datatype the file's shared-message table holds (in shared
    attribute messages, or in the header's own): the resized one is stored in the attribute, the
    table's uses counted down (libhdf5 then deletes every attribute, which fails on a use
    miscounted)."""
    p = tmp_path / "sohm.h5"
    fcpl = R.sohm_fcpl(50, 40) if shared == "attributes" else types_only_fcpl()
    with R.new_file(p, "latest", (8, 8), fcpl) as f:
        for i in range(4):
            d = f.create_dataset(f"d{i}", data=np.arange(5))
            fixed_string(d, "units", [b"metres" if i < 3 else b"litres"], 6, PADS["nullterm"], CSETS["ascii"])
    with h5py.File(p, "r") as f:
        addresses = [h5py.h5o.get_info(f[f"d{i}"].id).addr for i in range(4)]
    with H5File.open(str(p)) as hf:
        for i, a in enumerate(addresses):
            obj = hf.get(a, f"d{i}")
            assert obj.attributes()[0].msg.datatype_shared
            assert [raw.shared for raw in obj.header.find(M.ATTRIBUTE)] == [shared == "attributes"]
    mp = mount(p, "rw")
    set_ok(mp / "d1", "units", "kilometres")
    set_ok(mp / "d3", "units", "millilitres")
    mount.unmount(mp)
    verify_file(p, h5dump=False)
    with h5py.File(p, "r+") as f:
        assert string_type(f["d1"], "units") == (10, h5py.h5t.STR_NULLTERM, h5py.h5t.CSET_ASCII, ())
        assert f["d1"].attrs["units"] == b"kilometres" and f["d3"].attrs["units"] == b"millilitres"
        assert f["d0"].attrs["units"] == b"metres" and f["d2"].attrs["units"] == b"metres"
        for i in range(4):
            del f[f"d{i}"].attrs["units"]
    verify_file(p, h5dump=False)


@pytest.mark.parametrize("track", [False, True])
def test_dense_strings_resized_many_times(tmp_path, track):
    """The engine alone: dense fixed-length strings (creation order tracked and indexed, or not)
    set again and again to texts of random lengths, each edit its own transaction: h5py reads
    every value, in the same order, and `h5fs check` passes."""
    p = tmp_path / "dense.h5"
    with h5py.File(p, "w", libver="latest") as f:
        g = f.create_group("g", track_order=track)
        for i in range(20):
            fixed_string(g, f"s{i:02d}", [b"x" * (i + 1)], i + 1, PADS["nullterm"], CSETS["utf8"])
    with h5py.File(p, "r") as f:
        address, order = h5py.h5o.get_info(f["g"].id).addr, list(f["g"].attrs)
    assert is_dense(p, "g")
    rng = np.random.default_rng(7)
    expected = {f"s{i:02d}": b"x" * (i + 1) for i in range(20)}
    hf = H5File.open(str(p), writable=True, lock=True)
    wb = Writeback(hf, 16 << 20)
    try:
        editor = TreeEditor(hf, wb)
        for k in range(120):
            name = f"s{rng.integers(20):02d}"
            expected[name] = bytes(rng.integers(97, 123, int(rng.integers(0, 300)), dtype=np.uint8))
            editor.set_attribute(hf.get(address, "/g"), name, expected[name])
    finally:
        wb.close()
        hf.close()
    verify_file(p, h5dump=False)
    with h5py.File(p, "r") as f:
        assert list(f["g"].attrs) == order
        assert {name: f["g"].attrs[name] for name in order} == expected
        assert all(string_type(f["g"], name)[0] == max(1, len(expected[name])) for name in order)
