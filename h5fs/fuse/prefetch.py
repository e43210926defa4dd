"""Sequential-read prefetch: decode the next ranges of a file in worker threads.

libfuse negotiates 128 KiB of kernel readahead, so a sequential reader such as `cat` keeps one
1 MiB request in flight at a time and, left alone, one core decodes while the other idles.
After a sequential read that needed decoding, the ranges that follow are decoded ahead into
the engine's chunk cache; the next request then finds them cached, or waits on the decode
already in flight (the cache never decodes a chunk twice at once).
"""

from __future__ import annotations

import logging
from typing import Callable

import trio

from . import offload

log = logging.getLogger("h5fs.fuse")

AHEAD = 2        # requests' worth of data kept decoded ahead of a sequential reader
MAX_FILES = 256  # files tracked at once (state is dropped on release, this bounds the rest)


class Prefetcher:
    def __init__(self) -> None:
        self.nursery: trio.Nursery | None = None
        # fh -> (end of the last read, end of what was prefetched)
        self._state: dict[int, tuple[int, int]] = {}

    def after_read(self, fh: int, read: Callable[[int, int], bytes], off: int, size: int, limit: int) -> None:
        """Note a read of [off, off+size) that had to decode; prefetch if it continues the last."""
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
        self.nursery.start_soon(self._decode, read, start, stop - start)

    def forget(self, fh: int) -> None:
        self._state.pop(fh, None)

    @staticmethod
    async def _decode(read: Callable[[int, int], bytes], off: int, size: int) -> None:
        try:
            await offload.run_sync(read, off, size)
        except Exception as exc:  # noqa: BLE001 - the reader's own request reports it, with EIO
            log.debug("prefetch of %d+%d skipped: %s", off, size, exc)
