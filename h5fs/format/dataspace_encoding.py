"""Dataspace descriptions as H5Sencode writes them (spec 3.0 Appendix D.A): dataspace message ID
(1), encode version (0), size of sizes, size of the extent, the dataspace message, then the
selection serialization (format/selection.py).

Section 0 of a sparse structured chunk holds one, in chunk-relative coordinates over an extent of
the chunk's dimensions (the prototype calls H5S_encode). A bare selection serialization, with no
description around it, is read too: its first four bytes are the selection type (0-3), so its
third byte is 0 where a description's is the size of sizes (2, 4 or 8).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import FormatError, Unsupported
from . import selection as SEL
from .codec import Reader, Sizes, Writer
from .messages import dataspace as D

DATASPACE_ID = 1
ENCODE_VERSION = 0
SIZE_OF_SIZES = 8     # what we write (H5S_encode: the default file access's size of lengths)


@dataclass(frozen=True, slots=True)
class EncodedDataspace:
    extent: D.Dataspace | None     # None: a bare selection
    selection: SEL.Selection


def decode(buf: bytes | memoryview, what: str) -> EncodedDataspace:
    """Decode a whole buffer (a description or a bare selection); trailing bytes are an error."""
    view = memoryview(buf)
    if len(view) >= 3 and view[0] == DATASPACE_ID and view[2] in (2, 4, 8):
        c = Reader(view, 0, what=what)
        _, version, width, extent_size = c.fields("BBBI")
        if version != ENCODE_VERSION:
            raise Unsupported(f"{what}: dataspace encoding version {version}")
        if extent_size > c.remaining():
            raise FormatError(f"{what}: extent of {extent_size} bytes in {c.remaining()}")
        extent = D.decode(Reader(c.bytes(extent_size), 0, Sizes(8, width), what))
        sel = SEL.decode(c, what)
    else:
        c = Reader(view, 0, what=what)
        extent, sel = None, SEL.decode(c, what)
    if c.remaining():
        raise FormatError(f"{what}: {c.remaining()} bytes after the selection")
    return EncodedDataspace(extent, sel)


def encode(dims: tuple[int, ...], sel: SEL.Selection) -> bytes:
    """The H5Sencode description of `sel` over a simple extent of `dims` (version 2, no maximum
    dimensions: the smallest extent libhdf5 reads back)."""
    sizes = Sizes(8, SIZE_OF_SIZES)
    ext = Writer(sizes)
    D.encode(ext, D.Dataspace(D.SIMPLE, dims, dims, version=2, has_maxdims=False))
    w = Writer(sizes)
    w.fields("BBBI", DATASPACE_ID, ENCODE_VERSION, SIZE_OF_SIZES, len(ext.getvalue()))
    w.bytes(ext.getvalue())
    SEL.encode(w, sel)
    return w.getvalue()
