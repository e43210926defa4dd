"""What a value costs the metadata cache: `approx_size` measures decoded records, `ENTRY` is an
entry's own bookkeeping."""

from __future__ import annotations

import itertools
import sys

import numpy as np

ENTRY = 300       # bytes of a metadata cache entry's own bookkeeping (key, LRU node, kind set)
_SAMPLE = 16      # elements of a long container measured; the others are taken to be alike
_ATOMS = (str, bytes, bytearray, int, float, complex, memoryview)


def approx_size(value: object) -> int:
    """Bytes of memory `value` holds, for the metadata cache's budget: tuples, lists, dicts, sets,
    dataclass records and NumPy arrays are followed (a long container through its first _SAMPLE
    elements), anything else counts for itself alone (handles, readers and files are owned
    elsewhere). An object met twice counts once."""
    seen: set[int] = set()
    total = 0.0
    stack: list[tuple[object, float]] = [(value, 1.0)]
    getsizeof, push = sys.getsizeof, stack.append
    while stack:
        obj, weight = stack.pop()
        if obj is None or id(obj) in seen:
            continue
        seen.add(id(obj))
        size = getsizeof(obj)
        if isinstance(obj, _ATOMS):
            total += size * weight
            continue
        if isinstance(obj, (tuple, list, set, frozenset)):
            items, n = obj, len(obj)
        elif isinstance(obj, dict):
            items, n = [x for kv in itertools.islice(obj.items(), _SAMPLE // 2) for x in kv], 2 * len(obj)
        elif isinstance(obj, np.ndarray):
            items, n = [obj.base], 1
            if obj.dtype.hasobject and obj.size:
                items, n = [obj.base, *obj.flat[:_SAMPLE]], obj.size
        else:
            fields = getattr(type(obj), "__dataclass_fields__", None)
            if fields is None:
                total += size * weight
                continue
            # the instance's attribute values (reading __dict__ would make Python build it)
            size += 8 * len(fields) + 16
            items, n = [getattr(obj, name, None) for name in fields], len(fields)
        total += size * weight
        if n > _SAMPLE:
            weight *= n / _SAMPLE
        for x in itertools.islice(items, _SAMPLE):
            push((x, weight))
    return int(total)
