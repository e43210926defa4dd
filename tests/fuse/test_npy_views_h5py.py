"""The `.npy` views h5py users expect, through real mounts, against h5py's `ds[()]`:

- array datatypes: `D.npy` has the dataspace's shape followed by the array's dims (nested arrays
  flattened) and the base type; a compound's array members stay subarray fields;
- opaque types h5py tagged with a NumPy type (`h5py.opaque_dtype`, tag "NUMPY:<str>"): `D.npy`
  has that type (datetime64, timedelta64...), in compound members and array bases too; other
  opaque types stay void.

Each `D.npy` is byte for byte what `np.save` writes of h5py's array; writes through it (a
memmap) and `cp` of datetime `.npy` files land in files h5py reads back and `h5fs check` passes.
"""

from __future__ import annotations

import io
import os
import subprocess

import h5py
import numpy as np
import pytest

from conftest import make_h5, run_h5fs, saved
from h5fs.format.messages.datatype import Opaque
from h5fs.model.dtypes import npy_dtype
from h5fs.model.file import H5File
from h5fs.model.points_write import read_points, replace_points
from h5fs.model.tree_edit import TreeEditor
from h5fs.model.writeback import Writeback
from remote_support import range_server, read_mount, s3_server  # noqa: F401 (fixtures)
from write_support import verify_file

RNG = np.random.default_rng(2024)
SUB_2D = np.dtype(("<i2", (2, 3)))


def opaque_of(dt) -> np.dtype:
    return h5py.opaque_dtype(np.dtype(dt))


def datetimes(dt: str, n: int) -> np.ndarray:
    """`n` values of datetime64/timedelta64 type `dt` (some before 1970), their counts of units
    taken as they are (generic units too, which hold no value NumPy converts)."""
    return RNG.integers(-10**9, 10**9, n).astype("=i8").view(np.dtype(dt).newbyteorder("=")).astype(dt)


def put_array(f: h5py.Group, name: str, arr: np.ndarray, dims: tuple[int, ...], **kw) -> None:
    """A dataset of the array datatype (arr's type, `dims`), its trailing axes the elements'."""
    shape = arr.shape[:arr.ndim - len(dims)]
    f.create_dataset(name, shape=shape, dtype=np.dtype((arr.dtype, dims)), **kw)[...] = arr


def put_opaque(f: h5py.Group, name: str, arr: np.ndarray, **kw) -> None:
    """A dataset of h5py's tagged opaque type for `arr`'s dtype, the bytes written as they are
    (`arr.astype(h5py.opaque_dtype(...))` drops the marker of a generic datetime64)."""
    ds = f.create_dataset(name, shape=arr.shape, dtype=opaque_of(arr.dtype), **kw)
    ds.id.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(arr), mtype=ds.id.get_type())


