"""Sequential-read prefetch: decode the next ranges of a file in worker threads.

libfuse negotiates 128 KiB of kernel readahead, so a sequential reader such as `cat` keeps one
1 MiB request in flight at a time and, left alone, one core decodes while the other idles.
After each sequential read, the ranges that follow are decoded ahead into the engine's chunk
cache, one task per chunk on worker threads of the prefetcher's own (so every core inflates,
a row of tiled chunks too, and foreground reads never queue behind prefetches); a request that
misses spreads its own chunks the same way. The next request then finds its data cached, or
waits on the decode already in flight (the cache never decodes a chunk twice at once).
"""

from __future__ import annotations

import logging
import os
from typing import Callable

import trio


log = logging.getLogger("h5fs.fuse")

AHEAD = 2        # requests' worth of data kept decoded ahead of a sequential reader
MAX_FILES = 256  # files tracked at once (state is dropped on release, this bounds the rest)


class Prefetcher:
    def __init__(self) -> None:
        self.nursery: trio.Nursery | None = None
        self._limiter: trio.CapacityLimiter | None = None
        # fh -> (end of the last read, end of what was prefetched)
        self._state: dict[int, tuple[int, int]] = {}

    def after_read(self, fh: int, jobs: Callable[[int, int], list[Callable[[], None]]], off: int, size: int,
                   limit: int) -> None:
        """Note a read of [off, off+size); decode ahead if it continues the last one (`jobs`:
        the decoding under a byte range, one job per chunk)."""
        end = off + size
        last, ahead = self._state.get(fh, (-1, 0))
        self._state[fh] = (end, ahead)
        if self.nursery is None or last != off or end >= limit:
            return
        start, stop = max(end, ahead), min(limit, end + AHEAD * size)
        if start >= stop:
            return
        if len(self._state) > MAX_FILES:
            self._state.clear()
        self._state[fh] = (end, stop)
        self.spread(jobs(start, stop - start))

    def spread(self, jobs: list[Callable[[], None]]) -> None:
        """Run these decoding jobs on the worker threads, as many at once as there are cores."""
        if self.nursery is not None:
            for job in jobs:
                self.nursery.start_soon(self._decode, job)

    def forget(self, fh: int) -> None:
        self._state.pop(fh, None)

    async def _decode(self, job: Callable[[], None]) -> None:
        if self._limiter is None:
            self._limiter = trio.CapacityLimiter(max(1, os.cpu_count() or 1))
        try:
            await trio.to_thread.run_sync(job, limiter=self._limiter)
        except Exception as exc:  # noqa: BLE001 - the reader's own request reports it, with EIO
            log.debug("prefetch skipped: %s", exc)
