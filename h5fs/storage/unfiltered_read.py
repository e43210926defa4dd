"""Reads of an unfiltered chunked dataset's raw view straight from the file into one buffer.

No decoded-chunk cache and no per-chunk buffer: a request's elements become boxes
(chunk_grid.linear_boxes), each box is served one row of chunks (chunks sharing their first grid
coordinate) at a time, with one index walk per row (`ChunkIndex.lookup_many`). Every chunk of a
row needs the same slab of its first dimension, so its part is one run of the file:
- chunks spanning whole rows (one chunk per row of chunks, covering every other dimension): the
  run goes straight into the output;
- a box covering whole chunks on every other dimension: the runs go side by side into a scratch
  buffer, and one transposing copy puts the row into the output;
- otherwise: each chunk's part from its first element in the box to its last (never the whole
  chunk) into scratch, then a strided copy per chunk.
Runs adjacent in the file are read by one preadv. Edge chunks are full-size in the file (their
strides are the chunk's); chunks never allocated read as the fill value; chunks the writeback
holds dirty in memory (pinned in the chunk cache, not yet in the file) are taken from there.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from functools import partial
from itertools import product
from math import prod
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..errors import FormatError
from .byte_source import ByteSource
from .chunk_grid import linear_boxes

if TYPE_CHECKING:
    from .chunked import ChunkedSource
    from .index import ChunkRecord

IOV_MAX = 1024          # iovecs per preadv (Linux UIO_MAXIOV)
ROW_CHUNKS = 1024       # chunks of a row looked up at once (and kept) when a read needs some
AHEAD_BYTES = 16 << 20  # chunks spanning whole rows: those of the next this many bytes looked up at once
SLAB_BYTES = 8 << 20    # a sequential read of tiles reads this much of its row of chunks at once
SLABS = 4               # such read-ahead kept (one per dataset read at once)
SPAN_SLACK = 64 << 10   # a chunk's part is read from its first element to its last when that
                        # exceeds the part by at most this or twice over


class Miss(Exception):
    """A RWF_NOWAIT read found data outside the page cache."""


def read(src: ChunkedSource, offset: int, size: int, flags: int = 0) -> memoryview:
    """Raw bytes [offset, offset+size) clipped to the dataset (`flags`: preadv2 flags; with
    RWF_NOWAIT, Miss when the disk would be needed)."""
    offset, size = src.clip(offset, size)
    if size == 0:
        return memoryview(b"")
    isz = src.itemsize
    e0, e1 = offset // isz, -(-(offset + size) // isz)
    out = np.empty((e1 - e0, isz), np.uint8)
    sequential, src.next_offset = offset == src.next_offset, offset + size
    pos = 0
    for start, count in linear_boxes(src.shape, e0, e1):
        n = prod(count)
        read_box(src, start, count, out[pos:pos + n].reshape(count + (isz,)), flags, sequential)
        pos += n
    skip = offset - e0 * isz
    return memoryview(out.reshape(-1))[skip:skip + size]


def read_box(src: ChunkedSource, start: tuple[int, ...], count: tuple[int, ...], dst: np.ndarray,
             flags: int = 0, sequential: bool = False) -> None:
    """The elements of box (start, count) into `dst` (uint8, shape count + (itemsize,), any
    strides); `sequential`: the reader goes on where it stopped, read ahead in its row of chunks."""
    reads = _Reads(src, flags)
    chunk, rank = src.chunk, len(src.chunk)
    whole_rows = dst.flags.c_contiguous and all(count[d] == src.shape[d] == chunk[d] for d in range(1, rank))
    rows = range(start[0] // chunk[0], (start[0] + count[0] - 1) // chunk[0] + 1)
    if whole_rows:   # one chunk per row of chunks, each part a run of the output: one walk for all
        rest = (0,) * (rank - 1)
        ahead = range(rows.start, min(src.grid[0], rows.start + max(len(rows), min(ROW_CHUNKS, AHEAD_BYTES // src.chunk_bytes))))
        recs = src.records([(c0,) + rest for c0 in rows], lambda: [(c0,) + rest for c0 in ahead])
        for c0, rec in zip(rows, recs):
            a, b = _slab(start[0], count[0], c0, chunk[0])
            reads.run((c0,) + rest, rec, a * src.row_bytes, dst[a + c0 * chunk[0] - start[0]:b + c0 * chunk[0] - start[0]])
        reads.finish()
        return
    spans = [range(s // k, (s + n - 1) // k + 1) for s, n, k in zip(start[1:], count[1:], chunk[1:])]
    aligned = all(s % k == 0 and (s + n) % k == 0 for s, n, k in zip(start[1:], count[1:], chunk[1:]))
    todo = list(rows)
    while todo:
        a, b = _slab(start[0], count[0], todo[0], chunk[0])
        group = todo[:1]
        if aligned and (a, b) == (0, chunk[0]):   # rows of chunks taken whole: together
            while len(group) < len(todo) and _slab(start[0], count[0], todo[len(group)], chunk[0]) == (a, b):
                group.append(todo[len(group)])
        del todo[:len(group)]
        top = group[0] * chunk[0] + a - start[0]
        slab = dst[top:top + (len(group) - 1) * chunk[0] + b - a]
        coords = [(c0,) + rest for c0 in group for rest in product(*spans)]
        recs = src.records(coords, partial(_rows, src, group, coords))
        if aligned:
            _tiles(src, reads, coords, recs, a, b, len(group), [len(r) for r in spans], slab, sequential)
        else:
            _parts(src, reads, coords, recs, a, b, start, count, slab)


def records_kept(src: ChunkedSource) -> int:
    """How many chunk records `src.records` keeps at most, past those of one request."""
    return min(ROW_CHUNKS, max(prod(src.grid[1:]), AHEAD_BYTES // src.chunk_bytes))


def _rows(src: ChunkedSource, c0s: list[int], coords: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Every chunk of rows `c0s` of the grid, or just `coords` when a row is too long."""
    if prod(src.grid[1:]) > ROW_CHUNKS:
        return coords
    return [(c0,) + rest for c0 in c0s for rest in product(*(range(g) for g in src.grid[1:]))]


