"""Datasets: shape, type, storage facts, and the byte views the mount serves."""

from __future__ import annotations

import functools

import numpy as np

from ..errors import FormatError, H5fsError, Unsupported
from ..format.messages import dataspace as DS
from ..format.messages import layout as L
from ..format.messages.filter_pipeline import FilterPipeline
from ..format.structured_chunk import SPARSE
from ..storage.chunked import ChunkedSource
from ..storage.source_registry import chunks_filtered, index_context, open_source
from ..storage.sources import RawSource
from . import messages as M
from .dtypes import describe, is_converted, needs_conversion, npy_dtype, numpy_dtype, split_subarray
from .external import external_facts
from .objects import H5Object, derived
from .points_view import PointsView
from .safety_net import guarded
from .varlen_views import dataset_views, decode_elements
from .virtual import virtual_extent, virtual_facts

# Views whose bytes must be computed as a whole (variable-length data) are refused above this size.
MAX_MATERIALIZED = 256 * 1024 * 1024
# st_size is a signed 64-bit number: a (hostile or sparse) extent beyond it cannot be served.
MAX_VIEW_BYTES = (1 << 63) - 1
DTYPE_NBYTES = 500    # a NumPy dtype NumPy does not share (compound, string): more for each field
VIEWS = "materialized views"


def _views_nbytes(views: tuple[bytes, np.dtype, bytes]) -> int:
    raw, _, body = views
    return DTYPE_NBYTES + len(raw) + (len(body) if body is not raw else 0)


