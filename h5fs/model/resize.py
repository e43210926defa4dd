"""A dataset's storage resized or allocated by its writes (model/writeback.py calls these holding
its commit lock).

Resizes (a write past the end, a truncate) are transactions of their own, committed at once after
the dataset's dirty chunks: the dataspace message, the chunks falling outside (removed and freed),
and a chunk cut by a shrink (rewritten with the fill value beyond the new end). Only chunked
storage is resized, along its first dimension, within its maximum; storage allocated early gets
chunks of fill values for what the extent gains, as libhdf5 does.

Contiguous storage never allocated is allocated at the first write, filled with the fill value,
and published by the layout message.
"""

from __future__ import annotations

from dataclasses import replace
from math import prod
from typing import TYPE_CHECKING

import numpy as np

from ..errors import CannotWrite, InvalidWrite, TooLarge
from ..format.messages import dataspace as DS
from ..format.messages import layout as L
from ..format.messages.fill_value import ALLOC_EARLY
from ..storage.chunk_grid import chunks_in_box
from ..storage.chunked import ChunkedSource
from ..storage.object_header.edit import HeaderEdit
from ..storage.index import IndexContext, open_index
from ..storage.sources import fill_pattern
from ..storage.transaction import Transaction
from . import messages as M
from .chunk_staging import encode_chunks, layout_message, stage_chunks
from .dataset import Dataset

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from .writeback import Writeback

FILL_PIECE = 16 * 1024 * 1024            # bytes of fill value written at a time


def grow_to(wb: Writeback, ds: Dataset, size: int, whole_rows: bool) -> None:
    """Resize the raw view to `size` bytes along the first dimension (`whole_rows`: `size` must
    end a row, else the row it ends in is included), after the writes waiting are flushed."""
    space = ds.dataspace
    if space.kind != DS.SIMPLE or not space.dims:
        raise TooLarge(f"{ds.path}: a {('scalar', 'simple', 'null')[space.kind]} dataset cannot be resized")
    row = prod(space.dims[1:]) * ds.itemsize
    rows, rest = divmod(size, row) if row else (0, 0)
    if rest:
        if whole_rows:
            raise InvalidWrite(f"{ds.path}: {size} bytes is not a whole number of {row}-byte rows")
        rows += 1
    limit = space.maxdims[0]
    if not ds.layout.chunked and rows < space.dims[0]:   # truncation (O_TRUNC) is no growth
        raise CannotWrite(f"{ds.path}: {ds.layout.class_name} storage keeps its shape: it cannot shrink "
                          f"from {space.dims[0]} to {rows} rows (HDF5 resizes chunked datasets only)")
    if not ds.layout.chunked or limit is not None and rows > limit:
        raise TooLarge(f"{ds.path}: {rows} rows exceed the maximum dimension "
                       f"{'unlimited' if limit is None else limit}"
                       + ("" if ds.layout.chunked else f" of {ds.layout.class_name} storage"))
    wb.flush()
    _resize(wb, wb.f.get(ds.address, ds.path), rows)


def _resize(wb: Writeback, ds: Dataset, rows: int) -> None:
    space, lay = ds.dataspace, ds.layout
    dims = (rows,) + space.dims[1:]
    with wb.f.store.transaction() as txn:
        header = HeaderEdit(txn, ds.header)
        if rows < space.dims[0]:
            lay = _cut(wb.pool, txn, ds, header, rows) or lay
        header.set(M.DATASPACE, M.encode(M.DATASPACE, replace(space, dims=dims), txn.sizes))
        index = open_index(IndexContext(txn.reader, lay, dims, space.maxdims, ds.index_filtered, ds.path))
        new_layout = index.resize(txn, dims)
        if new_layout is not None:
            header.set(M.LAYOUT, layout_message(new_layout, txn.sizes))
            lay = new_layout
        if rows > space.dims[0] and _allocated_early(ds):
            fill = _fill_chunks(ds, index, dims)
            stage_chunks(txn, ds, header, encode_chunks(wb.pool, ds, ds.source, fill, None), lay)
        wb.commit(txn, [ds.address])


