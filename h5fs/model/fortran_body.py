"""The body of a Fortran-order `.npy` being copied in (`np.save` of a transposed array, what
scipy.io.loadmat returns): column-major bytes, which a row-major dataset cannot take as they come.

They are held in an unnamed temporary file (TMPDIR) as they come, at most MAX_BYTES; once the
body is whole, `blocks` reads the array back in row-major blocks (NumPy gathers each block from
the file's pages through a read-only memory map) for the dataset's writes.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from math import prod
from typing import Iterator

import numpy as np

MAX_BYTES = 256 << 20   # a larger Fortran-order array is refused (EINVAL) rather than held
BLOCK_BYTES = 8 << 20   # row-major bytes per block given back


class FortranBody:
    def __init__(self, dtype: np.dtype, shape: tuple[int, ...]):
        self.dtype, self.shape = dtype, shape
        self.nbytes = dtype.itemsize * prod(shape)
        self._file = tempfile.TemporaryFile(prefix="h5fs-fortran-")

    def write(self, offset: int, data: bytes) -> None:
        """Column-major body bytes [offset, offset + len(data))."""
        os.pwrite(self._file.fileno(), data, offset)

    def blocks(self) -> Iterator[tuple[int, bytes]]:
        """(row-major byte offset, bytes) covering the whole array, a band of rows at a time."""
        if self.nbytes == 0:
            return
        os.ftruncate(self._file.fileno(), self.nbytes)   # mapped whole
        with mmap.mmap(self._file.fileno(), self.nbytes, access=mmap.ACCESS_READ) as mapped:
            array = np.ndarray(self.shape, self.dtype, mapped, order="F")   # two dimensions or more
            row = self.nbytes // self.shape[0]
            step = max(1, BLOCK_BYTES // row)
            for i in range(0, self.shape[0], step):
                yield i * row, np.ascontiguousarray(array[i:i + step]).tobytes()
            del array   # the map closes only once no view of it is left

    def close(self) -> None:
        self._file.close()
