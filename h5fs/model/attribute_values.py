"""Attribute values from text: the inverse of the text the mount shows for an attribute
(h5fs/fuse/views.py `format_value`), for `setfattr`, and new string attributes as h5py writes them.

`parse_value(text, datatype, dataspace)` reads the text back into the attribute's stored element
bytes, keeping its datatype and shape:
- numbers as `format_value` prints them: a scalar alone (`3`, `-0.5`, `nan`, `inf`), arrays as
  nested brackets (`[1, 2, 3]`, `[[1, 2], [3, 4]]`; spacing free), exactly the dataspace's shape
  (a null dataspace and empty arrays read `[]`, `[[], []]`...); a one-element array also takes
  its value alone, as h5py's `attrs.modify` does (netCDF stores every number as a one-element
  array, which ncdump and netCDF4 show as a scalar). Integers of every size, order,
  precision and bit offset (padding bits as the datatype says), in range; IEEE floats of 2, 4, 8
  bytes and the platform's long double, either order, a finite number that overflows refused;
  complex numbers `(1+2j)`, `2j`, `(nan-infj)` (h5py's {r, i} compounds and the complex class);
  h5py's booleans `True`/`False`; other enums a member's value or name; bitfields and time values
  as the stored unsigned/signed integer. NaN payloads are not kept (every NaN shows as `nan`).
- strings: the text itself, one element per line for arrays of several (so an element of such an
  array cannot hold a newline). Fixed-length strings take at most their size in bytes (a longer
  one is refused, never truncated; a null-terminated one may fill the whole size, as the mount
  shows such a value) and are padded as the datatype says (NULs, or spaces for space-padded);
  `setfattr` first resizes the datatype to the text (`fitted_types`).
  Variable-length strings (a list of each element's bytes, for the global heap) hold no NUL.
  UTF-8 strings must be valid UTF-8; ASCII ones take any bytes, as C programs write them.
Text that does not parse or fit raises InvalidWrite (EINVAL); datatypes whose values are not
written from text (compounds other than complex, arrays, opaque, references, vlen sequences,
non-IEEE floats) raise CannotWrite (ENOTSUP).

`fitted_types(text, datatype, dataspace)` is the datatype and dataspace a new value is stored
with: a fixed-length string type rebuilt at the text's length, as netCDF-4 and PyTables store
every text attribute (exactly its length, no padding) and as they and h5py recreate one when a
user sets it: netCDF's `setncattr`, PyTables' `attrs.X = ...`, h5py's `attrs[name] = ...`. The
padding and character set are kept; an array of several strings takes its longest element's
length, the others padded (what NumPy and h5py make of a list of byte strings); the empty text
is one pad byte (HDF5 has no 0-byte strings; netCDF and h5py write "" so), or in PyTables' files
a null dataspace, as PyTables writes "" (its own TITLE, CLASS... would read a pad byte back as
"\x00"); a null dataspace becomes scalar for a non-empty text. Other datatypes and dataspaces
are kept.

`store_value(txn, ...)` gives the bytes for the attribute message, variable-length strings put in
the global heap as libhdf5's H5Awrite does (H5T__conv_vlen's element order, each element's old
object removed first when not empty: H5T__vlen_disk_write/H5T__vlen_disk_delete);
`release_value` removes the heap objects of a value (libhdf5 leaves them when it deletes an
attribute; removing them is allowed and gives the space back).

`new_fixed_string_attribute` is the message netCDF-4 and PyTables write for a new text
attribute. `new_string_attribute` is the message h5py writes for `attrs[name] = "text"`: a scalar
variable-length UTF-8 string, null-terminated padding (the heap object holds the bytes without a
NUL), attribute message version 1 (format bound earliest) or 3 (later bounds), dataspace message 1
or 2, name character set ASCII (h5py labels no attribute name UTF-8).
"""

from __future__ import annotations

import functools

