"""Mount-table helpers shared by the CLI and the daemon (stdlib only: no trio, no pyfuse3)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

FSTYPE = "fuse.h5fs"


@dataclass(frozen=True)
class MountInfo:
    mountpoint: str
    device: str      # "major:minor", names the bdi in /sys/class/bdi/
    fstype: str
    source: str
    options: str


def _unescape(s: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def mounts() -> list[MountInfo]:
    out = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            f = left.split()
            r = right.split()
            if len(f) < 6 or len(r) < 2:
                continue
            out.append(MountInfo(_unescape(f[4]), f[2], r[0], _unescape(r[1]), f[5]))
    return out


def canonical(path: str) -> str:
    """An absolute, symlink-free path without stat-ing `path` itself (a hung FUSE mount would
    block): resolve the parent directory, keep the last component."""
    path = os.path.abspath(path)
    if path == "/":
        return path
    parent, name = os.path.split(path.rstrip("/"))
    return os.path.join(os.path.realpath(parent), name)


def find_mount(path: str) -> MountInfo | None:
    """The topmost mount at `path`, if any."""
    path = canonical(path)
    found = None
    for m in mounts():
        if m.mountpoint == path:
            found = m
    return found


def set_readahead(device: str, kb: int) -> bool:
    """Raise the mount's bdi read-ahead (root only); False when it could not be set."""
    try:
        with open(f"/sys/class/bdi/{device}/read_ahead_kb", "w") as fh:
            fh.write(str(int(kb)))
        return True
    except OSError:
        return False


def process_alive(pid: int) -> bool:
    """True while `pid` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    state = data[data.rfind(b")") + 2:][:1]
    return state not in (b"Z", b"X")
