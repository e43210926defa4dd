"""The header of a `.npy` stream (format versions 1.0, 2.0, 3.0), parsed from its first bytes,
and the one `numpy.save` writes for a dataset's `.npy` view (`npy_header`).

Layout: the magic b"\\x93NUMPY", major and minor version bytes, the header length (2 bytes
little-endian in 1.0, 4 in 2.0 and 3.0), then the header: a Python dict literal with exactly the
keys 'descr', 'fortran_order' and 'shape' (Latin-1 text in 1.0 and 2.0, UTF-8 in 3.0), padded
with spaces and a newline; the array's bytes follow it.

`parse_npy_header(data)` takes the first bytes of the stream: it returns None while they are a
proper beginning of a header, raises NpyHeaderError (EINVAL) as soon as they cannot be one, or
when the stream ends (`complete=True`) inside the header. Memory is bounded: a declared header
longer than MAX_HEADER_BYTES is refused before any of it is awaited, and the text is evaluated
with `ast.literal_eval` (no code runs), its errors (including nesting too deep) caught.

The dtype: NumPy's own reading of 'descr' (np.lib.format.descr_to_dtype: padding entries become
offsets, never overlapping ones: the element bytes are the dataset's), which must be one HDF5
can hold (dtype_encode; a DtypeError, EINVAL, otherwise: object, unicode ...). A
subarray dtype at the top (a header np.save never writes, np.load cannot read) stands for its
elements: its shape is appended to the array's.

Fortran order is refused unless the bytes are the same in C order (at most one dimension
longer than 1): a column-major stream can only be stored row-major by transposing the whole
array, which needs all of it at once (streaming with bounded memory could not fill any chunk
before the end), and storing it as-is with the shape reversed would show another array.
"""

from __future__ import annotations

import ast
import struct
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.lib.format import dtype_to_descr

from ..errors import InvalidWrite
from .dtype_encode import datatype_of

MAGIC = b"\x93NUMPY"
MAX_HEADER_BYTES = 256 << 10   # ~11,000 fields; evaluating it peaks near 40 MB (numpy's np.load: 10,000 bytes)
MAX_RANK = 32
_PREFIX = {(1, 0): struct.Struct("<H"), (2, 0): struct.Struct("<I"), (3, 0): struct.Struct("<I")}
_KEYS = {"descr", "fortran_order", "shape"}


class NpyHeaderError(InvalidWrite, ValueError):
    """Bytes that do not begin a `.npy` file h5fs can store."""


@dataclass(frozen=True, slots=True)
class NpyHeader:
    version: tuple[int, int]
    dtype: np.dtype
    shape: tuple[int, ...]
    fortran_order: bool
    header_length: int        # bytes before the array data: magic, version, length field, header

    @property
    def data_nbytes(self) -> int:
        n = self.dtype.itemsize
        for d in self.shape:
            n *= d
        return n


PREAMBLE = len(MAGIC) + 2 + 4   # magic, version and the longest length field


def header_end(data: bytes, *, complete: bool = False) -> int | None:
    """Where the array data begins (magic, version, length field and header), from the first
    PREAMBLE bytes; None when more are needed."""
    data = bytes(data[:PREAMBLE])
    n = min(len(data), len(MAGIC))
    if data[:n] != MAGIC[:n]:
        raise NpyHeaderError("not a .npy file (no \\x93NUMPY magic)")
    if len(data) < len(MAGIC) + 2:
        return _more(complete)
    version = (data[6], data[7])
    prefix = _PREFIX.get(version)
    if prefix is None:
        raise NpyHeaderError(f".npy format version {version[0]}.{version[1]} (h5fs reads 1.0, 2.0 and 3.0)")
    start = 8 + prefix.size
    if len(data) < start:
        return _more(complete)
    (length,) = prefix.unpack_from(data, 8)
    if length > MAX_HEADER_BYTES:
        raise NpyHeaderError(f".npy header of {length} bytes (at most {MAX_HEADER_BYTES})")
    return start + length


def parse_npy_header(data: bytes | bytearray | memoryview, *, complete: bool = False) -> NpyHeader | None:
    """The header at the start of `data`, or None when more bytes are needed (`complete`:
    the stream has ended, so a partial header is an error)."""
    end = header_end(data, complete=complete)
    if end is None:
        return None
    if len(data) < end:
        return _more(complete)
    version = (data[6], data[7])
    start = 8 + _PREFIX[version].size
    text = _text(bytes(data[start:end]), version)
    dtype, shape, fortran = _fields(text)
    return NpyHeader(version, dtype, shape, fortran, end)


def _more(complete: bool) -> None:
    """Nothing yet (more bytes to come), or the error of a stream that ended inside the header."""
    if complete:
        raise NpyHeaderError("truncated .npy header")


def _text(raw: bytes, version: tuple[int, int]) -> str:
    try:
        return raw.decode("utf-8" if version >= (3, 0) else "latin-1")
    except UnicodeDecodeError as e:
        raise NpyHeaderError(f".npy header is not UTF-8: {e}") from None


