"""Byte ranges kept merged: which parts of something have been written, or freed."""

from __future__ import annotations

import bisect


class Spans:
    """Byte ranges [start, stop), merged as they are added (bisect: a writer's pieces arriving in
    order or nearly so keep one or a few ranges)."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.stops: list[int] = []

    def add(self, start: int, stop: int) -> None:
        if stop <= start:
            return
        i = bisect.bisect_left(self.stops, start)    # the first range reaching `start`
        j = bisect.bisect_right(self.starts, stop)   # past the last range starting by `stop`
        if i < j:
            start, stop = min(start, self.starts[i]), max(stop, self.stops[j - 1])
        self.starts[i:j], self.stops[i:j] = [start], [stop]

    def prefix(self) -> int:
        """How far the bytes are whole from 0."""
        return self.stops[0] if self.starts and self.starts[0] == 0 else 0

    def __iter__(self):
        return zip(self.starts, self.stops)

    def covering(self, at: int) -> tuple[int, int] | None:
        """The range that holds the bytes just below `at` (start < at <= stop), if any."""
        i = bisect.bisect_left(self.stops, at)
        if i < len(self.starts) and self.starts[i] < at:
            return self.starts[i], self.stops[i]
        return None

    def overlaps(self, start: int, stop: int) -> bool:
        """Whether any range shares a byte with [start, stop)."""
        i = bisect.bisect_right(self.stops, start)
        return i < len(self.starts) and self.starts[i] < stop
