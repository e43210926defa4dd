"""The header messages of a new dataset, as libhdf5 writes them when h5py creates it.

`dataset_messages(dtype, shape, ...)` returns the messages of the new dataset's object header in
libhdf5's order, each as (type, body, flags), and the records they encode; the caller makes the
header and links it. Nothing is allocated: addresses are undefined, as libhdf5 writes them until
data lands (late and incremental allocation, its defaults). A caller asking for early allocation
(`alloc_time=ALLOC_EARLY`, what the implicit chunk index needs) must allocate the storage and
put its address in the layout before publishing the header.

What libhdf5 writes (H5D__create, H5D__update_oh_info, H5D__layout_oh_create), by format bound
(libver.py) and layout:
- dataspace (flags 0): version 1 under the earliest bound, 2 from v108; maximum dimensions
  always stored, unlimited as all ones;
- datatype (constant): dtype_encode.datatype_of;
- fill value (constant): version 2 (earliest) or 3; allocation time late (contiguous),
  incremental (chunked) or early (compact), fill time "if set"; the value when one is given
  (h5py's `fillvalue=`), else none and still "defined" (libhdf5's default: zeros). Under the
  earliest bound a given value is also written as an old fill value message (type 4);
- filter pipeline (constant), chunked datasets with filters only: version 1 (earliest) or 2,
  filter_spec.pipeline;
- data layout (constant only when allocated early, not compact, unfiltered and not empty):
  compact (version 3, the data: the fill value or zeros), contiguous (version 3, address
  undefined, size = the data's), chunked: version 3 with a v1 B-tree under earliest and v108;
  from v110 version 4 with libhdf5's index: single chunk (fixed dims = chunk = current dims;
  with filters the "filtered single chunk" flag, size and mask 0), implicit (fixed dims, early
  allocation, no filters), fixed array (other fixed dims; 2^10-element data block pages),
  extensible array (one unlimited dim; 32-bit counts, 4-element index block, 4 pointers and 16
  elements minimum per block, 2^10-element pages), v2 B-tree (several unlimited dims; 2048-byte
  nodes, split at 100 %, merge at 40 %). libhdf5 2.0 (bound v200) writes version 5 for filtered
  chunked layouts (filtered chunk sizes `size of lengths` wide in the index), 4 otherwise;
- modification time (flags 0), only when times are tracked (h5py's `track_times`, default off)
  under the earliest bound: from v108 the version-2 object header holds the times
  (`NewDataset.header_times`) and there is no message.
h5py chooses the layout as `layout=None` here does: chunked when chunks, a (non-empty) maximum
shape or filters are given (chunks from h5py's guess_chunk when not), contiguous otherwise.

`layout="sparse"` makes a sparse dataset (structured chunk storage, spec 3.0): layout message
version 5, class 4, sparse chunks of two sections, the index chosen as for chunked datasets but
never implicit (a single chunk when the chunk is the whole fixed extent); `filters` are the
sections' (filter_spec.parse_section_filters, or a version 3 pipeline to copy), in a version 3
filter pipeline message.

Chunks for `cp x.npy` (`npy_storage`): the first dimension unlimited (so writes past the end
grow the dataset) and chunks of at most NPY_CHUNK_BYTES (1 MiB, h5py's own chunk ceiling and
libhdf5's default chunk cache size): trailing dimensions whole while they fit; the first one
that does not is cut to what fits, and the dimensions before it take 1; when all trailing ones
fit, the first takes as many rows as fit, at most the array's (a small array gets one small
chunk; an empty one, such as a file of bytes still to come, full 1 MiB chunks).
"""

from __future__ import annotations

import operator
import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..errors import InvalidWrite, TooLarge
from ..format.codec import DEFAULT_SIZES, Sizes
from ..format.messages.dataspace import MAX_RANK, SCALAR, SIMPLE, Dataspace
from ..format.messages.datatype import Datatype
from ..format.messages.fill_value import ALLOC_EARLY, ALLOC_INCREMENTAL, ALLOC_LATE, WRITE_IF_SET, FillValue
from ..format.messages.filter_pipeline import FilterPipeline
from ..format.messages.layout import (
    BTREE_V1, BTREE_V2, CHUNKED, COMPACT, CONTIGUOUS, EXTENSIBLE_ARRAY, FIXED_ARRAY, IMPLICIT, SINGLE,
    SINGLE_INDEX_WITH_FILTER, STRUCTURED, ChunkIndexInfo, DataLayout)
from ..format.structured_chunk import SPARSE, SPARSE_FIXED
from ..format.object_header import FLAG_CONSTANT
from . import messages as M
from .dataset import MAX_VIEW_BYTES
from .dtype_encode import datatype_of, moves_fields
from .filter_spec import Filter, parse_filters, parse_section_filters, pipeline, section_pipeline
from .libver import at_least, canonical