import math
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ..errors import CannotWrite, InvalidWrite, Unsupported
from ..format import global_heap as gh
from ..format.codec import Reader, Sizes, Writer, encoded
from ..format.messages import attribute as attr_msg
from ..format.messages import dataspace as DS
from ..format.messages import datatype as T
from ..storage import global_heap as ghw
from .dtype_encode import datatype_of
from .dtypes import is_bool_enum, npy_dtype, numpy_dtype
from .libver import at_least

if TYPE_CHECKING:
    from ..storage.transaction import Transaction

MEMORY_STRING = 8     # sizeof(char *): an element of a variable-length string in memory


# ------------------------------------------------------------------------------------ text

def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidWrite(f"{what} is not valid UTF-8") from None


def _nested(text: str) -> str | list:
    """The text as nested lists of element tokens (stripped strings)."""
    pos = 0

    def skip() -> None:
        nonlocal pos
        while pos < len(text) and text[pos].isspace():
            pos += 1

    def value(depth: int) -> str | list:
        nonlocal pos
        if depth > DS.MAX_RANK:
            raise InvalidWrite(f"value text: lists nested deeper than {DS.MAX_RANK}")
        skip()
        if text.startswith("[", pos):
            pos += 1
            skip()
            items: list = []
            while not text.startswith("]", pos):
                if items:
                    if not text.startswith(",", pos):
                        raise InvalidWrite(f"value text: ',' or ']' expected at character {pos}")
                    pos += 1
                items.append(value(depth + 1))
                skip()
            pos += 1
            return items
        start = pos
        while pos < len(text) and text[pos] not in ",[]":
            pos += 1
        token = text[start:pos].strip()
        if not token:
            raise InvalidWrite(f"value text: a value expected at character {start}")
        return token

    out = value(0)
    skip()
    if pos != len(text):
        raise InvalidWrite(f"value text: unexpected {text[pos]!r} at character {pos}")
    return out


def _tokens(text: str, dims: tuple[int, ...]) -> list[str]:
    """The element tokens of `text`, in storage order, when its nesting is exactly `dims`."""
    out: list[str] = []

    def walk(node, depth: int) -> None:
        if depth == len(dims):
            if not isinstance(node, str):
                raise InvalidWrite(f"value text: a value expected where a list of {len(node)} is")
            out.append(node)
            return
        if isinstance(node, str) or len(node) != dims[depth]:
            got = "a single value" if isinstance(node, str) else f"{len(node)} items"
            raise InvalidWrite(f"value text: {got} where the shape {dims} needs {dims[depth]}")
        for child in node:
            walk(child, depth + 1)

    node = _nested(text)
    if isinstance(node, str) and dims and math.prod(dims) == 1:   # a one-element array's value alone
        return [node]
    walk(node, 0)
    return out


def _lines(text: bytes, count: int) -> list[bytes]:
    """String elements: the whole text for one, one per line for several, none for no text."""
    if count == 0:
        if text:
            raise InvalidWrite("value text: the attribute holds no elements")
        return []
    items = [text] if count == 1 else text.split(b"\n")
    if len(items) != count:
        raise InvalidWrite(f"value text: {len(items)} lines for {count} string elements")
    return items


# --------------------------------------------------------------------------------- numbers

def _int_bytes(value: int, size: int, order: str, signed: bool, offset: int = 0, precision: int | None = None,
               lo_pad: int = 0, hi_pad: int = 0) -> bytes:
    """An integer stored in `size` bytes: `precision` bits at bit `offset`, padding bits set when
    the datatype says so."""
    precision = 8 * size if precision is None else precision
    lo, hi = (-(1 << precision - 1), (1 << precision - 1) - 1) if signed else (0, (1 << precision) - 1)
    if not lo <= value <= hi:
        raise InvalidWrite(f"value {value} is out of range [{lo}, {hi}]")
    return _padded(value << offset, size, order, offset, precision, lo_pad, hi_pad)