def low_level(f: h5py.Group, name: str, tid, shape, data: np.ndarray, compact: bool = False) -> None:
    """A dataset of type `tid` written as its stored bytes (types h5py's high level cannot make)."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    if compact:
        dcpl.set_layout(h5py.h5d.COMPACT)
    space = h5py.h5s.create_simple(shape) if shape else h5py.h5s.create(h5py.h5s.SCALAR)
    h5py.h5d.create(f.id, name.encode(), tid, space, dcpl=dcpl).write(h5py.h5s.ALL, h5py.h5s.ALL, data, mtype=tid)


def tagged_opaque(size: int, tag: bytes):
    tid = h5py.h5t.create(h5py.h5t.OPAQUE, size)
    tid.set_tag(tag)
    return tid


def build(f: h5py.File) -> None:
    # array datatypes: contiguous, chunked (edge chunks on every axis, filtered or not), compact
    put_array(f, "sub_1d", np.arange(200, dtype="<i2").reshape(40, 5), (5,))
    put_array(f, "sub_2d", np.arange(180, dtype="<i2").reshape(30, 2, 3), (2, 3))
    put_array(f, "sub_chunked_gzip", RNG.standard_normal((50, 7, 2, 3)).astype(">f4"), (2, 3), chunks=(8, 3),
              compression="gzip", shuffle=True)
    put_array(f, "sub_chunked", RNG.integers(0, 1 << 60, (64, 3), dtype="<u8"), (3,), chunks=(10,))
    f.create_dataset("sub_unwritten", shape=(9,), dtype=SUB_2D, chunks=(4,))
    put_array(f, "sub_scalar", np.arange(6, dtype="<i2").reshape(2, 3), (2, 3))
    low_level(f, "sub_compact", h5py.h5t.py_create(SUB_2D), (4,), np.arange(24, dtype="<i2").reshape(4, 2, 3),
              compact=True)
    nested = np.dtype((np.dtype(("<i2", (3,))), (2,)))
    low_level(f, "sub_nested", h5py.h5t.py_create(nested), (6,), np.arange(36, dtype="<i2").reshape(6, 2, 3))
    put_array(f, "sub_of_compound", np.arange(12).reshape(3, 4).astype([("x", "<i2"), ("y", "<f8")]), (4,))
    sub_dt = np.dtype((opaque_of("<M8[s]"), (2,)))
    low_level(f, "sub_of_datetime", h5py.h5t.py_create(sub_dt), (5,), datetimes("<M8[s]", 10).reshape(5, 2))
    cmp = np.dtype([("x", "<i4"), ("z", "<f4", (2,)), ("t", opaque_of("<M8[D]")), ("n", ("u1", (2,)), (3,)),
                    ("p", [("a", "u1"), ("b", ">i2")], (2,))])
    values = np.zeros(12, cmp)
    values["x"], values["z"] = np.arange(12), RNG.standard_normal((12, 2))
    values["t"] = datetimes("<M8[D]", 12)
    values["n"] = RNG.integers(0, 255, (12, 3, 2))
    values["p"]["b"] = RNG.integers(-999, 999, (12, 2))
    f.create_dataset("compound_sub", data=values, chunks=(5,))
    # h5py's tagged opaque types: several units, both byte orders, chunked, scalar
    for dt in ("<M8[s]", "<M8[ms]", "<M8[us]", "<M8[ns]", "<M8[D]", ">M8[us]", "<M8", "<m8[ms]", "<m8[ns]",
               "<m8[h]", ">m8[s]"):
        put_opaque(f, f"dt {dt}", datetimes(dt, 17))
    put_opaque(f, "dt_chunked", datetimes("<M8[s]", 1000).reshape(100, 10), chunks=(16, 4), compression="gzip")
    put_opaque(f, "dt_scalar", datetimes("<m8[us]", 1).reshape(()))
    put_opaque(f, "opaque_f4", RNG.standard_normal(6).astype("<f4"))   # any plain type h5py tags
    f.create_dataset("void", data=np.frombuffer(RNG.bytes(20), "V4"))   # untagged: stays void


# other tags (h5py reads none of these: libhdf5 converts an opaque type only to one of its tag)
OTHER_TAGS = {"foreign": b"my format", "bogus": b"NUMPY:bogus", "size": b"NUMPY:<i4", "object": b"NUMPY:O",
              "empty": b"NUMPY:"}


@pytest.fixture(scope="module", params=("earliest", "latest"))
def views_file(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / "views.h5"
    return make_h5(path, build, request.param)


def test_npy_views_are_what_h5py_reads(views_file, read_mount):
    mp = read_mount(views_file)
    with h5py.File(views_file, "r") as f:
        for name in f:
            ds = f[name]
            want = ds[()]
            got = np.load(mp / f"{name}.npy", allow_pickle=False)
            assert (got.dtype, got.shape) == (want.dtype, want.shape), name
            assert got.tobytes() == want.tobytes(), name
            data = (mp / f"{name}.npy").read_bytes()
            assert data == saved(want), name          # numpy's own header, then the same bytes
            assert os.path.getsize(mp / f"{name}.npy") == len(data), name
            # the raw view stays the stored bytes (the same ones)
            assert (mp / name).read_bytes() == want.tobytes(), name


def test_random_ranges_of_npy_views(views_file, read_mount):
    mp = read_mount(views_file)
    with h5py.File(views_file, "r") as f:
        expected = {name: saved(f[name][()]) for name in ("sub_chunked_gzip", "sub_chunked", "sub_nested",
                                                          "compound_sub", "dt_chunked", "sub_of_datetime")}
    for name, want in expected.items():
        fd = os.open(mp / f"{name}.npy", os.O_RDONLY)
        try:
            for _ in range(60):
                off = int(RNG.integers(0, len(want) + 8))
                size = int(RNG.integers(1, 5000))
                assert os.pread(fd, size, off) == want[off:off + size], (name, off, size)
        finally:
            os.close(fd)


def test_raw_facts_describe_the_stored_type(views_file, read_mount):
    mp = read_mount(views_file)
    assert os.getxattr(mp / "sub_2d", "user.h5fs.dtype") == b"array (2, 3) <i2"
    assert os.getxattr(mp / "sub_2d", "user.h5fs.shape") == b"(30,)"
    assert os.getxattr(mp / "dt <M8[s]", "user.h5fs.dtype") == b"|V8 (opaque, tag 'NUMPY:<M8[s]')"
    assert os.stat(mp / "sub_2d").st_size == 30 * 12


def test_other_opaque_types_stay_void(tmp_path, read_mount):
    raw = np.frombuffer(RNG.bytes(24), "V8")

    def build_others(f: h5py.File) -> None:
        for name, tag in OTHER_TAGS.items():
            low_level(f, name, tagged_opaque(8, tag), (3,), raw)

    mp = read_mount(make_h5(tmp_path / "tags.h5", build_others))
    for name in OTHER_TAGS:
        got = np.load(mp / f"{name}.npy", allow_pickle=False)
        assert got.dtype == np.dtype("V8") and got.tobytes() == raw.tobytes(), name


@pytest.mark.parametrize("tag, size, expected", [
    ("NUMPY:<M8[s]", 8, "<M8[s]"), ("NUMPY:>m8[ns]", 8, ">m8[ns]"), ("NUMPY:<U3", 12, "<U3"),
    ("NUMPY:bogus", 8, "V8"), ("NUMPY:<i4", 8, "V8"), ("NUMPY:O", 8, "V8"), ("NUMPY:T", 16, "V16"),
    ("NUMPY:a", 8, "V8"), ("numpy:<M8[s]", 8, "V8"), ("", 4, "V4"), ("NUMPY:" + "(" * 300, 8, "V8")])
@pytest.mark.filterwarnings("ignore::DeprecationWarning")   # NumPy 2 on the alias "a"
def test_tagged_opaque_npy_dtype(tag, size, expected):
    assert npy_dtype(Opaque(1, size, tag)) == np.dtype(expected)


def test_array_of_variable_length_strings(tmp_path, read_mount):
    """Decoded views (variable-length data) of an array datatype take its dims too."""
    words = np.array([["ab", "cde"], ["", "fghij"], ["é", "x"]], object)

    def build_strings(f: h5py.File) -> None:
        f.create_dataset("s", shape=(3,), dtype=np.dtype((h5py.string_dtype(), (2,))))[...] = words

    mp = read_mount(make_h5(tmp_path / "vs.h5", build_strings))
    got = np.load(mp / "s.npy", allow_pickle=False)
    assert got.shape == (3, 2) and got.tolist() == words.tolist()
    assert (mp / "s").read_text() == "".join(w + "\n" for w in words.ravel())


def test_sparse_points_keep_array_elements_whole(tmp_path):
    """A sparse dataset of an array type: `S.npy` as h5py would read it (dims appended), its
    points' values one element each (the subarray), and points files of that form accepted."""
    path = make_h5(tmp_path / "s.h5", lambda f: None, "latest")
    elem = np.dtype(("<i2", (2, 3)))
    with H5File.open(str(path), writable=True) as f:
        wb = Writeback(f)
        TreeEditor(f, wb).create_dataset(f.resolve("/"), "S", elem, (10,), layout="sparse", chunks=(4,),
                                         maxshape=(None,))
        wb.write(f.resolve("/S"), 3 * elem.itemsize, np.arange(1, 13, dtype="<i2").tobytes())
        wb.flush()
        ds = f.resolve("/S")
        assert (ds.npy_dtype, ds.npy_shape) == (np.dtype("<i2"), (10, 2, 3))
        view = ds.points_view()
        assert view.dtype == np.dtype([("index", "<u8", (1,)), ("value", elem)])
        got = np.frombuffer(view.read_body(0, view.body_size), view.dtype)
        assert got["index"].ravel().tolist() == [3, 4]
        assert got["value"].tobytes() == np.arange(1, 13, dtype="<i2").tobytes()
        points = np.zeros(1, view.dtype)
        points["index"], points["value"] = 7, -np.arange(6).reshape(2, 3)
        buf = io.BytesIO()
        np.save(buf, points)
        replace_points(wb, ds, *read_points(ds, buf, len(buf.getvalue())))
        wb.close()
        want = np.zeros((10, 2, 3), "<i2")
        want[7] = -np.arange(6).reshape(2, 3)
        assert np.array_equal(f.resolve("/S").read_array(), want)
    assert run_h5fs("check", path, timeout=120).returncode == 0


