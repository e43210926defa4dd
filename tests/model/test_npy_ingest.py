"""A `.npy` file arriving in pieces (h5fs.model.npy_ingest), without a mount: the header parsed
once whole whatever order its bytes came in, each later piece's place in the dataset's raw bytes,
a Fortran-order body given back row-major, and what is refused."""

from __future__ import annotations

import io
import random
from types import SimpleNamespace

import numpy as np
import pytest

from h5fs.errors import InvalidWrite
from h5fs.model.npy_header import npy_header
from h5fs.model.npy_ingest import NpyIngest


def npy_bytes(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


def ingest_all(data: bytes, pieces: list[tuple[int, int]]) -> tuple[NpyIngest, bytearray]:
    """Feed `data` as the pieces [a, b) in the order given; returns the ingest and the raw bytes
    its dataset would hold (the header once whole, as the mount makes the dataset then)."""
    ingest, raw = NpyIngest(), None
    for a, b in pieces:
        if ingest.header is None:
            header = ingest.take_head(a, data[a:b])
            if header is not None:
                ingest.plan(header, 1 << 20, "")
                raw = bytearray(header.data_nbytes)
                later = ingest.begin(header)
                for off, piece in later:
                    _place(ingest, raw, off, piece)
        else:
            _place(ingest, raw, a, data[a:b])
    return ingest, raw


def _place(ingest: NpyIngest, raw: bytearray, off: int, piece: bytes) -> None:
    part = ingest.to_write(off, piece)
    if part is not None:
        start, body = part
        raw[start:start + len(body)] = body
        ingest.wrote(start, len(body))


def shuffled_pieces(size: int, step: int, seed: int) -> list[tuple[int, int]]:
    pieces = [(a, min(a + step, size)) for a in range(0, size, step)]
    random.Random(seed).shuffle(pieces)
    return pieces


@pytest.mark.parametrize("seed", range(5))
def test_pieces_in_any_order_land_in_place(seed):
    array = np.arange(3000, dtype="<f8").reshape(30, 100)
    data = npy_bytes(array)
    ingest, raw = ingest_all(data, shuffled_pieces(len(data), 37, seed))
    assert not ingest.incomplete
    assert bytes(raw) == array.tobytes()
    assert bytes(ingest.head) == data[:ingest.header.header_length]


def test_fortran_order_is_given_back_row_major():
    array = np.asfortranarray(np.arange(60, dtype="<i4").reshape(6, 10))
    data = npy_bytes(array)
    ingest, raw = ingest_all(data, shuffled_pieces(len(data), 50, 1))
    assert ingest.header.fortran_order and not ingest.incomplete
    assert bytes(raw) == bytes(len(raw))   # nothing written until whole
    blocks = []
    ingest.fortran_whole(lambda off, piece: blocks.append((off, piece)))
    assert b"".join(piece for _, piece in sorted(blocks)) == np.ascontiguousarray(array).tobytes()
    assert ingest.fortran is None


def test_the_header_may_come_again_but_not_change():
    data = npy_bytes(np.zeros(10, "<u2"))
    ingest, _ = ingest_all(data, [(0, len(data))])
    hl = ingest.header.header_length
    assert ingest.to_write(0, data) == (0, data[hl:])   # a whole file written again
    changed = b"\x00" + data[1:]
    with pytest.raises(InvalidWrite, match="changing the .npy header"):
        ingest.to_write(0, changed)
    with pytest.raises(InvalidWrite):   # refused for good
        ingest.check()


def test_refusals():
    data = npy_bytes(np.zeros(4, "<i8"))
    ingest, _ = ingest_all(data, [(0, len(data))])
    with pytest.raises(InvalidWrite, match="more array data"):
        ingest.to_write(len(data), b"x")
    with pytest.raises(InvalidWrite, match="no \\\\x93NUMPY magic"):
        NpyIngest().take_head(0, b"not a npy file")
    with pytest.raises(InvalidWrite, match="far past"):
        NpyIngest().take_head(64 << 20, b"x")


def test_what_a_close_finds():
    array = np.zeros((3, 4), "<f4")
    data = npy_bytes(array)
    hl = len(data) - array.nbytes
    ingest, _ = ingest_all(data, [(0, hl)])   # the header alone, as open_memmap writes it first
    assert ingest.incomplete and ingest.started
    ds = SimpleNamespace(npy_dtype=array.dtype, npy_shape=array.shape)
    assert bytes(ingest.head) == npy_header(array.dtype, array.shape)
    assert ingest.declared(ds)
    _place(ingest, bytearray(array.nbytes), hl, data[hl:hl + 8])
    assert not ingest.declared(ds) and ingest.incomplete
    assert ingest.cut_short().startswith("truncated")
    assert not NpyIngest().started
