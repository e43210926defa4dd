"""Writeback: writes into a dataset's raw bytes become dirty chunks, flushed in transactions.

Reads see writes at once: a write makes dirty chunks, pinned in the file's chunk cache where
every read looks first, or patches of stored chunks not in memory, applied when a read (`read`,
`materialize`) or the flush needs the chunk (model/chunk_staging.py makes, encodes and stages
chunks). `flush` filters the dirty chunks, writes them to fresh space, puts their records in the
chunk index and commits (storage/transaction.py); the old chunks' space is freed after the
commit. Past half the budget a flush starts in the background; writes go on into new dirty
chunks meanwhile (the ones being flushed are not changed again).

Contiguous data is written in place (the page cache holds it until `flush` fsyncs it); storage
never allocated is allocated at the first write and published by the layout message. Compact
data lives in the layout message: each write rewrites it at once (compact data is small).
Resizes (a write past the end, a truncate) are transactions of their own (model/resize.py).

Two locks: `commit_lock` makes commits (flushes, resizes, compact writes, allocations) one at a
time and is taken first; `lock` guards the dirty state, is held by each write, and by a flush
only to take its batch and to retire the dataset's version after its commit. Reads of a dataset
with writes not all in the file take `lock` too (`read`), so no version is retired under them.
"""

from __future__ import annotations

import logging
import threading
from contextlib import nullcontext
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from math import prod

import numpy as np

from ..errors import CannotWrite, H5fsError
from ..format.messages import dataspace as DS
from ..format.messages import layout as L
from ..storage.chunk_grid import chunks_in_box, linear_boxes, overlap
from ..storage.chunked import ChunkedSource
from ..storage.object_header.edit import HeaderEdit
from ..storage.object_header.reader import read as read_header
from ..storage.sources import ContiguousSource
from ..storage.transaction import Transaction
from . import header_times
from . import messages as M
from .chunk_staging import (BrokenChunk, Dirty, batch_parts, chunk_count, cost, costs, covers, dirty_chunk,
                            dirty_nbytes, encode_ahead, encode_chunks, fills, keep_dirty, layout_message, patched,
                            stage_chunks)
from .dataset import Dataset
from .external import external_close_all, external_sync_all, external_write
from .resize import allocate_contiguous, grow_to
from .virtual_write import virtual_write

log = logging.getLogger("h5fs")

DEFAULT_DIRTY_LIMIT = 64 * 1024 * 1024   # dirty chunk bytes held before writes flush them
CLOSE_COMMIT = 8 * 1024 * 1024           # dirty bytes of a closed file committed at its close


