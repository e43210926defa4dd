"""Real mounts driven by real tools, compared with h5py (the oracle)."""

from __future__ import annotations

import errno
import io
import os
import stat
import subprocess

import h5py
import numpy as np
import pytest

from conftest import make_h5, run_h5fs
from h5fs.fuse.views import attribute_xattr_name, format_value
from remote_support import range_server, read_mount, s3_server  # noqa: F401 (fixtures)

RNG = np.random.default_rng(12345)


def build_sample(f: h5py.File) -> None:
    """Groups, many dtypes and layouts, attributes, soft/hard/external links, a named type."""
    f.attrs["title"] = np.bytes_(b"sample file")
    f.attrs["version"] = np.int32(3)
    f.attrs["scale"] = np.float64(0.1)
    f.attrs["ratio"] = np.float32(0.1)
    f.attrs["flags"] = np.array([True, False])
    f.attrs["matrix"] = np.arange(6, dtype="<i2").reshape(2, 3)
    f.attrs["names"] = np.array([b"ab", b"cde"], dtype="S3")
    f.attrs["h5fs.dtype"] = np.int8(7)  # collides with a fact name: shown escaped
    f.attrs["point"] = np.array((1, 2.5), dtype=[("x", "<i4"), ("y", "<f8")])
    f.attrs["empty"] = np.zeros(0, dtype="<f8")

    f["ints"] = np.arange(24, dtype="<i4").reshape(2, 3, 4)
    f["be_ints"] = np.arange(10, dtype=">i8")
    f["floats"] = RNG.standard_normal((17, 5)).astype("<f4")
    f["doubles_be"] = RNG.standard_normal(33).astype(">f8")
    f["u8"] = np.arange(256, dtype="u1")
    f["bools"] = np.array([True, False, True])
    f["cplx"] = (RNG.standard_normal(7) + 1j * RNG.standard_normal(7)).astype("<c16")
    f["scalar"] = np.float64(42.5)
    f["empty"] = np.zeros((0,), dtype="<i4")
    f["fixed_str"] = np.array([b"alpha", b"beta", b"gamma"], dtype="S6")
    f["compound"] = np.array([(i, i * 0.5, b"n%d" % i) for i in range(6)],
                             dtype=[("id", "<i4"), ("val", "<f8"), ("tag", "S3")])
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    space = h5py.h5s.create_simple((10,))
    h5py.h5d.create(f.id, b"compact", h5py.h5t.STD_I16LE, space, dcpl=dcpl).write(
        h5py.h5s.ALL, h5py.h5s.ALL, np.arange(10, dtype="<i2"))

    g = f.create_group("data")
    g.attrs["units"] = np.bytes_(b"m/s")
    g.attrs["count"] = np.uint16(12)
    g.create_dataset("chunked_gzip", data=np.arange(100000, dtype="<f4").reshape(250, 400) % 7,
                     chunks=(50, 64), compression="gzip", compression_opts=4, shuffle=True)
    g.create_dataset("unlimited", data=np.arange(30, dtype="<i4").reshape(10, 3), chunks=(4, 3),
                     maxshape=(None, 3))
    g.create_dataset("fletcher", data=np.arange(1000, dtype="<u2"), chunks=(128,), fletcher32=True)
    g.create_dataset("unallocated", shape=(64, 64), dtype="<f8", chunks=(16, 16), fillvalue=1.5)
    g.create_dataset("zeros_gzip", data=np.zeros((200, 200)), chunks=(50, 50), compression="gzip")
    f["ints"].attrs["desc"] = np.bytes_(b"ints of data")
    sub = g.create_group("deep/er/est")
    sub["leaf"] = np.arange(3, dtype="<i8")
    sub.attrs["depth"] = np.int64(3)

    # hard links: a second name for a dataset and for a group
    g["ints_again"] = f["ints"]
    f["data_alias"] = g["deep"]
    # soft links: absolute, relative, dangling, to a group
    f["soft_abs"] = h5py.SoftLink("/data/chunked_gzip")
    g["other/deeper/soft_up"] = h5py.SoftLink("/ints")
    g["soft_rel"] = h5py.SoftLink("unlimited")
    f["dangling"] = h5py.SoftLink("/no/such/thing")
    f["soft_group"] = h5py.SoftLink("/data/deep")
    # external link
    f["ext"] = h5py.ExternalLink("other.h5", "/some/where")
    # named datatype
    f["mytype"] = np.dtype([("a", "<i4"), ("b", "<f4")])

    ordered = f.create_group("ordered", track_order=True)
    for name in ("zeta", "alpha", "mid"):
        ordered[name] = np.arange(2, dtype="<i4")


