"""A byte-budgeted LRU of decoded chunks, shared by all datasets of a file, safe across threads.

Concurrent readers of one chunk wait for the single decode in flight instead of repeating it
(the kernel sends several read requests at once that fall into the same chunk).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Hashable


DEFAULT_BUDGET = 128 * 1024 * 1024   # the daemon's RSS stays near 210 MB reading big files
MAX_BUDGET = 512 * 1024 * 1024       # what serving one row of huge chunks may raise it to


class ChunkCache:
    def __init__(self, budget: int = DEFAULT_BUDGET):
        self.budget = budget
        self.used = 0
        self._items: OrderedDict[Hashable, bytes] = OrderedDict()
        # key -> a lock held by the one thread decoding it (a bare lock: a miss on a tiny chunk
        # must not pay for an Event's condition variable)
        self._inflight: dict[Hashable, threading.Lock] = {}
        self._lock = threading.Lock()

    def peek(self, key: Hashable) -> bytes | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def get(self, key: Hashable, load: Callable[[], bytes]) -> bytes:
        while True:
            with self._lock:
                value = self._items.get(key)
                if value is not None:
                    self._items.move_to_end(key)
                    return value
                event = self._inflight.get(key)
                if event is None:
                    event = self._inflight[key] = threading.Lock()
                    event.acquire()
                    break
            event.acquire()  # wait for the decode in flight, then look again
            event.release()
        try:
            value = load()
            with self._lock:
                self._store(key, value)
            return value
        finally:
            with self._lock:
                del self._inflight[key]
            event.release()

    def _store(self, key: Hashable, value: bytes) -> None:
        if len(value) > self.budget:
            return
        self._items[key] = value
        self.used += len(value)
        while self.used > self.budget:
            _, old = self._items.popitem(last=False)
            self.used -= len(old)

    def reserve(self, nbytes: int) -> None:
        """Let the budget hold at least `nbytes` (up to MAX_BUDGET): a row-major read of a chunked
        array revisits each chunk of a row once per element row, so a cache smaller than one row
        of chunks would decode every chunk many times over."""
        with self._lock:
            self.budget = max(self.budget, min(nbytes, MAX_BUDGET))
