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
enumerated (at most MAX_EXPLICIT elements, else Unsupported).

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
  pool (POOL_SIZE files); a file in use is closed only after its last user is done.
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
import itertools
import os
import posixpath
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from math import prod

import numpy as np

from ..errors import CannotWrite, FormatError, H5fsError, InvalidWrite, NotFound, ReadOnly, TooLarge, Unsupported
from ..format import selection as S
from ..format import vds_mapping
from ..storage.byte_source import WouldBlock, on_event_loop_thread
from ..storage.chunk_grid import linear_boxes
from ..storage.remote import RemoteOptions
from ..storage.remote.client import RemoteError, RemoteNotFound
from ..storage.remote.siblings import LocalPathRefused, canonical, same_object, sibling_url
from ..storage.sources import NOWAIT, RawSource
from ..storage.unfiltered_read import Miss
from .objects import approx_size
from .virtual_read import gather, read_into

MAX_DEPTH = 16                 # nesting of virtual datasets whose sources are virtual
MAX_EXPLICIT = 1 << 22         # elements of an enumerated (non-product) selection
MAX_PRINTF_BLOCKS = 1 << 20    # source blocks probed for one printf mapping
POOL_SIZE = 64                 # source files kept open
MAX_CHECKED = 4096             # source datasets whose type a virtual source remembers as checked
MAX_PIECES = 4096              # boxes one mapping's part of a read box may pair as, else elements


# ----------------------------------------------------------------------------- 1-D sets

def _expand(bs: np.ndarray, lens: np.ndarray, base: np.ndarray, lo: int, hi: int):
    """Coordinates in [lo, hi) of blocks (start bs, length lens, first ordinal base) and their ordinals."""
    a = np.maximum(bs, lo)
    b = np.minimum(bs + lens, hi)
    keep = b > a
    if not keep.all():
        a, b, bs, base = a[keep], b[keep], bs[keep], base[keep]
    n = b - a
    total = int(n.sum())
    if total == 0:
        e = np.empty(0, np.int64)
        return e, e
    before = np.concatenate(([0], np.cumsum(n)[:-1]))
    coords = np.repeat(a - before, n) + np.arange(total, dtype=np.int64)
    ords = coords - np.repeat(bs, n) + np.repeat(base, n)
    return coords, ords