# -- writes ------------------------------------------------------------------------------------

def build_writable(f: h5py.File) -> None:
    put_array(f, "sub", np.arange(180, dtype="<i2").reshape(30, 2, 3), (2, 3))
    put_array(f, "sub_chunked", np.zeros((20, 6, 2, 3), "<f8"), (2, 3), chunks=(7, 4), compression="gzip")
    put_opaque(f, "when", datetimes("<M8[ms]", 50))
    f.create_dataset("sub_scalar", shape=(), dtype=SUB_2D)


@pytest.mark.parametrize("libver", ("earliest", "latest"))
def test_writes_through_npy_views(tmp_path, mount, libver):
    path = make_h5(tmp_path / f"w-{libver}.h5", build_writable, libver)
    with h5py.File(path, "r") as f:
        model = {name: f[name][()] for name in f}
    mp = mount(path, "rw")
    m = np.lib.format.open_memmap(mp / "sub.npy", mode="r+")
    assert (m.dtype, m.shape) == (np.dtype("<i2"), (30, 2, 3))
    m[3:7, 1] = -np.arange(12).reshape(4, 3)
    m[-1, :, 2] = [7, 8]
    model["sub"][3:7, 1] = -np.arange(12).reshape(4, 3)
    model["sub"][-1, :, 2] = [7, 8]
    m.flush()
    del m
    m = np.lib.format.open_memmap(mp / "sub_chunked.npy", mode="r+")
    block = RNG.standard_normal((9, 3, 2, 3))
    m[5:14, 2:5] = block
    model["sub_chunked"][5:14, 2:5] = block
    m.flush()
    del m
    m = np.lib.format.open_memmap(mp / "when.npy", mode="r+")
    assert m.dtype == np.dtype("<M8[ms]")
    m[10:20] = np.datetime64("2001-02-03T04:05:06.789") + np.arange(10).astype("m8[s]")
    model["when"][10:20] = m[10:20]
    m.flush()
    del m
    m = np.lib.format.open_memmap(mp / "sub_scalar.npy", mode="r+")
    assert m.shape == (2, 3)
    m[...] = [[1, 2, 3], [4, 5, 6]]
    model["sub_scalar"][...] = [[1, 2, 3], [4, 5, 6]]
    m.flush()
    del m
    for name, want in model.items():   # read back through the mount first
        assert np.load(mp / f"{name}.npy").tobytes() == want.tobytes(), name
    run_h5fs("umount", mp, check=True)
    data = verify_file(path, h5dump=libver == "earliest")
    for name, want in model.items():
        assert data[name].dtype == want.dtype and data[name].tobytes() == want.tobytes(), name


