"""`h5fs status [MOUNTPOINT] [--json]`: every h5fs mount and what its daemon is doing.

Each daemon answers the read-only xattr `user.h5fs.status` of its mount's root with a JSON
object (MountState.status); a remote mount's has a "remote" object, its byte source's counters
(RemoteSource.stats), and "siblings", the same for each object the file names beside itself;
an HSDS mount's has an "hsds" object, its client's counters (storage/hsds/transport.py).
The question is asked from a thread with a timeout, so a hung daemon is reported as such
instead of hanging the command.
"""

from __future__ import annotations

import json
import os
import threading

from .fuse.mounts import FSTYPE, canonical, mounts

STATUS_XATTR = "user.h5fs.status"
TIMEOUT = 5.0


def ask(mountpoint: str, timeout: float = TIMEOUT) -> dict:
    """The daemon's status, or {"error": why} for a dead or hung one."""
    box: list[dict] = []

    def run() -> None:
        try:
            box.append(json.loads(os.getxattr(mountpoint, STATUS_XATTR)))
        except OSError as exc:
            box.append({"error": f"the daemon does not answer: {exc.strerror or exc}"})
        except ValueError as exc:
            box.append({"error": f"unreadable status: {exc}"})

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    return box[0] if box else {"error": f"the daemon has not answered for {timeout:g} s (hung?)"}


def collect(mountpoint: str | None = None) -> list[dict]:
    found = []
    want = canonical(mountpoint) if mountpoint else None
    for m in mounts():
        if m.fstype != FSTYPE or (want and m.mountpoint != want):
            continue
        found.append({"mountpoint": m.mountpoint, "source": m.source, **ask(m.mountpoint)})
    return found


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def duration(s: float) -> str:
    s = int(s)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return (f"{d}d " if d else "") + (f"{h}h " if d or h else "") + f"{m}m {s}s"


def text(entries: list[dict]) -> str:
    if not entries:
        return "no h5fs mounts"
    blocks = []
    for e in entries:
        lines = [f"{e['mountpoint']}: {e.get('file', e['source'])}"]
        if "error" in e:
            lines.append(f"  {e['error']}")
            blocks.append("\n".join(lines))
            continue
        lines.append(f"  mode {e['mode']}, daemon pid {e['pid']}, up {duration(e['uptime_s'])}")
        if e["mode"] == "rw":
            flushing = e.get("flushing")
            line = f"  waiting to be written: {_size(e['dirty_bytes'])} in {e['chunks_waiting']} chunks"
            if flushing:
                line += f" (writing: {flushing['done']} of {flushing['total']} chunks)"
            lines.append(line)
        lines.append(f"  chunk cache: {_size(e['cache_bytes'])} of {_size(e['cache_limit_bytes'])}")
        lines.append(f"  warnings and errors: {e['errors']}" + (f" (log: {e['log']})" if e.get("log") else ""))
        lines.extend(f"    {msg}" for msg in e.get("last_errors", []))
        if e.get("remote"):
            lines.extend(_remote(e["remote"]))
        if e.get("hsds"):
            lines.extend(_hsds(e["hsds"]))
        for r in e.get("siblings", []):
            lines.extend(_sibling(r))
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def _remote(r: dict) -> list[str]:
    """A remote object's lines: what was fetched, what the block cache answered, what failed."""
    lines = [f"  remote: {r['requests']} requests, {_size(r['bytes_fetched'])} fetched, {r['in_flight']} in flight; "
             f"{r['retries']} retries, {r['failures']} failures",
             f"  block cache: {r['cache_hits']} hits, {r['cache_misses']} misses; {_size(r['cache_bytes'])} held "
             f"in {r['cache']} ({r['block_kb']} KiB blocks)"]
    if r.get("changed"):
        lines.append(f"  {r['changed']}")
    if r["last_errors"]:
        lines.append("  last request errors:")
        lines.extend(f"    {msg}" for msg in r["last_errors"])
    return lines


def _hsds(h: dict) -> list[str]:
    """An HSDS domain's lines: the service, what was asked of it, what failed."""
    lines = [f"  HSDS service {h['endpoint']}: {h['requests']} requests, {_size(h['bytes_in'])} in, "
             f"{_size(h['bytes_out'])} out; {h['retries']} retries, {h['errors']} errors"]
    if h["last_errors"]:
        lines.append("  last request errors:")
        lines.extend(f"    {msg}" for msg in h["last_errors"])
    return lines


def _sibling(r: dict) -> list[str]:
    """An object the remote file names beside itself (an external data file, a VDS source)."""
    lines = [f"  beside it: {r['url']}: {r['requests']} requests, {_size(r['bytes_fetched'])} fetched; "
             f"{r['retries']} retries, {r['failures']} failures"]
    if r.get("changed"):
        lines.append(f"    {r['changed']}")
    lines.extend(f"    {msg}" for msg in r["last_errors"])
    return lines


def run(mountpoint: str | None, as_json: bool) -> int:
    """0 when every mount listed answered, 1 otherwise (or none found for MOUNTPOINT)."""
    entries = collect(mountpoint)
    print(json.dumps(entries, indent=2) if as_json else text(entries))
    if mountpoint and not entries:
        return 1
    return 1 if any("error" in e for e in entries) else 0
