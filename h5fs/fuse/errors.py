"""The one error boundary between h5fs and pyfuse3.

Any exception other than `pyfuse3.FUSEError` escaping a handler stops `pyfuse3.main` under trio,
so every request handler (fuse/operations.py forwards each request to one) is wrapped by
`boundary`: domain errors (`H5fsError`) become their errno, `OSError` keeps its errno, anything
unexpected is logged with the object it concerns and answered with EIO; the daemon keeps serving.
It also counts the requests served (`MountState.requests`, the root fact `user.h5fs.requests`):
benchmarks divide the daemon's CPU time by it; and those being served (`MountState.serving`:
background walks stand aside meanwhile). A handler that met bytes of a remote object not
fetched yet (WouldBlock: reads on the trio thread never wait for a network) is answered again
once a worker fetched them; a remote mount is read-only, so running a handler again changes
nothing twice.
"""

from __future__ import annotations

import errno
import functools
import logging

import pyfuse3
import trio

from ..errors import H5fsError
from ..storage.byte_source import WouldBlock

log = logging.getLogger("h5fs.fuse")

MAX_REFETCH = 16   # a handler answered again after fetching what it needed: bounded, never a loop


def fuse_error(exc: BaseException) -> pyfuse3.FUSEError:
    """The FUSEError to answer for `exc` (no logging)."""
    if isinstance(exc, pyfuse3.FUSEError):
        return exc
    if isinstance(exc, H5fsError):
        return pyfuse3.FUSEError(getattr(exc, "errno", None) or errno.EIO)
    if isinstance(exc, OSError) and exc.errno:
        return pyfuse3.FUSEError(exc.errno)
    return pyfuse3.FUSEError(errno.EIO)


def boundary(fn=None, *, request: str | None = None):
    """Decorate an async request handler `fn(mount, *args)` (`mount`: the mount state): only
    FUSEError ever leaves it. `request`: the request's name in logs, when not `fn`'s."""
    if fn is None:
        return functools.partial(boundary, request=request)
    name = request or fn.__name__

    @functools.wraps(fn)
    async def wrapper(mount, *args):
        mount.requests += 1
        mount.serving += 1
        try:
            for _ in range(MAX_REFETCH):
                try:
                    return await fn(mount, *args)
                except WouldBlock as exc:   # a remote object's bytes: fetched off the trio thread
                    await trio.to_thread.run_sync(exc.wait)
            raise H5fsError(f"the request kept needing remote bytes after {MAX_REFETCH} fetches "
                            f"(a block cache too small for what it reads at once?)")
        except pyfuse3.FUSEError:
            raise
        except H5fsError as exc:
            warn_once(f"{name} {_describe(mount, name, args)}: {type(exc).__name__}: {exc}")
            raise fuse_error(exc) from None
        except OSError as exc:
            log.warning("%s %s: %s", name, _describe(mount, name, args), exc)
            raise fuse_error(exc) from None
        except Exception:
            log.exception("%s %s: unexpected error, answering EIO", name, _describe(mount, name, args))
            raise pyfuse3.FUSEError(errno.EIO) from None
        finally:
            mount.serving -= 1

    return wrapper


_logged: set[str] = set()
MAX_LOGGED = 10000


def warn_once(message: str) -> None:
    """Log a failure once: a reader of a broken dataset repeats the same request many times."""
    if message in _logged:
        return
    if len(_logged) >= MAX_LOGGED:
        _logged.clear()
    _logged.add(message)
    log.warning("%s", message)


def _describe(mount, handler: str, args) -> str:
    """Name the object a request concerns, for the log (never raises)."""
    try:
        return mount.describe_request(handler, args)
    except Exception:  # pragma: no cover - logging must not fail
        return repr(args)[:200]
