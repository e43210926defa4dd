"""The plan of a virtual dataset: its mapping list resolved against the sources (the extent of
unlimited mappings, printf-style names expanded block by block), kept in the dataset's state
(model/virtual.py says how it behaves)."""

from __future__ import annotations

from functools import partial

from ..errors import FormatError, Unsupported
from ..format import selection as SEL
from ..storage.selection_geometry import RegDim, build_selection, clip_extent_match, selection_ends
from .cache_size import approx_size
from .dtypes import describe, is_converted
from .virtual_files import POOL, has_printf, substitute
from .virtual_mapping import NestingGuard, SourceMapping, guard_key, mapping_block, maps_nbytes
from .virtual_source import VirtualSource

MAX_PRINTF_BLOCKS = 1 << 20    # source blocks probed for one printf mapping


class Plan:
    """The mapping list resolved against the sources: extent and concrete mappings."""

    def __init__(self, ds):
        self.ds = ds.detached()  # the plan is kept in ds's state
        space = ds.dataspace
        self.stored = tuple(space.dims)
        rank = len(self.stored)
        block = mapping_block(ds)
        self.block = block
        probe = VirtualSource(ds, self.stored, [])
        min_dims = [0] * rank
        new_dims: list[int | None] = [None] * rank
        pending = []                       # (mapping, kind, data)
        for i, m in enumerate(block.entries):
            label = f"{ds.path}: mapping {i} ({m.source_file}:{m.source_dataset})"
            vs, ss = m.virtual_selection, m.source_selection
            if vs.kind not in ("all", "none") and vs.rank != rank:
                raise FormatError(f"{label}: virtual selection of rank {vs.rank} in a rank-{rank} dataset")
            vu = vs.unlimited_dim if vs.regular is not None else None
            if vs.kind not in ("all", "none"):
                for d, e in enumerate(selection_ends(vs, vu)):
                    if e is not None and e + 1 > min_dims[d]:
                        min_dims[d] = e + 1
            if vu is None:
                pending.append((i, m, "limited", None, label))
                continue
            su = ss.unlimited_dim if ss.regular is not None else None
            start, stride, count, blk = (v[vu] for v in vs.regular)
            if su is not None:                         # unlimited on both sides
                r = SourceMapping(substitute(m.source_file, None), substitute(m.source_dataset, None),
                                  None, ss, False, label)
                entry, src = probe.open_mapping(r)
                try:
                    if src is None:
                        clip = 0
                    else:
                        sshape = src.shape if src.shape else (1,)
                        sdim = RegDim(*(v[su] for v in ss.regular), limit=sshape[su])
                        clip = clip_extent_match(start, stride, blk, sdim.n)
                finally:
                    if entry is not None:
                        POOL.release(entry)
                pending.append((i, m, "unlimited", clip, label))
            else:                                      # printf: one source per block
                if count is not None or blk is None:
                    raise FormatError(f"{label}: printf-style mapping without an unlimited count")
                if not (has_printf(m.source_file) or has_printf(m.source_dataset)):
                    raise FormatError(f"{label}: unlimited virtual selection, limited source selection "
                                      f"and no %b in the source names")
                nused = 0
                while nused < MAX_PRINTF_BLOCKS:
                    r = SourceMapping(substitute(m.source_file, nused), substitute(m.source_dataset, nused),
                                      None, ss, True, label)
                    entry, src = probe.open_mapping(r)
                    if entry is not None:
                        POOL.release(entry)
                    if src is None:
                        break
                    nused += 1
                clip = start + (nused - 1) * stride + blk if nused else 0
                pending.append((i, m, "printf", (nused, clip), label))
            clip = pending[-1][3] if pending[-1][2] == "unlimited" else pending[-1][3][1]
            if new_dims[vu] is None or clip > new_dims[vu]:
                new_dims[vu] = clip
        shape = []
        for d in range(rank):
            if new_dims[d] is None:
                shape.append(self.stored[d])
            else:
                shape.append(max(new_dims[d], min_dims[d]))
        self.shape = tuple(shape)
        maps: list[SourceMapping] = []
        for i, m, kind, data, label in pending:
            vs = m.virtual_selection
            if kind == "limited":
                if has_printf(m.source_file) or has_printf(m.source_dataset):
                    raise FormatError(f"{label}: %b in the source names of a limited mapping")
                vsel = build_selection(vs, self.shape, None, label)
                if vsel is not None:
                    maps.append(SourceMapping(substitute(m.source_file, None), substitute(m.source_dataset, None),
                                              vsel, m.source_selection, True, label))
            elif kind == "unlimited":
                vsel = build_selection(vs, self.shape, data, label)
                if vsel is not None and vsel.n:
                    maps.append(SourceMapping(substitute(m.source_file, None), substitute(m.source_dataset, None),
                                              vsel, m.source_selection, False, label))
            else:
                nused, _ = data
                vu = vs.unlimited_dim
                start, stride, count, block = (list(v) for v in vs.regular)
                for j in range(nused):
                    s2 = list(start)
                    c2 = list(count)
                    s2[vu] = start[vu] + j * stride[vu]
                    c2[vu] = 1
                    sub = SEL.Selection("hyperslab", vs.rank, regular=(tuple(s2), tuple(stride), tuple(c2), tuple(block)))
                    vsel = build_selection(sub, self.shape, None, label)
                    if vsel is not None:
                        maps.append(SourceMapping(substitute(m.source_file, j), substitute(m.source_dataset, j),
                                                  vsel, m.source_selection, True, f"{label} block {j}"))
        self.maps = maps


def check_type(ds) -> None:
    """Refuse variable-length and reference data: its bytes point into the source files."""
    if is_converted(ds.datatype):
        raise Unsupported(f"{ds.path}: virtual dataset of {describe(ds.datatype)} (variable-length or reference "
                          f"data pointing into source files)")


def _build_plan(ds) -> Plan:
    with NestingGuard(guard_key(ds), ds.path):
        return Plan(ds)


def plan_of(ds) -> Plan:
    """The plan, cached in the file's metadata cache under the dataset's address."""
    return ds.cached("vds plan", partial(_build_plan, ds),
                     lambda plan: 500 + approx_size(plan.block) + maps_nbytes(plan.maps))