NPY_CHUNK_BYTES = 1 << 20
MAX_COMPACT = 0xFFFF - 4         # a message's 16-bit size less the compact layout's own 4 bytes
MAX_CHUNK_BYTES = 0xFFFFFFFF     # libhdf5: "chunk size must be < 4GB"
MAX_DIM = (1 << 64) - 2          # all ones means unlimited
LAYOUTS = ("contiguous", "compact", "chunked", "sparse")

# libhdf5's default chunk index parameters (H5Dpkg.h)
FARRAY_PARAMS = dict(page_bits=10)
EARRAY_PARAMS = dict(max_bits=32, index_elements=4, min_pointers=4, min_elements=16, page_bits=10)
BTREE2_PARAMS = dict(node_size=2048, split_percent=100, merge_percent=40)

# h5py's guess_chunk
CHUNK_BASE, CHUNK_MIN, CHUNK_MAX = 16 * 1024, 8 * 1024, 1024 * 1024


class LayoutError(InvalidWrite, ValueError):
    """Dataset creation parameters libhdf5 (or h5py) refuses."""


class Message(NamedTuple):
    type: int
    body: bytes
    flags: int


@dataclass(frozen=True, slots=True)
class NewDataset:
    messages: tuple[Message, ...]   # the object header's messages, in libhdf5's order
    dataspace: Dataspace
    datatype: Datatype
    fill: FillValue
    pipeline: FilterPipeline | None
    layout: DataLayout
    header_version: int             # libhdf5's object header version under this bound: 1 earliest, else 2
    header_times: bool              # a version-2 header stores the times (flag HDR_TIMES)


def dataset_messages(dtype: np.dtype | str, shape: tuple[int, ...], *, maxshape: tuple[int | None, ...] | None = None,
                     chunks: tuple[int, ...] | None = None, layout: str | None = None,
                     filters: str | tuple[Filter, ...] = (), fill=None, libver: str = "earliest",
                     sizes: Sizes = DEFAULT_SIZES, track_times: bool = False, mtime: int | None = None,
                     alloc_time: int | None = None) -> NewDataset:
    """The messages of a new dataset (see the module docstring). `filters`: a specification
    (filter_spec syntax) or parsed filters; `fill`: a value NumPy converts to `dtype`, or None;
    `mtime`: seconds since the epoch (now by default), used when a message holds the time."""
    libver = canonical(libver)
    dt = np.dtype(dtype)
    shape = _dims(shape, "shape")
    maxdims = _maxdims(shape, maxshape)
    if isinstance(filters, str) and layout != "sparse":
        filters = parse_filters(filters)
    if layout is None:
        layout = "chunked" if chunks is not None or maxshape or filters else "contiguous"
    if layout not in LAYOUTS:
        raise LayoutError(f"unknown layout {layout!r} (one of {', '.join(LAYOUTS)})")
    if layout not in ("chunked", "sparse") and chunks is not None:
        raise LayoutError(f"chunks {chunks} for a {layout} dataset")
    if alloc_time not in (None, ALLOC_EARLY, ALLOC_LATE, ALLOC_INCREMENTAL):
        raise LayoutError(f"unknown allocation time {alloc_time}")
    datatype = datatype_of(dt, libver)
    earliest = not at_least(libver, "v108")
    count = int(np.prod(shape, dtype=object)) if shape else 1
    value = _fill_bytes(dt, fill)
    size = datatype.size   # NumPy's itemsize, or more where h5py moves overlapping fields apart
    if count * size > MAX_VIEW_BYTES:   # the mount could not show it (a dense or sparse view alike)
        raise TooLarge(f"shape {shape} of {size}-byte elements: {count * size} bytes, more than a file can "
                       f"show ({MAX_VIEW_BYTES})")
    alloc = alloc_time or {"contiguous": ALLOC_LATE, "compact": ALLOC_EARLY}.get(layout, ALLOC_INCREMENTAL)
    if layout == "sparse":
        if alloc != ALLOC_INCREMENTAL:
            raise LayoutError("a sparse dataset allocates a chunk when an element of it is defined")
        chunk_dims = _chunks(shape, maxdims, chunks, dt.itemsize, size)
        if isinstance(filters, FilterPipeline):   # another sparse dataset's, as it is
            pipe = filters if filters.sections else None
        else:
            sections = parse_section_filters(filters) if isinstance(filters, str) else dict(filters)
            pipe = section_pipeline(sections, datatype, chunk_dims)
        lay = _sparse_layout(shape, maxdims, chunk_dims, size, pipe is not None)
    elif layout == "chunked":
        chunk_dims = _chunks(shape, maxdims, chunks, dt.itemsize, size)
        pipe = pipeline(filters, datatype, chunk_dims, 1 if earliest else 2) if filters else None
        lay = _chunked_layout(libver, shape, maxdims, chunk_dims, size, pipe is not None, alloc)
    else:
        pipe = None
        lay = _flat_layout(layout, shape, maxdims, filters, count * size, value or bytes(size), alloc, sizes)
    space = Dataspace(SIMPLE if shape else SCALAR, shape, maxdims, 1 if earliest else 2)
    fv = FillValue(value, alloc, WRITE_IF_SET, 2 if earliest else 3, True)
    constant_layout = alloc == ALLOC_EARLY and layout != "compact" and pipe is None and count > 0
    out = [Message(M.DATASPACE, M.encode(M.DATASPACE, space, sizes), 0),
           Message(M.DATATYPE, M.encode(M.DATATYPE, datatype, sizes), FLAG_CONSTANT),
           Message(M.FILL, M.encode(M.FILL, fv, sizes), FLAG_CONSTANT)]
    if earliest and value is not None:
        out.append(Message(M.FILL_OLD, M.encode(M.FILL_OLD, fv, sizes), FLAG_CONSTANT))
    if pipe is not None:
        out.append(Message(M.FILTERS, M.encode(M.FILTERS, pipe, sizes), FLAG_CONSTANT))
    out.append(Message(M.LAYOUT, M.encode(M.LAYOUT, lay, sizes), FLAG_CONSTANT if constant_layout else 0))
    if earliest and track_times:
        seconds = int(time.time()) if mtime is None else mtime
        out.append(Message(M.MTIME, M.encode(M.MTIME, seconds, sizes), 0))
    return NewDataset(tuple(out), space, datatype, fv, pipe, lay, 1 if earliest else 2,
                      track_times and not earliest)


