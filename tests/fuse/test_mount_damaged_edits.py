"""Edits through a read-write mount of a file damaged where no checksum tells (old-format B-trees,
layout messages, link counts, a persistent free-space manager's list): the damage must not spread
to healthy objects. Space freed (and sections listed free) wait for the mount's walk; in a file it
finds damaged they stay unused, and the objects concerned answer EIO to edits. After each, h5py
reads every healthy object as it was and `h5fs check` reports only the damage made here."""

from __future__ import annotations

import errno
import os
import re
import struct
import subprocess

import h5py
import numpy as np
import pytest

from conftest import run_h5fs, wait_until
from h5fs.check import check
from h5fs.format.checksum import lookup3
from h5fs.storage.allocator import Allocator


def walked(mount, mp) -> str:
    """The log once the mount's walk said what it found."""
    assert wait_until(lambda: "damaged" in mount.log_of(mp) or "unused space found" in mount.log_of(mp), timeout=30)
    return mount.log_of(mp)


def fill(mp, tmp_path, count: int = 4) -> None:
    """Ordinary edits of healthy objects that allocate space: new datasets and groups."""
    for i in range(count):
        np.save(tmp_path / f"n{i}.npy", np.random.default_rng(i).random((100, 100)))
        subprocess.run(["cp", str(tmp_path / f"n{i}.npy"), str(mp / "g")], check=True)
        os.mkdir(mp / "g" / f"sub{i}")


def unlink_refused(mount, mp, tmp_path, name: str) -> None:
    """The mount's walk finds the file damaged, `rm NAME` is EIO, healthy objects take edits."""
    assert "damaged" in walked(mount, mp)
    with pytest.raises(OSError) as ei:
        os.unlink(mp / name)
    assert ei.value.errno == errno.EIO
    fill(mp, tmp_path)


def problems(path) -> set[str]:
    return {str(p) for p in check(str(path)).problems}


def test_chunk_two_datasets_share(tmp_path, mount):
    """/a's chunk index names /b's chunk (a v1 B-tree has no checksum): a write into /a would
    free the shared chunk and new blocks would overwrite /b."""
    path = tmp_path / "x.h5"
    with h5py.File(path, "w", libver="earliest") as f:
        for n in "ab":
            f.create_dataset(n, data=np.arange(40000, dtype="f4").reshape(200, 200), chunks=(100, 100),
                             compression="gzip")
        f.create_group("g")
    with h5py.File(path, "r") as f:
        b_chunk, a_chunk, b_data = f["b"].id.get_chunk_info(0), f["a"].id.get_chunk_info(0), f["b"][()]
    raw = bytearray(path.read_bytes())
    for m in re.finditer(b"TREE", raw):   # /a's chunk B-tree leaf: key 0's size at +24, child 0 at +56
        t = m.start()
        if raw[t + 4] == 1 and struct.unpack_from("<Q", raw, t + 56)[0] == a_chunk.byte_offset:
            struct.pack_into("<I", raw, t + 24, b_chunk.size)
            struct.pack_into("<Q", raw, t + 56, b_chunk.byte_offset)
    path.write_bytes(raw)
    before = problems(path)
    assert any("overlaps" in p for p in before)
    mp = mount(path, "rw")
    assert "damaged" in walked(mount, mp)
    fd = os.open(mp / "a", os.O_RDWR)
    try:
        with pytest.raises(OSError) as ei:
            os.pwrite(fd, np.full(100 * 100, 5, "f4").tobytes(), 0)
        assert ei.value.errno == errno.EIO
    finally:
        os.close(fd)
    with pytest.raises(OSError) as ei:
        os.setxattr(mp / "a", "user.note", b"x")
    assert ei.value.errno == errno.EIO
    fill(mp, tmp_path)
    run_h5fs("umount", mp, check=True)
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["b"][()], b_data)
        assert all(f[f"g/n{i}"].shape == (100, 100) for i in range(4))
    assert problems(path) == before
    assert "not changed: the file is damaged there" in mount.log_of(mp)


