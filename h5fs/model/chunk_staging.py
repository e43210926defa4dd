"""A chunked dataset's writes on their way to the file: the dirty chunks and patches a write
makes, their encoding and their staging in a transaction (model/writeback.py keeps the dirty
state, its budget, and decides when it goes).

A write makes a private dirty copy of each chunk it touches, pinned in the file's chunk cache
under the dataset's current owner key, where every read looks first. A chunk a write covers
completely is never read or decoded: its copy starts from the fill value (or is the write's own
bytes when it fills the chunk). A write into a stored chunk not in memory waits as a patch,
applied when a read or the flush needs the chunk: random writes decode each chunk once, not once
a write.

Chunks are filtered in worker threads (the codecs release the GIL), a few in flight at a time so
memory stays bounded; a sequential writer's chunk is filtered as soon as it moves on from it.
Staging writes the encoded chunks to fresh space, puts their records in the chunk index and frees
the chunks they replace (reusable after the commit).
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np

from ..errors import H5fsError
from ..format.messages import layout as L
from ..storage.chunked import ChunkedSource
from ..storage.filters import ChunkInfo
from ..storage.filters.pipeline import encode_chunk
from ..storage.object_header.edit import HeaderEdit
from ..storage.index import ChunkRecord, IndexContext, open_index
from ..storage.transaction import Transaction
from . import messages as M
from .dataset import Dataset

if TYPE_CHECKING:
    from .writeback import Writeback

ENCODE_WINDOW = 6                        # chunks a flush has in the pool at once (memory bound)
PATCH_OVERHEAD = 200                     # bytes of a patch besides its elements (array, slices, list)

Encoded = Iterator[tuple[tuple[int, ...], tuple[bytes | None, int, object]]]


class BrokenChunk(H5fsError):
    """A chunk of a dataset could not be made (the file holds it corrupt): the dataset's writes
    are dropped, the rest of the flush lands."""

    def __init__(self, error: H5fsError):
        super().__init__(str(error))
        self.error, self.errno = error, error.errno


@dataclass
class Dirty:
    """What one dataset holds that is not in the file yet. A dirty chunk is private to the
    writeback (made from a copy), so later writes change it in place; each write bumps its
    version. When sequential writes move on from a chunk, it is filtered ahead in the pool
    (`encoded`); the result serves the flush if the version is still the same."""

    path: str
    chunks: dict[tuple[int, ...], bytearray] = field(default_factory=dict)
    # writes into stored chunks not in memory, kept as (slices of the chunk, elements) until a
    # read or the flush needs the chunk: random writes decode each chunk once, not once a write
    patches: dict[tuple[int, ...], list[tuple[tuple[slice, ...], np.ndarray]]] = field(default_factory=dict)
    versions: dict[tuple[int, ...], int] = field(default_factory=dict)
    encoded: dict[tuple[int, ...], tuple[int, Future]] = field(default_factory=dict)
    last: tuple[int, ...] | None = None  # the chunk the last write ended in
    end: int = -1                        # the element after the last write
    external: bool = False               # data written into external files, not yet fsynced


# -- dirty chunks ---------------------------------------------------------------------------------
def dirty_chunk(wb: Writeback, source: ChunkedSource, st: Dirty, coords: tuple[int, ...],
                covered: bool, whole: np.ndarray | None = None) -> bytearray | None:
    """The chunk's private dirty copy, made on the first write from the fill value when the
    write covers it (from `whole` when the write fills the whole chunk), else from the chunk
    as memory holds it (pending patches applied), and pinned in the chunk cache; None when
    the chunk would have to be read and decoded (the write becomes a patch)."""
    buf = st.chunks.get(coords)
    if isinstance(buf, memoryview):   # a write's own bytes (`whole_chunk`): copied before they change
        wb.nbytes -= len(buf)
        buf = keep_dirty(wb, source, st, coords, bytearray(buf))
    if buf is not None:
        return buf
    patches = st.patches.pop(coords, [])
    wb.nbytes -= costs(patches)
    if covered:   # patches superseded
        return keep_dirty(wb, source, st, coords, bytearray(source._fill()) if whole is None else whole_chunk(whole))
    # a flush under way may hold patches of this chunk: the cache then has the chunk
    # without them (decoded for that flush), and they come first
    flushing = wb.flushing.get(source.owner[0])
    older = flushing.patches.get(coords, []) if flushing else []
    base = wb.f.chunk_cache.peek((source.owner, coords))
    if base is None:
        if patches or older or source.sparse or source.index.lookup(coords) is not None:
            st.patches[coords] = patches
            wb.nbytes += costs(patches)
            return None
        base = source._fill()
    return keep_dirty(wb, source, st, coords, patched(base, older + patches, source))



def keep_dirty(wb: Writeback, source: ChunkedSource, st: Dirty, coords: tuple[int, ...],
               buf: bytearray) -> bytearray:
    """`buf` as the chunk's dirty copy: counted against the budget and pinned in the cache."""
    st.chunks[coords] = buf
    wb.nbytes += len(buf)
    wb.f.chunk_cache.put((source.owner, coords), buf, pinned=True)
    return buf


