"""Edits of files with shared object header messages (an SOHM table of list or B-tree indexes):
rm, rm -r, setfattr, setfattr -x and `cp` over a `.npy` count down what they stop using of the
table as libhdf5 does (H5SM_delete).

The oracle is libhdf5 twice over: the same single edit made by h5py on a copy must leave the same
index records (hashes, locations, counts); and after a sequence of edits through the mount, h5py
deleting every remaining attribute and object must succeed (libhdf5 fails on a use the index has
lost) and leave every index empty (a use h5fs failed to count down would stay).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import h5py
import numpy as np
import pytest

import roundtrip_support as R
from conftest import run_h5fs
from write_support import verify_file
from sohm_support import build, records, remove_everything_with_libhdf5

INDEXES = {
    "lists": lambda: R.sohm_fcpl(50, 40),        # two list indexes
    "btree": R.shared_messages_fcpl,             # one B-tree index of every type
    "small-lists": lambda: R.sohm_fcpl(4, 2),    # lists grown into B-trees
}


@pytest.fixture(params=sorted(INDEXES))
def sohm_file(request, tmp_path):
    path = tmp_path / "sohm.h5"
    build(path, INDEXES[request.param]())
    return path


SINGLE_EDITS = {
    "rm a dataset using shared messages": (lambda f: f.__delitem__("d2"), ["rm", "{mp}/d2"]),
    "rm the dataset holding messages in its header": (lambda f: f.__delitem__("d0"), ["rm", "{mp}/d0"]),
    "rm a dataset tracked in the index": (lambda f: f.__delitem__("other"), ["rm", "{mp}/other"]),
    "rm -r a group": (lambda f: f.__delitem__("g"), ["rm", "-r", "{mp}/g"]),
    "rm a group with dense attributes": (lambda f: f.__delitem__("many"), ["rmdir", "{mp}/many"]),
    "remove a shared attribute": (lambda f: f["d1"].attrs.__delitem__("units"), ["setfattr", "-x", "user.units", "{mp}/d1"]),
    "remove an attribute of the first dataset": (lambda f: f["d0"].attrs.__delitem__("scale"),
                                                 ["setfattr", "-x", "user.scale", "{mp}/d0"]),
    "remove a shared attribute from dense storage": (lambda f: f["many"].attrs.__delitem__("a00"),
                                                     ["setfattr", "-x", "user.a00", "{mp}/many"]),
}


@pytest.mark.parametrize("edit", sorted(SINGLE_EDITS))
def test_an_edit_leaves_the_index_as_libhdf5_leaves_it(sohm_file, mount, tmp_path, edit):
    by_libhdf5 = tmp_path / "libhdf5.h5"
    shutil.copy(sohm_file, by_libhdf5)
    lib_edit, command = SINGLE_EDITS[edit]
    with h5py.File(by_libhdf5, "r+") as f:
        lib_edit(f)
    mp = mount(sohm_file, "rw")
    subprocess.run([w.format(mp=mp) for w in command], check=True, capture_output=True)
    mount.unmount(mp)
    assert records(sohm_file) == records(by_libhdf5)
    verify_file(sohm_file, h5dump=False)
    remove_everything_with_libhdf5(sohm_file)
    assert all(count == 0 for count, _ in records(sohm_file))


def test_a_sequence_of_edits_keeps_every_count(sohm_file, mount, tmp_path):
    before = records(sohm_file)
    mp = mount(sohm_file, "rw")
    os.setxattr(mp / "d0", "user.units", b"furlongs")          # a shared attribute replaced, unshared
    os.setxattr(mp / "d3", "user.scale", b"2.5")               # its shared datatype kept, counted again
    os.setxattr(mp / "d0", "user.new", b"abc")
    os.removexattr(mp / "d1", "user.units")
    for i in range(3):   # the object past its compact attributes: moved to dense storage, unshared
        os.setxattr(mp / "d4", f"user.extra{i}", b"x" * 40)
    os.unlink(mp / "d2")
    os.unlink(mp / "other")
    y = tmp_path / "y.npy"
    np.save(y, np.arange(50, dtype="<i4"))
    shutil.copy(y, mp / "d3.npy")                             # its data messages replaced
    os.mkdir(mp / "fresh")
    os.setxattr(mp / "fresh", "user.note", b"made by h5fs")
    mount.unmount(mp)
    assert records(sohm_file) != before
    data = verify_file(sohm_file, h5dump=False)
    assert data["d0@units"] == b"furlongs" or str(data["d0@units"]) == "furlongs"
    assert float(data["d3@scale"]) == 2.5
    assert np.array_equal(data["d3"], np.arange(50, dtype="<i4"))
    assert "d1@units" not in data and "d2" not in data and "other" not in data
    with h5py.File(sohm_file, "r") as f:
        assert f["d4"].attrs["units"] == "metres per second squared" and f["d4"].attrs["extra2"] == "x" * 40
    remove_everything_with_libhdf5(sohm_file)
    assert all(count == 0 for count, _ in records(sohm_file))


def test_dense_shared_attributes_replaced_and_removed_down_to_compact(sohm_file, mount):
    """Dense records pointing into the table: a replaced value is stored in the object's own
    heap, unshared; removals below the minimum dense count bring the rest back into the header
    as messages of their own."""
    mp = mount(sohm_file, "rw")
    os.setxattr(mp / "many", "user.a02", b"changed")
    os.setxattr(mp / "many", "user.a03", b"7.25")
    for i in range(4, 12):
        os.removexattr(mp / "many", f"user.a{i:02d}")
    assert sorted(os.listxattr(mp / "many")) == ["user.a00", "user.a01", "user.a02", "user.a03"]
    mount.unmount(mp)
    with h5py.File(sohm_file, "r") as f:
        attrs = dict(f["many"].attrs)
    assert attrs == {"a00": "same text", "a01": 1.0, "a02": "changed", "a03": 7.25}
    verify_file(sohm_file, h5dump=False)
    remove_everything_with_libhdf5(sohm_file)
    assert all(count == 0 for count, _ in records(sohm_file))


def test_typed_attributes_over_shared_ones(sohm_file, mount):
    """`h5fs attr --dtype` over attributes the table shares (in headers and in dense storage):
    the shared uses are counted down, the new attributes stored unshared, and libhdf5 can
    remove everything afterwards."""
    mp = mount(sohm_file, "rw")
    for where, name, value, dtype in (("d0", "units", "[1, 2]", "u1"), ("d1", "scale", "2.5", "f4"),
                                      ("many", "a00", "7", "i8"), ("many", "a01", "[true, false]", "?")):
        run_h5fs("attr", mp / where, name, value, "--dtype", dtype, check=True)
    mount.unmount(mp)
    verify_file(sohm_file, h5dump=False)
    with h5py.File(sohm_file, "r") as f:
        assert f["d0"].attrs["units"].tolist() == [1, 2] and f["d0"].attrs["units"].dtype == "u1"
        assert f["d1"].attrs["scale"] == np.float32(2.5) and f["d1"].attrs["scale"].dtype == "f4"
        assert f["many"].attrs["a00"] == 7 and f["many"].attrs["a01"].tolist() == [True, False]
        assert f["d2"].attrs["units"] == "metres per second squared"
    remove_everything_with_libhdf5(sohm_file)
    assert all(count == 0 for count, _ in records(sohm_file))


def test_setfattr_on_the_last_use_of_a_shared_datatype(tmp_path, mount):
    """An attribute holding the last use of a shared datatype (in the header and in dense
    storage) gets a new value: the new message's uses are counted before the old one's go, or
    the table drops the record the new message still names (EIO)."""
    path = tmp_path / "last.h5"
    with R.new_file(path, "latest", (8, 8), R.shared_messages_fcpl()) as f:
        f.create_group("g").attrs["x"] = np.uint16(3)   # the file's only uint16
        h = f.create_group("h")
        for i in range(12):   # dense: a00 the only uint32
            h.attrs[f"a{i:02d}"] = np.uint32(9) if i == 0 else np.int32(i)
    mp = mount(path, "rw")
    os.setxattr(mp / "g", "user.x", b"5")
    os.setxattr(mp / "h", "user.a00", b"7")
    mount.unmount(mp)
    with h5py.File(path, "r") as f:
        assert f["g"].attrs["x"] == 5 and f["g"].attrs["x"].dtype == np.uint16
        assert f["h"].attrs["a00"] == 7 and f["h"].attrs["a00"].dtype == np.uint32
    verify_file(path, h5dump=False)
    remove_everything_with_libhdf5(path)
    assert all(count == 0 for count, _ in records(path))
