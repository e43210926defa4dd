"""HDF5 datatypes -> NumPy dtypes and human-readable descriptions.

Three views of a datatype:

`numpy_dtype(dt)`: the exact stored representation of one element: byte order as stored,
  compound members at their stored offsets with the stored itemsize, enums as their base
  integer, arrays as subarray dtypes, opaque as 'V<n>', bitfields as unsigned integers of
  their size, complex numbers as 'c8'/'c16', time as a signed integer of its size. Elements
  whose bytes are not the value (variable-length data, references) are 'V<size>' (the stored
  bytes: length + global heap ID, an address, ...). A layout NumPy cannot hold bit-exactly
  (VAX or non-IEEE floats, integers with padding bits, 16-bit complex...) raises Unsupported
  naming it: the raw file view `D` of such data is its stored bytes, and only the `.npy` view
  holds values (see `needs_conversion`).

`npy_dtype(dt, text_width=1, seq_len=0)`: the dtype of the `.npy` view, readable by
  `np.load` without pickle. It equals numpy_dtype except where the stored bytes are not values:
  - variable-length strings -> 'U<text_width>' (text_width = longest string in characters,
    which only the caller, having read the data, knows: see values.max_text_width);
  - references -> 'U<text_width>': the text values.py produces for them (the target object's
    path for object references; "path[selection]" for region references and "path@attribute"
    for attribute references, formatted by the model layer);
  - variable-length sequences -> a record {'length': '<u8', 'values': (base, (seq_len,))}:
    the number of elements and the elements themselves, zero-padded to the longest sequence
    (seq_len, again computed by the caller). This keeps the data numeric and pickle-free;
  - compounds containing any of the above are re-packed (no stored offsets) since member
    sizes change; h5py-style complex compounds ({r, i} of one IEEE float type, no gaps)
    become complex numbers, as h5py presents them.
  - numbers NumPy cannot hold as stored (`needs_conversion`), decoded bit by bit by
    numeric_conversion.py: floating-point layouts other than IEEE half/single/double (and the
    platform's long double) -> '<f8' (values outside float64's range become +-inf, extra
    mantissa bits are rounded as libhdf5 rounds them when converting to a native double);
    complex numbers of such floats -> '<c16'; integers with padding bits or of a size other
    than 1, 2, 4, 8 bytes -> the value (shifted by the bit offset, masked to the precision,
    sign-extended) in the standard integer of the stored size and signedness (the next larger
    one for odd sizes), stored byte order;
  - h5py's boolean (an enum over a 1-byte integer with exactly FALSE=0 and TRUE=1) -> '|b1'
    (the same bytes, so no conversion), as h5py presents it;
  - opaque types h5py tagged with a NumPy type ("NUMPY:" + its str, what `h5py.opaque_dtype`
    writes: datetime64 and timedelta64 above all) -> that type, as h5py reads them (the same
    bytes); other opaque types, and tags np.load could not read back, stay 'V<n>' (`tagged_dtype`);
  Arrays stay subarray dtypes here (a compound's array members are subarray fields, as in h5py);
  the dataset views append a top-level array's dims to the shape (`split_subarray`), as h5py
  reads an array datatype.
  Fixed-length strings stay 'S<n>' (exact bytes; padding is honoured by values.fixed_strings
  when producing text).

`describe(dt)`: the `user.h5fs.dtype` text, e.g. "<f4", "|S10 (ascii, nullterm)",
  "vlen str (utf-8)", "compound {a: <i4, b: <f8}", "enum <u1 {RED=0, GREEN=1}",
  "<i4 (12-bit at offset 4)", "float(16 bits: sign 15, exponent 8@7 bias 127, mantissa 7@0)"
  (N@P: N bits starting at bit P of the element, bit 0 the least significant once the bytes
  are put in little-endian order). Never raises.
"""

from __future__ import annotations

import functools
from typing import Callable, TypeVar

import numpy as np

from ..errors import Unsupported
from ..format.messages.datatype import (
    CSET_NAMES, NORM_IMPLIED, NORM_MSBSET, NORM_NONE, PAD_NAMES, REF_ATTR, REF_OBJECT1, REF_OBJECT2,
    REF_REGION1, REF_REGION2, Array, Bitfield, Complex, Compound, Datatype, Enum, FixedPoint, FloatingPoint, Opaque,
    Reference, String, Time, VarLen, walk)

