"""Format features beyond the defaults, each in a file libhdf5 wrote: shared object header
messages, every library version's formats (incl. libhdf5 2.0's layout message v5), times,
comments, big groups in every storage style."""

from __future__ import annotations

import ctypes
import glob
import os

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

from remote_support import open_source, range_server, s3_server  # noqa: E402,F401 (fixtures)


def libhdf5() -> ctypes.CDLL:
    """The libhdf5 inside the h5py wheel, for the few property calls h5py does not wrap (test only)."""
    libdir = os.path.join(os.path.dirname(h5py.__file__), os.pardir, "h5py.libs")
    return ctypes.CDLL(glob.glob(os.path.join(libdir, "libhdf5-*.so*"))[0])


def assert_same(path, open_source) -> None:
    """Every object of the file reads the same through h5fs (on the local file or a copy on a
    server) as through h5py."""
    with open_source(path) as ours, h5py.File(path) as theirs:
        def visit(name, obj):
            mine = ours.resolve(name)
            assert sorted(a.name for a in mine.attributes()) == sorted(obj.attrs), name
            for a in mine.attributes():
                expected = obj.attrs[a.name]
                if isinstance(expected, str):
                    assert a.value.item() == expected, (name, a.name)
                else:
                    assert np.array_equal(a.value, expected), (name, a.name)
            if isinstance(obj, h5py.Dataset):
                assert mine.read_array().tobytes() == obj[()].tobytes(), name
            elif isinstance(obj, h5py.Group):
                assert [ln.name for ln in mine.links()] == list(obj), name
        theirs.visititems(visit)


# H5Opublic.h: H5O_SHMESG_<type>_FLAG = 1 << (message type)
SDSPACE, DTYPE, FILL, PLINE, ATTR = 1 << 0x01, 1 << 0x03, 1 << 0x05, 1 << 0x0B, 1 << 0x0C


def test_shared_messages_in_the_sohm_heap(open_source, tmp_path):
    lib = libhdf5()
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    pid = ctypes.c_int64(fcpl.id)
    assert lib.H5Pset_shared_mesg_nindexes(pid, ctypes.c_uint(2)) >= 0
    # index 0: datatypes and attributes; index 1: dataspaces, fill values, filter pipelines
    assert lib.H5Pset_shared_mesg_index(pid, 0, DTYPE | ATTR, 1) >= 0
    assert lib.H5Pset_shared_mesg_index(pid, 1, SDSPACE | FILL | PLINE, 1) >= 0
    path = tmp_path / "sohm.h5"
    fid = h5py.h5f.create(str(path).encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl)
    with h5py.File(fid) as f:
        for i in range(6):
            d = f.create_dataset(f"d{i}", data=np.arange(20.0) * i, chunks=(5,), compression="gzip",
                                 fillvalue=1.0)
            d.attrs["shared_array"] = np.arange(50)
            d.attrs["text"] = "the same text on every dataset"
    with open_source(path) as ours:
        assert len(ours.sohm_indexes) == 2
        shared = [m for m in ours.resolve("d3").header.messages if m.shared]
        assert shared, "libhdf5 should have shared some messages"
    assert_same(path, open_source)


@pytest.mark.parametrize("libver", ["earliest", "v108", "v110", "v112", "v114", "v200"])
def test_every_library_version_format(open_source, tmp_path, libver):
    path = tmp_path / f"{libver}.h5"
    with h5py.File(path, "w", libver=(libver, "latest")) as f:
        f.attrs["created_by"] = libver
        f.create_dataset("fixed", data=np.arange(100, dtype="<i4"), chunks=(10,), compression="gzip")
        two = f.create_dataset("btree2", shape=(10, 10), maxshape=(None, None), chunks=(3, 3), dtype="<f4",
                               compression="gzip", shuffle=True)
        two[...] = np.arange(100).reshape(10, 10)
        ext = f.create_dataset("extensible", shape=(0,), maxshape=(None,), chunks=(7,), dtype=">i8",
                               compression="gzip")
        ext.resize((100,))
        ext[...] = np.arange(100)
        f.create_dataset("single", data=np.arange(50), chunks=(50,), compression="gzip")
        f.create_dataset("plain", data=np.arange(10.0))
        g = f.create_group("many", track_order=True)
        for i in range(30):
            g.create_group(f"sub{29 - i:02d}").attrs["i"] = i
    assert_same(path, open_source)
    with open_source(path) as ours:
        layout = ours.resolve("fixed").layout
        assert layout.version == {"earliest": 3, "v108": 3, "v200": 5}.get(libver, 4)


