"""Writing a virtual dataset through to its sources (libhdf5's H5D__virtual_write is the
reference; model/virtual.py says what is written and what is refused)."""

from __future__ import annotations

from math import prod

import numpy as np

from ..errors import CannotWrite, InvalidWrite, ReadOnly, TooLarge
from ..storage.chunk_grid import linear_boxes
from .virtual_mapping import NestingGuard, guard_key
from .virtual_plan import check_type
from .virtual_source import VirtualSource


def virtual_write(ds, offset: int, data: bytes, write_source) -> None:
    """Write whole elements (`data` at byte `offset` of the raw view of virtual dataset `ds`)
    through to the source datasets of its file: `write_source(source_ds, source_offset, piece)`
    once per run of consecutive row-major elements of each source. Every element goes to every
    mapping that selects it (a later mapping's value wins where two write one source element,
    as libhdf5 writes the mappings in order). Nothing is written when any element maps to a
    source in another file (ReadOnly) or to no source (CannotWrite)."""
    if ds.file.remote is not None:
        raise ReadOnly(f"{ds.path}: {ds.file.path} is a remote object, read-only")
    check_type(ds)
    vsrc: VirtualSource = ds.source
    isz = vsrc.itemsize
    if offset % isz or len(data) % isz:
        raise InvalidWrite(f"{ds.path}: virtual write of {len(data)} bytes at {offset}: not whole elements")
    if offset + len(data) > vsrc.size:
        raise TooLarge(f"{ds.path}: a virtual dataset of {vsrc.size} bytes cannot grow "
                       f"(write up to byte {offset + len(data)})")
    e0 = offset // isz
    values = np.frombuffer(data, np.uint8).reshape(-1, isz)
    with NestingGuard(guard_key(ds), ds.path):
        for src, lin, idx in _write_plan(ds, vsrc, e0, e0 + len(values)):
            cuts = np.flatnonzero(np.diff(lin) != 1) + 1
            for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(lin)]):
                write_source(src, int(lin[a]) * isz, values[idx[a:b]].tobytes())


def _write_plan(ds, vsrc: VirtualSource, e0: int, e1: int) -> list[tuple[object, np.ndarray, np.ndarray]]:
    """Per source dataset written: its element numbers (row-major, sorted, each once) and, for
    each, the element of the write (0 = e0) it takes its value from."""
    covered = np.zeros(e1 - e0, bool)
    found: dict[int, tuple[object, list]] = {}   # source address -> (dataset, [(mapping, lin, idx)])
    base = 0
    for start, count in linear_boxes(vsrc.shape, e0, e1):
        for i, m in enumerate(vsrc.maps):
            hit = m.vsel.locate(start, count) if m.hits(start, count) else None
            if hit is None:
                continue
            other = vsrc.elsewhere(m)
            if other is not None:
                raise ReadOnly(f"{ds.path}: elements map to {m.dset_name} in {other}, another file than "
                               f"the virtual dataset's; only sources in the same file are written")
            src = vsrc.source_dataset(ds.file, m, None)
            paired = None if src is None else m.pair(src, *hit)
            if paired is None:
                continue                  # a missing source or past its selection: stored nowhere
            sshape, pos, coords = paired
            covered[base + pos] = True
            lin = np.ravel_multi_index(tuple(coords.T), sshape)
            found.setdefault(src.address, (src, []))[1].append((i, lin, base + pos))
        base += prod(count)
    if not covered.all():
        missing = np.flatnonzero(~covered)[:3] + e0
        first = ", ".join(str(tuple(int(c) for c in np.unravel_index(int(k), vsrc.shape))) for k in missing)
        raise CannotWrite(f"{ds.path}: {int((~covered).sum())} written elements (first {first}) map to no "
                          f"source dataset: they hold the fill value and nothing stores them")
    plan = []
    for src, parts in found.values():
        parts.sort(key=lambda p: p[0])                 # mapping order (stable: box order kept)
        lin = np.concatenate([p[1] for p in parts])
        idx = np.concatenate([p[2] for p in parts])
        order = np.argsort(lin, kind="stable")
        lin, idx = lin[order], idx[order]
        last = np.append(lin[1:] != lin[:-1], True)    # the last value written to an element wins
        plan.append((src, lin[last], idx[last]))
    return plan
