"""Chunk indexes (single, implicit, fixed array, extensible array, v2 B-tree) against files libhdf5
wrote, with h5py's chunk queries as the oracle."""

from __future__ import annotations

import os
import random
import shutil

import h5py
import numpy as np
import pytest

from h5fs.errors import ChecksumError
from h5fs.format.messages import layout as L
from h5fs.model.file import H5File
from h5fs.storage.index import IndexContext
from h5fs.storage.index.btree_v2 import BTreeV2Index
from h5fs.storage.index.extensible_array import ExtensibleArrayIndex
from h5fs.storage.index.fixed_array import FixedArrayIndex
from h5fs.storage.index.implicit import ImplicitIndex
from h5fs.storage.index.single import SingleChunkIndex
import roundtrip_support as R

KINDS = {L.SINGLE: SingleChunkIndex, L.IMPLICIT: ImplicitIndex, L.FIXED_ARRAY: FixedArrayIndex,
         L.EXTENSIBLE_ARRAY: ExtensibleArrayIndex, L.BTREE_V2: BTreeV2Index}


def object_address(path, name):
    with h5py.File(path, "r") as f:
        return h5py.h5o.get_info(f[name].id).addr


def open_index(path, name, addr=None):
    """(H5File, layout, index) for dataset `name`, located by the address h5py reports."""
    if addr is None:
        addr = object_address(path, name)
    hf = H5File.open(str(path))
    ds = hf.get(addr, "/" + name)
    lay, space = ds.layout, ds.dataspace
    ctx = IndexContext(hf.reader, lay, space.dims, space.maxdims, bool(ds.filters), "/" + name)
    return hf, lay, KINDS[lay.index.index_type](ctx)


