"""Virtual datasets (layout class 3): row-major bytes assembled from source datasets.

The mapping list lives in a global heap object (format/vds_mapping.py). Each mapping pairs a
selection in the virtual dataset with a selection in a source dataset; the k-th element of one
(in the selection's iteration order: row-major for hyperslabs and "all", stored order for
points) is the k-th element of the other, as in libhdf5 (H5Dvirtual.c).

Serving a read: the requested byte range becomes element boxes (chunk_grid.linear_boxes); for
each box and each mapping the selected elements inside the box and their ordinals are computed
per dimension (hyperslabs, "all" and product-shaped block lists are products of 1-D sets), the
ordinals are turned into source coordinates, and only those source elements are read, in
bounded boxes (chunk by chunk for chunked sources, row runs otherwise). Nothing proportional to
the dataset is held in memory, except for irregular block lists and point selections, which are
enumerated (at most MAX_EXPLICIT elements, else Unsupported: storage/selection_geometry.py).

Behaviours (libhdf5 2.0 is the reference, default access properties):
- Source file "." is the file holding the virtual dataset. Other names: an absolute name is
  tried as is; a relative name (or the base name of an absolute one that is missing) is tried
  under each directory of the HDF5_VDS_PREFIX environment variable (":"-separated, "${ORIGIN}"
  replaced by the virtual dataset's directory) and then in the virtual dataset file's
  directory. libhdf5 finally tries the name relative to the process's current directory; a
  mount daemon's current directory means nothing, so we do not. The H5Pset_virtual_prefix
  access property is a per-process setting and does not apply.
- A remote virtual dataset's source files are the objects beside it (storage/remote/siblings.py),
  fetched with its options; HDF5_VDS_PREFIX is not applied. An absolute name is a local path,
  never opened: its base name is tried beside the file, else FormatError naming it. A missing
  object (404) is a missing file. The pool keys a remote file by its URL and keeps the version
  pinned when it was opened; a process never opens a second version of one source object.
- Source dataset names are resolved from the source file's root group (hard links only).
- Printf-style names in mappings with an unlimited virtual selection and a limited source
  selection: "%b" is the block number, "%%" a percent sign (in both names). Blocks are probed
  from 0 up to the first missing source (the default printf gap of 0).
- Missing source files (no such file) and missing source datasets read as the fill value,
  like unmapped elements (libhdf5 does the same). A source file that exists but cannot be
  opened or parsed answers FormatError (EIO) naming it: libhdf5 would quietly show fill
  values, but we do not serve made-up data for a file that is there and broken.
- A limited source selection outside the source's current extent, or an "all" source selection
  whose element count differs from the virtual selection: FormatError (libhdf5 errors too).
- The extent of a virtual dataset with unlimited mappings is recomputed from the sources when
  the source is built (libhdf5's default view, H5D_VDS_LAST_AVAILABLE): `virtual_extent(ds)`.
  The stored dataspace can be stale (libhdf5 writes (0,) for a printf mapping).
- Types: the source datatype must equal the virtual dataset's (message versions aside);
  otherwise Unsupported naming both. Variable-length and reference types are refused: their
  bytes point into the source file's heaps.
- A virtual dataset that maps itself, directly or through other virtual datasets, answers
  FormatError (also beyond MAX_DEPTH levels of nesting).
- Source files are opened with H5File.open and kept in a bounded, shared, thread-safe LRU
  pool (POOL_SIZE files, model/virtual_files.py); a file in use is closed only after its last user is done.
- allocated() is 0: the data lives in the sources.

Writing (`virtual_write`, libhdf5's H5D__virtual_write is the reference) maps the written
elements through the same plan and hands each source dataset of the virtual dataset's own file
(name "." or a name that resolves to that file) its runs of consecutive elements; the caller
writes them. Elements of a source in another file: ReadOnly (EROFS) naming it (a mount writes
one file); a remote virtual dataset is read-only: ReadOnly. Elements that no mapping stores
(unmapped, a missing source dataset, past an unlimited source's extent): CannotWrite (ENOTSUP).
Either refusal comes before any write.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import threading
from functools import partial
from math import prod

import numpy as np

from ..errors import CannotWrite, FormatError, H5fsError, InvalidWrite, NotFound, ReadOnly, TooLarge, Unsupported
from ..format import selection as S
from ..format import vds_mapping
from ..storage.chunk_grid import linear_boxes
from ..storage.remote.siblings import LocalPathRefused, canonical, same_object
from ..storage.selection_geometry import (RegDim, build_selection, clip_extent_match, paired_boxes,
                                          selection_ends, selection_nbytes)
from ..storage.sources import NOWAIT, RawSource
from ..storage.unfiltered_read import Miss
from .cache_size import approx_size
from .virtual_files import POOL, PoolEntry, has_printf, remote_source_candidates, source_candidates, substitute
from .virtual_read import gather, read_into

MAX_DEPTH = 16                 # nesting of virtual datasets whose sources are virtual
MAX_PRINTF_BLOCKS = 1 << 20    # source blocks probed for one printf mapping
MAX_CHECKED = 4096             # source datasets whose type a virtual source remembers as checked


_active = threading.local()


class _Guard:
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


def _key(ds):
    f = ds.file
    return (canonical(f.path) if f.remote is not None else os.path.realpath(f.path), ds.address)


def _norm_type(dt):
    """A datatype as a comparable value, message versions left out."""
    if dataclasses.is_dataclass(dt):
        return (type(dt).__name__,) + tuple((f.name, _norm_type(getattr(dt, f.name)))
                                           for f in dataclasses.fields(dt) if f.name != "version")
    if isinstance(dt, (tuple, list)):
        return tuple(_norm_type(x) for x in dt)
    return dt


# ------------------------------------------------------------------------------- mappings

class _Resolved:
    """One mapping with its (clipped) virtual selection and a concrete source name."""

    def __init__(self, file_name: str, dset_name: str, vsel, src_spec: S.Selection, pairs_exact: bool, label: str):
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


class VirtualSource(RawSource):
    def __init__(self, ds, shape: tuple[int, ...], maps: list[_Resolved]):
        super().__init__(prod(shape) * ds.itemsize)
        self.ds = ds
        self.shape = shape
        self.itemsize = ds.itemsize
        self.maps = maps
        self.fill = ds.fill_value
        self._vtype = _norm_type(ds.datatype)
        self._checked: dict[int, object] = {}   # id -> source dataset of another file whose type matched
        self._guard_key = _key(ds)

    # -- sources ----------------------------------------------------------------------------
    def _open(self, m: _Resolved, nowait: bool = False):
        """(pool entry or None, source dataset or None) for a mapping; None when missing
        (`nowait`: Miss rather than open a source file or find a dataset in it)."""
        if m.file_name == ".":
            return None, self._dataset(self.ds.file, m, None)
        for cand, is_me in self._candidates(m):
            if is_me:
                return None, self._dataset(self.ds.file, m, None)
            e = POOL.acquire(cand, nowait, self.ds.file.remote)
            if e is None:
                continue
            try:
                if nowait and m.dset_name not in e.datasets:
                    raise Miss
                src = self._dataset(e.file, m, e)
            except BaseException:
                POOL.release(e)
                raise
            return e, src
        if self.ds.file.remote is not None and m.file_name.startswith("/"):
            raise LocalPathRefused(f"{m.label}: source file {m.file_name!r} is an absolute local path, which a "
                                   f"remote object ({self.ds.file.path}) may not make the mount read, and "
                                   f"{posixpath.basename(m.file_name)!r} is not beside it")
        return None, None

    def _candidates(self, m: _Resolved) -> list[tuple[str, bool]]:
        if m.candidates is None:
            f = self.ds.file
            if f.remote is not None:
                m.candidates = [(u, same_object(u, f.path)) for u in remote_source_candidates(m.file_name, f.path)]
            else:
                me = os.path.realpath(f.path)
                m.candidates = [(c, os.path.realpath(c) == me) for c in source_candidates(m.file_name, f.path)]
        return m.candidates

    def elsewhere(self, m: _Resolved) -> str | None:
        """None when the mapping's source file is the virtual dataset's own file, else the other
        file's path (its stored name when no candidate exists), found as `_open` finds it."""
        if m.file_name == ".":
            return None
        local = self.ds.file.remote is None
        for cand, is_me in self._candidates(m):
            if is_me:
                return None
            if local:
                try:
                    os.stat(cand)
                except (FileNotFoundError, NotADirectoryError):
                    continue
            return cand
        return m.file_name

    def _dataset(self, f, m: _Resolved, entry: PoolEntry | None):
        cache = entry.datasets if entry is not None else None
        if cache is not None and m.dset_name in cache:
            src = cache[m.dset_name]
        else:
            from .dataset import Dataset
            try:
                obj = f.resolve(m.dset_name)
            except NotFound:
                obj = None
            src = obj if isinstance(obj, Dataset) else None
            if cache is not None:
                cache[m.dset_name] = src
        if src is None:
            return None
        if entry is not None and self._checked.get(id(src)) is src:
            return src
        if _norm_type(src.datatype) != self._vtype:
            from .dtypes import describe
            raise Unsupported(f"{self.ds.path}: source {m.file_name}:{m.dset_name} has type "
                              f"{describe(src.datatype)}, the virtual dataset {describe(self.ds.datatype)}; "
                              f"type conversion is not supported")
        if entry is not None and len(self._checked) < MAX_CHECKED:   # another file: it changes only reopened
            self._checked[id(src)] = src
        return src

    # -- reading --------------------------------------------------------------------------------
    def read(self, offset: int, size: int, flags: int = 0) -> bytes | memoryview:
        """The bytes, assembled once into one buffer: the fill value, then each mapping's part
        of each box read straight into place (later mappings win where they overlap).
        `flags` (RWF_NOWAIT): Miss when a source would need the disk, a file opened or decoding."""
        offset, size = self.clip(offset, size)
        if size == 0:
            return b""
        isz = self.itemsize
        e0, e1 = offset // isz, -(-(offset + size) // isz)
        out = np.empty((e1 - e0, isz), np.uint8)
        pos = 0
        boxes = linear_boxes(self.shape, e0, e1)
        remote = self.ds.file.remote
        if remote is not None and not flags:   # the source files this read needs, opened together
            POOL.open_all([c for m in self.maps if m.file_name != "." and any(m.hits(*b) for b in boxes)
                           for c, is_me in self._candidates(m) if not is_me][:POOL.size], remote)
        with _Guard(self._guard_key, self.ds.path):
            for start, count in boxes:
                n = prod(count)
                self._box(start, count, out[pos:pos + n], flags)
                pos += n
        skip = offset - e0 * isz
        return memoryview(out.reshape(-1))[skip:skip + size]

    def read_cached(self, offset: int, size: int) -> memoryview | bytes | None:
        """The bytes when every source serves its part from the page cache (served on the FUSE
        thread: a worker hop costs more than a read of 1 MiB), else None."""
        if not NOWAIT:
            return None
        try:
            return self.read(offset, size, NOWAIT)
        except Miss:
            return None

    def _box(self, start: tuple[int, ...], count: tuple[int, ...], out: np.ndarray, flags: int) -> None:
        """The mapped elements of one box into `out` (its elements, row-major: (n, itemsize)):
        the fill value first, unless one mapping's boxes cover it all."""
        held = []
        try:
            plans = []
            for m in self.maps:
                if not m.hits(start, count):
                    continue
                entry, src = self._open(m, bool(flags))
                if entry is not None:
                    held.append(entry)
                if src is None:
                    continue                            # missing source: fill value
                sshape = src.shape if src.shape else (1,)
                found = paired_boxes(m.vsel, _source_selection(m, sshape), start, count)
                if found is None and flags:
                    raise Miss
                plans.append((m, src, sshape, found))
            whole = (len(plans) == 1 and plans[0][3] is not None
                     and sum(prod(n) for _, _, n in plans[0][3]) == prod(count))
            if not whole:
                out[...] = 0 if not self.fill or not any(self.fill) else np.frombuffer(self.fill, np.uint8)
            view = out.reshape(count + (self.itemsize,))
            for m, src, sshape, found in plans:
                if found is not None:
                    for dst, sstart, scount in found:
                        read_into(src, sshape, sstart, scount, view[dst], flags)
                    continue
                located = m.vsel.locate(start, count)
                paired = None if located is None else _pair(m, src, *located)
                if paired is not None:
                    _, pos, coords = paired
                    out[pos] = gather(src, sshape, coords)
        finally:
            for entry in held:
                POOL.release(entry)

    def allocated(self) -> int:
        return 0

    def footprint(self) -> int:
        return 1000 + _maps_nbytes(self.maps)   # the maps are the plan's: counted in both


