"""Files with shared object header messages (SOHM) and their table as libhdf5 and h5fs see it."""

from __future__ import annotations

import h5py
import numpy as np
import roundtrip_support as R

from h5fs.model.file import H5File
from h5fs.storage.sohm_table.reader import read_records


def build(path, fcpl) -> None:
    with R.new_file(path, "latest", (8, 8), fcpl) as f:
        for i in range(5):   # shared datatype, dataspace, fill value and filters; a shared attribute each
            d = f.create_dataset(f"d{i}", data=np.arange(100, dtype="f8"), chunks=(10,), compression="gzip")
            d.attrs["units"] = "metres per second squared"
            d.attrs["scale"] = np.float64(1.5)
        f.create_dataset("other", data=np.arange(7, dtype="i2"))   # its messages tracked in its own header
        g = f.create_group("g")
        g.attrs["long"] = "x" * 100
        g.create_dataset("inner", data=np.arange(100, dtype="f8"), chunks=(10,), compression="gzip")
        many = f.create_group("many")   # dense attribute storage, some shared
        for i in range(12):
            many.attrs[f"a{i:02d}"] = np.float64(i) if i % 2 else "same text"


def records(path) -> list[tuple[int, list]]:
    """Every index's message count and records (hash, location, count, type), as read from the file."""
    with H5File.open(str(path)) as f:
        return [(index.num_messages, sorted((r.hash, r.location, r.refcount, r.msg_type)
                                            for r in read_records(f.reader, index, "index")))
                for index in f.sohm_indexes]


def remove_everything_with_libhdf5(path) -> None:
    with h5py.File(path, "r+") as f:
        def clear(obj):
            for name in list(obj.attrs):
                del obj.attrs[name]
        for name in list(f):
            obj = f[name]
            if isinstance(obj, h5py.Group):
                for sub in list(obj):
                    clear(obj[sub])
                    del obj[sub]
            clear(obj)
            del f[name]
