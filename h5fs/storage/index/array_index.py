"""What the fixed and extensible array chunk indexes share: `ArrayIndex` (lookup and iteration
over the array's slots, the write entry points), the chunk elements of an array decoded and checked
against the dataset; and their write side, `ArrayWriter`: the element format of an array, a batch
as new raw elements by slot, element and page-init bit patching, and how a block is staged."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

from ...errors import FormatError
from ...format import fixed_array as fa
from ...format.fixed_array import ChunkElement, chunk_element_decoder, chunk_element_encoder, client_id
from ...format.fixed_array import element_size as element_nbytes
from ...format.messages.layout import DataLayout
from . import ChunkIndex, ChunkRecord, IndexContext, check_coords, check_size, same_view
from .grid import chunk_nbytes

if TYPE_CHECKING:
    from ..transaction import Transaction


def size_width_from_element(ctx: IndexContext, element_size: int) -> int:
    """Width of the 'chunk size' field, read off the stored element/record size.

    libhdf5 writes ``1 + (log2(chunk bytes) + 8) // 8`` (layout v4) or `size of lengths` (v5);
    the stored element size already says which, so it decides. Structured chunk elements hold
    their section metadata after it."""
    comp = ctx.layout.composition
    w = element_size - ctx.reader.sizes.offset - (comp.meta_size(ctx.filtered) if comp else 4)
    if not 1 <= w <= 8:
        raise FormatError(f"{ctx.what}: chunk index element size {element_size} leaves {w} bytes for the chunk size")
    return w


def element_decoder(ctx: IndexContext, client_id: int, element_size: int):
    """Chunk element decoder for an array client, checked against the dataset's storage."""
    if client_id > fa.CLIENT_FILTERED_STRUCTURED:
        raise FormatError(f"{ctx.what}: chunk index array of unknown client {client_id}")
    if client_id != fa.client_id(ctx.filtered, ctx.structured):
        raise FormatError(f"{ctx.what}: chunk index array of client {client_id} for a dataset with "
                          f"{'structured' if ctx.structured else 'plain'}, "
                          f"{'filtered' if ctx.filtered else 'unfiltered'} chunks")
    if ctx.filtered or ctx.structured:
        width = size_width_from_element(ctx, element_size)
    else:
        width = 0
        if element_size != ctx.reader.sizes.offset:
            raise FormatError(f"{ctx.what}: unfiltered chunk element of {element_size} bytes")
    return chunk_element_decoder(ctx.reader.sizes, ctx.filtered, width, ctx.layout.composition)


def to_record(ctx: IndexContext, coords: tuple[int, ...], el: ChunkElement, nbytes: int) -> ChunkRecord | None:
    if el.address is None:
        return None
    if ctx.structured:
        return ChunkRecord(coords, el.address, el.size, 0, el.sections)
    if ctx.filtered:
        return ChunkRecord(coords, el.address, el.size, el.filter_mask)
    return ChunkRecord(coords, el.address, nbytes, 0)


class ArrayIndex(ChunkIndex):
    """Lookup, iteration and the write entry points shared by the array indexes; subclasses map
    coordinates <-> slots and open their array."""

    array = None  # the decoded FixedArray or ExtensibleArray, None when no chunk was allocated
    what = ""     # the index, for messages

    def open_array(self, array) -> None:
        """Use this FixedArray or ExtensibleArray (the one a change left)."""
        raise NotImplementedError

    def writer(self, txn: Transaction) -> ArrayWriter:
        """The object applying a batch of changes to this index in `txn`."""
        raise NotImplementedError

    def put(self, txn: Transaction, records: Sequence[ChunkRecord]) -> DataLayout | None:
        return self.writer(txn).apply(records, ())

    def remove(self, txn: Transaction, coords: Sequence[tuple[int, ...]]) -> DataLayout | None:
        return self.writer(txn).apply((), coords)

    def index_of(self, coords: tuple[int, ...]) -> int | None:
        raise NotImplementedError

    def coords_of(self, idx: int) -> tuple[int, ...]:
        raise NotImplementedError

    def lookup(self, coords: tuple[int, ...]) -> ChunkRecord | None:
        return self.lookup_many([coords])[0]

    def lookup_many(self, coords: Sequence[tuple[int, ...]]) -> list[ChunkRecord | None]:
        if self.array is None:
            return [None] * len(coords)
        coords = [tuple(c) for c in coords]
        raws = self.array.get_many([self.index_of(c) for c in coords])
        return [None if raw is None else to_record(self.ctx, c, self.decode(raw), self.nbytes)
                for c, raw in zip(coords, raws)]

    def records(self) -> Iterator[ChunkRecord]:
        if self.array is None:
            return
        for idx, raw in self.array.items():
            rec = to_record(self.ctx, self.coords_of(idx), self.decode(raw), self.nbytes)
            if rec is not None:
                yield rec


