"""What the chunk index write tests share: an engine writing chunks through an index kind, a spy
on the index's edits, chunk values and the records h5fs leaves."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from h5fs.format.codec import Writer
from h5fs.format.messages import layout as L
from h5fs.model import messages as M
from h5fs.model.file import H5File
from h5fs.storage.index import ChunkRecord, IndexContext, open_index
from h5fs.storage.object_header.edit import rewrite_message

LEVEL = 4           # h5py's default gzip level


CHUNK = 2


def write_layout(f: H5File, ds, txn, layout: L.DataLayout) -> None:
    w = Writer(f.sizes)
    L.encode(w, layout)
    rewrite_message(txn, ds.header, ds.header.first(M.LAYOUT), w.getvalue())


def region(coords, shape):
    return tuple(slice(c * CHUNK, min(c * CHUNK + CHUNK, s)) for c, s in zip(coords, shape))


def chunk_values(rng, coords, shape) -> np.ndarray:
    """A whole chunk: random values inside the extent, the fill value (0) in the edge padding."""
    v = np.zeros((CHUNK,) * len(shape), "i2")
    sel = region(coords, shape)
    v[tuple(slice(0, s.stop - s.start) for s in sel)] = rng.integers(1, 30000, [s.stop - s.start for s in sel])
    return v


class Engine:
    """Edits dataset "d" of a file through h5fs's engine, one transaction a batch, the way the
    dataset writer does: chunk data into fresh space, old chunk space freed, records put or
    removed, the layout message rewritten when the index returns a new one."""

    def __init__(self, path: Path, comp: str | None):
        self.path, self.comp = path, comp
        self.layouts: list[L.DataLayout] = []   # every new layout an index returned

    def batch(self, puts: dict[tuple, np.ndarray] | None = None, removes: list[tuple] = (), spy=None,
              unfiltered: set[tuple] = frozenset()) -> None:
        """`unfiltered`: chunks stored as they are, their filter mask saying deflate was skipped."""
        with H5File.open(str(self.path), writable=True) as f:
            ds = f.resolve("/d")
            txn = f.store.begin()
            if spy:
                spy(txn)
            space = ds.dataspace
            idx = open_index(IndexContext(txn.reader, ds.layout, space.dims, space.maxdims, bool(ds.filters), "/d"))
            records = []
            for coords, values in (puts or {}).items():
                if coords in removes:   # put, then removed in the same batch
                    continue
                data, mask = values.tobytes(), int(coords in unfiltered)
                if self.comp and not mask:
                    data = zlib.compress(data, LEVEL)
                self._free(txn, idx, coords)
                addr = txn.allocate(len(data))
                txn.write_data(addr, data)
                records.append(ChunkRecord(coords, addr, len(data), mask))
            for coords in removes:
                self._free(txn, idx, coords)
            new = idx.put(txn, records) if records else None
            new = (idx.remove(txn, list(removes)) if removes else None) or new
            if new is not None:
                self.layouts.append(new)
                write_layout(f, ds, txn, new)
            txn.commit()

    @staticmethod
    def _free(txn, idx, coords) -> None:
        old = idx.lookup(coords)
        if old is not None:
            txn.free(old.address, old.size)


def our_records(path: Path) -> dict[tuple, tuple[int, int, int]]:
    with H5File.open(str(path)) as f:
        ds = f.resolve("/d")
        space = ds.dataspace
        idx = open_index(IndexContext(f.reader, ds.layout, space.dims, space.maxdims, bool(ds.filters), "/d"))
        return {r.coords: (r.address, r.size, r.filter_mask) for r in idx.records()}


class Spy:
    """Counts a transaction's reads and staged writes by address (the real methods still run)."""

    def __init__(self):
        self.reads: dict[int, int] = {}
        self.writes: dict[int, int] = {}

    def __call__(self, txn) -> None:
        read, new, in_place = txn.reader.read, txn.write_new, txn.write_in_place

        def count(where, fn):
            def wrapped(addr, *args, **kw):
                where[addr] = where.get(addr, 0) + 1
                return fn(addr, *args, **kw)
            return wrapped

        txn.reader.read = count(self.reads, read)
        txn.write_new = count(self.writes, new)
        txn.write_in_place = count(self.writes, in_place)
