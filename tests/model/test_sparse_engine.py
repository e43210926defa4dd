"""Sparse datasets through the engine without FUSE: random writes (values and fill values) and
point-set replacements against a NumPy model, for every index a structured chunk can live in,
filtered and not, in both file formats; the file then checked by `h5fs check`, the rest of it
read by h5py, and a corrupt chunk answering an error that names it."""

from __future__ import annotations

import io
import zlib

import h5py
import numpy as np
import pytest

from conftest import run_h5fs
from h5fs.errors import FormatError
from h5fs.model.file import H5File
from h5fs.model.points_write import read_points, replace_points
from h5fs.model.tree_edit import TreeEditor
from h5fs.model.writeback import Writeback

SHAPE, CHUNKS = (70, 45), (8, 16)   # partial edge chunks on both dimensions
INDEXES = {   # max shape -> the index libhdf5's rules give
    "single": ((16, 16), (16, 16), "single"),
    "fixed": (SHAPE, CHUNKS, "fixed-array"),
    "extensible": ((None, 45), CHUNKS, "extensible-array"),
    "btree": ((None, None), CHUNKS, "btree-v2"),
}


def _file(path, libver: str) -> None:
    with h5py.File(path, "w", libver=libver) as f:
        f["dense"] = np.arange(100.0)
        f.attrs["note"] = "kept"


