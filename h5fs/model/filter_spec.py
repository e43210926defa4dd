"""Filter specifications (`-o compression=gzip:4,shuffle`, `h5fs create --filters ...`) and the
filter pipeline message libhdf5 writes for them.

Syntax: `none`, or a comma-separated list of
    shuffle                        byte shuffle (filter 2)
    gzip[:LEVEL] (or deflate)      deflate, level 0-9, default 4 (h5py's default)
    lzf                            LZF (32000, h5py's filter)
    zstd[:LEVEL]                   Zstandard (32015), level 1-22, default 3
    lz4[:BLOCK]                    LZ4 (32004), block size in bytes, 0 (default) for the plugin's 1 GiB
    bzip2[:LEVEL]                  bzip2 (307), block size 1-9, default 9
    blosc[:CNAME[:LEVEL[:SHUFFLE]]] Blosc (32001): blosclz, lz4 (default), lz4hc, snappy, zlib, zstd;
                                   level 0-9, default 5; noshuffle, shuffle (default), bitshuffle
    bitshuffle[:CNAME[:LEVEL]]     bitshuffle (32008): lz4 (default), zstd (level 1-22, default 3), none
    fletcher32                     checksum (filter 3)
at most one of them a compressor (gzip, lzf, zstd, lz4, bzip2, blosc, bitshuffle). Whatever order
they are written in, the pipeline is h5py's: shuffle, the compressor, fletcher32 (a checksum must
see the stored bytes; a shuffle only helps a compressor that comes after it).

Sparse datasets (`h5fs create --sparse --filters ...`) give each section of their structured
chunks a list of its own: `values=LIST,selection=LIST` (either may be left out), each LIST in the
syntax above; `values=gzip:4,shuffle,selection=gzip:1` reads as values: shuffle and gzip:4, the
selection gzip:1. A bare list is the values' pipeline. The selection section is bytes (element
size 1); a client datum that depends on the chunk takes the chunk's dense size.

Each filter is written as h5py + hdf5plugin write it: optional (flag 1), except fletcher32
(mandatory); the client data their "set local" callbacks complete from the datatype and the
chunk (shuffle's and bitshuffle's element size, LZF's and Blosc's chunk bytes, Blosc's type size,
bitshuffle's version numbers); the names the filters register (stored for every filter in
version 1 pipelines, for filter ids >= 256 in version 2).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidWrite
from ..format.messages.datatype import Array, Datatype
from ..format.messages.filter_pipeline import FLAG_OPTIONAL, NAMED_IDS, FilterPipeline, FilterSpec

DEFLATE, SHUFFLE, FLETCHER32, BZIP2 = 1, 2, 3, 307
LZF, BLOSC, LZ4, BITSHUFFLE, ZSTD = 32000, 32001, 32004, 32008, 32015

_PLUGIN_NAMES = "see https://github.com/HDFGroup/hdf5_plugins/blob/master/docs/RegisteredFilterPlugins.md"
# the names the filters register (what libhdf5 stores in the pipeline message)
NAMES = {DEFLATE: "deflate", SHUFFLE: "shuffle", FLETCHER32: "fletcher32", BZIP2: "bzip2", LZF: "lzf",
         BLOSC: "blosc", LZ4: f"HDF5 lz4 filter; {_PLUGIN_NAMES}", ZSTD: f"HDF5 zstd filter; {_PLUGIN_NAMES}",
         BITSHUFFLE: "bitshuffle; see https://github.com/kiyo-masui/bitshuffle"}

LZF_VERSIONS = (4, 0x0105)        # h5py's lzf_filter.c: filter version, liblzf version
BLOSC_VERSIONS = (2, 2)           # hdf5-blosc: filter version, Blosc format version
BITSHUFFLE_VERSIONS = (0, 4)      # what hdf5plugin's bitshuffle stores as its major, minor version
BLOSC_MAX_TYPESIZE = 255          # hdf5-blosc stores a type size of 1 past this

# codes hdf5-blosc and bitshuffle take in their client data
_BLOSC_CNAMES = {n: i for i, n in enumerate(("blosclz", "lz4", "lz4hc", "snappy", "zlib", "zstd"))}
_BLOSC_SHUFFLES = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
_BITSHUFFLE_CNAMES = {"none": 0, "lz4": 2, "zstd": 3}
# parameters each filter name takes at most
ARITY = {"shuffle": 0, "fletcher32": 0, "lzf": 0, "gzip": 1, "deflate": 1, "zstd": 1, "lz4": 1, "bzip2": 1,
          "blosc": 3, "bitshuffle": 2}


class FilterSpecError(InvalidWrite, ValueError):
    """A filter specification that does not parse or that h5fs cannot write."""


@dataclass(frozen=True, slots=True)
class Filter:
    """One requested filter: its id and the client data the user gives (before set-local)."""

    id: int
    options: tuple[int, ...] = ()

    @property
    def stage(self) -> int:
        """Its place in h5py's pipeline order: 0 shuffle, 1 compressor, 2 fletcher32."""
        return 0 if self.id == SHUFFLE else 2 if self.id == FLETCHER32 else 1


