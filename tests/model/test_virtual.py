"""Virtual datasets against h5py (libhdf5 reads every VDS here, h5py wrote it in tmp_path)."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from h5fs.errors import FormatError, Unsupported
from h5fs.format import vds_mapping
from h5fs.model.file import H5File
from h5fs.model.virtual import virtual_extent, virtual_facts
from h5fs.model.virtual_files import POOL, substitute

LIBVERS = ("earliest", "latest")
U = h5py.h5s.UNLIMITED


def _h5py(p, name):
    with h5py.File(p, "r") as f:
        return f[name][...]


def _check(p, name, *, shape=None, steps=(1, 3, None, None, 4096 + 5)):
    """Every element equals h5py's, whole and in pieces at odd offsets."""
    expected = _h5py(p, name)
    exp = expected.tobytes()
    with H5File.open(str(p)) as f:
        ds = f.resolve("/" + name)
        src = ds.source
        assert src.shape == expected.shape
        if shape is not None:
            assert expected.shape == shape
        assert virtual_extent(ds) == expected.shape
        assert src.size == len(exp)
        assert src.read(0, len(exp)) == exp
        assert src.allocated() == 0
        isz = expected.dtype.itemsize
        for step in steps:
            step = step or isz + 1
            got = b"".join(src.read(o, step) for o in range(0, len(exp), step))
            assert got == exp, step
        for off in sorted({0, 1, isz - 1, isz + 3, len(exp) // 2 + 1, max(0, len(exp) - 5)}):
            for n in (1, 2, isz * 3 + 1, 999):
                assert src.read(off, n) == exp[off:off + n], (off, n)
        assert src.read(len(exp), 4) == b""
        if ds.dataspace.dims == expected.shape:
            assert ds.read_raw(0, len(exp)) == exp
    return expected


def _sources(tmp_path, n=3, shape=(10,), dtype="<i4", name="data"):
    paths = []
    for i in range(n):
        p = tmp_path / f"src{i}.h5"
        with h5py.File(p, "w") as f:
            f[name] = (np.arange(np.prod(shape)).reshape(shape) + 1000 * (i + 1)).astype(dtype)
        paths.append(p)
    return paths


@pytest.mark.parametrize("libver", LIBVERS)
def test_several_source_files_relative_names(tmp_path, libver):
    _sources(tmp_path, 3)
    lay = h5py.VirtualLayout((4, 10), "<i4")
    for i in range(3):
        lay[i] = h5py.VirtualSource(f"src{i}.h5", "data", shape=(10,))
    p = tmp_path / "vds.h5"
    with h5py.File(p, "w", libver=libver) as f:
        f.create_virtual_dataset("v", lay, fillvalue=-7)
    arr = _check(p, "v")
    assert (arr[3] == -7).all() and arr[1, 2] == 2002
    with H5File.open(str(p)) as f:
        facts = virtual_facts(f.resolve("/v"))
    assert facts["virtual_sources"].startswith("src0.h5:data[all] -> [0, 0:10]; src1.h5:data[all] -> [1, 0:10]")
    assert facts["virtual_mappings"] == "3"


@pytest.mark.parametrize("libver", LIBVERS)
def test_same_file_source_strided(tmp_path, libver):
    p = tmp_path / "vds.h5"
    with h5py.File(p, "w", libver=libver) as f:
        f["s"] = np.arange(40, dtype="<f8") * 0.5
        f.create_dataset("c", data=np.arange(60, dtype="<f8").reshape(6, 10), chunks=(4, 3))
        lay = h5py.VirtualLayout((3, 10), "<f8")
        lay[0] = h5py.VirtualSource(".", "s", shape=(40,))[0:20:2]
        lay[1] = h5py.VirtualSource(".", "s", shape=(40,))[1::4]
        lay[2, 1::3] = h5py.VirtualSource(".", "c", shape=(6, 10))[::2, 7]
        f.create_virtual_dataset("w", lay, fillvalue=3.25)
    arr = _check(p, "w")
    assert arr[2, 0] == 3.25 and arr[2, 4] == 27
    with H5File.open(str(p)) as f:
        block = f.resolve("/w")
        data = f.global_heap.get(block.layout.vds_heap_address, block.layout.vds_heap_index)
        mb = vds_mapping.decode(data, f.sizes)
        assert [e.source_file for e in mb.entries] == [".", ".", "."]
        assert mb.version == (1 if libver == "latest" else 0)


@pytest.mark.parametrize("libver", LIBVERS)
def test_2d_tiles_and_chunked_sources(tmp_path, libver):
    tiles = {}
    for r in range(2):
        for c in range(3):
            p = tmp_path / f"tile_{r}_{c}.h5"
            data = (np.arange(35, dtype="<u2").reshape(5, 7) + 100 * (3 * r + c)).astype("<u2")
            with h5py.File(p, "w", libver=libver) as f:
                if (r + c) % 2:
                    f.create_dataset("t", data=data, chunks=(2, 3), compression="gzip")
                else:
                    f["t"] = data
            tiles[r, c] = data
    lay = h5py.VirtualLayout((10, 21), "<u2")
    for (r, c) in tiles:
        lay[5 * r:5 * r + 5, 7 * c:7 * c + 7] = h5py.VirtualSource(f"tile_{r}_{c}.h5", "t", shape=(5, 7))
    p = tmp_path / "mosaic.h5"
    with h5py.File(p, "w", libver=libver) as f:
        f.create_virtual_dataset("m", lay)
    arr = _check(p, "m")
    assert np.array_equal(arr[5:10, 14:21], tiles[1, 2])


@pytest.mark.parametrize("libver", LIBVERS)
def test_missing_source_file_and_dataset_read_fill(tmp_path, libver):
    _sources(tmp_path, 2)
    lay = h5py.VirtualLayout((4, 10), "<i4")
    lay[0] = h5py.VirtualSource("src0.h5", "data", shape=(10,))
    lay[1] = h5py.VirtualSource("nowhere.h5", "data", shape=(10,))
    lay[2] = h5py.VirtualSource("src1.h5", "no_such_dataset", shape=(10,))
    lay[3] = h5py.VirtualSource("src1.h5", "data", shape=(10,))
    p = tmp_path / "vds.h5"
    with h5py.File(p, "w", libver=libver) as f:
        f.create_virtual_dataset("v", lay, fillvalue=-1)
    arr = _check(p, "v")
    assert (arr[1:3] == -1).all() and arr[3, 0] == 2000
    os.unlink(tmp_path / "src0.h5")          # vanishes after creation: its region reads as fill too
    arr = _check(p, "v")
    assert (arr[0] == -1).all()


def test_source_in_another_directory_and_absolute(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    _sources(sub, 2)
    lay = h5py.VirtualLayout((2, 10), "<i4")
    lay[0] = h5py.VirtualSource("sub/src0.h5", "data", shape=(10,))
    lay[1] = h5py.VirtualSource(str(sub / "src1.h5"), "/data", shape=(10,))
    p = tmp_path / "vds.h5"
    with h5py.File(p, "w") as f:
        f.create_virtual_dataset("v", lay, fillvalue=0)
    _check(p, "v")


@pytest.mark.parametrize("libver", LIBVERS)
def test_fill_value_and_unmapped_gaps(tmp_path, libver):
    _sources(tmp_path, 1, shape=(6,), dtype="<f4")
    def layout():
        lay = h5py.VirtualLayout((20,), "<f4")
        lay[3:9] = h5py.VirtualSource("src0.h5", "data", shape=(6,))
        lay[12:18:2] = h5py.VirtualSource("src0.h5", "data", shape=(6,))[::2]
        return lay
    p = tmp_path / "vds.h5"
    with h5py.File(p, "w", libver=libver) as f:
        f.create_virtual_dataset("fill", layout(), fillvalue=np.float32(2.5))
        f.create_virtual_dataset("nofill", layout())
    arr = _check(p, "fill")
    assert arr[0] == 2.5 and arr[13] == 2.5 and arr[12] == 1000
    arr = _check(p, "nofill")
    assert arr[0] == 0


@pytest.mark.parametrize("libver", LIBVERS)
def test_printf_unlimited_mapping(tmp_path, libver):
    for i in range(4):
        with h5py.File(tmp_path / f"part-{i}.h5", "w") as f:
            f["d"] = (np.arange(10, dtype="<i8").reshape(2, 5) + 100 * i)
    p = tmp_path / "vds.h5"
    with h5py.File(p, "w", libver=libver) as f:
        vspace = h5py.h5s.create_simple((0, 5), (U, 5))
        vspace.select_hyperslab((0, 0), (U, 1), (3, 1), (2, 5))          # blocks of 2 rows every 3 rows
        sspace = h5py.h5s.create_simple((2, 5), (2, 5))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_fill_value(np.array([-5], "<i8"))
        dcpl.set_virtual(vspace, b"part-%b.h5", b"d", sspace)
        h5py.h5d.create(f.id, b"v", h5py.h5t.STD_I64LE, vspace, dcpl=dcpl)
    arr = _check(p, "v", shape=(11, 5))
    assert (arr[2] == -5).all() and arr[9, 0] == 300
    with H5File.open(str(p)) as f:
        ds = f.resolve("/v")
        assert ds.dataspace.dims == (0, 5)          # what libhdf5 stored; the extent comes from the sources
        assert virtual_facts(ds)["virtual_extent"] == "(11, 5)"
    os.unlink(tmp_path / "part-2.h5")                 # probing stops at the first missing block
    _check(p, "v", shape=(5, 5))


def test_printf_percent_escape(tmp_path):
    for i in range(2):
        with h5py.File(tmp_path / f"a%{i}.h5", "w") as f:
            f[f"g{i}"] = np.arange(3, dtype="<i4") + 10 * i
    p = tmp_path / "vds.h5"
    with h5py.File(p, "w") as f:
        vspace = h5py.h5s.create_simple((0,), (U,))
        vspace.select_hyperslab((0,), (U,), (3,), (3,))
        sspace = h5py.h5s.create_simple((3,), (3,))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_virtual(vspace, b"a%%%b.h5", b"g%b", sspace)
        h5py.h5d.create(f.id, b"v", h5py.h5t.STD_I32LE, vspace, dcpl=dcpl)
    _check(p, "v", shape=(6,))
    assert substitute("a%%%b_%b%", 12) == "a%12_12%"


@pytest.mark.parametrize("libver", LIBVERS)
def test_unlimited_source_follows_its_extent(tmp_path, libver):
    with h5py.File(tmp_path / "grow.h5", "w") as f:
        f.create_dataset("d", data=np.arange(14, dtype="<i2").reshape(7, 2), maxshape=(None, 2))
    lay = h5py.VirtualLayout((7, 3), "<i2", maxshape=(None, 3))
    lay[:U, 0] = h5py.VirtualSource("grow.h5", "d", shape=(7, 2), maxshape=(None, 2))[:U, 1]
    lay[:4, 2] = h5py.VirtualSource("grow.h5", "d", shape=(7, 2))[:4, 0]
    p = tmp_path / "vds.h5"
    with h5py.File(p, "w", libver=libver) as f:
        f.create_virtual_dataset("g", lay, fillvalue=9)
    _check(p, "g", shape=(7, 3))
    with h5py.File(tmp_path / "grow.h5", "a") as f:
        f["d"].resize((12, 2))
        f["d"][7:] = np.arange(10, dtype="<i2").reshape(5, 2) + 50
    _check(p, "g", shape=(12, 3))
    with h5py.File(tmp_path / "grow.h5", "a") as f:
        f["d"].resize((2, 2))
    # the limited mapping [:4, 0] now reaches past the source's extent: libhdf5 reads whatever
    # the source's storage holds there (or fails, for contiguous sources); we answer EIO
    with H5File.open(str(p)) as f:
        ds = f.resolve("/g")
        assert virtual_extent(ds) == (4, 3)
        with pytest.raises(FormatError, match="outside the source"):
            ds.source.read(0, 24)


def test_unlimited_source_missing(tmp_path):
    lay = h5py.VirtualLayout((3,), "<i4", maxshape=(None,))
    lay[:U] = h5py.VirtualSource("absent.h5", "d", shape=(3,), maxshape=(None,))[:U]
    p = tmp_path / "vds.h5"
    with h5py.File(p, "w") as f:
        f.create_virtual_dataset("g", lay, fillvalue=1)
    _check(p, "g", shape=(0,))


@pytest.mark.parametrize("libver", LIBVERS)
def test_nested_virtual_dataset(tmp_path, libver):
    _sources(tmp_path, 2)
    inner = h5py.VirtualLayout((2, 10), "<i4")
    for i in range(2):
        inner[i] = h5py.VirtualSource(f"src{i}.h5", "data", shape=(10,))
    with h5py.File(tmp_path / "inner.h5", "w", libver=libver) as f:
        f.create_virtual_dataset("v", inner, fillvalue=0)
    outer = h5py.VirtualLayout((20,), "<i4")
    outer[::2] = h5py.VirtualSource("inner.h5", "v", shape=(2, 10))[1, :]
    outer[1::2] = h5py.VirtualSource("inner.h5", "v", shape=(2, 10))[0, ::-1] if False else \
        h5py.VirtualSource("inner.h5", "v", shape=(2, 10))[0, :]
    p = tmp_path / "outer.h5"
    with h5py.File(p, "w", libver=libver) as f:
        f.create_virtual_dataset("o", outer, fillvalue=0)
    _check(p, "o")


def test_self_mapping_is_refused(tmp_path):
    p = tmp_path / "loop.h5"
    lay = h5py.VirtualLayout((4,), "<i4")
    lay[:] = h5py.VirtualSource(".", "loop", shape=(4,))
    with h5py.File(p, "w") as f:
        f.create_virtual_dataset("loop", lay, fillvalue=0)
    with H5File.open(str(p)) as f:
        ds = f.resolve("/loop")
        with pytest.raises(FormatError, match="maps itself"):
            ds.source.read(0, 16)
    # two virtual datasets mapping each other, in two files
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    for me, other in ((a, "b.h5"), (b, "a.h5")):
        lay = h5py.VirtualLayout((4,), "<i4")
        lay[:] = h5py.VirtualSource(other, "x", shape=(4,))
        with h5py.File(me, "w") as f:
            f.create_virtual_dataset("x", lay, fillvalue=0)
    with H5File.open(str(a)) as f:
        with pytest.raises(FormatError, match="maps itself"):
            f.resolve("/x").source.read(0, 16)


def test_type_mismatch_is_unsupported(tmp_path):
    _sources(tmp_path, 1, dtype="<i4")
    lay = h5py.VirtualLayout((10,), "<i8")
    lay[:] = h5py.VirtualSource("src0.h5", "data", shape=(10,))
    p = tmp_path / "vds.h5"
    with h5py.File(p, "w") as f:
        f.create_virtual_dataset("v", lay, fillvalue=0)
    assert (_h5py(p, "v") == np.arange(10) + 1000).all()         # libhdf5 converts
    with H5File.open(str(p)) as f:
        with pytest.raises(Unsupported) as ei:
            f.resolve("/v").source.read(0, 80)
    msg = str(ei.value)
    assert "src0.h5:data" in msg and "type conversion" in msg


def test_source_smaller_than_its_selection_is_eio(tmp_path):
    with h5py.File(tmp_path / "small.h5", "w") as f:
        f["d"] = np.arange(5, dtype="<i4")
    lay = h5py.VirtualLayout((10,), "<i4")
    lay[:] = h5py.VirtualSource("small.h5", "d", shape=(10,))
    p = tmp_path / "vds.h5"
    with h5py.File(p, "w") as f:
        f.create_virtual_dataset("v", lay, fillvalue=0)
    with pytest.raises(OSError):
        _h5py(p, "v")                                          # libhdf5 errors too
    with H5File.open(str(p)) as f:
        with pytest.raises(FormatError):
            f.resolve("/v").source.read(0, 40)


def test_large_strided_read_is_bounded(tmp_path):
    """A 2-D column source read through a VDS: every element right, read in large pieces."""
    with h5py.File(tmp_path / "big.h5", "w") as f:
        f.create_dataset("d", data=np.arange(2000 * 300, dtype="<i4").reshape(2000, 300), chunks=(100, 64))
        f["flat"] = np.arange(2000 * 30, dtype="<i4").reshape(2000, 30)
    lay = h5py.VirtualLayout((3, 2000), "<i4")
    lay[0] = h5py.VirtualSource("big.h5", "d", shape=(2000, 300))[:, 17]
    lay[1] = h5py.VirtualSource("big.h5", "flat", shape=(2000, 30))[:, 29]
    lay[2, ::3] = h5py.VirtualSource("big.h5", "d", shape=(2000, 300))[1000:1667, 299]
    p = tmp_path / "vds.h5"
    with h5py.File(p, "w") as f:
        f.create_virtual_dataset("v", lay, fillvalue=-1)
    _check(p, "v", steps=(7, 4099, 65536 + 3))


def test_pool_closes_evicted_files(tmp_path):
    _sources(tmp_path, 3)
    lay = h5py.VirtualLayout((3, 10), "<i4")
    for i in range(3):
        lay[i] = h5py.VirtualSource(f"src{i}.h5", "data", shape=(10,))
    p = tmp_path / "vds.h5"
    with h5py.File(p, "w") as f:
        f.create_virtual_dataset("v", lay)
    old = POOL.size
    POOL.size = 1
    try:
        _check(p, "v")
    finally:
        POOL.size = old
        POOL.clear()
