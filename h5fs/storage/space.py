"""The space allocator: new blocks go to free space (first fit) or the end of the file.

Space a transaction frees is not reusable at once: until the change that stopped using it is
durable, a crash could bring the old structure back, so it waits in `pending` until `release()`
(called after the commit's last barrier). Addresses are relative to the superblock's base, like
every address in the file; `eoa` is the end of allocated space that the superblock records.
"""

from __future__ import annotations

import bisect
import threading

from ..errors import H5fsError

ALIGNMENT = 8   # every block starts on an 8-byte boundary
# A block of one page or less never straddles a page boundary: rewriting it in place later is one
# page write, which a killed daemon does not tear.
PAGE = 4096


class Allocator:
    def __init__(self, eoa: int):
        self.eoa = eoa
        self._starts: list[int] = []        # free extents, sorted by start, never adjacent
        self._sizes: dict[int, int] = {}
        self.pending: list[tuple[int, int]] = []
        self._lock = threading.Lock()
        self._touched: list[tuple[int, int]] | None = None   # extents allocated or freed since `watch`

    def extents(self) -> list[tuple[int, int]]:
        """The reusable free extents (start, size), by address."""
        with self._lock:
            return [(a, self._sizes[a]) for a in self._starts]

    def snapshot(self) -> tuple:
        with self._lock:
            return self.eoa, list(self._starts), dict(self._sizes), list(self.pending)

    def restore(self, saved: tuple) -> None:
        """Undo the allocations and frees since `snapshot` (a transaction that failed)."""
        with self._lock:
            self.eoa, self._starts, self._sizes, self.pending = saved[0], list(saved[1]), dict(saved[2]), list(saved[3])

    def watch(self) -> int:
        """Start recording every extent allocated or freed (a walk of the file for unused space
        begins); returns the end of allocation the walk covers."""
        with self._lock:
            self._touched = []
            return self.eoa

    def adopt(self, gaps: list[tuple[int, int]]) -> int:
        """Space the walk found unused: what nobody allocated or freed since `watch` and the free
        list does not hold already becomes reusable. Returns the bytes adopted."""
        with self._lock:
            busy = sorted(self._touched + [(a, self._sizes[a]) for a in self._starts] + self.pending)
            self._touched = None
            adopted = 0
            for start, size in _subtract(gaps, busy):
                self._add(start, size)
                adopted += size
            return adopted

    def allocate(self, size: int) -> int:
        if size <= 0:
            raise H5fsError(f"allocation of {size} bytes")
        with self._lock:
            at = self._allocate(size)
            if self._touched is not None:
                self._touched.append((at, size))
            return at

    def _allocate(self, size: int) -> int:
        for i, start in enumerate(self._starts):
            have = self._sizes[start]
            at = _place(start, size)
            if at + size <= start + have:
                del self._sizes[start]
                del self._starts[i]
                if at > start:
                    self._insert(start, at - start)
                if at + size < start + have:
                    self._insert(at + size, start + have - at - size)
                return at
        at = _place(self.eoa, size)
        if at > self.eoa:
            self._add(self.eoa, at - self.eoa)
        self.eoa = at + size
        return at

    def free(self, address: int, size: int) -> None:
        """Give back an extent once the current transaction is durable."""
        if size > 0:
            with self._lock:
                self.pending.append((address, size))
                if self._touched is not None:
                    self._touched.append((address, size))

    def release(self) -> None:
        """Make pending frees reusable (the change that dropped them is durable)."""
        with self._lock:
            for address, size in self.pending:
                self._add(address, size)
            self.pending.clear()

    def add_free(self, address: int, size: int) -> None:
        """Space found unused (by a walk of the file): reusable now."""
        with self._lock:
            self._add(address, size)

    def _add(self, address: int, size: int) -> None:
        i = bisect.bisect_left(self._starts, address)
        if i < len(self._starts) and self._starts[i] < address + size or \
                i and self._starts[i - 1] + self._sizes[self._starts[i - 1]] > address:
            raise H5fsError(f"space allocator: extent {address}+{size} freed twice")
        if i < len(self._starts) and self._starts[i] == address + size:  # merge with the next
            size += self._sizes.pop(self._starts.pop(i))
        if i and self._starts[i - 1] + self._sizes[self._starts[i - 1]] == address:  # and the previous
            self._sizes[self._starts[i - 1]] += size
            return
        self._insert(address, size)

    def _insert(self, address: int, size: int) -> None:
        bisect.insort(self._starts, address)
        self._sizes[address] = size


def _place(start: int, size: int) -> int:
    """The first address at or after `start` where a block of `size` bytes may begin."""
    at = -(-start // ALIGNMENT) * ALIGNMENT
    if size <= PAGE and at % PAGE + size > PAGE:
        at = -(-at // PAGE) * PAGE
    return at


def _subtract(gaps: list[tuple[int, int]], busy: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of `gaps` (start, size) that no extent of `busy` (sorted) overlaps."""
    out = []
    for start, size in sorted(gaps):
        end = start + size
        for b, n in busy:
            if b + n <= start or b >= end:
                continue
            if b > start:
                out.append((start, b - start))
            start = max(start, b + n)
            if start >= end:
                break
        if start < end:
            out.append((start, end - start))
    return out
