"""HsdsWriteback: writes into HSDS datasets' raw views, staged in memory and sent in batches, with
the surface the FUSE layer uses on the local engine's Writeback (model/writeback.py).

A write stages bytes (staging.py; partial elements completed with the bytes around them);
reads of a dataset holding staged bytes (`holds`) go through `read`: the service's bytes with
the staged ones over them. `flush_data` sends every staged range as the hyperslab boxes of
blocks.py (each at most a read block's bytes, so no request passes the service's limit), in
parallel, then drops the dataset's blocks from the domain's cache. `flush` does that, then the
service's own durability flush (`PUT /?flush=1`, about 2 s: the data node writes everything to
storage), so fsync and unmount, which call `flush`, return once the data is held. Past half of
`dirty_limit` staged bytes a data flush starts in the background; past it the writer flushes.
A failed flush gives its batch back (newer writes over it) for the next one to retry, and raises
the service's HsdsError (its errno kept).

Resizes (`truncate`, a write past the end) are one PUT of the shape, along the first dimension
only, so staged byte offsets stay valid; a shrink drops what is staged past the new end.

Locks, as the local engine's: `commit_lock` (taken first) makes flushes, resizes and discards one
at a time; `lock` guards the staged state and is held only to change or copy it, never during
a request.
"""

from __future__ import annotations

import errno
import logging
import math
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING

from ...errors import InvalidWrite, TooLarge
from ..dtypes import is_converted
from .blocks import block_elements, boxes
from .datatypes import linked_layout, record_of
from .staging import Staged

if TYPE_CHECKING:
    from .dataset import HsdsDataset
    from .domain import HsdsDomain

log = logging.getLogger(__name__)

DEFAULT_DIRTY_LIMIT = 64 << 20
CLOSE_COMMIT = 8 << 20      # staged bytes of a closed dataset sent at its close (as the local engine)
PUT_THREADS = 4             # requests in flight for one flush


