"""Builds demo/demo.h5, the small file `scripts/demo.sh` mounts (run with h5py installed)."""

import sys

import h5py
import numpy as np


def main(path: str) -> None:
    rng = np.random.default_rng(7)
    with h5py.File(path, "w", libver="latest") as f:
        f.attrs["title"] = "h5fs demo: a small climate archive"
        f.attrs["version"] = 3
        c = f.create_group("climate")
        c.attrs["institution"] = "Example Observatory"
        c.attrs["years"] = np.array([2019, 2020, 2021])
        t = np.round(15 + np.cumsum(rng.normal(0, 0.2, (120, 32, 16)), axis=0), 1).astype("float32")
        d = c.create_dataset("temperature", data=t, chunks=(30, 16, 16), compression="gzip", shuffle=True)
        d.attrs["units"] = "degC"
        d.attrs["scale"] = 1.0
        c.create_dataset("stations", data=np.array([(1, 47.3, 8.5), (2, 46.9, 7.4)],
                                                   dtype=[("id", "<i4"), ("lat", "<f8"), ("lon", "<f8")]))
        c.create_dataset("names", data=np.array(["Zurich", "Bern"], dtype=object), dtype=h5py.string_dtype())
        f.create_dataset("notes", data=np.frombuffer(b"Mounted by h5fs: groups are directories, datasets are files.\n",
                                                    dtype="S1"))
        f["latest"] = h5py.SoftLink("/climate/temperature")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "demo/demo.h5")
