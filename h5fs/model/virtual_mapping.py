"""The mappings of a virtual dataset (model/virtual.py says how they behave): the mapping list
as stored (`mapping_block`), each mapping resolved to a concrete source name and built
selections (`SourceMapping`), and the guard against a virtual dataset that is its own source."""

from __future__ import annotations

import os
import threading

import numpy as np

from ..errors import FormatError
from ..format import selection as SEL
from ..format import vds_mapping
from ..storage.remote.siblings import canonical
from ..storage.selection_geometry import build_selection, selection_nbytes
from .cache_size import approx_size

MAX_DEPTH = 16                 # nesting of virtual datasets whose sources are virtual


_active = threading.local()


class NestingGuard:
    """Refuses a virtual dataset that is (directly or through others) its own source."""

    def __init__(self, key, what: str):
        self.key, self.what = key, what

    def __enter__(self):
        stack = getattr(_active, "stack", None)
        if stack is None:
            stack = _active.stack = []
        if self.key in stack:
            raise FormatError(f"{self.what}: virtual dataset maps itself (through {len(stack)} source levels)")
        if len(stack) >= MAX_DEPTH:
            raise FormatError(f"{self.what}: virtual datasets nested deeper than {MAX_DEPTH} levels")
        stack.append(self.key)

    def __exit__(self, *exc):
        _active.stack.pop()


def guard_key(ds):
    """What NestingGuard knows a virtual dataset by: its file (path or URL) and header address."""
    f = ds.file
    return (canonical(f.path) if f.remote is not None else os.path.realpath(f.path), ds.address)


def mapping_block(ds) -> vds_mapping.MappingBlock:
    """The mapping list of virtual dataset `ds`, decoded from its global heap object."""
    lay = ds.layout
    if lay.vds_heap_address is None:
        return vds_mapping.MappingBlock(0, ())
    data = ds.file.global_heap.get(lay.vds_heap_address, lay.vds_heap_index)
    return vds_mapping.decode(data, ds.file.sizes, f"{ds.path}: virtual dataset mapping")


class SourceMapping:
    """One mapping with its (clipped) virtual selection and a concrete source name."""

    def __init__(self, file_name: str, dset_name: str, vsel, src_spec: SEL.Selection, pairs_exact: bool, label: str):
        self.file_name, self.dset_name = file_name, dset_name
        self.vsel = vsel
        self.src_spec = src_spec
        self.pairs_exact = pairs_exact          # limited mapping: counts must agree
        self.label = label
        b = vsel.bounds() if vsel is not None else None
        self.lo, self.hi = (b[0], tuple(x + 1 for x in b[1])) if b else (None, None)
        self._ssel: tuple | None = None         # (source shape, built source selection)
        self.candidates: list | None = None     # [(path, is the virtual dataset's own file)]

    def hits(self, start, count) -> bool:
        if self.lo is None:
            return False
        return all(s < h and s + c > lo for s, c, lo, h in zip(start, count, self.lo, self.hi))

    def source_selection(self, shape: tuple[int, ...]):
        cached = self._ssel
        if cached is not None and cached[0] == shape:
            return cached[1]
        spec = self.src_spec
        u = spec.unlimited_dim if spec.regular is not None else None
        ssel = build_selection(spec, shape, shape[u] if u is not None else None, self.label)
        if u is None and ssel is not None and spec.kind != "all":
            lo, hi = ssel.bounds() or ((), ())
            if any(h >= e for h, e in zip(hi, shape)):
                raise FormatError(f"{self.label}: source selection {spec.text()} lies outside the source "
                                  f"dataset's extent {shape}")
        self._ssel = (shape, ssel)
        return ssel

    def paired_selection(self, sshape: tuple[int, ...]):
        """The source selection in a source of `sshape`, its element count checked."""
        ssel = self.source_selection(sshape)
        limit = 0 if ssel is None else ssel.n
        if self.pairs_exact and limit != self.vsel.n:
            raise FormatError(f"{self.label}: source selection has {limit} elements, virtual "
                              f"selection {self.vsel.n}")
        return ssel

    def pair(self, src, pos: np.ndarray, ords: np.ndarray):
        """The source's shape, and the box positions and source coordinates of the located
        elements (pos, ords) the mapping pairs with a source element; None when it pairs none
        of them."""
        sshape = src.shape if src.shape else (1,)
        ssel = self.paired_selection(sshape)
        limit = 0 if ssel is None else ssel.n
        if ords.size and int(ords.max()) >= limit:
            keep = ords < limit
            pos, ords = pos[keep], ords[keep]
            if not len(ords):
                return None
        return sshape, pos, ssel.coords(ords)


def maps_nbytes(maps: list[SourceMapping]) -> int:
    """Memory of resolved mappings, their built selections included."""
    return sum(600 + selection_nbytes(m.vsel) + 2 * approx_size(m.src_spec) for m in maps)
