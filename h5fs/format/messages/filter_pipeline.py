"""Filter Pipeline message (0x000B), versions 1 and 2: decode and encode.

Version 1 stores every filter's name, NUL-padded to a multiple of 8 bytes, and pads odd client
data counts with 4 bytes; version 2 stores names (NUL-terminated, unpadded) only for filter ids
>= 256. `FilterSpec.name_length` is None when the name field has the length libhdf5 gives it
(0 for no name). Reserved bytes, padding and bytes after a name's NUL are written as zeros.
Names are ASCII by the spec; other bytes decode as Latin-1, so they survive a round trip.

Version 3 (spec 3.0, the RFC's table 17) gives each section of a structured chunk its own
pipeline: number of filtered sections (1 byte), then per section its number (1), its number of
filters (1), the size of its filter description list (2) and the list, in version 2's form.
`FilterPipeline.filters` is empty for it (no pipeline applies to a whole chunk); `sections`
holds the pipelines. (The prototype keeps these pipelines in a message of its own, whose type
number it does not publish: a dataset filtered that way reads as unsupported.)
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError, Unsupported
from ..codec import Reader, Writer

MAX_FILTERS = 32
MAX_CLIENT_VALUES = 4096
FLAG_OPTIONAL = 0x0001
NAMED_IDS = 256   # version 2 stores names for filter ids from here on

KNOWN_NAMES = {1: "deflate", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit", 6: "scaleoffset",
               307: "bzip2", 32000: "lzf", 32001: "blosc", 32004: "lz4", 32008: "bitshuffle",
               32015: "zstd", 32026: "blosc2"}


@dataclass(frozen=True, slots=True)
class FilterSpec:
    id: int
    flags: int
    name: str
    client_data: tuple[int, ...]
    name_length: int | None = None   # the stored Name Length when it is not libhdf5's

    @property
    def optional(self) -> bool:
        return bool(self.flags & FLAG_OPTIONAL)

    @property
    def label(self) -> str:
        """Human name: the registered name if known, else the stored one, else the id."""
        return KNOWN_NAMES.get(self.id) or self.name or f"filter {self.id}"


@dataclass(frozen=True, slots=True)
class FilterPipeline:
    filters: tuple[FilterSpec, ...]
    version: int = 2
    sections: tuple[tuple[int, tuple[FilterSpec, ...]], ...] = ()   # version 3: (section, pipeline)

    def section(self, number: int) -> tuple[FilterSpec, ...]:
        """The pipeline of a structured chunk's section (empty: not filtered)."""
        return next((f for n, f in self.sections if n == number), ())


def _name_length(version: int, name: bytes) -> int:
    """libhdf5's Name Length: the name and its NUL, padded to a multiple of 8 in version 1."""
    if not name:
        return 0
    return (len(name) + 8) & ~7 if version == 1 else len(name) + 1


def decode(c: Reader) -> FilterPipeline:
    version, n = c.fields("BB")
    if version == 3:
        return _decode_v3(c, n)
    if version not in (1, 2):
        raise Unsupported(f"filter pipeline message version {version}")
    if n > MAX_FILTERS:
        raise FormatError(f"filter pipeline: {n} filters (at most {MAX_FILTERS})")
    if version == 1:
        c.skip(6)
    return FilterPipeline(tuple(_decode_filter(c, version) for _ in range(n)), version)


def _decode_v3(c: Reader, nsections: int) -> FilterPipeline:
    sections, total = [], 0
    for _ in range(nsections):
        number, n, size = c.fields("BBH")
        total += n
        if total > MAX_FILTERS:
            raise FormatError(f"filter pipeline: {total} filters (at most {MAX_FILTERS})")
        if any(number == k for k, _ in sections) or size > c.remaining():
            raise FormatError(f"filter pipeline: section {number} listed twice or its {size} bytes overrun")
        body = Reader(c.bytes(size), 0, c.sizes, c.what)
        sections.append((number, tuple(_decode_filter(body, 2) for _ in range(n))))
        if body.remaining():
            raise FormatError(f"filter pipeline: section {number}: {body.remaining()} bytes after its filters")
    return FilterPipeline((), 3, tuple(sections))


def _decode_filter(c: Reader, version: int) -> FilterSpec:
    (fid,) = c.fields("H")
    named = version == 1 or fid >= NAMED_IDS
    name_len, flags, ncd = c.fields("HHH") if named else (0, *c.fields("HH"))
    if ncd > MAX_CLIENT_VALUES:
        raise FormatError(f"filter pipeline: {ncd} client data values")
    name = c.bytes(name_len).split(b"\0", 1)[0] if name_len else b""
    cd = c.fields(f"{ncd}I")
    if version == 1 and ncd % 2:
        c.skip(4)
    stored = name_len if named and name_len != _name_length(version, name) else None
    return FilterSpec(fid, flags, name.decode("latin-1"), cd, stored)


def encode(w: Writer, pipe: FilterPipeline) -> None:
    if pipe.version == 3:
        w.fields("BB", 3, len(pipe.sections))
        for number, filters in pipe.sections:
            body = Writer(w.sizes)
            for f in filters:
                _encode_filter(body, 2, f)
            w.fields("BBH", number, len(filters), len(body.getvalue()))
            w.bytes(body.getvalue())
        return
    if pipe.version not in (1, 2) or len(pipe.filters) > MAX_FILTERS:
        raise ValueError(f"filter pipeline version {pipe.version} of {len(pipe.filters)} filters")
    w.fields("BB", pipe.version, len(pipe.filters))
    if pipe.version == 1:
        w.zeros(6)
    for f in pipe.filters:
        _encode_filter(w, pipe.version, f)


def _encode_filter(w: Writer, version: int, f: FilterSpec) -> None:
    name = f.name.encode("latin-1")
    named = version == 1 or f.id >= NAMED_IDS
    n = _name_length(version, name) if f.name_length is None else f.name_length
    if b"\0" in name or (named and n < len(name)) or (not named and (name or f.name_length)):
        raise ValueError(f"filter pipeline v{version}: filter {f.id} name {f.name!r} in {n} bytes")
    if named:
        w.fields("HHHH", f.id, n, f.flags, len(f.client_data))
        w.bytes((name + b"\0")[:n].ljust(n, b"\0"))
    else:
        w.fields("HHH", f.id, f.flags, len(f.client_data))
    w.fields(f"{len(f.client_data)}I", *f.client_data)
    if version == 1 and len(f.client_data) % 2:
        w.zeros(4)