@pytest.fixture
def sample(tmp_path, libver):
    return make_h5(tmp_path / f"sample_{libver}.h5", build_sample, libver)


def expected_names(group: h5py.Group) -> list[str]:
    names = []
    for name in group:  # h5py's order: by name, or creation order when tracked
        names.append(name)
        link = group.get(name, getlink=True)
        if isinstance(link, h5py.HardLink) and isinstance(group[name], h5py.Dataset):
            names.append(name + ".npy")
        elif isinstance(link, h5py.SoftLink) and isinstance(group.get(name), h5py.Dataset):
            names.append(name + ".npy")   # a symlink to the target's .npy view
    return names


def soft_target(dir_path: str, target: str) -> str:
    if not target.startswith("/"):
        return target
    depth = len([c for c in dir_path.split("/") if c])
    return "/".join([".."] * depth + [c for c in target.split("/") if c]) or "."


def as_engine(value):
    """h5py's bool enum (int8 {FALSE=0, TRUE=1}) is numpy bool in h5fs too (h5fs/model/dtypes.py)."""
    return value


def expected_xattrs(obj) -> dict[bytes, bytes]:
    out = {}
    for name in obj.attrs:
        out[attribute_xattr_name(name)] = format_value(as_engine(obj.attrs[name]))
    return out


def actual_xattrs(path) -> dict[bytes, bytes]:
    out = {}
    for name in os.listxattr(path):
        if name.startswith("user.h5fs.") and not name.startswith("user.h5fs.attr."):
            continue
        out[name.encode()] = os.getxattr(path, name)
    return out


def check_dataset(ds: h5py.Dataset, path: str) -> None:
    arr = as_engine(ds[()])
    with open(path, "rb") as fh:
        raw = fh.read()
    assert raw == np.ascontiguousarray(arr).tobytes(), path
    st = os.stat(path)
    assert st.st_size == arr.nbytes
    assert st.st_blksize == 1 << 20
    assert st.st_blocks == (ds.id.get_storage_size() + 511) // 512
    loaded = np.load(path + ".npy", allow_pickle=False)
    assert loaded.dtype == arr.dtype and loaded.shape == arr.shape, path
    np.testing.assert_array_equal(loaded, arr)
    assert os.path.getsize(path + ".npy") == len(open(path + ".npy", "rb").read())