def test_modification_times_and_comment(open_source, tmp_path):
    path = tmp_path / "times.h5"
    with h5py.File(path, "w", libver="earliest", track_order=False) as f:
        d = f.create_dataset("timed", data=np.arange(3), track_times=True)
        h5py.h5o.set_comment(d.id, b"a comment on a dataset")
        info = h5py.h5g.get_objinfo(d.id)
        expected = info.mtime
    with open_source(path) as ours:
        d = ours.resolve("timed")
        assert d.mtime == pytest.approx(expected, abs=1)
        assert d.comment == "a comment on a dataset"
        assert d.facts()["comment"] == "a comment on a dataset"


@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_large_group(open_source, tmp_path, libver):
    path = tmp_path / "large.h5"
    with h5py.File(path, "w", libver=libver) as f:
        for i in range(2000):
            f.create_group(f"g{i:05d}")
    with open_source(path) as ours, h5py.File(path) as theirs:
        assert [ln.name for ln in ours.root.links()] == list(theirs)
        assert ours.root.facts()["storage"] == ("symbol table" if libver == "earliest" else "dense")


def test_superblock_version_1_with_btree_k_values(open_source, tmp_path):
    """Non-default indexed-storage K makes libhdf5 write superblock version 1."""
    lib = libhdf5()
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    pid = ctypes.c_int64(fcpl.id)
    assert lib.H5Pset_istore_k(pid, ctypes.c_uint(8)) >= 0
    assert lib.H5Pset_sym_k(pid, ctypes.c_uint(2), ctypes.c_uint(3)) >= 0
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_EARLIEST, h5py.h5f.LIBVER_LATEST)
    path = tmp_path / "v1.h5"
    fid = h5py.h5f.create(str(path).encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl)
    with h5py.File(fid) as f:
        for i in range(20):  # more entries than 2K = 6 per node: the B-tree splits
            f.create_group(f"g{i:02d}")
        d = f.create_dataset("chunked", shape=(400,), chunks=(4,), dtype="<i2")  # > 2K chunks per node
        d[...] = np.arange(400)
    with open_source(path) as ours:
        sb = ours.superblock
        assert (sb.version, sb.indexed_storage_k, sb.group_leaf_k, sb.group_internal_k) == (1, 8, 3, 2)
    assert_same(path, open_source)


ORDER_NAMES = ["zeta", "alpha", "mid", "beta", "omega", "kappa", "a1", "q", "w", "e", "r", "t"]


def test_tracked_but_unindexed_order(open_source, tmp_path):
    """Creation order tracked but not indexed: dense attributes and links still list in creation
    order (as libhdf5 does), not in the name index's hash order."""
    path = tmp_path / "order.h5"
    with h5py.File(path, "w", libver="latest") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_attr_creation_order(h5py.h5p.CRT_ORDER_TRACKED)
        h5py.h5d.create(f.id, b"d", h5py.h5t.NATIVE_INT32, h5py.h5s.create_simple((1,)), dcpl=dcpl)
        for name in ORDER_NAMES:
            f["d"].attrs[name] = 1
        gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
        gcpl.set_link_creation_order(h5py.h5p.CRT_ORDER_TRACKED)
        h5py.h5g.create(f.id, b"links", gcpl=gcpl)
        for name in ORDER_NAMES:
            f["links"].create_group(name)
        g = f.create_group("g", track_order=True)  # compact, tracked and indexed, with a deletion
        for name in ["c", "b", "a"]:
            g.attrs[name] = 1
        del g.attrs["c"]
        g.attrs["zz"] = 2
    with open_source(path) as ours, h5py.File(path) as theirs:
        assert [a.name for a in ours.resolve("d").attributes()] == list(theirs["d"].attrs) == ORDER_NAMES
        assert [ln.name for ln in ours.resolve("links").links()] == list(theirs["links"]) == ORDER_NAMES
        assert [a.name for a in ours.resolve("g").attributes()] == list(theirs["g"].attrs) == ["b", "a", "zz"]


def test_utf8_names_under_the_ascii_flag(open_source, tmp_path):
    """libhdf5's default character set is ASCII, yet C programs store UTF-8 names under it: names
    decode as UTF-8 whatever the flag, so lookups by the kernel's (UTF-8) names find them."""
    path = tmp_path / "cset.h5"
    with h5py.File(path, "w", libver="latest") as f:
        h5py.h5g.create(f.id, "é".encode())  # default link creation properties: ASCII
        d = f.create_dataset("d", data=1)
        h5py.h5a.create(d.id, "ü".encode(), h5py.h5t.NATIVE_INT32, h5py.h5s.create(h5py.h5s.SCALAR)).write(
            np.array(7, "i4"))
    with open_source(path) as ours:
        assert ours.root.link("é") is not None
        assert [a.name for a in ours.resolve("d").attributes()] == ["ü"]