_INT_SIZES = (1, 2, 4, 8)

# (size, sign, exponent location, exponent size, mantissa location, mantissa size, bias, norm)
_IEEE = {
    (2, 15, 10, 5, 0, 10, 15, NORM_IMPLIED): "f2",
    (4, 31, 23, 8, 0, 23, 127, NORM_IMPLIED): "f4",
    (8, 63, 52, 11, 0, 52, 1023, NORM_IMPLIED): "f8",
}
_LD = np.finfo(np.longdouble)
_LD_SIZE = np.dtype(np.longdouble).itemsize
if _LD.nmant == 63 and _LD_SIZE in (12, 16):       # x87 80-bit extended in a 12/16-byte slot
    _IEEE[(_LD_SIZE, 79, 64, 15, 0, 64, 16383, NORM_NONE)] = f"f{_LD_SIZE}"
elif _LD.nmant == 112 and _LD_SIZE == 16:         # IEEE binary128 (aarch64, ppc64le...)
    _IEEE[(16, 127, 112, 15, 0, 112, 16383, NORM_IMPLIED)] = "f16"



_F = TypeVar("_F", bound=Callable)


def by_datatype(fn: _F) -> _F:
    """Memoize `fn(dt, ...)` by the datatype record's value: the datasets of a file share a
    few datatypes, and a metadata walk asks each one's views. Records that cannot be hashed
    are computed each time."""
    memo = functools.lru_cache(maxsize=512)(fn)

    @functools.wraps(fn)
    def wrapper(dt, *args, **kwargs):
        try:
            hash(dt)
        except TypeError:
            return fn(dt, *args, **kwargs)
        return memo(dt, *args, **kwargs)

    return wrapper  # type: ignore[return-value]

def _float_code(f: FloatingPoint) -> str | None:
    """NumPy type code ('f4'...) when the layout is one NumPy holds exactly, else None."""
    if f.order == "vax":
        return None
    key = (f.size, f.sign_location, f.exponent_location, f.exponent_size, f.mantissa_location,
           f.mantissa_size, f.exponent_bias, f.normalization)
    code = _IEEE.get(key)
    if code is None:
        return None
    bits = 80 if key[5] == 64 else 8 * f.size
    if f.bit_offset != 0 or f.precision != bits:
        return None
    return code


def _float_layout(f: FloatingPoint) -> str:
    if f.order == "vax":
        return f"VAX-order {8 * f.size}-bit floating point"
    if (f.size, f.exponent_size, f.mantissa_size, f.exponent_bias) == (2, 8, 7, 127):
        return "bfloat16 floating point"
    return (f"non-IEEE floating point ({f.size} bytes, sign bit {f.sign_location}, exponent "
            f"{f.exponent_size} bits at {f.exponent_location} bias {f.exponent_bias}, mantissa "
            f"{f.mantissa_size} bits at {f.mantissa_location})")


def _int_code(t: FixedPoint) -> str:
    return f"{t.order}{'i' if t.signed else 'u'}{t.size}"


# ------------------------------------------------------------------ numbers needing conversion

MAX_FLOAT_SIZE = 16       # bytes: the bit-field float decoder works on two 64-bit words
MAX_EXPONENT_BITS = 63    # libhdf5's own limit (H5T__conv_f_f)
MAX_INT_PRECISION = 64    # bits: values must fit a standard NumPy integer


def _exact_int(t: FixedPoint) -> bool:
    """True when the stored bytes read as a standard NumPy integer give the value."""
    if t.size not in _INT_SIZES:
        return False
    full = t.bit_offset == 0 and t.precision == 8 * t.size
    # An unsigned value in the low bits with zero high padding reads exactly as the container.
    low_unsigned = not t.signed and t.bit_offset == 0 and t.hi_pad == 0
    return full or low_unsigned


def _padded_int(t: FixedPoint) -> bool:
    return t.size not in _INT_SIZES or t.bit_offset != 0 or t.precision != 8 * t.size


def _converted_leaf(t: Datatype) -> bool:
    if isinstance(t, FixedPoint):
        return _padded_int(t)
    if isinstance(t, FloatingPoint):
        return _float_code(t) is None
    if isinstance(t, Complex):
        return isinstance(t.base, FloatingPoint) and (_float_code(t.base) in (None, "f2"))
    return False