def _fields(text: str) -> tuple[np.dtype, tuple[int, ...], bool]:
    try:
        header = ast.literal_eval(text)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError) as e:
        raise NpyHeaderError(f".npy header is not a Python literal: {e}") from None
    if not isinstance(header, dict) or set(header) != _KEYS:
        raise NpyHeaderError(f".npy header is not a dict of {sorted(_KEYS)}: {_short(text)}")
    shape, fortran = header["shape"], header["fortran_order"]
    if not isinstance(shape, tuple) or not all(type(d) is int and d >= 0 for d in shape):
        raise NpyHeaderError(f".npy shape {_short(shape)} is not a tuple of non-negative integers")
    if not isinstance(fortran, bool):
        raise NpyHeaderError(f".npy fortran_order {_short(fortran)} is not a bool")
    fortran = fortran and sum(d > 1 for d in shape) > 1   # else the same bytes as row-major
    dtype = _dtype(header["descr"])
    if fortran and dtype.subdtype is not None:
        raise NpyHeaderError("Fortran-order .npy of a subarray dtype: save it with np.ascontiguousarray")
    if dtype.subdtype is not None:
        dtype, sub = dtype.subdtype
        shape += sub
    if len(shape) > MAX_RANK:
        raise NpyHeaderError(f".npy array of rank {len(shape)} (HDF5 holds at most {MAX_RANK})")
    datatype_of(dtype)
    if dtype.itemsize * int(np.prod(shape, dtype=object)) >> 63:
        raise NpyHeaderError(f".npy array {shape} of {dtype.itemsize}-byte elements is too large")
    return dtype, shape, fortran


def _dtype(descr) -> np.dtype:
    try:
        return np.lib.format.descr_to_dtype(descr)
    except Exception as e:  # noqa: BLE001 - NumPy raises assorted types for hostile descriptions
        raise NpyHeaderError(f".npy descr {_short(descr)} is not a NumPy dtype: {e}") from None


def _short(value, limit: int = 200) -> str:
    """repr(value), cut for an error message (a header holds up to MAX_HEADER_BYTES)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# -- the header numpy.save writes -------------------------------------------------------------
# (format 1.0, 2.0 when it is longer than 64 KiB, 3.0 for non-latin-1 field names; spare room to
# grow the first dimension; padded to 64 bytes): a `D.npy` is byte for byte what `np.save` makes

_ALIGN = 64
_GROWTH_DIGITS = 21  # numpy leaves room for the first dimension to grow to 21 digits
_FIXED_TEXT = len("{'descr': , 'fortran_order': False, 'shape': , }")


def _npy_parts(dtype, shape) -> tuple[str, str, int]:
    """The descr and shape texts of numpy's header dict, and its trailing spare room."""
    shape = tuple(int(n) for n in shape)
    growth = _GROWTH_DIGITS - len(repr(shape[0])) if shape else 0
    return repr(dtype_to_descr(np.dtype(dtype))), repr(shape), growth


def _npy_format(text_bytes: int, latin1: bool) -> tuple[int, str, int]:
    """(version, length format, padding) of a header whose dict text has `text_bytes` bytes."""
    for version, fmt in (((1, "<H"), (2, "<I")) if latin1 else ((3, "<I"),)):
        hlen = text_bytes + 1  # the final newline
        pad = _ALIGN - (len(MAGIC) + 2 + struct.calcsize(fmt) + hlen) % _ALIGN
        if fmt == "<I" or hlen + pad < 1 << 16:
            return version, fmt, pad
    raise AssertionError("unreachable: format 2.0 holds any header")


def _latin1(descr: str) -> bool:
    return descr.isascii() or all(ord(c) < 256 for c in descr)


@lru_cache(maxsize=1024)  # datasets of a file share a few dtypes and shapes
def npy_header_size(dtype, shape) -> int:
    """len(npy_header(dtype, shape)), computed from the text lengths alone."""
    descr, shape_text, growth = _npy_parts(dtype, shape)
    latin1 = _latin1(descr)
    text = _FIXED_TEXT + (len(descr) if latin1 else len(descr.encode("utf8"))) + len(shape_text) + growth
    _, fmt, pad = _npy_format(text, latin1)
    return len(MAGIC) + 2 + struct.calcsize(fmt) + text + pad + 1


def npy_header(dtype, shape) -> bytes:
    """The header `numpy.save` writes for a C-ordered array of this dtype and shape."""
    descr, shape_text, growth = _npy_parts(dtype, shape)
    latin1 = _latin1(descr)
    text = ("{'descr': %s, 'fortran_order': False, 'shape': %s, }" % (descr, shape_text) + " " * growth)
    body = text.encode("latin1" if latin1 else "utf8")
    version, fmt, pad = _npy_format(len(body), latin1)
    return MAGIC + bytes((version, 0)) + struct.pack(fmt, len(body) + 1 + pad) + body + b" " * pad + b"\n"
