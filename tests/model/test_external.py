"""External storage (External Data Files message) against h5py, which writes the files."""

from __future__ import annotations

import errno
import os

import h5py
import numpy as np
import pytest

from h5fs.errors import FormatError
from h5fs.model.external import external_facts
from h5fs.model.file import H5File

LIBVERS = ("earliest", "latest")


def _pieces(total: int, step: int, start: int = 0):
    pos = start
    while pos < total:
        yield pos, step
        pos += step


def _h5py_bytes(p, name: str, cwd) -> bytes:
    """What libhdf5 reads; its default external-file prefix is the current directory."""
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with h5py.File(p, "r") as f:
            return f[name][...].tobytes()
    finally:
        os.chdir(old)


def _check_reads(ds, expected: bytes) -> None:
    assert ds.raw_size == len(expected)
    assert ds.read_raw(0, len(expected)) == expected
    for step in (1, 3, 7, 13, 100, 4099):
        got = b"".join(ds.read_raw(o, n) for o, n in _pieces(len(expected), step, 0))
        assert got == expected, step
    for off in (0, 1, 5, 39, 40, 41, len(expected) - 3):
        for n in (1, 2, 9, 77, 1000):
            assert ds.read_raw(off, n) == expected[off:off + n], (off, n)
    assert ds.read_raw(len(expected), 10) == b""
    assert ds.read_raw(len(expected) - 2, 10) == expected[-2:]


@pytest.mark.parametrize("libver", LIBVERS)
def test_two_slots_relative_names(tmp_path, libver):
    p = tmp_path / "ext.h5"
    data = np.arange(6 * 50, dtype="<f8").reshape(6, 50) * 1.5
    n1 = 7 * 8 * 3          # not a multiple of the row size: a slot boundary inside a row
    with h5py.File(p, "w", libver=libver) as f:
        ds = f.create_dataset("x", data.shape, data.dtype,
                              external=[("raw1.bin", 0, n1), ("raw2.bin", 0, h5py.h5f.UNLIMITED)],
                              efile_prefix=str(tmp_path))
        ds[...] = data
    assert (tmp_path / "raw1.bin").stat().st_size == n1
    expected = _h5py_bytes(p, "x", tmp_path)
    assert expected == data.tobytes()
    with H5File.open(str(p)) as f:
        ds = f.resolve("/x")
        assert ds.storage_size == 0
        _check_reads(ds, expected)
        assert np.array_equal(ds.read_array(), data)
        facts = external_facts(ds)
        assert facts["external"] == f"raw1.bin[0:{n1}]; raw2.bin[0:]"


@pytest.mark.parametrize("libver", LIBVERS)
def test_offsets_in_external_files_and_absolute_name(tmp_path, libver):
    p = tmp_path / "ext.h5"
    sub = tmp_path / "elsewhere"
    sub.mkdir()
    data = np.arange(1000, dtype=">i4")
    # two slots in the same file at different offsets, one absolute name in another directory
    abs_name = str(sub / "abs.bin")
    ext = [("shared.bin", 16, 400), ("shared.bin", 1000, 800), (abs_name, 3, h5py.h5f.UNLIMITED)]
    with h5py.File(p, "w", libver=libver) as f:
        ds = f.create_dataset("x", data.shape, data.dtype, external=ext, efile_prefix=str(tmp_path))
        ds[...] = data
    expected = _h5py_bytes(p, "x", tmp_path)
    raw = (tmp_path / "shared.bin").read_bytes()
    assert raw[16:416] == expected[:400] and raw[1000:1800] == expected[400:1200]
    with H5File.open(str(p)) as f:
        ds = f.resolve("/x")
        _check_reads(ds, expected)


def test_short_external_file_reads_zeros(tmp_path):
    p = tmp_path / "ext.h5"
    data = np.arange(100, dtype="<i8") + 1
    with h5py.File(p, "w") as f:
        ds = f.create_dataset("x", data.shape, data.dtype, external=[("raw.bin", 0, 800)],
                              efile_prefix=str(tmp_path))
        ds[...] = data
    with open(tmp_path / "raw.bin", "r+b") as fh:
        fh.truncate(500)
    # libhdf5 reads zeros past the end of a short external file
    expected = _h5py_bytes(p, "x", tmp_path)
    assert expected[:500] == data.tobytes()[:500] and expected[500:] == bytes(300)
    with H5File.open(str(p)) as f:
        ds = f.resolve("/x")
        _check_reads(ds, expected)


def test_missing_external_file_is_eio_naming_it(tmp_path):
    p = tmp_path / "ext.h5"
    data = np.arange(40, dtype="<u2")
    with h5py.File(p, "w") as f:
        ds = f.create_dataset("x", data.shape, data.dtype,
                              external=[("a.bin", 0, 40), ("gone.bin", 0, 40)], efile_prefix=str(tmp_path))
        ds[...] = data
    os.unlink(tmp_path / "gone.bin")
    with H5File.open(str(p)) as f:
        ds = f.resolve("/x")
        assert ds.read_raw(0, 40) == data.tobytes()[:40]          # the first file is still there
        with pytest.raises(FormatError) as ei:
            ds.read_raw(30, 20)
        assert ei.value.errno == errno.EIO
        assert "gone.bin" in str(ei.value)


def test_external_fifo_is_refused_not_waited_on(tmp_path):
    """A hostile file may name a FIFO (or a device) as external storage: EIO, never a hang."""
    p = tmp_path / "fifo.h5"
    data = np.arange(10, dtype="<u4")
    with h5py.File(p, "w") as f:
        f.create_dataset("x", data.shape, data.dtype, external=[("pipe", 0, 40)], efile_prefix=str(tmp_path))
    os.mkfifo(tmp_path / "pipe")
    with H5File.open(str(p)) as f:
        with pytest.raises(FormatError, match="not a regular file"):
            f.resolve("/x").read_raw(0, 40)
