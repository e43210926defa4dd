"""The file's one metadata cache: (address, kind) -> decoded structure, with a byte budget.

Every decoded metadata structure (object headers, B-tree nodes, heap blocks, array blocks...)
is cached here under the address it was read from and a short kind tag (one address may be read
as more than one thing, e.g. a header prefix and the whole block). A writer that frees, moves or
rewrites a structure calls `invalidate(address)` (or `invalidate_range`), so a reused address
never serves the structure that used to live there. Thread-safe: decoders run in worker threads.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from typing import Callable, Hashable, TypeVar

T = TypeVar("T")

DEFAULT_BUDGET = 128 * 1024 * 1024


class MetadataCache:
    def __init__(self, budget: int = DEFAULT_BUDGET):
        self.budget = budget
        self.used = 0
        self._items: OrderedDict[tuple[int, Hashable], tuple[object, int]] = OrderedDict()
        self._kinds: dict[int, set[Hashable]] = {}   # address -> kinds cached there
        self._addresses: list[int] = []               # those addresses, sorted (range invalidation)
        self._lock = threading.Lock()
        self._invalidations = 0   # counted: a value loaded across one is not kept

    def __len__(self) -> int:
        return len(self._items)

    def peek(self, address: int, kind: Hashable) -> object | None:
        with self._lock:
            hit = self._items.get((address, kind))
            if hit is None:
                return None
            self._items.move_to_end((address, kind))
            return hit[0]

    def get(self, address: int, kind: Hashable, load: Callable[[], T], nbytes: int | Callable[[T], int]) -> T:
        """The cached value, or `load()` stored at a cost of `nbytes` (a number or a function of
        the value). Two threads missing at once may both load: decoding is pure, the first stored
        value wins, and a lock held across file I/O would serialize the workers. A value loaded
        while anything was invalidated is returned but not kept: it may have been decoded from
        the bytes that invalidation was about."""
        key = (address, kind)
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit[0]  # type: ignore[return-value]
            seen = self._invalidations
        value = load()
        size = nbytes(value) if callable(nbytes) else nbytes
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                return hit[0]  # type: ignore[return-value]
            if size <= self.budget and seen == self._invalidations:
                self._items[key] = (value, size)
                kinds = self._kinds.get(address)
                if kinds is None:
                    kinds = self._kinds[address] = set()
                    bisect.insort(self._addresses, address)
                kinds.add(kind)
                self.used += size
                while self.used > self.budget:
                    self._drop(next(iter(self._items)))
        return value

    def grow(self, address: int, kind: Hashable, value: object, nbytes: int) -> None:
        """Count `nbytes` more for the entry (address, kind) if it still holds `value` (a value
        that keeps growing, such as an object's state collecting what is derived from it)."""
        key = (address, kind)
        with self._lock:
            hit = self._items.get(key)
            if hit is None or hit[0] is not value:
                return
            self._items[key] = (value, hit[1] + nbytes)
            self.used += nbytes
            while self.used > self.budget:
                self._drop(next(iter(self._items)))

    def _drop(self, key: tuple[int, Hashable]) -> object:
        value, size = self._items.pop(key)
        self.used -= size
        kinds = self._kinds[key[0]]
        kinds.discard(key[1])
        if not kinds:
            del self._kinds[key[0]]
            del self._addresses[bisect.bisect_left(self._addresses, key[0])]
        return value

    def invalidate(self, address: int) -> list[object]:
        """Forget everything decoded from `address`; returns what was forgotten."""
        with self._lock:
            self._invalidations += 1
            return [self._drop((address, kind)) for kind in list(self._kinds.get(address, ()))]

    def invalidate_range(self, start: int, end: int) -> list[object]:
        """Forget everything decoded from an address in [start, end) (a freed or rewritten
        extent); returns what was forgotten."""
        with self._lock:
            self._invalidations += 1
            lo, hi = bisect.bisect_left(self._addresses, start), bisect.bisect_left(self._addresses, end)
            return [self._drop((address, kind)) for address in self._addresses[lo:hi]
                    for kind in list(self._kinds[address])]

    def clear(self) -> None:
        with self._lock:
            self._invalidations += 1
            self._items.clear()
            self._kinds.clear()
            self._addresses.clear()
            self.used = 0
