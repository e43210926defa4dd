"""Our lines in libmount's /run/mount/utab, so that a plain `umount DIR` waits for the data.

umount(8) runs a helper (`/sbin/umount.<name>`) for a FUSE mount only when utab gives the mount
`uhelper=<name>`; without it, it detaches the mount at once and the daemon may still be writing.
A root daemon adds `uhelper=h5fs` once its mount answers and removes the line when it is gone;
lines that killed daemons left are pruned at the next mount. The file is edited as libmount edits
it: under an flock of `utab.lock`, written whole to a temporary file and renamed into place.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re

from .fuse.mounts import FSTYPE, mounts

UTAB_DIR = "/run/mount"
HELPER = "h5fs"

log = logging.getLogger("h5fs")


def escape(path: str) -> str:
    """libmount's escaping of a utab field (space, tab, newline, backslash as octal)."""
    return re.sub(r"[ \t\n\\]", lambda m: f"\\{ord(m.group()):03o}", path)


def line_for(source: str, target: str) -> str:
    return f"SRC={escape(source)} TARGET={escape(target)} ROOT=/ OPTS=uhelper={HELPER}"


def fields(line: str) -> dict[str, str]:
    out = {}
    for word in line.split():
        key, eq, value = word.partition("=")
        if eq:
            out[key] = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), value)
    return out


def ours(line: str) -> bool:
    return f"uhelper={HELPER}" in fields(line).get("OPTS", "").split(",")


def add(source: str, target: str, directory: str = UTAB_DIR) -> bool:
    """Give the mount at `target` its umount helper; False when utab cannot be written (not
    root: a plain umount then detaches at once, `h5fs umount` still waits)."""
    return _edit(directory, lambda lines: [ln for ln in lines if not _names(ln, target)] + [line_for(source, target)])


def remove(target: str, directory: str = UTAB_DIR) -> bool:
    return _edit(directory, lambda lines: [ln for ln in lines if not _names(ln, target)])


def prune(directory: str = UTAB_DIR) -> bool:
    """Drop our lines whose mount is no longer an h5fs mount (a daemon killed before it could)."""
    live = {m.mountpoint for m in mounts() if m.fstype == FSTYPE}
    return _edit(directory, lambda lines: [ln for ln in lines if not ours(ln) or fields(ln).get("TARGET") in live])


def _names(line: str, target: str) -> bool:
    return ours(line) and fields(line).get("TARGET") == target


def _edit(directory: str, change) -> bool:
    if os.geteuid() != 0:
        return False
    path = os.path.join(directory, "utab")
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        with open(path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                with open(path) as fh:
                    lines = [ln.rstrip("\n") for ln in fh if ln.strip()]
            except FileNotFoundError:
                lines = []
            new = change(lines)
            if new == lines:
                return True
            tmp = f"{path}.h5fs{os.getpid()}"
            with open(tmp, "w") as fh:
                fh.write("".join(ln + "\n" for ln in new))
                os.fchmod(fh.fileno(), 0o644)
            os.replace(tmp, path)
        return True
    except OSError as exc:
        log.warning("could not update %s: %s", path, exc)
        return False
