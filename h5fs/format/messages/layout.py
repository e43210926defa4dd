"""Data Layout message (0x0008), versions 1-5: decode and encode.

Version 5 means two different things (GUIDE.md section 5): libhdf5 2.0 writes version 5 with
class 2 (chunked, as version 4 but filtered chunk sizes in the index are `size of lengths` wide);
the structured-chunk spec uses version 5 with class 4. The pair (version, class) decides.

What a writer derives is None in the record when the message holds libhdf5's value: the width of
the chunk dimension sizes (versions 4-5; libhdf5 2.x refuses wider ones). Versions 1-2 store
dimension sizes for contiguous and compact data too (readers skip them: the dataspace decides);
they are kept in `dims`. Reserved bytes (5 in versions 1-2) are written as zeros.

Structured chunk storage (version 5, class 4; spec 3.0 IV.A.2.i and the RFC's table 13): property
version (0), structured chunk type (2 bytes), then as the chunked class of version 4 (flags,
dimensionality, dimension size width, chunk dimensions with the trailing element size), the
structured chunk composition, the chunk index type, its information and the address. Decisions:
- The composition comes right after the dimension sizes, as the RFC moved it (revision 25: the
  single-chunk information needs the number of sections) and the prototype writes it; the spec
  3.0 text puts it last, and a message in that order is read too (the two are told apart by
  which one decodes to the message's end).
- The single-chunk information is the stored chunk size, then the chunk's section metadata
  (format/structured_chunk.py; the filtered form when SINGLE_INDEX_WITH_FILTER is set). Its size
  field is as wide as a filtered chunk size in the other indexes; reading, the width is whatever
  the message leaves for it.
- Implicit and version 1 B-tree indexes cannot hold structured chunks: refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError, Unsupported
from ..btree_v2 import chunk_size_width
from ..codec import Reader, Sizes, Writer, as_uint, uint_code, uint_field
from ..structured_chunk import MAX_SECTIONS, Composition, SectionMeta, decode_composition, encode_composition, meta_fields, \
    meta_from_fields, meta_layout

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

# Index type information after the chunk dimensions (versions 4-5), by index type: struct spec
# and the ChunkIndexInfo fields it holds (single chunk: only when SINGLE_INDEX_WITH_FILTER).
_INDEX_INFO: dict[int, tuple[str, tuple[str, ...]]] = {
    SINGLE: ("LI", ("filtered_size", "filter_mask")),
    IMPLICIT: ("", ()),
    FIXED_ARRAY: ("B", ("page_bits",)),
    EXTENSIBLE_ARRAY: ("BBBBB", ("max_bits", "index_elements", "min_pointers", "min_elements", "page_bits")),
    BTREE_V2: ("IBB", ("node_size", "split_percent", "merge_percent")),
}


@dataclass(frozen=True, slots=True)
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
    # single structured chunk: its section metadata (filtered_size holds its stored size)
    sections: SectionMeta | None = None


@dataclass(frozen=True, slots=True)
class DataLayout:
    version: int
    layout_class: int
    address: int | None = None        # contiguous data
    size: int = 0                     # contiguous allocated size (versions 1-2: -1, not stored)
    compact_data: bytes = b""
    chunk_dims: tuple[int, ...] = ()  # chunk shape in elements (without the element-size entry)
    element_size: int = 0             # the trailing element-size entry of chunked layouts
    flags: int = 0
    index: ChunkIndexInfo | None = None
    vds_heap_address: int | None = None
    vds_heap_index: int = 0
    dims: tuple[int, ...] = ()        # versions 1-2, contiguous and compact: the stored dimension sizes
    dim_width: int | None = None      # versions 4-5, chunked: bytes per dimension size; None: minimal
    # structured chunk storage (class 4)
    composition: Composition | None = None
    structured_type: int = 0
    spec_order: bool = False          # the composition after the address (spec 3.0 text), not before

    @property
    def class_name(self) -> str:
        return CLASS_NAMES.get(self.layout_class, f"class {self.layout_class}")

    @property
    def wide_chunk_sizes(self) -> bool:
        """libhdf5 2.0's v5 chunked layout stores filtered chunk sizes `size of lengths` wide."""
        return self.version >= 5 and self.layout_class == CHUNKED

    @property
    def chunked(self) -> bool:
        """Chunked storage of either kind: plain or structured chunks."""
        return self.layout_class in (CHUNKED, STRUCTURED)

    @property
    def chunk_nbytes(self) -> int:
        n = self.element_size
        for d in self.chunk_dims:
            n *= d
        return n

    def filtered_size_width(self, sizes: Sizes) -> int:
        """Bytes of a filtered chunk's size in this layout's index records (v2 B-tree, arrays)."""
        return chunk_size_width(self.chunk_nbytes, sizes, self.wide_chunk_sizes)

    @property
    def encoded_dim_width(self) -> int:
        """Bytes per chunk dimension size: 4 before version 4, then `dim_width` or libhdf5's minimal."""
        if self.version < 4:
            return 4
        if self.dim_width is not None:
            return self.dim_width
        return minimal_dim_width((*self.chunk_dims, self.element_size))


