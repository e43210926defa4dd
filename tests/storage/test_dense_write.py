"""Dense link and attribute storage edited by h5fs (storage/dense_storage.py, the generic v2
B-tree editor), checked against libhdf5: name hashes equal to the ones libhdf5 stores, random edits
of groups libhdf5 made dense (names whose hashes collide included) read back by h5py, libhdf5 then
editing the same storage, and the compact/dense transitions through a real mount with mkdir,
rmdir, setfattr and setfattr -x; after each, h5py reads the whole file and `h5fs check` passes."""

from __future__ import annotations

import os
import subprocess

import h5py
import numpy as np
import pytest

from h5fs.format import btree_v2
from h5fs.format.checksum import lookup3
from h5fs.format.codec import Reader
from h5fs.format.messages import link as link_msg
from h5fs.format.messages.link import Link
from h5fs.model import messages as M
from h5fs.model.file import H5File
from h5fs.storage.fractal_heap.reader import FractalHeap
from h5fs.storage.links_write import GroupLinks
from h5fs.storage.btree_v2.reader import iterate, read_header
from write_support import verify_file

# names whose lookup3 hashes collide (found by search): a name index must tell them apart by name
COLLIDING = [("c82689", "c96406"), ("c60180", "c117619"), ("c2469", "c148277"), ("c11868", "c246645")]


def new_file(path, sizes=(8, 8)) -> h5py.File:
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fcpl.set_sizes(*sizes)
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_LATEST, h5py.h5f.LIBVER_LATEST)
    return h5py.File(h5py.h5f.create(str(path).encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl))


def group_address(path, name: str) -> int:
    with h5py.File(path, "r") as f:
        return h5py.h5o.get_info(f[name].id).addr


def links_of(path, name: str) -> dict[str, str]:
    """The group's links as libhdf5 lists them: name -> soft target (every link here is soft)."""
    with h5py.File(path, "r") as f:
        g = f[name]
        return {k: g.get(k, getlink=True).path for k in g}


def test_colliding_names_hash_as_libhdf5_stores_them(tmp_path):
    """The hashes libhdf5 writes in a name index are lookup3 of the name, and the pairs collide."""
    p = tmp_path / "c.h5"
    with new_file(p) as f:
        g = f.create_group("g")
        for n in [n for pair in COLLIDING for n in pair] + ["filler"]:    # 9 links: dense
            g[n] = h5py.SoftLink("/" + n)
    with H5File.open(str(p)) as hf:
        info = hf.get(group_address(p, "g"), "g").message(M.LINK_INFO)
        heap = FractalHeap(hf.reader, info.heap_address)
        stored = {}
        for rec in iterate(hf.reader, info.name_index_address, btree_v2.decode_link_name):
            stored[link_msg.decode(Reader(heap.get(rec.heap_id), 0, hf.reader.sizes, "link")).name] = rec.hash
    for a, b in COLLIDING:
        assert stored[a] == stored[b] == lookup3(a.encode()) == lookup3(b.encode())


@pytest.mark.parametrize("kind", ["tracked", "untracked", "offsets-4"])
def test_random_edits_of_a_libhdf5_dense_group(tmp_path, kind):
    """Random inserts and removals in a group libhdf5 made dense (a tree deeper than a leaf), each
    its own transaction through GroupLinks, compared with a model; then libhdf5 edits the same
    group and reads everything."""
    p = tmp_path / "d.h5"
    rng = np.random.default_rng({"tracked": 1, "untracked": 2, "offsets-4": 3}[kind])
    model: dict[str, str] = {}
    with new_file(p, (4, 4) if kind == "offsets-4" else (8, 8)) as f:
        g = f.create_group("g", track_order=kind == "tracked")
        for i in range(600):
            name = f"lib{i:04d}"
            model[name] = "/t/" + name
            g[name] = h5py.SoftLink(model[name])
    with H5File.open(str(p)) as hf:
        info = hf.get(group_address(p, "g"), "g").message(M.LINK_INFO)
        assert read_header(hf.reader, info.name_index_address).depth >= 1
    address = group_address(p, "g")
    pool = [n for pair in COLLIDING for n in pair] + [f"new{i}" for i in range(400)]
    with H5File.open(str(p), writable=True) as hf:
        for step in range(500):
            with hf.store.transaction() as txn:
                links = GroupLinks(txn, address, "g")
                if model and rng.random() < 0.45:
                    name = sorted(model)[rng.integers(len(model))]
                    assert links.remove(name).target == model.pop(name)
                else:
                    name = pool[rng.integers(len(pool))]
                    if name in model:
                        with pytest.raises(FileExistsError):
                            links.insert(Link(name, link_msg.SOFT, target="/x"))
                        continue
                    model[name] = f"/t/{name}/{step}"
                    links.insert(Link(name, link_msg.SOFT, target=model[name]))
                txn.commit()
            if step % 100 == 0:
                with hf.store.transaction() as txn:
                    links = GroupLinks(txn, address, "g")
                    assert {ln.name: ln.target for ln in links.all()} == model
                    assert all(links.lookup(n).target == model[n] for n in list(model)[:50])
                    assert all(links.lookup(n) is None for n in pool if n not in model)
    assert links_of(p, "g") == model
    verify_file(p, h5dump=False)
    with h5py.File(p, "r+") as f:     # libhdf5 edits the storage h5fs wrote
        g = f["g"]
        for name in sorted(model)[::3]:
            del g[name]
            del model[name]
        for i in range(200):
            model[f"lib_again{i}"] = f"/again/{i}"
            g[f"lib_again{i}"] = h5py.SoftLink(model[f"lib_again{i}"])
    assert links_of(p, "g") == model
    verify_file(p, h5dump=False)


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)


