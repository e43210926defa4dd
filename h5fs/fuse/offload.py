"""The one way the daemon runs blocking work (file I/O, decompression) off the trio thread.

A `trio.to_thread.run_sync` hop costs ~120 us of CPU (GUIDE section 6): callers answer from the
engine's caches first and come here only for real work (a chunk to read and decode).
"""

from __future__ import annotations

import os
from typing import Callable, TypeVar

import trio

T = TypeVar("T")

_limiter: trio.CapacityLimiter | None = None


def limiter() -> trio.CapacityLimiter:
    """One limiter for the whole daemon, sized to the core count (created inside trio)."""
    global _limiter
    if _limiter is None:
        _limiter = trio.CapacityLimiter(max(1, os.cpu_count() or 1))
    return _limiter


async def run_sync(fn: Callable[..., T], *args) -> T:
    """Run `fn(*args)` in a worker thread; `fn` must touch only thread-safe or immutable state."""
    return await trio.to_thread.run_sync(fn, *args, limiter=limiter())
