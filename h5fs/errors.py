"""Exceptions that carry the errno a filesystem call should answer with."""

from __future__ import annotations

import errno


class H5fsError(Exception):
    """Base class; `errno` is what the FUSE layer answers. `transient`: the failure is not the
    object's (a network fault): answered now, never remembered as the object being broken."""

    errno: int = errno.EIO
    transient: bool = False


class FormatError(H5fsError):
    """The file's bytes do not follow the format (corrupt, truncated or hostile)."""

    errno = errno.EIO


class NotHDF5(FormatError):
    """No HDF5 signature where the format puts one: the file is no HDF5 file at all."""


class ChecksumError(FormatError):
    """A stored Jenkins lookup3 checksum does not match the bytes it covers."""


class Unsupported(H5fsError):
    """A valid feature this version of h5fs cannot serve; the message names it."""

    errno = errno.EIO


class ReadOnly(H5fsError):
    errno = errno.EROFS


class NotFound(H5fsError):
    errno = errno.ENOENT


class TooLarge(H5fsError):
    """A write or resize beyond a dataset's maximum dimensions, a dataset larger than a file can show."""

    errno = errno.EFBIG


class InvalidWrite(H5fsError):
    """A write the view cannot take (into a `.npy` header, a size that is not whole rows)."""

    errno = errno.EINVAL


class CannotWrite(H5fsError):
    """An edit the format (or h5fs) cannot express; the message names it."""

    errno = errno.ENOTSUP
