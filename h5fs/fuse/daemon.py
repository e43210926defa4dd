"""Run the filesystem: mount with pyfuse3, serve under trio, unmount and close.

`serve` is called in the process that stays behind as the daemon (forked by the CLI, or the
CLI itself with `-f`); it announces readiness through `on_ready` once the mount answers a
`stat` of its root, so the CLI returns only when the mount is usable.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import signal
from typing import Callable

import pyfuse3
import trio

from . import mounts
from ..errors import H5fsError
from ..model.writeback import Writeback
from .operations import Operations

log = logging.getLogger("h5fs.fuse")

# The engine's caches keep hundreds of thousands of small records alive and replace them as a
# walk goes on; under the default thresholds (700, 10, 10) Python's cycle collector then runs
# full collections over the whole heap every few seconds, 20-25% of the daemon's time on a
# 100,000-object walk. Young collections every 100,000 allocations still find the cycles the
# daemon makes (exceptions and their tracebacks die young); full ones become rare.
GC_THRESHOLDS = (100_000, 50, 1000)


def _tune_gc() -> None:
    """Freeze what start-up made (modules, the open file) out of every collection, and space
    collections out (GC_THRESHOLDS)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


# Each read request allocates its output (and scratch, and read-ahead of up to 8 MiB). Above
# glibc's mmap threshold every one is a fresh mapping whose pages fault in on first touch and
# are unmapped at free: measured, half the CPU of a tiled chunked read. Kept in the heap (and not
# trimmed back at once), they reuse pages already mapped. One arena: each worker thread's own
# would keep as much again (filtered reads allocate their decoded chunks in the workers).
MMAP_THRESHOLD = 16 << 20
TRIM_THRESHOLD = 32 << 20
ARENAS = 1
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8   # glibc's mallopt parameters (malloc.h)


def _tune_malloc() -> None:
    """Keep request-sized buffers in the heap (glibc only; elsewhere nothing changes)."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
        libc.mallopt(_M_ARENA_MAX, ARENAS)
    except (OSError, AttributeError):
        pass


def serve(h5file, source: str, mountpoint: str, fuse_options: set[str], *, writeback: Writeback | None,
          writeback_cache: bool, compression: str | None, info: dict, readahead_kb: int, on_ready: Callable[[], None],
          on_fail: Callable[[str], None]) -> int:
    """Mount and serve until unmounted or signalled; return the exit status. A writable mount
    returns only when every write is in the file, durably."""
    ops = Operations(h5file, source, writeback=writeback, info=info, mountpoint=os.path.abspath(mountpoint),
                     compression=compression)
    ops.enable_writeback_cache = writeback_cache
    try:
        pyfuse3.init(ops, mountpoint, fuse_options)
    except Exception as exc:  # libfuse already printed its reason on stderr
        on_fail(f"cannot mount {source} on {mountpoint}: {exc}")
        return 1
    log.info("mounted %s on %s (options %s)", source, mountpoint, ",".join(sorted(fuse_options)))
    _tune_gc()
    _tune_malloc()
    status = 0
    try:
        trio.run(_main, ops, mountpoint, readahead_kb, on_ready, on_fail)
    except BaseException:
        log.exception("main loop failed")
        status = 1
    finally:
        still = mounts.find_mount(mountpoint)
        unmount = still is not None and still.fstype == mounts.FSTYPE
        try:
            pyfuse3.close(unmount=unmount)
        except Exception:
            log.exception("closing the FUSE session failed")
            status = 1
        try:
            ops.close()
        except (OSError, H5fsError) as exc:   # a full disk: what could not be written is named
            log.error("writing the last changes into %s failed, they are lost: %s", source, exc)
            status = 1
        except Exception:
            log.exception("writing the last changes into %s failed", source)
            status = 1
    log.info("unmounted %s", mountpoint)
    return status


async def _main(ops: Operations, mountpoint: str, readahead_kb: int, on_ready, on_fail) -> None:
    async with trio.open_nursery() as nursery:
        ops.start(nursery)
        nursery.start_soon(_signals)
        nursery.start_soon(_announce, mountpoint, readahead_kb, on_ready, on_fail)
        await pyfuse3.main()
        nursery.cancel_scope.cancel()


async def _signals() -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            log.info("signal %s: unmounting", signal.Signals(signum).name)
            pyfuse3.terminate()


async def _announce(mountpoint: str, readahead_kb: int, on_ready, on_fail) -> None:
    """Wait until the mount answers, tune its read-ahead, then report ready."""
    try:
        await trio.to_thread.run_sync(os.stat, mountpoint)
    except OSError as exc:
        on_fail(f"the mount at {mountpoint} does not answer: {exc}")
        pyfuse3.terminate()
        return
    m = mounts.find_mount(mountpoint)
    if m is not None and readahead_kb > 0:
        if mounts.set_readahead(m.device, readahead_kb):
            log.info("read_ahead_kb of bdi %s set to %d", m.device, readahead_kb)
        else:
            log.info("could not set read_ahead_kb of bdi %s (not root?)", m.device)
    on_ready()
