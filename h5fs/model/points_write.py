"""`cp pts.npy S.points.npy`: a sparse dataset's defined elements replaced by a `.npy` of
`[("index", <integers>, (rank,)), ("value", dtype)]` records, in one transaction.

The whole file is checked before anything changes: its header, the record dtype (an integer
index of the dataset's rank, the dataset's value dtype), every index inside the extent. Records
are taken in any order; an index given twice keeps its last value, and then a value equal to
the fill value (byte for byte) defines nothing, as a write of it through the raw view. Then every chunk holding new
elements is written afresh, every old chunk freed, and the index made to list exactly the new
chunks: one commit, so a crash leaves the old set or the new one.
"""

from __future__ import annotations

from typing import BinaryIO

import numpy as np

from ..errors import InvalidWrite
from ..storage.object_header.edit import HeaderEdit
from .chunk_staging import stage_chunks
from .npy_header import NpyHeaderError, parse_npy_header

READ_PIECE = 1 << 24


def read_points(ds, stream: BinaryIO, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices (n, rank) int64, values as the dataset's stored bytes (n, itemsize) uint8) of a
    `.npy` file of `size` bytes, checked whole (InvalidWrite naming what is wrong)."""
    what = f"{ds.path}.points.npy"
    stream.seek(0)
    head = stream.read(min(size, 1 << 20))
    try:
        header = parse_npy_header(head, complete=True)
    except NpyHeaderError as exc:
        raise InvalidWrite(f"{what}: {exc}") from None
    rank, value = len(ds.shape), ds.npy_element_dtype
    dt = header.dtype
    if dt.names is None or set(dt.names) != {"index", "value"}:
        raise InvalidWrite(f"{what}: records of ('index', 'value') expected, not {dt}")
    index_dt = dt["index"]
    if index_dt.base.kind not in "iu" or index_dt.shape != (rank,) and not (rank == 1 and index_dt.shape == ()):
        raise InvalidWrite(f"{what}: 'index' must be {rank} integers, not {index_dt}")
    if dt["value"] != value:
        raise InvalidWrite(f"{what}: 'value' must be {value}, not {dt['value']}")
    if len(header.shape) != 1:
        raise InvalidWrite(f"{what}: a one-dimensional array of records expected, not shape {header.shape}")
    if header.fortran_order and len(header.shape) > 1:
        raise InvalidWrite(f"{what}: Fortran order")
    if size != header.header_length + header.data_nbytes:
        raise InvalidWrite(f"{what}: {size - header.header_length} bytes of records, the header says "
                           f"{header.data_nbytes}")
    n = header.shape[0]
    indices = np.empty((n, rank), np.int64)
    values = np.empty((n, ds.itemsize), np.uint8)
    per = max(1, READ_PIECE // max(1, dt.itemsize))
    stream.seek(header.header_length)
    for start in range(0, n, per):
        count = min(per, n - start)
        buf = stream.read(count * dt.itemsize)
        if len(buf) != count * dt.itemsize:
            raise InvalidWrite(f"{what}: the file ends inside its records")
        rec = np.frombuffer(buf, dt)
        idx = rec["index"].reshape(count, rank)
        if idx.dtype.kind == "i" and len(idx) and int(idx.min()) < 0:
            raise InvalidWrite(f"{what}: a negative index")
        if len(idx) and bool((idx.astype(np.uint64) >= np.array(ds.shape, np.uint64)).any()):
            bad = idx[(idx.astype(np.uint64) >= np.array(ds.shape, np.uint64)).any(axis=1)][0]
            raise InvalidWrite(f"{what}: index {tuple(int(i) for i in bad)} outside the extent {ds.shape}")
        indices[start:start + count] = idx
        values[start:start + count] = np.frombuffer(rec["value"].tobytes(), np.uint8).reshape(count, ds.itemsize)
    return indices, values


def replace_points(wb, ds, indices: np.ndarray, values: np.ndarray) -> None:
    """Make exactly these elements the dataset's defined ones (one transaction; the writes not
    yet in the file land first, then go with the old set)."""
    wb.flush()
    ds = wb.f.get(ds.address, ds.path)
    source, codec = ds.source, ds.source.codec
    chunk = np.array(source.chunk, np.int64)
    grid = indices // chunk
    local = np.ravel_multi_index((indices % chunk).T, source.chunk) if len(indices) else np.zeros(0, np.int64)
    # last word on an index wins: stable order by (chunk, position), then the last of each run
    order = np.lexsort((np.arange(len(indices)), local, *grid.T[::-1])) if len(indices) else np.zeros(0, np.int64)
    grid, local, values = grid[order], local[order], values[order]
    if len(order):
        last = np.ones(len(order), bool)
        last[:-1] = (grid[1:] != grid[:-1]).any(axis=1) | (local[1:] != local[:-1])
        grid, local, values = grid[last], local[last], values[last]
    keep = codec.defined(values.tobytes())   # then a fill value defines nothing
    grid, local, values = grid[keep], local[keep], values[keep]
    bounds = np.flatnonzero(np.append(True, (grid[1:] != grid[:-1]).any(axis=1))) if len(grid) else []
    runs = {tuple(int(c) for c in grid[a]): (a, b) for a, b in zip(bounds, [*bounds[1:], len(grid)])}

    def chunks():
        """Each chunk of the new set made, then every old chunk without new elements gone."""
        for coords, (a, b) in runs.items():
            data, meta = codec.encode_points(local[a:b], values[a:b].tobytes(), source._is_edge(coords),
                                             f"{ds.path} chunk {coords}")
            yield coords, (data, 0, meta)
        for rec in source.index.records():
            if rec.coords not in runs:
                yield rec.coords, (None, 0, None)

    with wb.commit_lock, wb.f.store.transaction() as txn:
        stage_chunks(txn, ds, HeaderEdit(txn, ds.header), chunks())
        wb.commit(txn, [ds.address])