def low_link_count(path, libver: str) -> None:
    """/d with a second hard link /g_link, its header counting one (and a group /g)."""
    with h5py.File(path, "w", libver=libver) as f:
        f.create_dataset("d", data=np.arange(1000, dtype="f8"))
        f["g_link"] = f["d"]
        f.create_group("g")
    with h5py.File(path, "r") as f:
        a = h5py.h5o.get_info(f["d"].id).addr
    raw = bytearray(path.read_bytes())
    if raw[a:a + 4] == b"OHDR":   # the reference count message (0x16), then the checksum
        flags = raw[a + 5]
        q = a + 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
        n = 1 << (flags & 3)
        end = q + n + int.from_bytes(raw[q:q + n], "little")
        m = q + n
        while m + 4 <= end:
            kind, size = raw[m], struct.unpack_from("<H", raw, m + 1)[0]
            m += 4 + (2 if flags & 0x04 else 0)
            if kind == 0x16:
                struct.pack_into("<I", raw, m + 1, 1)
            m += size
        struct.pack_into("<I", raw, end, lookup3(bytes(raw[a:end])))
    else:   # version 1: the count at +4
        struct.pack_into("<I", raw, a + 4, 1)
    path.write_bytes(raw)


@pytest.mark.parametrize("libver", ("earliest", "latest"))
def test_removed_link_count_too_low(tmp_path, mount, libver):
    """Two links lead to /d, its header counts one: removing one link would free /d."""
    path = tmp_path / "x.h5"
    low_link_count(path, libver)
    before = problems(path)
    assert any("reference count" in p for p in before)
    mp = mount(path, "rw")
    unlink_refused(mount, mp, tmp_path, "g_link")
    assert np.array_equal(np.load(mp / "d.npy"), np.arange(1000.0))
    run_h5fs("umount", mp, check=True)
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["d"][()], np.arange(1000.0)) and np.array_equal(f["g_link"][()], np.arange(1000.0))
    assert problems(path) == before


def test_contiguous_data_two_datasets_share(tmp_path, mount):
    """/a's layout message points at /b's data: `rm /a` would free it."""
    path = tmp_path / "x.h5"
    _, b_data = shared_contiguous(path)
    mp = mount(path, "rw")
    unlink_refused(mount, mp, tmp_path, "a")
    run_h5fs("umount", mp, check=True)
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["b"][()], b_data) and "a" in f


def test_free_section_over_live_data(tmp_path, mount):
    """A persistent free-space manager lists /a's data as free (its list's checksum valid): the
    mount must not put new data there; its managers stop listing it."""
    path = tmp_path / "x.h5"
    with h5py.File(path, "w", libver="latest", fs_strategy="fsm", fs_persist=True) as f:
        f.create_dataset("a", data=np.arange(10000, dtype="f8"))
        f.create_dataset("c", data=np.arange(10000, dtype="f8"))
        f.create_dataset("b", data=np.arange(10000, dtype="f8") * 3)
        f.create_group("g")
    with h5py.File(path, "r") as f:
        a_at, c_at = f["a"].id.get_offset(), f["c"].id.get_offset()
    with h5py.File(path, "a") as f:
        del f["c"]   # its space: a section of the raw data manager
    raw = bytearray(path.read_bytes())
    patched = False
    for m in re.finditer(b"FSSE", raw):
        s = m.start()
        i = raw.find(c_at.to_bytes(3, "little"), s + 13, s + 40)
        if i < 0:
            continue
        raw[i:i + 3] = a_at.to_bytes(3, "little")
        for e in range(i + 3, i + 40):   # the list's checksum: the 4 bytes that sealed the old one
            old = bytes(raw[s:i]) + c_at.to_bytes(3, "little") + bytes(raw[i + 3:e])
            if struct.unpack_from("<I", raw, e)[0] == lookup3(old):
                struct.pack_into("<I", raw, e, lookup3(bytes(raw[s:e])))
                patched = True
                break
    assert patched
    path.write_bytes(raw)
    assert any("is listed free but /a" in p for p in problems(path))
    mp = mount(path, "rw")
    fill(mp, tmp_path)
    assert "damaged" in walked(mount, mp)
    run_h5fs("umount", mp, check=True)
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["a"][()], np.arange(10000.0)) and np.array_equal(f["b"][()], np.arange(10000.0) * 3)
    report = check(str(path))
    assert report.sound, report.problems   # the managers no longer list it


