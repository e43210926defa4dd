"""The serve loop of the benchmarks' minimal pyfuse3 + trio filesystems (passthrough_fs.py,
write_floor_fs.py): mount, announce readiness once the mount answers a `stat`, unmount on
SIGTERM/SIGINT/SIGHUP. Depends on neither h5fs nor h5py."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable


def fuse_escape(value: str) -> str:
    """A value for a FUSE option list (commas and backslashes escaped)."""
    return value.replace("\\", "\\\\").replace(",", "\\,")


def serve(ops, mountpoint: str, options: set[str], label: str, mounted: Callable[[str], bool],
          on_ready: Callable[[], None], on_fail: Callable[[str], None],
          when_up: Callable[[], None] = lambda: None) -> int:
    """Serve `ops` at `mountpoint` until unmounted or signalled; `when_up` runs once the mount
    answers, before `on_ready`; `mounted` says whether the mount is still there at the end
    (never a stat: a hung FUSE mount point would block). Returns the exit status."""
    import pyfuse3
    import trio

    try:
        pyfuse3.init(ops, mountpoint, options)
    except Exception as exc:  # libfuse printed its reason on stderr
        on_fail(f"cannot mount on {mountpoint}: {exc}")
        return 1

    async def announce() -> None:
        try:
            await trio.to_thread.run_sync(os.stat, mountpoint)
        except OSError as exc:
            on_fail(f"the mount at {mountpoint} does not answer: {exc}")
            pyfuse3.terminate()
            return
        when_up()
        on_ready()

    async def stop_on_signal() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for _ in signals:
                pyfuse3.terminate()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop_on_signal)
            nursery.start_soon(announce)
            await pyfuse3.main()
            nursery.cancel_scope.cancel()

    status = 0
    try:
        trio.run(main)
    except BaseException as exc:  # noqa: BLE001 - report, then unmount below
        print(f"{label}: main loop failed: {exc!r}", file=sys.stderr)
        status = 1
    finally:
        # fusermount3 -u ends pyfuse3.main with the mount gone; a signal leaves it to us
        pyfuse3.close(unmount=mounted(mountpoint))
    return status
