"""Telling the kernel that what it caches is no longer true.

The mount gives the kernel long entry, attribute and negative-entry timeouts and keeps the page
cache of open files (`keep_cache`): whatever changes must be invalidated here. Today that is
st_blocks answered with an estimate while a chunk index was still being walked; a writable
mount invalidates what each commit changes.
"""

from __future__ import annotations

import errno
import logging

import pyfuse3
import trio

from .inodes import Node

log = logging.getLogger("h5fs.fuse")

# A reply that hands the kernel an inode can still be on its way when the news about it is
# ready: the kernel then does not know the inode yet (ENOENT), so try again a little later.
RETRY_DELAYS = (0.0, 0.01, 0.1, 1.0)


class Invalidator:
    def __init__(self) -> None:
        self.count = 0  # invalidations the kernel accepted (a root fact)
        self.nursery: trio.Nursery | None = None  # the daemon's (daemon._main)
        self.pending: set[int] = set()   # inodes whose pages are being dropped after an answer
        self.again: set[int] = set()     # ... and changed again meanwhile

    async def attributes(self, node: Node) -> None:
        """Make the kernel ask for `node`'s attributes again. Attributes only: no page is
        touched, so this cannot block on a request in flight and runs in the trio thread."""
        for delay in RETRY_DELAYS:
            await trio.sleep(delay)
            if node.lookups <= 0:  # forgotten meanwhile: the kernel holds nothing to correct
                return
            if self._send(pyfuse3.invalidate_inode, node.ino, True):
                return

    async def data(self, node: Node) -> None:
        """Make the kernel drop `node`'s cached pages and attributes. In a worker thread: a page
        may be locked by a read that waits for this very daemon."""
        if node.lookups > 0:
            await trio.to_thread.run_sync(self._send, pyfuse3.invalidate_inode, node.ino, False)

    def data_later(self, node: Node) -> None:
        """`data` sent without waiting, for an inode whose pages the kernel may hold until a
        request being answered is answered (a folio under writeback while a truncate holds its
        writes back, with `-o writeback_cache`; a page locked by a write): waiting for it there
        would never end. Until it is done, `pending` names the inode (an open then drops the
        pages itself)."""
        if self.nursery is None:
            return
        if node.ino in self.pending:   # news while pages are being dropped: drop them once more
            self.again.add(node.ino)
            return
        self.pending.add(node.ino)
        self.nursery.start_soon(self._data_later, node)

    async def _data_later(self, node: Node) -> None:
        try:
            await self.data(node)
            while node.ino in self.again:
                self.again.discard(node.ino)
                await self.data(node)
        finally:
            self.pending.discard(node.ino)
            self.again.discard(node.ino)   # cancelled (unmount): no news kept for an inode gone

    def entry(self, parent: Node, name: bytes) -> None:
        """Make the kernel look `name` up in `parent` again. Queued to pyfuse3's own thread: done
        inline it could wait for a request on the same directory, which waits for us."""
        pyfuse3.invalidate_entry_async(parent.ino, name, ignore_enoent=True)
        self.count += 1

    def _send(self, call, *args) -> bool:
        """True once the kernel took it; False when it does not know the inode (yet)."""
        try:
            call(*args)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                log.warning("invalidating inode %s: %s", args[0], exc)
                return True  # nothing a retry would change
            return False
        self.count += 1
        return True