def _dims(dims, what: str) -> tuple[int, ...]:
    try:
        dims = tuple(operator.index(d) for d in dims)
    except TypeError:
        raise LayoutError(f"{what} {tuple(dims)}: not integers") from None
    if len(dims) > MAX_RANK or any(not 0 <= d <= MAX_DIM for d in dims):
        raise LayoutError(f"{what} {dims}: at most {MAX_RANK} dimensions of 0..{MAX_DIM}")
    return dims


def _maxdims(shape: tuple[int, ...], maxshape) -> tuple[int | None, ...]:
    if maxshape is None:
        return shape
    if len(maxshape) != len(shape):
        raise LayoutError(f"maximum shape {tuple(maxshape)} does not have the rank of shape {shape}")
    maxdims = tuple(None if m is None else _dims((m,), "maximum shape")[0] for m in maxshape)
    if any(m is not None and m < d for d, m in zip(shape, maxdims)):
        raise LayoutError(f"maximum shape {maxdims} is smaller than shape {shape}")
    return maxdims


def _fill_bytes(dt: np.dtype, fill) -> bytes | None:
    if fill is None:
        return None
    if moves_fields(dt):
        raise LayoutError(f"fill value for {dt}: h5py moves its overlapping fields apart, NumPy cannot "
                          "give the value's bytes")
    try:
        value = np.asarray(fill, dtype=dt)
    except (TypeError, ValueError, OverflowError) as e:
        raise LayoutError(f"fill value {fill!r} does not convert to {dt}: {e}") from None
    if value.nbytes != dt.itemsize:
        raise LayoutError(f"fill value {fill!r} is not one {dt} element")
    return value.tobytes()


