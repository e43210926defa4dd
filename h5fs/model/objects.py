"""The object every group, dataset and named datatype is: a header, its messages, attributes."""

from __future__ import annotations

import errno
import functools
import logging
import struct
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from ..errors import FormatError, H5fsError
from ..format import object_header
from ..format.codec import Reader
from ..format.messages import shared
from . import messages as M

if TYPE_CHECKING:
    from .attributes import Attribute
    from .file import H5File

MAX_SHARED_DEPTH = 8

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


class H5Object:
    kind = "object"

    def __init__(self, file: H5File, address: int, path: str, header: object_header.ObjectHeader):
        self.file = file
        self.address = address
        self.path = path
        self.header = header

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.path} @{self.address}>"

    # -- messages ---------------------------------------------------------------------------
    def decode(self, raw: object_header.RawMessage, depth: int = 0) -> Any:
        """Decode one message, following a shared-message reference to where the body lives."""
        name = M.NAMES.get(raw.type, f"type {raw.type:#x}")
        what = f"{self.path}: {name} message"
        if raw.shared:
            if depth >= MAX_SHARED_DEPTH:
                raise FormatError(f"{what}: shared message chain too deep")
            try:
                ref = shared.decode(Reader(raw.data, 0, self.file.sizes, what))
                body = self.file.shared_message_body(ref, raw.type, what)
            except UNEXPECTED as e:
                raise internal_error(what, e) from e
            return self.decode(body, depth + 1)
        decoder = M.DECODERS.get(raw.type)
        if decoder is None:
            raise FormatError(f"{what}: no decoder")
        try:
            return decoder(Reader(raw.data, 0, self.file.sizes, what))
        except H5fsError as e:
            if str(e).startswith(self.path):
                raise
            raise type(e)(f"{what}: {e}") from None
        except UNEXPECTED as e:
            raise internal_error(what, e) from e

    def message(self, mtype: int) -> Any:
        raw = self.header.first(mtype)
        return None if raw is None else self.decode(raw)

    # -- common facts -----------------------------------------------------------------------
    @cached_property
    @guarded
    def nlink(self) -> int:
        if self.header.version == 1:
            return max(1, self.header.refcount)
        rc = self.message(M.REFCOUNT)
        return max(1, rc or 1)

    @cached_property
    @guarded
    def mtime(self) -> float | None:
        for mtype in (M.MTIME, M.MTIME_OLD):
            raw = self.header.first(mtype)
            if raw is not None:
                try:
                    return self.decode(raw)
                except H5fsError:
                    return None
        if self.header.times:
            return float(self.header.times[1])
        return None

    @cached_property
    @guarded
    def comment(self) -> str | None:
        return self.message(M.COMMENT)

    @cached_property
    @guarded
    def dense_attributes(self) -> bool:
        """Attributes kept in a fractal heap (reading them is I/O), not all in the header."""
        info = self.message(M.ATTRIBUTE_INFO)
        return info is not None and info.heap_address is not None

    facts_from_header = True  # `facts()` needs nothing beyond the parsed header (no I/O)

    def attributes(self) -> list[Attribute]:
        from .attributes import read_attributes
        return read_attributes(self)

    @guarded
    def facts(self) -> dict[str, str]:
        out = {"kind": self.kind, "address": str(self.address)}
        if self.comment:
            out["comment"] = self.comment
        return out


class NamedDatatype(H5Object):
    kind = "datatype"

    @cached_property
    @guarded
    def datatype(self):
        return self.message(M.DATATYPE)

    @guarded
    def facts(self) -> dict[str, str]:
        from .dtypes import describe
        out = super().facts()
        out["dtype"] = describe(self.datatype)
        return out
