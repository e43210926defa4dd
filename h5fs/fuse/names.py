"""File names a user gives the mount, checked: what HDF5 can hold as a link name."""

from __future__ import annotations

import errno
import logging

from pyfuse3 import FUSEError

from ..model import namespace

log = logging.getLogger("h5fs.fuse")


def check_length(name: bytes) -> None:
    """ENAMETOOLONG for a name over NAME_MAX, whatever asks for it: the kernel passes names up
    to 1024 bytes (FUSE_NAME_MAX), and POSIX wants ENAMETOOLONG rather than ENOENT for them."""
    if len(name) > namespace.NAME_MAX:
        raise FUSEError(errno.ENAMETOOLONG)


def link_name(name: bytes) -> str:
    """The HDF5 link name for a file name a user gives (UTF-8, no NUL; the kernel already
    refuses '/' and empty names)."""
    check_length(name)
    if not name or b"/" in name or b"\0" in name or name in (b".", b".."):
        raise FUSEError(errno.EINVAL)
    try:
        return name.decode("utf-8")
    except UnicodeDecodeError:
        log.warning("%r: not UTF-8, HDF5 cannot hold it as a link name", name)
        raise FUSEError(errno.EINVAL) from None


def array_name(name: bytes) -> bool:
    """A file name that names an array's `.npy` view (`x.npy`, not a sparse dataset's points)."""
    return name.endswith(namespace.NPY_SUFFIX.encode()) and not name.endswith(namespace.POINTS_SUFFIX.encode()) \
        and name != namespace.NPY_SUFFIX.encode()
