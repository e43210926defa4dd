"""The shared-message reference that replaces a message's body when its 'shared' flag is set."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError
from ..codec import Reader

IN_SOHM_HEAP, IN_OBJECT_HEADER = 1, 2


@dataclass(frozen=True)
class SharedRef:
    kind: int                      # IN_SOHM_HEAP or IN_OBJECT_HEADER
    address: int | None = None     # object header holding the message (committed datatype)
    heap_id: bytes = b""           # 8-byte fractal heap ID in the SOHM heap


def decode(c: Reader) -> SharedRef:
    version = c.u8()
    if version == 1:
        c.u8()
        c.skip(6)
        return SharedRef(IN_OBJECT_HEADER, c.offset())
    if version == 2:
        c.u8()
        return SharedRef(IN_OBJECT_HEADER, c.offset())
    if version == 3:
        kind = c.u8()
        if kind == IN_SOHM_HEAP:
            return SharedRef(kind, heap_id=c.bytes(8))
        if kind == IN_OBJECT_HEADER:
            return SharedRef(kind, c.offset())
        raise FormatError(f"shared message: unknown type {kind}")
    raise FormatError(f"shared message: unknown version {version}")