@by_datatype
def needs_conversion(dt: Datatype) -> bool:
    """True when dt holds numbers NumPy cannot hold as stored (non-IEEE or VAX floats, integers
    with padding bits or of odd sizes, complex numbers of such floats): the `.npy` view holds
    their values, decoded by numeric_conversion.py; the raw view stays the stored bytes."""
    return any(_converted_leaf(t) for t in walk(dt))


def converted_int_dtype(t: FixedPoint) -> np.dtype:
    """The `.npy` dtype of an integer with padding bits: the standard integer of the stored size
    (the next larger one for 3, 5, 6, 7 bytes; 8 bytes beyond) and signedness, stored order."""
    if t.precision > MAX_INT_PRECISION:
        raise Unsupported(f"{t.precision}-bit integers")
    size = next((n for n in _INT_SIZES if n >= t.size), 8)
    return np.dtype(f"{t.order}{'i' if t.signed else 'u'}{size}")


def check_float_layout(f: FloatingPoint) -> None:
    """Raise Unsupported when the bit-field decoder cannot convert this layout."""
    if f.size > MAX_FLOAT_SIZE:
        raise Unsupported(f"{8 * f.size}-bit floating point (at most {8 * MAX_FLOAT_SIZE} bits are converted)")
    if f.exponent_size > MAX_EXPONENT_BITS:
        raise Unsupported(f"floating point with a {f.exponent_size}-bit exponent")
    bits = 8 * f.size
    if (f.sign_location >= bits or f.exponent_location + f.exponent_size > bits
            or f.mantissa_location + f.mantissa_size > bits):
        raise Unsupported(f"floating-point fields outside its {bits} bits")


VAX_MIN_VERSION = 3


def float_byte_order(f: FloatingPoint) -> str:
    """'<', '>' or 'vax': the byte order libhdf5 reads the element in. libhdf5 (H5Odtype.c)
    honours the VAX bit (bit 6) only in datatype messages of version 3 and later; in versions 1
    and 2 it reads a VAX-flagged float as big-endian, and libhdf5 2.0 itself writes
    H5Tset_order(VAX) types in version-1 messages, so its own files read back big-endian."""
    if f.order == "vax" and f.version < VAX_MIN_VERSION:
        return ">"
    return f.order


def converted_float_dtype(f: FloatingPoint) -> np.dtype:
    """The `.npy` dtype of a float NumPy cannot hold as stored: float64."""
    check_float_layout(f)
    return np.dtype("<f8")


def is_bool_enum(t: Datatype) -> bool:
    """h5py's boolean: an enum over a 1-byte integer with exactly FALSE=0 and TRUE=1."""
    return (isinstance(t, Enum) and isinstance(t.base, FixedPoint) and t.base.size == 1
            and t.base.bit_offset == 0 and t.base.precision == 8
            and sorted(zip(t.names, t.values)) == [("FALSE", 0), ("TRUE", 1)])


@by_datatype
def numpy_dtype(dt: Datatype) -> np.dtype:
    """The exact stored representation of one element (see module docstring)."""
    if isinstance(dt, FixedPoint):
        if dt.size not in _INT_SIZES:
            raise Unsupported(f"{8 * dt.size}-bit integers")
        if not _exact_int(dt):
            raise Unsupported(f"{'signed' if dt.signed else 'unsigned'} integer with {dt.precision}-bit "
                              f"precision at bit offset {dt.bit_offset} in {dt.size} bytes")
        return np.dtype(_int_code(dt))
    if isinstance(dt, FloatingPoint):
        code = _float_code(dt)
        if code is None:
            raise Unsupported(_float_layout(dt))
        return np.dtype(dt.order + code)
    if isinstance(dt, Time):
        if dt.size not in _INT_SIZES:
            raise Unsupported(f"{8 * dt.size}-bit time values")
        return np.dtype(f"{dt.order}i{dt.size}")
    if isinstance(dt, String):
        return np.dtype(f"S{dt.size}")
    if isinstance(dt, Bitfield):
        if dt.size not in _INT_SIZES:
            raise Unsupported(f"{8 * dt.size}-bit bitfields")
        return np.dtype(f"{dt.order}u{dt.size}")
    if isinstance(dt, Opaque):
        return np.dtype(f"V{dt.size}")
    if isinstance(dt, Compound):
        return _compound_dtype(dt, numpy_dtype, exact=True)
    if isinstance(dt, Enum):
        return numpy_dtype(dt.base)
    if isinstance(dt, Array):
        return np.dtype((numpy_dtype(dt.base), dt.dims))
    if isinstance(dt, Complex):
        code = _float_code(dt.base)
        if code is None:
            raise Unsupported(f"complex numbers of {_float_layout(dt.base)}")
        if code == "f2":
            raise Unsupported("complex numbers of 16-bit floats")
        return np.dtype(f"{dt.base.order}c{2 * int(code[1:])}")
    if isinstance(dt, (VarLen, Reference)):
        return np.dtype(f"V{dt.size}")
    raise Unsupported(f"{dt.class_name} datatype")