def _source_selection(m: _Resolved, sshape: tuple[int, ...]):
    """The mapping's source selection in a source of `sshape`, its element count checked."""
    ssel = m.source_selection(sshape)
    limit = 0 if ssel is None else ssel.n
    if m.pairs_exact and limit != m.vsel.n:
        raise FormatError(f"{m.label}: source selection has {limit} elements, virtual "
                          f"selection {m.vsel.n}")
    return ssel


def _pair(m: _Resolved, src, pos: np.ndarray, ords: np.ndarray):
    """The source's shape, and the box positions and source coordinates of the located elements
    (pos, ords) the mapping pairs with a source element; None when it pairs none of them."""
    sshape = src.shape if src.shape else (1,)
    ssel = _source_selection(m, sshape)
    limit = 0 if ssel is None else ssel.n
    if ords.size and int(ords.max()) >= limit:
        keep = ords < limit
        pos, ords = pos[keep], ords[keep]
        if not len(ords):
            return None
    return sshape, pos, ssel.coords(ords)


# ------------------------------------------------------------------------------ building

def mapping_block(ds) -> vds_mapping.MappingBlock:
    lay = ds.layout
    if lay.vds_heap_address is None:
        return vds_mapping.MappingBlock(0, ())
    data = ds.file.global_heap.get(lay.vds_heap_address, lay.vds_heap_index)
    return vds_mapping.decode(data, ds.file.sizes, f"{ds.path}: virtual dataset mapping")