class HsdsWriteback:
    def __init__(self, domain: HsdsDomain, dirty_limit: int = DEFAULT_DIRTY_LIMIT):
        self.domain = domain
        self.client = domain.client
        self.dirty_limit = dirty_limit
        self.dirty: dict[int, Staged] = {}       # dataset address -> bytes staged
        self.flushing: dict[int, Staged] = {}    # the batch a flush is sending (reads see it)
        self.nbytes = self.flushing_nbytes = 0
        self.flush_done = self.flush_total = 0   # boxes of the flush under way
        self.lock = threading.RLock()
        self.commit_lock = threading.RLock()
        self._sync_lock = threading.Lock()
        self._changes = self._synced = 0         # changes made / made durable (`pending`)
        self._generation: dict[int, int] = {}    # address -> flushes done: a read racing one reads again
        self._pool = ThreadPoolExecutor(PUT_THREADS, thread_name_prefix="h5fs-hsds-put")
        self._flusher = ThreadPoolExecutor(1, thread_name_prefix="h5fs-hsds-flush")
        self._background: Future | None = None

    # -- state -----------------------------------------------------------------------------
    def waiting(self) -> tuple[int, int]:
        """(staged bytes, ranges) not in the service yet, those being sent included."""
        with self.lock:
            ranges = sum(len(st) for batch in (self.dirty, self.flushing) for st in batch.values())
            return self.nbytes + self.flushing_nbytes, ranges

    @property
    def pending(self) -> bool:
        """Whether anything is not durable in the service yet: staged bytes, or changes (edits,
        data sent) its durability flush has not covered."""
        return bool(self.dirty or self.flushing) or self._changes != self._synced

    def holds(self, address: int) -> bool:
        return address in self.dirty or address in self.flushing

    def edited(self) -> None:
        """A change went to the service (an edit): the next `flush` makes it durable."""
        self._changes += 1

    # -- writes ------------------------------------------------------------------------------
    def write(self, ds: HsdsDataset, offset: int, data: bytes) -> int:
        """Stage `data` at byte `offset` of the raw view (growing it along the first dimension
        past the end, as far as its maximum allows: EFBIG beyond); the bytes taken."""
        if not data:
            return 0
        ds.check_writable()
        taken, end, isz = len(data), offset + len(data), ds.itemsize
        if end > ds.raw_size:
            self._resize(ds, end, whole_rows=False)
        head, tail = offset % isz, -end % isz
        if head or tail:     # partial elements: completed with the bytes they hold
            data = self.read(ds, offset - head, head) + bytes(data) + self.read(ds, end, tail)
            offset -= head
        with self.lock:
            self._stage(ds, offset, data)
        self._budget()
        return taken

    def write_now(self, ds: HsdsDataset, offset: int, data: bytes) -> bool:
        """Stage on the calling thread (the FUSE loop) when that needs no request: whole
        elements inside the dataset, its record kept, the budget not spent, the lock free.
        False: nothing done, use `write`."""
        rec = self.domain.meta.peek(ds.id, "record", None)
        if rec is None or not data or rec.shape is None or linked_layout(rec.layout):
            return False
        dt = record_of(rec.type)
        end = offset + len(data)
        if (is_converted(dt) or offset % dt.size or end % dt.size or end > math.prod(rec.shape) * dt.size
                or self.nbytes + self.flushing_nbytes + len(data) > self.dirty_limit):
            return False
        if not self.lock.acquire(blocking=False):
            return False
        try:
            self._stage(ds, offset, data)
        finally:
            self.lock.release()
        if self.nbytes > self.dirty_limit // 2:
            self.flush_soon()
        return True

    def _stage(self, ds: HsdsDataset, offset: int, data: bytes) -> None:
        st = self.dirty.get(ds.address)
        if st is None:
            st = self.dirty[ds.address] = Staged(ds.path, ds.id)
        self.nbytes += st.put(offset, data)

    def _budget(self) -> None:
        """Past the budget the writer waits for the flush under way, then sends what is
        staged itself (its error reaches it); past half of it a flush starts behind it."""
        if self.nbytes + self.flushing_nbytes > self.dirty_limit:
            running = self._background
            if running is not None:
                wait([running])
            if self.nbytes > self.dirty_limit // 2:
                self.flush_data()
        elif self.nbytes > self.dirty_limit // 2:
            self.flush_soon()

    # -- reads -------------------------------------------------------------------------------
    def read(self, ds: HsdsDataset, offset: int, size: int, npy: bool = False) -> bytes:
        """Raw (or, the same bytes for fixed-size types, `.npy` body) bytes with the staged
        ones over the service's. A range staged whole needs no request (the service may be
        away: staged bytes still read)."""
        size = max(0, min(size, ds.raw_size - max(0, offset)))
        offset = max(0, offset)
        for attempt in (0, 1):
            with self.lock:
                states = [s for s in (self.flushing.get(ds.address), self.dirty.get(ds.address)) if s]
                if any(s.covers(offset, size) for s in states):
                    return self._overlaid(ds.address, offset, bytearray(size))
                generation = self._generation.get(ds.address, 0)
            base = bytearray(ds.read_raw(offset, size))
            with self.lock:
                # a flush that ended meanwhile took its batch away: its bytes may not be in `base`
                if attempt or generation == self._generation.get(ds.address, 0):
                    return self._overlaid(ds.address, offset, base)
            self.domain.chunk_cache.forget(ds.id)
        raise AssertionError("unreachable")

    def _overlaid(self, address: int, offset: int, out: bytearray) -> bytes:
        for batch in (self.flushing, self.dirty):     # older, then newer
            st = batch.get(address)
            if st is not None:
                st.overlay(offset, out)
        return bytes(out)

    # -- flushing ------------------------------------------------------------------------------
    def flush(self, durable: bool = True) -> None:
        """Every staged byte sent; with `durable` (fsync, unmount), then held in the service's
        storage with every edit made before (its durability flush, about 2 s). New groups
        waiting to be sent go first (creations.py)."""
        self.domain.creations.send()
        self.flush_data()
        if durable:
            self.sync()

    def sync(self) -> None:
        """The service's durability flush, when anything changed since the last one."""
        with self._sync_lock:
            changes = self._changes
            if changes != self._synced:
                self.client.flush()
                self._synced = changes

    def flush_soon(self) -> None:
        """Send the staged bytes in the background (writes go on) unless that is under way;
        a failure is logged, its bytes kept for the next flush."""
        if self._background is None or self._background.done():
            self._background = self._flusher.submit(self._quietly)

    def _quietly(self) -> None:
        try:
            self.flush_data()
        except Exception as e:  # noqa: BLE001 - kept staged: fsync and unmount meet the error
            log.error("HSDS %s: staged writes not sent, kept for the next flush: %s", self.domain.name, e)

    def closed(self, address: int) -> None:
        """A file of the dataset was closed: up to CLOSE_COMMIT staged bytes are sent now (so
        other clients see them), more wait for the flush."""
        with self.lock:
            st = self.dirty.get(address)
            if st is None or st.nbytes > CLOSE_COMMIT:
                return
        self.flush_data({address})

    def flush_data(self, only: set[int] | None = None) -> None:
        """Send the staged bytes of the datasets `only` (None: all), not waiting for them to be
        durable. On failure the batch is staged again under newer writes and the first error
        raised; a dataset the service no longer has loses its writes (logged)."""
        with self.commit_lock:
            with self.lock:
                if only is None:
                    batch, self.dirty = self.dirty, {}
                else:
                    batch = {a: self.dirty.pop(a) for a in only if a in self.dirty}
                nbytes = sum(st.nbytes for st in batch.values())
                self.nbytes -= nbytes
                self.flushing, self.flushing_nbytes = batch, nbytes
            if not batch:
                return
            failed: dict[int, BaseException] = {}
            try:
                failed = self._send(batch)
            except BaseException as e:  # noqa: BLE001 - nothing known sent: all staged again
                failed = {a: e for a in batch}
            finally:
                with self.lock:
                    for address, st in batch.items():
                        error = failed.get(address)
                        if error is None or getattr(error, "errno", None) == errno.ENOENT:
                            if error is not None:
                                log.error("%s: writes lost, the dataset is gone from HSDS: %s", st.path, error)
                            self._generation[address] = self._generation.get(address, 0) + 1
                            self.domain.chunk_cache.forget(st.obj_id)
                        else:
                            newer = self.dirty.get(address)
                            self.dirty[address] = st if newer is None else st.under(newer)
                    self.nbytes = sum(st.nbytes for st in self.dirty.values())
                    self.flushing, self.flushing_nbytes = {}, 0
                if len(failed) < len(batch):
                    self._changes += 1
            for error in failed.values():
                if getattr(error, "errno", None) != errno.ENOENT:
                    raise error

    def _send(self, batch: dict[int, Staged]) -> dict[int, BaseException]:
        """PUT every box of the batch, PUT_THREADS at a time; the first error of each dataset."""
        jobs: list[tuple[int, str, tuple | None, int, memoryview]] = []
        for address, st in batch.items():
            ds = self.domain.get(address, st.path)
            shape, isz = ds.shape, ds.itemsize
            per_block = block_elements(shape, isz, self.domain.blocks.block_bytes)
            for start, piece in st.ranges():
                view = memoryview(piece)
                e = start // isz
                stop = e + len(piece) // isz
                while e < stop:     # a block's worth at most per request
                    e1 = min(stop, (e // per_block + 1) * per_block)
                    for box in (boxes(shape, e, e1) if shape else [None]):
                        n = 1 if box is None else math.prod(s.stop - s.start for s in box)
                        at = e * isz - start
                        jobs.append((address, st.obj_id, box, isz, view[at:at + n * isz]))
                        e += n
        self.flush_done, self.flush_total = 0, len(jobs)
        futures = {self._pool.submit(self._put, *job[1:]): job[0] for job in jobs}
        failed: dict[int, BaseException] = {}
        for future in futures:
            error = future.exception()
            if error is not None:
                failed.setdefault(futures[future], error)
        return failed

    def _put(self, obj_id: str, box: tuple | None, isz: int, data: memoryview) -> None:
        self.client.write_bytes(obj_id, box, isz, data)
        self.flush_done += 1

    # -- sizes -------------------------------------------------------------------------------
    def truncate(self, ds: HsdsDataset, size: int) -> None:
        """Resize the raw view to `size` bytes: whole rows along the first dimension (EINVAL
        otherwise), within its maximum (EFBIG beyond)."""
        ds.check_writable()
        if size != ds.raw_size:
            self._resize(ds, size, whole_rows=True)

    def _resize(self, ds: HsdsDataset, size: int, whole_rows: bool) -> None:
        shape, isz = ds.shape, ds.itemsize
        if not shape:
            raise TooLarge(f"{ds.path}: a scalar or empty (H5S_NULL) dataset cannot be resized")
        row = math.prod(shape[1:]) * isz
        if row == 0:
            raise TooLarge(f"{ds.path}: rows of no bytes (shape {shape}) cannot hold {size} bytes")
        rows, rest = divmod(size, row)
        if rest:
            if whole_rows:
                raise InvalidWrite(f"{ds.path}: {size} bytes is not a whole number of {row}-byte rows")
            rows += 1
        limit = ds.maxshape[0]
        if limit is not None and rows > limit:
            raise TooLarge(f"{ds.path}: {rows} rows exceed the maximum dimension {limit}")
        with self.commit_lock:
            if rows < shape[0]:
                with self.lock:
                    st = self.dirty.get(ds.address)
                    if st is not None:
                        before = st.nbytes
                        st.cut(rows * row)
                        self.nbytes -= before - st.nbytes
            self.client.resize(ds.id, (rows,) + tuple(shape[1:]))
            self._generation[ds.address] = self._generation.get(ds.address, 0) + 1
            self.domain.forget(ds.id)
            self.edited()

    def room(self, ds: HsdsDataset) -> int | None:
        """The raw bytes writes may reach: the maximum first dimension's rows (None: unlimited)."""
        shape = ds.shape
        if not shape:
            return ds.raw_size
        limit = ds.maxshape[0]
        return None if limit is None else limit * math.prod(shape[1:]) * ds.itemsize

    # -- the rest of the local engine's surface ------------------------------------------------
    def discard(self, address: int) -> None:
        """A dataset going away: its staged bytes are forgotten."""
        with self.commit_lock, self.lock:
            st = self.dirty.pop(address, None)
            if st is not None:
                self.nbytes -= st.nbytes

    def stamp(self, address: int, seconds: int) -> None:
        """The service stamps its writes itself."""

    def close(self) -> None:
        """Everything sent and durable; then the threads end (on failure the bytes stay staged
        and the error is raised: the caller may try again)."""
        self.flush()
        self._flusher.shutdown()
        self._pool.shutdown()
