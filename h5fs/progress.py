"""A progress line for long operations: shown on a terminal, nothing anywhere else (logs, pipes
and scripts stay clean)."""

from __future__ import annotations

import threading
import time
from typing import Callable, TextIO

INTERVAL = 0.1   # s between redraws


class Line:
    """One line rewritten in place, at most every INTERVAL seconds."""

    def __init__(self, out: TextIO):
        self.out = out
        self.last = 0.0
        self.shown = False

    @classmethod
    def on(cls, out: TextIO) -> Line | None:
        """A line on `out` when it is a terminal, else None."""
        try:
            return cls(out) if out.isatty() else None
        except ValueError:   # closed
            return None

    def show(self, text: str) -> None:
        now = time.monotonic()
        if now - self.last >= INTERVAL:
            self.last = now
            self.out.write("\r\033[K" + text)
            self.out.flush()
            self.shown = True

    def done(self) -> None:
        if self.shown:
            self.out.write("\r\033[K")
            self.out.flush()
            self.shown = False


def flush_text(status: dict) -> str | None:
    """The flush a daemon's status (MountState.status) shows: its chunks written so far, or
    those waiting before it starts; None when nothing waits."""
    flushing = status.get("flushing")
    if flushing:
        return f"h5fs: writing into the file: {flushing['done']} of {flushing['total']} chunks"
    waiting = status.get("chunks_waiting")
    return f"h5fs: writing into the file: 0 of {waiting} chunks" if waiting else None


def watch(poll: Callable[[], str | None], until: threading.Event, show: Callable[[str], None],
          line: Line | None = None) -> threading.Thread:
    """Hand `poll()` (None: nothing to show yet) to `show` every INTERVAL until `until` is set,
    from a thread, and clear `line` at the end; the caller joins it after setting `until`."""
    def run() -> None:
        while True:
            text = poll()
            if text:
                show(text)
            if until.wait(INTERVAL):
                break
        if line is not None:
            line.done()

    thread = threading.Thread(target=run, name="h5fs-progress", daemon=True)
    thread.start()
    return thread