def _padded(raw: int, size: int, order: str, offset: int, precision: int, lo_pad: int, hi_pad: int) -> bytes:
    """The element's bytes: bits [offset, offset + precision) of `raw`, the bits below and above
    them the padding the datatype says (zeros, or ones)."""
    raw &= ((1 << precision) - 1) << offset
    if lo_pad:
        raw |= (1 << offset) - 1
    if hi_pad:
        raw |= ((1 << 8 * size) - 1) ^ ((1 << offset + precision) - 1)
    return raw.to_bytes(size, "big" if order == ">" else "little")


def _int(token: str) -> int:
    try:
        return int(token)
    except ValueError:
        raise InvalidWrite(f"{token!r} is not an integer") from None


def _float(token: str, dtype: np.dtype) -> np.ndarray:
    """`token` as a 0-d array of float dtype `dtype`; a finite number that overflows is refused."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            parsed = np.longdouble(token) if dtype.itemsize > 8 else float(token)
            out = np.array(parsed, dtype)
    except ValueError:
        raise InvalidWrite(f"{token!r} is not a number") from None
    if np.isinf(out) and "inf" not in token.lower():
        raise InvalidWrite(f"{token} is out of range for {dtype.name}")
    return out


def _complex_parts(token: str) -> tuple[str, str]:
    """Real and imaginary part of numpy's complex text: `(1+2j)`, `2j`, `(-0-0j)`, `3`."""
    s = token[1:-1].strip() if token.startswith("(") and token.endswith(")") else token
    if not s.endswith("j"):
        return s, "0"
    s = s[:-1]
    for k in range(len(s) - 1, 0, -1):
        if s[k] in "+-" and s[k - 1] not in "eE":
            return s[:k], s[k:]
    return "0", s


def _float_encoder(f: T.FloatingPoint) -> Callable[[str], bytes]:
    """IEEE floats (NumPy's layouts); bytes past the precision (a long double's padding) are
    written as the datatype says, not as NumPy leaves them."""
    dtype = numpy_dtype(f)
    order = ">" if f.order == ">" else "<"

    def encode(token: str) -> bytes:
        raw = int.from_bytes(_float(token, dtype).tobytes(), "big" if order == ">" else "little")
        return _padded(raw, f.size, order, f.bit_offset, f.precision, f.lo_pad, f.hi_pad)
    return encode


def _complex(part: T.FloatingPoint) -> Callable[[str], bytes]:
    """Complex numbers: real then imaginary part, each a float of type `part`."""
    encode_part = _float_encoder(part)

    def encode(token: str) -> bytes:
        re, im = _complex_parts(token)
        return encode_part(re) + encode_part(im)
    return encode


def _enum(dt: T.Enum) -> Callable[[str], bytes]:
    by_name = dict(zip(dt.names, dt.raw_values))
    by_value = dict(zip(dt.values, dt.raw_values))
    if is_bool_enum(dt):       # shown as NumPy booleans; typed in a shell in lower case too
        by_name |= {"False": by_value[0], "True": by_value[1], "false": by_value[0], "true": by_value[1]}

    def encode(token: str) -> bytes:
        raw = by_name.get(token)
        if raw is None:
            try:
                raw = by_value.get(int(token))
            except ValueError:
                pass
        if raw is None:
            raise InvalidWrite(f"{token!r} is not a value of the enum ({', '.join(dt.names)})")
        return raw
    return encode


def _leaf(dt: T.Datatype) -> Callable[[str], bytes]:
    """The encoder of one element token of a numeric datatype."""
    if isinstance(dt, T.FixedPoint):
        return lambda tok: _int_bytes(_int(tok), dt.size, dt.order, dt.signed, dt.bit_offset, dt.precision,
                                      dt.lo_pad, dt.hi_pad)
    if isinstance(dt, (T.Bitfield, T.Time)):   # shown as the stored unsigned / signed integer
        return lambda tok: _int_bytes(_int(tok), dt.size, dt.order, isinstance(dt, T.Time))
    if isinstance(dt, T.Enum):
        return _enum(dt)
    try:
        if isinstance(dt, T.FloatingPoint):
            return _float_encoder(dt)
        if isinstance(dt, T.Complex):
            numpy_dtype(dt)                  # refuses the forms NumPy does not hold
            return _complex(dt.base)
        if isinstance(dt, T.Compound) and npy_dtype(dt).kind == "c":   # h5py's {r, i}
            return _complex(dt.members[0].type)
    except Unsupported as e:
        raise CannotWrite(f"attribute values of this datatype cannot be written: {e}") from None
    raise CannotWrite(f"attribute values of {dt.class_name} datatypes cannot be written from text")