def _check(path) -> None:
    proc = run_h5fs("check", path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with h5py.File(path, "r") as f:   # the rest of the file reads; the sparse dataset alone does not
        assert np.array_equal(f["dense"][()], np.arange(100.0)) and f.attrs["note"] == "kept"
        with pytest.raises(Exception):
            f["S"][()]


def _points_file(index: np.ndarray, values: np.ndarray, rank: int) -> io.BytesIO:
    dt = np.dtype([("index", "<u8", (rank,)), ("value", values.dtype)])
    arr = np.empty(len(index), dt)
    arr["index"], arr["value"] = index, values
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf


@pytest.mark.parametrize("libver", ["earliest", "latest"])
@pytest.mark.parametrize("filters", ["", "values=shuffle,gzip:4,selection=gzip:1"])
@pytest.mark.parametrize("kind", list(INDEXES))
def test_random_writes_and_replacements(tmp_path, kind, filters, libver):
    maxshape, chunks, index_name = INDEXES[kind]
    shape = (16, 16) if kind == "single" else SHAPE
    path = tmp_path / "s.h5"
    _file(path, libver)
    fill = np.float32(-2)
    model = np.full(shape, fill, np.float32)
    rng = np.random.default_rng(zlib.crc32(f"{kind} {filters} {libver}".encode()))
    with H5File.open(str(path), writable=True) as f:
        wb = Writeback(f, dirty_limit=32 * 1024)   # small: flushes in parts, in the background too
        TreeEditor(f, wb).create_dataset(f.resolve("/"), "S", np.float32, shape, layout="sparse", chunks=chunks,
                                         maxshape=maxshape, filters=filters, fill=float(fill))
        for step in range(300):
            ds = f.resolve("/S")
            r, c = int(rng.integers(0, shape[0])), int(rng.integers(0, shape[1]))
            n = int(rng.integers(1, min(20, shape[1] - c) + 1))
            values = np.where(rng.random(n) < 0.3, fill, rng.random(n) + 1).astype(np.float32)
            wb.write(ds, (r * shape[1] + c) * 4, values.tobytes())
            model[r, c:c + n] = values
            if step == 150:   # the whole set replaced, a duplicate and a fill value among the points
                idx = np.stack([rng.integers(0, shape[0], 60), rng.integers(0, shape[1], 60)], 1)
                vals = (rng.random(60) + 1).astype(np.float32)
                idx[5], vals[7] = idx[4], fill
                buf = _points_file(idx, vals, 2)
                replace_points(wb, ds, *read_points(ds, buf, len(buf.getvalue())))
                model[...] = fill
                for (i, j), v in zip(idx, vals):
                    model[i, j] = v
            if step % 60 == 0:
                assert bytes(wb.read(f.resolve("/S"), 0, model.nbytes)) == model.tobytes()
        wb.close()
    _check(path)
    with H5File.open(str(path)) as f:
        ds = f.resolve("/S")
        assert np.array_equal(ds.read_array(), model)
        facts = ds.facts()
        assert facts["layout"] == "structured-chunk (sparse)" and facts["index"] == index_name
        assert int(facts["defined"]) == int((model != fill).sum())
        view = ds.points_view()
        got = np.frombuffer(view.read_body(0, view.body_size), view.dtype)
        assert np.array_equal(got["index"], np.argwhere(model != fill))
        assert np.array_equal(got["value"], model[model != fill])
        held = {r.coords for r in ds.source.index.records()}
        want = {tuple(int(x) for x in c) for c in np.argwhere(model != fill) // np.array(chunks)}
        assert held == want   # a chunk with nothing defined is no chunk


def test_everything_undefined_frees_every_chunk(tmp_path):
    path = tmp_path / "s.h5"
    _file(path, "latest")
    with H5File.open(str(path), writable=True) as f:
        wb = Writeback(f)
        TreeEditor(f, wb).create_dataset(f.resolve("/"), "S", np.int16, (64, 64), layout="sparse", chunks=(8, 8),
                                         maxshape=(None, None))
        wb.write(f.resolve("/S"), 0, np.arange(1, 64 * 64 + 1, dtype=np.int16).tobytes())
        wb.flush()
        assert f.resolve("/S").storage_size > 0
        wb.write(f.resolve("/S"), 0, bytes(64 * 64 * 2))
        wb.close()
        assert f.resolve("/S").storage_size == 0 and f.resolve("/S").facts()["defined"] == "0"
    _check(path)


def test_a_corrupt_chunk_names_itself_and_the_others_read(tmp_path):
    path = tmp_path / "s.h5"
    _file(path, "latest")
    model = np.zeros((32, 32), np.float64)
    model[1, 1], model[20, 30] = 5, 6
    with H5File.open(str(path), writable=True) as f:
        wb = Writeback(f)
        TreeEditor(f, wb).create_dataset(f.resolve("/"), "S", np.float64, (32, 32), layout="sparse", chunks=(16, 16))
        wb.write(f.resolve("/S"), 0, model.tobytes())
        wb.close()
        rec = {r.coords: r for r in f.resolve("/S").source.index.records()}[(0, 0)]
    with open(path, "r+b") as fh:   # one byte of chunk (0, 0)'s selection section
        fh.seek(rec.address + 9)
        byte = fh.read(1)
        fh.seek(rec.address + 9)
        fh.write(bytes([byte[0] ^ 0x40]))
    with H5File.open(str(path)) as f:
        ds = f.resolve("/S")
        with pytest.raises(FormatError, match=r"chunk \(0, 0\).*checksum"):
            ds.read_raw(0, 8)
        assert ds.read_raw((20 * 32 + 30) * 8, 8) == np.float64(6).tobytes()   # another chunk
    proc = run_h5fs("check", path)
    assert proc.returncode == 1 and "chunk (0, 0)" in proc.stdout and "checksum" in proc.stdout


@pytest.mark.parametrize("bad, match", [
    (lambda b: b[:-3], "records"),
    (lambda b: b"garbage" + b, "magic"),
])
def test_invalid_points_files_change_nothing(tmp_path, bad, match):
    path = tmp_path / "s.h5"
    _file(path, "latest")
    with H5File.open(str(path), writable=True) as f:
        wb = Writeback(f)
        TreeEditor(f, wb).create_dataset(f.resolve("/"), "S", np.float32, (10, 10), layout="sparse", chunks=(5, 5))
        ds = f.resolve("/S")
        raw = bad(_points_file(np.array([[1, 1]]), np.array([2], np.float32), 2).getvalue())
        with pytest.raises(Exception, match=match):
            read_points(ds, io.BytesIO(raw), len(raw))
        for idx, vals, why in ((np.array([[10, 0]]), np.array([1], np.float32), "outside"),
                               (np.array([[1, 1]]), np.array([1], np.float64), "value"),
                               (np.array([1]), np.array([1], np.float32), "index")):
            buf = _points_file(idx, vals, idx.shape[1] if idx.ndim > 1 else 1)
            with pytest.raises(Exception, match=why):
                read_points(ds, buf, len(buf.getvalue()))
        wb.close()