CP_CASES = {
    "seconds": datetimes("<M8[s]", 40),
    "nanos_2d": datetimes("<M8[ns]", 60).reshape(6, 10),
    "span_be": datetimes(">m8[us]", 25),
    "generic": np.array(["NaT", "NaT"], "M8"),
    "days_scalar": np.array(np.datetime64("2024-02-29")),
    "record": np.array([(np.datetime64("2020-01-01"), 3), (np.datetime64("1969-07-20"), -1)],
                       [("t", "<M8[D]"), ("x", "<i2")]),
}


def test_cp_datetime_npy_creates_what_h5py_reads_back(tmp_path, mount):
    path = make_h5(tmp_path / "cp.h5", lambda f: f.create_group("g"), "latest")
    src = tmp_path / "src"
    src.mkdir()
    for name, arr in CP_CASES.items():
        np.save(src / f"{name}.npy", arr)
    mp = mount(path, "rw")
    for name in CP_CASES:
        subprocess.run(["cp", str(src / f"{name}.npy"), str(mp / "g")], check=True, timeout=60)
    # over an existing dataset: its data replaced, another unit
    cases = dict(CP_CASES, span_be=datetimes("<m8[ms]", 30))
    np.save(src / "later.npy", cases["span_be"])
    subprocess.run(["cp", str(src / "later.npy"), str(mp / "g" / "span_be.npy")], check=True, timeout=60)
    for name, arr in cases.items():
        assert (mp / "g" / f"{name}.npy").read_bytes() == saved(arr), name
    run_h5fs("umount", mp, check=True)
    data = verify_file(path, h5dump=False)
    with h5py.File(path, "r") as f:
        assert f["g/seconds"].id.get_type().get_tag() == b"NUMPY:<M8[s]"
    for name, arr in cases.items():
        got = data[f"g/{name}"]
        assert (got.dtype, got.shape) == (arr.dtype, arr.shape) and got.tobytes() == arr.tobytes(), name
