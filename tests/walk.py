"""Walk everything a mount would touch in an HDF5 file, through the engine only (no FUSE).

Used by the corpus and fuzz tests (a helper, not a test module). For every object reachable by
hard links from the root (cycles guarded by header address) it reads what the FUSE layer reads:
kind, link count, mtime, comment, facts, every attribute's value; for groups the links; for
datasets the sizes and the raw and `.npy` views, in bounded pieces (at most the first and last
`EDGE` bytes plus a few middle ranges), so walking any file costs bounded time and memory.

Each step's outcome is "ok" or the message of the `H5fsError` it raised (the object answers
EIO). Any other exception (IndexError, struct.error, MemoryError, RecursionError, ...) is a bug
in the engine: it is recorded in `WalkResult.bugs` with its traceback, and the walk goes on.

Run as a script (`python tests/walk.py FILE [--limit-as BYTES]`), it prints the result as one
JSON object; the corpus test runs it so in a child process with a time and memory bound.
"""

from __future__ import annotations

import json
import math
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

EDGE = 1 << 20          # bytes read at each end of a view
PIECE = 256 * 1024      # bytes per read call (the kernel sends 128 KiB - 1 MiB requests)
MIDDLE = 64 * 1024      # bytes read at each of the middle probes
MAX_OBJECTS = 20000     # a walk of a hostile file stops here (recorded, not a bug)


@dataclass
class Outcome:
    path: str
    step: str
    error: str | None = None        # None: ok; else "ErrorClass: message"


@dataclass
class Bug:
    path: str
    step: str
    exception: str
    traceback: str


@dataclass
class WalkResult:
    file: str
    refused: str | None = None       # H5File.open raised this H5fsError: the mount refuses the file
    outcomes: list[Outcome] = field(default_factory=list)
    bugs: list[Bug] = field(default_factory=list)
    objects: int = 0
    truncated: bool = False
    seconds: float = 0.0

    @property
    def errors(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.error is not None]

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WalkResult:
        d = json.loads(text)
        d["outcomes"] = [Outcome(**o) for o in d["outcomes"]]
        d["bugs"] = [Bug(**b) for b in d["bugs"]]
        return cls(**d)

    def summary(self) -> str:
        if self.refused is not None:
            head = f"refused: {self.refused}"
        else:
            head = f"{self.objects} objects, {len(self.errors)} EIO steps"
        lines = [f"{self.file}: {head}"]
        for b in self.bugs:
            lines.append(f"  BUG {b.path} [{b.step}]: {b.exception}\n{_indent(b.traceback)}")
        return "\n".join(lines)


def _indent(text: str) -> str:
    return "\n".join("      " + line for line in text.rstrip().splitlines()[-14:])