def guess_chunks(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """h5py's guess_chunk: halve the dimensions in turn (first to last) until the chunk is near
    a target growing with the dataset's size (8 KiB to 1 MiB); a zero dimension counts as 1024."""
    if not shape:
        raise LayoutError("a scalar dataset cannot be chunked")
    dims = np.array([d or 1024 for d in shape], dtype="=f8")

    def nbytes() -> np.float64:
        n = itemsize
        for d in dims:
            n *= d
        return n

    target = CHUNK_BASE * 2 ** np.log10(nbytes() / (1024.0 * 1024))
    target = min(max(target, CHUNK_MIN), CHUNK_MAX)
    i = 0
    while True:
        size = nbytes()
        if (size < target or abs(size - target) / target < 0.5) and size < CHUNK_MAX:
            break
        if size == itemsize:
            break
        dims[i % len(dims)] = np.ceil(dims[i % len(dims)] / 2.0)
        i += 1
    return tuple(int(d) for d in dims)


def npy_storage(shape: tuple[int, ...], itemsize: int,
                target: int = NPY_CHUNK_BYTES) -> tuple[tuple[int, ...] | None, tuple[int | None, ...] | None]:
    """(chunks, maximum shape) for an array copied in as a `.npy` (module docstring), to pass
    to dataset_messages; (None, None), contiguous, for a scalar or an array with an empty
    trailing dimension (no chunk fits a fixed dimension of 0, and no data will ever come)."""
    shape = tuple(shape)
    if not shape or 0 in shape[1:]:
        return None, None
    chunks = [1] * len(shape)
    inner = itemsize
    for i in range(len(shape) - 1, 0, -1):
        if inner * shape[i] > target:
            chunks[i] = max(1, target // inner)
            break
        chunks[i] = shape[i]
        inner *= shape[i]
    else:
        rows = max(1, target // inner)
        chunks[0] = min(rows, shape[0]) if shape[0] else rows
    return tuple(chunks), (None, *shape[1:])


def _chunks(shape, maxdims, chunks, itemsize: int, element_size: int) -> tuple[int, ...]:
    """The chunk shape (guessed from NumPy's `itemsize`, as h5py does) for elements of
    `element_size` bytes as stored."""
    if not shape:
        raise LayoutError("a scalar dataset cannot be chunked")
    chunks = guess_chunks(shape, itemsize) if chunks is None or chunks is True else _dims(chunks, "chunks")
    if len(chunks) != len(shape):
        raise LayoutError(f"chunks {chunks} do not have the rank of shape {shape}")
    if any(c == 0 or c > 0xFFFFFFFF or (m is not None and c > m) for c, m in zip(chunks, maxdims)):
        raise LayoutError(f"chunks {chunks}: each 1..2^32-1 and within the maximum shape {maxdims}")
    if element_size * int(np.prod(chunks, dtype=object)) > MAX_CHUNK_BYTES:
        raise LayoutError(f"chunks {chunks} of {element_size}-byte elements exceed 4 GiB")
    return chunks


def _chunked_layout(libver: str, shape, maxdims, chunks, element_size: int, filtered: bool,
                    alloc: int) -> DataLayout:
    if not at_least(libver, "v110"):
        return DataLayout(3, CHUNKED, chunk_dims=chunks, element_size=element_size,
                          index=ChunkIndexInfo(BTREE_V1, None))
    version = 5 if filtered and at_least(libver, "v200") else 4
    flags, index = _index(shape, maxdims, chunks, filtered, implicit=not filtered and alloc == ALLOC_EARLY)
    return DataLayout(version, CHUNKED, chunk_dims=chunks, element_size=element_size, flags=flags, index=index)


def _sparse_layout(shape, maxdims, chunks, element_size: int, filtered: bool) -> DataLayout:
    """Structured chunk storage (layout version 5, class 4) with the index libhdf5 would choose
    for these maximum dimensions, implicit excepted (it cannot hold structured chunks)."""
    flags, index = _index(shape, maxdims, chunks, filtered, implicit=False)
    return DataLayout(5, STRUCTURED, chunk_dims=chunks, element_size=element_size, flags=flags, index=index,
                      composition=SPARSE_FIXED, structured_type=SPARSE)


def _index(shape, maxdims, chunks, filtered: bool, implicit: bool) -> tuple[int, ChunkIndexInfo]:
    """(layout flags, index information) of libhdf5's index for these dimensions."""
    unlimited = sum(m is None for m in maxdims)
    flags, params = 0, {}
    if unlimited > 1:
        itype, params = BTREE_V2, BTREE2_PARAMS
    elif unlimited:
        itype, params = EXTENSIBLE_ARRAY, EARRAY_PARAMS
    elif shape == maxdims == chunks:
        itype, flags = SINGLE, SINGLE_INDEX_WITH_FILTER if filtered else 0
    elif implicit:
        itype = IMPLICIT
    else:
        itype, params = FIXED_ARRAY, FARRAY_PARAMS
    return flags, ChunkIndexInfo(itype, None, **params)


def _flat_layout(layout: str, shape, maxdims, filters, nbytes: int, fill: bytes, alloc: int,
                 sizes: Sizes) -> DataLayout:
    if filters:
        raise LayoutError(f"filters need a chunked layout, not {layout}")
    if maxdims != shape:
        raise LayoutError(f"a {layout} dataset cannot grow (maximum shape {maxdims}): give it chunks")
    if layout == "contiguous":
        if nbytes >> (8 * sizes.length):
            raise LayoutError(f"{nbytes} bytes of data do not fit this file's {sizes.length}-byte lengths")
        return DataLayout(3, CONTIGUOUS, address=None, size=nbytes)
    if alloc != ALLOC_EARLY:
        raise LayoutError("a compact dataset is allocated early (with its header)")
    if nbytes > MAX_COMPACT:
        raise LayoutError(f"{nbytes} bytes of data exceed a compact dataset's {MAX_COMPACT}")
    return DataLayout(3, COMPACT, compact_data=fill * (nbytes // len(fill)))
