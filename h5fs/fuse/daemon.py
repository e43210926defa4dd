"""Run the filesystem: mount with pyfuse3, serve under trio, unmount and close.

`serve` is called in the process that stays behind as the daemon (forked by the CLI, or the
CLI itself with `-f`); it announces readiness through `on_ready` (and to systemd, for a
`Type=notify` unit) once the mount answers a `stat` of its root, so the CLI returns only when
the mount is usable. SIGTERM and SIGINT unmount; the last changes are then written into the
file with those signals deferred, so a second signal cannot cut the final flush short. SIGHUP
reopens the log file (logrotate).
"""

from __future__ import annotations

import ctypes
import importlib
import gc
import logging
import os
import signal
import sys
import threading
import time
from typing import Callable

import pyfuse3
import trio

from . import mounts, notify
from .. import utab
from ..errors import H5fsError
from ..logs import Logs
from ..model.writeback import Writeback
from ..mount_options import MountOptions
from ..progress import Line, flush_text, watch
from ..storage.byte_source import mark_event_loop_thread
from ..status import duration
from .mount_state import EditorFactory
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


def _import_lazy_modules() -> None:
    """The engine imports what only some objects need when first needed (a plain `h5fs check`
    never loads them); a daemon loads them before its first request, which would otherwise wait
    for the import (5-10 ms of a first `cat` of a virtual dataset)."""
    for name in ("numpy.ma",   # np.unique(axis=) imports it at its first call
                 "h5fs.model.dtypes", "h5fs.model.external", "h5fs.model.points_view", "h5fs.model.varlen_views",
                 "h5fs.model.virtual", "h5fs.model.virtual_read", "h5fs.storage.sparse_chunk",
                 "h5fs.storage.sparse_source"):
        importlib.import_module(name)


def serve(h5file, source: str, mountpoint: str, options: MountOptions, *, writeback: Writeback | None,
          logs: Logs, foreground: bool, on_ready: Callable[[], None], on_fail: Callable[[str], None],
          editor: EditorFactory | None = None) -> int:
    """Mount and serve until unmounted or signalled; return the exit status. A writable mount
    returns only when every write is in the file, durably."""
    mode = "ro" if writeback is None else "rw"
    ops = Operations(h5file, source, writeback=writeback, mountpoint=os.path.abspath(mountpoint),
                     info={"pid": os.getpid(), "file": source, "log": logs.destination},
                     compression=options.compression, chunk_bytes=options.chunk_kb << 10,
                     owner=(options.uid, options.gid), umask=options.umask, flush_delay=options.flush_delay,
                     logs=logs, editor=editor)
    ops.enable_writeback_cache = options.writeback_cache
    fuse_options = options.fuse_options(source)
    utab.prune()
    try:
        pyfuse3.init(ops, mountpoint, fuse_options)
    except Exception as exc:  # libfuse already printed its reason on stderr
        on_fail(f"cannot mount {source} on {mountpoint}: {exc}")
        return 1
    log.info("mounted %s on %s (%s; options %s)", source, mountpoint, mode, ",".join(sorted(fuse_options)))
    if options.dropped:
        log.info("mount(8) options ignored: %s", ",".join(options.dropped))
    _tune_gc()
    _tune_malloc()
    _import_lazy_modules()
    status = 0
    # Installed before the loop, so trio restores these (not the defaults) when it ends: no
    # window between the loop and the final flush where a signal kills the daemon.
    deferred = _defer_signals(logs)
    try:
        trio.run(_main, ops, mountpoint, options.readahead_kb, logs, deferred, on_ready, on_fail)
    except BaseException:
        log.exception("main loop failed")
        status = 1
    finally:
        notify.stopping("unmounting: writing the last changes into the file")
        still = mounts.find_mount(mountpoint)
        unmount = still is not None and still.fstype == mounts.FSTYPE
        try:
            pyfuse3.close(unmount=unmount)
        except Exception:
            log.exception("closing the FUSE session failed")
            status = 1
        status = _close(ops, source, foreground) or status
        utab.remove(mountpoint)
    for name in deferred:
        log.warning("signal %s while writing the last changes: they were written first", name)
    log.info("unmounted %s (%s, up %s)", mountpoint, mode, duration(time.time() - ops.state.started))
    # Python resets its handlers to the defaults as the interpreter ends: a signal now must not
    # turn a clean exit into death by signal.
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, signal.SIG_IGN)
    return status


def _close(ops: Operations, source: str, foreground: bool) -> int:
    """Write the last changes (a progress line on a -f daemon's terminal, STATUS= to systemd)."""
    done = threading.Event()
    line = Line.on(sys.stderr) if foreground else None
    shown = [""]

    def show(text: str) -> None:
        if line is not None:
            line.show(text)
        if text != shown[0]:
            shown[0] = text
            notify.status(text)

    watching = ops.state.writes is not None and (line is not None or notify.enabled())
    watcher = watch(lambda: flush_text(ops.state.status()), done, show, line) if watching else None
    try:
        ops.close()
        return 0
    except (OSError, H5fsError) as exc:   # a full disk: what could not be written is named
        log.error("writing the last changes into %s failed, they are lost: %s", source, exc)
        return 1
    except Exception:
        log.exception("writing the last changes into %s failed", source)
        return 1
    finally:
        done.set()
        if watcher is not None:
            watcher.join()


def _defer_signals(logs: Logs) -> list[str]:
    """Outside the event loop's own receiver (before it opens, and from the unmount on), SIGTERM
    and SIGINT are ignored (the last changes are written first, and the daemon exits right
    after) and noted in the returned list, logged by the caller (a
    handler that logged could interrupt a log write in progress: a reentrant call); SIGHUP still
    reopens the log."""
    noted: list[str] = []

    def later(signum, frame) -> None:
        noted.append(signal.Signals(signum).name)

    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, later)
    signal.signal(signal.SIGHUP, lambda signum, frame: logs.reopen())
    return noted


async def _main(ops: Operations, mountpoint: str, readahead_kb: int, logs: Logs, early: list[str],
                on_ready, on_fail) -> None:
    mark_event_loop_thread()   # remote bytes are fetched in workers, never waited for here
    async with trio.open_nursery() as nursery:
        ops.start(nursery)
        nursery.start_soon(_signals, logs, ops, early)
        nursery.start_soon(_announce, ops, mountpoint, readahead_kb, on_ready, on_fail)
        await pyfuse3.main()
        ops.stopping()
        nursery.cancel_scope.cancel()


async def _signals(logs: Logs, ops: Operations, early: list[str]) -> None:
    """SIGTERM and SIGINT unmount (also one that came before this receiver was open, noted in
    `early`); SIGHUP reopens the log."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        if early:
            log.info("signal %s: unmounting", early[0])
            early.clear()
            ops.state.f.stop()
            pyfuse3.terminate()
        async for signum in signals:
            if signum == signal.SIGHUP:
                logs.reopen()
                continue
            log.info("signal %s: unmounting", signal.Signals(signum).name)
            ops.state.f.stop()   # requests waiting for a remote server are answered now, not after retries
            pyfuse3.terminate()


async def _announce(ops: Operations, mountpoint: str, readahead_kb: int, on_ready, on_fail) -> None:
    """Wait until the mount answers, tune its read-ahead, give umount(8) its helper, then
    report ready."""
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
    if m is not None:
        utab.add(m.source, mountpoint)
    on_ready()
    notify.ready(f"serving {ops.state.source} on {mountpoint}")