def test_held_space_waits_for_trust():
    """Space freed while held is not reused, nor are the sections the pools held; `release_held` makes
    both reusable (the lowest fit again) but what the walk found in use that the free does not
    explain: a use by another object, or by the freeing object once its edit had begun."""
    alloc = Allocator(1 << 20)
    alloc.load(0, [(4096, 4096)])
    alloc.hold_frees()
    seen_before = alloc.clock
    alloc.snapshot()   # a transaction changing object 500 frees 16 KiB
    alloc.free(65536, 16384)
    alloc.release(frozenset({500}))
    seen_after = alloc.clock
    assert alloc.held_bytes() == 20480
    assert alloc.allocate(4096) == 1 << 20   # the end of the file, not a held extent
    used = [(65536, 4096, seen_before, 500),    # 500's own, seen before its edit: freed with it
            (69632, 4096, seen_after, 500),     # 500 still uses it after the edit: kept
            (73728, 4096, seen_before, 600),    # another object uses it: kept
            (77824, 4096, seen_after, None)]    # a file structure uses it: kept
    assert alloc.release_held(used) == 3 * 4096
    assert alloc.held_bytes() == 0
    assert alloc.allocate(4096) == 4096 and alloc.allocate(4096) == 65536
    assert alloc.allocate(4096) == (1 << 20) + 4096


def shared_contiguous(path) -> tuple[int, np.ndarray]:
    """/a's layout message names /b's data; returns /b's address and data."""
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("a", data=np.arange(20000, dtype="f8"))
        f.create_dataset("b", data=np.arange(20000, dtype="f8") * 2)
        f.create_group("g")
    with h5py.File(path, "r") as f:
        a_at, b_at = f["a"].id.get_offset(), f["b"].id.get_offset()
    raw = bytearray(path.read_bytes())
    struct.pack_into("<Q", raw, raw.find(struct.pack("<QQ", a_at, 160000)), b_at)
    path.write_bytes(raw)
    return b_at, np.arange(20000, dtype="f8") * 2


def test_an_edit_before_the_walk_took_the_evidence(tmp_path):
    """`rm /a` before the walk (as on a mount whose walk is still under way) frees the data /b
    uses, and the walk then finds nothing wrong: the freed extent stays held all the same, as
    every extent the walk finds in use."""
    from h5fs.model.file import H5File
    from h5fs.model.free_space import find_free_space, hold_freed_space
    from h5fs.model.tree_edit import TreeEditor
    from h5fs.model.writeback import Writeback
    path = tmp_path / "x.h5"
    b_at, b_data = shared_contiguous(path)
    f = H5File.open(str(path), writable=True, lock=True)
    wb = Writeback(f, 1 << 20)
    try:
        hold_freed_space(f)
        editor = TreeEditor(f, wb)
        editor.unlink(f.root, "a")
        editor.land()   # (a removal from a symbol table frees at the group commit)
        assert f.store.allocator.held_bytes() >= 160000
        assert find_free_space(f) is not None
        assert f.store.allocator.held is None and not f.store.damaged   # sound, as far as it can tell
        for _ in range(8):   # nothing handed out overlaps /b's data
            at = f.store.allocator.allocate(40000, raw=True)
            assert at + 40000 <= b_at or at >= b_at + 160000
    finally:
        wb.close()
        f.close()
    with h5py.File(path, "r") as h:
        assert np.array_equal(h["b"][()], b_data) and "a" not in h


