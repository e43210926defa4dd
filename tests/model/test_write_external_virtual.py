"""Writes into datasets whose data lives elsewhere, through the engine: external raw data files
(written in place) and virtual datasets (written through to their sources in the same file).
h5py builds the files; libhdf5 reads them back (and, for virtual datasets, makes the same writes
in a twin file: the sources must end up equal), compared with a NumPy model of the edits."""

from __future__ import annotations

import errno
import os
import subprocess

import h5py
import numpy as np
import pytest

from h5fs.errors import CannotWrite, ReadOnly, TooLarge
from h5fs.model import external
from h5fs.model.external import external_close_all, external_sync_all, external_write
from h5fs.model.file import H5File
from h5fs.model.virtual_write import virtual_write
from h5fs.model.writeback import Writeback
from write_support import read_everything

LIBVERS = ("earliest", "latest")
UNLIMITED_SLOT = h5py.h5f.UNLIMITED
U = h5py.h5s.UNLIMITED


def _random_writes(rng, n_elems: int, count: int):
    """(first element, element count) of `count` writes, with the whole range among them."""
    out = [(0, n_elems)]
    for _ in range(count):
        a = int(rng.integers(0, n_elems))
        out.append((a, int(rng.integers(1, n_elems - a + 1))))
    return out


def _values(rng, dtype, n: int) -> np.ndarray:
    return (rng.integers(-10**6, 10**6, n) / 7).astype(dtype) if np.dtype(dtype).kind == "f" \
        else rng.integers(-10**6, 10**6, n).astype(dtype)


# -------------------------------------------------------------------------------- external

def _edit_external(path, name: str, writes, rng, model: np.ndarray) -> None:
    """Our engine writes `writes` (element ranges of random values) into `name`; the model too.
    Reads through the engine see every write at once."""
    flat = model.reshape(-1)
    with H5File.open(str(path), writable=True) as f:
        ds = f.resolve(name)
        isz = ds.itemsize
        for a, n in writes:
            values = _values(rng, model.dtype, n)
            flat[a:a + n] = values
            external_write(ds, a * isz, values.tobytes())
            assert ds.read_raw(a * isz, n * isz) == values.tobytes()
        assert ds.read_raw(0, model.nbytes) == model.tobytes()
        external_sync_all(f)
        external_close_all(f)


@pytest.mark.parametrize("libver", LIBVERS)
def test_external_1d_several_slots(tmp_path, monkeypatch, libver):
    monkeypatch.chdir(tmp_path)           # libhdf5 resolves relative names against the cwd
    sub = tmp_path / "elsewhere"
    sub.mkdir()
    p = tmp_path / "ext.h5"
    data = np.arange(1000, dtype="<i4")
    # slots in three files: one written whole, two slots at offsets inside one file, an absolute
    # name in another directory holding the rest
    ext = [("raw1.bin", 0, 124), ("shared.bin", 16, 400), ("shared.bin", 1000, 800),
           (str(sub / "abs.bin"), 3, UNLIMITED_SLOT)]
    with h5py.File(p, "w", libver=libver) as f:
        f.create_dataset("x", data=data, external=ext)
    shared = (tmp_path / "shared.bin").read_bytes()
    rng = np.random.default_rng(1)
    model = data.copy()
    _edit_external(p, "/x", _random_writes(rng, data.size, 25), rng, model)
    assert np.array_equal(read_everything(p)["x"], model)
    after = (tmp_path / "shared.bin").read_bytes()
    # the bytes around the slots are the file's own: untouched
    assert after[:16] == shared[:16] and after[416:1000] == shared[416:1000]
    assert after[16:416] == model.tobytes()[124:524]
    assert (sub / "abs.bin").read_bytes()[3:] == model.tobytes()[1324:]


@pytest.mark.parametrize("libver", LIBVERS)
def test_external_2d_slot_boundaries_inside_rows(tmp_path, monkeypatch, libver):
    monkeypatch.chdir(tmp_path)
    p = tmp_path / "ext.h5"
    data = np.arange(7 * 30, dtype=">f8").reshape(7, 30) * 0.5
    # slot sizes that cut rows (and are whole elements, as libhdf5 needs nothing else)
    ext = [("a.bin", 8, 8 * 45), ("b.bin", 0, 8 * 13), ("c.bin", 100, 8 * 152)]
    with h5py.File(p, "w", libver=libver) as f:
        f.create_dataset("m", data=data, external=ext)
    rng = np.random.default_rng(2)
    model = data.copy()
    _edit_external(p, "/m", _random_writes(rng, data.size, 25), rng, model)
    assert np.array_equal(read_everything(p)["m"], model)


