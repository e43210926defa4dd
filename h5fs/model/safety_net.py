"""The safety net of decoding a hostile file: an exception a bounds check missed becomes a
FormatError (EIO) naming the object, never a crash of the mount."""

from __future__ import annotations

import errno
import functools
import logging
import struct
from typing import Any, Callable, TypeVar

from ..errors import FormatError

log = logging.getLogger("h5fs.model")

# What decoding a hostile file can raise where a bounds check was missed. Programming errors
# (NameError, AttributeError, ImportError) are not in the list: they stay loud.
UNEXPECTED = (ArithmeticError, LookupError, ValueError, TypeError, struct.error, MemoryError,
              RecursionError, AssertionError, BufferError)

F = TypeVar("F", bound=Callable[..., Any])


def internal_error(what: str, exc: BaseException) -> FormatError:
    """The FormatError (EIO) that stands for an unexpected exception while decoding `what`.

    It carries `safety_net = True`: the tests treat it as a bug to fix at its root, the mount
    as one broken object.
    """
    log.debug("%s: unexpected %s while decoding", what, type(exc).__name__, exc_info=exc)
    err = FormatError(f"{what}: malformed structure ({type(exc).__name__}: {exc})"[:1000])
    err.safety_net = True  # type: ignore[attr-defined]
    return err


def guarded(method: F) -> F:
    """Per-object entry point: unexpected exceptions become a FormatError naming the object."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except UNEXPECTED as e:
            raise internal_error(self.path, e) from e
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise  # a real I/O error keeps its errno
            raise internal_error(self.path, e) from e  # e.g. a pread at a negative offset

    return wrapper  # type: ignore[return-value]
