"""Attribute message (0x000C), versions 1-3: name, datatype, dataspace and raw value bytes."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError
from ..codec import Reader

MAX_NAME = 65535


@dataclass(frozen=True)
class AttributeMessage:
    name: str
    datatype_raw: bytes     # a datatype message (or a shared reference when datatype_shared)
    dataspace_raw: bytes
    data: bytes
    datatype_shared: bool = False
    dataspace_shared: bool = False
    creation_order: int | None = None


def decode(c: Reader) -> AttributeMessage:
    version = c.u8()
    if version not in (1, 2, 3):
        raise FormatError(f"attribute message version {version}")
    flags = c.u8()
    nsize, tsize, ssize = c.u16(), c.u16(), c.u16()
    if version >= 3:
        c.u8()  # character set: only a label, C programs write UTF-8 names under the ASCII default
    pad = (lambda n: (n + 7) & ~7) if version == 1 else (lambda n: n)
    if nsize == 0:
        raise FormatError("attribute message: empty name")
    raw_name = c.bytes(pad(nsize))[:nsize]
    name = raw_name.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
    dtype = c.bytes(pad(tsize))[:tsize]
    space = c.bytes(pad(ssize))[:ssize]
    data = c.bytes(c.remaining())
    return AttributeMessage(name, dtype, space, data, bool(flags & 1), bool(flags & 2))