def grid_of(shape, chunks):
    return tuple(-(-s // c) for s, c in zip(shape, chunks))


def all_coords(extents):
    return [tuple(int(x) for x in c) for c in np.ndindex(*extents)] if all(extents) else []


def oracle(path, name, coords_to_check=None):
    """h5py's view: {scaled coords: (address, size, mask)} by iteration and by coordinate."""
    with h5py.File(path, "r") as f:
        ds = f[name]
        chunks, shape = ds.chunks, ds.shape
        by_iter = {}
        for i in range(ds.id.get_num_chunks()):
            info = ds.id.get_chunk_info(i)
            sc = tuple(o // c for o, c in zip(info.chunk_offset, chunks))
            by_iter[sc] = (info.byte_offset, info.size, info.filter_mask)
        by_coord = {}
        coords = coords_to_check if coords_to_check is not None else all_coords(grid_of(shape, chunks))
        for sc in coords:
            info = ds.id.get_chunk_info_by_coord(tuple(s * c for s, c in zip(sc, chunks)))
            by_coord[sc] = None if info.byte_offset is None else (info.byte_offset, info.size, info.filter_mask)
    return by_iter, by_coord


def check(path, name, expect_type, iter_matches=True, coords=None):
    hf, lay, idx = open_index(path, name)
    try:
        assert lay.index.index_type == expect_type, (lay.index.index_type, expect_type)
        by_iter, by_coord = oracle(path, name, coords)
        for sc, want in by_coord.items():
            rec = idx.lookup(sc)
            got = None if rec is None else (rec.address, rec.size, rec.filter_mask)
            assert got == want, (name, sc, got, want)
            if rec is not None:
                assert rec.coords == sc
        check_lookup_many(idx, list(by_coord))
        recs = {r.coords: (r.address, r.size, r.filter_mask) for r in idx.records()}
        assert len(recs) == len(list(idx.records()))
        allocated = {k: v for k, v in by_coord.items() if v is not None}
        if coords is None:
            assert recs == allocated
        else:
            assert {k: v for k, v in recs.items() if k in by_coord} == allocated
        if iter_matches:
            assert recs == by_iter
        else:
            assert sorted(recs.values()) == sorted(by_iter.values())
        return hf, lay, idx, recs
    finally:
        hf.close()


def check_lookup_many(idx, coords, seed=0):
    """`lookup_many` answers as `lookup` does one by one: in row-major order, reversed, shuffled,
    in rows of chunks, and for coordinates outside the grid."""
    rng = random.Random(seed)
    ordered = sorted(coords)
    shuffled = ordered[:]
    rng.shuffle(shuffled)
    outside = [tuple(c + 1000 for c in ordered[-1])] if ordered else []
    rows = {}
    for c in ordered:
        rows.setdefault(c[0], []).append(c)
    for batch in [ordered, ordered[::-1], shuffled, ordered + outside + ordered[:3], *rows.values()]:
        assert idx.lookup_many(batch) == [idx.lookup(c) for c in batch]


def check_direct(path, name, expect_type):
    """Oracle by H5Dread_chunk (the lookup path libhdf5 reads and writes with): for every chunk of
    the current grid, the stored bytes at our address equal what libhdf5 returns, and chunks it
    cannot read are the ones we do not find."""
    hf, lay, idx = open_index(path, name)
    try:
        assert lay.index.index_type == expect_type
        found = {}
        with h5py.File(path, "r") as f:
            ds = f[name]
            for sc in all_coords(grid_of(ds.shape, ds.chunks)):
                rec = idx.lookup(sc)
                try:
                    mask, want = ds.id.read_direct_chunk(tuple(s * c for s, c in zip(sc, ds.chunks)))
                except Exception:
                    assert rec is None, sc
                    continue
                assert rec is not None, sc
                assert rec.filter_mask == mask and rec.size == len(want)
                assert os.pread(hf.fd, rec.size, rec.address) == want, sc
                found[sc] = (rec.address, rec.size, rec.filter_mask)
        recs = {r.coords: (r.address, r.size, r.filter_mask) for r in idx.records()}
        assert recs == found
        return recs
    finally:
        hf.close()


def data(shape, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 50, size=shape).astype("i4")   # compressible, but not constant


def make(path, fn, libver="latest"):
    with h5py.File(path, "w", libver=libver) as f:
        fn(f)
    return path


# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_single_chunk(tmp_path, compression):
    p = make(tmp_path / "s.h5", lambda f: f.create_dataset("d", data=data((20, 30)), chunks=(20, 30),
                                                              compression=compression))
    _, lay, _, recs = check(p, "d", L.SINGLE)
    assert len(recs) == 1
    assert bool(lay.flags & L.SINGLE_INDEX_WITH_FILTER) == (compression is not None)


def test_single_chunk_unallocated(tmp_path):
    p = make(tmp_path / "s.h5", lambda f: f.create_dataset("d", (20, 30), "f8", chunks=(20, 30)))
    _, lay, idx, recs = check(p, "d", L.SINGLE)
    assert recs == {} and lay.index.address is None


def _implicit(f, name, shape, maxshape, chunks, write=True):
    space = h5py.h5s.create_simple(shape, maxshape)
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk(chunks)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    h5py.h5d.create(f.id, name.encode(), h5py.h5t.NATIVE_INT32, space, dcpl=dcpl)
    if write:
        f[name][...] = data(shape)


def test_implicit(tmp_path):
    def fn(f):
        _implicit(f, "a", (10, 11), (10, 11), (3, 4))
        _implicit(f, "b", (10, 11), (25, 30), (3, 4))      # current extent smaller than the maximum
        _implicit(f, "c", (7, 5, 9), (7, 5, 9), (2, 5, 4), write=False)
    p = make(tmp_path / "i.h5", fn)
    for name in "abc":
        check(p, name, L.IMPLICIT)
    # the chunks are laid out over the maximum grid: (0, 1) of "b" follows (0, 0) directly
    hf, _, idx = open_index(p, "b")
    with hf:
        assert idx.lookup((0, 1)).address - idx.lookup((0, 0)).address == 3 * 4 * 4
        assert idx.lookup((1, 0)).address - idx.lookup((0, 0)).address == 8 * 3 * 4 * 4
        assert idx.lookup((9, 0)) is None


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_fixed_array(tmp_path, compression):
    def fn(f):
        f.create_dataset("full", data=data((95, 101)), chunks=(10, 10), compression=compression)
        d = f.create_dataset("sparse", (95, 101), "i4", chunks=(10, 10), maxshape=(200, 150),
                             compression=compression)
        d[0:5, 0:5] = 1
        d[50:61, 90:101] = 2
        d[94, 100] = 3
        r = f.create_dataset("resized", data=data((30, 40)), chunks=(7, 9), maxshape=(70, 90),
                             compression=compression)
        r.resize((60, 85))
        r[55:60, 80:85] = 4
        f.create_dataset("empty", (30, 40), "i4", chunks=(7, 9), compression=compression)
    p = make(tmp_path / "fa.h5", fn)
    for name in ("full", "sparse", "resized", "empty"):
        check(p, name, L.FIXED_ARRAY)


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_fixed_array_paged(tmp_path, compression):
    """More chunks than a page (2**10) holds: a paged data block, some pages never written."""
    def fn(f):
        d = f.create_dataset("p", (5001,), "i2", chunks=(2,), compression=compression)
        d[0:100] = 7
        d[4200:5001] = np.arange(801)
        f.create_dataset("full", data=data((64, 70)), chunks=(2, 2), compression=compression)
    p = make(tmp_path / "fap.h5", fn)
    _, _, idx, recs = check(p, "p", L.FIXED_ARRAY)
    assert idx.array.paged and idx.array.npages == 3
    assert [idx.array.page_initialized(i) for i in range(3)] == [True, False, True]
    _, _, idx, _ = check(p, "full", L.FIXED_ARRAY)
    assert idx.array.paged


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_extensible_array(tmp_path, compression):
    def fn(f):
        # unlimited first dimension, enough chunks (> 244) for super blocks
        d = f.create_dataset("rows", data=data((600, 7)), chunks=(2, 7), maxshape=(None, 7), compression=compression)
        d.resize((650, 7))
        d[640:650] = 5
        # unlimited dimension in the middle and last, partial edge chunks, sparse writes
        m = f.create_dataset("mid", (5, 40, 6), "i4", chunks=(2, 3, 4), maxshape=(9, None, 6), compression=compression)
        m[:, :20, :] = data((5, 20, 6))
        m[4, 39, 5] = 9
        last = f.create_dataset("last", data=data((10, 33)), chunks=(4, 5), maxshape=(10, None), compression=compression)
        last.resize((10, 80))
        last[:, 70:] = 1
        f.create_dataset("empty", (3, 4), "i4", chunks=(1, 1), maxshape=(3, None), compression=compression)
        f.create_dataset("oned", data=np.arange(1000, dtype="i8"), chunks=(3,), maxshape=(None,), compression=compression)
    p = make(tmp_path / "ea.h5", fn)
    check(p, "rows", L.EXTENSIBLE_ARRAY)
    check(p, "oned", L.EXTENSIBLE_ARRAY)
    check(p, "empty", L.EXTENSIBLE_ARRAY)
    check_direct(p, "rows", L.EXTENSIBLE_ARRAY)
    # libhdf5's chunk iteration (H5D__earray_idx_iterate_cb) walks the slots unswizzled, and
    # H5Dget_chunk_info(_by_coord) are built on it: when the unlimited dimension is not the
    # first, both report wrong chunks. H5Dread_chunk uses the real lookup: it is the oracle here.
    for name in ("mid", "last"):
        recs = check_direct(p, name, L.EXTENSIBLE_ARRAY)
        by_iter, by_coord = oracle(p, name)
        assert sorted(recs.values()) == sorted(by_iter.values())   # same chunks, other coordinates
        assert recs != by_iter
    # the data read through the index matches h5py (chunk bytes of an unfiltered dataset)
    if compression is None:
        hf, _, idx = open_index(p, "mid")
        with hf, h5py.File(p, "r") as f:
            want = f["mid"][0:2, 3:6, 0:4]
            rec = idx.lookup((0, 1, 0))
            raw = os.pread(hf.fd, rec.size, rec.address)
            assert np.array_equal(np.frombuffer(raw, "<i4").reshape(2, 3, 4), want)


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_extensible_array_pages(tmp_path, compression):
    """Sparse writes far out: super blocks whose data blocks are paged (> 131060 slots)."""
    positions = [0, 3, 5, 250, 131055, 131056, 131057, 131060, 131061, 140000, 160000, 199999]

    def fn(f):
        d = f.create_dataset("d", (200000,), "u1", chunks=(1,), maxshape=(None,), compression=compression)
        for i in positions:
            d[i] = 1 + i % 200
    p = make(tmp_path / "eap.h5", fn)
    rng = random.Random(1)
    sample = set((i,) for i in positions) | set((rng.randrange(200000),) for _ in range(20))
    sample |= {(i + k,) for i in positions for k in (-1, 1) if 0 <= i + k < 200000}
    hf, _, idx, recs = check(p, "d", L.EXTENSIBLE_ARRAY, coords=sorted(sample))
    assert set(recs) == {(i,) for i in positions}
    paged = [info for info in idx.array.sblk_info if info.dblk_nelmts > idx.array.page_nelmts]
    assert paged


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_btree_v2(tmp_path, compression):
    def fn(f):
        d = f.create_dataset("small", data=data((20, 25)), chunks=(3, 4), maxshape=(None, None), compression=compression)
        d.resize((30, 27))
        d[29, 26] = 1
        big = f.create_dataset("big", (120, 90), "i4", chunks=(1, 1), maxshape=(None, None), compression=compression)
        big[...] = data((120, 90))       # 10800 chunks: a tree of depth 2
        s = f.create_dataset("sparse3", (10, 20, 30), "i4", chunks=(2, 3, 4), maxshape=(None, 20, None),
                             compression=compression)
        s[1, 2, 3] = 1
        s[9, 19, 29] = 2
        s[5, :, 10:20] = 3
        f.create_dataset("empty", (5, 5), "i4", chunks=(2, 2), maxshape=(None, None), compression=compression)
    p = make(tmp_path / "bt.h5", fn)
    check(p, "small", L.BTREE_V2)
    check(p, "sparse3", L.BTREE_V2)
    check(p, "empty", L.BTREE_V2)
    rng = random.Random(2)
    sample = [(rng.randrange(125), rng.randrange(95)) for _ in range(60)]
    sample = sorted(set(sample) | {(0, 0), (119, 89), (119, 0), (0, 89)})
    sample = [c for c in sample if c[0] < 120 and c[1] < 90]
    hf, _, idx, recs = check(p, "big", L.BTREE_V2, coords=sample)
    assert len(recs) == 120 * 90
    assert idx.header.depth == 2


def test_btree_v1_lookup_many(tmp_path):
    """Version 1 B-trees of several levels, with chunks missing between the ones stored."""
    def fn(f):
        big = f.create_dataset("big", (120, 90), "i4", chunks=(1, 1))
        big[::2, :] = data((60, 90))
        big[1::6, 1::5] = 3
        f.create_dataset("cube", data=data((9, 10, 11)), chunks=(2, 3, 4))
        f.create_dataset("empty", (5, 5), "i4", chunks=(2, 2))
    p = make(tmp_path / "v1.h5", fn, libver="earliest")
    for name, shape, chunks in (("big", (120, 90), (1, 1)), ("cube", (9, 10, 11), (2, 3, 4)), ("empty", (5, 5), (2, 2))):
        with H5File.open(str(p)) as hf:
            idx = hf.resolve("/" + name).source.index
            assert type(idx).__name__ == "BTreeV1Index"
            check_lookup_many(idx, all_coords(grid_of(shape, chunks)))
            assert idx.allocated_bytes() == sum(r.size for r in idx.records())


def test_earliest_uses_btree_v1(tmp_path):
    def fn(f):
        f.create_dataset("a", data=data((20, 20)), chunks=(5, 5))
        f.create_dataset("b", data=data((20, 20)), chunks=(5, 5), maxshape=(None, None))
        f.create_dataset("c", data=data((20, 20)), chunks=(20, 20))
    p = make(tmp_path / "e.h5", fn, libver="earliest")
    with h5py.File(p, "r") as f:
        addrs = {n: h5py.h5o.get_info(f[n].id).addr for n in "abc"}
    with H5File.open(str(p)) as hf:
        for n, a in addrs.items():
            lay = hf.get(a, "/" + n).layout
            assert lay.version == 3 and lay.index.index_type == L.BTREE_V1


@pytest.mark.parametrize("libver,version", [("v114", 4), ("latest", 5)])
def test_layout_versions_and_width(tmp_path, libver, version):
    """libhdf5 2.0 writes layout v5, whose filtered chunk sizes are `size of lengths` wide; with
    libver v114 it writes v4 and one byte more than the chunk size needs."""
    from h5fs.format.btree_v2 import chunk_size_width

    def fn(f):
        v = data((40, 40))
        f.create_dataset("fa", data=v, chunks=(10, 10), compression="gzip")
        f.create_dataset("ea", data=v, chunks=(10, 10), compression="gzip", maxshape=(None, 40))
        f.create_dataset("bt", data=v, chunks=(10, 10), compression="gzip", maxshape=(None, None))
        f.create_dataset("single", data=v, chunks=(40, 40), compression="gzip")
    p = make(tmp_path / "w.h5", fn, libver=libver)
    kinds = {"fa": L.FIXED_ARRAY, "ea": L.EXTENSIBLE_ARRAY, "bt": L.BTREE_V2, "single": L.SINGLE}
    for name, kind in kinds.items():
        hf, lay, idx, _ = check(p, name, kind)
        assert lay.version == version and lay.wide_chunk_sizes == (version == 5)
        want = chunk_size_width(10 * 10 * 4, hf.sizes, lay.wide_chunk_sizes)
        if name in ("fa", "ea"):
            assert idx.array.header.element_size - hf.sizes.offset - 4 == want
        elif name == "bt":
            assert idx.header.record_size - hf.sizes.offset - 4 - 16 == want


# -- corruption ---------------------------------------------------------------------------------


def _corrupt_copy(src, dst, addr, delta=1):
    shutil.copy(src, dst)
    with open(dst, "r+b") as fh:
        fh.seek(addr)
        b = fh.read(1)
        fh.seek(addr)
        fh.write(bytes([(b[0] + delta) & 0xFF]))


def test_fixed_array_checksums(tmp_path):
    p = make(tmp_path / "c.h5", lambda f: f.create_dataset("d", data=data((40, 40)), chunks=(10, 10)))
    addr = object_address(p, "d")
    hf, _, idx = open_index(p, "d")
    with hf:
        hdr_addr = idx.array.header.address
        db_addr = idx.array.header.dblock_address
    _corrupt_copy(p, tmp_path / "c1.h5", hdr_addr + 10)
    with pytest.raises(ChecksumError):
        open_index(tmp_path / "c1.h5", "d", addr)
    _corrupt_copy(p, tmp_path / "c2.h5", db_addr + 20)
    hf, _, idx = open_index(tmp_path / "c2.h5", "d", addr)
    with hf, pytest.raises(ChecksumError):
        idx.lookup((0, 0))


def test_extensible_array_checksums(tmp_path):
    p = make(tmp_path / "c.h5", lambda f: f.create_dataset("d", data=data((300, 3)), chunks=(1, 3), maxshape=(None, 3)))
    addr = object_address(p, "d")
    hf, _, idx = open_index(p, "d")
    with hf:
        ib = idx.array.header.iblock_address
        _, _, sblks = idx.array.index_block()
        sb = sblks[0]
    _corrupt_copy(p, tmp_path / "c1.h5", ib + 12)
    hf, _, idx = open_index(tmp_path / "c1.h5", "d", addr)
    with hf, pytest.raises(ChecksumError):
        idx.lookup((0, 0))
    _corrupt_copy(p, tmp_path / "c2.h5", sb + 14)
    hf, _, idx = open_index(tmp_path / "c2.h5", "d", addr)
    with hf:
        assert idx.lookup((1, 0)) is not None          # index-block elements still fine
        with pytest.raises(ChecksumError):
            list(idx.records())


@pytest.mark.parametrize("sizes", [(4, 4), (4, 8), (8, 4), (2, 2)])
def test_small_offsets_and_lengths(tmp_path, sizes):
    """Size of offsets / lengths other than 8: every index type, filtered and not."""
    p = tmp_path / "s.h5"
    n = 12 if sizes == (2, 2) else 40
    # libhdf5 2.0 cannot reopen its own unlimited dataspaces when `size of lengths` is not 8
    # ("didn't find unlimited dimension"), so the unlimited index types need 8-byte lengths
    unlimited = sizes[1] == 8
    with R.new_file(p, "latest", sizes) as f:
        for comp in (None, "gzip"):
            v = data((n, n))
            f.create_dataset(f"fa{comp}", data=v, chunks=(3, 4), compression=comp)
            f.create_dataset(f"single{comp}", data=v, chunks=(n, n), compression=comp)
            if unlimited:
                e = f.create_dataset(f"ea{comp}", data=v, chunks=(3, 4), compression=comp, maxshape=(None, n))
                e.resize((n + 5, n))
                f.create_dataset(f"bt{comp}", data=v, chunks=(3, 4), compression=comp, maxshape=(None, None))
    kinds = {"fa": L.FIXED_ARRAY, "single": L.SINGLE}
    if unlimited:
        kinds.update({"ea": L.EXTENSIBLE_ARRAY, "bt": L.BTREE_V2})
    for comp in (None, "gzip"):
        for name, kind in kinds.items():
            hf, lay, idx, recs = check(p, f"{name}{comp}", kind)
            assert hf.sizes.offset == sizes[0] and hf.sizes.length == sizes[1]
