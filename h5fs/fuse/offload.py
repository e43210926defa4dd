"""The one way the daemon runs blocking work (file I/O, decompression) off the trio thread.

A `trio.to_thread.run_sync` hop costs ~120 us of CPU (GUIDE section 6): callers answer from the
engine's caches first and come here only for real work (a chunk to read and decode). Work that
is small but must not meet a commit half done (a namespace edit, a lookup in a group's name
index) runs on the trio thread when the commit lock is free (`run_unless_busy`): engine code
holds the GIL either way, so a worker would only add the hop.
"""

from __future__ import annotations

import os
import threading
from typing import Awaitable, Callable, TypeVar

import trio

from ..storage.byte_source import WouldBlock, inline

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


async def run_unless_busy(lock: threading.RLock, fn: Callable[..., T], *args,
                          otherwise: Callable[..., Awaitable[T]] = run_sync) -> T:
    """`fn(*args)` on the calling (trio) thread holding `lock` when it is free; else
    `otherwise(fn, *args)` (in a worker, which waits for the lock there, never the trio thread).
    Bytes the trio thread may not wait for (WouldBlock: a remote object's) send `fn` to
    `otherwise` too, from its start: the callers' edits read no dataset's data (a writable
    mount's file is local; only a virtual dataset's sources can be remote), so none has
    committed anything by then (a transaction cut short is aborted, never published). So does
    work that may take long (`byte_source.inline`: a landing of deferred edits)."""
    if lock.acquire(blocking=False):
        try:
            with inline():
                return fn(*args)
        except WouldBlock:
            pass
        finally:
            lock.release()
    return await otherwise(fn, *args)
