"""Fill value messages: old (0x0004) and new (0x0005, versions 1-3): decode and encode.

`value` is what readers use: the fill value's bytes, or None (undefined, or the library default:
zeros). `defined` is the version 1-2 "Fill Value Defined" byte, or in version 3 the absence of
the "undefined" flag (bit 4). Not reproduced by encode (libhdf5 reads none of it): the value
bytes a version-1 message stores while not defined (written as size 0), a version-3 size field
of 0 (written as no value), reserved flag bits 6-7 and defined bytes other than 0/1.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError
from ..codec import Reader, Writer

ALLOC_EARLY, ALLOC_LATE, ALLOC_INCREMENTAL = 1, 2, 3
WRITE_ON_ALLOC, WRITE_NEVER, WRITE_IF_SET = 0, 1, 2
MAX_FILL = 1 << 20
UNDEFINED, HAVE_VALUE = 0x10, 0x20   # version 3 flags


@dataclass(frozen=True, slots=True)
class FillValue:
    value: bytes | None          # None: undefined (reads as zeros)
    alloc_time: int = ALLOC_LATE
    write_time: int = WRITE_IF_SET
    version: int = 3             # of the new message (the old one has none)
    defined: bool = True


def _value(c: Reader) -> bytes | None:
    (size,) = c.fields("I")
    if size > MAX_FILL:
        raise FormatError(f"fill value of {size} bytes")
    return c.bytes(size) if size else None


def _write_value(w: Writer, value: bytes | None) -> None:
    w.u32(len(value or b""))
    w.bytes(value or b"")


def decode_old(c: Reader) -> FillValue:
    return FillValue(_value(c))


def encode_old(w: Writer, fv: FillValue) -> None:
    _write_value(w, fv.value)


def decode(c: Reader) -> FillValue:
    version = c.u8()
    if version in (1, 2):
        alloc, write, defined = c.fields("BBB")
        value = _value(c) if version == 1 or defined else None
        return FillValue(value if defined else None, alloc, write, version, bool(defined))
    if version == 3:
        flags = c.u8()
        value = _value(c) if flags & HAVE_VALUE else None
        return FillValue(value, flags & 0x03, (flags >> 2) & 0x03, version, not flags & UNDEFINED)
    raise FormatError(f"fill value message version {version}")


def encode(w: Writer, fv: FillValue) -> None:
    if fv.version in (1, 2):
        if fv.value is not None and not fv.defined:
            raise ValueError("fill value message: a value that is not defined")
        w.fields("BBBB", fv.version, fv.alloc_time, fv.write_time, int(fv.defined))
        if fv.version == 1 or fv.defined:
            _write_value(w, fv.value)
    elif fv.version == 3:
        flags = (fv.alloc_time | fv.write_time << 2 | (0 if fv.defined else UNDEFINED)
                 | (0 if fv.value is None else HAVE_VALUE))
        w.fields("BB", fv.version, flags)
        if fv.value is not None:
            _write_value(w, fv.value)
    else:
        raise ValueError(f"fill value message version {fv.version}")