def walk_compare(f: h5py.File, mp: str) -> int:
    """Compare every listing, dataset, attribute and link below the root; return objects seen."""
    seen = set()
    count = 0

    def visit(group: h5py.Group, hpath: str, dpath: str) -> None:
        nonlocal count
        assert os.listdir(dpath) == expected_names(group), hpath
        assert actual_xattrs(dpath) == expected_xattrs(group), hpath
        for name in group:
            child_h = (hpath.rstrip("/") + "/" + name)
            child_d = os.path.join(dpath, name)
            link = group.get(name, getlink=True)
            if isinstance(link, h5py.SoftLink):
                assert stat.S_ISLNK(os.lstat(child_d).st_mode)
                assert os.readlink(child_d) == soft_target(hpath, link.path)
                continue
            if isinstance(link, h5py.ExternalLink):
                assert os.readlink(child_d) == f"{link.filename}:{link.path}"
                assert not os.path.exists(child_d)
                continue
            obj = group[name]
            addr = h5py.h5o.get_info(obj.id).token if hasattr(h5py.h5o.get_info(obj.id), "token") else None
            key = obj.id.__hash__() if addr is None else addr
            if isinstance(obj, h5py.Group):
                assert stat.S_ISDIR(os.stat(child_d).st_mode)
                if key in seen:
                    continue
                seen.add(key)
                visit(obj, child_h, child_d)
            elif isinstance(obj, h5py.Dataset):
                assert actual_xattrs(child_d) == expected_xattrs(obj), child_h
                if key in seen:
                    continue
                seen.add(key)
                check_dataset(obj, child_d)
                count += 1
            else:  # named datatype: a small read-only text file
                st = os.stat(child_d)
                assert stat.S_ISREG(st.st_mode)
                assert os.getxattr(child_d, "user.h5fs.kind") == b"datatype"
                assert open(child_d, "rb").read().endswith(b"\n")

    visit(f, "/", mp)
    return count


def test_tree_matches_h5py(read_mount, sample):
    mp = str(read_mount(sample))
    with h5py.File(sample, "r") as f:
        n = walk_compare(f, mp)
    assert n >= 15


def test_attribute_text(read_mount, sample):
    mp = read_mount(sample)
    get = lambda name, p=mp: os.getxattr(p, name)
    assert get("user.title") == b"sample file"
    assert get("user.version") == b"3"
    assert get("user.scale") == b"0.1"
    assert get("user.ratio") == b"0.1"
    assert get("user.flags") == b"[True, False]"  # h5py's bool enum shows as bool
    assert get("user.matrix") == b"[[0, 1, 2], [3, 4, 5]]"
    assert get("user.names") == b"ab\ncde"
    assert get("user.point") == b"{x: 1, y: 2.5}"
    assert get("user.empty") == b"[]"
    # an HDF5 attribute named h5fs.* does not hide (or get hidden by) the facts
    assert get("user.h5fs.attr.h5fs.dtype") == b"7"
    names = os.listxattr(mp)
    assert "user.h5fs.attr.h5fs.dtype" in names and "user.h5fs.dtype" not in names
    assert get("user.h5fs.kind") == b"group"
    # the real getfattr agrees
    out = subprocess.run(["getfattr", "--only-values", "-n", "user.units", str(mp / "data")],
                         capture_output=True, check=True).stdout
    assert out == b"m/s"
    with pytest.raises(OSError) as e:
        os.getxattr(mp, "user.nonexistent")
    assert e.value.errno == errno.ENODATA
    with pytest.raises(OSError) as e:
        os.getxattr(mp, "user.h5fs.nonexistent")
    assert e.value.errno == errno.ENODATA


def test_array_datatype_attributes(read_mount, tmp_path, libver):
    """Attributes of an array datatype read as h5py reads them (the array's dims after the
    dataspace's), and check finds them sound."""
    def build(f):
        g = f.create_group("g")
        g.attrs.create("pairs", data=np.arange(6).reshape(3, 2), dtype=np.dtype(("<i4", (2,))))
        g.attrs.create("words", data=np.array([("a", "bc")], dtype=object), dtype=np.dtype((h5py.string_dtype(), (2,))))
        g.attrs.create("fixed", data=np.array([b"ab", b"cd"]), dtype=np.dtype(("S2", (2,))))
    path = make_h5(tmp_path / "arr.h5", build, libver)
    mp = read_mount(path)
    with h5py.File(path, "r") as f:
        assert actual_xattrs(mp / "g") == expected_xattrs(f["g"])
    assert os.getxattr(mp / "g", "user.pairs") == b"[[0, 1], [2, 3], [4, 5]]"
    assert os.getxattr(mp / "g", "user.words") == b"a\nbc"
    assert run_h5fs("check", path).returncode == 0


