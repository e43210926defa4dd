"""Chunk indexes: one module per index type, all behind `ChunkIndex`; `open_index` picks one. The
checks every index's write side makes of a batch are here too."""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

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


def check_coords(rec_coords: Iterable[tuple[int, ...]], rank: int, what: str) -> None:
    for c in rec_coords:
        if len(c) != rank or any(x < 0 for x in c):
            raise ValueError(f"{what}: chunk coordinates {c} for a rank-{rank} index")


def check_size(rec: ChunkRecord, limit: int, what: str) -> None:
    """A stored chunk size must fit the index's field (`limit`: its first value too large)."""
    if not 0 < rec.size < limit:
        raise ValueError(f"{what}: chunk {rec.coords} of {rec.size} bytes does not fit the index")


def same_view(ctx: IndexContext, txn: Transaction, what: str) -> None:
    """Nodes are read (and cached) through the index's reader: it must show the transaction's
    staged blocks, or a second change in one transaction would build on stale nodes."""
    if ctx.reader is not txn.reader:
        raise ValueError(f"{what}: the index to change must be opened on the transaction's reader")


# index type -> (module, class); imported on first use
_KINDS = {0: ("btree_v1", "BTreeV1Index"), 1: ("single", "SingleChunkIndex"), 2: ("implicit", "ImplicitIndex"),
          3: ("fixed_array", "FixedArrayIndex"), 4: ("extensible_array", "ExtensibleArrayIndex"),
          5: ("btree_v2", "BTreeV2Index")}


def open_index(ctx: IndexContext) -> ChunkIndex:
    assert ctx.layout.index is not None
    module, cls = _KINDS[ctx.layout.index.index_type]
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)(ctx)
