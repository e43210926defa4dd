"""Attribute message (0x000C), versions 1-3: name, datatype, dataspace and raw value bytes.

The embedded datatype and dataspace messages (or shared-message references to them) are kept as
the bytes stored, decoded on demand by the model, and written back as they are. Version 1 pads the
name, datatype and dataspace to multiples of 8 bytes with zeros: the padding is not kept and is
written as zeros. Flag bits other than the two 'shared' bits (libhdf5 rejects them) are not kept;
a name whose size field does not end at its NUL is written back in libhdf5's form (name + NUL).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError
from ..codec import Reader, Writer

MAX_NAME = 65535
DT_SHARED, DS_SHARED = 0x01, 0x02


@dataclass(frozen=True, slots=True)
class AttributeMessage:
    name: str
    datatype_raw: bytes     # a datatype message (or a shared reference when datatype_shared)
    dataspace_raw: bytes
    data: bytes             # the value (in a version-1 object header, up to the message's padded end)
    datatype_shared: bool = False
    dataspace_shared: bool = False
    creation_order: int | None = None   # from the object header or the dense index, not these bytes
    version: int = 3
    charset: int = 0        # name character set (1 = UTF-8); stored by version 3 only


def _pad(version: int, n: int) -> int:
    return (n + 7) & ~7 if version == 1 else n


def decode(c: Reader) -> AttributeMessage:
    version = c.u8()
    if version not in (1, 2, 3):
        raise FormatError(f"attribute message version {version}")
    flags, nsize, tsize, ssize = c.fields("BHHH")
    charset = c.u8() if version >= 3 else 0  # a label: C programs write UTF-8 names under ASCII
    if nsize == 0:
        raise FormatError("attribute message: empty name")
    raw_name = c.bytes(_pad(version, nsize))[:nsize]
    name = raw_name.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
    dtype = c.bytes(_pad(version, tsize))[:tsize]
    space = c.bytes(_pad(version, ssize))[:ssize]
    data = c.bytes(c.remaining())
    return AttributeMessage(name, dtype, space, data, bool(flags & DT_SHARED), bool(flags & DS_SHARED),
                            version=version, charset=charset)


def encode(w: Writer, a: AttributeMessage) -> None:
    name = a.name.encode("utf-8", "surrogateescape") + b"\0"
    if a.version not in (1, 2, 3) or (a.version < 3 and a.charset != 0):
        raise ValueError(f"attribute message version {a.version} with character set {a.charset}")
    if len(name) > MAX_NAME:
        raise ValueError(f"attribute name of {len(name)} bytes")
    start = w.pos
    w.fields("BBHHH", a.version, (DT_SHARED if a.datatype_shared else 0) | (DS_SHARED if a.dataspace_shared else 0),
             len(name), len(a.datatype_raw), len(a.dataspace_raw))
    if a.version >= 3:
        w.u8(a.charset)
    for part in (name, a.datatype_raw, a.dataspace_raw):
        w.bytes(part)
        if a.version == 1:
            w.align(8, start)
    w.bytes(a.data)