def test_facts(read_mount, sample):
    mp = read_mount(sample)
    p = mp / "data" / "chunked_gzip"
    g = lambda n: os.getxattr(p, "user.h5fs." + n).decode()
    assert g("dtype") == "<f4" or "float32" in g("dtype") or "f4" in g("dtype")
    assert g("shape") == "(250, 400)"
    assert g("maxshape") == "(250, 400)"
    assert g("chunks") == "(50, 64)"
    assert "deflate" in g("filters") or "gzip" in g("filters")
    assert g("kind") == "dataset"
    with h5py.File(sample, "r") as f:
        assert int(g("storage_size")) == f["data/chunked_gzip"].id.get_storage_size()
    assert os.getxattr(mp / "data" / "unlimited", "user.h5fs.maxshape") == b"(unlimited, 3)"
    # facts are on the .npy view too
    assert os.getxattr(str(p) + ".npy", "user.h5fs.shape") == b"(250, 400)"
    # facts are read by name, never listed; the .npy view lists nothing but answers by name
    assert not [n for n in os.listxattr(p) if n.startswith("user.h5fs.")]
    assert "user.desc" in os.listxattr(mp / "ints")
    assert os.listxattr(mp / "ints.npy") == []
    assert os.getxattr(mp / "ints.npy", "user.desc") == os.getxattr(mp / "ints", "user.desc") == b"ints of data"


def test_hard_links_share_inode(read_mount, sample):
    mp = read_mount(sample)
    a, b = os.stat(mp / "ints"), os.stat(mp / "data" / "ints_again")
    assert a.st_ino == b.st_ino and a.st_nlink == b.st_nlink == 2
    assert os.stat(mp / "ints.npy").st_ino == os.stat(mp / "data" / "ints_again.npy").st_ino
    assert os.stat(mp / "ints.npy").st_ino != a.st_ino
    g1, g2 = os.stat(mp / "data" / "deep"), os.stat(mp / "data_alias")
    assert g1.st_ino == g2.st_ino and g1.st_nlink == 2
    assert os.stat(mp / "floats").st_nlink == 1
    assert os.stat(mp).st_ino == 1


def test_soft_links_resolve(read_mount, sample):
    mp = read_mount(sample)
    assert os.readlink(mp / "soft_abs") == "data/chunked_gzip"
    assert os.readlink(mp / "data/other/deeper/soft_up") == "../../../ints"
    assert os.readlink(mp / "data/soft_rel") == "unlimited"
    with h5py.File(sample, "r") as f:
        assert open(mp / "soft_abs", "rb").read() == f["data/chunked_gzip"][()].tobytes()
        assert open(mp / "data/other/deeper/soft_up", "rb").read() == f["ints"][()].tobytes()
        assert open(mp / "data/soft_rel", "rb").read() == f["data/unlimited"][()].tobytes()
        # a soft link to a dataset has a .npy symlink to the target's .npy view
        assert os.readlink(mp / "data/other/deeper/soft_up.npy") == "../../../ints.npy"
        np.testing.assert_array_equal(np.load(mp / "data/soft_rel.npy"), f["data/unlimited"][()])
    assert sorted(os.listdir(mp / "soft_group")) == ["er"]
    assert not os.path.exists(mp / "dangling") and os.path.islink(mp / "dangling")
    assert not os.path.lexists(mp / "dangling.npy") and not os.path.lexists(mp / "soft_group.npy")
    assert os.readlink(mp / "ext") == "other.h5:/some/where"


def test_storage_blocks(read_mount, sample):
    mp = read_mount(sample)
    z = os.stat(mp / "data" / "zeros_gzip")
    assert z.st_size == 200 * 200 * 8
    assert 0 < z.st_blocks * 512 < z.st_size // 20  # compression shows in du
    u = os.stat(mp / "data" / "unallocated")
    assert u.st_blocks == 0 and u.st_size == 64 * 64 * 8
    np.testing.assert_array_equal(np.load(str(mp / "data" / "unallocated") + ".npy"), np.full((64, 64), 1.5))
    assert os.stat(mp / "data" / "unallocated.npy").st_blocks == 0  # a view allocates nothing
    du = subprocess.run(["du", "-B1", "--apparent-size", "-s", str(mp / "data" / "zeros_gzip")],
                        capture_output=True, text=True, check=True).stdout
    assert int(du.split()[0]) == 320000