def minimal_dim_width(dims: tuple[int, ...]) -> int:
    """Bytes libhdf5 encodes chunk dimension sizes in: enough for the largest (at least 1)."""
    return max(1, (max(dims, default=0).bit_length() + 7) // 8)


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
        addr, size = c.fields("OL")
        return DataLayout(version, cls, address=c.sizes.address(addr), size=size)
    if cls == CHUNKED and version == 3:
        ndims = c.u8()
        _check_rank(ndims)
        (addr,) = c.fields("O")
        dims = c.fields(f"{ndims}I")
        _check_chunk_dims(dims)
        return DataLayout(version, cls, chunk_dims=dims[:-1], element_size=dims[-1],
                          index=ChunkIndexInfo(BTREE_V1, c.sizes.address(addr)))
    if cls == CHUNKED:
        return _decode_chunked_v4(c, version)
    if cls == VIRTUAL and version >= 4:
        addr, index = c.fields("OI")
        return DataLayout(version, cls, vds_heap_address=c.sizes.address(addr), vds_heap_index=index)
    if cls == STRUCTURED and version >= 5:
        return _decode_structured(c, version)
    raise FormatError(f"data layout version {version}: unknown layout class {cls}")


def encode(w: Writer, lay: DataLayout) -> None:
    if lay.version in (1, 2):
        _encode_v1_v2(w, lay)
        return
    w.fields("BB", lay.version, lay.layout_class)
    if lay.layout_class == COMPACT:
        w.u16(len(lay.compact_data))
        w.bytes(lay.compact_data)
    elif lay.layout_class == CONTIGUOUS:
        w.offset(lay.address)
        w.length(lay.size)
    elif lay.layout_class == CHUNKED and lay.version == 3:
        dims = (*lay.chunk_dims, lay.element_size)
        w.u8(len(dims))
        w.offset(_index(lay).address)
        w.fields(f"{len(dims)}I", *dims)
    elif lay.layout_class == CHUNKED and lay.version in (4, 5):
        _encode_chunked_v4(w, lay)
    elif lay.layout_class == VIRTUAL and lay.version in (4, 5):
        w.offset(lay.vds_heap_address)
        w.u32(lay.vds_heap_index)
    elif lay.layout_class == STRUCTURED and lay.version == 5:
        _encode_structured(w, lay)
    else:
        raise ValueError(f"data layout version {lay.version} cannot hold layout class {lay.layout_class}")


def _index(lay: DataLayout) -> ChunkIndexInfo:
    if lay.index is None:
        raise ValueError("data layout: chunked layout without index information")
    return lay.index


def _check_rank(ndims: int) -> None:
    if not 2 <= ndims <= MAX_RANK + 1:
        raise FormatError(f"data layout: chunk dimensionality {ndims} out of range")


def _check_chunk_dims(dims: tuple[int, ...]) -> None:
    """Chunk dimensions and the trailing element size are all >= 1 (a zero divides by zero)."""
    if any(d == 0 for d in dims):
        raise FormatError(f"data layout: zero chunk dimension in {dims}")


def _decode_v1_v2(c: Reader, version: int) -> DataLayout:
    ndims, cls = c.fields("BB5x")
    if not 1 <= ndims <= MAX_RANK + 1:
        raise FormatError(f"data layout v{version}: dimensionality {ndims} out of range")
    addr = c.offset() if cls != COMPACT else None
    dims = c.fields(f"{ndims}I")
    if cls == CHUNKED:
        _check_rank(ndims)
        _check_chunk_dims(dims)
        return DataLayout(version, cls, chunk_dims=dims[:-1], element_size=dims[-1],
                          index=ChunkIndexInfo(BTREE_V1, addr))
    if cls == CONTIGUOUS:
        # versions 1-2 store no size: the dataset's extent decides it (filled in by the model)
        return DataLayout(version, cls, address=addr, size=-1, dims=dims)
    if cls == COMPACT:
        size = c.u32()
        return DataLayout(version, cls, compact_data=c.bytes(size), dims=dims)
    raise FormatError(f"data layout v{version}: unknown layout class {cls}")


def _encode_v1_v2(w: Writer, lay: DataLayout) -> None:
    dims = (*lay.chunk_dims, lay.element_size) if lay.layout_class == CHUNKED else lay.dims
    if lay.layout_class not in (COMPACT, CONTIGUOUS, CHUNKED) or not dims:
        raise ValueError(f"data layout v{lay.version}: layout class {lay.layout_class} with dimensions {dims}")
    w.fields("BBB5x", lay.version, len(dims), lay.layout_class)
    if lay.layout_class != COMPACT:
        w.offset(_index(lay).address if lay.layout_class == CHUNKED else lay.address)
    w.fields(f"{len(dims)}I", *dims)
    if lay.layout_class == COMPACT:
        w.u32(len(lay.compact_data))
        w.bytes(lay.compact_data)


def _decode_chunked_v4(c: Reader, version: int) -> DataLayout:
    flags, ndims = c.fields("BB")
    _check_rank(ndims)
    width = c.u8()
    if not 1 <= width <= 8:
        raise FormatError(f"data layout: dimension size width {width} out of range")
    dims = tuple(map(as_uint, c.fields(uint_code(width) * ndims)))
    itype = c.u8()
    spec, names = _INDEX_INFO.get(itype, (None, ()))
    if spec is None:
        raise FormatError(f"data layout: unknown chunk index type {itype}")
    if itype == SINGLE and not flags & SINGLE_INDEX_WITH_FILTER:
        spec, names = "", ()
    *values, addr = c.fields(spec + "O")
    _check_chunk_dims(dims)
    return DataLayout(version, CHUNKED, chunk_dims=dims[:-1], element_size=dims[-1], flags=flags,
                      index=ChunkIndexInfo(itype, c.sizes.address(addr), **dict(zip(names, values))),
                      dim_width=None if width == minimal_dim_width(dims) else width)


def _encode_chunked_v4(w: Writer, lay: DataLayout) -> None:
    index = _index(lay)
    dims = (*lay.chunk_dims, lay.element_size)
    width = lay.encoded_dim_width
    if index.index_type not in _INDEX_INFO or not 1 <= width <= 8:
        raise ValueError(f"data layout v{lay.version}: index type {index.index_type}, dimension width {width}")
    w.fields("BBB", lay.flags, len(dims), width)
    w.fields(uint_code(width) * len(dims), *(uint_field(d, width) for d in dims))
    w.u8(index.index_type)
    spec, names = _INDEX_INFO[index.index_type]
    if index.index_type == SINGLE and not lay.flags & SINGLE_INDEX_WITH_FILTER:
        spec, names = "", ()
    w.fields(spec + "O", *(getattr(index, n) for n in names), w.sizes.raw_address(index.address))


STRUCTURED_PROPERTY_VERSION = 0
STRUCTURED_INDEXES = (SINGLE, FIXED_ARRAY, EXTENSIBLE_ARRAY, BTREE_V2)


def _decode_structured(c: Reader, version: int) -> DataLayout:
    start = c.pos
    failure: Exception | None = None
    for spec_order in (False, True):
        c.pos = start
        try:
            lay = _decode_structured_in(c, version, spec_order)
        except (FormatError, Unsupported) as exc:
            failure = failure or exc
            continue
        if c.remaining() < 8:   # what is left is the message's padding
            return lay
        failure = failure or FormatError(f"data layout: {c.remaining()} bytes after the structured chunk property")
    raise failure


def _decode_structured_in(c: Reader, version: int, spec_order: bool) -> DataLayout:
    pversion, stype, flags, ndims, width = c.fields("BHBBB")
    if pversion != STRUCTURED_PROPERTY_VERSION:
        raise Unsupported(f"structured chunk storage property version {pversion}")
    _check_rank(ndims)
    if not 1 <= width <= 8:
        raise FormatError(f"data layout: dimension size width {width} out of range")
    dims = tuple(map(as_uint, c.fields(uint_code(width) * ndims)))
    _check_chunk_dims(dims)
    comp = None if spec_order else decode_composition(c, "data layout")
    itype = c.u8()
    if itype not in STRUCTURED_INDEXES:
        raise Unsupported(f"structured chunks in a {INDEX_NAMES.get(itype, f'type {itype}')} chunk index")
    info: dict = {}
    if itype == SINGLE:
        info = _decode_single_info(c, spec_order, comp, bool(flags & SINGLE_INDEX_WITH_FILTER), dims)
    else:
        spec, names = _INDEX_INFO[itype]
        info = dict(zip(names, c.fields(spec)))
    addr = c.offset()
    if spec_order:
        comp = decode_composition(c, "data layout")
        if itype == SINGLE and len(info["sections"].offsets) != comp.nsections - 1:
            raise FormatError("data layout: single chunk metadata does not match the composition")
    return DataLayout(version, STRUCTURED, chunk_dims=dims[:-1], element_size=dims[-1], flags=flags,
                      index=ChunkIndexInfo(itype, addr, **info), composition=comp, structured_type=stype,
                      dim_width=None if width == minimal_dim_width(dims) else width, spec_order=spec_order)


def _decode_single_info(c: Reader, spec_order: bool, comp: Composition | None, filtered: bool,
                        dims: tuple[int, ...]) -> dict:
    """The single structured chunk's size and metadata. In the RFC's order the composition is
    known and the address ends the message: the size has the writers' width, or is as wide as
    the rest of the message leaves when that cannot be padding. In the spec's order the size has the writers'
    width, and the composition after the address says how much metadata precedes it."""
    std = single_size_width(dims)
    if comp is not None:
        left = c.remaining() - comp.meta_size(filtered) - c.sizes.offset
        width = std if std <= left < std + 8 else left   # beyond std: a version 1 header's padding
        size = as_uint(c.fields(uint_code(width))[0])
        meta = meta_from_fields(comp, filtered, c.fields(meta_layout(comp, filtered)))
        return {"filtered_size": size, "sections": meta}
    size = as_uint(c.fields(uint_code(std))[0])
    for n_meta in _meta_sizes(filtered):
        at = c.pos + n_meta + c.sizes.offset
        try:
            found = decode_composition(Reader(c.buf, at, c.sizes), "data layout")
        except FormatError:
            continue
        if found.meta_size(filtered) == n_meta:
            meta = meta_from_fields(found, filtered, c.fields(meta_layout(found, filtered)))
            return {"filtered_size": size, "sections": meta}
    raise FormatError("data layout: no structured chunk composition fits the single chunk's metadata")


def _meta_sizes(filtered: bool) -> list[int]:
    """Every size of one chunk's section metadata a composition can give."""
    return sorted({Composition(w, n, ()).meta_size(filtered) for w in (2, 4, 8) for n in range(1, MAX_SECTIONS + 1)})


def single_size_width(dims: tuple[int, ...]) -> int:
    """Bytes of the single structured chunk's size: as a filtered chunk's size in an index."""
    n = 1
    for d in dims:
        n *= d
    return chunk_size_width(n, Sizes())


def _encode_structured(w: Writer, lay: DataLayout) -> None:
    index, comp = _index(lay), lay.composition
    if comp is None or index.index_type not in STRUCTURED_INDEXES:
        raise ValueError(f"structured chunk layout: composition {comp}, index type {index.index_type}")
    dims = (*lay.chunk_dims, lay.element_size)
    width = lay.encoded_dim_width
    w.fields("BHBBB", STRUCTURED_PROPERTY_VERSION, lay.structured_type, lay.flags, len(dims), width)
    w.fields(uint_code(width) * len(dims), *(uint_field(d, width) for d in dims))
    if not lay.spec_order:
        encode_composition(w, comp)
    w.u8(index.index_type)
    if index.index_type == SINGLE:
        filtered = bool(lay.flags & SINGLE_INDEX_WITH_FILTER)
        sw = single_size_width(dims)
        meta = index.sections or SectionMeta((0,) * (comp.nsections - 1),
                                             *(((0,) * comp.nsections,) * 2 if filtered else ()))
        w.fields(uint_code(sw) + meta_layout(comp, filtered), uint_field(index.filtered_size, sw),
                 *meta_fields(comp, filtered, meta))
    else:
        spec, names = _INDEX_INFO[index.index_type]
        w.fields(spec, *(getattr(index, n) for n in names))
    w.offset(index.address)
    if lay.spec_order:
        encode_composition(w, comp)