@pytest.mark.parametrize("track", [False, True])
def test_transitions_through_the_mount(tmp_path, mount, track):
    """mkdir and setfattr past the compact limits go dense, rmdir and setfattr -x come back
    below the dense minimum and empty; h5py agrees at every stage."""
    p = tmp_path / "t.h5"
    with new_file(p) as f:
        f.create_group("g", track_order=track)
        f.create_dataset("d", data=np.arange(4), track_order=track)
    mp = mount(p, "rw")
    for i in range(120):
        os.mkdir(mp / "g" / f"sub{i}")
    for i in range(30):
        _run("setfattr", "-n", f"user.a{i}", "-v", f"value {i}", str(mp / "g"))
        _run("setfattr", "-n", f"user.a{i}", "-v", f"{i}", str(mp / "d"))
    _run("setfattr", "-n", "user.a7", "-v", "replaced", str(mp / "g"))
    assert sorted(os.listdir(mp / "g")) == sorted(f"sub{i}" for i in range(120))
    mount.unmount(mp)
    with h5py.File(p, "r") as f:
        names = list(f["g"])
        assert sorted(names) == sorted(f"sub{i}" for i in range(120))
        if track:
            assert names == [f"sub{i}" for i in range(120)]
            assert list(f["g"].attrs) == [f"a{i}" for i in range(30)]
        assert f["g"].attrs["a7"] == "replaced"
        assert f["d"].attrs["a29"] == "29"
    with H5File.open(str(p)) as hf:   # links and attributes went dense
        g = hf.get(group_address(p, "g"), "g")
        assert g.message(M.LINK_INFO).heap_address is not None
        assert g.message(M.ATTRIBUTE_INFO).heap_address is not None
    verify_file(p, h5dump=False)
    mp = mount(p, "rw")
    for i in range(117):
        os.rmdir(mp / "g" / f"sub{i}")
    for i in range(27):
        _run("setfattr", "-x", f"user.a{i}", str(mp / "g"))
    mount.unmount(mp)
    with H5File.open(str(p)) as hf:
        assert hf.get(group_address(p, "g"), "g").message(M.LINK_INFO).heap_address is None   # compact again
    with h5py.File(p, "r") as f:
        assert sorted(f["g"]) == ["sub117", "sub118", "sub119"]
        assert dict(f["g"].attrs) == {"a27": "value 27", "a28": "value 28", "a29": "value 29"}
        assert len(f["d"].attrs) == 30
    verify_file(p, h5dump=False)
    mp = mount(p, "rw")
    for i in range(117, 120):
        os.rmdir(mp / "g" / f"sub{i}")
    for i in range(27, 30):
        _run("setfattr", "-x", f"user.a{i}", str(mp / "g"))
    mount.unmount(mp)
    with H5File.open(str(p)) as hf:
        g = hf.get(group_address(p, "g"), "g")
        assert g.message(M.ATTRIBUTE_INFO) is None      # the last attribute takes the info with it
        if track:
            assert g.message(M.LINK_INFO).max_creation_index == 0
    with h5py.File(p, "r+") as f:        # libhdf5 numbers links from 0 again and goes dense itself
        assert len(f["g"]) == 0 and len(f["g"].attrs) == 0
        for i in range(12):
            f["g"].create_group(f"again{i}")
    verify_file(p, h5dump=False)


def test_shared_dense_attributes_are_edited(tmp_path, mount):
    """Dense attributes whose records point into the shared-message table (lists that became
    B-trees at the third message): setfattr stores the new value unshared, setfattr -x counts the
    table's use down (tests/test_mount_sohm.py compares the table with libhdf5's)."""
    import roundtrip_support as R
    p = tmp_path / "sohm.h5"
    with R.new_file(p, "latest", (8, 8), R.sohm_fcpl(2, 1)) as f:
        g = f.create_group("g")
        for i in range(12):
            g.attrs[f"a{i}"] = np.arange(20) + i
    mp = mount(p, "rw")
    new = list(range(100, 120))
    subprocess.run(["setfattr", "-n", "user.a3", "-v", str(new), str(mp / "g")], check=True, timeout=60)
    subprocess.run(["setfattr", "-x", "user.a4", str(mp / "g")], check=True, timeout=60)
    mount.unmount(mp)
    verify_file(p, h5dump=False)
    with h5py.File(p, "r") as f:
        assert list(f["g"].attrs["a3"]) == new and "a4" not in f["g"].attrs
        assert list(f["g"].attrs["a5"]) == list(np.arange(20) + 5)
