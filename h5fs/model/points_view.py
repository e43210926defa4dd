"""`S.points.npy`: a sparse dataset's defined elements as a NumPy structured array
`[("index", "<u8", (rank,)), ("value", dtype)]`, in row-major order of `index`.

Only the chunks the index holds are read. Making the view decodes every stored chunk's
selection once, to count the elements (the `.npy` header states them); the body is then served
by chunk rows: the chunks sharing their first grid coordinate cover the same rows of the
dataset, so their elements, merged and sorted, are a contiguous run of the body. One chunk row
is kept decoded at a time (a sequential reader decodes each once).
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from itertools import groupby

import numpy as np

from ..errors import Unsupported
from .npy_header import npy_header


class PointsView:
    def __init__(self, ds):
        if ds.converted or ds.materialized is not None:
            raise Unsupported(f"{ds.path}: listing the defined elements of a {ds.npy_element_dtype} dataset")
        self.ds, self.source = ds, ds.source
        rank = len(ds.shape)
        self.dtype = np.dtype([("index", "<u8", (rank,)), ("value", ds.npy_element_dtype)])
        chunks = list(self.source.defined_chunks())
        self.rows: list[list] = [list(g) for _, g in groupby(chunks, key=lambda cr: cr[0][0])]
        self.starts: list[int] = []      # the first element of each chunk row
        total = 0
        for row in self.rows:
            self.starts.append(total)
            total += sum(self.source.codec.count(self._stored(c, r), r.sections, self.source._is_edge(c),
                                                 self._where(c)) for c, r in row)
        self.count = total
        self.header = npy_header(self.dtype, (total,))
        self.body_size = total * self.dtype.itemsize
        self._lock = threading.Lock()
        self._cached: tuple[int, bytes] | None = None   # (row, its body bytes)

    @property
    def size(self) -> int:
        return len(self.header) + self.body_size

    def _where(self, coords) -> str:
        return f"{self.ds.path} chunk {coords}"

    def _stored(self, coords, rec) -> bytes:
        return self.source.stored(coords, rec, self.source.stored_max)

    def row_array(self, i: int) -> np.ndarray:
        """The elements of chunk row `i`, sorted."""
        src, rows = self.source, self.rows[i]
        parts = []
        for coords, rec in rows:
            pos, values = src.chunk_points(coords, rec)
            local = np.stack(np.unravel_index(pos, src.chunk), axis=1).astype(np.uint64)
            part = np.empty(len(pos), self.dtype)
            part["index"] = local + np.array([c * k for c, k in zip(coords, src.chunk)], np.uint64)
            part["value"] = np.frombuffer(values, self.dtype["value"])
            parts.append(part)
        out = np.concatenate(parts, dtype=self.dtype) if parts else np.empty(0, self.dtype)   # keeps byte order
        if len(rows) > 1 and len(out):
            order_keys = [out["index"][:, d] for d in range(out["index"].shape[1] - 1, -1, -1)]
            out = out[np.lexsort(order_keys)]
        return out

    def read_body(self, offset: int, size: int) -> bytes:
        offset, end = max(0, offset), min(self.body_size, offset + size)
        isz = self.dtype.itemsize
        out = []
        while offset < end:
            i = bisect_right(self.starts, offset // isz) - 1
            row = self._row_bytes(i)
            base = self.starts[i] * isz
            take = row[offset - base:end - base]
            if not take:
                break
            out.append(take)
            offset += len(take)
        return b"".join(out)

    def _row_bytes(self, i: int) -> bytes:
        with self._lock:
            if self._cached is not None and self._cached[0] == i:
                return self._cached[1]
        data = self.row_array(i).tobytes()
        with self._lock:
            self._cached = (i, data)
        return data
