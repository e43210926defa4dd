"""Sparse structured chunks of fixed-size elements: stored bytes <-> (defined positions, values).

Section 0 is the H5Sencode description of the defined elements' selection over the chunk's
extent, in chunk-relative coordinates (format/dataspace_encoding.py), sealed with its lookup3
checksum; section 1 holds the defined values in row-major order of their positions. Each section
goes through its own pipeline (filter pipeline message version 3), skipped for partial edge
chunks when the layout says DONT_FILTER_PARTIAL_BOUND_CHUNKS. The unfiltered size a filtered
dataset records for a section counts its checksum.

A dense view of a chunk holds the fill value where no element is defined; making a chunk from a
dense view defines exactly the elements that differ from the fill value, so storage never holds
a defined fill value, and a chunk left with none is no chunk (`encode` returns None).
"""

from __future__ import annotations

from math import prod

import numpy as np

from ..errors import FormatError, Unsupported
from ..format import dataspace_encoding as E
from ..format.messages.filter_pipeline import FilterPipeline
from ..format.structured_chunk import SELECTION, SPARSE, SPARSE_FIXED, Composition, SectionMeta, join, seal, \
    split, unseal
from .filters import ChunkInfo
from .filters.pipeline import decode_chunk, encode_chunk
from .sparse_selection import positions, smallest


class SparseCodec:
    def __init__(self, chunk: tuple[int, ...], itemsize: int, comp: Composition, structured_type: int,
                 pipeline: FilterPipeline | None, fill: bytes | None, what: str, edge_unfiltered: bool):
        if not structured_type & SPARSE:
            raise Unsupported(f"{what}: structured chunks of type {structured_type:#x} (only sparse ones are known)")
        if (comp.nsections, comp.metadata) != (SPARSE_FIXED.nsections, SPARSE_FIXED.metadata):
            raise Unsupported(f"{what}: sparse chunks of {comp.nsections} sections (variable-length sparse data)")
        self.chunk, self.itemsize, self.comp, self.what = chunk, itemsize, comp, what
        self.nelem = prod(chunk)
        self.fill = fill if fill is not None else bytes(itemsize)
        self.pipes = tuple(pipeline.section(i) if pipeline else () for i in range(comp.nsections))
        self.filtered = any(self.pipes)
        self.edge_unfiltered = edge_unfiltered
        # the largest section 0 a chunk can need: every element a block of its own, 8-byte values
        self.selection_limit = 64 + 8 * len(chunk) + self.nelem * len(chunk) * 16

    # -- reading ------------------------------------------------------------------------------
    def decode(self, data: bytes, meta: SectionMeta | None, edge: bool, where: str) -> tuple[np.ndarray, bytes]:
        """(sorted defined positions, their values) of a stored chunk."""
        sel, values = self._sections(data, meta, edge, where, self.comp.nsections)
        pos = self._positions(sel, where)
        values = bytes(values)
        if len(values) != len(pos) * self.itemsize:
            raise FormatError(f"{where}: {len(values)} value bytes for {len(pos)} defined elements")
        return pos, values

    def count(self, data: bytes, meta: SectionMeta | None, edge: bool, where: str) -> int:
        """How many elements a stored chunk defines (its selection alone is decoded)."""
        return len(self._positions(self._sections(data, meta, edge, where, 1)[0], where))

    def _sections(self, data: bytes, meta: SectionMeta | None, edge: bool, where: str, n: int) -> list:
        """The first `n` sections of a stored chunk, unfiltered."""
        if meta is None or len(meta.offsets) != self.comp.nsections - 1:
            raise FormatError(f"{where}: structured chunk without its section metadata")
        out = []
        for i, sec in enumerate(split(data, meta, where)[:n]):
            if self.filtered:
                size = meta.sizes[i]
                limit = self.selection_limit if i == SELECTION else self.nelem * self.itemsize
                if size > limit:
                    raise FormatError(f"{where}: section {i} claims {size} unfiltered bytes")
                if self.pipes[i] and not (edge and self.edge_unfiltered) and len(sec):
                    sec = decode_chunk(self.pipes[i], bytes(sec), meta.masks[i],
                                       ChunkInfo(size, 1 if i == SELECTION else self.itemsize, f"{where} section {i}"))
                elif len(sec) != size:
                    raise FormatError(f"{where}: section {i} holds {len(sec)} bytes, its size says {size}")
            out.append(sec)
        return out

    def _positions(self, section: bytes | memoryview, where: str) -> np.ndarray:
        body = unseal(section, f"{where} section 0")
        if not len(body):
            raise FormatError(f"{where}: empty selection section")
        enc = E.decode(body, f"{where} selection")
        if enc.extent is not None and enc.extent.dims != self.chunk:
            raise FormatError(f"{where}: selection extent {enc.extent.dims} is not the chunk's {self.chunk}")
        return positions(enc.selection, self.chunk, where)

    def dense(self, pos: np.ndarray, values: bytes) -> bytes:
        """The chunk as a dense array: the fill value where nothing is defined."""
        isz = self.itemsize
        if isz in (1, 2, 4, 8):   # one integer per element: filled 25x faster than row by row
            kind = f"<u{isz}"
            out = np.full(self.nelem, np.frombuffer(self.fill, kind)[0], kind)
            out[pos] = np.frombuffer(values, kind)
        else:
            out = np.empty((self.nelem, isz), np.uint8)
            out[...] = np.frombuffer(self.fill, np.uint8)
            out[pos] = np.frombuffer(values, np.uint8).reshape(-1, isz)
        return out.tobytes()

    # -- writing ------------------------------------------------------------------------------
    def defined(self, dense: bytes | bytearray | memoryview) -> np.ndarray:
        """Positions of the elements of a dense chunk that differ from the fill value."""
        isz = self.itemsize
        if isz in (1, 2, 4, 8):
            kind = f"<u{isz}"
            return np.flatnonzero(np.frombuffer(dense, kind) != np.frombuffer(self.fill, kind)[0])
        rows = np.frombuffer(dense, np.uint8).reshape(-1, isz)
        return np.flatnonzero((rows != np.frombuffer(self.fill, np.uint8)).any(axis=1))

    def encode(self, dense: bytes | bytearray | memoryview, edge: bool, where: str) -> tuple[bytes, SectionMeta] | None:
        """The stored chunk defining the non-fill elements of `dense`, and its section metadata;
        None when every element is the fill value."""
        pos = self.defined(dense)
        if not len(pos):
            return None
        rows = np.frombuffer(dense, np.uint8).reshape(-1, self.itemsize)
        return self.encode_points(pos, rows[pos].tobytes(), edge, where)

    def encode_points(self, pos: np.ndarray, values: bytes, edge: bool, where: str) -> tuple[bytes, SectionMeta]:
        """The stored chunk defining these sorted positions with these values."""
        sections = [seal(E.encode(self.chunk, smallest(pos, self.chunk))), values]
        if not self.filtered:
            data, offsets = join(sections)
            return data, SectionMeta(offsets)
        stored, masks = [], []
        for i, sec in enumerate(sections):
            pipe = self.pipes[i]
            if pipe and not (edge and self.edge_unfiltered) and sec:
                sec, mask = encode_chunk(pipe, sec, ChunkInfo(len(sec), 1 if i == SELECTION else self.itemsize,
                                                              f"{where} section {i}"))
            else:
                mask = 0
            stored.append(sec)
            masks.append(mask)
        data, offsets = join(stored)
        return data, SectionMeta(offsets, tuple(len(s) for s in sections), tuple(masks))
