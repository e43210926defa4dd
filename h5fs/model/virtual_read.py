"""Reading a virtual dataset's source elements into place.

A box of a source dataset goes straight into a view of the output: unfiltered chunks through
storage/unfiltered_read.py, a contiguous source's run by preadv, anything else (filtered chunks,
compact, external, nested virtual data) through its own reads, bounded box by box. Elements
that pair one by one (point selections, irregular block lists) are gathered in bounded boxes."""

from __future__ import annotations

from math import prod

import numpy as np

from ..errors import FormatError
from ..storage.chunk_grid import chunks_in_box, overlap
from ..storage.chunked import ChunkedSource
from ..storage.sources import ContiguousSource
from ..storage.unfiltered_read import Miss, preadv_exact, read_box

DENSE_MIN = 4096               # a source box this small is read whole
MAX_BOX_BYTES = 8 << 20        # largest source box read at once
ROWS_SLACK = 256 * 1024        # read whole source rows when they exceed the box by at most this


def read_into(src, shape: tuple[int, ...], start: tuple[int, ...], count: tuple[int, ...], dst: np.ndarray,
              flags: int = 0) -> None:
    """The stored bytes of box (start, count) of source dataset `src` (of `shape`) into `dst`
    (uint8, shape count + (itemsize,), any strides). `flags` (RWF_NOWAIT): Miss when the disk
    or decoding would be needed."""
    raw = src.source
    if isinstance(raw, ChunkedSource) and raw.direct:
        read_box(raw, start, count, dst, flags)
        return
    if isinstance(raw, ContiguousSource) and _one_run(shape, start, count):
        first = 0
        for s, e in zip(start, shape):
            first = first * e + s
        target = dst if dst.flags.c_contiguous else np.empty(dst.shape, np.uint8)
        preadv_exact(raw.bytes, [target], raw.start + first * src.itemsize, target.nbytes, flags,
                     lambda: f"{src.path}: source read short of {target.nbytes} bytes")
        if target is not dst:
            dst[...] = target
        return
    if flags:
        raise Miss
    dst[...] = source_box(src, shape, start, count)


def _one_run(shape: tuple[int, ...], start: tuple[int, ...], count: tuple[int, ...]) -> bool:
    """Whether the box is one run of the row-major array: below its outermost dimension that
    spans several elements, every dimension is taken whole."""
    dims = [d for d, n in enumerate(count) if n != 1]
    return not dims or all(start[d] == 0 and count[d] == shape[d] for d in range(dims[0] + 1, len(shape)))


def gather(src, shape: tuple[int, ...], coords: np.ndarray) -> np.ndarray:
    """Stored bytes (M, itemsize) of the source elements at `coords`, read box by box."""
    isz = src.itemsize
    m = len(coords)
    out = np.empty((m, isz), np.uint8)
    lin = np.ravel_multi_index(tuple(coords.T), shape)
    if m > 1 and int(lin[-1]) - int(lin[0]) == m - 1 and bool((np.diff(lin) == 1).all()):
        # one row-major run of the source (whole tiles, full rows): a single read
        data = src.source.read(int(lin[0]) * isz, m * isz)
        if len(data) != m * isz:
            raise FormatError(f"{src.path}: source read returned {len(data)} of {m * isz} bytes")
        return np.frombuffer(data, np.uint8).reshape(m, isz)
    order = np.argsort(lin, kind="stable")
    todo = [(0, m)]
    while todo:
        i, j = todo.pop()
        idx = order[i:j]
        c = coords[idx]
        lo = c.min(0)
        hi = c.max(0) + 1
        vol = int(np.prod(hi - lo))
        if j - i == 1 or (vol <= max(4 * (j - i), DENSE_MIN) and vol * isz <= MAX_BOX_BYTES):
            block = source_box(src, shape, tuple(int(x) for x in lo), tuple(int(x) for x in hi - lo))
            out[idx] = block[tuple((c - lo).T)]
        else:
            mid = (i + j) // 2
            todo.append((mid, j))
            todo.append((i, mid))
    return out


def source_box(src, shape, start, count) -> np.ndarray:
    """The stored bytes of a box of a source dataset, shape count + (itemsize,)."""
    isz = src.itemsize
    raw = src.source
    if isinstance(raw, ChunkedSource):
        out = np.empty(count + (isz,), np.uint8)
        box = (start, count)
        for cc in chunks_in_box(box, raw.chunk):
            chunk = np.frombuffer(raw.chunk_bytes_at(cc), np.uint8).reshape(raw.chunk + (isz,))
            dst, s = overlap(box, cc, raw.chunk)
            out[dst] = chunk[s]
        return out
    row = prod(shape[1:]) * isz
    span = count[0] * row
    want = prod(count) * isz
    if span <= want + ROWS_SLACK or (span <= MAX_BOX_BYTES and span <= 64 * want):
        data = raw.read(start[0] * row, span)
        if len(data) != span:
            raise FormatError(f"{src.path}: source read returned {len(data)} of {span} bytes")
        arr = np.frombuffer(data, np.uint8).reshape((count[0],) + tuple(shape[1:]) + (isz,))
        return arr[(slice(None),) + tuple(slice(s, s + c) for s, c in zip(start[1:], count[1:]))]
    out = np.empty(count + (isz,), np.uint8)
    run = count[-1] * isz
    for idx in np.ndindex(*count[:-1]):
        first = tuple(s + i for s, i in zip(start, idx)) + (start[-1],)
        off = int(np.ravel_multi_index(first, shape)) * isz
        data = raw.read(off, run)
        if len(data) != run:
            raise FormatError(f"{src.path}: source read returned {len(data)} of {run} bytes")
        out[idx] = np.frombuffer(data, np.uint8).reshape(count[-1], isz)
    return out


