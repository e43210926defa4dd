"""HSDS's binary values (`application/octet-stream` bodies, base64 attribute values) <-> NumPy
arrays, for the dtypes types.py makes.

Fixed-size elements are their bytes, one after the other (compounds packed). A variable-length
element is a 4-byte little-endian count of bytes, then that many bytes: UTF-8 or ASCII text for
strings (an empty string: count 0), the base elements' bytes for sequences (the count is bytes,
not elements), HSDS's encoding of the region for region references. In a compound each field
follows the last, a variable one with its own count (h5json's array_util: arrayToBytes,
copyElement, bytesToArray, readElement). Decoding checks every count against the bytes that
remain: a short or lying body is an error naming the element, never an allocation by a number
the server sent.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from ...errors import FormatError
from .types import REF_REGION, TypeNotMapped, is_variable

COUNT = struct.Struct("<i")
MAX_ELEMENT = (1 << 31) - 1     # the count is a signed 32-bit integer


class BadValue(FormatError):
    """Bytes that are not a value of the type (short, counts past the end, bad text)."""


def _leaf_kind(dt: np.dtype) -> Any:
    """str, bytes or a base dtype for a variable-length leaf dtype; None for a fixed one."""
    if dt.kind != "O":
        return None
    meta = dt.metadata or {}
    if meta.get("ref") == REF_REGION:
        return bytes
    vlen = meta.get("vlen")
    if vlen is None:
        raise TypeNotMapped(f"dtype {dt}: an object dtype without h5py's vlen tag")
    return vlen


def decode(data: bytes | bytearray | memoryview, dt: np.dtype, count: int, what: str = "value") -> np.ndarray:
    """`count` elements of `dt` from `data` (exactly: bytes left over are an error), as a 1-D array.
    Fixed-size types share `data`'s memory (read-only when `data` is bytes)."""
    if not is_variable(dt):
        need = count * dt.itemsize
        if len(data) != need:
            raise BadValue(f"{what}: {len(data)} bytes for {count} elements of {dt} ({need} bytes)")
        if dt.shape:    # frombuffer would spread a subarray dtype's elements over a new axis
            return np.frombuffer(data, dtype=np.dtype([("v", dt)]), count=count)["v"]
        return np.frombuffer(data, dtype=dt, count=count)
    if dt.shape:
        raise TypeNotMapped(f"{what}: an array type of variable-length elements ({dt})")
    view = memoryview(data).cast("B")
    out = np.empty(count, dtype=dt)
    pos = 0
    for i in range(count):
        value, pos = _read(view, pos, dt, what, i)
        out[i] = value
    if pos != len(view):
        raise BadValue(f"{what}: {len(view) - pos} bytes after the last of {count} elements")
    return out


