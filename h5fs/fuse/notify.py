"""systemd's notify protocol (sd_notify(3)) for `Type=notify` units, with no library.

The service manager sets $NOTIFY_SOCKET (a path, or an abstract name starting with '@'); each
message is one datagram of `KEY=VALUE` lines. Without the variable every call does nothing.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger("h5fs")


def enabled() -> bool:
    """Whether a service manager listens (a Type=notify unit)."""
    return bool(os.environ.get("NOTIFY_SOCKET"))


def notify(*lines: str) -> bool:
    """Send one message; True when a service manager took it."""
    where = os.environ.get("NOTIFY_SOCKET")
    if not where:
        return False
    address = "\0" + where[1:] if where.startswith("@") else where
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.sendto("\n".join(lines).encode("utf-8", "replace"), address)
        return True
    except OSError as exc:
        log.warning("could not notify the service manager at %s: %s", where, exc)
        return False


def ready(status: str) -> bool:
    return notify("READY=1", f"MAINPID={os.getpid()}", f"STATUS={status}")


def stopping(status: str) -> bool:
    return notify("STOPPING=1", f"STATUS={status}")


def status(text: str) -> bool:
    return notify(f"STATUS={text}")
