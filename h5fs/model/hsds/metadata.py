"""What the HSDS engine keeps of the service's answers (group, dataset and datatype records, link
listings, single links, attribute lists, values derived from them), each for `lifetime`
seconds of monotonic time: the service sends no notifications, so that is how long another
writer's change may take to show. `forget(obj_id)` drops an object's entries at once (an edit
made through the mount). Bounded: past `max_objects` objects the least recently used go, past
MAX_KINDS values of one object its expired ones, then its oldest.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Hashable

MAX_OBJECTS = 100_000
MAX_KINDS = 1_000       # values of one object (a group's single links looked up by name add up)
_MISSING = object()


class Expiring:
    """obj_id -> kind -> (deadline, value). Thread-safe; a value is computed outside the lock
    (two threads may both compute one: the answers are the same)."""

    def __init__(self, lifetime: float, max_objects: int = MAX_OBJECTS,
                 clock: Callable[[], float] = time.monotonic):
        self.lifetime = float(lifetime)
        self.max_objects = max_objects
        self._clock = clock
        self._lock = threading.Lock()
        self._objects: OrderedDict[str, dict[Hashable, tuple[float, Any]]] = OrderedDict()

    def get(self, obj_id: str, kind: Hashable, compute: Callable[[], Any]) -> Any:
        value = self.peek(obj_id, kind)
        if value is not _MISSING:
            return value
        value = compute()
        self.put(obj_id, kind, value)
        return value

    def peek(self, obj_id: str, kind: Hashable, default: Any = _MISSING) -> Any:
        """The fresh value of `kind`, else `default` (no computing)."""
        with self._lock:
            values = self._objects.get(obj_id)
            hit = None if values is None else values.get(kind)
            if hit is None:
                return default
            if hit[0] <= self._clock():
                del values[kind]
                return default
            self._objects.move_to_end(obj_id)
            return hit[1]

    def has(self, obj_id: str, kind: Hashable) -> bool:
        return self.peek(obj_id, kind) is not _MISSING

    def put(self, obj_id: str, kind: Hashable, value: Any) -> None:
        with self._lock:
            values = self._objects.get(obj_id)
            if values is None:
                values = self._objects[obj_id] = {}
                while len(self._objects) > self.max_objects:
                    self._objects.popitem(last=False)
            else:
                self._objects.move_to_end(obj_id)
                if len(values) >= MAX_KINDS:
                    self._trim(values)
            values[kind] = (self._clock() + self.lifetime, value)

    def patch(self, obj_id: str, kind: Hashable, change: Callable[[Any], Any]) -> bool:
        """Replace a fresh value by `change(value)`, keeping its deadline: an edit made here
        changes what is kept without making the rest of it look newer than it is. Whether
        there was a fresh value."""
        with self._lock:
            values = self._objects.get(obj_id)
            hit = None if values is None else values.get(kind)
            if hit is None or hit[0] <= self._clock():
                return False
            values[kind] = (hit[0], change(hit[1]))
            return True

    def discard(self, obj_id: str, kind: Hashable) -> None:
        with self._lock:
            values = self._objects.get(obj_id)
            if values is not None:
                values.pop(kind, None)

    def _trim(self, values: dict[Hashable, tuple[float, Any]]) -> None:
        """Drop an object's expired values, and its oldest half if that is not enough."""
        now = self._clock()
        for kind in [k for k, (deadline, _) in values.items() if deadline <= now]:
            del values[kind]
        if len(values) >= MAX_KINDS:
            for kind in list(values)[:len(values) // 2]:
                del values[kind]

    def count(self, obj_id: str) -> int:
        """Values kept of an object (fresh or not yet swept)."""
        with self._lock:
            return len(self._objects.get(obj_id, ()))

    def forget(self, obj_id: str) -> None:
        with self._lock:
            self._objects.pop(obj_id, None)

    def clear(self) -> None:
        with self._lock:
            self._objects.clear()
