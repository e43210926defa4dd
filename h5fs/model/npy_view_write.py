"""Writes and truncates of a dataset's `.npy` view, as its raw bytes (the mirror of
`Dataset.read_npy_body`, which serves the body after the header the view shows): the header is
read-only, only its own bytes may be written back (cp and rsync rewrite whole files), and the
body is the raw view unless the view converts its elements, which cannot be written back.
"""

from __future__ import annotations

from ..errors import CannotWrite, InvalidWrite
from .dataset import Dataset
from .npy_header import npy_header


def npy_view_write(ds: Dataset, header: bytes, off: int, buf) -> tuple[int, bytes]:
    """Where a write of `buf` at `off` of `ds`'s `.npy` view (showing `header`) goes: (raw
    offset, the bytes past the header)."""
    if ds.converted:
        raise CannotWrite(f"{ds.path}: the .npy view converts its elements: write the raw view")
    if off < len(header):
        part = buf[:len(header) - off]
        if bytes(part) != header[off:off + len(part)]:
            raise InvalidWrite(f"{ds.path}.npy: a write into the .npy header")
        buf, off = buf[len(part):], len(header)
    return off - len(header), buf


def npy_view_truncate(ds: Dataset, size: int | None) -> int:
    """The raw size a truncate of `ds`'s `.npy` view to `size` bytes leaves (None: no data left,
    as O_TRUNC asks)."""
    head = len(npy_header(ds.npy_dtype, ds.npy_shape))
    size = head if size is None else size
    if size < head:
        raise InvalidWrite(f"{ds.path}.npy: truncating into the .npy header")
    return size - head
