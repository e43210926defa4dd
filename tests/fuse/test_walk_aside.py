"""The mount's walk for unused space stands aside while requests are served (fuse/writes.py
`_aside`): past its first WALK_ALONE s it sleeps WALK_SLICE / WALK_SHARE between slices while
requests come, runs on when none do, and at unmount ends where it is unless the mount freed
space (whose give-back at unmount needs the walk's word)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from h5fs.fuse import writes


class _Stopping(threading.Event):
    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout=None) -> bool:
        self.waits.append(timeout)
        return self.is_set()


def _mount(held: int = 0, pending: bool = False, dirty: bool = False) -> SimpleNamespace:
    store = SimpleNamespace(allocator=SimpleNamespace(held_bytes=lambda: held), pending=pending)
    return SimpleNamespace(requests=0, serving=0, f=SimpleNamespace(store=store),
                           writes=SimpleNamespace(stopping=_Stopping(), wb=SimpleNamespace(dirty=dirty)))


def _past_alone(monkeypatch) -> None:
    monkeypatch.setattr(writes, "WALK_ALONE", 0.0)


def test_the_walk_sleeps_between_slices_while_requests_come(monkeypatch):
    _past_alone(monkeypatch)
    mount = _mount()
    pause = writes._aside(mount)
    time.sleep(2 * writes.WALK_SLICE)
    mount.requests += 1
    pause(1, 0)
    waits = mount.writes.stopping.waits
    assert waits == [pytest.approx(writes.WALK_SLICE * (1 / writes.WALK_SHARE - 1))]
    time.sleep(2 * writes.WALK_SLICE)
    mount.serving = 1   # a request being answered (no new one counted)
    pause(2, 0)
    assert len(waits) == 2


def test_the_walk_runs_on_when_no_request_comes(monkeypatch):
    _past_alone(monkeypatch)
    mount = _mount()
    pause = writes._aside(mount)
    for i in range(5):
        time.sleep(2 * writes.WALK_SLICE)
        pause(i, 0)
    assert mount.writes.stopping.waits == []


def test_a_small_walk_never_stands_aside():
    """Within WALK_ALONE s of its start (a small file's whole walk) it does not pause."""
    mount = _mount()
    pause = writes._aside(mount)
    mount.requests += 1
    mount.serving = 1
    pause(1, 0)
    assert mount.writes.stopping.waits == []


@pytest.mark.parametrize("frees", [dict(held=4096), dict(pending=True), dict(dirty=True)])
def test_at_unmount_a_walk_whose_word_is_needed_finishes(monkeypatch, frees):
    _past_alone(monkeypatch)
    mount = _mount(**frees)
    pause = writes._aside(mount)
    mount.writes.stopping.set()
    mount.requests += 1
    time.sleep(2 * writes.WALK_SLICE)
    pause(1, 0)   # no exception, no sleep: it runs to its end
    assert mount.writes.stopping.waits == []


def test_at_unmount_a_walk_nothing_needs_ends():
    mount = _mount()
    pause = writes._aside(mount)
    mount.writes.stopping.set()
    with pytest.raises(writes.WalkStopped):
        pause(1, 0)
