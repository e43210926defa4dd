"""What the write sides of the fixed and extensible array chunk indexes share: the element format
of an array, a batch as new raw elements by slot, element and page-init bit patching, and how a
block is staged."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from ...format.fixed_array import ChunkElement, chunk_element_encoder, client_id
from ...format.fixed_array import element_size as element_nbytes
from ...format.messages.layout import DataLayout
from . import ChunkRecord, check_coords, check_size, same_view
from .fixed_array import chunk_nbytes, size_width_from_element

if TYPE_CHECKING:
    from ..transaction import Transaction
    from .fixed_array import ArrayIndex

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
