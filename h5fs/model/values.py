"""Stored element bytes -> values, where the stored bytes are not the value.

- Fixed-length strings: bytes -> text honouring the padding (nullterm: up to the first NUL;
  nullpad: trailing NULs removed; spacepad: trailing spaces removed).
- Variable-length data: each element is a 4-byte count (bytes for strings, elements for
  sequences) + a global heap ID (collection address, size of offsets + 4-byte object index).
  A count of 0 is an empty value whatever the heap ID says.
- Old-style object references (H5R_OBJECT1): an object header address (0 = null).
- Old-style region references (H5R_DATASET_REGION1): a global heap ID; the heap object holds
  the dataset's address + an H5S selection serialization.
- Revised references (reference datatype with encoding version 1, libhdf5 >= 1.12): the element
  begins with a 2-byte header (reference type, flags). libhdf5 (H5Tref.c) stores an object
  reference to the same file inline: header, token size (1 byte), token (the object address).
  Every other kind (region, attribute, or any external reference) stores header + u32 blob size
  + global heap ID, and the heap object holds the rest of the encoding (Appendix D "Reference
  Block"): token size, token, [u16 length + external file name], then for regions u32 size of
  the selection serialization + u32 extent rank + the selection, for attributes u16 length + attribute name. A reference type of 0 is
  a null reference.

`to_npy(raw, dt, count, heap, sizes, ref_text=...)` builds the `.npy` view's array (dtype from
dtypes.npy_dtype) for any datatype, converting vlen data and references on the way, and numbers
NumPy cannot hold as stored (non-IEEE floats, integers with padding bits: numeric_conversion.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..errors import FormatError, Unsupported
from ..format import selection as SEL
from ..format.codec import Reader, Sizes
from ..format.messages.datatype import (
    NULLPAD, NULLTERM, REF_ATTR, REF_OBJECT1, REF_OBJECT2, REF_REGION1, REF_REGION2, SPACEPAD, UTF8,
    Array, Compound, Datatype, Enum, Reference, String, VarLen)
from ..storage.global_heap import GlobalHeapReader
from .dtypes import is_converted, needs_conversion, npy_dtype, numpy_dtype
from .numeric_conversion import convert

MAX_VIEW_BYTES = 256 * 1024 * 1024     # one decoded fixed-width array (a .npy view, an attribute)
# Variable-length payload one decode may gather: many elements may name one large heap object,
# so a small file could otherwise claim gigabytes.
MAX_VLEN_PAYLOAD = 128 * 1024 * 1024

# ------------------------------------------------------------------------------------ strings


def strip_padding(b: bytes, padding: int) -> bytes:
    if padding == NULLTERM:
        i = b.find(b"\0")
        return b if i < 0 else b[:i]
    if padding == NULLPAD:
        return b.rstrip(b"\0")
    if padding == SPACEPAD:
        return b.rstrip(b" ")
    return b


def _text(b: bytes, charset: int, errors: str) -> str:
    return b.decode("utf-8" if charset == UTF8 else "ascii", errors)


def check_view_size(count: int, dtype: np.dtype) -> None:
    """Refuse a fixed-width array of decoded values larger than MAX_VIEW_BYTES: its size follows
    the longest value, so one long string among many short ones could ask for gigabytes."""
    nbytes = count * dtype.itemsize
    if nbytes > MAX_VIEW_BYTES:
        raise Unsupported(f"{count} values as {dtype} would take {nbytes} bytes (at most {MAX_VIEW_BYTES})")


def _str_array(items: list[str], shape=None) -> np.ndarray:
    width = max((len(s) for s in items), default=0)
    check_view_size(len(items), np.dtype(f"<U{max(width, 1)}"))
    out = np.array(items, dtype=f"<U{max(width, 1)}")
    return out.reshape(shape) if shape is not None else out


def decode_fixed_strings(raw: bytes | memoryview, dt: String, errors: str = "replace") -> np.ndarray:
    """Fixed-length string elements -> 1-D array of str (padding removed)."""
    raw = bytes(raw)
    n = len(raw) // dt.size if dt.size else 0
    items = [_text(strip_padding(raw[i * dt.size:(i + 1) * dt.size], dt.padding), dt.charset, errors)
             for i in range(n)]
    return _str_array(items)


# ------------------------------------------------------------------------------- vlen elements

def vlen_descriptors(raw: bytes | memoryview, sizes: Sizes) -> np.ndarray:
    """Parse vlen elements into a record array with fields len, addr, index."""
    dtype = np.dtype([("len", "<u4"), ("addr", f"<u{sizes.offset}"), ("index", "<u4")])
    if len(raw) % dtype.itemsize:
        raise FormatError(f"vlen data: {len(raw)} bytes is not a multiple of {dtype.itemsize}")
    return np.frombuffer(raw, dtype)


def check_vlen_payload(descriptors: np.ndarray, elsize: int) -> None:
    """Refuse, before reading anything, vlen elements that claim more than MAX_VLEN_PAYLOAD."""
    total = int(descriptors["len"].astype(np.uint64).sum()) * elsize
    if total > MAX_VLEN_PAYLOAD:
        raise Unsupported(f"variable-length data of {total} bytes (at most {MAX_VLEN_PAYLOAD} per view)")


def _vlen_bytes(length: int, addr: int, index: int, elsize: int, heap: GlobalHeapReader) -> bytes:
    if length == 0:
        return b""
    data = heap.get(addr, index)
    need = length * elsize
    if need > len(data):
        raise FormatError(f"vlen element: {length} x {elsize} bytes claimed, heap object holds {len(data)}")
    return data[:need]


def decode_vlen_strings(raw: bytes | memoryview, dt: VarLen, heap: GlobalHeapReader, sizes: Sizes,
                        errors: str = "replace") -> np.ndarray:
    """Vlen string elements -> 1-D array of str ('U<longest>')."""
    if not dt.is_string:
        raise TypeError("decode_vlen_strings needs a variable-length string type")
    items = []
    descriptors = vlen_descriptors(raw, sizes)
    check_vlen_payload(descriptors, dt.base.size)
    for length, addr, index in descriptors.tolist():
        b = _vlen_bytes(length, addr, index, dt.base.size, heap)
        if dt.padding == NULLTERM:
            b = strip_padding(b, NULLTERM)
        items.append(_text(b, dt.charset, errors))
    return _str_array(items)


def decode_vlen_sequences(raw: bytes | memoryview, dt: VarLen, heap: GlobalHeapReader,
                          sizes: Sizes) -> list[np.ndarray]:
    """Vlen sequence elements of a plain base type -> list of 1-D arrays (numpy_dtype of base;
    npy_dtype, the converted values, for bases NumPy cannot hold as stored)."""
    if dt.is_string:
        raise TypeError("decode_vlen_sequences needs a variable-length sequence type")
    if is_converted(dt.base):
        raise Unsupported("variable-length sequences of variable-length data or references (use to_npy)")
    es = dt.base.size
    out = []
    descriptors = vlen_descriptors(raw, sizes)
    check_vlen_payload(descriptors, es)
    for length, addr, index in descriptors.tolist():
        data = _vlen_bytes(length, addr, index, es, heap)
        out.append(convert(data, dt.base, length) if needs_conversion(dt.base)
                   else np.frombuffer(data, numpy_dtype(dt.base)))
    return out


# --------------------------------------------------------------------------------- selections

def selection_text(sel: SEL.Selection) -> str:
    """How a region reference's selection reads: 'all', 'none', 'points (1,2) (3,4)',
    'hyperslab start=(..) stride=(..) count=(..) block=(..)' or 'blocks (0:2,1:3) ...'."""
    if sel.kind in ("all", "none"):
        return sel.kind
    if sel.kind == "points":
        return "points " + " ".join("(" + ",".join(map(str, p)) + ")" for p in sel.points.tolist())
    if sel.regular is not None:
        ones = (1 << (8 * sel.width)) - 1   # an unlimited count or block, as stored
        start, stride, count, block = (tuple(ones if v is None else v for v in part) for part in sel.regular)
        return (f"hyperslab start=({','.join(map(str, start))}) stride=({','.join(map(str, stride))}) "
                f"count=({','.join(map(str, count))}) block=({','.join(map(str, block))})")
    return "blocks " + " ".join(
        "(" + ",".join(f"{a}:{b + 1}" for a, b in zip(s, e)) + ")" for s, e in sel.blocks.tolist())


# --------------------------------------------------------------------------------- references

@dataclass(frozen=True)
class Ref:
    """A decoded reference. kind: 'object', 'region' or 'attribute'. address is the target
    object's header address (the token of the native VOL); file is set for external refs."""

    kind: str
    address: int | None
    selection: SEL.Selection | None = None
    attribute: str | None = None
    file: str | None = None
    token: bytes = b""


