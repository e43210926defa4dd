"""A dataset's data replaced on an HSDS mount (`cp x.npy D.npy`: O_TRUNC, then the array).

The array arrives in an anonymous dataset of D's stored type and the new shape (no link names
it; HSDS chunks it as it sees fit), so that D keeps its values until the array is whole, as on
a local mount. Once it is, its values are copied into D, resized to the new shape first: D keeps
its id, its links and its attributes, as a local D keeps its address. The anonymous dataset is
deleted then, or at the last close when the array never became whole.

HSDS cannot change a dataset's type, rank or a dimension it has no room for (its maximum), and
its datasets served from a linked HDF5 file (`hsload --link`) are read-only: such an array is
refused before any of it is sent (ENOTSUP, EROFS), D unchanged.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ...errors import CannotWrite

if TYPE_CHECKING:
    from .dataset import HsdsDataset
    from .domain import HsdsDomain
    from .writeback import HsdsWriteback

COPY_BYTES = 16 << 20   # a copy from the anonymous dataset into D goes this many bytes at a time


def check_fits(ds: HsdsDataset, dtype: np.dtype, shape: tuple[int, ...]) -> None:
    """ReadOnly or CannotWrite, naming D and the array, unless an array of `dtype` and `shape`
    can become D's data."""
    ds.check_writable()
    want = f"an array of {np.dtype(dtype).str} {tuple(shape)}"
    if np.dtype(dtype) != ds.npy_element_dtype or len(shape) != len(ds.shape):
        raise CannotWrite(f"{ds.path}: HSDS cannot change a dataset's type or rank ({ds.npy_element_dtype.str} "
                          f"{ds.shape}) to {want}: remove it first")
    for n, now, limit in zip(shape, ds.shape, ds.maxshape):
        if n != now and limit is not None and (n > limit or limit == now):
            raise CannotWrite(f"{ds.path}: {want} exceeds its maximum shape {ds.maxshape} (HSDS cannot change it)")


def create_source(domain: HsdsDomain, ds: HsdsDataset, dtype: np.dtype, shape: tuple[int, ...]) -> int:
    """The anonymous dataset that receives the array replacing `ds`'s data; its address."""
    check_fits(ds, dtype, shape)
    made = domain.client.create_dataset(ds.record.dtype, tuple(shape), type_json=ds.record.type)
    return domain.address_of(made.id)


def copy_into(domain: HsdsDomain, wb: HsdsWriteback, ds: HsdsDataset, source: int) -> None:
    """The anonymous dataset's values become `ds`'s (resized to its shape first), and it goes."""
    src = domain.get(source, f"{ds.path} (its new data)")
    shape = src.shape
    check_fits(ds, src.npy_element_dtype, shape)
    wb.flush_data({source})          # the array's last writes, still staged
    wb.discard(ds.address)           # writes into the old data go with it
    client = domain.client
    if shape != ds.shape:
        client.resize(ds.id, shape)
    isz = src.itemsize
    if shape and math.prod(shape):
        row = math.prod(shape[1:]) * isz
        step = max(1, COPY_BYTES // max(1, row))
        for start in range(0, shape[0], step):
            sel = (slice(start, min(shape[0], start + step)),) + tuple(slice(0, n) for n in shape[1:])
            client.write_bytes(ds.id, sel, isz, client.read_bytes(src.id, sel, isz))
    elif not shape:   # a scalar's one element
        client.write_bytes(ds.id, None, isz, client.read_bytes(src.id, None, isz))
    drop(domain, wb, source)
    domain.forget(ds.id)
    wb.edited()


def drop(domain: HsdsDomain, wb: HsdsWriteback, source: int) -> None:
    """Delete an anonymous dataset `create_source` made (its staged writes forgotten)."""
    wb.discard(source)
    obj_id = domain.id_of(source)
    domain.client.delete_dataset(obj_id)
    domain.forget(obj_id)
