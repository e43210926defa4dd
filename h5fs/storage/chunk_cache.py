"""A byte-budgeted LRU of decoded chunks, shared by all datasets of a file, safe across threads.

Keys are `(owner, coords)`: the owner names one version of one dataset's chunks (the model uses
(dataset address, generation), and the file bumps the generation when the dataset changes), so
a key cannot outlive the index it was read through; `invalidate_owner` drops them all at once.

Pinned entries (dirty chunks not yet written) are never evicted: they count against the budget
but live outside the LRU order. Invalidation drops pinned entries too: it means the chunk is gone.

Concurrent readers of one chunk wait for the single decode in flight instead of repeating it
(the kernel sends several read requests at once that fall into the same chunk). A decode that is
invalidated (or replaced by `put`) while in flight is handed to its caller but not stored.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Hashable

DEFAULT_BUDGET = 128 * 1024 * 1024   # the daemon's RSS stays near 210 MB reading big files
MAX_BUDGET = 512 * 1024 * 1024       # what serving one row of huge chunks may raise it to

Key = tuple[Hashable, Hashable]      # (owner, chunk coordinates)


class _Load:
    """One decode in flight: waiters block on `lock`; `stale` says its result must not be stored."""

    __slots__ = ("lock", "stale")

    def __init__(self) -> None:
        # a bare lock: a miss on a tiny chunk must not pay for an Event's condition variable
        self.lock = threading.Lock()
        self.lock.acquire()
        self.stale = False


class ChunkCache:
    def __init__(self, budget: int = DEFAULT_BUDGET):
        self.budget = budget
        self.used = 0                                        # bytes held, pinned ones included
        self._items: OrderedDict[Key, bytes] = OrderedDict()  # evictable, least recently used first
        self._pinned: dict[Key, bytes] = {}
        self._owners: dict[Hashable, set[Key]] = {}         # owner -> its keys (both kinds)
        self._inflight: dict[Key, _Load] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items) + len(self._pinned)

    def _lookup(self, key: Key) -> bytes | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
            return value
        return self._pinned.get(key)

    def peek(self, key: Key) -> bytes | None:
        with self._lock:
            return self._lookup(key)

    def holds_any(self, owner: Hashable) -> bool:
        """Whether any entry of `owner` is held (no lock: one dict membership test)."""
        return owner in self._owners

    def wanted(self, key: Key) -> bool:
        """Neither held nor being decoded: work nobody has started."""
        with self._lock:
            return self._lookup(key) is None and key not in self._inflight

    def get(self, key: Key, load: Callable[[], bytes]) -> bytes:
        while True:
            with self._lock:
                value = self._lookup(key)
                if value is not None:
                    return value
                flight = self._inflight.get(key)
                if flight is None:
                    flight = self._inflight[key] = _Load()
                    break
            flight.lock.acquire()  # wait for the decode in flight, then look again
            flight.lock.release()
        try:
            value = load()
            with self._lock:
                if not flight.stale:
                    self._store(key, value, pinned=False)
            return value
        finally:
            with self._lock:
                del self._inflight[key]
            flight.lock.release()

    def put(self, key: Key, value: bytes, pinned: bool = False) -> None:
        """Store `value` (a chunk written by the engine), replacing what the key held."""
        with self._lock:
            self._forget_flight(key)
            self._store(key, value, pinned)

    def pin(self, key: Key) -> bool:
        """Keep the entry until `unpin` or an invalidation; False when it is not cached."""
        with self._lock:
            value = self._items.pop(key, None)
            if value is None:
                return key in self._pinned
            self._pinned[key] = value
            return True

    def unpin(self, key: Key) -> None:
        """Make a pinned entry evictable again (most recently used)."""
        with self._lock:
            value = self._pinned.pop(key, None)
            if value is not None:
                self._items[key] = value
                self._evict()

    def is_pinned(self, key: Key) -> bool:
        return key in self._pinned

    def invalidate(self, key: Key) -> None:
        """Forget one chunk (pinned or not, and any decode of it in flight)."""
        with self._lock:
            self._forget_flight(key)
            self._drop(key)

    def invalidate_owner(self, owner: Hashable, successor: Hashable | None = None) -> None:
        """Forget every chunk of `owner` (a dataset version whose index changed or went away);
        with a `successor` (the dataset's next version) its pinned chunks, written but not yet
        in the file and so newer than anything there, move to it instead."""
        with self._lock:
            for key, flight in self._inflight.items():
                if key[0] == owner:
                    flight.stale = True
            for key in list(self._owners.get(owner, ())):
                value = self._pinned.get(key)
                self._drop(key)
                if value is not None and successor is not None:
                    self._store((successor, key[1]), value, pinned=True)

    def _forget_flight(self, key: Key) -> None:
        flight = self._inflight.get(key)
        if flight is not None:
            flight.stale = True

    def _store(self, key: Key, value: bytes, pinned: bool) -> None:
        if not pinned and len(value) > self.budget:
            self._drop(key)  # never held: the old value must not outlive a newer one
            return
        self._drop(key)
        (self._pinned if pinned else self._items)[key] = value
        self._owners.setdefault(key[0], set()).add(key)
        self.used += len(value)
        self._evict()

    def _drop(self, key: Key) -> None:
        value = self._items.pop(key, None)
        if value is None:
            value = self._pinned.pop(key, None)
            if value is None:
                return
        self.used -= len(value)
        keys = self._owners[key[0]]
        keys.discard(key)
        if not keys:
            del self._owners[key[0]]

    def _evict(self) -> None:
        while self.used > self.budget and self._items:
            self._drop(next(iter(self._items)))

    def reserve(self, nbytes: int) -> None:
        """Let the budget hold at least `nbytes` (up to MAX_BUDGET): a row-major read of a chunked
        array revisits each chunk of a row once per element row, so a cache smaller than one row
        of chunks would decode every chunk many times over."""
        with self._lock:
            self.budget = max(self.budget, min(nbytes, MAX_BUDGET))
