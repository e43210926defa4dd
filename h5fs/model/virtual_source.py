"""The bytes of a virtual dataset (model/virtual.py says how they behave): each read box is
filled with the fill value, then each mapping's part of it is read from its source, box by box
where the selections pair as boxes (storage/selection_geometry.py), element by element
otherwise."""

from __future__ import annotations

import dataclasses
import os
import posixpath
from math import prod

import numpy as np

from ..errors import NotFound, Unsupported
from ..storage.chunk_grid import linear_boxes
from ..storage.remote.siblings import LocalPathRefused, same_object
from ..storage.selection_geometry import paired_boxes
from ..storage.sources import NOWAIT, RawSource
from ..storage.unfiltered_read import Miss
from .dtypes import describe
from .virtual_files import POOL, PoolEntry, remote_source_candidates, source_candidates
from .virtual_mapping import NestingGuard, SourceMapping, guard_key, maps_nbytes
from .virtual_read import gather, read_into

MAX_CHECKED = 4096             # source datasets whose type a virtual source remembers as checked


def _norm_type(dt):
    """A datatype as a comparable value, message versions left out."""
    if dataclasses.is_dataclass(dt):
        return (type(dt).__name__,) + tuple((f.name, _norm_type(getattr(dt, f.name)))
                                           for f in dataclasses.fields(dt) if f.name != "version")
    if isinstance(dt, (tuple, list)):
        return tuple(_norm_type(x) for x in dt)
    return dt


class VirtualSource(RawSource):
    def __init__(self, ds, shape: tuple[int, ...], maps: list[SourceMapping]):
        super().__init__(prod(shape) * ds.itemsize)
        self.ds = ds
        self.shape = shape
        self.itemsize = ds.itemsize
        self.maps = maps
        self.fill = ds.fill_value
        self._vtype = _norm_type(ds.datatype)
        self._checked: dict[int, object] = {}   # id -> source dataset of another file whose type matched
        self._guard_key = guard_key(ds)
        # source files open as this one was (H5File.open): the pool cannot import the file
        # module, which reaches this one through Dataset
        self.open_file = type(ds.file).open

    # -- sources ----------------------------------------------------------------------------
    def open_mapping(self, m: SourceMapping, nowait: bool = False):
        """(pool entry or None, source dataset or None) for a mapping; None when missing
        (`nowait`: Miss rather than open a source file or find a dataset in it)."""
        if m.file_name == ".":
            return None, self.source_dataset(self.ds.file, m, None)
        for cand, is_me in self._candidates(m):
            if is_me:
                return None, self.source_dataset(self.ds.file, m, None)
            e = POOL.acquire(cand, self.open_file, nowait, self.ds.file.remote)
            if e is None:
                continue
            try:
                if nowait and m.dset_name not in e.datasets:
                    raise Miss
                src = self.source_dataset(e.file, m, e)
            except BaseException:
                POOL.release(e)
                raise
            return e, src
        if self.ds.file.remote is not None and m.file_name.startswith("/"):
            raise LocalPathRefused(f"{m.label}: source file {m.file_name!r} is an absolute local path, which a "
                                   f"remote object ({self.ds.file.path}) may not make the mount read, and "
                                   f"{posixpath.basename(m.file_name)!r} is not beside it")
        return None, None

    def _candidates(self, m: SourceMapping) -> list[tuple[str, bool]]:
        if m.candidates is None:
            f = self.ds.file
            if f.remote is not None:
                m.candidates = [(u, same_object(u, f.path)) for u in remote_source_candidates(m.file_name, f.path)]
            else:
                me = os.path.realpath(f.path)
                m.candidates = [(c, os.path.realpath(c) == me) for c in source_candidates(m.file_name, f.path)]
        return m.candidates

    def elsewhere(self, m: SourceMapping) -> str | None:
        """None when the mapping's source file is the virtual dataset's own file, else the other
        file's path (its stored name when no candidate exists), found as `open_mapping` finds it."""
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

    def source_dataset(self, f, m: SourceMapping, entry: PoolEntry | None):
        """The mapping's source dataset in H5File `f` (None when missing), its type checked;
        `entry`: the pool entry of `f` when it is another file."""
        cache = entry.datasets if entry is not None else None
        if cache is not None and m.dset_name in cache:
            src = cache[m.dset_name]
        else:
            try:
                obj = f.resolve(m.dset_name)
            except NotFound:
                obj = None
            src = obj if obj is not None and obj.kind == "dataset" else None
            if cache is not None:
                cache[m.dset_name] = src
        if src is None:
            return None
        if entry is not None and self._checked.get(id(src)) is src:
            return src
        if _norm_type(src.datatype) != self._vtype:
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
                           for c, is_me in self._candidates(m) if not is_me][:POOL.size], remote, self.open_file)
        with NestingGuard(self._guard_key, self.ds.path):
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
                entry, src = self.open_mapping(m, bool(flags))
                if entry is not None:
                    held.append(entry)
                if src is None:
                    continue                            # missing source: fill value
                sshape = src.shape if src.shape else (1,)
                found = paired_boxes(m.vsel, m.paired_selection(sshape), start, count)
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
                paired = None if located is None else m.pair(src, *located)
                if paired is not None:
                    _, pos, coords = paired
                    out[pos] = gather(src, sshape, coords)
        finally:
            for entry in held:
                POOL.release(entry)

    def allocated(self) -> int:
        return 0

    def footprint(self) -> int:
        return 1000 + maps_nbytes(self.maps)   # the maps are the plan's: counted in both