class Writeback:
    def __init__(self, f, dirty_limit: int = DEFAULT_DIRTY_LIMIT, workers: int = 2):
        if f.store is None:
            raise ValueError("the file is not open for writing")
        self.f = f
        self.dirty_limit = dirty_limit
        self.dirty: dict[int, Dirty] = {}    # dataset address -> its dirty state
        # dataset address -> when its data was last written (s): its header's time takes it
        # in the commit of its data (`_stamp`); a dataset freed meanwhile leaves with its writes (`_drop`)
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
        f.store.wants_flush = self.flush_soon   # a journal past its limit with link edits deferred

    def waiting(self) -> tuple[int, int]:
        """(dirty bytes, chunks) not in the file yet, those being flushed included."""
        with self.lock:
            chunks = sum(chunk_count(st) for batch in (self.dirty, self.flushing) for st in batch.values())
            return self.nbytes + self.flushing_nbytes, chunks

    def close(self) -> None:
        self.f.store.wants_flush = None
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
                grow_to(self, ds, end, whole_rows=False)
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
                new = replace(lay, compact_data=bytes(compact))
                HeaderEdit(txn, ds.header).set(M.LAYOUT, layout_message(new, self.f.sizes))
                self.commit(txn, [ds.address])
        else:
            source = ds.source
            if not isinstance(source, ContiguousSource):
                allocate_contiguous(self, ds)
                source = ds.source
            self.f.store.write(source.start + e0 * ds.itemsize, data)
            self._state(ds)   # held until the flush, whose group commit makes it durable

    def _write_source(self, ds: Dataset, offset: int, data: bytes) -> None:
        """A virtual dataset's piece for one of its sources (whole elements)."""
        self._check_writable(ds)
        self._write_elements(ds, offset // ds.itemsize, data)

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
                whole = part[dst] if coords not in st.chunks and fills(inside, source.chunk) else None
                buf = dirty_chunk(self, source, st, coords, covers(inside, coords, source), whole)
                if buf is None:
                    piece = part[dst].copy()
                    st.patches.setdefault(coords, []).append((inside, piece))
                    self.nbytes += cost(piece)
                elif whole is None:
                    np.frombuffer(buf, np.uint8).reshape(source.chunk + (isz,))[inside] = part[dst]
                st.versions[coords] = st.versions.get(coords, 0) + 1
        # a sequential writer that moved on is done with the chunk it left: filter it now (a
        # random writer comes back: its chunks wait for the flush); one that reached the end of
        # the data is done with the last chunk too (a copied file's close then finds it filtered,
        # or being filtered in the pool while the kernel brings the close)
        end = e0 + len(data) // isz
        if ds.filters or ds.sparse:
            if st.last is not None and st.last != coords and e0 == st.end:
                encode_ahead(self.pool, ds, source, st, st.last)
            if end == prod(source.shape):
                encode_ahead(self.pool, ds, source, st, coords)
        st.last, st.end = coords, end

    @property
    def pending(self) -> bool:
        """Whether anything is not yet durable in the file: dirty data, or committed changes
        (namespace edits among them) the group commit has not settled."""
        return bool(self.dirty) or self.f.store.unsettled_changes

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
                    self.nbytes -= costs(mine)
                    patches = (older.patches.get(coords, []) if older else []) + mine
                    keep_dirty(self, source, st, coords, patched(base, patches, source))

    # -- flush --------------------------------------------------------------------------------
    def flush(self) -> None:
        """Everything written so far, in the file and durable: one group commit. Writes go on
        meanwhile (into new dirty chunks: those being flushed are not changed again)."""
        with self.commit_lock:
            broken = self._commit_dirty(None)
            try:
                self.f.land_links()
            finally:   # what is committed becomes durable even when link edits could not land
                self.f.store.group_commit()   # the file alone holds every commit: no journal record left
        if broken:
            raise broken[0]

    def closed(self, address: int) -> None:
        """A file of the dataset was closed: writes of up to CLOSE_COMMIT bytes are committed
        now (not waiting for the group commit to make them durable: once the kernel holds them
        a `kill -9` loses none); more wait for the flush, so that a close does not wait for
        gigabytes to be filtered."""
        with self.lock:
            st = self.dirty.get(address)
            if st is None or dirty_nbytes(st) > CLOSE_COMMIT:
                return
        self.land([address])

    def land(self, addresses: list[int]) -> None:
        """The writes of these datasets committed, not waiting for the group commit."""
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
                nbytes = sum(dirty_nbytes(st) for st in batch.values())
                self.nbytes -= nbytes
            self.flushing, self.flushing_nbytes = batch, nbytes
        if not batch and not self.stamps:
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
        self.flush_done, self.flush_total = 0, sum(chunk_count(st) for st in batch.values())
        parts = list(batch_parts(batch, self.dirty_limit, lambda a, st: self.f.get(a, st.path))) or [[]]
        last = parts[-1]
        for part in parts:
            with self.f.store.transaction() as txn:
                changed = []
                for address, st in part:
                    if address in lost:
                        continue
                    ds = self.f.get(address, st.path)   # as the previous part left it
                    edit = HeaderEdit(txn, ds.header) if st.chunks or st.patches or address in self.stamps else None
                    if st.chunks or st.patches:
                        try:
                            stage_chunks(txn, ds, edit, encode_chunks(self.pool, ds, ds.source, st.chunks, st))
                        except BrokenChunk as exc:
                            log.error("%s: writes lost, the dataset is broken in the file: %s", ds.path, exc.error)
                            broken.append(exc.error)
                            lost.add(address)
                            self._drop(address)
                            continue
                    if edit is not None:
                        self._stamp(edit, address)
                    changed.append(address)
                if part is last:
                    changed += self._stamp_others(txn, batch)
                txn.owners.update(changed)
                txn.commit()
            with self.lock:   # no write may pin a chunk under a version of the dataset being retired
                self._forget(txn, changed)
            self.flush_done += sum(chunk_count(st) for _, st in part)
        if any(st.external for st in batch.values()):
            external_sync_all(self.f)
        with self.lock:
            self.flushing, self.flushing_nbytes = {}, 0
            for address, st in batch.items():   # written now: evictable unless written again since
                owner = (address, self.f.generation(address))
                for coords, buf in st.chunks.items():
                    if self.f.chunk_cache.peek((owner, coords)) is buf:
                        self.f.chunk_cache.unpin((owner, coords))
        return broken

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
                self.nbytes -= dirty_nbytes(st)
            self.f.chunk_cache.invalidate_owner((address, self.f.generation(address)))

    def _restore(self, address: int, old: Dirty) -> None:
        st = self.dirty.get(address)
        if st is None:
            self.dirty[address] = old
            self.nbytes += sum(len(b) for b in old.chunks.values())
            self.nbytes += sum(costs(ps) for ps in old.patches.values())
            return
        for coords, buf in old.chunks.items():
            if coords not in st.chunks:
                # a newer patch of the chunk goes on top of the older whole chunk
                buf = patched(buf, st.patches.pop(coords, []), self.f.get(address, st.path).source)
                st.chunks[coords], st.versions[coords] = buf, old.versions[coords]
                self.nbytes += len(buf)
        for coords, patches in old.patches.items():
            if coords not in st.chunks:
                st.patches[coords] = patches + st.patches.get(coords, [])
                self.nbytes += costs(patches)
        st.external |= old.external

    def flush_soon(self) -> None:
        """Start flushing in the background (writes go on) unless a flush is under way."""
        if self._background is None or self._background.done():
            self._background = self.flusher.submit(self.flush)

    def commit(self, txn: Transaction, addresses: list[int]) -> None:
        """Commit `txn` and forget what it made stale (`addresses`: object headers it changed)."""
        txn.commit()
        self._forget(txn, addresses)

    def _forget(self, txn: Transaction, addresses: list[int]) -> None:
        """Drop what the committed transaction made stale: rewritten and freed blocks, and the
        state of the objects whose headers it changed."""
        self.f.forget(txn, addresses)

    # -- resizing -------------------------------------------------------------------------------
    def truncate(self, ds: Dataset, size: int) -> None:
        """Resize the raw view to `size` bytes (whole rows) along the first dimension."""
        with self.commit_lock, self.lock:
            self._check_writable(ds)
            if size != ds.source.size:
                grow_to(self, ds, size, whole_rows=True)

    def room(self, ds: Dataset) -> int | None:
        """The raw bytes the dataset can reach by writes: its maximum first dimension's worth
        (chunked storage), its size (other storage or no dimension); None: unlimited."""
        space = ds.dataspace
        if space.kind != DS.SIMPLE or not space.dims or not ds.layout.chunked:
            return ds.source.size
        limit = space.maxdims[0]
        return None if limit is None else limit * prod(space.dims[1:]) * ds.itemsize

    def stamp(self, address: int, seconds: int) -> None:
        """The dataset's data changed at `seconds`."""
        with self.lock:
            self.stamps[address] = seconds

    def _stamp(self, edit: HeaderEdit, address: int) -> bool:
        """The time of the dataset's last write into its header, where it keeps one (none is
        added: libhdf5 does not stamp writes either), in the commit of its data; whether it did."""
        with self.lock:
            seconds = self.stamps.pop(address, None)
        return seconds is not None and header_times.set_times(edit, self.f.sizes, mtime=seconds, ctime=seconds)

    def _stamp_others(self, txn: Transaction, batch: dict[int, Dirty]) -> list[int]:
        """The times of datasets written with nothing left to commit (a truncation's: not in
        the flush's `batch`, nor dirty again), in the flush's last transaction; the headers
        changed."""
        with self.lock:
            others = [a for a in self.stamps if a not in self.dirty and a not in batch]
        stamped = []
        for address in others:
            try:
                header = read_header(txn.reader, address, f"object at {address}")
            except H5fsError:   # unreadable: its readers say why
                continue
            if self._stamp(HeaderEdit(txn, header), address):
                stamped.append(address)
        return stamped
