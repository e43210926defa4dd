"""What every write test does afterwards: the file read whole by h5py (libhdf5), by Debian's
h5dump where it can read the file's format, and checked by `h5fs check`."""

from __future__ import annotations

import os
import subprocess

import h5py
import numpy as np

from conftest import run_h5fs


def read_everything(path) -> dict[str, np.ndarray]:
    """Every dataset and attribute of the file as h5py reads them (fails if libhdf5 cannot)."""
    out: dict[str, np.ndarray] = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            for key, value in obj.attrs.items():
                out[f"{name}@{key}"] = np.asarray(value)
            if isinstance(obj, h5py.Dataset):
                out[name] = obj[()]
        f.visititems(visit)
        for key, value in f.attrs.items():
            out[f"/@{key}"] = np.asarray(value)
    return out


def verify_file(path, h5dump: bool) -> dict[str, np.ndarray]:
    """The file is sound: h5py reads all of it, `h5fs check` passes, and with `h5dump` Debian's
    h5dump (1.10) reads it (files of libver "earliest": it cannot read libhdf5 2.0's layout v5)."""
    data = read_everything(path)
    proc = run_h5fs("check", path, timeout=300)
    assert proc.returncode == 0, f"h5fs check {path}: {proc.stdout}{proc.stderr}"
    if h5dump:
        dump = subprocess.run(["h5dump", "-o", os.devnull, str(path)], capture_output=True, text=True, timeout=120)
        assert dump.returncode == 0, dump.stderr[-2000:]
    return data


def pwrite(path, data: bytes, offset: int, fsync: bool = True) -> None:
    """One write through the mount (fsynced by default: what lands is then durable)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        assert os.pwrite(fd, data, offset) == len(data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