# --------------------------------------------------------------------------------- strings

def _checked(items: list[bytes], charset: int, nul: bool, what: str) -> list[bytes]:
    for b in items:
        if nul and b"\0" in b:
            raise InvalidWrite(f"{what} cannot hold a NUL byte")
        if charset == T.UTF8:
            _text(b, what)
    return items


def _fixed_strings(text: bytes, dt: T.String, count: int) -> bytes:
    items = _checked(_lines(text, count), dt.charset, False, "a fixed-length string")
    fill = b" " if dt.padding == T.SPACEPAD else b"\0"
    for b in items:
        if len(b) > dt.size:
            raise InvalidWrite(f"a string of {len(b)} bytes does not fit the attribute's {dt.size}-byte strings")
    return b"".join(b.ljust(dt.size, fill) for b in items)


# ----------------------------------------------------------------------------------- values

def _dims(space: DS.Dataspace) -> tuple[int, ...]:
    return space.dims if space.kind == DS.SIMPLE else (0,) if space.kind == DS.NULL else ()


def fitted_types(text: bytes, datatype: T.Datatype, dataspace: DS.Dataspace,
                 empty_null: bool = False) -> tuple[T.Datatype, DS.Dataspace]:
    """The datatype and dataspace the value `text` is stored with (see the module docstring);
    `empty_null`: a scalar's empty text as a null dataspace (PyTables' "")."""
    if not isinstance(datatype, T.String):
        return datatype, dataspace
    if empty_null and not text and dataspace.kind == DS.SCALAR:
        return datatype, DS.Dataspace(DS.NULL, version=2)
    if dataspace.kind == DS.NULL:
        if not text:
            return datatype, dataspace
        dataspace = DS.Dataspace(DS.SCALAR, version=dataspace.version)
    items = _lines(text, dataspace.count)
    if not items:
        return datatype, dataspace
    return replace(datatype, size=max(1, *map(len, items))), dataspace


def parse_value(text: bytes, datatype: T.Datatype, dataspace: DS.Dataspace) -> bytes | list[bytes]:
    """The stored element bytes `text` stands for (see the module docstring); for variable-length
    strings, each element's bytes (`store_value` puts them in the global heap)."""
    if isinstance(datatype, T.String):
        return _fixed_strings(text, datatype, dataspace.count)
    if isinstance(datatype, T.VarLen) and datatype.is_string:
        return _checked(_lines(text, dataspace.count), datatype.charset, True, "a variable-length string")
    encode = _leaf(datatype)
    return b"".join(encode(tok) for tok in _tokens(_text(text, "value text"), _dims(dataspace)))


def conversion_order(count: int, src: int, dst: int) -> list[int]:
    """The order in which H5T__conv_vlen converts `count` elements of `src` bytes into `dst`
    bytes in one buffer: forward when they do not grow; else, while at least two of the last
    elements are "safe" (their destination past every source not yet converted), those forward,
    then the rest from the last."""
    if dst <= src:
        return list(range(count))
    order: list[int] = []
    while count > 0:
        safe = count - (count * src + dst - 1) // dst
        if safe < 2:
            return order + list(range(count - 1, -1, -1))
        order += range(count - safe, count)
        count -= safe
    return order


def _vlen_elements(data: bytes, count: int, sizes: Sizes) -> list[tuple[int, gh.HeapID]]:
    """(length, heap ID) of each variable-length element."""
    c = Reader(data, 0, sizes, "variable-length element")
    return [(c.u32(), gh.decode_heap_id(c)) for _ in range(count)]


