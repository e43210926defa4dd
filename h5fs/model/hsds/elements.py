"""HSDS values -> the values and views the local engine makes of the same content.

Fixed-size values are already the stored bytes (HSDS's binary form is the element bytes, its
compounds packed as `datatypes.record_of` lays them out). Values holding variable-length data or
references are laid out as a local file stores them (`stored`): each variable-length leaf a
16-byte descriptor (count, heap address, index) whose payload an in-memory heap (`_Heap`) holds,
each object reference an 8-byte address (the mount's address of the HSDS id). The local
decoder (`values.to_npy`) then makes the `.npy` array from them, so an attribute's value and a
dataset's views are the local engine's byte for byte, by the same code.
"""

from __future__ import annotations

import struct
from typing import Any, Callable

import numpy as np

from ...errors import FormatError, Unsupported
from ...format.codec import Sizes
from ...format.messages.datatype import (
    REF_OBJECT1, Array, Compound, Datatype, Enum, Reference, VarLen)
from ..dtypes import is_converted, numpy_dtype
from ..values import MAX_VLEN_PAYLOAD, Ref, to_npy

SIZES = Sizes(8, 8)
_DESCRIPTOR = struct.Struct("<IQI")      # count, heap address, heap index
_ADDRESS = struct.Struct("<Q")
_HEAP_ADDRESS = 1                        # any non-zero address: 0 reads as a null reference


class _Heap:
    """The payloads of variable-length leaves, in the order they were laid out (what
    `values.to_npy` asks a global heap for)."""

    def __init__(self) -> None:
        self.items: list[bytes] = []
        self.nbytes = 0

    def add(self, payload: bytes) -> int:
        self.nbytes += len(payload)
        if self.nbytes > MAX_VLEN_PAYLOAD:
            raise Unsupported(f"variable-length data of more than {MAX_VLEN_PAYLOAD} bytes in one view")
        self.items.append(payload)
        return len(self.items) - 1

    def get(self, address: int | None, index: int) -> bytes:
        if address != _HEAP_ADDRESS or not 0 <= index < len(self.items):
            raise FormatError(f"variable-length element: no payload {index}")
        return self.items[index]


def stored(values: np.ndarray, dt: Datatype, address_of: Callable[[str], int]) -> tuple[bytes, _Heap]:
    """(the elements of `values` as a local file stores elements of `dt`, the heap their
    variable-length payloads are in); `address_of` gives an object reference's address."""
    heap = _Heap()
    flat = values.reshape(-1) if values.ndim else values.reshape(1)
    if not is_converted(dt):
        return np.ascontiguousarray(flat).tobytes(), heap
    out = bytearray()
    for element in flat:
        _put(out, element, dt, heap, address_of)
    return bytes(out), heap


def _put(out: bytearray, value: Any, dt: Datatype, heap: _Heap, address_of: Callable[[str], int]) -> None:
    if not is_converted(dt):
        out += np.asarray(value, dtype=numpy_dtype(dt)).tobytes()
    elif isinstance(dt, VarLen):
        if dt.is_string:
            payload = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)
            count = len(payload)
        else:
            # h5pyd's way of an empty sequence (0) and a missing one (None) are empty too
            # (types.py maps sequences of fixed-size items only)
            empty = value is None or np.ndim(value) == 0
            payload = b"" if empty else np.ascontiguousarray(value, dtype=numpy_dtype(dt.base)).tobytes()
            count = len(payload) // dt.base.size
        out += _DESCRIPTOR.pack(count, _HEAP_ADDRESS if count else 0, heap.add(payload) if count else 0)
    elif isinstance(dt, Reference):
        if dt.ref_type != REF_OBJECT1:
            raise Unsupported("HSDS region references (their selections are not decoded here)")
        out += _ADDRESS.pack(_reference_address(value, address_of))
    elif isinstance(dt, Compound):
        start = len(out)
        for m in dt.members:
            out += bytes(start + m.offset - len(out))
            _put(out, value[m.name], m.type, heap, address_of)
        out += bytes(start + dt.size - len(out))
    elif isinstance(dt, Array):
        for item in np.asarray(value).reshape(-1):
            _put(out, item, dt.base, heap, address_of)
    elif isinstance(dt, Enum):
        _put(out, value, dt.base, heap, address_of)
    else:
        raise Unsupported(f"{dt.class_name} values from HSDS")


def _reference_address(value: Any, address_of: Callable[[str], int]) -> int:
    """An HSDS object reference (its target's id, maybe after "groups/"..., NUL padded) as the
    mount's address of that object; 0 (a null reference) for none."""
    text = bytes(value).rstrip(b"\0").decode("ascii", "replace") if not isinstance(value, str) else value
    obj_id = text.rsplit("/", 1)[-1]
    return address_of(obj_id) if obj_id[:2] in ("g-", "d-", "t-") else 0


def npy_values(values: np.ndarray, dt: Datatype, address_of: Callable[[str], int],
               ref_text: Callable[[Ref | None], str]) -> np.ndarray:
    """The elements of `values` (an array the HSDS client decoded) as the local engine's `.npy`
    values of type `dt`: 1-D, one per element (array types: with their dims after)."""
    raw, heap = stored(values, dt, address_of)
    return to_npy(raw, dt, heap, SIZES, ref_text)
