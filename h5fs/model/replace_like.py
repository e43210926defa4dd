"""A replacement of a dataset's data that keeps what the dataset is (`cp y.npy D.npy`).

When the new array has the dataset's dtype and fits its maximum shape, only the extent and the
data change, as `dset.resize(y.shape); dset[...] = y` does in h5py: the layout class, the chunk
shape and index type, the filters, the maximum shape, the fill value, the datatype message as
stored (shared or not) and the attributes stay. The new data goes into a dataset no link names,
made with D's own messages but the new extent and empty storage (`messages_like`); at close
`TreeEditor.replace_data` gives D that dataset's dataspace and layout in one transaction (D's old
storage freed with it), so D stays whole until the new data is complete.

What fits (`keeps_storage`):
- the dtype equal to the `.npy` view's, byte order included: a `.npy` of the other byte order
  holds other bytes, and converting them while they stream in would cut elements across writes,
  so such an array gets a layout of its own (as any array that does not fit);
- the same rank, each dimension within the maximum (chunked and structured-chunk storage), or
  the same shape (contiguous and compact storage cannot change shape);
- compact, contiguous, chunked or structured-chunk storage in this file: external and virtual
  datasets, and data the views convert (variable-length, references, non-IEEE numbers, array
  datatypes), are replaced by a layout of their own.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..format.messages import dataspace as DS
from ..format.messages import layout as L
from ..format.object_header import FLAG_SHARED
from ..storage.sources import fill_pattern
from . import messages as M
from .dataset import Dataset

# what a kept-storage replacement changes in D's header (the rest of its data messages stay)
STORAGE_MESSAGES = frozenset({M.DATASPACE, M.LAYOUT})
_KEPT_CLASSES = (L.COMPACT, L.CONTIGUOUS, L.CHUNKED, L.STRUCTURED)


def keeps_storage(ds: Dataset, dtype: np.dtype, shape: tuple[int, ...]) -> bool:
    """Whether an array of `dtype` and `shape` replaces `ds`'s data keeping its storage (the
    module docstring)."""
    lay, space = ds.layout, ds.dataspace
    if (lay.layout_class not in _KEPT_CLASSES or ds.header.first(M.EXTERNAL) is not None
            or ds.materialized is not None or ds.converted or space.kind == DS.NULL):
        return False
    if dtype != ds.npy_element_dtype or dtype.itemsize != ds.itemsize or len(shape) != len(space.dims):
        return False
    if not lay.chunked:
        return tuple(shape) == space.dims
    return all(m is None or d <= m for d, m in zip(shape, space.maxdims))


def messages_like(ds: Dataset, shape: tuple[int, ...], sizes) -> list[tuple[int, bytes, int]]:
    """`ds`'s data messages (type, body, flags) for a dataset of extent `shape` with no storage
    yet: the dataspace and layout encoded anew (never shared), the others as `ds` stores them
    (a shared one refers to what `ds`'s does, taking no use of it: the dataset they go into
    gives D only its dataspace and layout)."""
    out = []
    for raw in ds.header.messages:
        if raw.type == M.DATASPACE:
            space = M.encode(M.DATASPACE, replace(ds.dataspace, dims=tuple(shape)), sizes)
            out.append((raw.type, space, raw.flags & ~FLAG_SHARED))
        elif raw.type == M.LAYOUT:
            out.append((raw.type, M.encode(M.LAYOUT, _empty(ds), sizes), raw.flags & ~FLAG_SHARED))
        elif raw.type in (M.DATATYPE, M.FILL_OLD, M.FILL, M.FILTERS):
            out.append((raw.type, raw.data, raw.flags))
    return out


def _empty(ds: Dataset) -> L.DataLayout:
    """`ds`'s layout with no storage: an undefined index or data address (allocated by the
    first write), compact data of fill values."""
    lay = ds.layout
    if lay.layout_class == L.COMPACT:
        return replace(lay, compact_data=fill_pattern(ds.fill_value, ds.itemsize, 0, len(lay.compact_data)))
    if lay.layout_class == L.CONTIGUOUS:
        return replace(lay, address=None)
    index = lay.index
    if index is None:
        return lay
    # a single chunk's size, filter mask and sections describe the chunk that goes
    return replace(lay, index=replace(index, address=None, filtered_size=0, filter_mask=0, sections=None))