def _fill_chunks(ds: Dataset, index, dims: tuple[int, ...]) -> dict[tuple[int, ...], bytearray]:
    """Chunks of fill values for every chunk of the grown extent not allocated yet (storage
    allocated early: libhdf5 allocates what an extent gains)."""
    source: ChunkedSource = ds.source
    if 0 in dims:
        return {}
    first = ds.dataspace.dims[0] // source.chunk[0]
    box = ((first * source.chunk[0],) + (0,) * (len(dims) - 1),
           (dims[0] - first * source.chunk[0],) + dims[1:])
    fill = source._fill()
    implicit = ds.layout.index.index_type == L.IMPLICIT   # every slot exists: fill them all
    return {c: bytearray(fill) for c in chunks_in_box(box, source.chunk) if implicit or index.lookup(c) is None}


def _cut(pool: ThreadPoolExecutor, txn: Transaction, ds: Dataset, header: HeaderEdit,
         rows: int) -> L.DataLayout | None:
    """Shrinking to `rows`: chunks wholly beyond are removed, the chunk row cut in two keeps
    its first rows and holds the fill value after them (what a later growth shows). Returns
    the new layout if the index changed it."""
    source: ChunkedSource = ds.source
    k = source.chunk[0]
    gone, cut = [], {}
    for rec in source.index.records():
        first = rec.coords[0] * k
        if first >= rows:
            gone.append(rec)
        elif first + k > rows:
            chunk = bytearray(source.chunk_bytes_at(rec.coords))
            view = np.frombuffer(chunk, np.uint8).reshape(source.chunk + (ds.itemsize,))
            view[rows - first:] = np.frombuffer(source._fill(), np.uint8).reshape(view.shape)[rows - first:]
            cut[rec.coords] = chunk
    new_layout = None
    if gone:
        lay, space = ds.layout, ds.dataspace
        index = open_index(IndexContext(txn.reader, lay, space.dims, space.maxdims, ds.index_filtered, ds.path))
        new_layout = index.remove(txn, [r.coords for r in gone])
        if new_layout is not None:
            header.set(M.LAYOUT, layout_message(new_layout, txn.sizes))
        if lay.index.index_type != L.IMPLICIT:   # implicit chunks are slices of one live block
            for rec in gone:
                txn.free(rec.address, rec.size, raw=True)
    if cut:
        new_layout = stage_chunks(txn, ds, header, encode_chunks(pool, ds, source, cut, None),
                                  new_layout) or new_layout
    return new_layout


def _allocated_early(ds: Dataset) -> bool:
    fill = ds.message(M.FILL)
    return fill is not None and fill.alloc_time == ALLOC_EARLY


def allocate_contiguous(wb: Writeback, ds: Dataset) -> None:
    """Allocate a contiguous dataset's storage (never written so far), filled with its fill
    value, and publish it in the layout message."""
    f = wb.f
    size = ds.dataspace.count * ds.itemsize
    with f.store.transaction() as txn:
        address = txn.allocate(size, raw=True)
        position = f.reader.base + address
        # new zeros past where the file's bytes end, the batch's included (a page of the batch
        # there may hold what a commit of it freed): the file grows sparse
        if position >= f.store.end() and not any(ds.fill_value or b""):
            f.store.grow(position + size)
        else:
            for start in range(0, size, FILL_PIECE):
                n = min(FILL_PIECE, size - start)
                txn.write_data(address + start, fill_pattern(ds.fill_value, ds.itemsize, start, n),
                               rewritable=True)
        new = replace(ds.layout, address=address, size=size)
        HeaderEdit(txn, ds.header).set(M.LAYOUT, layout_message(new, txn.sizes))
        wb.commit(txn, [ds.address])
