"""Data Layout message (0x0008), versions 1-5.

Version 5 means two different things (GUIDE.md section 5): libhdf5 2.0 writes version 5 with
class 2 (chunked, as version 4 but filtered chunk sizes in the index are `size of lengths` wide);
the structured-chunk spec uses version 5 with class 4. The pair (version, class) decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError, Unsupported
from ..codec import Reader

COMPACT, CONTIGUOUS, CHUNKED, VIRTUAL, STRUCTURED = 0, 1, 2, 3, 4
CLASS_NAMES = {COMPACT: "compact", CONTIGUOUS: "contiguous", CHUNKED: "chunked", VIRTUAL: "virtual",
               STRUCTURED: "structured-chunk"}

# Chunk index types (Appendix C); BTREE_V1 is what versions 1-3 always use.
BTREE_V1, SINGLE, IMPLICIT, FIXED_ARRAY, EXTENSIBLE_ARRAY, BTREE_V2 = 0, 1, 2, 3, 4, 5
INDEX_NAMES = {BTREE_V1: "btree-v1", SINGLE: "single", IMPLICIT: "implicit", FIXED_ARRAY: "fixed-array",
               EXTENSIBLE_ARRAY: "extensible-array", BTREE_V2: "btree-v2"}

# Layout flags (version 4+)
DONT_FILTER_PARTIAL_BOUND_CHUNKS = 0x01
SINGLE_INDEX_WITH_FILTER = 0x02

MAX_RANK = 32


@dataclass(frozen=True)
class ChunkIndexInfo:
    """Index parameters for the chunked class; fields unused by a type stay 0."""

    index_type: int
    address: int | None
    # single chunk, filtered
    filtered_size: int = 0
    filter_mask: int = 0
    # fixed array / extensible array
    page_bits: int = 0
    max_bits: int = 0
    index_elements: int = 0
    min_pointers: int = 0
    min_elements: int = 0
    # version 2 B-tree
    node_size: int = 0
    split_percent: int = 0
    merge_percent: int = 0


@dataclass(frozen=True)
class DataLayout:
    version: int
    layout_class: int
    address: int | None = None        # contiguous data
    size: int = 0                     # contiguous allocated size
    compact_data: bytes = b""
    chunk_dims: tuple[int, ...] = ()  # chunk shape in elements (without the element-size entry)
    element_size: int = 0             # the trailing element-size entry of chunked layouts
    flags: int = 0
    index: ChunkIndexInfo | None = None
    vds_heap_address: int | None = None
    vds_heap_index: int = 0

    @property
    def class_name(self) -> str:
        return CLASS_NAMES.get(self.layout_class, f"class {self.layout_class}")

    @property
    def wide_chunk_sizes(self) -> bool:
        """libhdf5 2.0's v5 chunked layout stores filtered chunk sizes `size of lengths` wide."""
        return self.version >= 5


def decode(c: Reader) -> DataLayout:
    version = c.u8()
    if version in (1, 2):
        return _decode_v1_v2(c, version)
    if version not in (3, 4, 5):
        raise Unsupported(f"data layout message version {version}")
    cls = c.u8()
    if cls == COMPACT:
        size = c.u16()
        return DataLayout(version, cls, compact_data=c.bytes(size))
    if cls == CONTIGUOUS:
        addr = c.offset()
        return DataLayout(version, cls, address=addr, size=c.length())
    if cls == CHUNKED and version == 3:
        ndims = c.u8()
        _check_rank(ndims)
        addr = c.offset()
        dims = tuple(c.u32() for _ in range(ndims))
        _check_chunk_dims(dims)
        return DataLayout(version, cls, chunk_dims=dims[:-1], element_size=dims[-1],
                          index=ChunkIndexInfo(BTREE_V1, addr))
    if cls == CHUNKED:
        return _decode_chunked_v4(c, version)
    if cls == VIRTUAL and version >= 4:
        addr = c.offset()
        return DataLayout(version, cls, vds_heap_address=addr, vds_heap_index=c.u32())
    if cls == STRUCTURED and version >= 5:
        raise Unsupported("structured-chunk layout (layout class 4)")
    raise FormatError(f"data layout version {version}: unknown layout class {cls}")


def _check_rank(ndims: int) -> None:
    if not 2 <= ndims <= MAX_RANK + 1:
        raise FormatError(f"data layout: chunk dimensionality {ndims} out of range")


def _check_chunk_dims(dims: tuple[int, ...]) -> None:
    """Chunk dimensions and the trailing element size are all >= 1 (a zero divides by zero)."""
    if any(d == 0 for d in dims):
        raise FormatError(f"data layout: zero chunk dimension in {dims}")


def _decode_v1_v2(c: Reader, version: int) -> DataLayout:
    ndims = c.u8()
    cls = c.u8()
    c.skip(5)
    if not 1 <= ndims <= MAX_RANK + 1:
        raise FormatError(f"data layout v{version}: dimensionality {ndims} out of range")
    addr = c.offset() if cls != COMPACT else None
    dims = tuple(c.u32() for _ in range(ndims))
    if cls == CHUNKED:
        _check_rank(ndims)
        _check_chunk_dims(dims)
        return DataLayout(version, cls, chunk_dims=dims[:-1], element_size=dims[-1],
                          index=ChunkIndexInfo(BTREE_V1, addr))
    if cls == CONTIGUOUS:
        # versions 1-2 store no size: the dataset's extent decides it (filled in by the model)
        return DataLayout(version, cls, address=addr, size=-1)
    if cls == COMPACT:
        size = c.u32()
        return DataLayout(version, cls, compact_data=c.bytes(size))
    raise FormatError(f"data layout v{version}: unknown layout class {cls}")


def _decode_chunked_v4(c: Reader, version: int) -> DataLayout:
    flags = c.u8()
    ndims = c.u8()
    _check_rank(ndims)
    width = c.u8()
    if not 1 <= width <= 8:
        raise FormatError(f"data layout: dimension size width {width} out of range")
    dims = tuple(c.uint(width) for _ in range(ndims))
    itype = c.u8()
    info: dict[str, int] = {}
    if itype == SINGLE:
        if flags & SINGLE_INDEX_WITH_FILTER:
            info = {"filtered_size": c.length(), "filter_mask": c.u32()}
    elif itype == IMPLICIT:
        pass
    elif itype == FIXED_ARRAY:
        info = {"page_bits": c.u8()}
    elif itype == EXTENSIBLE_ARRAY:
        info = {"max_bits": c.u8(), "index_elements": c.u8(), "min_pointers": c.u8(),
                "min_elements": c.u8(), "page_bits": c.u8()}
    elif itype == BTREE_V2:
        info = {"node_size": c.u32(), "split_percent": c.u8(), "merge_percent": c.u8()}
    else:
        raise FormatError(f"data layout: unknown chunk index type {itype}")
    addr = c.offset()
    _check_chunk_dims(dims)
    return DataLayout(version, CHUNKED, chunk_dims=dims[:-1], element_size=dims[-1], flags=flags,
                      index=ChunkIndexInfo(itype, addr, **info))