def encode_ahead(pool: ThreadPoolExecutor, ds: Dataset, source: ChunkedSource, st: Dirty,
                 coords: tuple[int, ...]) -> None:
    """Filter the dirty chunk now, in the pool (its writer moved on from it)."""
    buf = st.chunks.get(coords)
    if buf is not None:
        st.encoded[coords] = (st.versions[coords], pool.submit(chunk_encoder(ds, source), coords, buf))


# -- encoding -------------------------------------------------------------------------------------
def encode_chunks(pool: ThreadPoolExecutor, ds: Dataset, source: ChunkedSource, chunks,
                  st: Dirty | None) -> Encoded:
    """(coords, (stored bytes, filter mask, sections)) of each chunk, and of each chunk `st` holds as
    patches (read, decoded and patched first): filtered in the pool with a few chunks in
    flight (memory stays bounded however many a flush writes), or taken from the encoding
    done ahead when the chunk did not change since. A chunk that cannot be made raises
    `BrokenChunk`."""
    ahead = st.encoded if st is not None else {}
    encode = chunk_encoder(ds, source)
    jobs: list = []
    for coords, buf in chunks.items():
        done = ahead.get(coords)
        jobs.append((coords, done[1] if done and done[0] == st.versions[coords] else (encode, buf)))
    for coords, patches in (st.patches if st is not None else {}).items():
        jobs.append((coords, (lambda c, p: encode(c, patched(source.chunk_bytes_at(c), p, source)), patches)))
    running: deque[tuple[tuple[int, ...], Future]] = deque()
    for n, (coords, job) in enumerate(jobs, 1):
        running.append((coords, job if isinstance(job, Future) else pool.submit(job[0], coords, job[1])))
        while running and (len(running) > ENCODE_WINDOW or n == len(jobs)):
            c, future = running.popleft()
            try:
                result = future.result()
            except H5fsError as exc:
                for _, other in running:
                    other.cancel()
                raise BrokenChunk(exc) from exc
            yield c, result


def chunk_encoder(ds: Dataset, source: ChunkedSource):
    """A function (coords, chunk bytes) -> (stored bytes, filter mask, section metadata) for
    the pool; a sparse chunk of nothing but fill values is (None, 0, None): no chunk."""
    if ds.sparse:
        codec = source.codec

        def encode_sparse(coords: tuple[int, ...], buf: bytearray):
            made = codec.encode(buf, source._is_edge(coords), f"{ds.path} chunk {coords}")
            return (None, 0, None) if made is None else (made[0], 0, made[1])
        return encode_sparse
    filters, info = ds.filters, ChunkInfo(source.chunk_bytes, ds.itemsize, ds.path)
    skip_edges = bool(ds.layout.flags & L.DONT_FILTER_PARTIAL_BOUND_CHUNKS)

    def encode(coords: tuple[int, ...], buf: bytearray) -> tuple[bytes, int, None]:
        if not filters or skip_edges and source._is_edge(coords):
            return buf, 0, None     # written as it is (a flush's chunks do not change)
        return (*encode_chunk(filters, bytes(buf), replace(info, what=f"{ds.path} chunk {coords}")), None)
    return encode