def _token_addr(token: bytes, sizes: Sizes) -> int | None:
    v = int.from_bytes(token[:sizes.offset], "little")
    return None if v == sizes.undefined else v


def decode_references(raw: bytes | memoryview, dt: Reference, heap: GlobalHeapReader | None,
                      sizes: Sizes) -> list[Ref | None]:
    """Reference elements -> Ref objects (None for null references)."""
    raw = bytes(raw)
    if dt.size == 0 or len(raw) % dt.size:
        raise FormatError(f"reference data: {len(raw)} bytes is not a multiple of {dt.size}")
    out: list[Ref | None] = []
    for i in range(0, len(raw), dt.size):
        el = raw[i:i + dt.size]
        c = Reader(el, 0, sizes, "reference")
        if dt.ref_type == REF_OBJECT1:
            addr = c.offset()
            out.append(None if not addr else Ref("object", addr))
        elif dt.ref_type == REF_REGION1:
            addr = c.offset()
            index = c.u32()
            if not addr:
                out.append(None)
                continue
            if heap is None:
                raise Unsupported("region references need the global heap")
            hc = Reader(heap.get(addr, index), 0, sizes, "region reference")
            target = hc.offset()
            out.append(Ref("region", target, SEL.decode(hc)))
        elif dt.ref_type in (REF_OBJECT2, REF_REGION2, REF_ATTR):
            out.append(_revised_ref(c, heap, sizes))
        else:
            raise Unsupported(f"reference type {dt.ref_type}")
    return out