class RegDim:
    """`count` blocks of `block` coordinates every `stride` from `start`; nothing at or past `limit`."""

    def __init__(self, start: int, stride: int, count: int | None, block: int | None, limit: int | None = None):
        if block is None:                                  # unlimited block (count 1)
            if limit is None:
                raise FormatError("unlimited hyperslab block used without an extent")
            count, block = (1, max(0, limit - start)) if limit > start else (0, 1)
            limit = None
        if count is None:
            if limit is None:
                raise FormatError("unlimited hyperslab count used without an extent")
            count = 0 if limit <= start else -(-(limit - start) // stride)
        elif limit is not None:
            count = 0 if limit <= start else min(count, -(-(limit - start) // stride) if stride else 1)
        self.start, self.stride, self.count, self.block = start, stride, count, block
        if count == 0 or block == 0:
            self.count, self.last, self.n = 0, 0, 0
            return
        last_start = start + (count - 1) * stride
        self.last = block if limit is None else min(block, limit - last_start)
        self.n = (count - 1) * block + self.last

    def bounds(self) -> tuple[int, int]:
        return self.start, self.start + (self.count - 1) * self.stride + self.last - 1

    def within(self, lo: int, hi: int):
        if self.n == 0 or hi <= lo:
            e = np.empty(0, np.int64)
            return e, e
        s, st, b = self.start, self.stride, self.block
        if self.count == 1:
            q0, q1 = 0, 0
        else:
            q0 = max(0, (lo - s - b) // st + 1)
            q1 = min(self.count - 1, (hi - 1 - s) // st)
        if q1 < q0:
            e = np.empty(0, np.int64)
            return e, e
        q = np.arange(q0, q1 + 1, dtype=np.int64)
        lens = np.full(len(q), b, np.int64)
        if q1 == self.count - 1:
            lens[-1] = self.last
        return _expand(s + q * st, lens, q * b, lo, hi)

    def coords(self, k: np.ndarray) -> np.ndarray:
        if self.block == 1:
            return self.start + k * self.stride
        if self.count == 1:
            return self.start + k
        q, r = np.divmod(k, self.block)
        return self.start + q * self.stride + r


class IntDim:
    """Sorted disjoint intervals (starts, lengths)."""

    def __init__(self, starts: np.ndarray, lengths: np.ndarray):
        self.starts = starts.astype(np.int64)
        self.lengths = lengths.astype(np.int64)
        self.ends = self.starts + self.lengths
        self.cum = np.concatenate(([0], np.cumsum(self.lengths))).astype(np.int64)
        self.n = int(self.cum[-1])

    def bounds(self) -> tuple[int, int]:
        return int(self.starts[0]), int(self.ends[-1]) - 1

    def within(self, lo: int, hi: int):
        i0 = int(np.searchsorted(self.ends, lo, "right"))
        i1 = int(np.searchsorted(self.starts, hi, "left"))
        if i1 <= i0:
            e = np.empty(0, np.int64)
            return e, e
        return _expand(self.starts[i0:i1], self.lengths[i0:i1], self.cum[i0:i1], lo, hi)

    def coords(self, k: np.ndarray) -> np.ndarray:
        i = np.searchsorted(self.cum, k, "right") - 1
        return self.starts[i] + (k - self.cum[i])


# ------------------------------------------------------------------------ N-D selections

class ProductSel:
    """The product of 1-D sets, iterated row-major."""

    def __init__(self, dims: list):
        self.dims = dims
        self.sizes = [d.n for d in dims]
        self.n = prod(self.sizes)
        self.radix = [prod(self.sizes[i + 1:]) for i in range(len(dims))]

    def bounds(self):
        if self.n == 0:
            return None
        b = [d.bounds() for d in self.dims]
        return tuple(x[0] for x in b), tuple(x[1] for x in b)

    def locate(self, start, count):
        """(flat positions in the box, ordinals) of the selected elements inside the box."""
        per = [d.within(s, s + c) for d, s, c in zip(self.dims, start, count)]
        if any(len(c) == 0 for c, _ in per):
            return None
        rank = len(per)
        pos = np.zeros((1,) * rank, np.int64)
        ords = np.zeros((1,) * rank, np.int64)
        for d, ((coords, o), s) in enumerate(zip(per, start)):
            shp = [1] * rank
            shp[d] = len(coords)
            pos = pos + ((coords - s) * prod(count[d + 1:])).reshape(shp)
            ords = ords + (o * self.radix[d]).reshape(shp)
        return pos.ravel(), ords.ravel()

    def coords(self, ords: np.ndarray) -> np.ndarray:
        cols = []
        for i, (d, r, n) in enumerate(zip(self.dims, self.radix, self.sizes)):
            k = ords // r if r != 1 else ords
            if i:                       # the first dimension's quotient is already < n
                k = k % n
            cols.append(d.coords(k))
        return np.stack(cols, axis=1) if cols else np.zeros((len(ords), 0), np.int64)


class ExplicitSel:
    """Enumerated points in iteration order."""

    def __init__(self, points: np.ndarray, shape: tuple[int, ...] | None = None):
        self.points = points
        self.n = len(points)
        self._shape = shape
        self._sorted = None

    def bounds(self):
        if self.n == 0:
            return None
        return tuple(int(v) for v in self.points.min(0)), tuple(int(v) for v in self.points.max(0))

    def _index(self):
        if self._sorted is None:
            shape = self._shape
            inside = np.all(self.points < np.asarray(shape, np.int64), axis=1)
            ords = np.nonzero(inside)[0]
            lin = np.ravel_multi_index(tuple(self.points[ords].T), shape) if len(ords) else np.empty(0, np.int64)
            order = np.argsort(lin, kind="stable")
            self._sorted = (lin[order].astype(np.int64), ords[order].astype(np.int64))
        return self._sorted

    def locate(self, start, count):
        lin, ords = self._index()
        shape = self._shape
        lo = int(np.ravel_multi_index(tuple(start), shape))
        last = tuple(s + c - 1 for s, c in zip(start, count))
        hi = int(np.ravel_multi_index(last, shape)) + 1
        i0, i1 = int(np.searchsorted(lin, lo, "left")), int(np.searchsorted(lin, hi, "left"))
        if i1 <= i0:
            return None
        sel_lin, sel_ords = lin[i0:i1], ords[i0:i1]
        if hi - lo == prod(count):          # the box is one row-major run (linear_boxes' boxes are)
            return sel_lin - lo, sel_ords
        pts = np.stack(np.unravel_index(sel_lin, shape), axis=1)
        st, cn = np.asarray(start), np.asarray(count)
        inside = np.all((pts >= st) & (pts < st + cn), axis=1)
        pts, sel_ords = pts[inside], sel_ords[inside]
        if not len(pts):
            return None
        return np.ravel_multi_index(tuple((pts - st).T), tuple(count)), sel_ords

    def coords(self, ords: np.ndarray) -> np.ndarray:
        return self.points[ords]


def build_selection(sel: S.Selection, shape: tuple[int, ...], clip: int | None = None, what: str = ""):
    """A ProductSel/ExplicitSel for a decoded selection in a dataspace of `shape`; the unlimited
    dimension of a regular hyperslab is clipped at `clip`. None for an empty selection."""
    rank = len(shape)
    if sel.kind == "none":
        return None
    if sel.kind == "all":
        return ProductSel([RegDim(0, 1, 1, e) for e in shape])
    if sel.rank != rank:
        raise FormatError(f"{what}: selection of rank {sel.rank} in a dataspace of rank {rank}")
    if sel.kind == "points":
        if len(sel.points) > MAX_EXPLICIT:
            raise Unsupported(f"{what}: point selection of {len(sel.points)} points")
        return ExplicitSel(sel.points, shape)
    if sel.regular is not None:
        u = sel.unlimited_dim
        dims = [RegDim(s, st, c, b, clip if d == u else None)
                for d, (s, st, c, b) in enumerate(zip(*sel.regular))]
        return ProductSel(dims)
    blocks = sel.blocks
    n = len(blocks)
    if n == 0:
        return None
    per = []
    for d in range(rank):
        u = np.unique(blocks[:, :, d], axis=0)
        if len(u) > 1 and bool((u[1:, 0] <= u[:-1, 1]).any()):
            per = None
            break
        per.append(u)
    if per is not None and prod(len(u) for u in per) == n and len(np.unique(blocks.reshape(n, -1), axis=0)) == n:
        return ProductSel([IntDim(u[:, 0], u[:, 1] - u[:, 0] + 1) for u in per])
    sizes = np.prod(blocks[:, 1, :] - blocks[:, 0, :] + 1, axis=1)
    if int(sizes.sum()) > MAX_EXPLICIT:
        raise Unsupported(f"{what}: irregular hyperslab of {int(sizes.sum())} elements")
    pts = []
    for b in blocks:
        grid = np.indices(tuple(int(x) for x in b[1] - b[0] + 1)).reshape(rank, -1).T + b[0]
        pts.append(grid)
    points = np.unique(np.concatenate(pts), axis=0)        # row-major order, overlaps merged
    return ExplicitSel(points.astype(np.int64), shape)


# ------------------------------------------------------------------------- source files

def _identity(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class _Entry:
    def __init__(self, file, ident):
        self.file = file        # None: a remote object known to be missing
        self.ident = ident
        self.users = 0
        self.evicted = False
        self.datasets: dict[str, object] = {}


class _Pool:
    """Open source files, shared by every virtual dataset; bounded LRU, closed when unused."""

    def __init__(self, size: int):
        self.size = size
        self._entries: OrderedDict[object, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._opening: dict[tuple, threading.Lock] = {}   # one open per remote key (see _acquire_remote)
        self._pinned: dict[tuple, str | None] = {}   # remote key -> version first seen (None: missing)

    def acquire(self, path: str, opened_only: bool = False, remote: RemoteOptions | None = None) -> _Entry | None:
        """The open file at `path` (its use count raised), or None when there is no such file
        (`opened_only`: Miss rather than open it, for a read that must not wait); `remote`: the
        options `path`, a URL, is fetched with."""
        if remote is not None:
            return self._acquire_remote(path, remote, opened_only)
        # a file replaced, changed or removed since it was opened is opened again (or missing);
        # files are told apart by device and inode (every name of one file shares its entry)
        try:
            ident = _identity(os.stat(path))
        except (FileNotFoundError, NotADirectoryError):
            ident = None
        except OSError as exc:
            raise FormatError(f"virtual dataset source file {path}: {exc.strerror or exc}") from exc
        key = path if ident is None else ident[:2]
        stale = None
        with self._lock:
            e = self._entries.get(key)
            if e is not None:
                if e.ident == ident:
                    self._entries.move_to_end(key)
                    e.users += 1
                    return e
                del self._entries[key]
                e.evicted = True
                if e.users == 0:
                    stale = e.file
        if stale is not None:
            stale.close()
        if ident is None:
            return None
        if opened_only:
            raise Miss
        from .file import H5File
        try:
            f = H5File.open(os.path.realpath(path))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise FormatError(f"virtual dataset source file {path}: {exc.strerror or exc}") from exc
        except H5fsError as exc:
            raise FormatError(f"virtual dataset source file {path}: {exc}") from exc
        return self._insert(key, f, ident)

    def _acquire_remote(self, url: str, options: RemoteOptions, opened_only: bool) -> _Entry | None:
        """A remote source file, keyed by its URL (and options) rather than a stat: while in the
        pool it is the version pinned when it was opened (checking for a newer one would cost a
        request per read; a changed object answers EIO from its conditional reads instead). A
        missing object (404) is remembered as missing: a hole in the mapping costs one request
        per mount, not one per read. An object opened again after eviction must still be the
        version first seen (or still missing): a mount never serves two versions of a source.
        One open per URL at a time (its block cache entry is locked by one user); on the event
        loop's thread, which never waits for a network, a worker opens it (WouldBlock)."""
        key = ("remote", canonical(url), options)
        found = self._lookup(key)
        if found is not None or opened_only:
            return self._found(found, opened_only)
        if on_event_loop_thread():
            raise WouldBlock(lambda: self._open_remote(key, url, options, keep=False))
        return self._open_remote(key, url, options, keep=True)

    def _open_remote(self, key, url: str, options: RemoteOptions, keep: bool) -> _Entry | None:
        """Open the remote file under `key` unless another thread did; its entry (used once
        when `keep`, else not used: for the request answered again once it is open)."""
        with self._lock:
            opening = self._opening.setdefault(key, threading.Lock())
        with opening:
            found = self._lookup(key)
            if found is not None:
                e = self._found(found, False)
            else:
                from .file import H5File
                try:
                    f = H5File.open(url, remote=options)
                except RemoteNotFound:
                    f = None
                except RemoteError as exc:    # a network fault stays one (transient): tried again next time
                    raise type(exc)(f"virtual dataset source file: {exc}") from exc
                except H5fsError as exc:
                    raise FormatError(f"virtual dataset source file {url}: {exc}") from exc
                ident = None if f is None else f.source.client.version.key()
                first = self._pinned.setdefault(key, ident)
                if first != ident:
                    if f is not None:
                        f.close()
                    raise FormatError(f"virtual dataset source file {url} changed since this process first read "
                                      f"it ({'missing' if first is None else 'version ' + first} then, "
                                      f"{'missing' if ident is None else 'version ' + ident} now): remount to "
                                      f"read it")
                e = self._insert(key, f, ident)
        if e is not None and not keep:
            self.release(e)
        return e

    def open_all(self, urls: list[str], options: RemoteOptions) -> None:
        """Open these remote files together, `requests` at a time (each open costs round trips),
        and leave them in the pool unused. A failure is left for the read's own open to report,
        with the mapping that needed the file."""
        with self._lock:
            todo = {k: u for k, u in ((("remote", canonical(u), options), u) for u in urls)
                    if k not in self._entries}
        if len(todo) < 2:
            return
        if on_event_loop_thread():
            raise WouldBlock(lambda: self.open_all(urls, options))
        with ThreadPoolExecutor(min(len(todo), options.requests), thread_name_prefix="h5fs-open") as pool:
            for fut in [pool.submit(self._open_remote, k, u, options, False) for k, u in todo.items()]:
                try:
                    fut.result()
                except H5fsError:
                    pass

    def _lookup(self, key) -> _Entry | None:
        """The entry under `key` (its use count raised unless it stands for a missing object)."""
        with self._lock:
            e = self._entries.get(key)
            if e is not None:
                self._entries.move_to_end(key)
                if e.file is not None:
                    e.users += 1
            return e

    @staticmethod
    def _found(e: _Entry | None, opened_only: bool) -> _Entry | None:
        if e is None and opened_only:
            raise Miss
        return None if e is None or e.file is None else e

    def _insert(self, key, f, ident) -> _Entry | None:
        """Keep the file `f` just opened (None: missing) under `key`; its entry, used once."""
        close = []
        with self._lock:
            e = self._entries.get(key)
            if e is not None and e.ident == ident:     # another thread opened it meanwhile
                if f is not None:
                    close.append(f)
            else:
                if e is not None:
                    e.evicted = True
                    if e.users == 0 and e.file is not None:
                        close.append(e.file)
                e = self._entries[key] = _Entry(f, ident)
            if e.file is not None:
                e.users += 1
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                _, old = self._entries.popitem(last=False)
                old.evicted = True
                if old.users == 0 and old.file is not None:
                    close.append(old.file)
        for x in close:
            x.close()
        return e if e.file is not None else None

    def remote_files(self) -> list:
        """The remote source files open now."""
        with self._lock:
            return [e.file for key, e in self._entries.items() if key[0] == "remote" and e.file is not None]

    def release(self, e: _Entry) -> None:
        with self._lock:
            e.users -= 1
            done = e.evicted and e.users == 0
        if done:
            e.file.close()

    def clear(self) -> None:
        with self._lock:
            entries, self._entries = list(self._entries.values()), OrderedDict()
            self._pinned.clear()
            self._opening.clear()
            for e in entries:
                e.evicted = True
            idle = [e for e in entries if e.users == 0 and e.file is not None]
        for e in idle:
            e.file.close()


POOL = _Pool(POOL_SIZE)
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


def substitute(name: str, block: int | None) -> str:
    """A source name with "%b" replaced by the block number and "%%" by "%" (H5Dvirtual.c)."""
    if "%" not in name:
        return name
    out, i = [], 0
    while i < len(name):
        ch = name[i]
        if ch == "%" and i + 1 < len(name) and name[i + 1] in "b%":
            if name[i + 1] == "b":
                if block is None:
                    raise FormatError(f"source name {name!r}: %b in a mapping that is not printf-style")
                out.append(str(block))
            else:
                out.append("%")
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _has_printf(name: str) -> bool:
    return "%b" in name.replace("%%", "")


def source_candidates(name: str, vds_path: str) -> list[str]:
    """Paths tried for a source file name, in order (see the module docstring)."""
    origin = os.path.dirname(os.path.abspath(vds_path))
    out = []
    if os.path.isabs(name):
        out.append(name)
        rel = os.path.basename(name)
    else:
        rel = name
    env = os.environ.get("HDF5_VDS_PREFIX")
    if env:
        for p in env.split(":"):
            if p:
                out.append(os.path.join(p.replace("${ORIGIN}", origin), rel))
    out.append(os.path.join(origin, rel))
    return out


def remote_source_candidates(name: str, url: str) -> list[str]:
    """URLs tried for a source file name of the remote virtual dataset at `url`: the object
    beside it (HDF5_VDS_PREFIX names local directories: not applied). An absolute name is a local
    path, never opened (storage/remote/siblings.py); its base name is tried beside the file, as
    libhdf5 tries a missing absolute name's base name in the file's directory."""
    if name.startswith("/"):
        base = posixpath.basename(name)
        return [sibling_url(url, base)] if base else []
    return [sibling_url(url, name)]


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

    def _dataset(self, f, m: _Resolved, entry: _Entry | None):
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
                found = _pieces(m.vsel, _source_selection(m, sshape), start, count)
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


def _pieces(vsel, ssel, start: tuple[int, ...], count: tuple[int, ...]):
    """[(slices into the box, source start, source count)]: where the mapping pairs a box of
    the read box with a box of its source. Selections of the same per-dimension sizes pair
    dimension by dimension (the k-th selected index of a dimension with the k-th), so each
    dimension's runs, consecutive on both sides, multiply into boxes. None when they do not
    pair that way, or would make more than MAX_PIECES boxes: the caller pairs elements."""
    if not isinstance(vsel, ProductSel) or not isinstance(ssel, ProductSel) or vsel.sizes != ssel.sizes:
        return None
    per, total = [], 1
    for vd, sd, s, c in zip(vsel.dims, ssel.dims, start, count):
        runs = _runs(vd, sd, s, c)
        if not runs:
            return []
        per.append(runs)
        total *= len(runs)
        if total > MAX_PIECES:
            return None
    return [(tuple(slice(v, v + n) for v, _, n in runs), tuple(x for _, x, _ in runs), tuple(n for _, _, n in runs))
            for runs in itertools.product(*per)]


def _single(d) -> int | None:
    """The first coordinate of a 1-D set that is one block (of d.n coordinates), else None."""
    if isinstance(d, RegDim):
        return d.start if d.count == 1 else None
    return int(d.starts[0]) if len(d.starts) == 1 else None


def _runs(vd, sd, s: int, c: int) -> list[tuple[int, int, int]]:
    """[(offset in [s, s+c), source coordinate, length)]: the runs of one dimension's selected
    coordinates in [s, s+c) that are consecutive on both sides. Single blocks pair by arithmetic."""
    v1, s1 = _single(vd), _single(sd)
    if v1 is not None and s1 is not None:
        a, b = max(s, v1), min(s + c, v1 + vd.n)
        return [(a - s, s1 + a - v1, b - a)] if a < b else []
    vc, ords = vd.within(s, s + c)
    if not len(vc):
        return []
    sc = sd.coords(ords)
    cuts = np.flatnonzero((np.diff(vc) != 1) | (np.diff(sc) != 1)) + 1
    a, b = np.concatenate(([0], cuts)), np.concatenate((cuts, [len(vc)]))
    return list(zip((vc[a] - s).tolist(), sc[a].tolist(), (b - a).tolist()))


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


def _bounds_end(sel: S.Selection, skip: int | None) -> list[int | None]:
    """Per dimension, the last selected coordinate (None for the unlimited dimension `skip`)."""
    if sel.regular is not None:
        out = []
        for d, (s, st, c, b) in enumerate(zip(*sel.regular)):
            out.append(None if d == skip else s + (c - 1) * st + b - 1)
        return out
    if sel.kind == "points":
        return [int(v) for v in sel.points.max(0)] if len(sel.points) else [None] * sel.rank
    if sel.blocks is not None and len(sel.blocks):
        return [int(v) for v in sel.blocks[:, 1, :].max(0)]
    return [None] * sel.rank


def _clip_match(start: int, stride: int, block: int | None, slices: int) -> int:
    """The virtual extent whose unlimited dimension holds exactly `slices` selected coordinates
    (libhdf5 H5S_hyper_get_clip_extent_match without trailing space)."""
    if slices == 0:
        return 0
    if block is None:                  # unlimited block
        return start + slices
    q, r = divmod(slices - 1, block)
    return start + q * stride + r + 1


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
                for d, e in enumerate(_bounds_end(vs, vu)):
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
                        clip = _clip_match(start, stride, blk, sdim.n)
                finally:
                    if entry is not None:
                        POOL.release(entry)
                pending.append((i, m, "unlimited", clip, label))
            else:                                      # printf: one source per block
                if count is not None or blk is None:
                    raise FormatError(f"{label}: printf-style mapping without an unlimited count")
                if not (_has_printf(m.source_file) or _has_printf(m.source_dataset)):
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
                if _has_printf(m.source_file) or _has_printf(m.source_dataset):
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


def _selection_nbytes(sel) -> int:
    """Memory of a built selection, with room for what it computes on first use (the sorted
    index of an ExplicitSel, a source selection built per source shape)."""
    if isinstance(sel, ExplicitSel):
        return 300 + 3 * sel.points.nbytes
    if isinstance(sel, ProductSel):
        return 300 + sum(300 + (d.starts.nbytes * 4 if isinstance(d, IntDim) else 0) for d in sel.dims)
    return 0


def _maps_nbytes(maps: list[_Resolved]) -> int:
    return sum(600 + _selection_nbytes(m.vsel) + 2 * approx_size(m.src_spec) for m in maps)


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