class Dataset(H5Object):
    __slots__ = ()
    kind = "dataset"

    # -- description (validated messages: cached decoded, checked on each use) ---------------
    @property
    def dataspace(self) -> DS.Dataspace:
        space = self.message(M.DATASPACE)
        if space is None:
            raise FormatError(f"{self.path}: dataset has no dataspace message")
        return space

    @property
    def datatype(self):
        dt = self.message(M.DATATYPE)
        if dt is None:
            raise FormatError(f"{self.path}: dataset has no datatype message")
        return dt

    @derived(lambda dt: DTYPE_NBYTES + 200 * len(dt.fields or ()) if dt.fields is not None or dt.kind in "SUVO" else 0)
    def dtype(self) -> np.dtype:
        return numpy_dtype(self.datatype)

    @property
    def itemsize(self) -> int:
        return self.datatype.size

    @property
    def shape(self) -> tuple[int, ...]:
        if self.layout.layout_class == L.VIRTUAL:
            # an unlimited virtual dataset's extent follows its sources, as h5py shows it
            return virtual_extent(self)
        return self.dataspace.dims

    @property
    def maxshape(self) -> tuple[int | None, ...]:
        return self.dataspace.maxdims

    @property
    def layout(self) -> L.DataLayout:
        lay = self.message(M.LAYOUT)
        if lay is None:
            raise FormatError(f"{self.path}: dataset has no data layout message")
        return lay

    @property
    def pipeline(self) -> FilterPipeline | None:
        return self.message(M.FILTERS)

    @property
    def filters(self):
        pipe = self.pipeline
        return pipe.filters if pipe is not None else ()

    @property
    def sparse(self) -> bool:
        """Structured chunk storage (a sparse dataset)."""
        return self.layout.layout_class == L.STRUCTURED

    @property
    def is_virtual(self) -> bool:
        """Its bytes are its source datasets' (a virtual dataset): writes elsewhere change them."""
        return self.layout.layout_class == L.VIRTUAL

    @property
    def index_filtered(self) -> bool:
        """Whether the chunk index records filtered chunks."""
        return chunks_filtered(self.pipeline)

    @property
    def stored_externally(self) -> bool:
        """Contiguous storage in external data files (an External Data Files message)."""
        return self.header.first(M.EXTERNAL) is not None

    @property
    def fill_value(self) -> bytes | None:
        fv = self.message(M.FILL)
        if fv is None:
            fv = self.message(M.FILL_OLD)
        if fv is None or fv.value is None:
            return None
        if len(fv.value) != self.itemsize:
            raise FormatError(f"{self.path}: fill value of {len(fv.value)} bytes for {self.itemsize}-byte elements")
        return fv.value

    @property
    @guarded
    def chunks(self) -> tuple[int, ...] | None:
        return self.layout.chunk_dims if self.layout.chunked else None

    # -- storage ----------------------------------------------------------------------------
    @derived(lambda source: source.footprint())
    def source(self) -> RawSource:
        """The raw bytes, from the source its layout opens (storage/source_registry.py)."""
        # the generation before the header is read: chunks cached under it come from this
        # version's index or a later one, never an earlier one
        generation = self.file.generation(self.address)
        return open_source(self, (self.address, generation))

    @property
    def data_bytes(self) -> int:
        """The dataspace's elements times the element size."""
        size = self.dataspace.count * self.itemsize
        if size > MAX_VIEW_BYTES:
            raise Unsupported(f"{self.path}: {size} bytes of data, more than a file can show ({MAX_VIEW_BYTES})")
        return size

    def _source_size(self) -> int:
        """The source's size; a chunked one's without opening its index (a `stat` needs no more)."""
        return self.source.size if self.layout.layout_class != L.CHUNKED else self._chunked_size

    @derived(60)   # asked by every write (whether it grows the dataset): checked once per header
    def _chunked_size(self) -> int:
        """The data's bytes, what a chunk index's context checks checked first (chunked storage)."""
        if self.layout.layout_class == L.CHUNKED:   # what it checks fails the views now, as the source would
            index_context(self, self.dataspace, self.layout)
        return self.data_bytes

    @property
    def facts_from_header(self) -> bool:
        """Compact and contiguous storage: the facts need no I/O (chunked storage sizes walk the
        index, external and virtual facts read heaps)."""
        return self.layout.layout_class in (L.COMPACT, L.CONTIGUOUS) and not self.stored_externally

    @property
    def prefetchable(self) -> bool:
        """Reads decode filtered chunks into the shared cache, and the `.npy` body is the raw
        view: decoding ahead of a sequential reader pays off."""
        return (self.materialized is None and not self.converted and bool(self.filters)
                and isinstance(self.source, ChunkedSource))

    def decode_jobs(self, offset: int, size: int) -> list:
        """One job per chunk under raw bytes [offset, offset+size) not decoded yet: run on
        several threads, a tiled row of chunks decodes on every core (no I/O to list them)."""
        source = self.source
        coords = source.chunks_under(offset, size, missing=True)
        jobs = [functools.partial(self._warm_chunk, c) for c in coords]
        if len(coords) > 1 and source.index.ctx.reader.source.remote:   # their bytes in one go, first
            jobs.insert(0, functools.partial(self._fetch_ahead, coords))
        return jobs

    @guarded
    def _fetch_ahead(self, coords: list[tuple[int, ...]]) -> None:
        self.source.fetch_ahead(coords)

    @guarded
    def _warm_chunk(self, coords: tuple[int, ...]) -> None:
        self.source.warm_chunk(coords)

    @guarded
    def points_view(self):
        """A sparse dataset's defined elements as a `.npy` (model/points_view.py), kept in the
        object's state; making it reads the selection of every stored chunk."""
        if not self.sparse:
            raise Unsupported(f"{self.path}: not a sparse dataset")
        return self.cached("points view", lambda: PointsView(self), lambda view: 1000 + 200 * len(view.rows))

    @property
    @guarded
    def storage_size(self) -> int:
        return self.source.allocated()

    # -- views ------------------------------------------------------------------------------
    @derived(100)
    def _view_kind(self) -> tuple[MaterializedView | None, bool]:
        """(`materialized`, `converted`): what the views of this datatype are made of."""
        if is_converted(self.datatype):
            return MaterializedView(self.detached()), False
        return None, needs_conversion(self.datatype)

    @property
    def materialized(self) -> MaterializedView | None:
        """Variable-length and reference data: the views are computed from decoded values."""
        return self._view_kind[0]

    @property
    def converted(self) -> bool:
        """Fixed-size numbers NumPy cannot hold as stored (non-IEEE floats, padded integers): the
        `.npy` view converts just the elements a read asks for; the raw view is the stored bytes."""
        return self._view_kind[1]

    def _converted_range(self, offset: int, size: int) -> bytes:
        out_size = self.npy_element_dtype.itemsize
        offset = max(0, offset)
        size = max(0, min(size, self.npy_body_size - offset))
        if size == 0:
            return b""
        e0, e1 = offset // out_size, -(-(offset + size) // out_size)
        stored = self.source.read(e0 * self.itemsize, (e1 - e0) * self.itemsize)
        body = decode_elements(self.file, self.datatype, stored, e1 - e0, self.path).tobytes()
        skip = offset - e0 * out_size
        return body[skip:skip + size]

    @property
    @guarded
    def raw_size(self) -> int:
        m = self.materialized
        return m.raw_size if m is not None else self._source_size()

    @guarded
    def read_raw(self, offset: int, size: int) -> bytes | memoryview:
        m = self.materialized
        return m.read_raw(offset, size) if m is not None else self.source.read(offset, size)

    @guarded
    def read_cached(self, offset: int, size: int) -> bytes | None:
        """The raw view's bytes if they can be served without I/O or decoding, else None."""
        m = self.materialized
        if m is not None:
            return m.read_raw(offset, size) if m.ready else None
        return self.source.read_cached(offset, size)

    @property
    @guarded
    def npy_element_dtype(self) -> np.dtype:
        """The `.npy` dtype of one dataset element: a subarray dtype for an array datatype (a
        sparse dataset's points hold such values whole)."""
        m = self.materialized
        return m.npy_dtype if m is not None else npy_dtype(self.datatype)

    @property
    def npy_dtype(self) -> np.dtype:
        """The `.npy` view's dtype: an array datatype's base type, as h5py reads it."""
        return split_subarray(self.npy_element_dtype)[0]

    @property
    @guarded
    def npy_shape(self) -> tuple[int, ...]:
        """The `.npy` view's shape: an array datatype's dims follow the dataspace's, as h5py
        reads it (the bytes are the same elements in the same order)."""
        # a null dataspace holds no element: shape () would claim one, (0,) claims none
        shape = (0,) if self.dataspace.kind == DS.NULL else self.shape
        return shape + split_subarray(self.npy_element_dtype)[1]

    @property
    @guarded
    def npy_body_size(self) -> int:
        m = self.materialized
        if m is not None:
            return m.npy_body_size
        return self.dataspace.count * self.npy_element_dtype.itemsize if self.converted else self._source_size()

    @guarded
    def read_npy_body(self, offset: int, size: int) -> bytes | memoryview:
        m = self.materialized
        if m is not None:
            return m.read_npy_body(offset, size)
        return self._converted_range(offset, size) if self.converted else self.source.read(offset, size)

    def read_npy_cached(self, offset: int, size: int) -> bytes | None:
        """The `.npy` body's bytes if they can be served without I/O or decoding, else None."""
        m = self.materialized
        if m is not None:
            return m.read_npy_body(offset, size) if m.ready else None
        return None if self.converted else self.source.read_cached(offset, size)

    def read_array(self) -> np.ndarray:
        """The whole dataset as a NumPy array (for small datasets and tests)."""
        body = self.read_npy_body(0, self.npy_body_size)
        return np.frombuffer(body, self.npy_dtype).reshape(self.npy_shape)

    def _compute_facts(self) -> dict[str, str]:
        out = super()._compute_facts()
        out["dtype"] = describe(self.datatype)
        out["shape"] = _tuple(self.shape)
        out["maxshape"] = _tuple(self.maxshape)
        out["layout"] = self.layout.class_name
        if self.chunks is not None:
            out["chunks"] = _tuple(self.chunks)
            out["index"] = L.INDEX_NAMES.get(self.layout.index.index_type, "?")
        out["filters"] = ",".join(f.label for f in self.filters) if self.filters else "none"
        if self.sparse:
            out.update(self._sparse_facts())
        out["fill_value"] = self._fill_text()
        out["storage_size"] = str(self.storage_size)
        if self.layout.layout_class == L.VIRTUAL:
            out.update(virtual_facts(self))
        elif self.stored_externally:
            out.update(external_facts(self))
        return out

    def _sparse_facts(self) -> dict[str, str]:
        lay, pipe = self.layout, self.message(M.FILTERS)
        kind = "sparse" if lay.structured_type & SPARSE else f"type {lay.structured_type:#x}"
        names = ("selection", "values")
        parts = [f"{names[i] if i < len(names) else f'section {i}'}={'+'.join(f.label for f in filters)}"
                 for i, filters in (pipe.sections if pipe is not None else ())]
        return {"layout": f"structured-chunk ({kind})", "filters": ",".join(parts) or "none",
                "defined": str(self.points_view().count)}

    def _fill_text(self) -> str:
        fill = self.fill_value
        if fill is None:
            return "0 (default)"
        try:
            if self.converted:
                return str(decode_elements(self.file, self.datatype, fill, 1, self.path)[0])
            return str(np.frombuffer(fill, self.dtype)[0])
        except H5fsError as e:
            if e.transient:
                raise
            return fill.hex()
        except (TypeError, ValueError):
            return fill.hex()