def _revised_ref(c: Reader, heap: GlobalHeapReader | None, sizes: Sizes) -> Ref | None:
    rtype = c.u8()
    flags = c.u8()
    if rtype == 0:
        return None
    if rtype not in (REF_OBJECT2, REF_REGION2, REF_ATTR):
        raise FormatError(f"reference: unknown type {rtype}")
    external = bool(flags & 1)
    if rtype == REF_OBJECT2 and not external:
        body = c                              # inline: token size + token
    else:
        blob_size = c.u32()
        addr = c.offset()
        index = c.u32()
        if not addr:
            return None
        if heap is None:
            raise Unsupported("revised references need the global heap")
        data = heap.get(addr, index)
        if blob_size > len(data):
            raise FormatError(f"reference: blob of {blob_size} bytes, heap object holds {len(data)}")
        body = Reader(data[:blob_size], 0, sizes, "reference block")
    tsize = body.u8()
    token = body.bytes(tsize)
    fname = None
    if external:
        fname = body.bytes(body.u16()).decode("utf-8", "replace")
    kind, sel, attr = "object", None, None
    if rtype == REF_REGION2:
        kind = "region"
        size = body.u32()           # of the selection serialization (rank not included)
        body.u32()                  # rank (the selection stores its own)
        sub = Reader(body.bytes(size), 0, sizes, "region reference selection")
        sel = SEL.decode(sub)
    elif rtype == REF_ATTR:
        kind = "attribute"
        attr = body.bytes(body.u16()).decode("utf-8", "surrogateescape")
    return Ref(kind, _token_addr(token, sizes), sel, attr, fname, token)


def default_ref_text(ref: Ref | None) -> str:
    """Text without path resolution (the model layer passes a resolver that gives paths)."""
    if ref is None:
        return ""
    s = f"{ref.file}:" if ref.file else ""
    s += f"object@{ref.address}"
    if ref.kind == "region" and ref.selection is not None:
        s += f"[{selection_text(ref.selection)}]"
    elif ref.kind == "attribute":
        s += f"@{ref.attribute}"
    return s


# --------------------------------------------------------------------------------- .npy view

class _Widths:
    """What a general decode has seen so far: the widest text and sequence, and the payload."""

    def __init__(self):
        self.text = 1
        self.seq = 0
        self.payload = 0

    def spend(self, nbytes: int) -> None:
        self.payload += nbytes
        if self.payload > MAX_VLEN_PAYLOAD:
            raise Unsupported(f"variable-length data of more than {MAX_VLEN_PAYLOAD} bytes in one view")


