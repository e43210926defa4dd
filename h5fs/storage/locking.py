"""The lock libhdf5 takes on a file it opens: `flock`, exclusive to write, shared to read. Holding
it keeps libhdf5 (h5py) and a second h5fs mount from writing the file while h5fs writes it."""

from __future__ import annotations

import fcntl

from ..errors import H5fsError


class Locked(H5fsError):
    pass


def take_lock(fd: int, exclusive: bool) -> None:
    """Locked (its message without the path: callers name the file) when another holds it."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        how = "write" if exclusive else "read"
        raise Locked(f"the file is in use by another process (an h5fs mount or an HDF5 writer); "
                     f"cannot lock it to {how}") from None
