"""Writeback: writes into a dataset's raw bytes become dirty chunks, flushed in transactions.

Reads see writes at once: a dirty chunk is pinned in the file's chunk cache under the dataset's
current owner key, where every read looks first; a write into a stored chunk not in memory waits
as a patch, applied when a read (`read`, `materialize`) or the flush needs the chunk. `flush`
filters the dirty chunks (in worker threads: the codecs release the GIL), writes them to fresh
space, puts their records in the chunk index and commits (storage/transaction.py); the old
chunks' space is freed after the commit. A chunk a write covers completely is never read or
decoded. Past half the budget a flush starts in the background; writes go on into new dirty
chunks meanwhile (the ones being flushed are not changed again).

Contiguous data is written in place (the page cache holds it until `flush` fsyncs it); storage
never allocated is allocated at the first write and published by the layout message. Compact
data lives in the layout message: each write rewrites it at once (compact data is small).

Resizes (a write past the end, a truncate) are transactions of their own, committed at once after
the dataset's dirty chunks: the dataspace message, the chunks falling outside (removed and freed),
and a chunk cut by a shrink (rewritten with the fill value beyond the new end).

Two locks: `commit_lock` makes commits (flushes, resizes, compact writes, allocations) one at a
time and is taken first; `lock` guards the dirty state, is held by each write, and by a flush
only to take its batch and to retire the dataset's version after its commit. Reads of a dataset
with writes not all in the file take `lock` too (`read`), so no version is retired under them.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from contextlib import nullcontext
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from math import prod
from typing import Iterator

import numpy as np

from ..errors import CannotWrite, H5fsError, InvalidWrite, TooLarge
from ..format.messages import dataspace as S
from ..format.messages import layout as L
from ..format.messages.fill_value import ALLOC_EARLY
from ..storage.chunk_grid import chunks_in_box, linear_boxes, overlap
from ..storage.chunked import ChunkedSource
from ..storage.filters import ChunkInfo
from ..storage.header_writer import HeaderEdit
from ..storage.index import ChunkRecord, IndexContext, open_index
from ..storage.sources import ContiguousSource, fill_pattern
from ..storage.transaction import Transaction
from . import messages as M
from .dataset import Dataset
from .external import external_close_all, external_sync_all, external_write
from .virtual import virtual_write

log = logging.getLogger("h5fs")

DEFAULT_DIRTY_LIMIT = 64 * 1024 * 1024   # dirty chunk bytes held before writes flush them
FILL_PIECE = 16 * 1024 * 1024            # bytes of fill value written at a time
ENCODE_WINDOW = 6                        # chunks a flush has in the pool at once (memory bound)
PATCH_OVERHEAD = 200                     # bytes of a patch besides its elements (array, slices, list)


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
    contiguous: bool = False             # data written in place, not yet fsynced
    external: bool = False               # data written into external files, not yet fsynced


class Writeback:
    def __init__(self, f, dirty_limit: int = DEFAULT_DIRTY_LIMIT, workers: int = 2):
        if f.store is None:
            raise ValueError("the file is not open for writing")
        self.f = f
        self.dirty_limit = dirty_limit
        self.dirty: dict[int, Dirty] = {}    # dataset address -> its dirty state
        # dataset address -> when its data was last written (s): its header's time takes it
        # (TreeEditor.stamp); a dataset freed meanwhile leaves with its writes (`_drop`)
        self.stamps: dict[int, int] = {}
        self.lock = threading.RLock()          # the dirty state
        self.commit_lock = threading.RLock()   # one commit at a time, taken before `lock`
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="h5fs-encode")
        self.flusher = ThreadPoolExecutor(1, thread_name_prefix="h5fs-flush")
        self._background: Future | None = None
        self.flushing: dict[int, Dirty] = {}   # the batch a flush is writing (reads see its patches)
        self.flushing_nbytes = 0               # its dirty bytes
        self.nbytes = 0
        self.flush_done = self.flush_total = 0  # chunks of the flush under way (progress, status)

    def waiting(self) -> tuple[int, int]:
        """(dirty bytes, chunks) not in the file yet, those being flushed included."""
        with self.lock:
            chunks = sum(_chunk_count(st) for batch in (self.dirty, self.flushing) for st in batch.values())
            return self.nbytes + self.flushing_nbytes, chunks

    def close(self) -> None:
        self.flush()
        try:   # everything is in the file already: a failure here only leaves it longer
            with self.commit_lock:
                given = self.f.store.shrink()
        except (OSError, H5fsError) as exc:
            log.warning("%s: free space at its end not given back: %s", self.f.path, exc)
        else:
            if given:
                log.info("%s: %d bytes of free space at its end given back", self.f.path, given)
        self.flusher.shutdown()
        self.pool.shutdown()
        external_close_all(self.f)

    # -- writes -------------------------------------------------------------------------------
    def write(self, ds: Dataset, offset: int, data: bytes) -> int:
        """Write `data` at byte `offset` of the dataset's raw view (growing it past the end)."""
        if not data:
            return 0
        end = offset + len(data)
        with self.commit_lock if self._commits(ds, end) else nullcontext(), self.lock:
            self._check_writable(ds)
            if end > ds.source.size:
                self._grow_to(ds, end, whole_rows=False)
            isz = ds.itemsize
            head, tail = offset % isz, -end % isz
            if head or tail:  # partial elements: complete them with the bytes they hold
                self.materialize(ds, offset - head, head)
                self.materialize(ds, end, tail)
                data = bytes(ds.read_raw(offset - head, head)) + bytes(data) + bytes(ds.read_raw(end, tail))
                offset -= head
            self._write_elements(ds, offset // isz, data)
        if self.nbytes + self.flushing_nbytes > self.dirty_limit:
            self._spent()
        elif self.nbytes > self.dirty_limit // 2:
            self.flush_soon()
        return len(data) - head - tail

    def _spent(self) -> None:
        """The budget (dirty bytes, those being flushed included) is spent: the writer waits for
        the flush under way, then what it wrote since is flushed in the background while it goes
        on, so the encoders do not run dry between batches. After a failed flush it flushes
        itself, so the error reaches it and nothing piles up."""
        running = self._background
        if running is not None:
            try:
                running.result()
            except Exception:   # noqa: BLE001 - met again by the flush below
                self.flush()
                return
        if self.nbytes > self.dirty_limit // 2:
            self._background = self.flusher.submit(self.flush)

    def write_now(self, ds: Dataset, offset: int, data: bytes) -> bool:
        """Do the write on the calling thread (the FUSE loop: no worker thread round trip) when
        it cannot wait long: whole elements of chunked or allocated contiguous data, nothing to
        commit, the budget not spent and the lock free. False: nothing done, use `write`."""
        end, isz, lay = offset + len(data), ds.itemsize, ds.layout
        if (offset % isz or end % isz or not data
                or self.nbytes + self.flushing_nbytes + len(data) > self.dirty_limit
                or lay.layout_class not in (L.CHUNKED, L.STRUCTURED, L.CONTIGUOUS) or self._commits(ds, end)
                or ds.header.first(M.EXTERNAL) is not None or ds.materialized is not None
                or ds.address in self.f.store.damaged):
            return False
        if not self.lock.acquire(blocking=False):
            return False
        try:
            self._write_elements(ds, offset // isz, data)
        finally:
            self.lock.release()
        if self.nbytes > self.dirty_limit // 2:
            self.flush_soon()
        return True

    def _commits(self, ds: Dataset, end: int) -> bool:
        """Whether a write may commit a transaction itself (a resize, compact data, storage
        allocated, a virtual dataset's sources): it then takes the commit lock first."""
        lay = ds.layout
        return (lay.layout_class in (L.COMPACT, L.VIRTUAL) or end > ds.raw_size
                or lay.layout_class == L.CONTIGUOUS and lay.address is None)

    def _check_writable(self, ds: Dataset) -> None:
        if ds.materialized is not None:
            raise CannotWrite(f"{ds.path}: writing variable-length or reference data is not supported")
        self.f.store.refuse_damaged((ds.address,))   # its storage may be another object's too

    def _state(self, ds: Dataset) -> Dirty:
        st = self.dirty.get(ds.address)
        if st is None:
            st = self.dirty[ds.address] = Dirty(ds.path)
        return st

    def _write_elements(self, ds: Dataset, e0: int, data: bytes) -> None:
        lay = ds.layout
        if lay.chunked:
            self._write_chunks(ds, e0, data)
        elif lay.layout_class == L.VIRTUAL:   # written through to its sources in this file
            virtual_write(ds, e0 * ds.itemsize, data, self._write_source)
        elif ds.header.first(M.EXTERNAL) is not None:
            external_write(ds, e0 * ds.itemsize, data)
            self._state(ds).external = True
        elif lay.layout_class == L.COMPACT:
            compact = bytearray(lay.compact_data)
            start = e0 * ds.itemsize
            compact[start:start + len(data)] = data
            with self.f.store.transaction() as txn:
                HeaderEdit(txn, ds.header).set(M.LAYOUT, self._layout(replace(lay, compact_data=bytes(compact))))
                self.commit(txn, [ds.address])
        else:
            source = ds.source
            if not isinstance(source, ContiguousSource):
                self._allocate_contiguous(ds)
                source = ds.source
            store = self.f.store
            store.write(source.start + e0 * ds.itemsize, data)
            self._state(ds).contiguous = True

    def _write_source(self, ds: Dataset, offset: int, data: bytes) -> None:
        """A virtual dataset's piece for one of its sources (whole elements)."""
        self._check_writable(ds)
        self._write_elements(ds, offset // ds.itemsize, data)

    def _layout(self, lay: L.DataLayout) -> bytes:
        return M.encode(M.LAYOUT, lay, self.f.sizes)

    # -- chunks -------------------------------------------------------------------------------
    def _write_chunks(self, ds: Dataset, e0: int, data: bytes) -> None:
        source: ChunkedSource = ds.source
        st, isz = self._state(ds), ds.itemsize
        src = np.frombuffer(data, np.uint8)
        pos, coords = 0, None
        for box in linear_boxes(source.shape, e0, e0 + len(data) // isz):
            n = prod(box[1])
            part = src[pos * isz:(pos + n) * isz].reshape(box[1] + (isz,))
            pos += n
            for coords in chunks_in_box(box, source.chunk):
                dst, inside = overlap(box, coords, source.chunk)
                # a new dirty chunk the write fills entirely is made from the data at once
                whole = part[dst] if coords not in st.chunks and _whole(inside, source.chunk) else None
                buf = self._dirty_chunk(source, st, coords, _covers(inside, coords, source), whole)
                if buf is None:
                    piece = part[dst].copy()
                    st.patches.setdefault(coords, []).append((inside, piece))
                    self.nbytes += _cost(piece)
                elif whole is None:
                    np.frombuffer(buf, np.uint8).reshape(source.chunk + (isz,))[inside] = part[dst]
                st.versions[coords] = st.versions.get(coords, 0) + 1
        # a sequential writer that moved on is done with the chunk it left: filter it now (a
        # random writer comes back: its chunks wait for the flush)
        if st.last is not None and st.last != coords and e0 == st.end and (ds.filters or ds.sparse):
            self._encode_ahead(ds, source, st, st.last)
        st.last, st.end = coords, e0 + len(data) // isz

    def _dirty_chunk(self, source: ChunkedSource, st: Dirty, coords: tuple[int, ...],
                     covered: bool, whole: np.ndarray | None = None) -> bytearray | None:
        """The chunk's private dirty copy, made on the first write from the fill value when the
        write covers it (from `whole` when the write fills the whole chunk), else from the chunk
        as memory holds it (pending patches applied), and pinned in the chunk cache; None when
        the chunk would have to be read and decoded (the write becomes a patch)."""
        buf = st.chunks.get(coords)
        if isinstance(buf, memoryview):   # a write's own bytes (`_whole_chunk`): copied before they change
            self.nbytes -= len(buf)
            buf = self._keep(source, st, coords, bytearray(buf))
        if buf is not None:
            return buf
        patches = st.patches.pop(coords, [])
        self.nbytes -= _costs(patches)
        if covered:   # patches superseded
            return self._keep(source, st, coords, bytearray(source._fill()) if whole is None else _whole_chunk(whole))
        # a flush under way may hold patches of this chunk: the cache then has the chunk
        # without them (decoded for that flush), and they come first
        flushing = self.flushing.get(source.owner[0])
        older = flushing.patches.get(coords, []) if flushing else []
        base = self.f.chunk_cache.peek((source.owner, coords))
        if base is None:
            if patches or older or source.sparse or source.index.lookup(coords) is not None:
                st.patches[coords] = patches
                self.nbytes += _costs(patches)
                return None
            base = source._fill()
        return self._keep(source, st, coords, _patched(base, older + patches, source))

    def _keep(self, source: ChunkedSource, st: Dirty, coords: tuple[int, ...], buf: bytearray) -> bytearray:
        st.chunks[coords] = buf
        self.nbytes += len(buf)
        self.f.chunk_cache.put((source.owner, coords), buf, pinned=True)
        return buf

    def holds(self, address: int) -> bool:
        """Whether writes to the dataset are not all in the file: reads go through `read`."""
        return address in self.dirty or address in self.flushing

    def read(self, ds: Dataset, offset: int, size: int, npy: bool = False) -> bytes:
        """Raw (or `.npy` body) bytes of a dataset with writes not all in the file: pending
        patches applied first, and no flush retires the dataset's version (moving its dirty
        chunks to the next) while the read looks for them."""
        with self.lock:
            self.materialize(ds, offset, size)
            return ds.read_npy_body(offset, size) if npy else ds.read_raw(offset, size)

    def materialize(self, ds: Dataset, offset: int, size: int) -> None:
        """Apply the pending patches of the chunks under raw bytes [offset, offset+size) (of
        the dirty state and of a flush under way), so that a read sees them."""
        with self.lock:
            states = [s for s in (self.dirty.get(ds.address), self.flushing.get(ds.address)) if s and s.patches]
            if not states or not ds.layout.chunked:
                return
            source: ChunkedSource = ds.source
            isz, st = ds.itemsize, self._state(ds)
            older = self.flushing.get(ds.address)
            for box in linear_boxes(source.shape, offset // isz, -(-(offset + size) // isz)):
                for coords in chunks_in_box(box, source.chunk):
                    if coords in st.chunks or not any(coords in s.patches for s in states):
                        continue
                    # the chunk as memory or the file holds it (a flush's own copy pinned
                    # while it is written), the flush's patches, then the newer ones
                    base = self.f.chunk_cache.peek((source.owner, coords)) or source.chunk_bytes_at(coords)
                    mine = st.patches.pop(coords, [])
                    self.nbytes -= _costs(mine)
                    patches = (older.patches.get(coords, []) if older else []) + mine
                    self._keep(source, st, coords, _patched(base, patches, source))

    def _encode_ahead(self, ds: Dataset, source: ChunkedSource, st: Dirty, coords: tuple[int, ...]) -> None:
        buf = st.chunks.get(coords)
        if buf is not None:
            st.encoded[coords] = (st.versions[coords], self.pool.submit(self._encoder(ds, source), coords, buf))

    # -- flush --------------------------------------------------------------------------------
    def flush(self) -> None:
        """Everything written so far, in the file and durable: one group commit. Writes go on
        meanwhile (into new dirty chunks: those being flushed are not changed again)."""
        with self.commit_lock:
            broken = self._commit_dirty(None)
            self.f.store.settle()   # the file alone holds every commit: no journal record left
        if broken:
            raise broken[0]

    def land(self, addresses: list[int]) -> None:
        """The writes of these datasets (a file closed) committed, not waiting for the group
        commit to make them durable: once the kernel holds them a `kill -9` loses none."""
        with self.commit_lock:
            broken = self._commit_dirty(set(addresses))
        if broken:
            raise broken[0]

    def _commit_dirty(self, only: set[int] | None) -> list[H5fsError]:
        """Commit the dirty state of the datasets `only` (None: all); returns the datasets left
        out broken (`_flush`)."""
        with self.lock:
            if only is None:
                batch, self.dirty, nbytes, self.nbytes = self.dirty, {}, self.nbytes, 0
            else:
                batch = {a: self.dirty.pop(a) for a in only if a in self.dirty}
                nbytes = sum(_dirty_nbytes(st) for st in batch.values())
                self.nbytes -= nbytes
            self.flushing, self.flushing_nbytes = batch, nbytes
        if not batch:
            return []
        try:
            return self._flush(batch)
        except BaseException:
            with self.lock:   # nothing was published: the batch stays dirty, newer writes win
                self.flushing, self.flushing_nbytes = {}, 0
                for address, st in batch.items():
                    self._restore(address, st)
            raise

    def _flush(self, batch: dict[int, Dirty]) -> list[H5fsError]:
        """Commit the batch, in parts (`_parts`). A dataset whose chunks cannot be made (a chunk
        the file holds corrupt under a write) is left out, its writes dropped: it is returned,
        the rest lands."""
        broken: list[H5fsError] = []
        lost: set[int] = set()
        self.flush_done, self.flush_total = 0, sum(_chunk_count(st) for st in batch.values())
        for i, part in enumerate(self._parts(batch)):
            if i:   # the space the parts before freed, reusable once the file no longer uses it
                self.f.store.settle()
            with self.f.store.transaction() as txn:
                changed = []
                for address, st in part:
                    if address in lost:
                        continue
                    ds = self.f.get(address, st.path)   # as the previous part left it
                    if st.chunks or st.patches:
                        try:
                            self.stage_chunks(txn, ds, HeaderEdit(txn, ds.header), self._encode(ds, ds.source, st.chunks, st))
                        except _Broken as exc:
                            log.error("%s: writes lost, the dataset is broken in the file: %s", ds.path, exc.error)
                            broken.append(exc.error)
                            lost.add(address)
                            self._drop(address)
                            continue
                    changed.append(address)
                txn.owners.update(changed)
                txn.commit()
            with self.lock:   # no write may pin a chunk under a version of the dataset being retired
                self._forget(txn, changed)
            self.flush_done += sum(_chunk_count(st) for _, st in part)
        if any(st.external for st in batch.values()):
            external_sync_all(self.f)
        if any(st.contiguous for st in batch.values()):
            self.f.store.writer.sync()
        with self.lock:
            self.flushing, self.flushing_nbytes = {}, 0
            for address, st in batch.items():   # written now: evictable unless written again since
                owner = (address, self.f.generation(address))
                for coords, buf in st.chunks.items():
                    if self.f.chunk_cache.peek((owner, coords)) is buf:
                        self.f.chunk_cache.unpin((owner, coords))
        return broken

    def _parts(self, batch: dict[int, Dirty]) -> Iterator[list[tuple[int, Dirty]]]:
        """The batch as transactions of at most the budget's worth of chunks each: the space a
        part frees is reused by the next, so a flush that rewrites many chunks (random writes
        held as small patches) does not grow the file by all of them at once."""
        part: list[tuple[int, Dirty]] = []
        room = self.dirty_limit
        for address, st in batch.items():
            todo = list(st.chunks) + [c for c in st.patches if c not in st.chunks]
            if not todo:
                part.append((address, st))
                continue
            size = max(1, self.f.get(address, st.path).source.chunk_bytes)
            while todo:
                n = max(1, room // size)
                take, todo = todo[:n], todo[n:]
                part.append((address, replace(st, chunks={c: st.chunks[c] for c in take if c in st.chunks},
                                              patches={c: st.patches[c] for c in take if c in st.patches})))
                room -= len(take) * size
                if room < size:
                    yield part
                    part, room = [], self.dirty_limit
        if part:
            yield part

    def discard(self, address: int) -> None:
        """A dataset going away: its writes not in the file are forgotten."""
        with self.commit_lock:
            self._drop(address)

    def _drop(self, address: int) -> None:
        """Forget every write of a dataset not yet in the file (its chunks pinned included)."""
        with self.lock:
            self.stamps.pop(address, None)
            st = self.dirty.pop(address, None)
            if st is not None:
                self.nbytes -= _dirty_nbytes(st)
            self.f.chunk_cache.invalidate_owner((address, self.f.generation(address)))

    def _restore(self, address: int, old: Dirty) -> None:
        st = self.dirty.get(address)
        if st is None:
            self.dirty[address] = old
            self.nbytes += sum(len(b) for b in old.chunks.values())
            self.nbytes += sum(_costs(ps) for ps in old.patches.values())
            return
        for coords, buf in old.chunks.items():
            if coords not in st.chunks:
                # a newer patch of the chunk goes on top of the older whole chunk
                buf = _patched(buf, st.patches.pop(coords, []), self.f.get(address, st.path).source)
                st.chunks[coords], st.versions[coords] = buf, old.versions[coords]
                self.nbytes += len(buf)
        for coords, patches in old.patches.items():
            if coords not in st.chunks:
                st.patches[coords] = patches + st.patches.get(coords, [])
                self.nbytes += _costs(patches)
        st.contiguous |= old.contiguous
        st.external |= old.external

    def flush_soon(self) -> None:
        """Start flushing in the background (writes go on) unless a flush is under way."""
        if self._background is None or self._background.done():
            self._background = self.flusher.submit(self.flush)

    def stage_chunks(self, txn: Transaction, ds: Dataset, header: HeaderEdit,
                     encoded: Iterator[tuple[tuple[int, ...], tuple[bytes | None, int, object]]],
                     lay: L.DataLayout | None = None) -> L.DataLayout | None:
        """Write encoded chunks (see `_encode`; no bytes: the chunk goes) to fresh space as they
        come, free what they replace and update the index (`lay`: the layout as this
        transaction left it so far); the changed layout is set in `header` and returned. When a
        chunk cannot be made (`_Broken`), the space of those written is given back."""
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
        except _Broken:
            for rec in records:   # written, never referenced
                txn.free(rec.address, rec.size, raw=True)
            raise
        for old in replaced + gone:
            txn.free(old.address, old.size, raw=True)
        new_layout = index.put(txn, records) if records else None
        if gone:
            new_layout = index.remove(txn, [r.coords for r in gone]) or new_layout
        if new_layout is not None:
            header.set(M.LAYOUT, self._layout(new_layout))
        return new_layout

    def _encode(self, ds: Dataset, source: ChunkedSource, chunks,
                st: Dirty | None) -> Iterator[tuple[tuple[int, ...], tuple[bytes | None, int, object]]]:
        """(coords, (stored bytes, filter mask, sections)) of each chunk, and of each chunk `st` holds as
        patches (read, decoded and patched first): filtered in the pool with a few chunks in
        flight (memory stays bounded however many a flush writes), or taken from the encoding
        done ahead when the chunk did not change since. A chunk that cannot be made raises
        `_Broken`."""
        ahead = st.encoded if st is not None else {}
        encode = self._encoder(ds, source)
        jobs: list = []
        for coords, buf in chunks.items():
            done = ahead.get(coords)
            jobs.append((coords, done[1] if done and done[0] == st.versions[coords] else (encode, buf)))
        for coords, patches in (st.patches if st is not None else {}).items():
            jobs.append((coords, (lambda c, p: encode(c, _patched(source.chunk_bytes_at(c), p, source)), patches)))
        running: deque[tuple[tuple[int, ...], Future]] = deque()
        for n, (coords, job) in enumerate(jobs, 1):
            running.append((coords, job if isinstance(job, Future) else self.pool.submit(job[0], coords, job[1])))
            while running and (len(running) > ENCODE_WINDOW or n == len(jobs)):
                c, future = running.popleft()
                try:
                    result = future.result()
                except H5fsError as exc:
                    for _, other in running:
                        other.cancel()
                    raise _Broken(exc) from exc
                yield c, result

    def _encoder(self, ds: Dataset, source: ChunkedSource):
        """A function (coords, chunk bytes) -> (stored bytes, filter mask, section metadata) for
        the pool; a sparse chunk of nothing but fill values is (None, 0, None): no chunk."""
        if ds.sparse:
            codec = source.codec

            def encode_sparse(coords: tuple[int, ...], buf: bytearray):
                made = codec.encode(buf, source._is_edge(coords), f"{ds.path} chunk {coords}")
                return (None, 0, None) if made is None else (made[0], 0, made[1])
            return encode_sparse
        from ..storage.filters.pipeline import encode_chunk
        filters, info = ds.filters, ChunkInfo(source.chunk_bytes, ds.itemsize, ds.path)
        skip_edges = bool(ds.layout.flags & L.DONT_FILTER_PARTIAL_BOUND_CHUNKS)

        def encode(coords: tuple[int, ...], buf: bytearray) -> tuple[bytes, int, None]:
            if not filters or skip_edges and source._is_edge(coords):
                return buf, 0, None     # written as it is (a flush's chunks do not change)
            return (*encode_chunk(filters, bytes(buf), replace(info, what=f"{ds.path} chunk {coords}")), None)
        return encode

    def commit(self, txn: Transaction, addresses: list[int]) -> None:
        """Commit `txn` and forget what it made stale (`addresses`: object headers it changed)."""
        txn.commit()
        self._forget(txn, addresses)

    def _forget(self, txn: Transaction, addresses: list[int]) -> None:
        """Drop what the committed transaction made stale: rewritten and freed blocks, and the
        state of the objects whose headers it changed."""
        for address, size in txn.rewritten + txn.freed:
            self.f.invalidate_range(address, address + size)
        for address in addresses:
            self.f.invalidate(address)

    # -- storage allocation ---------------------------------------------------------------------
    def _allocate_contiguous(self, ds: Dataset) -> None:
        """Allocate a contiguous dataset's storage (never written so far), filled with its fill
        value, and publish it in the layout message."""
        size = ds.dataspace.count * ds.itemsize
        with self.f.store.transaction() as txn:
            address = txn.allocate(size, raw=True)
            position = self.f.reader.base + address
            if position >= os.fstat(self.f.fd).st_size and not any(ds.fill_value or b""):
                self.f.store.grow(position + size)   # new zeros: the file grows sparse
            else:
                for start in range(0, size, FILL_PIECE):
                    n = min(FILL_PIECE, size - start)
                    txn.write_data(address + start, fill_pattern(ds.fill_value, ds.itemsize, start, n),
                                   rewritable=True)
            HeaderEdit(txn, ds.header).set(M.LAYOUT, self._layout(replace(ds.layout, address=address, size=size)))
            self.commit(txn, [ds.address])

    # -- resizing -------------------------------------------------------------------------------
    def truncate(self, ds: Dataset, size: int) -> None:
        """Resize the raw view to `size` bytes (whole rows) along the first dimension."""
        with self.commit_lock, self.lock:
            self._check_writable(ds)
            if size != ds.source.size:
                self._grow_to(ds, size, whole_rows=True)

    def stamp(self, address: int, seconds: int) -> None:
        """The dataset's data changed at `seconds`."""
        with self.lock:
            self.stamps[address] = seconds

    def take_stamps(self) -> dict[int, int]:
        """The modification times to record (call holding `commit_lock`: no dataset among them
        can be freed meanwhile)."""
        with self.lock:
            stamps, self.stamps = self.stamps, {}
        return stamps

    def room(self, ds: Dataset) -> int | None:
        """The raw bytes the dataset can reach by writes: its maximum first dimension's worth
        (chunked storage), its size (other storage or no dimension); None: unlimited."""
        space = ds.dataspace
        if space.kind != S.SIMPLE or not space.dims or not ds.layout.chunked:
            return ds.source.size
        limit = space.maxdims[0]
        return None if limit is None else limit * prod(space.dims[1:]) * ds.itemsize

    def _grow_to(self, ds: Dataset, size: int, whole_rows: bool) -> None:
        space = ds.dataspace
        if space.kind != S.SIMPLE or not space.dims:
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
        self.flush()
        self._resize(self.f.get(ds.address, ds.path), rows)

    def _resize(self, ds: Dataset, rows: int) -> None:
        space, lay = ds.dataspace, ds.layout
        dims = (rows,) + space.dims[1:]
        with self.f.store.transaction() as txn:
            header = HeaderEdit(txn, ds.header)
            if rows < space.dims[0]:
                lay = self._cut(txn, ds, header, rows) or lay
            header.set(M.DATASPACE, M.encode(M.DATASPACE, replace(space, dims=dims), self.f.sizes))
            index = open_index(IndexContext(txn.reader, lay, dims, space.maxdims, ds.index_filtered, ds.path))
            new_layout = index.resize(txn, dims)
            if new_layout is not None:
                header.set(M.LAYOUT, self._layout(new_layout))
                lay = new_layout
            if rows > space.dims[0] and _allocated_early(ds):
                self.stage_chunks(txn, ds, header, self._encode(ds, ds.source, self._fill_chunks(ds, index, dims), None), lay)
            self.commit(txn, [ds.address])

    def _fill_chunks(self, ds: Dataset, index, dims: tuple[int, ...]) -> dict[tuple[int, ...], bytearray]:
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

    def _cut(self, txn: Transaction, ds: Dataset, header: HeaderEdit, rows: int) -> L.DataLayout | None:
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
                header.set(M.LAYOUT, self._layout(new_layout))
            if lay.index.index_type != L.IMPLICIT:   # implicit chunks are slices of one live block
                for rec in gone:
                    txn.free(rec.address, rec.size, raw=True)
        if cut:
            new_layout = self.stage_chunks(txn, ds, header, self._encode(ds, source, cut, None),
                                            new_layout) or new_layout
        return new_layout


class _Broken(H5fsError):
    """A chunk of a dataset could not be made (the file holds it corrupt): the dataset's writes
    are dropped, the rest of the flush lands."""

    def __init__(self, error: H5fsError):
        super().__init__(str(error))
        self.error, self.errno = error, error.errno


def _dirty_nbytes(st: Dirty) -> int:
    """The bytes the budget counts for a dataset's dirty state."""
    return sum(len(b) for b in st.chunks.values()) + sum(_costs(ps) for ps in st.patches.values())


def _chunk_count(st: Dirty) -> int:
    return len(st.chunks) + sum(1 for c in st.patches if c not in st.chunks)


def _cost(piece: np.ndarray) -> int:
    """What a patch holds against the budget: its elements and the objects around them."""
    return piece.nbytes + PATCH_OVERHEAD


def _costs(patches) -> int:
    return sum(_cost(p) for _, p in patches)


def _patched(base: bytes, patches, source: ChunkedSource) -> bytearray:
    """A private copy of a chunk's bytes with the patches applied in order."""
    buf = bytearray(base)
    if patches:
        view = np.frombuffer(buf, np.uint8).reshape(source.chunk + (source.itemsize,))
        for inside, piece in patches:
            view[inside] = piece
    return buf


def _allocated_early(ds: Dataset) -> bool:
    fill = ds.message(M.FILL)
    return fill is not None and fill.alloc_time == ALLOC_EARLY


def _whole_chunk(data: np.ndarray) -> memoryview | bytearray:
    """A chunk's content from the elements of a write that fill it: the write's own bytes, not
    copied, when they are immutable (FUSE hands `bytes`) and lie in one piece."""
    keep = data.flags.c_contiguous and not data.flags.writeable
    return memoryview(data).cast("B") if keep else bytearray(data)


def _whole(inside: tuple[slice, ...], chunk: tuple[int, ...]) -> bool:
    return all(s.start == 0 and s.stop == k for s, k in zip(inside, chunk))


def _covers(inside: tuple[slice, ...], coords: tuple[int, ...], source: ChunkedSource) -> bool:
    """Whether the slices cover every element of the chunk that lies inside the dataset."""
    return all(s.start == 0 and s.stop >= min(k, d - c * k)
               for s, c, k, d in zip(inside, coords, source.chunk, source.shape))