def _vlen_bytes(elements: list[tuple[int, gh.HeapID]], sizes: Sizes) -> bytes:
    w = Writer(sizes)
    for length, hid in elements:
        w.u32(length)
        gh.encode_heap_id(w, hid)
    return w.getvalue()


def _delete(txn: Transaction, length: int, hid: gh.HeapID) -> None:
    """H5T__vlen_disk_delete: an element's heap object goes unless the element is empty."""
    if length and not hid.is_nil:
        ghw.remove(txn, hid.address, hid.index)


def store_value(txn: Transaction, text: bytes, datatype: T.Datatype, dataspace: DS.Dataspace,
                old: bytes | None = None) -> bytes:
    """The attribute's new data for `text`; variable-length strings stored in the global heap,
    the objects of `old` (the value it replaces, if any) removed, as H5Awrite does."""
    parsed = parse_value(text, datatype, dataspace)
    if isinstance(parsed, bytes):
        return parsed
    count = len(parsed)
    previous = _vlen_elements(old, count, txn.sizes) if old is not None else None
    ids: list[gh.HeapID | None] = [None] * count
    for k in conversion_order(count, MEMORY_STRING, datatype.size):
        if previous is not None:
            _delete(txn, *previous[k])
        ids[k] = ghw.insert(txn, parsed[k])
    return _vlen_bytes([(len(b), hid) for b, hid in zip(parsed, ids)], txn.sizes)


def revalued(txn: Transaction, msg: attr_msg.AttributeMessage, text: bytes, datatype: T.Datatype,
             dataspace: DS.Dataspace, keep_old: bool = False, empty_null: bool = False) -> attr_msg.AttributeMessage:
    """`msg`, of this datatype and dataspace, holding the value `text` with the types fitted to it
    (`fitted_types`; a changed one stored in the message itself, no longer shared); the old
    value's global heap objects removed unless `keep_old`."""
    dt, space = fitted_types(text, datatype, dataspace, empty_null)
    old = None if keep_old else msg.data[:dataspace.count * datatype.size]
    msg = replace(msg, data=store_value(txn, text, dt, space, old=old))
    if dt != datatype:
        msg = replace(msg, datatype_raw=encoded(T.encode, dt, txn.sizes), datatype_shared=False)
    if space != dataspace:
        msg = replace(msg, dataspace_raw=encoded(DS.encode, space, txn.sizes), dataspace_shared=False)
    return msg


def release_value(txn: Transaction, data: bytes, datatype: T.Datatype, dataspace: DS.Dataspace) -> None:
    """Remove the global heap objects of a variable-length value (each once; other datatypes
    hold none this removes)."""
    if not isinstance(datatype, T.VarLen):
        return
    seen: set[gh.HeapID] = set()
    for length, hid in _vlen_elements(data, dataspace.count, txn.sizes):
        if hid not in seen:
            seen.add(hid)
            _delete(txn, length, hid)


# ------------------------------------------------------------------------- new attributes

def string_datatype(sizes: Sizes) -> T.VarLen:
    """h5py's variable-length UTF-8 string (h5py.string_dtype())."""
    char = T.FixedPoint(1, 1, "<", False, 0, 0, 0, 8)
    return T.VarLen(1, 4 + gh.heap_id_size(sizes), T.VLEN_STRING, T.NULLTERM, T.UTF8, char)


def check_string_attribute(name: str, text: bytes) -> None:
    raw_name = name.encode("utf-8", "surrogateescape")
    if not raw_name or b"\0" in raw_name or len(raw_name) >= attr_msg.MAX_NAME:
        raise InvalidWrite(f"attribute name {name!r}: empty, holding a NUL, or too long")
    _checked([text], T.UTF8, True, "a string attribute")