class _Plan:
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
                r = _Resolved(substitute(m.source_file, None), substitute(m.source_dataset, None),
                              None, ss, False, label)
                entry, src = probe._open(r)
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
                    r = _Resolved(substitute(m.source_file, nused), substitute(m.source_dataset, nused),
                                  None, ss, True, label)
                    entry, src = probe._open(r)
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
        maps: list[_Resolved] = []
        for i, m, kind, data, label in pending:
            vs = m.virtual_selection
            if kind == "limited":
                if has_printf(m.source_file) or has_printf(m.source_dataset):
                    raise FormatError(f"{label}: %b in the source names of a limited mapping")
                vsel = build_selection(vs, self.shape, None, label)
                if vsel is not None:
                    maps.append(_Resolved(substitute(m.source_file, None), substitute(m.source_dataset, None),
                                          vsel, m.source_selection, True, label))
            elif kind == "unlimited":
                vsel = build_selection(vs, self.shape, data, label)
                if vsel is not None and vsel.n:
                    maps.append(_Resolved(substitute(m.source_file, None), substitute(m.source_dataset, None),
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
                    sub = S.Selection("hyperslab", vs.rank, regular=(tuple(s2), tuple(stride), tuple(c2), tuple(block)))
                    vsel = build_selection(sub, self.shape, None, label)
                    if vsel is not None:
                        maps.append(_Resolved(substitute(m.source_file, j), substitute(m.source_dataset, j),
                                              vsel, m.source_selection, True, f"{label} block {j}"))
        self.maps = maps


def _check_type(ds) -> None:
    from .dtypes import is_converted
    if is_converted(ds.datatype):
        from .dtypes import describe
        raise Unsupported(f"{ds.path}: virtual dataset of {describe(ds.datatype)} (variable-length or reference "
                          f"data pointing into source files)")


def _build_plan(ds) -> _Plan:
    with _Guard(_key(ds), ds.path):
        return _Plan(ds)


def _maps_nbytes(maps: list[_Resolved]) -> int:
    return sum(600 + selection_nbytes(m.vsel) + 2 * approx_size(m.src_spec) for m in maps)


def _plan(ds) -> _Plan:
    """The plan, cached in the file's metadata cache under the dataset's address."""
    return ds.cached("vds plan", partial(_build_plan, ds),
                     lambda plan: 500 + approx_size(plan.block) + _maps_nbytes(plan.maps))


def virtual_extent(ds) -> tuple[int, ...]:
    """The current extent of a virtual dataset (stored dims, or recomputed from the sources
    for mappings with unlimited selections, as libhdf5's H5D_VDS_LAST_AVAILABLE view does)."""
    return _plan(ds).shape


def virtual_source(ds, size: int) -> RawSource:
    """The RawSource of a virtual dataset. `size` (from the stored dataspace) is only a hint:
    the source's size follows virtual_extent(ds)."""
    _check_type(ds)
    plan = _plan(ds)
    return VirtualSource(ds.detached(), plan.shape, plan.maps)  # kept in ds's state


def virtual_write(ds, offset: int, data: bytes, write_source) -> None:
    """Write whole elements (`data` at byte `offset` of the raw view of virtual dataset `ds`)
    through to the source datasets of its file: `write_source(source_ds, source_offset, piece)`
    once per run of consecutive row-major elements of each source. Every element goes to every
    mapping that selects it (a later mapping's value wins where two write one source element,
    as libhdf5 writes the mappings in order). Nothing is written when any element maps to a
    source in another file (ReadOnly) or to no source (CannotWrite)."""
    if ds.file.remote is not None:
        raise ReadOnly(f"{ds.path}: {ds.file.path} is a remote object, read-only")
    _check_type(ds)
    vsrc: VirtualSource = ds.source
    isz = vsrc.itemsize
    if offset % isz or len(data) % isz:
        raise InvalidWrite(f"{ds.path}: virtual write of {len(data)} bytes at {offset}: not whole elements")
    if offset + len(data) > vsrc.size:
        raise TooLarge(f"{ds.path}: a virtual dataset of {vsrc.size} bytes cannot grow "
                       f"(write up to byte {offset + len(data)})")
    e0 = offset // isz
    values = np.frombuffer(data, np.uint8).reshape(-1, isz)
    with _Guard(_key(ds), ds.path):
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
            src = vsrc._dataset(ds.file, m, None)
            paired = None if src is None else _pair(m, src, *hit)
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


def virtual_facts(ds) -> dict[str, str]:
    """Readable facts: {"virtual_sources": "a.h5:/data[0:10] -> [0, 0:10]; ...", ...}."""
    block = mapping_block(ds)
    items = []
    for m in block.entries:
        items.append(f"{m.source_file}:{m.source_dataset}{m.source_selection.text()} -> "
                     f"{m.virtual_selection.text()}")
    out = {"virtual_sources": "; ".join(items), "virtual_mappings": str(len(block.entries))}
    try:
        shape = virtual_extent(ds)
    except H5fsError as e:
        if e.transient:   # facts are kept: a network fault must not drop one for good
            raise
        return out
    if shape != tuple(ds.dataspace.dims):
        out["virtual_extent"] = "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
    return out
