"""st_blocks of datasets whose chunk index must be walked (B-trees, fixed and extensible arrays,
implicit indexes): counted once per object in a worker thread, off the trio thread, and kept
by object address in a bounded cache.

Until the count is known, stat answers at once with an estimate (0 blocks) and asks for the
count; when it arrives, `done` is called (the adapter then invalidates the inode, so the kernel
asks again). A lookup or getattr may instead wait a moment for it (`wait_for`).
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

import trio

from . import offload
from .lru import Lru

log = logging.getLogger("h5fs.fuse")

KNOWN_MAX = 65536  # counts remembered beyond the inodes that hold them


class BlockCounts:
    def __init__(self, count: Callable[[int, str], int],
                 done: Callable[[int, BaseException | None], Awaitable[None]]) -> None:
        self._count = count      # thread-safe: (address, path) -> st_blocks
        self._done = done        # trio: (address, error or None), once per count
        self.known: Lru[int, int] = Lru(KNOWN_MAX)
        self._pending: dict[int, trio.Event] = {}
        self.nursery: trio.Nursery | None = None  # the daemon's (daemon._main)

    def get(self, address: int) -> int | None:
        return self.known.get(address)

    def learn(self, address: int, count: int) -> None:
        """A count made elsewhere (a lookup's worker trip walked a small index)."""
        if address not in self._pending:   # a count under way reports itself
            self.known.put(address, count)

    def forget(self, address: int) -> None:
        """The dataset's storage changed: count again when asked."""
        self.known.pop(address)

    def want(self, address: int, path: str) -> trio.Event | None:
        """Start counting in the background (once); the event is set when done."""
        event = self._pending.get(address)
        if event is None and self.nursery is not None:
            event = self._pending[address] = trio.Event()
            self.nursery.start_soon(self._run, address, path, event)
        return event

    async def wait_for(self, address: int, path: str, timeout: float) -> None:
        """Wait up to `timeout` s for the count (without a daemon nursery: count right now)."""
        if self.known.get(address) is not None:
            return
        event = self.want(address, path)
        if event is None:
            event = self._pending[address] = trio.Event()
            await self._run(address, path, event)
            return
        with trio.move_on_after(timeout):
            await event.wait()

    async def _run(self, address: int, path: str, event: trio.Event) -> None:
        error = None
        try:
            self.known.put(address, await offload.run_sync(self._count, address, path))
        except Exception as exc:  # noqa: BLE001 - reported through `done`
            error = exc
        finally:
            del self._pending[address]
            event.set()
        await self._done(address, error)