def _int(text: str, lo: int, hi: int, what: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise FilterSpecError(f"{what}: {text!r} is not an integer") from None
    if not lo <= v <= hi:
        raise FilterSpecError(f"{what}: {v} outside {lo}..{hi}")
    return v


def _choice(text: str, choices: dict[str, int], what: str) -> int:
    if text not in choices:
        raise FilterSpecError(f"{what}: {text!r} is not one of {', '.join(choices)}")
    return choices[text]


def _level(args: list[str], i: int, default: int, lo: int, hi: int, what: str) -> int:
    return _int(args[i], lo, hi, what) if len(args) > i else default


def _parse_one(item: str) -> Filter:
    name, *args = item.split(":")
    if name not in ARITY:
        raise FilterSpecError(f"unknown filter {name!r} (known: none, {', '.join(ARITY)})")
    if len(args) > ARITY[name]:
        raise FilterSpecError(f"{name}: at most {ARITY[name]} parameter(s), got {item!r}")
    if name in ("shuffle", "fletcher32", "lzf"):
        return Filter({"shuffle": SHUFFLE, "fletcher32": FLETCHER32, "lzf": LZF}[name])
    if name in ("gzip", "deflate"):
        return Filter(DEFLATE, (_level(args, 0, 4, 0, 9, "gzip level"),))
    if name == "zstd":
        return Filter(ZSTD, (_level(args, 0, 3, 1, 22, "zstd level"),))
    if name == "lz4":
        return Filter(LZ4, (_level(args, 0, 0, 0, 0x7E000000, "lz4 block size"),))
    if name == "bzip2":
        return Filter(BZIP2, (_level(args, 0, 9, 1, 9, "bzip2 level"),))
    if name == "blosc":
        cname = _choice(args[0], _BLOSC_CNAMES, "blosc compressor") if args else 1
        shuffle = _choice(args[2], _BLOSC_SHUFFLES, "blosc shuffle") if len(args) > 2 else 1
        return Filter(BLOSC, (0, 0, 0, 0, _level(args, 1, 5, 0, 9, "blosc level"), shuffle, cname))
    comp = _choice(args[0], _BITSHUFFLE_CNAMES, "bitshuffle compressor") if args else 2
    if comp != 3 and len(args) > 1:
        raise FilterSpecError(f"bitshuffle: only zstd takes a level, got {item!r}")
    return Filter(BITSHUFFLE, (0, comp, _level(args, 1, 3, 1, 22, "bitshuffle zstd level")) if comp == 3 else (0, comp))


def parse_filters(text: str) -> tuple[Filter, ...]:
    """The filters `text` asks for, in pipeline order (empty for `none`)."""
    items = [s.strip().lower() for s in text.split(",")]
    if items == ["none"]:
        return ()
    if "" in items:
        raise FilterSpecError(f"empty item in filter specification {text!r} (no filters: 'none')")
    filters = [_parse_one(item) for item in items]
    stages = [f.stage for f in filters]
    for stage, what in ((0, "shuffle"), (1, "compressor"), (2, "fletcher32")):
        if stages.count(stage) > 1:
            raise FilterSpecError(f"more than one {what} in {text!r}")
    return tuple(sorted(filters, key=lambda f: f.stage))


SECTION_NAMES = {"selection": 0, "values": 1}


def parse_section_filters(text: str) -> dict[int, tuple[Filter, ...]]:
    """The sections' filters `text` asks for (section number -> filters in pipeline order)."""
    if text.strip().lower() in ("", "none"):
        return {}
    lists: dict[int, list[str]] = {}
    current = SECTION_NAMES["values"]
    for item in text.split(","):
        name, eq, rest = item.partition("=")
        if eq:
            key = name.strip().lower()
            if key not in SECTION_NAMES:
                raise FilterSpecError(f"unknown section {key!r} in {text!r} (values, selection)")
            current, item = SECTION_NAMES[key], rest
            if current in lists:
                raise FilterSpecError(f"section {key!r} given twice in {text!r}")
        lists.setdefault(current, []).append(item)
    return {k: f for k, items in sorted(lists.items()) if (f := parse_filters(",".join(items)))}


def section_pipeline(sections: dict[int, tuple[Filter, ...]], datatype: Datatype,
                     chunks: tuple[int, ...]) -> FilterPipeline | None:
    """The version-3 filter pipeline message of a sparse dataset, None without filters."""
    if not sections:
        return None
    chunk_bytes = datatype.size
    for d in chunks:
        chunk_bytes *= d
    byte = Datatype(1, 1)   # the selection section: one-byte elements
    return FilterPipeline((), 3, tuple((k, _specs(f, datatype if k else byte, chunk_bytes, 2))
                                       for k, f in sorted(sections.items())))


def pipeline(filters: tuple[Filter, ...], datatype: Datatype, chunks: tuple[int, ...], version: int) -> FilterPipeline:
    """The filter pipeline message (`version` 1 or 2) libhdf5 writes for `filters` on a dataset
    of `datatype` in chunks of `chunks` elements."""
    chunk_bytes = datatype.size
    for d in chunks:
        chunk_bytes *= d
    return FilterPipeline(_specs(filters, datatype, chunk_bytes, version), version)


def _specs(filters: tuple[Filter, ...], datatype: Datatype, chunk_bytes: int, version: int) -> tuple[FilterSpec, ...]:
    specs = []
    for f in filters:
        cd = _set_local(f, datatype, chunk_bytes)
        name = NAMES[f.id] if version == 1 or f.id >= NAMED_IDS else ""
        specs.append(FilterSpec(f.id, 0 if f.id == FLETCHER32 else FLAG_OPTIONAL, name, cd))
    return tuple(specs)


def _set_local(f: Filter, datatype: Datatype, chunk_bytes: int) -> tuple[int, ...]:
    """The client data after the filter's "set local" callback."""
    if f.id == SHUFFLE:
        return (datatype.size,)
    if f.id == LZF:
        return (*LZF_VERSIONS, chunk_bytes)
    if f.id == BLOSC:
        typesize = datatype.base.size if isinstance(datatype, Array) else datatype.size
        typesize = typesize if typesize <= BLOSC_MAX_TYPESIZE else 1
        return (*BLOSC_VERSIONS, typesize, chunk_bytes, *f.options[4:])
    if f.id == BITSHUFFLE:
        return (*BITSHUFFLE_VERSIONS, datatype.size, *f.options)
    return f.options
