"""Minimal, independent decoding of the names in link and attribute message bodies, so tests of
the heaps and B-trees do not depend on the engine's own message decoders (a helper, not a test)."""

from __future__ import annotations


def link_name(body: bytes) -> str:
    """The name in a link message."""
    flags = body[1]
    pos = 2 + (1 if flags & 0x08 else 0) + (8 if flags & 0x04 else 0) + (1 if flags & 0x10 else 0)
    width = 1 << (flags & 3)
    n = int.from_bytes(body[pos:pos + width], "little")
    pos += width
    return body[pos:pos + n].decode()


def attr_name(body: bytes) -> str:
    """The name in an attribute message, versions 1-3."""
    version = body[0]
    name_size = int.from_bytes(body[2:4], "little")
    pos = 8 + (1 if version == 3 else 0)
    return body[pos:pos + name_size].rstrip(b"\0").decode()
