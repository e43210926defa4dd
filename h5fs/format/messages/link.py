"""Link message (0x0006): hard, soft, external and user-defined links."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError
from ..codec import Reader

HARD, SOFT, EXTERNAL = 0, 1, 64


@dataclass(frozen=True)
class Link:
    name: str
    link_type: int
    address: int | None = None        # hard
    target: str | None = None         # soft: path; external: object path in the other file
    filename: str | None = None       # external
    creation_order: int | None = None

    @property
    def kind(self) -> str:
        return {HARD: "hard", SOFT: "soft", EXTERNAL: "external"}.get(self.link_type, "user-defined")


def decode(c: Reader) -> Link:
    version = c.u8()
    if version != 1:
        raise FormatError(f"link message version {version}")
    flags = c.u8()
    ltype = c.u8() if flags & 0x08 else HARD
    order = c.u64() if flags & 0x04 else None
    if flags & 0x10:
        c.u8()  # character set: only a label, C programs write UTF-8 names under the ASCII default
    nlen = c.uint(1 << (flags & 0x03))
    if nlen == 0:
        raise FormatError("link message: empty link name")
    name = c.bytes(nlen).decode("utf-8", "surrogateescape")
    if ltype == HARD:
        return Link(name, ltype, address=c.offset(), creation_order=order)
    vlen = c.u16()
    value = c.bytes(vlen)
    if ltype == SOFT:
        return Link(name, ltype, target=value.decode("utf-8", "surrogateescape"), creation_order=order)
    if ltype == EXTERNAL:
        parts = value[1:].split(b"\0")
        if len(parts) < 2:
            raise FormatError(f"link {name!r}: malformed external link value")
        return Link(name, ltype, target=parts[1].decode("utf-8", "surrogateescape"),
                    filename=parts[0].decode("utf-8", "surrogateescape"), creation_order=order)
    return Link(name, ltype, creation_order=order)
