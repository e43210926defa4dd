"""A small bounded least-recently-used map (the adapter's caches of engine answers)."""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Lru(Generic[K, V]):
    """At most `limit` items, or items of at most `limit` total weight when `weigh` is given
    (an item heavier than that alone is not kept); with `ttl`, an item is forgotten `ttl`
    seconds after it was put (answers of a service other writers change: an HSDS mount's
    `refresh`)."""

    def __init__(self, limit: int, weigh: Callable[[V], int] = lambda value: 1, ttl: float | None = None) -> None:
        self.limit = limit
        self.weigh = weigh
        self.ttl = ttl
        self.weight = 0
        self._items: OrderedDict[K, tuple[V, int, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: K) -> V | None:
        item = self._items.get(key)
        if item is None:
            return None
        if self.ttl is not None and time.monotonic() - item[2] >= self.ttl:
            self.pop(key)
            return None
        self._items.move_to_end(key)
        return item[0]

    def put(self, key: K, value: V) -> None:
        self.pop(key)
        weight = self.weigh(value)
        if weight > self.limit:
            return
        self._items[key] = (value, weight, time.monotonic() if self.ttl is not None else 0.0)
        self.weight += weight
        while self.weight > self.limit:
            self.weight -= self._items.popitem(last=False)[1][1]

    def clear(self) -> None:
        self._items.clear()
        self.weight = 0

    def pop(self, key: K) -> None:
        item = self._items.pop(key, None)
        if item is not None:
            self.weight -= item[1]