Slots = dict[int, bytes]   # array slot -> its new raw element


@dataclass(frozen=True)
class ElementFormat:
    client_id: int
    version: int                            # of a new array's blocks
    size: int                               # bytes of an element
    width: int                              # bytes of a chunk's size (0: unfiltered plain chunks)
    fill: bytes                             # a slot without a chunk: the undefined address, zeros
    encode: Callable[[ChunkElement], bytes]

    def adds(self, items: Iterable[bytes]) -> bool:
        """Whether any of these elements is a chunk (not the fill a removal writes)."""
        return any(raw != self.fill for raw in items)


def element_format(index: ArrayIndex, txn: Transaction, element_size: int | None) -> ElementFormat:
    """The elements of the index's array: as its header says (`element_size`), or as libhdf5
    makes them for a new array (H5D__farray/earray_idx_create)."""
    ctx = index.ctx
    same_view(ctx, txn, index.what)
    sizes, comp = ctx.reader.sizes, ctx.layout.composition
    if ctx.filtered or comp is not None:
        width = size_width_from_element(ctx, element_size) if element_size else ctx.layout.filtered_size_width(sizes)
    else:
        width = 0
    encode = chunk_element_encoder(sizes, ctx.filtered, width, comp)
    # structured chunk clients came with version 1 of the array (spec 3.0, the prototype)
    return ElementFormat(client_id(ctx.filtered, comp is not None), 1 if comp is not None else 0,
                         element_nbytes(sizes, ctx.filtered, width, comp), width, encode(ChunkElement(None)), encode)


def slot_changes(index: ArrayIndex, fmt: ElementFormat, records: Sequence[ChunkRecord],
                 removed: Sequence[tuple[int, ...]]) -> Slots:
    """The batch as new raw elements by slot (a removal writes the fill element, as libhdf5's
    idx_remove does); the last word on a slot wins, removals after the puts."""
    ctx, what = index.ctx, index.what
    check_coords([r.coords for r in records] + [tuple(c) for c in removed], len(ctx.layout.chunk_dims), what)
    nbytes = chunk_nbytes(ctx)
    out: Slots = {}
    for r in records:
        if fmt.width:
            check_size(r, 1 << (8 * fmt.width), what)
            out[_slot(index, r.coords)] = fmt.encode(ChunkElement(r.address, r.size, r.filter_mask, r.sections))
        elif r.size != nbytes:
            raise ValueError(f"{what}: unfiltered chunk {r.coords} of {r.size} bytes, chunks hold {nbytes}")
        else:
            out[_slot(index, r.coords)] = fmt.encode(ChunkElement(r.address))
    for c in removed:
        out[_slot(index, tuple(c))] = fmt.fill
    return out


def _slot(index: ArrayIndex, coords: tuple[int, ...]) -> int:
    slot = index.index_of(tuple(coords))
    if slot is None:
        raise ValueError(f"{index.what}: chunk {tuple(coords)} lies outside the array's maximum extent")
    return slot


def patched(old: bytes, items: Slots, base: int, size: int) -> bytes:
    """`old` elements (the first one is slot `base`) with `items` written over them."""
    buf = bytearray(old)
    for slot, raw in items.items():
        at = (slot - base) * size
        buf[at:at + size] = raw
    return bytes(buf)


def set_bit(bitmap: bytearray, bit: int) -> None:
    """The mirror of `fixed_array.bit_set`: bits numbered from each byte's most significant."""
    bitmap[bit // 8] |= 0x80 >> (bit % 8)


def by_page(items: Slots, page_nelmts: int) -> dict[int, Slots]:
    """The items grouped by the page (of `page_nelmts` elements) each slot lies in."""
    pages: dict[int, Slots] = {}
    for slot, raw in items.items():
        pages.setdefault(slot // page_nelmts, {})[slot] = raw
    return pages


class ArrayWriter:
    """One batch of changes to an array index in a transaction (see the subclasses)."""

    def __init__(self, index: ArrayIndex, txn: Transaction):
        self.index, self.txn, self.sizes = index, txn, txn.sizes
        arr = index.array
        self.fmt = element_format(index, txn, arr.header.element_size if arr else None)

    def changes(self, records: Sequence[ChunkRecord], removed: Sequence[tuple[int, ...]]) -> Slots:
        return slot_changes(self.index, self.fmt, records, removed)

    def stage(self, old, new, encode: Callable, header) -> None:
        """Stage block `new` (a block record, encoded by `encode(block, header, sizes)`): in
        fresh space when it is new (`old` None), in place when it changed."""
        if old is None:
            self.txn.write_new(new.address, encode(new, header, self.sizes))
        elif new != old:
            self.txn.write_in_place(new.address, encode(new, header, self.sizes))

    def published(self, address: int) -> DataLayout:
        """The layout message with a new array's header address."""
        layout = self.index.ctx.layout
        return replace(layout, index=replace(layout.index, address=address))