def test_short_external_file_is_extended(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = tmp_path / "ext.h5"
    data = np.arange(100, dtype="<i8") + 1
    with h5py.File(p, "w") as f:
        f.create_dataset("x", data=data, external=[("raw.bin", 0, 800)])
    with open(tmp_path / "raw.bin", "r+b") as fh:
        fh.truncate(200)
    model = data.copy()
    model[25:] = 0                          # what libhdf5 reads past the end of a short file
    with H5File.open(str(p), writable=True) as f:
        ds = f.resolve("/x")
        external_write(ds, 90 * 8, np.arange(5, dtype="<i8").tobytes())
        external_close_all(f)
    model[90:95] = np.arange(5)
    assert (tmp_path / "raw.bin").stat().st_size == 95 * 8
    assert np.array_equal(read_everything(p)["x"], model)


def test_fds_beyond_the_cache_bound_are_reopened_to_sync(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(external, "MAX_WRITERS", 2)
    p = tmp_path / "ext.h5"
    data = np.arange(60, dtype="<u2")
    with h5py.File(p, "w") as f:
        f.create_dataset("x", data=data, external=[(f"r{i}.bin", 0, 24) for i in range(5)])
    rng = np.random.default_rng(3)
    model = data.copy()
    with H5File.open(str(p), writable=True) as f:
        ds = f.resolve("/x")
        for a, n in _random_writes(rng, data.size, 10):
            model[a:a + n] = _values(rng, model.dtype, n)
            external_write(ds, a * 2, model[a:a + n].tobytes())
            external_sync_all(f)
        assert ds.read_raw(0, model.nbytes) == model.tobytes()
        external_close_all(f)
    assert np.array_equal(read_everything(p)["x"], model)


def _external_pair(tmp_path) -> tuple[str, np.ndarray]:
    p = tmp_path / "ext.h5"
    data = np.arange(40, dtype="<u4")
    with h5py.File(p, "w") as f:
        f.create_dataset("x", data=data, external=[("a.bin", 0, 80), ("b.bin", 0, 80)])
    return str(p), data


def _bytes_of(tmp_path) -> dict[str, bytes]:
    return {n: (tmp_path / n).read_bytes() for n in ("a.bin", "b.bin") if (tmp_path / n).exists()}


def test_external_write_past_the_slots_is_efbig(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p, data = _external_pair(tmp_path)
    before = _bytes_of(tmp_path)
    with H5File.open(p, writable=True) as f:
        ds = f.resolve("/x")
        with pytest.raises(TooLarge) as ei:
            external_write(ds, 152, bytes(16))       # the last two elements and two more
        assert ei.value.errno == errno.EFBIG
        external_close_all(f)
    assert _bytes_of(tmp_path) == before


@pytest.fixture
def unwritable(tmp_path):
    """Makes a file unwritable even for root (immutable), undone afterwards."""
    made = []

    def make(path):
        os.chmod(path, 0o444)
        if os.geteuid() == 0:
            proc = subprocess.run(["chattr", "+i", str(path)], capture_output=True)
            if proc.returncode:
                pytest.skip(f"cannot make a file immutable here: {proc.stderr.decode().strip()}")
            made.append(path)
    yield make
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_unwritable_external_file_is_erofs_and_nothing_is_written(tmp_path, monkeypatch, unwritable):
    monkeypatch.chdir(tmp_path)
    p, data = _external_pair(tmp_path)
    unwritable(tmp_path / "b.bin")
    before = _bytes_of(tmp_path)
    with H5File.open(p, writable=True) as f:
        ds = f.resolve("/x")
        external_write(ds, 0, bytes(8))              # a.bin alone: written
        with pytest.raises(ReadOnly) as ei:
            external_write(ds, 72, bytes(16))        # spans a.bin and b.bin: refused whole
        assert ei.value.errno == errno.EROFS and "b.bin" in str(ei.value)
        external_close_all(f)
    assert _bytes_of(tmp_path) == {"a.bin": bytes(8) + before["a.bin"][8:], "b.bin": before["b.bin"]}


def test_missing_external_file_is_created_as_libhdf5_does(tmp_path, monkeypatch):
    """libhdf5 creates an external file a write needs (O_CREAT); so does h5fs: the same write
    made by h5py into a twin leaves the same bytes in the same files."""
    values = np.arange(100, 104, dtype="<u4")
    sides = {}
    for side in ("h5fs", "h5py"):
        (tmp_path / side).mkdir()
        monkeypatch.chdir(tmp_path / side)
        p, _ = _external_pair(tmp_path / side)
        os.unlink(tmp_path / side / "b.bin")
        sides[side] = p
    monkeypatch.chdir(tmp_path / "h5fs")
    with H5File.open(sides["h5fs"], writable=True) as f:
        external_write(f.resolve("/x"), 72, values.tobytes())   # the end of a.bin, then b.bin
        external_close_all(f)
    monkeypatch.chdir(tmp_path / "h5py")
    with h5py.File(sides["h5py"], "r+") as f:
        f["x"][18:22] = values
    assert _bytes_of(tmp_path / "h5fs") == _bytes_of(tmp_path / "h5py")
    assert (tmp_path / "h5fs" / "b.bin").stat().st_size == 8
    monkeypatch.chdir(tmp_path / "h5fs")
    assert np.array_equal(read_everything(sides["h5fs"])["x"][18:22], values)


# --------------------------------------------------------------------------------- virtual

def _compact(f, name: str, values: np.ndarray) -> None:
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    h5py.h5d.create(f.id, name.encode(), h5py.h5t.STD_I32LE, h5py.h5s.create_simple(values.shape), dcpl=dcpl)
    f[name][...] = values


# the virtual dataset V (6, 8) in mapping order: (virtual selection, source name, the source's
# elements as a view of the same shape). The last two (with `overlaps`) map elements that A maps
# too, and map D twice.
V_MAPS = [
    ((slice(0, 6, 2), slice(None)), "A", lambda s: s["A"]),
    ((slice(1, 6, 2), slice(0, 8, 2)), "B", lambda s: s["B"][0:6:2, 0:8:2]),
    ((slice(1, 6, 2), slice(1, 8, 2)), "C", lambda s: s["C"].reshape(3, 4)),
    ((slice(0, 1), slice(0, 2)), "D", lambda s: s["D"].reshape(1, 2)),
    ((slice(4, 5), slice(6, 8)), "D", lambda s: s["D"].reshape(1, 2)),
]
V_SOURCES = {"A": np.arange(24, dtype="<i4").reshape(3, 8), "B": np.arange(48, dtype="<i4").reshape(6, 8) + 100,
             "C": np.arange(12, dtype="<i4") + 200, "D": np.array([300, 301], "<i4")}


def _vds_file(p, libver, overlaps: bool) -> None:
    with h5py.File(p, "w", libver=libver) as f:
        for name in "ABD":
            f[name] = V_SOURCES[name]
        _compact(f, "C", V_SOURCES["C"])
        lay = h5py.VirtualLayout((6, 8), "<i4")
        lay[0:6:2, :] = h5py.VirtualSource(".", "A", shape=(3, 8))
        lay[1:6:2, 0:8:2] = h5py.VirtualSource(".", "B", shape=(6, 8))[0:6:2, 0:8:2]
        lay[1:6:2, 1:8:2] = h5py.VirtualSource(str(p), "C", shape=(12,))   # the same file by its path
        if overlaps:
            lay[0, 0:2] = h5py.VirtualSource(".", "D", shape=(2,))
            lay[4, 6:8] = h5py.VirtualSource(".", "D", shape=(2,))
        f.create_virtual_dataset("V", lay, fillvalue=-1)


def _boxes(a: int, b: int, row: int):
    """Elements [a, b) of a 2-D array with rows of `row` as h5py slices (row-major boxes)."""
    out = []
    while a < b:
        r, c = divmod(a, row)
        if c or b - a < row:
            end = min(b, (r + 1) * row)
            out.append((slice(r, r + 1), slice(c, c + end - a)))
        else:
            end = a + (b - a) // row * row
            out.append((slice(r, end // row), slice(None)))
        a = end
    return out


def _edit_virtual(path, writes, rng, maps, sources, twin=None) -> None:
    """Our engine writes `writes` (element ranges of random values) into /V through to its
    sources, and so do the model and (`twin`: an h5py file) libhdf5's own VDS writes."""
    with H5File.open(str(path), writable=True) as f:
        wb = Writeback(f)
        ds = f.resolve("/V")
        for a, n in writes:
            values = _values(rng, "<i4", n)
            virtual_write(ds, a * 4, values.tobytes(), wb.write)
            written = np.zeros(48, bool)
            written[a:a + n] = True
            new = np.zeros(48, "<i4")
            new[a:a + n] = values
            for sel, _, view in maps:            # every mapping that selects an element, in order
                w = written.reshape(6, 8)[sel]
                view(sources)[w] = new.reshape(6, 8)[sel][w]
            if twin is not None:
                for box in _boxes(a, a + n, 8):
                    twin["V"][box] = new.reshape(6, 8)[box]
        wb.close()


def _check_virtual(path, maps, sources) -> None:
    """libhdf5 and our reader read the model's sources, and the virtual dataset they make."""
    expected_v = np.full((6, 8), -1, "<i4")
    for sel, _, view in maps:                    # a later mapping's element wins on reading
        expected_v[sel] = view(sources)
    got = read_everything(path)
    for name, values in sources.items():
        assert np.array_equal(got[name], values), name
    assert np.array_equal(got["V"], expected_v)
    with H5File.open(str(path)) as f:
        assert f.resolve("/V").read_raw(0, 192) == expected_v.tobytes()


@pytest.mark.parametrize("libver", LIBVERS)
def test_virtual_writes_reach_same_file_sources(tmp_path, libver):
    ours, twin = tmp_path / "ours.h5", tmp_path / "twin.h5"
    _vds_file(ours, libver, overlaps=False)
    _vds_file(twin, libver, overlaps=False)
    rng = np.random.default_rng(4)
    sources = {k: v.copy() for k, v in V_SOURCES.items()}
    with h5py.File(twin, "r+") as h:
        _edit_virtual(ours, _random_writes(rng, 48, 20), rng, V_MAPS[:3], sources, twin=h)
    _check_virtual(ours, V_MAPS[:3], sources)
    _check_virtual(twin, V_MAPS[:3], sources)     # libhdf5 wrote the same through its VDS code


@pytest.mark.parametrize("libver", LIBVERS)
def test_virtual_overlapping_mappings_write_every_source(tmp_path, libver):
    """An element that several mappings select goes to each of their sources, in mapping order,
    so that reading it returns what was written. (libhdf5 2.0 refuses such writes: it counts an
    element once per mapping and calls the surplus "unmapped".)"""
    p = tmp_path / "v.h5"
    _vds_file(p, libver, overlaps=True)
    rng = np.random.default_rng(5)
    sources = {k: v.copy() for k, v in V_SOURCES.items()}
    _edit_virtual(p, _random_writes(rng, 48, 20), rng, V_MAPS, sources)
    _check_virtual(p, V_MAPS, sources)


def test_virtual_runs_are_coalesced(tmp_path):
    """One call per run of consecutive source elements, each at its offset in the source."""
    p = tmp_path / "v.h5"
    _vds_file(p, "latest", overlaps=True)
    calls = []
    with H5File.open(str(p), writable=True) as f:
        ds = f.resolve("/V")
        virtual_write(ds, 0, np.arange(48, dtype="<i4").tobytes(),
                      lambda src, off, data: calls.append((src.path, off, np.frombuffer(data, "<i4").tolist())))
    runs = {}
    for path, off, values in calls:
        runs.setdefault(path, []).append((off, values))
    v = np.arange(48).reshape(6, 8)
    assert runs["/A"] == [(0, v[0:6:2].ravel().tolist())]                   # rows 0, 2, 4: one run
    assert runs["/B"] == [(r * 32 + c * 4, [int(v[1 + r, c])]) for r in (0, 2, 4) for c in (0, 2, 4, 6)]
    assert runs["/C"] == [(0, v[1:6:2, 1:8:2].ravel().tolist())]
    assert runs["/D"] == [(0, v[4, 6:8].tolist())]                         # the later mapping wins


@pytest.mark.parametrize("libver", LIBVERS)
def test_virtual_printf_and_unlimited_same_file(tmp_path, libver):
    p = tmp_path / "v.h5"
    with h5py.File(p, "w", libver=libver) as f:
        for j in range(3):
            f[f"p{j}"] = np.zeros((2, 4), "<i8") + j
        vspace = h5py.h5s.create_simple((0, 4), (U, 4))
        vspace.select_hyperslab((0, 0), (U, 1), (2, 1), (2, 4))          # blocks of 2 rows
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_virtual(vspace, b".", b"p%b", h5py.h5s.create_simple((2, 4)))
        h5py.h5d.create(f.id, b"P", h5py.h5t.STD_I64LE, vspace, dcpl=dcpl)
        f["u"] = np.zeros(5, "<i2")
        lay = h5py.VirtualLayout((5,), "<i2", maxshape=(None,))
        lay[:U] = h5py.VirtualSource(".", "u", shape=(5,), maxshape=(None,))[:U]
        f.create_virtual_dataset("W", lay, fillvalue=9)
    values = np.arange(24, dtype="<i8") * 3
    small = np.arange(5, dtype="<i2") + 40
    with H5File.open(str(p), writable=True) as f:
        wb = Writeback(f)
        virtual_write(f.resolve("/P"), 8, values[1:23].tobytes(), wb.write)
        virtual_write(f.resolve("/W"), 2, small[1:].tobytes(), wb.write)
        wb.close()
    got = read_everything(p)
    expect = values.reshape(6, 4).copy()
    expect[0, 0], expect[5, 3] = 0, 2                   # not written: the sources' old values
    for j in range(3):
        assert np.array_equal(got[f"p{j}"], expect[2 * j:2 * j + 2]), j
    assert np.array_equal(got["P"], expect)
    assert got["u"].tolist() == [0, 41, 42, 43, 44] and got["W"].tolist() == [0, 41, 42, 43, 44]


def _refusals_file(tmp_path) -> str:
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["d"] = np.arange(4, dtype="<i4")
    p = tmp_path / "v.h5"
    with h5py.File(p, "w") as f:
        f["s"] = np.arange(8, dtype="<i4") + 10
        lay = h5py.VirtualLayout((8,), "<i4")
        lay[0:2] = h5py.VirtualSource("other.h5", "d", shape=(4,))[0:2]
        lay[2:4] = h5py.VirtualSource(".", "s", shape=(8,))[0:2]
        lay[5:6] = h5py.VirtualSource(".", "missing", shape=(1,))    # no such dataset: fill value
        lay[6:8] = h5py.VirtualSource(".", "s", shape=(8,))[6:8]
        f.create_virtual_dataset("X", lay, fillvalue=-3)
    return str(p)


@pytest.mark.parametrize("first, count, error, text", [
    (1, 2, ReadOnly, "other.h5"),           # element 1 lies in another file
    (3, 2, CannotWrite, "(4,)"),            # element 4 is mapped by nothing
    (5, 1, CannotWrite, "(5,)"),            # element 5's source dataset does not exist
    (7, 2, TooLarge, "cannot grow"),        # past the end
])
def test_virtual_refusals_change_nothing(tmp_path, first, count, error, text):
    p = _refusals_file(tmp_path)
    before = read_everything(p)
    with H5File.open(p, writable=True) as f:
        wb = Writeback(f)
        ds = f.resolve("/X")
        with pytest.raises(error) as ei:
            virtual_write(ds, first * 4, bytes(4 * count), wb.write)
        assert "/X" in str(ei.value) and text in str(ei.value)
        assert ei.value.errno == {ReadOnly: errno.EROFS, CannotWrite: errno.ENOTSUP, TooLarge: errno.EFBIG}[error]
        virtual_write(ds, 8, np.array([7, 8], "<i4").tobytes(), wb.write)    # mapped elements still write
        wb.close()
    after = read_everything(p)
    expect = before["s"].copy()
    expect[0:2] = [7, 8]
    assert np.array_equal(after["s"], expect)
    assert np.array_equal(read_everything(tmp_path / "other.h5")["d"], np.arange(4))
