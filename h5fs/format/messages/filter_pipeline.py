"""Filter Pipeline message (0x000B), versions 1 and 2."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError, Unsupported
from ..codec import Reader

MAX_FILTERS = 32
MAX_CLIENT_VALUES = 4096
FLAG_OPTIONAL = 0x0001

KNOWN_NAMES = {1: "deflate", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit", 6: "scaleoffset",
               307: "bzip2", 32000: "lzf", 32001: "blosc", 32004: "lz4", 32008: "bitshuffle",
               32015: "zstd", 32026: "blosc2"}


@dataclass(frozen=True)
class FilterSpec:
    id: int
    flags: int
    name: str
    client_data: tuple[int, ...]

    @property
    def optional(self) -> bool:
        return bool(self.flags & FLAG_OPTIONAL)

    @property
    def label(self) -> str:
        """Human name: the registered name if known, else the stored one, else the id."""
        return KNOWN_NAMES.get(self.id) or self.name or f"filter {self.id}"


@dataclass(frozen=True)
class FilterPipeline:
    filters: tuple[FilterSpec, ...]


def decode(c: Reader) -> FilterPipeline:
    version = c.u8()
    nfilters = c.u8()
    if version not in (1, 2):
        raise Unsupported(f"filter pipeline message version {version}")
    if nfilters > MAX_FILTERS:
        raise FormatError(f"filter pipeline: {nfilters} filters (at most {MAX_FILTERS})")
    if version == 1:
        c.skip(6)
    out = []
    for _ in range(nfilters):
        fid = c.u16()
        name_len = c.u16() if (version == 1 or fid >= 256) else 0
        flags = c.u16()
        ncd = c.u16()
        if ncd > MAX_CLIENT_VALUES:
            raise FormatError(f"filter pipeline: {ncd} client data values")
        name = ""
        if name_len:
            raw = c.bytes(name_len)
            name = raw.split(b"\0", 1)[0].decode("ascii", "replace")
        cd = tuple(c.u32() for _ in range(ncd))
        if version == 1 and ncd % 2:
            c.skip(4)
        out.append(FilterSpec(fid, flags, name, cd))
    return FilterPipeline(tuple(out))
