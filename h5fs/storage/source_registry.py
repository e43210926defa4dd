"""The raw source of each storage layout: `open_source` picks one for a dataset, as
`index.open_index` picks a chunk index for a chunked one. Storage opens the layouts whose bytes
lie in the file (compact, contiguous, chunked, structured chunks); the model registers the ones
whose bytes lie in other files with `register_source` (external data files: model/external.py,
virtual datasets: model/virtual.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from ..errors import FormatError, Unsupported
from ..format.messages import dataspace as DS
from ..format.messages import layout as L
from ..format.messages.filter_pipeline import FilterPipeline
from .blockio import BlockReader
from .chunk_cache import ChunkCache
from .chunked import ChunkedSource
from .index import IndexContext, open_index
from .sources import CompactSource, ContiguousSource, FillSource, RawSource

EXTERNAL = "external"   # the source kind of contiguous storage in external data files


class StoringFile(Protocol):
    """The file a dataset lies in (model/file.py's H5File is one)."""

    reader: BlockReader
    chunk_cache: ChunkCache


class StoredData(Protocol):
    """A dataset as `open_source` reads it (model/dataset.py's Dataset is one). Its messages are
    decoded on first use: each layout reads only those it needs, so a damaged message fails only
    the sources that need it."""

    path: str
    file: StoringFile

    @property
    def dataspace(self) -> DS.Dataspace: ...

    @property
    def layout(self) -> L.DataLayout: ...

    @property
    def itemsize(self) -> int: ...

    @property
    def data_bytes(self) -> int: ...   # the dataspace's elements times itemsize

    @property
    def fill_value(self) -> bytes | None: ...

    @property
    def pipeline(self) -> FilterPipeline | None: ...

    @property
    def stored_externally(self) -> bool: ...   # an External Data Files message


@dataclass(frozen=True)
class SourceContext:
    data: StoredData
    space: DS.Dataspace
    layout: L.DataLayout
    size: int                     # data_bytes
    cache_key: tuple[int, int]    # the dataset's chunks in the chunk cache: (header address, generation)


Opener = Callable[[SourceContext], RawSource]


def open_source(data: StoredData, cache_key: tuple[int, int]) -> RawSource:
    """The raw source of `data`'s bytes; `cache_key`: the header's address and its generation
    before the header was read (chunks cached under it come from this version's index or a later
    one, never an earlier one)."""
    space, lay = data.dataspace, data.layout   # then the datatype (data_bytes): which error comes first
    ctx = SourceContext(data, space, lay, data.data_bytes, cache_key)
    kind = EXTERNAL if lay.layout_class == L.CONTIGUOUS and data.stored_externally else lay.layout_class
    opener = _OPENERS.get(kind)
    if opener is None:
        raise Unsupported(f"{data.path}: layout class {lay.layout_class}")
    return opener(ctx)


def register_source(kind: int | str, opener: Opener) -> None:
    """Open the sources of `kind` (a layout class, or EXTERNAL) with `opener`."""
    _OPENERS[kind] = opener


def chunks_filtered(pipe: FilterPipeline | None) -> bool:
    """Whether a chunk index records filtered chunks: a pipeline for the whole chunk, or
    (structured chunks) for any of its sections."""
    return pipe is not None and bool(pipe.filters or pipe.sections)


def index_context(data: StoredData, space: DS.Dataspace, lay: L.DataLayout) -> IndexContext:
    """The context a chunked or structured dataset's index opens with, its messages checked
    against each other."""
    if space.kind != DS.SIMPLE:
        raise FormatError(f"{data.path}: chunked dataset with a {('scalar', 'simple', 'null')[space.kind]} dataspace")
    if lay.element_size != data.itemsize:
        raise FormatError(f"{data.path}: chunk element size {lay.element_size} differs from datatype size "
                          f"{data.itemsize}")
    pipe = data.pipeline
    if pipe is not None and (pipe.version == 3) != (lay.layout_class == L.STRUCTURED):
        raise FormatError(f"{data.path}: filter pipeline version {pipe.version} with {lay.class_name} storage")
    return IndexContext(data.file.reader, lay, space.dims, space.maxdims, chunks_filtered(pipe), data.path)


def _compact(ctx: SourceContext) -> RawSource:
    return CompactSource(ctx.size, ctx.layout.compact_data, ctx.data.path)


def _contiguous(ctx: SourceContext) -> RawSource:
    data, lay, size = ctx.data, ctx.layout, ctx.size
    if lay.address is None or size == 0:
        return FillSource(size, data.fill_value, data.itemsize)
    if lay.size >= 0 and lay.size < size:
        raise FormatError(f"{data.path}: contiguous storage of {lay.size} bytes for {size} bytes of data")
    return ContiguousSource(size, data.file.reader, lay.address, data.path)


def _chunked(ctx: SourceContext) -> RawSource:
    data, lay = ctx.data, ctx.layout
    index_ctx = index_context(data, ctx.space, lay)
    pipe = data.pipeline
    return ChunkedSource(ctx.space.dims, data.itemsize, lay.chunk_dims, open_index(index_ctx),
                         pipe.filters if pipe is not None else (), data.fill_value, data.file.chunk_cache,
                         ctx.cache_key, data.path, edge_unfiltered=bool(lay.flags & L.DONT_FILTER_PARTIAL_BOUND_CHUNKS))


def _structured(ctx: SourceContext) -> RawSource:
    # loaded with the first sparse dataset: they bring the filter pipeline and its codec modules,
    # which a chunked source also loads only at its first filtered chunk
    from .sparse_chunk import SparseCodec
    from .sparse_source import SparseSource
    data, lay = ctx.data, ctx.layout
    index_ctx = index_context(data, ctx.space, lay)
    codec = SparseCodec(lay.chunk_dims, data.itemsize, lay.composition, lay.structured_type, data.pipeline,
                        data.fill_value, data.path, bool(lay.flags & L.DONT_FILTER_PARTIAL_BOUND_CHUNKS))
    return SparseSource(ctx.space.dims, data.itemsize, lay.chunk_dims, open_index(index_ctx), codec,
                        data.fill_value, data.file.chunk_cache, ctx.cache_key, data.path)


_OPENERS: dict[int | str, Opener] = {L.COMPACT: _compact, L.CONTIGUOUS: _contiguous, L.CHUNKED: _chunked,
                                     L.STRUCTURED: _structured}