def _read(view: memoryview, pos: int, dt: np.dtype, what: str, index: int) -> tuple[Any, int]:
    """(one element of `dt` at `pos`, the position after it)."""
    if dt.names:
        fields = []
        for name in dt.names:
            value, pos = _read(view, pos, dt.fields[name][0], what, index)
            fields.append(value)
        return tuple(fields), pos
    kind = _leaf_kind(dt)
    if kind is None:
        end = pos + dt.itemsize
        if end > len(view):
            raise BadValue(f"{what}: element {index} runs past the end ({len(view)} bytes)")
        return np.frombuffer(view[pos:end], dtype=dt)[0], end
    if pos + COUNT.size > len(view):
        raise BadValue(f"{what}: element {index}'s length runs past the end ({len(view)} bytes)")
    (n,) = COUNT.unpack_from(view, pos)
    pos += COUNT.size
    if n < 0 or pos + n > len(view):
        raise BadValue(f"{what}: element {index} says {n} bytes, {len(view) - pos} remain")
    raw = view[pos:pos + n]
    pos += n
    if kind is bytes:
        return bytes(raw), pos
    if kind is str:
        try:
            return str(raw, "utf-8"), pos
        except UnicodeDecodeError as e:
            raise BadValue(f"{what}: element {index} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    if n % kind.itemsize:
        raise BadValue(f"{what}: element {index}'s {n} bytes are no whole number of {kind} elements")
    return np.frombuffer(raw, dtype=kind).copy(), pos


def encode(arr: Any, dt: np.dtype) -> bytes:
    """The bytes HSDS takes for `arr` (converted to `dt` where NumPy can) as a value of type `dt`."""
    if not is_variable(dt):
        return np.ascontiguousarray(arr, dtype=dt).tobytes()
    if dt.shape:
        raise TypeNotMapped(f"an array type of variable-length elements ({dt})")
    flat = np.asarray(arr, dtype=dt).reshape(-1)
    out = bytearray()
    for i, element in enumerate(flat):
        _write(out, element, dt, i)
    return bytes(out)


def _write(out: bytearray, value: Any, dt: np.dtype, index: int) -> None:
    if dt.names:
        for name in dt.names:
            _write(out, value[name], dt.fields[name][0], index)
        return
    kind = _leaf_kind(dt)
    if kind is None:
        out += np.asarray(value, dtype=dt).tobytes()
        return
    if kind is str or kind is bytes:
        if isinstance(value, str):
            raw = value.encode("utf-8")
        elif isinstance(value, (bytes, bytearray, np.bytes_)):
            raw = bytes(value)
        else:
            raise TypeNotMapped(f"element {index}: {type(value).__name__} where a string goes")
    else:
        raw = np.ascontiguousarray(value, dtype=kind).reshape(-1).tobytes()
    if len(raw) > MAX_ELEMENT:
        raise TypeNotMapped(f"element {index}: {len(raw)} bytes, more than one element can hold")
    out += COUNT.pack(len(raw))
    out += raw


def to_json(arr: Any, dt: np.dtype) -> Any:
    """`arr` as the JSON value HSDS takes where it takes no binary (attributes of variable-length
    types): strings as text, sequences as lists, compounds as lists of fields, arrays nested.
    Bytes that are not UTF-8 and opaque bytes cannot travel so: TypeNotMapped."""
    def nested(a: np.ndarray, t: np.dtype) -> Any:
        # a[i, ...] stays an array (0-d at the end): plain a[i] of an object array is its element
        return [nested(a[i, ...], t) for i in range(len(a))] if a.ndim else one(a[()], t)

    def one(value: Any, t: np.dtype) -> Any:
        if t.names:
            return [one(value[n], t.fields[n][0]) for n in t.names]
        if t.shape:
            return nested(np.asarray(value), t.base)
        if isinstance(value, (bytes, np.bytes_)):
            try:
                return bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                raise TypeNotMapped("a byte string that is not UTF-8, in a JSON value") from None
        if isinstance(value, str):
            return value
        if t.kind == "O":
            return np.asarray(value, dtype=_leaf_kind(t)).tolist()
        if t.kind == "V":
            raise TypeNotMapped(f"opaque {t} in a JSON value")
        return np.asarray(value, dtype=t).tolist()
    return nested(np.asarray(arr, dtype=dt), dt)


def json_bytes(value: Any, dt: np.dtype, shape: tuple[int, ...]) -> bytes | None:
    """The binary form HSDS gives for an attribute value it holds as JSON (`value`, of type `dt`
    and dataspace `shape`), made here as the service makes it (h5json's jsonToArray, then
    arrayToBytes), or None where that is not exact and simple: then the caller asks for the
    binary form. Taken: integers (enums and h5py's booleans too: JSON numbers, true and false)
    and floats (JSON numbers, NaN and Infinity as Python's json writes them) that fit the type; fixed-length
    strings whose UTF-8 text fits the length; variable-length strings."""
    if dt.names or dt.shape or (dt.metadata or {}).get("ref") is not None:
        return None
    leaves = _leaves(value, shape)
    if leaves is None:
        return None
    kind = dt.kind
    try:
        if kind in "iu":
            info = np.iinfo(dt)
            # h5pyd writes h5py's booleans (an int8 enum) as JSON true and false
            if not all(type(v) is bool or type(v) is int and info.min <= v <= info.max for v in leaves):
                return None
            return np.array(leaves, dtype=dt).tobytes()
        if kind == "f":
            if not all(type(v) in (int, float) for v in leaves):
                return None
            with np.errstate(over="raise"):
                out = np.array(leaves, dtype=dt)
            # a finite number too large for the type: the service would store inf, take no part
            if not all(np.isfinite(o) or not math.isfinite(v) for o, v in zip(out.tolist(), leaves)):
                return None
            return out.tobytes()
        if kind == "S":
            texts = [v.encode("utf-8") if type(v) is str else None for v in leaves]
            if not all(t is not None and len(t) <= dt.itemsize for t in texts):
                return None
            return b"".join(t.ljust(dt.itemsize, b"\0") for t in texts)
        if kind == "O" and _leaf_kind(dt) in (str, bytes):
            if not all(type(v) is str for v in leaves):
                return None
            out = bytearray()
            for v in leaves:
                raw = v.encode("utf-8")
                out += COUNT.pack(len(raw))
                out += raw
            return bytes(out)
    except (OverflowError, FloatingPointError, UnicodeEncodeError, ValueError, TypeError):
        return None     # lone surrogates in text, numbers NumPy will not take
    return None


def _leaves(value: Any, shape: tuple[int, ...]) -> list | None:
    """The elements of a JSON value nested as `shape` says (a bare element for a scalar), in
    row-major order; None if the nesting is not exactly that."""
    if not shape:
        return None if isinstance(value, (list, dict)) else [value]
    level = [value]
    for n in shape:
        if not all(isinstance(v, list) and len(v) == n for v in level):
            return None
        level = [item for v in level for item in v]
    return None if any(isinstance(v, (list, dict)) for v in level) else level
