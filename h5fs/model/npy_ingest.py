"""A `.npy` file arriving as an array (`cp x.npy`, `np.save` into the mount, a file of bytes
renamed to `x.npy`): its header parsed once its bytes all came, how the new dataset is stored,
where each later byte goes in it, a Fortran-order body held until whole and given back row-major,
and whether what came by a close is a whole array. The mirror of a `.npy` view's read
(`Dataset.read_npy_body`): the array is stored in C order with the header's dtype, so a body
offset is the dataset's raw byte offset.

Pieces may come in any order (`-o writeback_cache` sends a file's pages in parallel requests):
until the header parses each is kept where it belongs in `head` (a later piece over an earlier
one, as in any file), `held` saying which bytes came; then `body` says which bytes of the array
data came. The caller (fuse/npy_arrivals.py) makes the dataset when `take_head` returns the
header, calls `begin`, and writes each piece where `to_write` says, through the writeback.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..errors import CannotWrite, H5fsError, InvalidWrite, ReadOnly
from ..spans import Spans
from . import messages as M
from .dataset import Dataset
from .dataset_create import npy_storage
from .fortran_body import MAX_BYTES as FORTRAN_MAX_BYTES
from .fortran_body import FortranBody
from .npy_header import PREAMBLE, NpyHeader, NpyHeaderError, header_end, npy_header, parse_npy_header
from .replace_like import keeps_storage
from .tree_edit import TreeEditor
from .writeback import Writeback

MAX_EARLY = 64 << 20   # how far into a .npy bytes are held while its header is incomplete (writeback_cache)


class NpyIngest:
    """What came of one `.npy` file being written, and what it says. A method that refuses the
    file records why (`failed`: every later piece is refused too) and raises InvalidWrite."""

    def __init__(self) -> None:
        self.head = bytearray()   # the bytes written before the header was complete (then: the header)
        self.held = Spans()       # which bytes of `head` were written
        self.body = Spans()       # which bytes of the array data were written
        self.header: NpyHeader | None = None   # once its dataset is made (`begin`)
        self.fortran: FortranBody | None = None   # a Fortran-order body, held until whole
        self.failed: BaseException | None = None  # why the file cannot become an array

    @property
    def started(self) -> bool:
        """Whether anything was written."""
        return bool(self.head) or self.header is not None

    def check(self) -> None:
        """InvalidWrite when the file was refused already; a refusal of what the dataset may
        not become (read-only, not expressible where it is stored) keeps its own errno."""
        if isinstance(self.failed, (ReadOnly, CannotWrite)):
            raise type(self.failed)(str(self.failed))
        if self.failed is not None:
            raise InvalidWrite(str(self.failed))

    def _fail(self, exc: BaseException) -> None:
        self.failed = exc
        raise InvalidWrite(str(exc))

    # -- the header ---------------------------------------------------------------------------
    def take_head(self, off: int, buf) -> NpyHeader | None:
        """A piece written while the header is not known, held where it belongs; the header
        once its bytes all came (the preamble says how many), for the caller to make its
        dataset (`plan`, then `begin`). A dtype HDF5 cannot hold is refused here too."""
        end = off + len(buf)
        if end > MAX_EARLY:
            self._fail(InvalidWrite("a write far past the end of a .npy header not yet complete"))
        if end > len(self.head):
            self.head.extend(bytes(end - len(self.head)))
        self.head[off:end] = buf
        self.held.add(off, end)
        whole = self.held.prefix()
        try:
            need = header_end(bytes(self.head[:min(whole, PREAMBLE)]))
            if need is not None and whole >= need:
                return parse_npy_header(bytes(self.head[:need]))
        except (NpyHeaderError, H5fsError) as exc:
            self._fail(exc)
        return None

    def plan(self, header: NpyHeader, chunk_bytes: int, filters: str) -> dict:
        """The new dataset's storage (`create_dataset` keywords): chunked as
        dataset_create.npy_storage says, filtered by `filters` when chunked. A Fortran-order
        body is held from now on until whole, up to fortran_body.MAX_BYTES."""
        if header.fortran_order:
            if header.data_nbytes > FORTRAN_MAX_BYTES:
                self._fail(InvalidWrite(
                    f"Fortran-order .npy of {header.data_nbytes} bytes (column-major data is held until whole, "
                    f"up to {FORTRAN_MAX_BYTES >> 20} MiB): save it with np.ascontiguousarray"))
            self.fortran = FortranBody(header.dtype, header.shape)
        chunks, maxshape = npy_storage(header.shape, header.dtype.itemsize, chunk_bytes)
        return dict(maxshape=maxshape, chunks=chunks, filters=filters if chunks is not None else ())

    def begin(self, header: NpyHeader) -> list[tuple[int, bytes]]:
        """The header's dataset is made: the pieces that came with or before the header past
        its end (file offset, bytes), for `to_write`."""
        self.header = header
        hl = header.header_length
        held, self.head = self.head, self.head[:hl]
        return [(max(a, hl), bytes(held[max(a, hl):b])) for a, b in self.held if b > hl]

    # -- the body -------------------------------------------------------------------------------
    def to_write(self, off: int, buf) -> tuple[int, bytes] | None:
        """Where a piece written at `off` of the file goes once the header is known: (raw byte
        offset of the dataset, bytes), then `wrote`; None when a Fortran-order body keeps it.
        The header's own bytes may come again (only those), and no more data than it says."""
        hl = self.header.header_length
        start = off - hl
        if start < 0:
            if bytes(buf[:-start]) != bytes(self.head[off:hl]):
                self._fail(InvalidWrite("a write changing the .npy header"))
            buf, start = buf[-start:], 0
        data = bytes(buf)
        if start + len(data) > self.header.data_nbytes:
            self._fail(InvalidWrite("more array data than its header says"))
        if self.fortran is not None:   # column-major: into the dataset once whole
            self.fortran.write(start, data)
            self.body.add(start, start + len(data))
            return None
        return start, data

    def wrote(self, start: int, size: int) -> None:
        """Bytes `to_write` gave are in the dataset."""
        self.body.add(start, start + size)

    def fortran_whole(self, write: Callable[[int, bytes], None]) -> None:
        """A whole Fortran-order body given to `write(raw offset, bytes)` row-major, then
        dropped (in a worker: it reads the held body back)."""
        body, self.fortran = self.fortran, None
        if body is None:
            return
        try:
            for offset, data in body.blocks():
                write(offset, data)
        finally:
            body.close()

    def close(self) -> None:
        """The file is closed for good: a Fortran-order body still held goes."""
        if self.fortran is not None:
            self.fortran.close()
            self.fortran = None

    # -- at close -------------------------------------------------------------------------------
    @property
    def incomplete(self) -> bool:
        return self.header is None or self.body.prefix() < self.header.data_nbytes

    def cut_short(self) -> str:
        """Why an incomplete file is no array."""
        if self.header is not None and self.header.fortran_order and not self.body.starts:
            return ("only the header of a Fortran-order array: a dataset's .npy view is in C order, so "
                    "its data must come with it (np.save), not through a mapping (open_memmap)")
        return "truncated: the file ends before its array data does"

    def declared(self, ds: Dataset | None) -> bool:
        """A header and no array data at all, what `np.lib.format.open_memmap(mode="w+")` writes
        and closes before it maps the file (its pages then fill the data): a dataset of fill
        values, as h5py's `create_dataset` without data. Only when its dataset `ds`'s `.npy` view
        shows that very header, so that a mapping at its length lands on the dataset's elements
        (a Fortran-order header does not: its data would come transposed). Data cut short stays
        an error."""
        if self.header is None or self.body.starts or ds is None:
            return False
        return bytes(self.head) == npy_header(ds.npy_dtype, ds.npy_shape)