def test_real_tools(read_mount, sample, tmp_path):
    mp = read_mount(sample)
    with h5py.File(sample, "r") as f:
        want = f["data/chunked_gzip"][()].tobytes()
        floats = f["floats"][()].tobytes()
    src = mp / "data" / "chunked_gzip"
    out = tmp_path / "copy"
    subprocess.run(f"cat {src} > {out}", shell=True, check=True)
    assert out.read_bytes() == want
    # dd partial reads at odd offsets
    got = subprocess.run(["dd", f"if={src}", "bs=1000", "skip=37", "count=5", "status=none"],
                         capture_output=True, check=True).stdout
    assert got == want[37000:42000]
    got = subprocess.run(["dd", f"if={mp / 'floats'}", "bs=7", "skip=3", "count=4", "status=none"],
                         capture_output=True, check=True).stdout
    assert got == floats[21:49]
    # cp of a .npy file gives a standalone .npy
    subprocess.run(["cp", str(src) + ".npy", str(tmp_path / "x.npy")], check=True)
    np.testing.assert_array_equal(np.load(tmp_path / "x.npy"), np.frombuffer(want, "<f4").reshape(250, 400))
    # np.load in a separate process
    code = f"import numpy as np; a = np.load({str(src) + '.npy'!r}, allow_pickle=False); print(a.shape, a.dtype)"
    res = subprocess.run(["python", "-c", code], capture_output=True, text=True, check=True).stdout
    assert res.strip() == "(250, 400) float32"
    # stat, find
    s = subprocess.run(["stat", "-c", "%s %F %h", str(src)], capture_output=True, text=True, check=True).stdout
    assert s.strip() == f"{len(want)} regular file 1"
    found = subprocess.run(["find", str(mp), "-name", "leaf*"], capture_output=True, text=True, check=True).stdout
    assert sorted(found.split()) == sorted([str(mp / "data/deep/er/est/leaf"), str(mp / "data/deep/er/est/leaf.npy"),
                                            str(mp / "data_alias/er/est/leaf"), str(mp / "data_alias/er/est/leaf.npy")])
    ls = subprocess.run(["ls", "-l", str(mp / "ordered")], capture_output=True, text=True, check=True).stdout
    assert [line.split()[-1] for line in ls.splitlines()[1:]] == ["alpha", "alpha.npy", "mid", "mid.npy", "zeta", "zeta.npy"]
    ls = subprocess.run(["ls", "-U", str(mp / "ordered")], capture_output=True, text=True, check=True).stdout
    assert ls.split() == ["zeta", "zeta.npy", "alpha", "alpha.npy", "mid", "mid.npy"]
    rl = subprocess.run(["readlink", str(mp / "soft_abs")], capture_output=True, text=True, check=True).stdout
    assert rl.strip() == "data/chunked_gzip"


def test_npy_header_is_aligned(read_mount, sample):
    mp = read_mount(sample)
    for name in ("ints", "compound", "scalar", "empty", "fixed_str", "be_ints"):
        data = open(mp / (name + ".npy"), "rb").read()
        version = np.lib.format.read_magic(io.BytesIO(data))
        assert version in ((1, 0), (2, 0))
        hlen = int.from_bytes(data[8:10], "little") + 10
        assert hlen % 64 == 0
        # reading the .npy file in odd pieces gives the same bytes
        with open(mp / (name + ".npy"), "rb", buffering=0) as fh:
            pieces = []
            while chunk := fh.read(13):
                pieces.append(chunk)
        assert b"".join(pieces) == data