def _tuple(values) -> str:
    return "(" + ", ".join("unlimited" if v is None else str(v) for v in values) + ("," if len(values) == 1 else "") + ")"


class MaterializedView:
    """Views of variable-length/reference data: decoded once into the file's metadata cache
    (under the dataset's address), then served from memory."""

    def __init__(self, ds: Dataset):
        self.ds = ds
        if ds.source.size > MAX_MATERIALIZED:
            raise Unsupported(f"{ds.path}: variable-length dataset too large to serve ({ds.source.size} bytes)")

    @property
    def ready(self) -> bool:
        """True while the views are cached (reads do no I/O)."""
        return self.ds.has(VIEWS)

    @property
    def _views(self) -> tuple[bytes, np.dtype, bytes]:
        return self.ds.cached(VIEWS, lambda: dataset_views(self.ds), _views_nbytes)

    @property
    def raw_size(self) -> int:
        return len(self._views[0])

    def read_raw(self, offset: int, size: int) -> bytes:
        return self._views[0][offset:offset + size]

    @property
    def npy_dtype(self) -> np.dtype:
        return self._views[1]

    @property
    def npy_body_size(self) -> int:
        return len(self._views[2])

    def read_npy_body(self, offset: int, size: int) -> bytes:
        return self._views[2][offset:offset + size]


