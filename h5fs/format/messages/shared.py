"""The shared-message reference that replaces a message's body when its 'shared' flag is set.

Version 1 (before libhdf5 1.6.1) and 2 point into another object header; version 3 also into the
file's shared-message (SOHM) heap. The six reserved bytes of version 1 are written as zeros.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError
from ..codec import Reader, Writer

IN_SOHM_HEAP, IN_OBJECT_HEADER = 1, 2


@dataclass(frozen=True, slots=True)
class SharedRef:
    kind: int                      # IN_SOHM_HEAP or IN_OBJECT_HEADER
    address: int | None = None     # object header holding the message (committed datatype)
    heap_id: bytes = b""           # 8-byte fractal heap ID in the SOHM heap
    version: int = 3
    type_byte: int | None = None   # versions 1-2: the Type byte as stored (readers ignore it; the
                                   # spec says 0, libhdf5 writes 2); None: `kind`


def decode(c: Reader) -> SharedRef:
    version = c.u8()
    if version == 1:
        type_byte, address = c.fields("B6xO")
        return SharedRef(IN_OBJECT_HEADER, c.sizes.address(address), version=1, type_byte=type_byte)
    if version == 2:
        type_byte, address = c.fields("BO")
        return SharedRef(IN_OBJECT_HEADER, c.sizes.address(address), version=2, type_byte=type_byte)
    if version == 3:
        kind = c.u8()
        if kind == IN_SOHM_HEAP:
            return SharedRef(kind, heap_id=c.bytes(8))
        if kind == IN_OBJECT_HEADER:
            return SharedRef(kind, c.offset())
        raise FormatError(f"shared message: unknown type {kind}")
    raise FormatError(f"shared message: unknown version {version}")


def encode(w: Writer, ref: SharedRef) -> None:
    if ref.version not in (1, 2, 3) or (ref.version < 3 and ref.kind != IN_OBJECT_HEADER):
        raise ValueError(f"shared message version {ref.version} cannot point to location type {ref.kind}")
    w.fields("BB", ref.version, ref.kind if ref.type_byte is None else ref.type_byte)
    if ref.version == 1:
        w.zeros(6)
    if ref.kind == IN_SOHM_HEAP:
        if len(ref.heap_id) != 8:
            raise ValueError(f"shared message heap ID of {len(ref.heap_id)} bytes")
        w.bytes(ref.heap_id)
    else:
        w.offset(ref.address)