def test_big_directory(read_mount, tmp_path, libver):
    n = 1500

    def build(f):
        g = f.create_group("many")
        for i in range(n):
            g.create_dataset(f"d{i:05d}", data=np.int32(i))
    h5 = make_h5(tmp_path / "many.h5", build, libver)
    mp = read_mount(h5)
    names = os.listdir(mp / "many")
    assert len(names) == 2 * n and len(set(names)) == 2 * n
    assert names[:4] == ["d00000", "d00000.npy", "d00001", "d00001.npy"]
    assert open(mp / "many" / "d01234", "rb").read() == np.int32(1234).tobytes()


def test_many_concurrent_reads(read_mount, tmp_path):
    """Parallel readers of one chunked compressed dataset through the page cache and threads."""
    data = np.arange(2_000_000, dtype="<f4").reshape(2000, 1000)

    def build(f):
        f.create_dataset("big", data=data, chunks=(100, 250), compression="gzip", shuffle=True)
    mp = read_mount(make_h5(tmp_path / "big.h5", build, "latest"))
    procs = [subprocess.Popen(["dd", f"if={mp / 'big'}", "bs=1M", f"skip={i}", "count=2", "status=none"],
                              stdout=subprocess.PIPE) for i in range(0, 8, 2)]
    want = data.tobytes()
    for i, p in zip(range(0, 8, 2), procs):
        out, _ = p.communicate(timeout=60)
        assert out == want[i << 20:(i + 2) << 20]
    assert open(mp / "big", "rb").read() == want


def test_variable_length_strings(read_mount, tmp_path, libver):
    words = ["alpha", "βeta", "", "a longer string with spaces"]

    def build(f):
        f.create_dataset("words", data=words, dtype=h5py.string_dtype())
        f.attrs["title"] = "vlen tïtle"
        f.attrs["tags"] = np.array(["x", "yy"], dtype=h5py.string_dtype())
        f["words"].attrs["lang"] = "en"
    mp = read_mount(make_h5(tmp_path / f"vlen_{libver}.h5", build, libver))
    assert os.getxattr(mp, "user.title") == "vlen tïtle".encode()
    assert os.getxattr(mp, "user.tags") == b"x\nyy"
    assert os.getxattr(mp / "words", "user.lang") == b"en"
    text = subprocess.run(["cat", str(mp / "words")], capture_output=True, check=True).stdout.decode()
    assert text.splitlines() == words
    loaded = np.load(mp / "words.npy", allow_pickle=False)
    assert loaded.tolist() == words
    assert os.stat(mp / "words").st_size == len(text.encode())


def test_lookup_before_listing(read_mount, sample):
    """Paths opened before their directory was ever listed get the same inodes afterwards."""
    mp = read_mount(sample)
    ino = os.stat(mp / "data" / "deep" / "er" / "est" / "leaf").st_ino
    npy = os.stat(mp / "data" / "deep" / "er" / "est" / "leaf.npy").st_ino
    assert not os.path.exists(mp / "data" / "nothing.npy")
    assert not os.path.exists(mp / "data" / "deep.npy")  # groups have no .npy view
    listed = {e.name: e.inode() for e in os.scandir(mp / "data" / "deep" / "er" / "est")}
    assert listed == {"leaf": ino, "leaf.npy": npy}


def test_sequential_reads_of_compressed_data(read_mount, tmp_path):
    """cat, dd and np.load read a multi-chunk gzip dataset front to back (the daemon decodes the
    following chunks ahead in other threads meanwhile): every byte matches h5py."""
    data = np.cumsum(RNG.standard_normal((1500, 1000)), axis=0).astype("<f4")

    def build(f):
        f.create_dataset("g", data=data, chunks=(100, 250), compression="gzip", shuffle=True)
    mp = read_mount(make_h5(tmp_path / "seq.h5", build, "latest"))
    with open(mp / "g", "rb") as fh:
        assert fh.read() == data.tobytes()
    out = subprocess.run(["dd", f"if={mp / 'g'}", "bs=1M", "status=none"], capture_output=True, check=True).stdout
    assert out == data.tobytes()
    np.testing.assert_array_equal(np.load(mp / "g.npy"), data)