# -- staging --------------------------------------------------------------------------------------
def stage_chunks(txn: Transaction, ds: Dataset, header: HeaderEdit, encoded: Encoded,
                 lay: L.DataLayout | None = None) -> L.DataLayout | None:
    """Write encoded chunks (see `encode_chunks`; no bytes: the chunk goes) to fresh space as they
    come, free what they replace and update the index (`lay`: the layout as this
    transaction left it so far); the changed layout is set in `header` and returned. When a
    chunk cannot be made (`BrokenChunk`), the space of those written is given back."""
    lay, space = lay or ds.layout, ds.dataspace
    index = open_index(IndexContext(txn.reader, lay, space.dims, space.maxdims, ds.index_filtered, ds.path))
    implicit = lay.index is not None and lay.index.index_type == L.IMPLICIT
    records, replaced, gone = [], [], []
    try:
        for coords, (data, mask, sections) in encoded:
            old = index.lookup(coords)
            if data is None:   # a sparse chunk left with no defined element: no chunk
                if old is not None:
                    gone.append(old)
                continue
            if implicit and old is not None:
                txn.write_data(old.address, data, rewritable=True)   # implicit chunks live where the index says
                continue
            address = txn.allocate(len(data), raw=True)
            txn.write_data(address, data)
            records.append(ChunkRecord(coords, address, len(data), mask, sections))
            if old is not None:
                replaced.append(old)
    except BrokenChunk:
        for rec in records:   # written, never referenced
            txn.free(rec.address, rec.size, raw=True)
        raise
    for old in replaced + gone:
        txn.free(old.address, old.size, raw=True)
    new_layout = index.put(txn, records) if records else None
    if gone:
        new_layout = index.remove(txn, [r.coords for r in gone]) or new_layout
    if new_layout is not None:
        header.set(M.LAYOUT, layout_message(new_layout, txn.sizes))
    return new_layout


def layout_message(lay: L.DataLayout, sizes) -> bytes:
    return M.encode(M.LAYOUT, lay, sizes)


# -- pieces ---------------------------------------------------------------------------------------
def cost(piece: np.ndarray) -> int:
    """What a patch holds against the budget: its elements and the objects around them."""
    return piece.nbytes + PATCH_OVERHEAD


def costs(patches) -> int:
    return sum(cost(p) for _, p in patches)


def patched(base: bytes, patches, source: ChunkedSource) -> bytearray:
    """A private copy of a chunk's bytes with the patches applied in order."""
    buf = bytearray(base)
    if patches:
        view = np.frombuffer(buf, np.uint8).reshape(source.chunk + (source.itemsize,))
        for inside, piece in patches:
            view[inside] = piece
    return buf


def whole_chunk(data: np.ndarray) -> memoryview | bytearray:
    """A chunk's content from the elements of a write that fill it: the write's own bytes, not
    copied, when they are immutable (FUSE hands `bytes`) and lie in one piece."""
    keep = data.flags.c_contiguous and not data.flags.writeable
    return memoryview(data).cast("B") if keep else bytearray(data)


def fills(inside: tuple[slice, ...], chunk: tuple[int, ...]) -> bool:
    """Whether the slices are the whole chunk."""
    return all(s.start == 0 and s.stop == k for s, k in zip(inside, chunk))


def covers(inside: tuple[slice, ...], coords: tuple[int, ...], source: ChunkedSource) -> bool:
    """Whether the slices cover every element of the chunk that lies inside the dataset."""
    return all(s.start == 0 and s.stop >= min(k, d - c * k)
               for s, c, k, d in zip(inside, coords, source.chunk, source.shape))


def dirty_nbytes(st: Dirty) -> int:
    """The bytes the budget counts for a dataset's dirty state."""
    return sum(len(b) for b in st.chunks.values()) + sum(costs(ps) for ps in st.patches.values())


def chunk_count(st: Dirty) -> int:
    """The chunks a dataset's dirty state will write."""
    return len(st.chunks) + sum(1 for c in st.patches if c not in st.chunks)


def batch_parts(batch: dict[int, Dirty], limit: int, dataset: Callable[[int, Dirty], Dataset]
                ) -> Iterator[list[tuple[int, Dirty]]]:
    """A flush's batch as transactions of at most `limit` bytes of chunks each: the space a
    part frees is reused by the next, so a flush that rewrites many chunks (random writes held
    as small patches) does not grow the file by all of them at once. `dataset(address, st)`:
    the dataset as the previous part left it."""
    part: list[tuple[int, Dirty]] = []
    room = limit
    for address, st in batch.items():
        todo = list(st.chunks) + [c for c in st.patches if c not in st.chunks]
        if not todo:
            part.append((address, st))
            continue
        size = max(1, dataset(address, st).source.chunk_bytes)
        while todo:
            n = max(1, room // size)
            take, todo = todo[:n], todo[n:]
            part.append((address, replace(st, chunks={c: st.chunks[c] for c in take if c in st.chunks},
                                          patches={c: st.patches[c] for c in take if c in st.patches})))
            room -= len(take) * size
            if room < size:
                yield part
                part, room = [], limit
    if part:
        yield part
