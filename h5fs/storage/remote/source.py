"""A remote object as a byte source: aligned blocks from the block cache, what is missing
fetched with few round trips.

- A read pins its blocks, fetches the missing ones (consecutive blocks in one range request, up
  to MAX_REQUEST; the runs of one read in parallel, `requests` at once; a block another read is
  already fetching is waited for, not fetched twice), then reads the cache file with preadv.
- With RWF_NOWAIT (the FUSE thread asking whether it can answer at once) a read whose blocks are
  not all here raises BlockingIOError: it moves to a worker thread, as a local page-cache miss does.
  Any other read on the event loop's thread (a header a lookup reads inline) raises WouldBlock:
  the FUSE boundary fetches in a worker and answers again, so a slow or stalled server never
  holds up the rest of the mount.
- Sequential readers are recognised per stream (a read that starts in or after the block where
  an earlier one stopped and reaches past it): each such read doubles the stream's window (to at
  least twice the read's own blocks), up to MAX_AHEAD, and the blocks of the window are fetched
  in the background (mountpoint-s3's prefetcher), topped up whenever half of it has been read.
  Read-ahead (and a filtered read's chunks announced by `want(wait=False)`) never takes more
  than all but two of the request slots, so a reader's own miss is not queued behind it.
- The chunk index's nodes and a read's chunks are announced with `want`: fetched together.
- At open, one request fetches the superblock with the first INITIAL bytes, where libhdf5
  writes the root group and, in most files, the first metadata.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Sequence

from ..byte_source import NOWAIT, ByteSource, WouldBlock, on_event_loop_thread
from .block_cache import BlockCache
from .client import ObjectClient, RemoteChanged, RemoteError
from .options import RemoteOptions

log = logging.getLogger("h5fs")

MAX_REQUEST = 8 << 20     # bytes of one range request
MAX_AHEAD = 64 << 20      # a sequential stream's largest read-ahead window
MAX_AHEAD_BLOCKS = 1024   # and in blocks
INITIAL = 1 << 20         # fetched at open
STREAMS = 16              # sequential streams followed at once
START_WINDOW = 8          # blocks read ahead when a stream is first seen to continue
LAG = 4                   # blocks behind a stream's end where its slower readers still are


class RemoteSource(ByteSource):
    def __init__(self, url: str, options: RemoteOptions):
        self.name, self.options = url, options
        self.client = ObjectClient(url, options)
        self.size = self.client.version.size
        self.block = options.block
        directory = options.cache_path()
        if directory and not self.client.version.validated:
            log.warning("%s: the server sends neither an ETag nor a Last-Modified: a change of the object can be "
                        "seen only by its size, and no block is kept for the next mount", url)
            directory = None
        self.cache = BlockCache(directory, url, self.client.version.key(), self.size, self.block,
                                options.disk_cache_mb << 20)
        self._pool = ThreadPoolExecutor(options.requests, thread_name_prefix="h5fs-fetch")
        self._lock = threading.Lock()
        self._inflight: dict[int, Future] = {}
        self._background = 0                            # read-ahead requests in flight
        self._streams: OrderedDict[int, int] = OrderedDict()   # next block of a stream -> window
        self._closed = False
        self.per_request = max(1, MAX_REQUEST // self.block)
        # each read scans its window under the lock: small blocks get a shorter one
        self.max_window = max(1, min(MAX_AHEAD // self.block, MAX_AHEAD_BLOCKS))
        try:
            if self.size:
                self._ensure(range(0, (min(self.size, max(INITIAL, self.block)) - 1) // self.block + 1))
        except BaseException:
            self.close()
            raise

    # -- ByteSource ---------------------------------------------------------------------------
    def pread(self, size: int, position: int) -> bytes:
        end = min(position + size, self.size)
        if size <= 0 or position < 0 or end <= position:
            return b""
        blocks = range(position // self.block, (end - 1) // self.block + 1)
        self.cache.pin(blocks)
        try:
            self._serve(blocks, 0)
            return os.pread(self.cache.fd, end - position, position)
        finally:
            self.cache.unpin(blocks)

    def preadv(self, buffers: Sequence[Any], position: int, flags: int = 0) -> int:
        total = sum(memoryview(b).nbytes for b in buffers)
        end = min(position + total, self.size)
        if total <= 0 or position < 0 or end <= position:
            return 0
        blocks = range(position // self.block, (end - 1) // self.block + 1)
        self.cache.pin(blocks)
        try:
            self._serve(blocks, flags)
            return os.preadv(self.cache.fd, buffers, position, flags)
        finally:
            self.cache.unpin(blocks)

    remote = True

    def want(self, spans: Sequence[tuple[int, int]], wait: bool = True) -> None:
        numbers: set[int] = set()
        for position, size in spans:
            end = min(position + size, self.size)
            if size > 0 and 0 <= position < end:
                numbers.update(range(position // self.block, (end - 1) // self.block + 1))
        if numbers and not on_event_loop_thread():
            blocks = sorted(numbers)
            missing = [n for n in blocks if not self.cache.has(n)]   # kept ones are checked when read
            if missing:   # without waiting: within read-ahead's share of the request slots
                futures = self._start(missing, background=not wait)
                if wait:
                    self._wait(futures)

    def owner_and_times(self) -> tuple[int, int, int, int]:
        """An object has no owner here: the mounting user's; its Last-Modified (or now)."""
        modified = self.client.version.modified
        ns = time.time_ns() if modified is None else int(modified.timestamp() * 1e9)
        return os.getuid(), os.getgid(), ns, ns

    def stats(self) -> dict[str, Any]:
        c, v = self.client, self.client.version
        with self._lock:
            in_flight = len(set(self._inflight.values()))
        return {"url": self.name, "version": v.etag or str(v.modified), "size": self.size,
                "block_kb": self.block // 1024, "requests": c.requests, "bytes_fetched": c.bytes,
                "cache_hits": self.cache.hits, "cache_misses": self.cache.misses, "retries": c.retries,
                "failures": c.failures, "last_errors": list(c.errors), "in_flight": in_flight,
                "cache": self.cache.path or "private (not kept)", "cache_bytes": self.cache.held(),
                "changed": c.changed}

    def close(self) -> None:
        """Wait for requests under way (their bytes go to the cache file, which must stay open
        until they are done), then close the cache."""
        if self._closed:
            return
        self._closed = True
        self.client.stop()   # a request under way ends within `timeout`, without retries
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.cache.close()

    # -- blocks ---------------------------------------------------------------------------------
    def _serve(self, blocks: range, flags: int) -> None:
        """Make `blocks` (pinned by the caller) ready, and start the read-ahead they call for."""
        if self.client.changed:
            raise RemoteChanged(self.client.changed)
        if flags & NOWAIT or on_event_loop_thread():
            if not all(self.cache.ready(n) for n in blocks):
                if flags & NOWAIT:
                    raise BlockingIOError(errno.EAGAIN, "not in the block cache")
                raise WouldBlock(lambda: self._pinned_ensure(blocks))
            self.cache.hits += len(blocks)
        else:
            self._ensure(blocks)
        self._read_ahead(blocks)

    def _pinned_ensure(self, blocks: range) -> None:
        self.cache.pin(blocks)
        try:
            self._ensure(blocks)
        finally:
            self.cache.unpin(blocks)

    def _ensure(self, blocks: range) -> None:
        missing = self.cache.missing(blocks)
        if missing:
            self._wait(self._start(missing, background=False))

    def _wait(self, futures: set[Future]) -> None:
        """Wait for these fetches (their errors raised), or until the mount stops."""
        while futures:
            done, futures = wait(futures, timeout=0.25)
            for fut in done:
                fut.result()
            if futures and self.client.stopped:
                raise RemoteError(f"{self.name}: unmounting: the read was given up")

    def stop(self) -> None:
        """The mount is going: requests are not retried, readers stop waiting for them."""
        self.client.stop()

    def _start(self, numbers: list[int], background: bool) -> set[Future]:
        """Futures that together fetch `numbers` (joining fetches under way)."""
        futures: set[Future] = set()
        with self._lock:
            if self._closed:
                raise RemoteError(f"{self.name}: unmounted")
            new = []
            for n in numbers:
                fut = self._inflight.get(n)
                if fut is not None:
                    futures.add(fut)
                elif not background or not self.cache.has(n):
                    new.append(n)
            for run in _runs(new, self.per_request):
                if background:
                    if self._background >= max(1, self.options.requests - 2):
                        break
                    self._background += 1
                fut = self._pool.submit(self._fetch, run, background)
                for n in run:
                    self._inflight[n] = fut
                futures.add(fut)
        return futures

    def _fetch(self, run: range, background: bool) -> None:
        try:
            start = run.start * self.block
            data = self.client.get(start, min(run.stop * self.block, self.size))
            for n in run:   # close() waits for this: the cache file stays open meanwhile
                lo = (n - run.start) * self.block
                self.cache.store(n, data[lo:lo + self.block])
        finally:
            with self._lock:
                for n in run:
                    self._inflight.pop(n, None)
                if background:
                    self._background -= 1

    def _read_ahead(self, blocks: range) -> None:
        """Follow sequential streams; fetch the window ahead of one this read continues."""
        first, last = blocks.start, blocks.stop - 1
        with self._lock:
            key = next((k for k in self._streams if first + 1 >= k and first <= k <= last), None)
            if key is None:
                # a read just behind a stream's end is one of its own readers lagging (chunks
                # decoded on several threads finish out of order): not a stream of its own
                if any(k - LAG <= last < k for k in self._streams):
                    return
                self._streams[last + 1] = START_WINDOW // 2
                if len(self._streams) > STREAMS:
                    self._streams.popitem(last=False)
                return
            # at least two reads like this one ahead: a reader whose reads each span many blocks
            # (a row of tiles) is ahead at once, not after the window has doubled past them
            window = min(max(self._streams.pop(key) * 2, 2 * len(blocks)), self.max_window)
            window = self._streams[last + 1] = max(window, self._streams.get(last + 1, 0))
            stop = min(last + 1 + window, (self.size - 1) // self.block + 1)
            ahead = [n for n in range(last + 1, stop) if n not in self._inflight and not self.cache.has(n)]
        # topped up once half the window is used: a few large requests, not one per block
        if ahead and ahead[0] <= last + 1 + window // 2:
            try:
                self._start(ahead, background=True)
            except RemoteError:   # unmounting: nothing more to fetch
                pass


def _runs(numbers: list[int], longest: int) -> list[range]:
    """Consecutive block numbers as ranges of at most `longest` blocks."""
    out: list[range] = []
    for n in sorted(numbers):
        if out and out[-1].stop == n and len(out[-1]) < longest:
            out[-1] = range(out[-1].start, n + 1)
        else:
            out.append(range(n, n + 1))
    return out


def open_remote(url: str, options: RemoteOptions) -> RemoteSource:
    return RemoteSource(url, options)
