"""An HSDS dataset as the mount shows a local one: shape, type, facts, and its raw and `.npy`
views (the same bytes a local file with the same content gives).

Fixed-size types: the raw view is the row-major element bytes as HSDS sends them (the stored
byte order; compounds packed), read through the domain's block cache (blocks.py); the `.npy`
body is the same bytes. Variable-length data and references: both views are built whole from
the decoded values by the local engine's own code (elements.py, `values.to_npy`), as
`model/varlen_views.py` builds them for a local file: the `.npy` body fixed-width unicode or
{length, values} records, the raw view text lines (or the `.npy` body); at most
MAX_MATERIALIZED bytes of stored elements are taken, else the error names the dataset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...errors import CannotWrite, ReadOnly, Unsupported
from ...format.messages import dataspace as DS
from ...format.messages.datatype import Datatype
from ...storage.hsds.client import whole
from ..dtypes import describe, is_converted, needs_conversion, npy_dtype, numpy_dtype, split_subarray
from ..varlen_views import views_of
from .datatypes import VLEN_SIZE, fill_text, filter_text, layout_text, linked_layout, record_of
from .elements import npy_values
from .objects import HsdsObject

MAX_MATERIALIZED = 256 * 1024 * 1024    # as model/dataset.py: stored bytes of a vlen dataset's views
VIEWS = "views"
DTYPE_NBYTES = 500      # as model/dataset.py: a dtype NumPy does not share


@dataclass(frozen=True, slots=True)
class NoLocalLayout:
    """What `namespace` may ask of a layout message where there is none: no chunk index to
    walk, nothing to answer from an object header (`chunked` False keeps its header tests off
    the event loop thread; the `layout` fact is HSDS's)."""
    chunked: bool = False
    index: None = None
    layout_class: None = None   # a replacement never keeps local storage (model/replace_like.py)


NO_LOCAL_LAYOUT = NoLocalLayout()


class HsdsDataset(HsdsObject):
    __slots__ = ()
    kind = "dataset"
    sparse = False
    is_virtual = False
    prefetchable = False        # the block cache fetches in parallel already
    walks_index = False         # storage_size comes with the record
    layout = NO_LOCAL_LAYOUT

    # -- description -------------------------------------------------------------------------
    @property
    def datatype(self) -> Datatype:
        return record_of(self.record.type)

    @property
    def dtype(self) -> np.dtype:
        return numpy_dtype(self.datatype)

    @property
    def itemsize(self) -> int:
        return self.datatype.size

    @property
    def dataspace(self) -> DS.Dataspace:
        shape, maxshape = self.record.shape, self.record.maxshape
        if shape is None:
            return DS.Dataspace(DS.NULL)
        return DS.Dataspace(DS.SIMPLE if shape else DS.SCALAR, shape, maxshape if maxshape is not None else shape)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.dataspace.dims

    @property
    def maxshape(self) -> tuple[int | None, ...]:
        return self.dataspace.maxdims

    @property
    def chunks(self) -> tuple[int, ...] | None:
        return self.record.chunks

    @property
    def count(self) -> int:
        """Elements in the dataspace (none in an H5S_NULL one)."""
        space = self.dataspace
        return 0 if space.kind == DS.NULL else math.prod(space.dims)

    @property
    def storage_size(self) -> int:
        """Bytes HSDS has allocated for the data, as its storage scan last counted them (0 until
        it has)."""
        size = self.record.raw.get("allocated_size")
        return size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else 0

    def points_view(self):
        raise Unsupported(f"{self.path}: sparse datasets (a `.points.npy` view) are not served from HSDS")

    def check_writable(self) -> None:
        """ReadOnly or CannotWrite, naming the dataset, when its data cannot be written here."""
        if linked_layout(self.record.layout):
            raise ReadOnly(f"{self.path}: HSDS serves it from a linked HDF5 file: read-only")
        if self.materialized:
            raise CannotWrite(f"{self.path}: writing variable-length or reference data is not supported")

    # -- views -------------------------------------------------------------------------------
    @property
    def materialized(self) -> bool:
        """Variable-length data or references: the views are built whole from the values."""
        dt = self.datatype
        if needs_conversion(dt):    # record_of makes no such type; a safety net for later ones
            raise Unsupported(f"{self.path}: {describe(dt)} values from HSDS")
        return is_converted(dt)

    def _views(self) -> tuple[bytes, np.dtype, bytes]:
        """(raw view, `.npy` element dtype, `.npy` body), kept in the data cache: its budget
        bounds them (the metadata cache counts objects, not bytes)."""
        cache, key = self.domain.chunk_cache, (self.id, VIEWS)
        views = cache.get(key)
        if views is None:
            views = self._build_views()
            raw, _, body = views
            cache.put(key, views, DTYPE_NBYTES + len(raw) + (len(body) if body is not raw else 0))
        return views

    def _without_requests(self, which: int, offset: int, size: int) -> bytes | None:
        """Bytes of view `which` (0 raw, 2 `.npy` body) when the record and the data are kept,
        else None: no request (the FUSE layer asks on its event loop thread)."""
        rec = self.domain.meta.peek(self.id, "record", None)
        if rec is None:
            return None
        dt = record_of(rec.type)
        if is_converted(dt):
            views = self.domain.chunk_cache.get((self.id, VIEWS))
            return None if views is None else _cut(views[which], offset, size)
        if rec.shape is None or math.prod(rec.shape) == 0:
            return b""
        return self.domain.blocks.read(self.id, rec.shape, dt.size, offset, size, cached_only=True)

    def _build_views(self) -> tuple[bytes, np.dtype, bytes]:
        rec, count = self.record, self.count
        if count * VLEN_SIZE > MAX_MATERIALIZED:
            raise Unsupported(f"{self.path}: variable-length dataset too large to serve ({count} elements)")
        if count == 0:
            values = np.zeros(0, rec.dtype)
        else:
            values = self.domain.client.read(self.id, rec.dtype, whole(rec.shape) if rec.shape else None)
        return views_of(npy_values(values, self.datatype, self.domain.address_of, self.domain.ref_text))

    def _read(self, offset: int, size: int) -> bytes:
        if self.count == 0:     # an H5S_NULL dataspace has shape () and no element
            return b""
        return self.domain.blocks.read(self.id, self.shape, self.itemsize, offset, size)

    @property
    def raw_size(self) -> int:
        return len(self._views()[0]) if self.materialized else self.count * self.itemsize

    def read_raw(self, offset: int, size: int) -> bytes:
        if self.materialized:
            return _cut(self._views()[0], offset, size)
        return self._read(offset, size)

    def read_cached(self, offset: int, size: int) -> bytes | None:
        """The raw view's bytes if no request is needed, else None."""
        return self._without_requests(0, offset, size)

    @property
    def npy_element_dtype(self) -> np.dtype:
        return self._views()[1] if self.materialized else npy_dtype(self.datatype)

    @property
    def npy_dtype(self) -> np.dtype:
        """An array type's base type, as h5py reads it (its dims go to the shape)."""
        return split_subarray(self.npy_element_dtype)[0]

    @property
    def npy_shape(self) -> tuple[int, ...]:
        # an H5S_NULL dataspace holds no element: shape () would claim one
        shape = (0,) if self.dataspace.kind == DS.NULL else self.shape
        return shape + split_subarray(self.npy_element_dtype)[1]

    @property
    def npy_body_size(self) -> int:
        return len(self._views()[2]) if self.materialized else self.count * self.itemsize

    def read_npy_body(self, offset: int, size: int) -> bytes:
        if self.materialized:
            return _cut(self._views()[2], offset, size)
        return self._read(offset, size)

    def read_npy_cached(self, offset: int, size: int) -> bytes | None:
        return self._without_requests(2, offset, size)

    def read_array(self) -> np.ndarray:
        """The whole dataset as its `.npy` array (small datasets and tests)."""
        body = self.read_npy_body(0, self.npy_body_size)
        return np.frombuffer(body, self.npy_dtype).reshape(self.npy_shape)

    # -- facts -------------------------------------------------------------------------------
    def _compute_facts(self) -> dict[str, str]:
        rec = self.record
        out = super()._compute_facts()
        out["dtype"] = describe(self.datatype)
        out["shape"] = _tuple(self.shape)
        out["maxshape"] = _tuple(self.maxshape)
        out["layout"] = layout_text(rec.layout)
        if self.chunks is not None:
            out["chunks"] = _tuple(self.chunks)
        out["filters"] = filter_text(rec.filters)
        try:
            stored = self.dtype
        except Unsupported:
            stored = rec.dtype
        out["fill_value"] = fill_text(rec.fill_value, rec.dtype, stored)
        out["storage_size"] = str(self.storage_size)
        return out


def _cut(data: bytes, offset: int, size: int) -> bytes:
    offset = max(0, offset)
    return data[offset:offset + max(0, size)]


def _tuple(values: tuple) -> str:
    """A shape as the local engine words it: "(3,)", "(2, unlimited)", "()"."""
    return "(" + ", ".join("unlimited" if v is None else str(v) for v in values) + ("," if len(values) == 1 else "") + ")"
