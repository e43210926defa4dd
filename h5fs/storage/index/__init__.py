"""Chunk indexes: one module per index type, all behind `ChunkIndex`; `open_index` picks one."""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Sequence

from ...errors import Unsupported
from ...format.messages.layout import DataLayout
from ...format.structured_chunk import SectionMeta
from ..blockio import BlockReader

if TYPE_CHECKING:
    from ..transaction import Transaction


@dataclass(frozen=True)
class ChunkRecord:
    """Where one chunk lives. `coords` are chunk-grid coordinates (element offset // chunk dim)."""

    coords: tuple[int, ...]
    address: int
    size: int            # bytes stored in the file (after filters)
    filter_mask: int = 0  # bit i set: filter i of the pipeline was skipped for this chunk
    sections: SectionMeta | None = None   # a structured chunk's section metadata


@dataclass(frozen=True)
class IndexContext:
    reader: BlockReader
    layout: DataLayout
    dims: tuple[int, ...]               # current dataspace extent
    maxdims: tuple[int | None, ...]     # None = unlimited
    filtered: bool                      # the dataset has a non-empty filter pipeline (structured
                                        # chunks: a pipeline for any section)
    what: str                           # object path, for error messages

    @property
    def structured(self) -> bool:
        return self.layout.composition is not None


class ChunkIndex(ABC):
    """Read access to one dataset's chunk index."""

    def __init__(self, ctx: IndexContext):
        self.ctx = ctx

    @abstractmethod
    def lookup(self, coords: tuple[int, ...]) -> ChunkRecord | None:
        """The chunk at these grid coordinates, or None if it was never allocated."""

    def lookup_many(self, coords: Sequence[tuple[int, ...]]) -> list[ChunkRecord | None]:
        """`lookup` of each chunk, in order; index types override it to walk their structure once
        for chunks that lie close together (a row of chunks)."""
        return [self.lookup(c) for c in coords]

    @abstractmethod
    def records(self) -> Iterator[ChunkRecord]:
        """Every allocated chunk (order unspecified)."""

    def allocated_bytes(self) -> int:
        return sum(r.size for r in self.records())

    # -- writing: the index opened on `txn.reader` (IndexContext.reader), changes staged in txn --
    # New structures go to space from `txn.allocate` and are written with `txn.write_new`; live
    # structures change only through `txn.write_in_place` (a whole checksummed block, its checksum
    # recomputed); blocks a change replaces are given to `txn.free`. Each returns the dataset's new
    # layout message when it must change (the index's own address, the single chunk's address and
    # size), else None. Chunk data is the caller's: it allocates, writes and frees it.
    def put(self, txn: Transaction, records: Sequence[ChunkRecord]) -> DataLayout | None:
        """Insert these chunks' records, or replace the records of chunks already indexed."""
        raise Unsupported(f"{self.ctx.what}: writing a {type(self).__name__}")

    def remove(self, txn: Transaction, coords: Sequence[tuple[int, ...]]) -> DataLayout | None:
        """Drop these chunks from the index (a shrinking dataset)."""
        raise Unsupported(f"{self.ctx.what}: removing chunks from a {type(self).__name__}")

    def resize(self, txn: Transaction, dims: tuple[int, ...]) -> DataLayout | None:
        """Follow a new dataspace extent in the index's dimension-dependent parts (chunks
        outside the new extent were removed first)."""
        return None


# index type -> (module, class); imported on first use
_KINDS = {0: ("btree_v1", "BTreeV1Index"), 1: ("single", "SingleChunkIndex"), 2: ("implicit", "ImplicitIndex"),
          3: ("fixed_array", "FixedArrayIndex"), 4: ("extensible_array", "ExtensibleArrayIndex"),
          5: ("btree_v2", "BTreeV2Index")}


def open_index(ctx: IndexContext) -> ChunkIndex:
    assert ctx.layout.index is not None
    module, cls = _KINDS[ctx.layout.index.index_type]
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)(ctx)