def to_npy(raw: bytes | memoryview, dt: Datatype, heap: GlobalHeapReader | None, sizes: Sizes,
           ref_text: Callable[[Ref | None], str] = default_ref_text, errors: str = "replace") -> np.ndarray:
    """Elements (1-D) -> array of dtypes.npy_dtype(dt, widths) with vlen data, references and
    numbers NumPy cannot hold as stored converted. For types holding none of these this is a
    zero-copy view."""
    if dt.size == 0 or len(raw) % dt.size:
        raise FormatError(f"element data: {len(raw)} bytes is not a multiple of {dt.size}")
    n = len(raw) // dt.size
    if not is_converted(dt):
        if needs_conversion(dt):
            return convert(raw, dt, n)
        return np.frombuffer(raw, npy_dtype(dt), n)
    if isinstance(dt, VarLen) and dt.is_string:                    # fast, common case
        return decode_vlen_strings(raw, dt, heap, sizes, errors)
    w = _Widths()
    raw = bytes(raw)
    items = [_value(raw[i * dt.size:(i + 1) * dt.size], dt, heap, sizes, ref_text, errors, w) for i in range(n)]
    out_dt = npy_dtype(dt, w.text, w.seq)
    check_view_size(n, out_dt)
    out = np.zeros(n, out_dt)
    for i, v in enumerate(items):
        out[i] = _fill(v, dt, out_dt, w)
    return out


def _value(b: bytes, dt: Datatype, heap, sizes, ref_text, errors, w: _Widths) -> Any:
    """Python-level value of one element of dt (only called where dt is converted)."""
    if not is_converted(dt):
        if needs_conversion(dt):
            return convert(b, dt, 1)[0]
        return np.frombuffer(b, npy_dtype(dt), 1)[0]
    if isinstance(dt, VarLen):
        (length, addr, index), = vlen_descriptors(b, sizes).tolist()
        w.spend(length * dt.base.size)
        data = _vlen_bytes(length, addr, index, dt.base.size, heap)
        if dt.is_string:
            if dt.padding == NULLTERM:
                data = strip_padding(data, NULLTERM)
            s = _text(data, dt.charset, errors)
            w.text = max(w.text, len(s))
            return s
        w.seq = max(w.seq, length)
        es = dt.base.size
        return [_value(data[k * es:(k + 1) * es], dt.base, heap, sizes, ref_text, errors, w) for k in range(length)]
    if isinstance(dt, Reference):
        (ref,) = decode_references(b, dt, heap, sizes)
        s = ref_text(ref)
        w.spend(len(s))  # a region's text lists its selection: bounded like vlen payload
        w.text = max(w.text, len(s))
        return s
    if isinstance(dt, Compound):
        return tuple(_value(b[m.offset:m.offset + m.type.size], m.type, heap, sizes, ref_text, errors, w)
                     for m in dt.members)
    if isinstance(dt, Array):
        es = dt.base.size
        count = dt.size // es
        return [_value(b[k * es:(k + 1) * es], dt.base, heap, sizes, ref_text, errors, w) for k in range(count)]
    if isinstance(dt, Enum):
        return _value(b, dt.base, heap, sizes, ref_text, errors, w)
    raise Unsupported(f"{dt.class_name} values")


def _fill(v: Any, dt: Datatype, out_dt: np.dtype, w: _Widths) -> Any:
    """Shape a Python-level value for assignment into an element of out_dt."""
    if not is_converted(dt):
        return v
    if isinstance(dt, VarLen) and not dt.is_string:
        base_dt = out_dt["values"].base
        vals = np.zeros(w.seq, base_dt)
        for k, x in enumerate(v):
            vals[k] = _fill(x, dt.base, base_dt, w)
        return (len(v), vals)
    if isinstance(dt, Compound):
        return tuple(_fill(x, m.type, out_dt[m.name], w) for x, m in zip(v, dt.members))
    if isinstance(dt, Array):
        base_dt = out_dt.base
        arr = np.zeros(len(v), base_dt)
        for k, x in enumerate(v):
            arr[k] = _fill(x, dt.base, base_dt, w)
        return arr.reshape(dt.dims)
    return v


def max_text_width(strings: np.ndarray) -> int:
    """Longest string (in characters) of an array of str, at least 1."""
    if strings.size == 0:
        return 1
    return max(1, int(np.char.str_len(strings).max()))
