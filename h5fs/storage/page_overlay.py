"""Bytes laid over a file's without writing them: the pages some updates touch, each read from the
file at its first update and updated in order, with the span of each page they changed.

Two users: a read-only open sees the updates a crash left in the journal through one
(journal.overlay), and a writable file holds its committed metadata in one until the group commit
writes it into the file (transaction.Store: `batch`).
"""

from __future__ import annotations

import bisect
import os

from .allocator import PAGE
from .file_writer import FileWriter


class PageOverlay:
    def __init__(self, fd: int, entries: list[tuple[int, bytes]] = ()):
        self.fd = fd
        self.pages: dict[int, bytearray] = {}
        self._spans: dict[int, tuple[int, int]] = {}   # page -> [lo, hi) of it updated
        self._numbers: list[int] = []                  # the pages, sorted
        self.end = 0      # where the updated bytes end (past the file's, maybe)
        self.updates = 0
        for position, data in entries:
            self.put(position, data)

    def __bool__(self) -> bool:
        return bool(self.pages)

    @property
    def nbytes(self) -> int:
        return len(self.pages) * PAGE

    def put(self, position: int, data: bytes | memoryview) -> None:
        """`data` at the absolute `position`, over what the file and earlier updates hold."""
        self.updates += 1
        if not data:
            return
        end = position + len(data)
        for p in range(position // PAGE, (end - 1) // PAGE + 1):
            page = self.pages.get(p)
            if page is None:
                page = self.pages[p] = bytearray(os.pread(self.fd, PAGE, p * PAGE).ljust(PAGE, b"\0"))
                bisect.insort(self._numbers, p)
            lo, hi = max(position, p * PAGE) - p * PAGE, min(end, (p + 1) * PAGE) - p * PAGE
            page[lo:hi] = data[p * PAGE + lo - position:p * PAGE + hi - position]
            span = self._spans.get(p)
            self._spans[p] = (lo, hi) if span is None else (min(span[0], lo), max(span[1], hi))
        self.end = max(self.end, end)

    def patch(self, position: int, data: bytes | memoryview) -> None:
        """Bytes written into the file directly: the pages held here follow them (writing a page
        back would otherwise write the old bytes over them); pages not held are left alone."""
        end = position + len(data)
        i = bisect.bisect_left(self._numbers, position // PAGE)
        for p in self._numbers[i:bisect.bisect_right(self._numbers, (end - 1) // PAGE)]:
            lo, hi = max(position, p * PAGE), min(end, (p + 1) * PAGE)
            self.pages[p][lo - p * PAGE:hi - p * PAGE] = data[lo - position:hi - position]

    def pread(self, size: int, position: int) -> bytes:
        """os.pread of the file through the overlay (up to its end, past the file's: zeros where
        neither has bytes, as writing the updates leaves them)."""
        # the overlay as it is before the file is read: a group commit writing it into the file
        # and clearing it meanwhile (`clear` puts new containers in place) leaves these whole
        pages, numbers, end = self.pages, self._numbers, self.end
        data = os.pread(self.fd, size, position)
        if size <= 0 or not numbers:
            return data
        first, last = position // PAGE, (position + size - 1) // PAGE
        i = bisect.bisect_left(numbers, first)
        if i == len(numbers) or numbers[i] > last:
            return data
        buf = bytearray(data.ljust(min(size, max(len(data), end - position)), b"\0"))
        for p in numbers[i:]:
            if p > last:
                break
            page = pages.get(p)   # None: cleared under the read, after it reached the file
            lo, hi = max(position, p * PAGE), min(position + len(buf), (p + 1) * PAGE)
            if page is not None and hi > lo:
                buf[lo - position:hi - position] = page[lo - p * PAGE:hi - p * PAGE]
        return bytes(buf)

    def write_to(self, writer: FileWriter) -> None:
        """Write the updated spans into the file, runs of adjacent pages merged, in address order."""
        run_start, run = None, bytearray()
        for p in self._numbers:
            lo, hi = self._spans[p]
            at = p * PAGE + lo
            if run_start is not None and run_start + len(run) == at:
                run += self.pages[p][lo:hi]
            else:
                if run:
                    writer.pwrite(run_start, run)
                run_start, run = at, bytearray(self.pages[p][lo:hi])
            if hi < PAGE:   # the run cannot go on past bytes this page left alone
                writer.pwrite(run_start, run)
                run_start, run = None, bytearray()
        if run:
            writer.pwrite(run_start, run)

    def clear(self) -> None:
        self.pages, self._spans, self._numbers = {}, {}, []
        self.end = self.updates = 0
