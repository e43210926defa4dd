"""Chunk indexes: one module per index type, all behind `ChunkIndex`; `open_index` picks one."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Iterator

from ...format.messages.layout import DataLayout
from ..blockio import BlockReader


@dataclass(frozen=True)
class ChunkRecord:
    """Where one chunk lives. `coords` are chunk-grid coordinates (element offset // chunk dim)."""

    coords: tuple[int, ...]
    address: int
    size: int            # bytes stored in the file (after filters)
    filter_mask: int = 0  # bit i set: filter i of the pipeline was skipped for this chunk


@dataclass(frozen=True)
class IndexContext:
    reader: BlockReader
    layout: DataLayout
    dims: tuple[int, ...]               # current dataspace extent
    maxdims: tuple[int | None, ...]     # None = unlimited
    filtered: bool                      # the dataset has a non-empty filter pipeline
    what: str                           # object path, for error messages


class ChunkIndex(ABC):
    """Read access to one dataset's chunk index."""

    def __init__(self, ctx: IndexContext):
        self.ctx = ctx

    @abstractmethod
    def lookup(self, coords: tuple[int, ...]) -> ChunkRecord | None:
        """The chunk at these grid coordinates, or None if it was never allocated."""

    @abstractmethod
    def records(self) -> Iterator[ChunkRecord]:
        """Every allocated chunk (order unspecified)."""

    def allocated_bytes(self) -> int:
        return sum(r.size for r in self.records())


def open_index(ctx: IndexContext) -> ChunkIndex:
    from ...format.messages import layout as L
    from . import btree_v1, btree_v2, extensible_array, fixed_array, implicit, single

    kinds = {L.BTREE_V1: btree_v1.BTreeV1Index, L.SINGLE: single.SingleChunkIndex,
             L.IMPLICIT: implicit.ImplicitIndex, L.FIXED_ARRAY: fixed_array.FixedArrayIndex,
             L.EXTENSIBLE_ARRAY: extensible_array.ExtensibleArrayIndex, L.BTREE_V2: btree_v2.BTreeV2Index}
    assert ctx.layout.index is not None
    return kinds[ctx.layout.index.index_type](ctx)