def new_string_attribute(name: str, text: bytes, heap_id: gh.HeapID, sizes: Sizes,
                         libver: str = "earliest") -> attr_msg.AttributeMessage:
    """The attribute message libhdf5 writes for h5py's `attrs[name] = text` (a str) in a file of
    format bound `libver`, its value the heap object `heap_id` holding `text`."""
    check_string_attribute(name, text)
    datatype, space, version = _string_scalar(sizes, libver)
    return attr_msg.AttributeMessage(name, datatype, space, _vlen_bytes([(len(text), heap_id)], sizes), version=version)


@functools.lru_cache(maxsize=8)
def _string_scalar(sizes: Sizes, libver: str) -> tuple[bytes, bytes, int]:
    """A scalar string attribute's datatype and dataspace, encoded, and its message version
    (the same for every such attribute of a file: a burst of `setfattr` encodes them once)."""
    later = at_least(libver, "v108")
    space = DS.Dataspace(DS.SCALAR, version=2 if later else 1)
    return encoded(T.encode, string_datatype(sizes), sizes), encoded(DS.encode, space, sizes), 3 if later else 1


def new_fixed_string_attribute(name: str, text: bytes, charset: int, sizes: Sizes, libver: str = "earliest",
                               empty_null: bool = False) -> attr_msg.AttributeMessage:
    """The attribute message netCDF-4 (`charset` ASCII) and PyTables (UTF-8) write for a text
    attribute: a scalar null-terminated fixed-length string of exactly the text's bytes, "" as one
    NUL, or with `empty_null` as PyTables writes it: a null dataspace."""
    check_string_attribute(name, b"")
    _checked([text], charset, False, "a string attribute")
    later = at_least(libver, "v108")
    datatype = T.String(1, max(1, len(text)), T.NULLTERM, charset)
    kind = DS.NULL if empty_null and not text else DS.SCALAR
    space = DS.Dataspace(kind, version=2 if later or kind == DS.NULL else 1)
    return attr_msg.AttributeMessage(name, encoded(T.encode, datatype, sizes), encoded(DS.encode, space, sizes),
                                     _fixed_strings(text, datatype, space.count), version=3 if later else 1)


def value_shape(text: bytes) -> tuple[int, ...]:
    """The shape a value text has: () for one value, (n,) for a list of n, (n, m) for a list of
    lists... (ragged lists are refused when the elements are parsed)."""
    node, dims = _nested(_text(text, "value text")), []
    while not isinstance(node, str):
        dims.append(len(node))
        if not node:
            break
        node = node[0]
    return tuple(dims)


def new_attribute(name: str, dtype: np.dtype, text: bytes, sizes: Sizes,
                  libver: str = "earliest") -> attr_msg.AttributeMessage:
    """The attribute message libhdf5 writes for h5py's `attrs[name] = np.array(value, dtype)`
    (a number, bool or complex dtype), the value parsed from `text` as the mount shows values
    (`3.5`, `[1, 2, 3]`, `[[1, 2], [3, 4]]`) and its shape the text's."""
    check_string_attribute(name, b"")
    dtype = np.dtype(dtype)
    if dtype.kind not in "biufc" or dtype.fields is not None or dtype.subdtype is not None:
        raise InvalidWrite(f"attribute {name!r}: dtype {dtype} is not a number, bool or complex type "
                           "(a string value needs no dtype)")
    datatype = datatype_of(dtype, libver)
    later = at_least(libver, "v108")
    dims = value_shape(text)
    space = DS.Dataspace(DS.SIMPLE if dims else DS.SCALAR, dims, dims, version=2 if later else 1)
    data = parse_value(text, datatype, space)
    return attr_msg.AttributeMessage(name, encoded(T.encode, datatype, sizes), encoded(DS.encode, space, sizes),
                                     data, version=3 if later else 1)


def create_string_attribute(txn: Transaction, name: str, text: bytes, libver: str = "earliest") -> attr_msg.AttributeMessage:
    """`new_string_attribute` with `text` put in the global heap."""
    check_string_attribute(name, text)     # refused before anything is stored
    return new_string_attribute(name, text, ghw.insert(txn, text), txn.sizes, libver)