def replacement(editor: TreeEditor, ds: Dataset, header: NpyHeader, storage: dict, keep: bool) -> tuple[int, bool]:
    """In a worker: the dataset no link names that receives an array replacing `ds`'s data, and
    whether it is stored as `ds` is: when `keep` and the array fits it (model/replace_like.py),
    else as a sparse `ds`'s sections (`_sparse_like`) or as any copied-in array (`storage`)."""
    if keep and keeps_storage(ds, header.dtype, header.shape):
        return editor.create_unlinked_like(ds, header.shape), True
    if ds.sparse:
        storage = _sparse_like(ds, header) or storage
    return editor.create_unlinked_dataset(ds, header.dtype, header.shape, **storage), False


def _sparse_like(ds: Dataset, header: NpyHeader) -> dict | None:
    """Storage for an array replacing sparse dataset `ds`'s data: sparse as `ds` is (its chunks,
    section filters and fill value), when the array has its rank and dtype and fits its chunks;
    None otherwise (the array is stored as any copied-in one)."""
    shape = header.shape
    if len(shape) != len(ds.shape) or header.dtype != ds.npy_element_dtype or not shape:
        return None
    maxshape = ds.maxshape
    if any(m is not None and d > m for d, m in zip(shape, maxshape)):
        maxshape = (None, *shape[1:])
    if any(m is not None and c > m for c, m in zip(ds.chunks, maxshape)):
        return None
    fill = ds.fill_value
    return dict(layout="sparse", chunks=ds.chunks, maxshape=maxshape, filters=ds.message(M.FILTERS) or "",
                fill=None if fill is None else np.frombuffer(fill, header.dtype)[0])


def holds_bytes(ds: Dataset) -> bool:
    """Whether the dataset is a file of bytes (one-dimensional uint8), which a rename to `x.npy`
    makes the array its bytes hold."""
    return not ds.sparse and ds.npy_dtype == np.uint8 and len(ds.npy_shape) == 1


def fits(wb: Writeback, ds: Dataset, target: Dataset) -> bool:
    """Whether `ds`'s bytes (writes not yet in the file included) begin with a `.npy` header of
    an array that replaces `target`'s data keeping its storage (model/replace_like.py).
    NpyHeaderError when they are no `.npy`."""
    end = header_end(bytes(wb.read(ds, 0, PREAMBLE)))
    header = None if end is None else parse_npy_header(bytes(wb.read(ds, 0, end)))
    return header is not None and keeps_storage(target, header.dtype, header.shape)