def _compound_dtype(dt: Compound, conv, exact: bool) -> np.dtype:
    names = [m.name for m in dt.members]
    if len(set(names)) != len(names) or "" in names:
        raise Unsupported("compound with duplicate or empty member names")
    formats = [conv(m.type) for m in dt.members]
    try:
        if exact:
            return np.dtype({"names": names, "formats": formats,
                             "offsets": [m.offset for m in dt.members], "itemsize": dt.size})
        return np.dtype({"names": names, "formats": formats})
    except (ValueError, TypeError) as e:
        raise Unsupported(f"compound NumPy cannot represent: {e}") from None


@by_datatype
def is_converted(dt: Datatype) -> bool:
    """True when element bytes are not values: dt holds vlen data or references somewhere."""
    return any(isinstance(t, (VarLen, Reference)) for t in walk(dt))


def _complex_compound(dt: Compound) -> np.dtype | None:
    """h5py's default complex layout: {r, i} of one IEEE float type, back to back."""
    if len(dt.members) != 2:
        return None
    r, i = dt.members
    if (r.name, i.name) != ("r", "i") or not isinstance(r.type, FloatingPoint) or r.type != i.type:
        return None
    code = _float_code(r.type)
    if code is None or code == "f2" or r.offset != 0 or i.offset != r.type.size or dt.size != 2 * r.type.size:
        return None
    return np.dtype(f"{r.type.order}c{2 * int(code[1:])}")


NUMPY_TAG = "NUMPY:"
# dtype kinds np.load reads without pickle (not object 'O', not NumPy 2's StringDType 'T')
NPY_KINDS = frozenset("biufcmMSUV")


def tagged_dtype(t: Opaque) -> np.dtype | None:
    """The NumPy dtype h5py recorded in an opaque type's tag (h5py reads such data with
    `np.dtype(tag[6:])`), when it is one np.load reads without pickle and has the opaque's size
    (h5py could not read it otherwise); None for any other opaque type."""
    if not t.tag.startswith(NUMPY_TAG):
        return None
    try:
        dt = np.dtype(t.tag[len(NUMPY_TAG):])
    except Exception:  # noqa: BLE001 - NumPy raises assorted types (and warnings) for foreign text
        return None
    if dt.kind not in NPY_KINDS or dt.hasobject or dt.itemsize != t.size:
        return None
    return dt


def split_subarray(dt: np.dtype) -> tuple[np.dtype, tuple[int, ...]]:
    """(base, dims) of a subarray dtype, nested arrays' dims flattened in order: the element type
    and trailing shape h5py reads an array datatype as; (dt, ()) for any other dtype."""
    dims: tuple[int, ...] = ()
    while dt.subdtype is not None:
        dt, sub = dt.subdtype
        dims += sub
    return dt, dims


@by_datatype
def npy_dtype(dt: Datatype, text_width: int = 1, seq_len: int = 0) -> np.dtype:
    """The `.npy` view's dtype (see module docstring for the choices)."""
    text_width = max(1, int(text_width))
    seq_len = max(0, int(seq_len))

    def conv(t: Datatype) -> np.dtype:
        if isinstance(t, VarLen):
            if t.is_string:
                return np.dtype(f"<U{text_width}")
            return np.dtype([("length", "<u8"), ("values", conv(t.base), (seq_len,))])
        if isinstance(t, Reference):
            return np.dtype(f"<U{text_width}")
        if isinstance(t, Compound):
            cplx = _complex_compound(t)
            if cplx is not None:
                return cplx
            return _compound_dtype(t, conv, exact=not (is_converted(t) or needs_conversion(t)))
        if isinstance(t, Array):
            return np.dtype((conv(t.base), t.dims))
        if isinstance(t, Enum):
            return np.dtype("|b1") if is_bool_enum(t) else conv(t.base)
        if isinstance(t, FixedPoint) and _padded_int(t):
            return converted_int_dtype(t)
        if isinstance(t, FloatingPoint) and _float_code(t) is None:
            return converted_float_dtype(t)
        if isinstance(t, Complex) and _converted_leaf(t):
            check_float_layout(t.base)
            return np.dtype("<c16")
        if isinstance(t, Opaque):
            tagged = tagged_dtype(t)
            if tagged is not None:
                return tagged
        return numpy_dtype(t)

    return conv(dt)