@pytest.mark.parametrize("libver", ("earliest", "latest"))
def test_two_attributes_name_one_heap_object(tmp_path, mount, libver):
    """/g's string attribute a names the global heap object of attribute b (a heap ID has no
    checksum): check says so, and replacing or removing a (which frees its object) is EIO."""
    path = tmp_path / "x.h5"
    with h5py.File(path, "w", libver=libver) as f:
        f.create_group("g").attrs.update({"a": "AAAA-first-string", "b": "BBBB-second-string"})
        f.create_group("h")
    raw = bytearray(path.read_bytes())
    heap = raw.find(b"GCOL")
    index = {name: struct.unpack_from("<H", raw, raw.find(text) - 16)[0]
             for name, text in (("a", b"AAAA-first"), ("b", b"BBBB-second"))}
    at = raw.find(struct.pack("<IQI", len("AAAA-first-string"), heap, index["a"]))
    struct.pack_into("<IQI", raw, at, len("BBBB-second-string"), heap, index["b"])
    if libver == "latest":   # the attribute lives in a checksummed header: sealed again
        oh = raw.rfind(b"OHDR", 0, at)
        flags = raw[oh + 5]
        q = oh + 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
        n = 1 << (flags & 3)
        end = q + n + int.from_bytes(raw[q:q + n], "little")
        struct.pack_into("<I", raw, end, lookup3(bytes(raw[oh:end])))
    path.write_bytes(raw)
    before = problems(path)
    assert any("names too" in p for p in before), before
    mp = mount(path, "rw")
    assert "damaged" in walked(mount, mp)
    for edit in (lambda: os.setxattr(mp / "g", "user.a", b"new"), lambda: os.removexattr(mp / "g", "user.a")):
        with pytest.raises(OSError) as ei:
            edit()
        assert ei.value.errno == errno.EIO
    os.setxattr(mp / "h", "user.c", b"a healthy object takes edits")
    run_h5fs("umount", mp, check=True)
    with h5py.File(path, "r") as f:
        assert f["g"].attrs["b"] == "BBBB-second-string" and f["h"].attrs["c"] == "a healthy object takes edits"
    assert problems(path) == before


@pytest.mark.parametrize("libver", ("earliest", "latest"))
def test_a_link_removed_before_the_walk(tmp_path, libver):
    """`rm g_link` of an object whose header counts one link while two lead to it frees its
    header and data before the walk; the walk then finds the counts agreeing: the object's
    extents, met after that edit began, stay held."""
    from h5fs.model.file import H5File
    from h5fs.model.free_space import find_free_space, hold_freed_space
    from h5fs.model.tree_edit import TreeEditor
    from h5fs.model.writeback import Writeback
    path = tmp_path / "x.h5"
    low_link_count(path, libver)
    f = H5File.open(str(path), writable=True, lock=True)
    wb = Writeback(f, 1 << 20)
    try:
        hold_freed_space(f)
        TreeEditor(f, wb).unlink(f.root, "g_link")
        assert find_free_space(f) is not None and not f.store.damaged
        for _ in range(8):
            TreeEditor(f, wb).mkdir(f.root, f"new{_}")
    finally:
        wb.close()
        f.close()
    with h5py.File(path, "r") as h:
        assert np.array_equal(h["d"][()], np.arange(1000.0))


def test_heap_free_list_over_names(tmp_path, mount):
    """An old-style group's local heap (no checksum) lists bytes holding link names as free: the
    first edit of the group in a mount, even one made before the walk, refuses it (a new name
    would overwrite two others) and leaves the group as it was."""
    path = tmp_path / "x.h5"
    with h5py.File(path, "w", libver="earliest") as f:
        for i in range(20):
            f.create_group(f"big/g{i:03d}")
        f.create_group("ok")
        address = h5py.h5o.get_info(f["big"].id).addr
    raw = bytearray(path.read_bytes())
    q = address + 16   # a v1 header's first message: the symbol table (0x11)
    assert struct.unpack_from("<H", raw, q)[0] == 0x11
    heap = struct.unpack_from("<QQ", raw, q + 8)[1]
    size, _, segment = struct.unpack_from("<QQQ", raw, heap + 8)
    at = raw.find(b"g010\0", segment, segment + size) - segment
    struct.pack_into("<QQ", raw, segment + at, 1, 64)   # a free block of 64 bytes over g010..g017
    struct.pack_into("<Q", raw, heap + 16, at)
    path.write_bytes(raw)

    def found() -> list[str]:
        with h5py.File(path, "r") as f:
            return [n for n in (f"g{i:03d}" for i in range(20)) if f["big"].get(n) is not None]
    before = found()
    mp = mount(path, "rw")
    with pytest.raises(OSError) as ei:   # at once: the walk has not looked yet
        os.mkdir(mp / "big" / ("n" * 40))
    assert ei.value.errno == errno.EIO
    os.mkdir(mp / "ok" / "sub")
    run_h5fs("umount", mp, check=True)
    assert found() == before
    assert "covers a link name" in mount.log_of(mp)
