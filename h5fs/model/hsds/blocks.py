"""A dataset's row-major bytes read from HSDS through a cache of aligned blocks.

A block is a span of the flattened array of about `block_bytes` (whole elements; rounded down
to whole rows, or planes, when a row is smaller than a block, so a block of a chunked dataset
is one box HSDS serves with one request). A byte range of the flattened array is a run of
blocks; a block is fetched as the at most 2*ndim-1 hyperslab boxes its elements make
(`boxes`), so a read of 128 KiB of a dataset with huge rows asks for one block of a row, never
whole rows. Blocks missing for one read are fetched in parallel (a small thread pool); one
block asked for by two readers at once is fetched once. Cached blocks live `lifetime` seconds
(the mount's refresh: another writer's change shows after it), in an LRU under a byte budget.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Hashable, Sequence

from ...storage.hsds.client import HsdsClient

BLOCK_BYTES = 4 << 20
FETCH_THREADS = 4       # requests in flight for one read (HSDS serves them from several chunks at once)

Box = tuple[slice, ...]


def boxes(shape: Sequence[int], start: int, stop: int) -> list[Box]:
    """The hyperslabs (one slice per dimension) covering flat elements [start, stop) of a
    row-major array of `shape`, in flat order: at most 2*ndim-1 of them."""
    if start >= stop:
        return []
    if not shape:
        return [()]
    inner = math.prod(shape[1:])
    r0, c0 = divmod(start, inner)
    r1, c1 = divmod(stop, inner)
    if r0 == r1:
        return [(slice(r0, r0 + 1),) + b for b in boxes(shape[1:], c0, c1)]
    out: list[Box] = []
    if c0:
        out += [(slice(r0, r0 + 1),) + b for b in boxes(shape[1:], c0, inner)]
        r0 += 1
    if r1 > r0:
        out.append((slice(r0, r1),) + tuple(slice(0, n) for n in shape[1:]))
    if c1:
        out += [(slice(r1, r1 + 1),) + b for b in boxes(shape[1:], 0, c1)]
    return out


def block_elements(shape: Sequence[int], itemsize: int, block_bytes: int) -> int:
    """Elements per block: about `block_bytes`, a whole number of the largest trailing
    sub-array (row, plane...) that fits, so a block is one box where rows are small."""
    n = max(1, block_bytes // max(1, itemsize))
    inner = 1
    for dim in reversed(tuple(shape)[1:]):
        if inner * dim > n or dim == 0:
            break
        inner *= dim
    return (n // inner) * inner


class BlockCache:
    """Blocks by key (and a variable-length dataset's views), least recently used first out
    past `budget` bytes, each fresh for `lifetime` seconds after it was fetched. Thread-safe."""

    def __init__(self, budget: int, lifetime: float, clock: Callable[[], float] = time.monotonic):
        self.budget = int(budget)
        self.lifetime = float(lifetime)
        self.used = 0
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, tuple[float, Any, int]] = OrderedDict()

    def get(self, key: Hashable) -> Any:
        with self._lock:
            hit = self._entries.get(key)
            if hit is None:
                return None
            if hit[0] <= self._clock():
                self._drop(key)
                return None
            self._entries.move_to_end(key)
            return hit[1]

    def put(self, key: Hashable, data: Any, nbytes: int | None = None) -> None:
        """Keep `data` (bytes, or anything else whose size `nbytes` gives)."""
        nbytes = len(data) if nbytes is None else nbytes
        if nbytes > self.budget:
            return
        with self._lock:
            if key in self._entries:
                self._drop(key)
            self._entries[key] = (self._clock() + self.lifetime, data, nbytes)
            self.used += nbytes
            while self.used > self.budget:
                self._drop(next(iter(self._entries)))

    def forget(self, owner: str) -> None:
        """Drop every block of `owner` (keys begin with it)."""
        with self._lock:
            for key in [k for k in self._entries if isinstance(k, tuple) and k[0] == owner]:
                self._drop(key)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.used = 0

    def _drop(self, key: Hashable) -> None:
        self.used -= self._entries.pop(key)[2]


class DataBlocks:
    """Reads of datasets' row-major bytes for one client, through `cache`."""

    def __init__(self, client: HsdsClient, cache: BlockCache, block_bytes: int = BLOCK_BYTES):
        self.client = client
        self.cache = cache
        self.block_bytes = block_bytes
        self._lock = threading.Lock()
        self._inflight: dict[Hashable, Future] = {}
        self._pool: ThreadPoolExecutor | None = None

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def read(self, obj_id: str, shape: tuple[int, ...], itemsize: int, offset: int, size: int,
             cached_only: bool = False) -> bytes | None:
        """Bytes [offset, offset+size) of the flattened array (cut at its end); with
        `cached_only`, None unless every block is cached (no request made)."""
        total = math.prod(shape) * itemsize
        offset = max(0, offset)
        size = max(0, min(size, total - offset))
        if size == 0:
            return b""
        per_block = block_elements(shape, itemsize, self.block_bytes)
        span = per_block * itemsize
        first, last = offset // span, (offset + size - 1) // span
        keys = [(obj_id, shape, itemsize, k) for k in range(first, last + 1)]
        found = [self.cache.get(key) for key in keys]
        missing = [i for i, data in enumerate(found) if data is None]
        if missing and cached_only:
            return None
        if missing:
            def fetch(i: int) -> bytes:
                return self._block(keys[i], shape, itemsize, per_block)
            if len(missing) == 1:
                found[missing[0]] = fetch(missing[0])
            else:
                for i, data in zip(missing, self._executor().map(fetch, missing)):
                    found[i] = data
        skip = offset - first * span
        if len(found) == 1:
            return bytes(memoryview(found[0])[skip:skip + size])
        out = bytearray()
        for data in found:
            out += memoryview(data)[skip:skip + size - len(out)]
            skip = 0
        return bytes(out)

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(FETCH_THREADS, thread_name_prefix="h5fs-hsds-read")
            return self._pool

    def _block(self, key: tuple, shape: tuple[int, ...], itemsize: int, per_block: int) -> bytes:
        """Block `key` from the cache, or fetched (once, however many readers want it now)."""
        with self._lock:
            pending = self._inflight.get(key)
            if pending is None:
                pending = self._inflight[key] = Future()
                mine = True
            else:
                mine = False
        if not mine:
            return pending.result()
        try:
            start = key[3] * per_block
            stop = min(math.prod(shape), start + per_block)
            sel = [None] if not shape else boxes(shape, start, stop)
            data = b"".join(self.client.read_bytes(key[0], box, itemsize) for box in sel)
            self.cache.put(key, data)
            pending.set_result(data)
            return data
        except BaseException as e:
            pending.set_exception(e)
            raise
        finally:
            with self._lock:
                self._inflight.pop(key, None)
