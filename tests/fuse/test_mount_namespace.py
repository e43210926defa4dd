"""Namespace edits through a real read-write mount with real tools (mkdir, rmdir, rm, mv, ln,
ln -s), in old-format (symbol tables, v1 headers) and new-format files (link messages, v2
headers), compared with a model of the edits; then h5py reads every object and link, `h5fs check`
passes (space accounting included) and h5dump reads the old-format files."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import time

import h5py
import numpy as np
import pytest

from conftest import run_h5fs, wait_until
from write_support import verify_file

from h5fs.model.file import H5File
from oracle import tree

LAYOUTS = ("earliest", "latest", "earliest-4byte")


def make_file(path, layout: str) -> None:
    libver = layout.split("-")[0]
    kwargs = {}
    if layout.endswith("4byte"):
        fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
        fcpl.set_sizes(4, 4)
        fid = h5py.h5f.create(str(path).encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl)
        fid.close()
        kwargs["mode"] = "r+"
    with h5py.File(path, kwargs.pop("mode", "w"), libver=libver) as f:
        g = f.create_group("g")
        g.create_dataset("d", data=np.arange(10, dtype="<i8"))
        f.create_dataset("x", data=np.arange(100.0).reshape(10, 10), chunks=(5, 5), compression="gzip")
        f.create_dataset("c", data=np.arange(1000, dtype="<f4"))
        f["g"].attrs["note"] = "keep"


def errno_of(*cmd: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0, f"{cmd} succeeded"
    return done.stderr


@pytest.mark.parametrize("layout", LAYOUTS)
def test_mkdir_rmdir_rm_mv_ln(tmp_path, mount, layout):
    path = tmp_path / f"ns-{layout}.h5"
    make_file(path, layout)
    before = tree(path)
    mp = mount(path, "rw")
    os.makedirs(mp / "a" / "b")
    assert sorted(os.listdir(mp / "a")) == ["b"]
    assert "Directory not empty" in errno_of("rmdir", str(mp / "a"))
    subprocess.run(["ln", str(mp / "x"), str(mp / "a" / "x2")], check=True)
    assert os.stat(mp / "x").st_nlink == 2 and os.stat(mp / "a" / "x2.npy").st_nlink == 2
    subprocess.run(["ln", "-s", "../g/d", str(mp / "a" / "rel")], check=True)
    subprocess.run(["ln", "-s", str(mp / "c"), str(mp / "abs")], check=True)
    subprocess.run(["ln", "-s", "other.h5:/data", str(mp / "ext")], check=True)
    assert "Operation not permitted" in errno_of("ln", "-s", "/etc/passwd", str(mp / "out"))
    assert (mp / "a" / "rel").read_bytes() == np.arange(10, dtype="<i8").tobytes()   # through the symlink
    subprocess.run(["mv", str(mp / "g" / "d.npy"), str(mp / "g" / "e.npy")], check=True)   # renames the dataset
    subprocess.run(["mv", str(mp / "g" / "e"), str(mp / "a" / "b" / "moved")], check=True)
    with pytest.raises(OSError) as ei:
        os.rename(mp / "a", mp / "a" / "b" / "inside")
    assert ei.value.errno == errno.EINVAL
    subprocess.run(["mv", "-f", str(mp / "c"), str(mp / "x")], check=True)   # replaces one name of x
    assert os.stat(mp / "a" / "x2").st_nlink == 1                             # its other name shows it
    subprocess.run(["rm", str(mp / "a" / "x2.npy")], check=True)             # x's last link: freed
    subprocess.run(["rmdir", str(mp / "a" / "b" / "moved")], capture_output=True)
    subprocess.run(["mkdir", str(mp / "g" / "empty")], check=True)
    subprocess.run(["rmdir", str(mp / "g" / "empty")], check=True)
    assert sorted(os.listdir(mp)) == ["a", "abs", "ext", "g", "x", "x.npy"]
    assert sorted(os.listdir(mp / "a")) == ["b", "rel"]
    subprocess.run(["h5fs", "umount", str(mp)], check=True)

    want = {
        "/a": ("group", 1), "/a/b": ("group", 1),
        "/a/b/moved": ("dataset", 1, before["/g/d"][2]),
        "/a/rel": ("soft", "/g/d"), "/abs": ("soft", "/c"), "/ext": ("external", "other.h5", "/data"),
        "/g": ("group", 1), "/x": ("dataset", 1, before["/c"][2]),
    }
    assert tree(path) == want
    verify_file(path, h5dump=layout.startswith("earliest"))
    with h5py.File(path, "r+") as f:   # libhdf5 goes on editing what h5fs edited
        f["a"].create_group("more")
        del f["a/b/moved"]
        f["g"]["n"] = np.ones(3)
    assert set(tree(path)) == set(want) - {"/a/b/moved"} | {"/a/more", "/g/n"}
    verify_file(path, h5dump=layout.startswith("earliest"))


@pytest.mark.parametrize("layout", ("earliest", "latest"))
def test_removed_storage_is_reused(tmp_path, mount, layout):
    """rm frees a dataset's header, chunks and index: a new copy of the data written after
    the removal takes the freed space instead of growing the file."""
    path = tmp_path / f"reuse-{layout}.h5"
    make_file(path, layout)
    with h5py.File(path, "r+") as f:
        f.create_dataset("big", data=np.random.default_rng(1).standard_normal((256, 256)), chunks=(32, 256))
        f.create_dataset("after", data=np.arange(1000))   # the file goes on past big's chunks
    size = path.stat().st_size
    mp = mount(path, "rw")
    subprocess.run(["rm", str(mp / "big")], check=True)
    subprocess.run(["h5fs", "umount", str(mp)], check=True)
    assert "/big" not in tree(path)
    out = subprocess.run(["h5fs", "check", str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout
    unused = int(out.stdout.split(" unused")[0].rsplit(" ", 1)[-1])
    assert unused >= 256 * 256 * 8   # the chunks are free space now
    assert path.stat().st_size == size


def test_compressed_copy_removed_in_the_same_mount_gives_the_file_back(tmp_path, mount):
    """A gzip'd dataset copied in and removed by one mount: its chunks (of odd sizes, each
    starting on an 8-byte boundary) and the alignment bytes between them, all this mount's,
    are given back at unmount."""
    path = tmp_path / "gz.h5"
    make_file(path, "latest")
    size = path.stat().st_size
    np.save(tmp_path / "r.npy", np.random.default_rng(1).random(4 * 131072))   # 4 chunks of ~880 KB
    mp = mount(path, "rw")
    subprocess.run(["cp", str(tmp_path / "r.npy"), str(mp)], check=True)
    os.fsync(fd := os.open(mp / "r", os.O_RDONLY))
    os.close(fd)
    os.unlink(mp / "r")
    run_h5fs("umount", mp, check=True)
    assert path.stat().st_size <= size + 4096
    verify_file(path, h5dump=False)


@pytest.mark.parametrize("layout", ("earliest", "latest"))
def test_free_space_at_the_end_is_given_back(tmp_path, mount, layout):
    """Free space that ends the file is given back at unmount, as libhdf5 gives it back at
    close: a dataset copied in and removed again leaves the file as long as it was."""
    path = tmp_path / f"shrink-{layout}.h5"
    make_file(path, layout)
    size = path.stat().st_size
    np.save(tmp_path / "big.npy", np.random.default_rng(2).standard_normal((500, 500)))
    mp = mount(path, "rw", "compression=none")
    subprocess.run(["cp", str(tmp_path / "big.npy"), str(mp)], check=True)
    run_h5fs("umount", mp, check=True)
    assert path.stat().st_size > size + 500 * 500 * 8
    mp = mount(path, "rw")
    subprocess.run(["rm", str(mp / "big")], check=True)
    run_h5fs("umount", mp, check=True)
    assert path.stat().st_size <= size + 4096   # what stays: the root group's grown link storage
    data = verify_file(path, h5dump=layout == "earliest")
    assert "big" not in data and np.array_equal(data["x"], np.arange(100.0).reshape(10, 10))
    # a crash between lowering the end of allocation and truncating leaves a longer file: the
    # next mount's walk finds the tail unused and its unmount gives it back
    size = path.stat().st_size
    with open(path, "ab") as fh:
        fh.write(bytes(100_000))
    mp = mount(path, "rw")
    assert wait_until(lambda: "unused space found" in mount.log_of(mp), timeout=60)
    run_h5fs("umount", mp, check=True)
    assert path.stat().st_size == size
    verify_file(path, h5dump=layout == "earliest")
    # space inside the recorded end of allocation that no mount freed (leaked by a writer) is
    # only known unused from the walk: it stays, whatever the walk says
    with H5File.open(str(path), writable=True) as f, f.store.transaction() as txn:
        txn.allocate(50_000)
        txn.commit()
    size = path.stat().st_size
    mp = mount(path, "rw")
    assert wait_until(lambda: "unused space found" in mount.log_of(mp), timeout=60)
    run_h5fs("umount", mp, check=True)
    assert path.stat().st_size == size
    verify_file(path, h5dump=layout == "earliest")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rm_r_removes_a_tree_of_datasets(tmp_path, mount, layout):
    """`rm -r` lists each dataset twice (D and D.npy), removes D, then removes the D.npy it
    listed: that succeeds (the file went with D), so the whole tree goes and rm exits 0. Outside
    a listing, removing a view whose dataset is gone is ENOENT, as for any missing file."""
    path = tmp_path / f"rmr-{layout}.h5"
    make_file(path, layout)
    with h5py.File(path, "r+") as f:
        t = f.create_group("t")
        for i in range(12):
            t.create_dataset(f"d{i}", data=np.arange(i + 1))
        t.create_group("sub").create_dataset("x", data=np.arange(5.0), chunks=(2,))
        f.create_dataset("solo", data=[1, 2])
    mp = mount(path, "rw")
    done = subprocess.run(["rm", "-r", str(mp / "t")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not (mp / "t").exists()
    subprocess.run(["rm", str(mp / "solo")], check=True)
    assert "No such file" in errno_of("rm", str(mp / "solo.npy"))
    mount.unmount(mp)
    after = tree(path)
    assert not any(p.startswith("/t") or p.startswith("/solo") for p in after) and "/g/d" in after
    verify_file(path, h5dump=layout.startswith("earliest"))


def test_edits_on_a_read_only_mount_are_erofs(tmp_path, mount):
    path = tmp_path / "ro.h5"
    make_file(path, "latest")
    mp = mount(path)
    for call in (lambda: os.mkdir(mp / "n"), lambda: os.unlink(mp / "x"), lambda: os.rmdir(mp / "g"),
                 lambda: os.rename(mp / "x", mp / "y"), lambda: os.symlink("g", mp / "s"),
                 lambda: os.link(mp / "x", mp / "y")):
        with pytest.raises(OSError) as ei:
            call()
        assert ei.value.errno == errno.EROFS


@pytest.mark.parametrize("name", [b"n" * 256, b"\xff\xfe"])
def test_names_hdf5_cannot_hold_are_refused(tmp_path, mount, name):
    path = tmp_path / "names.h5"
    make_file(path, "latest")
    mp = mount(path, "rw")
    with pytest.raises(OSError) as ei:
        os.mkdir(os.path.join(bytes(mp), name))
    assert ei.value.errno in (errno.ENAMETOOLONG, errno.EINVAL)
    assert sorted(os.listdir(mp)) == ["c", "c.npy", "g", "x", "x.npy"]


NPY_CASES = {
    "f8-2d": np.arange(300000, dtype="<f8").reshape(1000, 300),
    "i2-big-endian": np.arange(-500, 500, dtype=">i2"),
    "bool": np.array([True, False, True]),
    "complex": np.array([1 + 2j, 3 - 4j], dtype="<c16"),
    "bytes": np.array([b"ab", b"cde"], dtype="S3"),
    "structured": np.array([(1, (2.5, 3.5)), (4, (5.5, 6.5))], dtype=[("a", "<i4"), ("b", "<f8", (2,))]),
    "scalar": np.array(7.25),
}


@pytest.mark.parametrize("layout", ("earliest", "latest"))
def test_cp_npy_and_other_files_create_datasets(tmp_path, mount, layout):
    path = tmp_path / f"cp-{layout}.h5"
    make_file(path, layout)
    src = tmp_path / "src"
    src.mkdir()
    for name, arr in NPY_CASES.items():
        np.save(src / f"{name}.npy", arr)
    (src / "notes.txt").write_bytes(bytes(range(256)) * 5000)
    (src / "truncated.npy").write_bytes((src / "f8-2d.npy").read_bytes()[:100000])
    (src / "garbage.npy").write_bytes(b"not an npy file at all" * 10)
    mp = mount(path, "rw")
    os.mkdir(mp / "h")
    where = {name: "g" if i < 4 else "h" for i, name in enumerate(NPY_CASES)}   # compact groups
    for name in NPY_CASES:
        subprocess.run(["cp", str(src / f"{name}.npy"), str(mp / where[name])], check=True)
    subprocess.run(["cp", str(src / "notes.txt"), str(mp / "g")], check=True)
    for bad in ("truncated.npy", "garbage.npy"):
        done = subprocess.run(["cp", str(src / bad), str(mp / "g")], capture_output=True, text=True)
        assert done.returncode != 0 and "Invalid argument" in done.stderr, done.stderr
    # dd closes a duplicate of its output before it writes: that close is no error
    subprocess.run(["dd", f"if={src / 'f8-2d.npy'}", f"of={mp / 'h' / 'by_dd.npy'}", "bs=64k", "status=none"],
                   check=True)
    with open(mp / "h" / "empty.npy", "wb"):   # nothing written: no dataset, no error
        pass
    assert "empty.npy" not in os.listdir(mp / "h") and not (mp / "h" / "empty.npy").exists()
    assert (mp / "g" / "notes.txt").read_bytes() == (src / "notes.txt").read_bytes()
    for name, arr in NPY_CASES.items():   # read back through the mount at once
        got = np.load(mp / where[name] / f"{name}.npy")
        assert got.dtype == arr.dtype and np.array_equal(got, arr), name
    listed = sorted(os.listdir(mp / "g"))
    assert "truncated" not in listed and "garbage" not in listed and "truncated.npy" not in listed
    subprocess.run(["h5fs", "umount", str(mp)], check=True)
    data = verify_file(path, h5dump=layout == "earliest")
    with h5py.File(path, "r") as f:
        for name, arr in NPY_CASES.items():
            ds = f[where[name]][name]
            assert ds.shape == arr.shape and np.array_equal(ds[()], arr), name
            if arr.ndim:
                assert ds.maxshape[0] is None and ds.compression == "gzip" and ds.shuffle
        assert bytes(f["g/notes.txt"][()]) == (src / "notes.txt").read_bytes()
        assert np.array_equal(f["h/by_dd"][()], NPY_CASES["f8-2d"]) and "empty" not in f["h"]
    assert set(data) >= {f"{where[n]}/{n}" for n in NPY_CASES}


@pytest.mark.parametrize("layout", ("earliest", "latest"))
def test_open_memmap_w_plus(tmp_path, mount, layout):
    """`np.lib.format.open_memmap(mode="w+")` writes the header, closes, then maps the file: the
    header alone makes a dataset of fill values (new, or replacing D's data with its attributes
    kept) that the mapping then fills. A Fortran-order header alone is EINVAL: the view is C order
    and the mapping would store the data transposed."""
    path = tmp_path / f"memmap-{layout}.h5"
    make_file(path, layout)
    mp = mount(path, "rw")
    made = {}
    for name, arr in NPY_CASES.items():
        m = np.lib.format.open_memmap(mp / "g" / f"{name}.npy", mode="w+", dtype=arr.dtype, shape=arr.shape)
        assert not any(m.tobytes())   # the fill value, read back through the mapping
        m[...] = arr
        m.flush()
        del m
        made[f"g/{name}"] = arr
    half = np.arange(50, dtype="<i2").reshape(5, 10)
    m = np.lib.format.open_memmap(mp / "x.npy", mode="w+", dtype=half.dtype, shape=half.shape)   # over a dataset
    m[:3] = half[:3]   # rows never written keep the fill value
    m.flush()
    del m
    made["x"] = np.concatenate([half[:3], np.zeros((2, 10), "<i2")])
    with pytest.raises(OSError) as ei:
        np.lib.format.open_memmap(mp / "c.npy", mode="w+", dtype="<f4", shape=(10, 100), fortran_order=True)
    assert ei.value.errno == errno.EINVAL
    with pytest.raises(OSError) as ei:
        np.lib.format.open_memmap(mp / "g" / "f.npy", mode="w+", dtype="<f4", shape=(3, 4), fortran_order=True)
    assert ei.value.errno == errno.EINVAL
    assert "f" not in os.listdir(mp / "g")
    for key, arr in made.items():
        got = np.load(mp / f"{key}.npy")
        assert got.dtype == arr.dtype and np.array_equal(got, arr), key
    run_h5fs("umount", mp, check=True)
    found = verify_file(path, h5dump=layout == "earliest")
    with h5py.File(path, "r") as f:
        for key, arr in made.items():
            assert f[key].shape == arr.shape and np.array_equal(f[key][()], arr), key
        assert np.array_equal(f["c"][()], np.arange(1000, dtype="<f4")) and "f" not in f["g"]
        assert f["g"].attrs["note"] == "keep"
    assert set(found) >= set(made)


@pytest.mark.parametrize("layout", ("earliest", "latest"))
def test_setfattr_and_touch(tmp_path, mount, layout):
    path = tmp_path / f"attrs-{layout}.h5"
    make_file(path, layout)
    with h5py.File(path, "r+") as f:
        f["x"].attrs["scale"] = np.array([1.5, 2.5])
        f["x"].attrs["count"] = np.int16(3)
    mp = mount(path, "rw")
    run = lambda *cmd: subprocess.run(cmd, check=True, capture_output=True)  # noqa: E731
    run("setfattr", "-n", "user.title", "-v", "température", str(mp / "g"))
    run("setfattr", "-n", "user.scale", "-v", "[3, 4.25]", str(mp / "x"))
    run("setfattr", "-n", "user.count", "-v", "-7", str(mp / "x.npy"))
    run("setfattr", "-x", "user.note", str(mp / "g"))
    for bad, err in (("[1]", "Invalid argument"), ("abc", "Invalid argument")):
        done = subprocess.run(["setfattr", "-n", "user.scale", "-v", bad, str(mp / "x")], capture_output=True, text=True)
        assert err in done.stderr
    done = subprocess.run(["setfattr", "-n", "user.h5fs.dtype", "-v", "f4", str(mp / "x")], capture_output=True, text=True)
    assert "Operation not permitted" in done.stderr
    assert os.getxattr(mp / "x", "user.scale") == b"[3.0, 4.25]"
    run("touch", "-d", "2020-01-02 03:04:05", str(mp / "x"))
    if layout == "latest":
        assert os.stat(mp / "x").st_mtime == 1577934245
    subprocess.run(["h5fs", "umount", str(mp)], check=True)
    verify_file(path, h5dump=layout == "earliest")
    with h5py.File(path, "r") as f:
        assert dict(f["g"].attrs) == {"title": "température"}
        assert f["x"].attrs["scale"].tolist() == [3.0, 4.25] and f["x"].attrs["scale"].dtype == "<f8"
        assert f["x"].attrs["count"] == -7 and f["x"].attrs["count"].dtype == "<i2"


@pytest.mark.parametrize("layout", ("earliest", "latest"))
def test_h5fs_attr_makes_typed_attributes(tmp_path, mount, layout):
    """`h5fs attr PATH NAME VALUE --dtype D`: a number, bool or complex attribute with VALUE's
    shape, made anew over one of another type, in a header or in dense storage (past 8 in a
    new-style header), on groups and on either view of a dataset; without --dtype as setfattr."""
    path = tmp_path / f"typed-{layout}.h5"
    make_file(path, layout)
    with h5py.File(path, "r+") as f:
        f["g"].attrs["replace_me"] = "text"
    want = {("g", "gain"): np.float64(3.5), ("g", "replace_me"): np.array([[1, 2], [3, 4]], "<u2"),
            ("x", "flag"): np.bool_(True), ("x", "z"): np.array([1 + 2j, 3], "<c16"),
            ("x", "empty"): np.array([], "<f4")}
    want |= {("g", f"n{i}"): np.int32(i) for i in range(10)}
    mp = mount(path, "rw")
    for (obj, name), value in want.items():
        where = mp / (f"{obj}.npy" if name == "flag" else obj)
        text = {"gain": "3.5", "replace_me": "[[1, 2], [3, 4]]", "flag": "true", "z": "[1+2j, 3]",
                "empty": "[]"}.get(name, str(value))
        run_h5fs("attr", where, name, text, "--dtype", value.dtype.str, check=True)
    run_h5fs("attr", mp / "g", "n3", "-4.5", "--dtype", "f2", check=True)   # in dense storage, a new type
    want[("g", "n3")] = np.float16(-4.5)
    run_h5fs("attr", mp / "x", "plain", "a string", check=True)
    want[("x", "plain")] = "a string"
    run_h5fs("attr", mp / "g", "gain", "7", check=True)                   # keeps float64
    want[("g", "gain")] = np.float64(7)
    for args in (("x", "s", "abc", "--dtype", "S3"), ("x", "r", "[1, [2]]", "--dtype", "i4"),
                 ("x", "o", "300", "--dtype", "u1"), ("x", "b", "maybe", "--dtype", "?")):
        done = run_h5fs("attr", mp / args[0], *args[1:])
        assert done.returncode == 1 and "Invalid argument" in done.stderr, done.stderr
    assert run_h5fs("attr", tmp_path, "a", "1", "--dtype", "i4").returncode == 1   # not in a mount
    assert os.getxattr(mp / "g", "user.n3") == b"-4.5"
    run_h5fs("umount", mp, check=True)
    verify_file(path, h5dump=layout == "earliest")
    with h5py.File(path, "r") as f:
        for (obj, name), value in want.items():
            got = f[obj].attrs[name]
            assert np.array_equal(got, value) and np.asarray(got).shape == np.shape(value), (obj, name, got)
            if not isinstance(value, str):
                assert got.dtype == value.dtype, (obj, name, got.dtype)
        assert set(f["x"].attrs) >= {"flag", "z", "empty", "plain"} and not {"s", "r", "o", "b"} & set(f["x"].attrs)
    ro = mount(path, "ro")
    done = run_h5fs("attr", ro / "g", "k", "1", "--dtype", "i4")
    assert done.returncode == 1 and "Read-only" in done.stderr


PROPERTY_OPS = int(os.environ.get("H5FS_PROPERTY_OPS", "120"))


class Model:
    """The tree as links to objects: what h5py must find after the same edits."""

    def __init__(self, path):
        self.links: dict[str, object] = {}      # path -> object id (hard) or ("soft", target)
        self.objects: dict[int, dict] = {}       # id -> {"kind", "values", "attrs"}
        self.next_id = 0
        for p, v in tree(path).items():
            if v[0] == "soft":
                self.links[p] = v
            else:
                self.add(p, v[0], v[2] if v[0] == "dataset" else None)

    def add(self, path: str, kind: str, values=None) -> None:
        self.next_id += 1
        oid = self.next_id
        self.objects[oid] = {"kind": kind, "values": values, "attrs": {}}
        self.links[path] = oid

    def kind(self, path: str) -> str:
        v = self.links[path]
        return v[0] if isinstance(v, tuple) else self.objects[v]["kind"]

    def children(self, group: str) -> list[str]:
        return sorted(p for p in self.links if p.rsplit("/", 1)[0] == group)

    def soft_to_dataset(self, path: str) -> bool:
        """A soft link whose target is a dataset (the mount shows its .npy symlink too)."""
        v = self.links[path]
        return isinstance(v, tuple) and v[0] == "soft" and v[1] in self.links and self.kind(v[1]) == "dataset"

    def of_kind(self, kind: str) -> list[str]:
        return sorted(p for p in self.links if self.kind(p) == kind)

    def remove(self, path: str) -> None:
        v = self.links.pop(path)
        if not isinstance(v, tuple) and v not in self.links.values():
            del self.objects[v]

    def expected(self) -> dict[str, object]:
        out = {}
        for p, v in self.links.items():
            if isinstance(v, tuple):
                out[p] = v
                continue
            obj, rc = self.objects[v], list(self.links.values()).count(v)
            out[p] = ("group", rc) if obj["kind"] == "group" else ("dataset", rc, obj["values"])
        return out


@pytest.mark.parametrize("layout", ("earliest", "latest"))
def test_random_namespace_edits_against_a_model(tmp_path, mount, layout):
    """Random mkdir, cp of .npy files, rm, rmdir, mv, ln, ln -s, setfattr and data writes through
    the mount against the same operations on a model; listings compared through the mount as it
    goes, the whole tree and attributes by h5py after unmounting, and again after a remount.
    H5FS_PROPERTY_OPS sets the length, H5FS_SEED another sequence."""
    import random
    rng = random.Random(layout + os.environ.get("H5FS_SEED", ""))
    path = tmp_path / f"prop-{layout}.h5"
    make_file(path, layout)
    m = Model(path)
    m.objects[m.links["/g"]]["attrs"]["note"] = "keep"
    mp = mount(path, "rw")
    for i in range(PROPERTY_OPS):
        g = rng.choice(m.of_kind("group") + [""])
        full = layout == "latest" and len(m.children(g)) >= 6   # kept in compact link storage
        op = rng.choice(["rm", "mv"] if full else ["mkdir", "cp", "rm", "mv", "ln", "symlink", "setfattr", "write"])
        new = f"{g}/n{i}"
        if op == "mkdir":
            os.mkdir(mp / new[1:])
            m.add(new, "group")
        elif op == "cp":
            arr = np.arange(rng.randrange(1, 50), dtype=rng.choice(["<i4", ">f8", "u1"]))
            np.save(tmp_path / "src.npy", arr)
            subprocess.run(["cp", str(tmp_path / "src.npy"), str(mp / (new[1:] + ".npy"))], check=True)
            m.add(new, "dataset", arr.tolist())
        elif op == "rm":
            victims = [p for p in m.children(g) if m.kind(p) != "group" or not m.children(p)]
            if victims:
                victim = rng.choice(victims)
                (os.rmdir if m.kind(victim) == "group" else os.unlink)(mp / victim[1:])
                m.remove(victim)
        elif op == "mv":
            movable = [p for p in m.children(g) if m.kind(p) != "group" or not m.children(p)]
            into = rng.choice(m.of_kind("group") + [""])
            if movable and not (layout == "latest" and len(m.children(into)) >= 6):
                src, dst = rng.choice(movable), f"{into}/m{i}"
                if dst.startswith(src + "/"):   # a group into itself: EINVAL, as rename(2) says
                    with pytest.raises(OSError) as err:
                        os.rename(mp / src[1:], mp / dst[1:])
                    assert err.value.errno == errno.EINVAL
                    continue
                os.rename(mp / src[1:], mp / dst[1:])
                m.links[dst] = m.links.pop(src)
        elif op == "ln" and m.of_kind("dataset"):
            src = rng.choice(m.of_kind("dataset"))
            os.link(mp / src[1:], mp / new[1:])
            m.links[new] = m.links[src]
        elif op == "symlink" and m.of_kind("dataset"):
            target = rng.choice(m.of_kind("dataset"))
            os.symlink(str(mp) + target, mp / new[1:])
            m.links[new] = ("soft", target)
        elif op == "setfattr":
            target = rng.choice(m.of_kind("group") + m.of_kind("dataset"))
            os.setxattr(mp / target[1:], "user.tag", f"value {i}".encode())
            m.objects[m.links[target]]["attrs"]["tag"] = f"value {i}"
        elif op == "write" and m.of_kind("dataset"):
            target = rng.choice(m.of_kind("dataset"))
            obj = m.objects[m.links[target]]
            dt = np.load(mp / (target[1:] + ".npy")).dtype
            first = np.array([i % 100], dtype=dt)
            fd = os.open(mp / target[1:], os.O_WRONLY)
            os.pwrite(fd, first.tobytes(), 0)
            os.close(fd)
            values = np.array(obj["values"], dtype=dt)
            values.reshape(-1)[0] = first[0]
            obj["values"] = values.tolist()
        if i % 20 == 0:
            listed = sorted(os.listdir(mp / g[1:]) if g else os.listdir(mp))
            names = [p.rsplit("/", 1)[1] for p in m.children(g)]
            assert listed == sorted(names + [n + ".npy" for n, p in zip(names, m.children(g))
                                             if m.kind(p) == "dataset" or m.soft_to_dataset(p)])
    subprocess.run(["h5fs", "umount", str(mp)], check=True)
    for remounted in (False, True):
        if remounted:
            run_h5fs("umount", mount(path, "rw"), check=True)
        assert tree(path) == m.expected()
        with h5py.File(path, "r") as f:
            for p, v in m.links.items():
                if not isinstance(v, tuple):
                    assert dict(f[p].attrs) == m.objects[v]["attrs"], p
        verify_file(path, h5dump=layout == "earliest")


@pytest.mark.parametrize("layout", ("earliest", "latest"))
def test_h5fs_create_through_the_mount(tmp_path, mount, layout):
    path = tmp_path / f"create-{layout}.h5"
    make_file(path, layout)
    mp = mount(path, "rw")
    run_h5fs("create", mp / "g" / "img", "--shape", "300,200", "--dtype", "f4", "--chunks", "100,100",
             "--maxshape", "None,200", "--filters", "gzip:4,shuffle", "--fill", "-1", check=True)
    run_h5fs("create", mp / "plain", "--shape", "5", "--dtype", ">i2", check=True)
    for name, args, text in (("new", ["--shape", "3", "--dtype", "U5"], "Invalid argument"),
                             ("img", ["--shape", "3", "--dtype", "f4"], "File exists")):
        done = run_h5fs("create", mp / "g" / name, *args)
        assert done.returncode == 1 and text in done.stderr, done.stderr
    done = run_h5fs("create", tmp_path / "x", "--shape", "3", "--dtype", "f4")
    assert done.returncode == 1 and "not a directory of an h5fs mount" in done.stderr
    assert np.load(mp / "g" / "img.npy").min() == -1
    run_h5fs("umount", mp, check=True)
    verify_file(path, h5dump=layout == "earliest")
    with h5py.File(path, "r") as f:
        d = f["g/img"]
        assert (d.shape, d.maxshape, d.chunks, d.dtype, d.compression, d.shuffle, d.fillvalue) == \
            ((300, 200), (None, 200), (100, 100), np.dtype("<f4"), "gzip", True, -1)
        assert f["plain"].dtype == np.dtype(">i2") and f["plain"].chunks is None


def test_df_shows_room_to_grow(mount, tmp_path):
    """`df` on a writable mount shows the free space of the file system holding the .h5 file
    (the file grows into it) and inodes to spare; a read-only mount shows none free."""
    paths = [tmp_path / f"{mode}.h5" for mode in ("ro", "rw")]
    for path in paths:
        with h5py.File(path, "w") as f:
            f.create_dataset("d", data=np.arange(100000))
    ro, rw = mount(paths[0], "ro"), mount(paths[1], "rw")
    st = os.statvfs(ro)
    assert st.f_bavail == st.f_bfree == st.f_ffree == 0
    assert st.f_blocks * st.f_frsize >= paths[0].stat().st_size
    host, st = os.statvfs(tmp_path), os.statvfs(rw)
    assert abs(st.f_bavail * st.f_frsize - host.f_bavail * host.f_frsize) < 256 << 20
    assert st.f_blocks * st.f_frsize >= paths[1].stat().st_size + st.f_bfree * st.f_frsize
    assert st.f_ffree > 1 << 20
    use = subprocess.run(["df", "--output=pcent,ipcent", rw], capture_output=True, text=True, check=True).stdout
    assert "100%" not in use, use
    run_h5fs("umount", rw, check=True)
    verify_file(paths[1], h5dump=False)


@pytest.mark.parametrize("layout", ("earliest", "latest"))
def test_mkdir_over_a_taken_name_is_eexist(tmp_path, mount, layout):
    """mkdir of a group's, a dataset's or a dataset view's name (D.npy) answers EEXIST and
    changes nothing."""
    path = tmp_path / f"taken-{layout}.h5"
    make_file(path, layout)
    before = tree(path)
    mp = mount(path, "rw")
    for name in ("g", "x", "x.npy", "g/d.npy"):
        with pytest.raises(FileExistsError):
            os.mkdir(mp / name)
    run_h5fs("umount", mp, check=True)
    assert tree(path) == before
    verify_file(path, h5dump=layout == "earliest")


def test_rsync_a_and_cp_a_into_the_mount(tmp_path, mount):
    """rsync -aX (temporary files fchmod'ed and given their attributes, then renamed over their
    names), cp -a (modes, owners and times set on every file and directory) and tar --xattrs
    (which makes a file with attributes by mknod before it opens it) copy a tree in; chmod and
    chown succeed and change nothing (HDF5 stores neither). rsync's temporary copy of a .npy is
    renamed to its name: its bytes become the array, also over an existing dataset (a second
    rsync after the array changed), with the attributes rsync gave the temporary file."""
    src = tmp_path / "src"
    (src / "sub" / "deeper").mkdir(parents=True)
    (src / "notes.txt").write_text("hello\n")
    os.setxattr(src / "notes.txt", "user.units", b"metres")
    (src / "sub" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(src / "sub" / "run.sh", 0o755)
    (src / "sub" / "deeper" / "blob.bin").write_bytes(bytes(range(256)) * 100)
    np.save(src / "arr.npy", np.arange(12, dtype="<i2").reshape(3, 4))
    subprocess.run(["tar", "--xattrs", "-C", str(src), "-cf", str(tmp_path / "src.tar"), "."], check=True)
    path = tmp_path / "f.h5"
    h5py.File(path, "w", libver="latest").close()
    mp = mount(path, "rw")
    done = subprocess.run(["rsync", "-aX", f"{src}/", str(mp / "r")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    big = np.arange(600_000, dtype="<f8").reshape(1000, 600)   # several chunks, through the writeback
    np.save(src / "arr.npy", big)
    os.setxattr(src / "arr.npy", "user.version", b"2")
    done = subprocess.run(["rsync", "-aX", f"{src}/", str(mp / "r")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(mp / "r")) == ["arr", "arr.npy", "notes.txt", "notes.txt.npy", "sub"]
    assert np.array_equal(np.load(mp / "r" / "arr.npy"), big)
    done = subprocess.run(["cp", "-a", str(src), str(mp / "c")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    os.mkdir(mp / "t")
    done = subprocess.run(["tar", "--xattrs", "-C", str(mp / "t"), "-xf", str(tmp_path / "src.tar")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    mode = os.stat(mp / "r" / "notes.txt").st_mode
    os.chmod(mp / "r" / "notes.txt", 0o600)
    os.chown(mp / "r" / "notes.txt", 1234, 1234)
    assert os.stat(mp / "r" / "notes.txt").st_mode == mode
    mount.unmount(mp)
    found = verify_file(path, h5dump=False)
    for top in ("r", "c", "t"):
        assert found[f"{top}/notes.txt"].tobytes() == b"hello\n"
        assert found[f"{top}/sub/run.sh"].tobytes() == b"#!/bin/sh\necho hi\n"
        assert found[f"{top}/sub/deeper/blob.bin"].tobytes() == bytes(range(256)) * 100
    assert np.array_equal(found["r/arr"], big) and np.array_equal(found["c/arr"], big)
    assert np.array_equal(found["t/arr"], np.arange(12, dtype="<i2").reshape(3, 4))
    with h5py.File(path, "r") as f:
        assert f["r/arr"].attrs["version"] == "2" and f["r/notes.txt"].attrs["units"] == "metres"
        assert f["t/notes.txt"].attrs["units"] == "metres"


@pytest.mark.parametrize("layout", ("earliest", "latest"))
def test_bytes_renamed_to_a_npy_name(tmp_path, mount, layout):
    """np.save into a temporary file, then os.replace onto x.npy (an atomic save): x is the
    array, new or replacing a dataset (rename(2): the temporary file's attributes, the old
    dataset freed); bytes that are no whole .npy are EINVAL and stay as they were; `mv D D.npy`
    makes a file of bytes its own array."""
    path = tmp_path / f"f-{layout}.h5"
    make_file(path, layout)
    mp = mount(path, "rw")
    arr = np.arange(300_000, dtype="<f4").reshape(600, 500)
    for target in ("g/new.npy", "x.npy"):   # a new name; dataset x (attributes none)
        with open(mp / "g" / ".tmp", "wb") as out:
            np.save(out, arr)
        os.setxattr(mp / "g" / ".tmp", "user.saved", b"atomically")
        os.replace(mp / "g" / ".tmp", mp / target)
        assert np.array_equal(np.load(mp / target), arr)
    assert ".tmp" not in os.listdir(mp / "g")
    whole = io.BytesIO()
    np.save(whole, np.arange(10, dtype=">i2"))
    for bad in (b"", b"not a npy file", whole.getvalue()[:-4]):
        (mp / "g" / "bad").write_bytes(bad)
        with pytest.raises(OSError) as ei:
            os.rename(mp / "g" / "bad", mp / "g" / "d.npy")
        assert ei.value.errno == errno.EINVAL
        assert (mp / "g" / "bad").read_bytes() == bad and np.array_equal(np.load(mp / "g" / "d.npy"), np.arange(10))
    (mp / "g" / "self").write_bytes(whole.getvalue())
    os.rename(mp / "g" / "self", mp / "g" / "self.npy")
    assert np.array_equal(np.load(mp / "g" / "self.npy"), np.arange(10, dtype=">i2"))
    run_h5fs("umount", mp, check=True)
    verify_file(path, h5dump=layout == "earliest")
    with h5py.File(path, "r") as f:
        for key in ("g/new", "x"):
            assert f[key].dtype == arr.dtype and np.array_equal(f[key][()], arr), key
            assert f[key].attrs["saved"] == "atomically"
        assert ".tmp" not in f["g"] and np.array_equal(f["g/d"][()], np.arange(10))
        assert bytes(f["g/bad"][()]) == whole.getvalue()[:-4]
        assert f["g/self"].dtype == np.dtype(">i2") and np.array_equal(f["g/self"][()], np.arange(10))


def test_rm_during_a_listing_removes_a_file_named_like_a_links_view(tmp_path, mount):
    """While a listing is open (as in `rm -r`), removing a link whose `L.npy` symlink is not
    shown (an external link, a soft link to a group, a soft link whose view a real `L.npy`
    hides) leaves a real `L.npy` to remove: its unlink removes it, not just says so."""
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        g = f.create_group("g")
        g["E"] = h5py.ExternalLink("other.h5", "/x")
        g["E.npy"] = np.arange(3)
        g.create_group("sub")
        g["S"] = h5py.SoftLink("/g/sub")
        g["S.npy"] = np.arange(4)
        g["d"] = np.arange(5)
        g["H"] = h5py.SoftLink("/g/d")
        g["H.npy"] = np.arange(6)
        g["K"] = h5py.SoftLink("/g/d")   # its K.npy is shown, and goes with it
    mp = mount(path, "rw")
    with os.scandir(mp / "g") as listing:
        next(listing)   # open until closed, as `rm -r`'s
        assert {"E", "E.npy", "S", "S.npy", "H", "H.npy", "K", "K.npy"} <= set(os.listdir(mp / "g"))
        for name in ("E", "E.npy", "S", "S.npy", "H", "H.npy", "K", "K.npy"):
            os.unlink(mp / "g" / name)
        left = set(os.listdir(mp / "g"))
    assert left == {"sub", "d", "d.npy"}
    mount.unmount(mp)
    verify_file(path, h5dump=False)
    assert sorted(tree(path)) == ["/g", "/g/d", "/g/sub"]


@pytest.mark.parametrize("layout", ("earliest", "latest"))
def test_a_soft_link_moved_twice_shows_its_target(tmp_path, mount, layout):
    """A soft link to an absolute HDF5 path is shown relative to its directory: moved from one
    depth to another and again, the inode the kernel keeps says where it points from there."""
    path = tmp_path / "f.h5"
    with h5py.File(path, "w", libver=layout) as f:
        f.create_dataset("d", data=np.arange(3, dtype="<i4"))
        f.create_group("a")
        f.create_group("b/c")
        f["a/L"] = h5py.SoftLink("/d")
    mp = mount(path, "rw")
    assert os.readlink(mp / "a" / "L") == "../d"
    os.rename(mp / "a" / "L", mp / "b" / "c" / "L")
    assert os.readlink(mp / "b" / "c" / "L") == "../../d"
    os.rename(mp / "b" / "c" / "L", mp / "L")
    assert os.readlink(mp / "L") == "d"
    assert (mp / "L").read_bytes() == np.arange(3, dtype="<i4").tobytes()
    os.rename(mp / "L", mp / "a" / "L")
    assert os.readlink(mp / "a" / "L") == "../d"
    mount.unmount(mp)
    verify_file(path, h5dump=layout == "earliest")
    with h5py.File(path, "r") as f:
        assert f["a"].get("L", getlink=True).path == "/d"


@pytest.mark.parametrize("layout", ("earliest", "latest"))
def test_symlinks_and_paths_after_a_directory_moves(tmp_path, mount, layout):
    """A relative symlink target stays relative in HDF5 (it follows its group when that moves);
    one that climbs (`..`) resolves against the group's path as it is now, after the group or a
    parent of it was renamed; `user.h5fs.path` says the new path."""
    path = tmp_path / "f.h5"

    def build(f):
        f.create_dataset("p1/q/f", data=np.arange(4, dtype="<i4"))
        f.create_dataset("top", data=np.arange(3, dtype="<i4"))
    with h5py.File(path, "w", libver=layout) as f:
        build(f)
    mp = mount(path, "rw")
    assert os.listdir(mp / "p1" / "q") == ["f", "f.npy"]   # known to the kernel before the move
    os.rename(mp / "p1", mp / "p2")
    os.makedirs(mp / "p1" / "q")
    (mp / "p1" / "q" / "f").write_bytes(b"WRONG")
    os.symlink("q/f", mp / "p2" / "rel")
    os.symlink("../../top", mp / "p2" / "q" / "up")
    assert (mp / "p2" / "rel").read_bytes() == np.arange(4, dtype="<i4").tobytes()
    assert (mp / "p2" / "q" / "up").read_bytes() == np.arange(3, dtype="<i4").tobytes()
    assert os.getxattr(mp / "p2" / "q" / "f", "user.h5fs.path") == b"/p2/q/f"
    os.rename(mp / "p2", mp / "p3")
    assert (mp / "p3" / "rel").read_bytes() == np.arange(4, dtype="<i4").tobytes()
    assert os.getxattr(mp / "top", "user.h5fs.path") == b"/top"   # a dataset renamed: its own path
    os.rename(mp / "top", mp / "p3" / "top2")
    assert os.getxattr(mp / "p3" / "top2", "user.h5fs.path") == b"/p3/top2"
    os.rename(mp / "p3" / "top2", mp / "top")
    mount.unmount(mp)
    verify_file(path, h5dump=layout == "earliest")
    with h5py.File(path, "r") as f:
        assert f["p3"].get("rel", getlink=True).path == "q/f"
        assert f["p3/q"].get("up", getlink=True).path == "/top"
        assert np.array_equal(f["p3/rel"][()], np.arange(4, dtype="<i4"))


def test_hard_link_of_a_view_and_absolute_external_links(tmp_path, mount):
    """`ln D.npy E.npy` links the dataset as E (as `mv D.npy E.npy` renames it): E.npy reads as
    D.npy does; `ln D.npy E` answers EINVAL. An external link to an absolute file name is made
    from the text readlink shows of one (`cp -a` of such a link)."""
    path = tmp_path / "f.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f["d"] = np.arange(6, dtype="<i4").reshape(2, 3)
        f["ext"] = h5py.ExternalLink("/abs/other.h5", "/y")
    mp = mount(path, "rw")
    os.link(mp / "d.npy", mp / "e.npy")
    assert (mp / "e.npy").read_bytes() == (mp / "d.npy").read_bytes()
    assert os.stat(mp / "e").st_nlink == 2
    with pytest.raises(OSError) as err:
        os.link(mp / "d.npy", mp / "plain")
    assert err.value.errno == errno.EINVAL
    target = os.readlink(mp / "ext")
    assert target == "/abs/other.h5:/y"
    os.symlink(target, mp / "ext2")
    subprocess.run(["cp", "-a", str(mp / "ext"), str(mp / "ext3")], check=True, timeout=60)
    mount.unmount(mp)
    verify_file(path, h5dump=False)
    with h5py.File(path, "r") as f:
        assert sorted(f) == ["d", "e", "ext", "ext2", "ext3"]
        assert np.array_equal(f["e"][()], np.arange(6, dtype="<i4").reshape(2, 3))
        for name in ("ext2", "ext3"):
            link = f.get(name, getlink=True)
            assert isinstance(link, h5py.ExternalLink) and (link.filename, link.path) == ("/abs/other.h5", "/y")


def test_cp_fortran_order_npy(tmp_path, mount):
    """Column-major `.npy` files (np.save of a transposed array, what scipy.io.loadmat returns)
    become datasets of the array, new or replacing one's data; a dtype HDF5 cannot hold is
    refused with its reason alone."""
    rng = np.random.default_rng(5)
    arrays = {
        "t2": np.asfortranarray(rng.standard_normal((300, 7))),
        "t3": np.asfortranarray(rng.integers(-1000, 1000, (5, 60, 9), dtype="<i2")),
        "rec": np.asfortranarray(np.array([[(i, i * 0.5) for i in range(j, j + 4)] for j in range(6)],
                                          dtype=[("a", "<i4"), ("b", "<f8")])),
        "big": np.asfortranarray(rng.standard_normal((3000, 500))),   # 12 MB: several blocks
    }
    src = tmp_path / "src"
    src.mkdir()
    for name, arr in arrays.items():
        np.save(src / f"{name}.npy", arr)
    np.save(src / "uni.npy", np.array(["ab", "cde"]))
    path = tmp_path / "f.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f["old"] = np.zeros((7, 300))
    mp = mount(path, "rw")
    for name in arrays:
        subprocess.run(["cp", str(src / f"{name}.npy"), str(mp)], check=True, timeout=120)
        assert np.array_equal(np.load(mp / f"{name}.npy"), arrays[name]), name
    new = np.asfortranarray(rng.standard_normal((7, 300)))
    np.save(src / "new.npy", new)
    subprocess.run(["cp", str(src / "new.npy"), str(mp / "old.npy")], check=True, timeout=120)
    assert np.array_equal(np.load(mp / "old.npy"), new)
    assert subprocess.run(["cp", str(src / "uni.npy"), str(mp)], capture_output=True).returncode != 0
    log = mount.log_of(mp)
    mount.unmount(mp)
    found = verify_file(path, h5dump=False)
    for name, arr in arrays.items():
        assert np.array_equal(found[name], arr), name
    assert np.array_equal(found["old"], new) and "uni" not in found
    assert "cannot be stored in HDF5" in log and "truncated" not in log


def _make_and_remove(root: str, rounds: int, errors) -> None:
    d = os.path.join(root, "x")
    for _ in range(rounds):
        for step in (lambda: os.mkdir(d), lambda: os.setxattr(d, "user.n", b"1"), lambda: os.rmdir(d)):
            try:
                step()
            except OSError as exc:
                errors.put(f"{d}: {exc}")


def test_objects_made_in_space_freed_by_another_edit(tmp_path, mount):
    """Two processes make, annotate and remove a group in two groups of one mount: a group made
    in the space another's rmdir freed, replied to before that rmdir's news, keeps its inode
    (no EEXIST or ESTALE from a mkdir that worked)."""
    import multiprocessing
    path = tmp_path / "race.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.create_group("g")
        f.create_group("h")
    mp = mount(path, "rw")
    errors = multiprocessing.Queue()
    workers = [multiprocessing.Process(target=_make_and_remove, args=(str(mp / g), 1000, errors)) for g in "gh"]
    for w in workers:
        w.start()
    for w in workers:
        w.join(300)
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert not found, found[:5]
    run_h5fs("umount", mp, check=True)
    assert tree(path) == {"/g": ("group", 1), "/h": ("group", 1)}
    verify_file(path, h5dump=False)


def _edit_group(g: str, seconds: float, errors) -> None:
    end, n = time.time() + seconds, 0
    while time.time() < end and errors.qsize() < 5:
        n += 1
        made, gone = f"{g}/{'n' * (1 + n % 37)}{n % 11}", f"{g}/{'n' * (1 + (n - 5) % 37)}{(n - 5) % 11}"
        for step in (lambda: os.mkdir(made), lambda: os.rmdir(gone)):
            try:
                step()
            except (FileNotFoundError, FileExistsError):
                pass
            except OSError as exc:
                errors.put(f"edit: {exc}")


def _list_group(g: str, seconds: float, errors) -> None:
    end = time.time() + seconds
    while time.time() < end and errors.qsize() < 5:
        try:
            os.listdir(g)
        except OSError as exc:
            errors.put(f"ls: {exc}")


def test_listing_an_old_style_group_while_it_is_edited(tmp_path, mount):
    """`ls` of an old-style group while another process makes and removes groups in it: a
    listing that meets the group's heap or nodes half-rewritten by a commit reads them again
    once it is done, and never takes the group for broken (it answered EIO until unmount)."""
    import multiprocessing
    path = tmp_path / "old.h5"
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_group("g")
    mp = mount(path, "rw")
    errors = multiprocessing.Queue()
    g = str(mp / "g")
    workers = [multiprocessing.Process(target=fn, args=(g, 15.0, errors)) for fn in (_edit_group, _list_group)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    os.listdir(g)
    os.mkdir(mp / "g" / "quiet")
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert not found, found[:5]
    assert "cannot serve" not in mount.log_of(mp)
    run_h5fs("umount", mp, check=True)
    verify_file(path, h5dump=True)