# ----------------------------------------------------------------------------------- describe

def _ref_text(t: Reference) -> str:
    return {REF_OBJECT1: "object reference", REF_REGION1: "region reference",
            REF_OBJECT2: "object reference (revised)", REF_REGION2: "region reference (revised)",
            REF_ATTR: "attribute reference"}.get(t.ref_type, f"reference type {t.ref_type}")


def _float_text(f: FloatingPoint) -> str:
    """A float layout NumPy cannot hold, field by field (N@P: N bits from bit P)."""
    order = {"<": "", ">": ", big-endian", "vax": ", VAX order"}.get(f.order, "")
    if f.order == "vax" and float_byte_order(f) != "vax":
        order = f", big-endian (VAX flag in a version-{f.version} message, read as libhdf5 reads it)"
    norm = {NORM_NONE: ", no normalization", NORM_MSBSET: ", MSB set"}.get(f.normalization, "")
    s = (f"float({8 * f.size} bits{order}: sign {f.sign_location}, exponent {f.exponent_size}@"
         f"{f.exponent_location} bias {f.exponent_bias}, mantissa {f.mantissa_size}@{f.mantissa_location}{norm})")
    if f.bit_offset or f.precision != 8 * f.size:
        s += f" ({f.precision}-bit at offset {f.bit_offset})"
    return s


def describe(dt: Datatype) -> str:
    """One-line text for `user.h5fs.dtype`; never raises."""
    if isinstance(dt, FixedPoint):
        s = _int_code(dt)
        if dt.size == 1:
            s = "|" + s[1:]
        if dt.precision != 8 * dt.size or dt.bit_offset:
            s += f" ({dt.precision}-bit at offset {dt.bit_offset})"
        return s
    if isinstance(dt, FloatingPoint):
        code = _float_code(dt)
        return dt.order + code if code else _float_text(dt)
    if isinstance(dt, Time):
        return f"time {dt.order}i{dt.size} ({dt.precision}-bit)"
    if isinstance(dt, String):
        return f"|S{dt.size} ({CSET_NAMES[dt.charset]}, {PAD_NAMES[dt.padding]})"
    if isinstance(dt, Bitfield):
        s = f"bitfield {'|' if dt.size == 1 else dt.order}u{dt.size}"
        if dt.precision != 8 * dt.size or dt.bit_offset:
            s += f" ({dt.precision}-bit at offset {dt.bit_offset})"
        return s
    if isinstance(dt, Opaque):
        return f"|V{dt.size} (opaque{', tag ' + repr(dt.tag) if dt.tag else ''})"
    if isinstance(dt, Compound):
        return "compound {" + ", ".join(f"{m.name}: {describe(m.type)}" for m in dt.members) + "}"
    if isinstance(dt, Enum):
        pairs = sorted(zip(dt.values, dt.names))
        return f"enum {describe(dt.base)} {{" + ", ".join(f"{n}={v}" for v, n in pairs) + "}"
    if isinstance(dt, VarLen):
        if dt.is_string:
            s = f"vlen str ({CSET_NAMES[dt.charset]}"
            return s + (")" if dt.padding == 0 else f", {PAD_NAMES[dt.padding]})")
        return f"vlen {describe(dt.base)}"
    if isinstance(dt, Array):
        return f"array {dt.dims} {describe(dt.base)}"
    if isinstance(dt, Complex):
        try:
            return numpy_dtype(dt).str
        except Unsupported:
            return f"complex {describe(dt.base)}"
    if isinstance(dt, Reference):
        return _ref_text(dt)
    return f"{dt.class_name} ({dt.size} bytes)"
