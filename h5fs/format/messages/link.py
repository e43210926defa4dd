"""Link message (0x0006): hard, soft, external and user-defined links.

The same bytes live in an object header (compact storage) or as a fractal heap object (dense
storage). The record keeps every choice a writer makes (name-length width, which optional fields
are present, the external link's flags byte), so `encode` gives back libhdf5's bytes. Reserved
flag bits (5-7, which libhdf5 refuses to read) are not kept, and an external value lacking its
final NUL or carrying bytes after it is written back in libhdf5's form (two NUL-terminated strings).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError
from ..codec import Reader, Writer

HARD, SOFT, EXTERNAL = 0, 1, 64
VERSION = 1
WIDTH_BITS = {1: 0, 2: 1, 4: 2, 8: 3}           # name-length field width -> flags bits 0-1
F_ORDER, F_TYPE, F_CHARSET = 0x04, 0x08, 0x10


@dataclass(frozen=True, slots=True)
class Link:
    name: str
    link_type: int
    address: int | None = None        # hard
    target: str | None = None         # soft: path; external: object path in the other file
    filename: str | None = None       # external
    creation_order: int | None = None   # None: the field is absent
    charset: int | None = None        # name character set (1 = UTF-8); None: the field is absent
    name_width: int = 0               # bytes of the name-length field; 0: the smallest that fits
    hard_type_stored: bool = False    # a hard link whose (optional) type field is stored anyway
    external_flags: int = 0           # external: the byte before the strings (version << 4 | flags)
    value: bytes = b""                # user-defined: the link's data as stored

    @property
    def kind(self) -> str:
        return {HARD: "hard", SOFT: "soft", EXTERNAL: "external"}.get(self.link_type, "user-defined")


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _raw(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def decode(c: Reader) -> Link:
    version, flags = c.fields("BB")
    if version != VERSION:
        raise FormatError(f"link message version {version}")
    ltype = c.u8() if flags & F_TYPE else HARD
    order = c.u64() if flags & F_ORDER else None
    charset = c.u8() if flags & F_CHARSET else None  # a label: C programs write UTF-8 under ASCII
    width = 1 << (flags & 0x03)
    nlen = c.uint(width)
    if nlen == 0:
        raise FormatError("link message: empty link name")
    name = _text(c.bytes(nlen))
    common = dict(creation_order=order, charset=charset, name_width=width)
    if ltype == HARD:
        return Link(name, ltype, address=c.offset(), hard_type_stored=bool(flags & F_TYPE), **common)
    value = c.bytes(c.u16())
    if ltype == SOFT:
        return Link(name, ltype, target=_text(value), **common)
    if ltype == EXTERNAL:
        parts = value[1:].split(b"\0")
        if len(parts) < 2:
            raise FormatError(f"link {name!r}: malformed external link value")
        return Link(name, ltype, target=_text(parts[1]), filename=_text(parts[0]),
                    external_flags=value[0], **common)
    return Link(name, ltype, value=value, **common)


def encode(w: Writer, link: Link) -> None:
    name = _raw(link.name)
    width = link.name_width or next(n for n in WIDTH_BITS if len(name) < 1 << (8 * n))
    if not name or len(name) >= 1 << (8 * width):
        raise ValueError(f"link name of {len(name)} bytes in a {width}-byte length field")
    stored_type = link.link_type != HARD or link.hard_type_stored
    flags = (WIDTH_BITS[width] | (F_TYPE if stored_type else 0) | (F_ORDER if link.creation_order is not None else 0)
             | (F_CHARSET if link.charset is not None else 0))
    w.fields("BB", VERSION, flags)
    if stored_type:
        w.u8(link.link_type)
    if link.creation_order is not None:
        w.u64(link.creation_order)
    if link.charset is not None:
        w.u8(link.charset)
    w.uint(len(name), width)
    w.bytes(name)
    if link.link_type == HARD:
        w.offset(link.address)
        return
    if link.link_type == SOFT:
        value = _raw(link.target or "")
    elif link.link_type == EXTERNAL:
        value = bytes([link.external_flags]) + _raw(link.filename or "") + b"\0" + _raw(link.target or "") + b"\0"
    else:
        value = link.value
    w.u16(len(value))
    w.bytes(value)