def _slab(s: int, n: int, c: int, k: int) -> tuple[int, int]:
    """Elements [a, b) of chunk `c` (of `k`) along a dimension that the range [s, s+n) takes."""
    return max(s, c * k) - c * k, min(s + n, (c + 1) * k) - c * k


def _tiles(src: ChunkedSource, reads: _Reads, coords: list, recs: list, a: int, b: int, nrows: int,
           grid: list[int], slab: np.ndarray, sequential: bool) -> None:
    """`nrows` rows of chunks the box covers whole on every dimension but the first (rows
    [a, b) of each chunk): their runs side by side, then one transposing copy. A sequential
    reader's runs in one row of chunks are read up to SLAB_BYTES ahead at once and kept (a 3-D
    row of 64 runs per plane: 8 planes per preadv each)."""
    isz, inner = src.itemsize, src.chunk[1:]
    key = (src, coords[0], coords[-1])
    held = None if reads.memory or nrows > 1 else _SLABS.get(key)   # chunks in memory are newer than any read-ahead
    if held is not None and held[0] <= a and b <= held[1]:
        scratch = held[2][:, a - held[0]:b - held[0]]
    else:
        stop = b
        if sequential and nrows == 1 and not reads.memory:
            rows = min(src.chunk[0], src.shape[0] - coords[0][0] * src.chunk[0])
            stop = max(b, min(rows, a + SLAB_BYTES // (len(recs) * src.row_bytes)))
        scratch = np.empty((len(recs), stop - a) + inner + (isz,), np.uint8)
        if not _in_runs(src, reads, recs, a, stop, scratch):
            for c, rec, part in zip(coords, recs, scratch):
                reads.run(c, rec, a * src.row_bytes, part)
            reads.finish()
        if stop > b:
            _SLABS.put(key, (a, stop, scratch))
            scratch = scratch[:, :b - a]
    n = len(inner)
    tiles = scratch.reshape((nrows,) + tuple(grid) + (b - a,) + inner + (isz,))
    # (rows of chunks, g1..gn, rows, k1..kn, isz) -> (rows of chunks, rows, g1, k1, ..., gn, kn, isz)
    order = (0, n + 1) + tuple(x for d in range(n) for x in (1 + d, n + 2 + d)) + (2 * n + 2,)
    _split(slab, nrows, grid, inner)[...] = tiles.transpose(order)


def _in_runs(src: ChunkedSource, reads: _Reads, recs: list, a: int, b: int, scratch: np.ndarray) -> bool:
    """Read rows [a, b) of whole chunks with one preadv per run of them lying one after another
    in the file in the order of `recs`, straight into `scratch` (a row of small chunks as h5py
    writes them: a few runs, the index's nodes between them, and no per-chunk bookkeeping);
    False when a record needs the general path (never allocated, held in memory, checked)."""
    if a != 0 or b != src.chunk[0] or reads.memory or len(recs) < 2 or any(rec is None for rec in recs):
        return False
    size, eof = src.chunk_bytes, src.index.ctx.reader.eof - reads.base
    if any(rec.size != size or rec.address < 0 or rec.address + size > eof for rec in recs):
        return False
    flat = scratch.reshape(len(recs), -1)
    i = 0
    while i < len(recs):
        j, first = i + 1, recs[i].address
        while j < len(recs) and recs[j].address == first + (j - i) * size:
            j += 1
        preadv_exact(reads.bytes, [flat[i:j]], reads.base + first, (j - i) * size, reads.flags,
                     lambda: f"{src.what}: short read of chunk data at {first}")
        i = j
    return True


def _split(view: np.ndarray, nrows: int, grid: list[int], inner: tuple[int, ...]) -> np.ndarray:
    """`view` (nrows*rows, g1*k1, ..., gn*kn, isz) as (nrows, rows, g1, k1, ..., gn, kn, isz),
    never a copy (a reshape when `view` is contiguous: 0.2 us against as_strided's 4)."""
    if view.flags.c_contiguous:
        return view.reshape((nrows, view.shape[0] // nrows)
                            + tuple(x for g, k in zip(grid, inner) for x in (g, k)) + view.shape[-1:])
    st = view.strides[0]
    shape, strides = [nrows, view.shape[0] // nrows], [st * (view.shape[0] // nrows), st]
    for d, (g, k) in enumerate(zip(grid, inner)):
        st = view.strides[d + 1]
        shape += [g, k]
        strides += [st * k, st]
    return np.lib.stride_tricks.as_strided(view, tuple(shape) + view.shape[-1:],
                                           tuple(strides) + view.strides[-1:], writeable=True)


def _parts(src: ChunkedSource, reads: _Reads, coords: list, recs: list, a: int, b: int,
           start: tuple[int, ...], count: tuple[int, ...], slab: np.ndarray) -> None:
    """A row of chunks cut by the box: each chunk's elements from its first in the box to its
    last, then a strided copy each (a part spread thin over a much larger chunk is read in
    pieces: SPAN_SLACK)."""
    chunk, isz = src.chunk, src.itemsize
    cstrides = tuple(prod(chunk[d + 1:]) * isz for d in range(len(chunk))) + (1,)
    todo, total = [], 0
    for c, rec in zip(coords, recs):
        lo, hi, out = [a], [b], [slice(0, b - a)]
        for s, n, cd, k in zip(start[1:], count[1:], c[1:], chunk[1:]):
            x, y = _slab(s, n, cd, k)
            lo.append(x)
            hi.append(y)
            out.append(slice(x + cd * k - s, y + cd * k - s))
        limit = max(SPAN_SLACK, 2 * isz * prod(y - x for x, y in zip(lo, hi)))
        for piece in _pieces(lo, hi, out, cstrides, isz, limit):
            todo.append((c, rec) + piece)
            total += piece[1]
    scratch = np.empty(total, np.uint8)
    pos = 0
    for c, rec, first, span, _, _ in todo:
        reads.run(c, rec, first, scratch[pos:pos + span])
        pos += span
    reads.finish()
    pos = 0
    for _, _, _, span, shape, out in todo:
        slab[out] = np.ndarray(shape + (isz,), np.uint8, scratch, pos, cstrides)
        pos += span


def _pieces(lo: list[int], hi: list[int], out: list[slice], cstrides: tuple[int, ...], isz: int, limit: int):
    """(first byte, span, shape, output slices) of the part [lo, hi) of a chunk: whole when its
    span from first to last element is at most `limit` bytes, else split along its outermost
    dimension of several elements (down to runs of the innermost dimension)."""
    first = sum(x * st for x, st in zip(lo, cstrides))
    span = sum((y - 1) * st for y, st in zip(hi, cstrides)) + isz - first
    wide = [d for d in range(len(lo) - 1) if hi[d] - lo[d] > 1]
    if span <= limit or not wide:
        yield first, span, tuple(y - x for x, y in zip(lo, hi)), tuple(out)
        return
    d = wide[0]
    for i in range(lo[d], hi[d]):
        o = out[d].start + i - lo[d]
        yield from _pieces(lo[:d] + [i] + lo[d + 1:], hi[:d] + [i + 1] + hi[d + 1:],
                           out[:d] + [slice(o, o + 1)] + out[d + 1:], cstrides, isz, limit)


class _Slabs:
    """The last SLABS read-ahead slabs: (source, first and last chunk of the row) -> (first row,
    end row, the runs side by side). Keyed by the source object: a dataset that changes gets a
    new source, so a slab never outlives the version of the chunks it was read from."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict[tuple, tuple[int, int, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> tuple[int, int, np.ndarray] | None:
        with self._lock:
            return self._items.get(key)

    def put(self, key: tuple, value: tuple[int, int, np.ndarray]) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


_SLABS = _Slabs(SLABS)


class _Reads:
    """Runs of chunks to read into buffers: gathered, then issued as few preadv calls as
    runs adjacent in the file allow; fill values and chunks held in memory copied at once."""

    def __init__(self, src: ChunkedSource, flags: int):
        self.src, self.flags = src, flags
        reader = src.index.ctx.reader
        self.bytes, self.base = reader.source, reader.base
        self.todo: list[tuple[int, np.ndarray]] = []
        self.fill = None if not src.fill or not any(src.fill) else np.frombuffer(src.fill, np.uint8)
        # dirty chunks live in the chunk cache; it is asked only when it holds some of ours
        self.memory = src.cache.holds_any(src.owner)

    def run(self, coords: tuple[int, ...], rec: ChunkRecord | None, first: int, buf: np.ndarray) -> None:
        """Bytes [first, first + buf.nbytes) of chunk `coords` (`rec` None: never allocated) into
        `buf` (C-contiguous, whole elements)."""
        src = self.src
        if self.memory:
            held = src.cache.peek((src.owner, coords))
            if held is not None:
                buf[...] = np.frombuffer(held, np.uint8, buf.nbytes, first).reshape(buf.shape)
                return
        if rec is None:
            buf.reshape(-1, src.itemsize)[...] = 0 if self.fill is None else self.fill
            return
        if rec.size != src.chunk_bytes:
            raise FormatError(f"{src.what}: chunk {rec.coords} claims {rec.size} stored bytes, "
                              f"unfiltered chunks hold {src.chunk_bytes}")
        self.todo.append((src.located(rec.coords, rec, src.chunk_bytes) + first, buf))

    def finish(self) -> None:
        """Issue the gathered reads."""
        todo, self.todo = sorted(self.todo, key=lambda t: t[0]), []
        if not self.flags and len(todo) > 1:   # a remote object fetches every run at once
            self.bytes.want([(pos, buf.nbytes) for pos, buf in todo])
        i = 0
        while i < len(todo):
            pos = end = todo[i][0]
            bufs = []
            while i < len(todo) and todo[i][0] == end and len(bufs) < IOV_MAX:
                bufs.append(todo[i][1])
                end += todo[i][1].nbytes
                i += 1
            preadv_exact(self.bytes, bufs, pos, end - pos, self.flags,
                         lambda: f"{self.src.what}: short read of chunk data at {pos - self.base}")


def preadv_exact(source: ByteSource, bufs: list, pos: int, total: int, flags: int, short: Callable[[], str]) -> None:
    """Fill `bufs` from `pos`; with `flags` (RWF_NOWAIT) Miss when the page cache (or block
    cache) lacks a byte, else FormatError(`short()`) when the file ends first."""
    try:
        n = source.preadv(bufs, pos, flags)
    except OSError:
        if flags:   # EAGAIN: not all cached; EOPNOTSUPP: the file system cannot say
            raise Miss from None
        raise
    if n != total:
        if flags:
            raise Miss
        raise FormatError(short())

