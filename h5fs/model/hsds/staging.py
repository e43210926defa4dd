"""Staged: the writes into one HSDS dataset's raw view not yet sent, as merged byte ranges.

Ranges are kept sorted, disjoint and not adjacent (touching ones merge), so a sequential writer
grows one range in place and a flush sends each range as few hyperslab boxes as its shape
allows. Bytes only: the writeback completes partial elements before staging them.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Iterator


class Staged:
    __slots__ = ("path", "obj_id", "_starts", "_pieces", "nbytes")

    def __init__(self, path: str, obj_id: str):
        self.path, self.obj_id = path, obj_id
        self._starts: list[int] = []
        self._pieces: dict[int, bytearray] = {}
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._starts)

    def ranges(self) -> Iterator[tuple[int, bytearray]]:
        """(start, bytes) of each range, in order."""
        for start in self._starts:
            yield start, self._pieces[start]

    def put(self, offset: int, data: bytes | memoryview) -> int:
        """Stage `data` at byte `offset` (over what was staged there); the bytes added."""
        end = offset + len(data)
        # the ranges that overlap or touch [offset, end]
        first = bisect_right(self._starts, offset) - 1
        if first < 0 or self._starts[first] + len(self._pieces[self._starts[first]]) < offset:
            first += 1
        last = bisect_right(self._starts, end) - 1
        before = self.nbytes
        if first > last:     # none: a range of its own
            self._starts.insert(first, offset)
            self._pieces[offset] = bytearray(data)
            self.nbytes += len(data)
            return len(data)
        start = min(offset, self._starts[first])
        if start == self._starts[first] and first == last:     # one range grows in place
            piece = self._pieces[start]
            old = len(piece)
            piece[offset - start:end - start] = data
            self.nbytes += len(piece) - old
            return self.nbytes - before
        tail_start = self._starts[last]
        stop = max(end, tail_start + len(self._pieces[tail_start]))
        merged = bytearray(stop - start)
        for s in self._starts[first:last + 1]:
            piece = self._pieces.pop(s)
            merged[s - start:s - start + len(piece)] = piece
            self.nbytes -= len(piece)
        merged[offset - start:end - start] = data
        self._starts[first:last + 1] = [start]
        self._pieces[start] = merged
        self.nbytes += len(merged)
        return self.nbytes - before

    def overlay(self, offset: int, out: bytearray) -> None:
        """Copy the staged bytes inside [offset, offset + len(out)) over `out`."""
        end = offset + len(out)
        k = max(0, bisect_right(self._starts, offset) - 1)
        while k < len(self._starts) and self._starts[k] < end:
            s = self._starts[k]
            piece = self._pieces[s]
            lo, hi = max(s, offset), min(s + len(piece), end)
            if lo < hi:
                out[lo - offset:hi - offset] = piece[lo - s:hi - s]
            k += 1

    def covers(self, offset: int, size: int) -> bool:
        """Whether one range holds every byte of [offset, offset + size)."""
        k = bisect_right(self._starts, offset) - 1
        return size <= 0 or k >= 0 and self._starts[k] + len(self._pieces[self._starts[k]]) >= offset + size

    def cut(self, size: int) -> None:
        """Drop what is staged at or past byte `size` (the dataset shrank)."""
        k = bisect_left(self._starts, size)
        for s in self._starts[k:]:
            self.nbytes -= len(self._pieces.pop(s))
        del self._starts[k:]
        if k:
            s = self._starts[k - 1]
            piece = self._pieces[s]
            if s + len(piece) > size:
                self.nbytes -= s + len(piece) - size
                del piece[size - s:]

    def under(self, newer: Staged) -> Staged:
        """This (older) state with `newer`'s bytes over it: a failed flush's batch given back."""
        for start, piece in newer.ranges():
            self.put(start, piece)
        return self
