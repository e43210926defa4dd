"""Chunk indexes: one module per index type, all behind `ChunkIndex`; `open_index` picks one."""

from __future__ import annotations

import importlib
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


# index type -> (module, class); imported on first use
_KINDS = {0: ("btree_v1", "BTreeV1Index"), 1: ("single", "SingleChunkIndex"), 2: ("implicit", "ImplicitIndex"),
          3: ("fixed_array", "FixedArrayIndex"), 4: ("extensible_array", "ExtensibleArrayIndex"),
          5: ("btree_v2", "BTreeV2Index")}


def open_index(ctx: IndexContext) -> ChunkIndex:
    assert ctx.layout.index is not None
    module, cls = _KINDS[ctx.layout.index.index_type]
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)(ctx)