def view_ranges(size: int) -> list[tuple[int, int]]:
    """(offset, size) pieces covering the first and last EDGE bytes and three middle probes."""
    spans: list[tuple[int, int]] = []
    if size <= 2 * EDGE + 3 * MIDDLE:
        spans.append((0, size))
    else:
        spans.append((0, EDGE))
        for q in (1, 2, 3):
            spans.append((size * q // 4 - MIDDLE // 2 + 3, MIDDLE))  # deliberately unaligned
        spans.append((size - EDGE, EDGE))
    out = []
    for start, length in spans:
        pos, end = start, start + length
        while pos < end:
            n = min(PIECE, end - pos)
            out.append((pos, n))
            pos += n
    return out


class Walker:
    def __init__(self, result: WalkResult, on_bug: Callable[[BaseException], None] | None = None):
        self.r = result
        self.on_bug = on_bug

    def step(self, path: str, step: str, fn: Callable[[], Any]) -> tuple[bool, Any]:
        """Run one step; (True, value) when it succeeded, (False, None) when it raised."""
        from h5fs.errors import H5fsError
        try:
            value = fn()
        except H5fsError as e:
            msg = str(e)
            if not msg:
                self._bug(path, step, AssertionError(f"{type(e).__name__} with an empty message"))
            if getattr(e, "safety_net", False) and e.__cause__ is not None:
                # the model's safety net turned a raw exception into EIO: still a bug to fix
                self._bug(path, step, e.__cause__)
            self.r.outcomes.append(Outcome(path, step, f"{type(e).__name__}: {msg}"))
            return False, None
        except Exception as e:  # noqa: BLE001 - that is the point: anything else is a bug
            self._bug(path, step, e)
            return False, None
        self.r.outcomes.append(Outcome(path, step))
        return True, value

    def _bug(self, path: str, step: str, e: BaseException) -> None:
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        self.r.bugs.append(Bug(path, step, f"{type(e).__name__}: {e}"[:2000], tb[-6000:]))
        if self.on_bug is not None:
            self.on_bug(e)

    def check(self, path: str, step: str, ok: bool, message: str) -> None:
        if not ok:
            self._bug(path, step, AssertionError(message))

    # -------------------------------------------------------------------------------- objects
    def walk_file(self, f) -> None:
        root_ok, root = self.step("/", "root", lambda: f.root)
        if not root_ok:
            return
        seen: set[int] = set()
        stack = [(f.root_address, "/")]
        while stack:
            address, path = stack.pop()
            if address in seen:
                continue
            seen.add(address)
            if len(seen) > MAX_OBJECTS:
                self.r.truncated = True
                return
            ok, obj = self.step(path, "get", lambda: f.get(address, path))
            if not ok:
                continue
            self.r.objects += 1
            self.walk_object(obj, path)
            if obj.kind == "group":
                ok, links = self.step(path, "links", obj.links)
                if not ok:
                    continue
                for link in reversed(links):
                    child = path.rstrip("/") + "/" + link.name
                    if link.kind == "hard":
                        if link.address is None:
                            self.r.outcomes.append(Outcome(child, "link", "hard link without address"))
                            continue
                        stack.append((link.address, child))
                    else:
                        self.step(child, "link", lambda ln=link: (ln.kind, ln.target, ln.filename))

    def walk_object(self, obj, path: str) -> None:
        self.step(path, "kind", lambda: obj.kind)
        self.step(path, "nlink", lambda: int(obj.nlink))
        self.step(path, "mtime", lambda: obj.mtime)
        self.step(path, "facts", lambda: {str(k): str(v) for k, v in obj.facts().items()})
        ok, attrs = self.step(path, "attributes", obj.attributes)
        if ok:
            for attr in attrs:
                self.step(path, f"attribute {attr.name!r}", lambda a=attr: _touch(a.value))
        if obj.kind == "dataset":
            self.walk_dataset(obj, path)

    def walk_dataset(self, ds, path: str) -> None:
        self.step(path, "storage_size", lambda: int(ds.storage_size))
        ok, size = self.step(path, "raw_size", lambda: int(ds.raw_size))
        if ok:
            self.read_view(path, "raw", size, ds.read_raw)
        ok_t, npy_type = self.step(path, "npy_dtype", lambda: (ds.npy_dtype, tuple(ds.npy_shape)))
        ok, size = self.step(path, "npy_body_size", lambda: int(ds.npy_body_size))
        if ok:
            if ok_t:
                dt, shape = npy_type
                self.check(path, "npy_body_size", size == math.prod(shape) * dt.itemsize,
                           f".npy body of {size} bytes for shape {shape} of {dt}")
            self.read_view(path, "npy", size, ds.read_npy_body)

    def read_view(self, path: str, name: str, size: int, read: Callable[[int, int], bytes]) -> None:
        for off, n in view_ranges(size):
            ok, data = self.step(path, f"read {name} {off}+{n}", lambda o=off, k=n: read(o, k))
            if not ok:
                return  # one EIO is enough: the rest of this view would answer the same
            self.check(path, f"read {name} {off}+{n}", isinstance(data, (bytes, bytearray, memoryview)) and len(data) == n,
                       f"{name} read {off}+{n} returned {type(data).__name__} of {len(data) if data is not None else None} bytes")
        # past the end: empty, not an error
        ok, data = self.step(path, f"read {name} past end", lambda: read(size, 16))
        if ok:
            self.check(path, f"read {name} past end", len(data) == 0, f"{len(data)} bytes past the end")


def _touch(value: Any) -> Any:
    """Force what the xattr view forces: the whole value, as text."""
    import numpy as np
    a = np.asarray(value)
    str(a.dtype)
    if a.size <= 4096:
        a.tolist()
    return a.shape


def walk(path: str, on_bug: Callable[[BaseException], None] | None = None) -> WalkResult:
    """Open `path` with the engine and walk everything; see the module docstring."""
    from h5fs.errors import H5fsError
    from h5fs.model.file import H5File
    t0 = time.monotonic()
    result = WalkResult(str(path))
    walker = Walker(result, on_bug)
    try:
        f = H5File.open(str(path))
    except H5fsError as e:
        result.refused = f"{type(e).__name__}: {e}"
        if not str(e):
            walker._bug("/", "open", AssertionError(f"{type(e).__name__} with an empty message"))
        result.seconds = time.monotonic() - t0
        return result
    except Exception as e:  # noqa: BLE001
        walker._bug("/", "open", e)
        result.refused = f"BUG {type(e).__name__}: {e}"
        result.seconds = time.monotonic() - t0
        return result
    try:
        walker.walk_file(f)
    finally:
        f.close()
    result.seconds = time.monotonic() - t0
    return result


@dataclass
class Isolated:
    """What a walk in a child process came to."""

    status: str                      # "done", "timeout", "died" (signal or exit code), "bad output"
    result: WalkResult | None
    detail: str = ""
    seconds: float = 0.0


def default_limit_as() -> int:
    """RLIMIT_AS for a walking child: 3 GiB above what this process has mapped already."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024 + (3 << 30)
    except OSError:
        pass
    return 6 << 30


def walk_isolated(path: str, timeout: float = 20.0, limit_as: int | None = None) -> Isolated:
    """Walk `path` in a forked child under RLIMIT_AS and a wall-clock timeout, so that a hang or
    a huge allocation is reported instead of taking the test run (or the machine) down."""
    import os
    import resource
    import select
    import signal
    limit = limit_as or default_limit_as()
    rfd, wfd = os.pipe()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(rfd)
            resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
            signal.alarm(int(timeout) + 5)  # backstop if the parent is gone
            data = walk(path).to_json().encode()
            view = memoryview(data)
            while view:
                n = os.write(wfd, view)
                view = view[n:]
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
            code = 3
        finally:
            os._exit(code)
    os.close(wfd)
    chunks: list[bytes] = []
    status, detail = "done", ""
    try:
        while True:
            left = timeout - (time.monotonic() - t0)
            if left <= 0:
                status, detail = "timeout", f"no result after {timeout} s"
                break
            ready, _, _ = select.select([rfd], [], [], left)
            if not ready:
                continue
            chunk = os.read(rfd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(rfd)
        if status == "timeout":
            os.kill(pid, signal.SIGKILL)
        _, wstatus = os.waitpid(pid, 0)
    seconds = time.monotonic() - t0
    if status == "timeout":
        return Isolated(status, None, detail, seconds)
    if os.WIFSIGNALED(wstatus):
        return Isolated("died", None, f"killed by signal {os.WTERMSIG(wstatus)}", seconds)
    code = os.WEXITSTATUS(wstatus)
    if code != 0:
        return Isolated("died", None, f"exit status {code} (see captured stderr)", seconds)
    try:
        return Isolated("done", WalkResult.from_json(b"".join(chunks).decode()), "", seconds)
    except (ValueError, TypeError) as e:
        return Isolated("bad output", None, str(e), seconds)


def main(argv: list[str]) -> int:
    import argparse
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("file")
    p.add_argument("--limit-as", type=int, default=0, help="RLIMIT_AS for this process, in bytes")
    p.add_argument("--summary", action="store_true", help="human-readable summary instead of JSON")
    args = p.parse_args(argv)
    if args.limit_as:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (args.limit_as, args.limit_as))
    sys.setrecursionlimit(5000)
    result = walk(args.file)
    print(result.summary() if args.summary else result.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
