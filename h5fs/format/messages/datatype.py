"""Datatype message (0x0003), versions 1-5, every class libhdf5 2.0 writes: decode and encode.

One frozen dataclass per datatype class, all derived from `Datatype` (which holds the
message version and the element size). `decode(c)` reads one message from a Reader and
leaves the cursor just past it (nested member/base types are decoded recursively from the
same cursor); `encode(w, dt)` writes it back: libhdf5's bytes for every type it writes.

Hostile-file bounds: nesting depth is limited to MAX_DEPTH; member counts are checked
against the bytes left in the message *before* anything is allocated for them; array ranks
are limited to MAX_ARRAY_RANK and array sizes must multiply out to the declared size; compound
members must lie inside the compound. Violations raise FormatError; a well-formed feature we
cannot serve (an unknown class or a future message version) raises Unsupported.

Notes on libhdf5's behaviour (H5Odtype.c) that the 3.0 spec does not spell out:
- Class 11 (complex, libhdf5 2.0, message version 5): bit 0 of the class bit field is
  "homogeneous" (both parts share the base type, the only form libhdf5 writes), bits 1-2 the
  form (0 rectangular, 1 polar, 2 exponential); the properties are the base (float) type.
- Opaque tags are NUL-padded to a multiple of 8 bytes; the bit field holds the padded length
  (a tag of exactly 8k bytes has no NUL).
- Revised references (message version 4): bits 0-3 reference type (2 object, 3 region,
  4 attribute), bits 4-7 the reference encoding version (1).
- Version-1 compounds of libhdf5 before 1.4 stored array members as up to 4 dimensions in the
  member entry: they decode as Array types (`Member.legacy_array`); libhdf5 since writes rank 0
  there and array members as Array types in version-2+ messages.

What encode does not reproduce (readers ignore it): class bit-field bits the spec reserves, the
v1 compound member's permutation, reserved fields and dimension slots past its rank, and the
bytes after the NUL of a padded name or tag (all written as zeros).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from ...errors import FormatError, Unsupported
from ..codec import Reader, Writer

# Class numbers
FIXED, FLOAT, TIME, STRING, BITFIELD, OPAQUE, COMPOUND, REFERENCE, ENUM, VLEN, ARRAY, COMPLEX = range(12)
CLASS_NAMES = ("fixed-point", "floating-point", "time", "string", "bitfield", "opaque", "compound",
               "reference", "enum", "variable-length", "array", "complex")

# String padding (fixed strings and vlen strings)
NULLTERM, NULLPAD, SPACEPAD = 0, 1, 2
PAD_NAMES = {NULLTERM: "nullterm", NULLPAD: "nullpad", SPACEPAD: "spacepad"}
# Character sets
ASCII, UTF8 = 0, 1
CSET_NAMES = {ASCII: "ascii", UTF8: "utf-8"}
# Floating-point mantissa normalisation
NORM_NONE, NORM_MSBSET, NORM_IMPLIED = 0, 1, 2
# Reference types (H5R_type_t)
REF_OBJECT1, REF_REGION1, REF_OBJECT2, REF_REGION2, REF_ATTR = 0, 1, 2, 3, 4
REF_NAMES = {REF_OBJECT1: "object", REF_REGION1: "region", REF_OBJECT2: "object2",
             REF_REGION2: "region2", REF_ATTR: "attribute"}
# Variable-length kinds
VLEN_SEQUENCE, VLEN_STRING = 0, 1
# Complex forms
COMPLEX_RECTANGULAR, COMPLEX_POLAR, COMPLEX_EXPONENTIAL = 0, 1, 2

MAX_VERSION = 5
MAX_DEPTH = 32          # nested compound/array/vlen/enum levels
MAX_ARRAY_RANK = 32     # H5S_MAX_RANK


@dataclass(frozen=True, slots=True)
class Datatype:
    """Common part of every datatype: message version and element size in bytes."""

    version: int
    size: int
    class_id: ClassVar[int] = -1

    @property
    def class_name(self) -> str:
        return CLASS_NAMES[self.class_id]


@dataclass(frozen=True, slots=True)
class FixedPoint(Datatype):
    order: str            # '<' or '>'
    signed: bool
    lo_pad: int
    hi_pad: int
    bit_offset: int
    precision: int
    class_id: ClassVar[int] = FIXED


@dataclass(frozen=True, slots=True)
class FloatingPoint(Datatype):
    order: str            # '<', '>' or 'vax'
    lo_pad: int
    hi_pad: int
    int_pad: int
    normalization: int    # NORM_*
    sign_location: int
    bit_offset: int
    precision: int
    exponent_location: int
    exponent_size: int
    mantissa_location: int
    mantissa_size: int
    exponent_bias: int
    class_id: ClassVar[int] = FLOAT


@dataclass(frozen=True, slots=True)
class Time(Datatype):
    order: str
    precision: int
    class_id: ClassVar[int] = TIME


@dataclass(frozen=True, slots=True)
class String(Datatype):
    padding: int          # NULLTERM / NULLPAD / SPACEPAD
    charset: int          # ASCII / UTF8
    class_id: ClassVar[int] = STRING


@dataclass(frozen=True, slots=True)
class Bitfield(Datatype):
    order: str
    lo_pad: int
    hi_pad: int
    bit_offset: int
    precision: int
    class_id: ClassVar[int] = BITFIELD


@dataclass(frozen=True, slots=True)
class Opaque(Datatype):
    tag: str
    tag_size: int | None = None   # the stored tag field's length when it is not libhdf5's padding
    class_id: ClassVar[int] = OPAQUE


@dataclass(frozen=True, slots=True)
class Member:
    """One compound member. Version-1 messages' array members come back as Array types."""

    name: str
    offset: int
    type: Datatype
    legacy_array: bool = False   # version 1: `type` is an Array stored as dimensions in the entry


@dataclass(frozen=True, slots=True)
class Compound(Datatype):
    members: tuple[Member, ...]
    class_id: ClassVar[int] = COMPOUND


@dataclass(frozen=True, slots=True)
class Reference(Datatype):
    ref_type: int         # REF_*
    encoding_version: int = 0   # bits 4-7: revised references (message v4+) 1, older ones 0
    class_id: ClassVar[int] = REFERENCE

    @property
    def revised(self) -> bool:
        return self.ref_type >= REF_OBJECT2


@dataclass(frozen=True, slots=True)
class Enum(Datatype):
    base: Datatype
    names: tuple[str, ...]
    values: tuple[int, ...]       # decoded with the base integer type (what encode writes)
    raw_values: tuple[bytes, ...]  # the same values as stored
    class_id: ClassVar[int] = ENUM


@dataclass(frozen=True, slots=True)
class VarLen(Datatype):
    kind: int             # VLEN_SEQUENCE / VLEN_STRING
    padding: int          # strings only
    charset: int          # strings only
    base: Datatype
    class_id: ClassVar[int] = VLEN

    @property
    def is_string(self) -> bool:
        return self.kind == VLEN_STRING


@dataclass(frozen=True, slots=True)
class Array(Datatype):
    dims: tuple[int, ...]
    base: Datatype
    permutation: tuple[int, ...] | None = None   # version-2 messages only (never used by libhdf5)
    class_id: ClassVar[int] = ARRAY


@dataclass(frozen=True, slots=True)
class Complex(Datatype):
    homogeneous: bool
    form: int             # COMPLEX_*
    base: Datatype
    class_id: ClassVar[int] = COMPLEX


# ---------------------------------------------------------------------------------------------

_HEADER = struct.Struct("<BHBI")          # class and version, class bit field (bits 0-15, 16-23), size
_BITS = struct.Struct("<HH")              # bit offset, bit precision
_FLOAT = struct.Struct("<HHBBBBI")        # bits, exponent/mantissa locations and sizes, exponent bias
_PRECISION = struct.Struct("<H")
_V1_MEMBER = struct.Struct("<B3x4x4x4I")  # rank, reserved, permutation, reserved, 4 dimension sizes
_FLOAT_ORDER = {"<": 0, ">": 1, "vax": 0x41}  # bits 0 and 6


def _name(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _raw_name(name: str, what: str) -> bytes:
    raw = name.encode("utf-8", "surrogateescape")
    if b"\0" in raw:
        raise ValueError(f"datatype: {what} {name!r} contains a NUL")
    return raw


def _padded_name(c: Reader) -> str:
    """A NUL-terminated name padded with NULs to a multiple of 8 bytes (messages v1/v2)."""
    start = c.pos
    raw = c.cstring()
    used = c.pos - start
    c.skip(min((-used) % 8, c.remaining()))
    return _name(raw)


def _write_name(w: Writer, name: str, version: int, what: str) -> None:
    """A member or enum name: NUL-terminated, padded to a multiple of 8 bytes before version 3."""
    start = w.pos
    w.cstring(_raw_name(name, what))
    if version < 3:
        w.align(8, start)


def _order(bits: int) -> str:
    return ">" if bits & 1 else "<"


def _order_bit(order: str) -> int:
    return 1 if order == ">" else 0


def decode(c: Reader, _depth: int = 0) -> Datatype:
    """Decode one datatype message at the cursor (nested types recursively)."""
    if _depth > MAX_DEPTH:
        raise FormatError(f"datatype: nesting deeper than {MAX_DEPTH} levels")
    start = c.pos
    cv, low, high, size = c.unpack(_HEADER)
    version, cls = cv >> 4, cv & 0x0F
    if version == 0:
        raise FormatError("datatype: message version 0 is invalid")
    if version > MAX_VERSION:
        raise Unsupported(f"datatype message version {version}")
    if cls > COMPLEX:
        raise Unsupported(f"unsupported datatype class {cls}")
    if size == 0 and cls != OPAQUE:
        raise FormatError(f"datatype: {CLASS_NAMES[cls]} of size 0 at {start}")
    return _DECODERS[cls](c, version, low | high << 16, size, _depth)


def encode(w: Writer, dt: Datatype) -> None:
    """Write `dt` as a datatype message (nested types recursively)."""
    start = w.pos
    w.zeros(_HEADER.size)
    flags = _ENCODERS[dt.class_id](w, dt)
    w.patch(start, _HEADER, dt.version << 4 | dt.class_id, flags & 0xFFFF, flags >> 16, dt.size)


def _check_bits(off: int, prec: int, size: int, what: str) -> None:
    if prec == 0 or off + prec > 8 * size:
        raise FormatError(f"datatype: {what} bit offset {off} + precision {prec} exceeds {8 * size} bits")


# -- atomic classes: (c, version, class bit field, size, depth) -> record; (w, record) -> bit field

def _fixed(c: Reader, version: int, flags: int, size: int, depth: int) -> FixedPoint:
    off, prec = c.unpack(_BITS)
    _check_bits(off, prec, size, "fixed-point")
    return FixedPoint(version, size, _order(flags), bool(flags & 8), (flags >> 1) & 1, (flags >> 2) & 1, off, prec)


def _encode_fixed(w: Writer, dt: FixedPoint) -> int:
    w.pack(_BITS, dt.bit_offset, dt.precision)
    return _order_bit(dt.order) | dt.lo_pad << 1 | dt.hi_pad << 2 | (8 if dt.signed else 0)


def _float(c: Reader, version: int, flags: int, size: int, depth: int) -> FloatingPoint:
    bo = flags & 1 | (flags >> 5) & 2   # bit 0 | bit 6
    if bo == 2:
        raise FormatError("datatype: reserved floating-point byte order")
    norm = (flags >> 4) & 3
    if norm == 3:
        raise FormatError("datatype: reserved floating-point normalization")
    sign = (flags >> 8) & 0xFF
    off, prec, epos, esize, mpos, msize, bias = c.unpack(_FLOAT)
    _check_bits(off, prec, size, "floating-point")
    if esize == 0 or msize == 0:
        raise FormatError("datatype: floating-point with empty exponent or mantissa")
    top = off + prec  # field locations are bit positions in the element, above the offset
    if epos + esize > top or mpos + msize > top or sign >= top:
        raise FormatError("datatype: floating-point fields lie outside its precision")
    return FloatingPoint(version, size, {0: "<", 1: ">", 3: "vax"}[bo], flags >> 1 & 1, flags >> 2 & 1,
                         flags >> 3 & 1, norm, sign, off, prec, epos, esize, mpos, msize, bias)


def _encode_float(w: Writer, dt: FloatingPoint) -> int:
    w.pack(_FLOAT, dt.bit_offset, dt.precision, dt.exponent_location, dt.exponent_size, dt.mantissa_location,
           dt.mantissa_size, dt.exponent_bias)
    return (_FLOAT_ORDER[dt.order] | dt.lo_pad << 1 | dt.hi_pad << 2 | dt.int_pad << 3 | dt.normalization << 4
            | dt.sign_location << 8)


def _time(c: Reader, version: int, flags: int, size: int, depth: int) -> Time:
    (prec,) = c.unpack(_PRECISION)
    _check_bits(0, prec, size, "time")
    return Time(version, size, _order(flags), prec)


def _encode_time(w: Writer, dt: Time) -> int:
    w.pack(_PRECISION, dt.precision)
    return _order_bit(dt.order)


def _string(c: Reader, version: int, flags: int, size: int, depth: int) -> String:
    pad, cset = flags & 0x0F, (flags >> 4) & 0x0F
    if pad > SPACEPAD or cset > UTF8:
        raise FormatError(f"datatype: string with reserved padding {pad} or charset {cset}")
    return String(version, size, pad, cset)


def _encode_string(w: Writer, dt: String) -> int:
    return dt.padding | dt.charset << 4


def _bitfield(c: Reader, version: int, flags: int, size: int, depth: int) -> Bitfield:
    off, prec = c.unpack(_BITS)
    _check_bits(off, prec, size, "bitfield")
    return Bitfield(version, size, _order(flags), flags >> 1 & 1, flags >> 2 & 1, off, prec)


def _encode_bitfield(w: Writer, dt: Bitfield) -> int:
    w.pack(_BITS, dt.bit_offset, dt.precision)
    return _order_bit(dt.order) | dt.lo_pad << 1 | dt.hi_pad << 2


def _tag_size(tag: bytes) -> int:
    """libhdf5's tag field: the tag NUL-padded to a multiple of 8 bytes."""
    return (len(tag) + 7) & ~7


def _opaque(c: Reader, version: int, flags: int, size: int, depth: int) -> Opaque:
    raw = c.bytes(flags & 0xFF)
    tag = raw.split(b"\0", 1)[0]
    return Opaque(version, size, _name(tag), None if len(raw) == _tag_size(tag) else len(raw))


def _encode_opaque(w: Writer, dt: Opaque) -> int:
    tag = _raw_name(dt.tag, "opaque tag")
    n = _tag_size(tag) if dt.tag_size is None else dt.tag_size
    if not len(tag) <= n <= 0xFF:
        raise ValueError(f"datatype: opaque tag of {len(tag)} bytes in a {n}-byte field")
    w.bytes(tag.ljust(n, b"\0"))
    return n


def _reference(c: Reader, version: int, flags: int, size: int, depth: int) -> Reference:
    rtype = flags & 0x0F
    rver = (flags >> 4) & 0x0F
    if rtype > REF_ATTR:
        raise FormatError(f"datatype: unknown reference type {rtype}")
    if rtype >= REF_OBJECT2 and rver != 1:
        raise Unsupported(f"reference encoding version {rver}")
    return Reference(version, size, rtype, rver)


def _encode_reference(w: Writer, dt: Reference) -> int:
    return dt.ref_type | dt.encoding_version << 4


# -- classes with nested types ---------------------------------------------------------------

def _offset_width(size: int) -> int:
    """Width of member offsets in version-3 compounds: minimal bytes for the compound size."""
    return max(1, (size.bit_length() - 1) // 8 + 1) if size > 0 else 1


def _compound(c: Reader, version: int, flags: int, size: int, depth: int) -> Compound:
    n = flags & 0xFFFF
    if n == 0:
        raise FormatError("datatype: compound with no members")
    # Each member needs at least: name (2 bytes in v3, 8 in v1/2), offset, and an 8-byte type.
    if version >= 3:
        minimum = 1 + 1 + _offset_width(size) + 8
    else:
        minimum = 8 + 4 + 8 + (_V1_MEMBER.size if version == 1 else 0)
    if n * minimum > c.remaining():
        raise FormatError(f"datatype: compound claims {n} members, the message holds at most "
                          f"{c.remaining() // minimum}")
    members = []
    for _ in range(n):
        if version >= 3:
            name = _name(c.cstring())
            off = c.uint(_offset_width(size))
        else:
            name = _padded_name(c)
            off = c.u32()
        ndims, dims = 0, ()
        if version == 1:
            ndims, *dims4 = c.unpack(_V1_MEMBER)
            if ndims > 4:
                raise FormatError(f"datatype: compound member array rank {ndims} exceeds 4")
            dims = tuple(dims4[:ndims])
        mtype = decode(c, depth + 1)
        if ndims:
            n_el = 1
            for d in dims:
                n_el *= d
            if n_el == 0:
                raise FormatError("datatype: compound member array with a zero dimension")
            mtype = Array(mtype.version, n_el * mtype.size, dims, mtype, tuple(range(ndims)))
        if off + mtype.size > size:
            raise FormatError(f"datatype: compound member {name!r} at {off}+{mtype.size} "
                              f"lies outside the {size}-byte compound")
        members.append(Member(name, off, mtype, bool(ndims)))
    return Compound(version, size, tuple(members))


def _encode_compound(w: Writer, dt: Compound) -> int:
    if not 0 < len(dt.members) <= 0xFFFF:
        raise ValueError(f"datatype: compound of {len(dt.members)} members")
    width = _offset_width(dt.size)
    for m in dt.members:
        _write_name(w, m.name, dt.version, "member name")
        if dt.version >= 3:
            w.uint(m.offset, width)
        else:
            w.u32(m.offset)
        mtype = m.type
        if m.legacy_array:
            if dt.version != 1 or not isinstance(mtype, Array) or len(mtype.dims) > 4:
                raise ValueError(f"datatype: member {m.name!r} cannot keep its dimensions in a "
                                 f"version-{dt.version} compound entry")
            w.pack(_V1_MEMBER, len(mtype.dims), *mtype.dims, *(0,) * (4 - len(mtype.dims)))
            mtype = mtype.base
        elif dt.version == 1:
            w.pack(_V1_MEMBER, 0, 0, 0, 0, 0)
        encode(w, mtype)
    return len(dt.members)


def _enum_ints(base: Datatype) -> tuple[str, bool]:
    """Byte order and signedness of an enum's integer base type."""
    if not isinstance(base, (FixedPoint, Bitfield)):
        raise Unsupported(f"enum over a {base.class_name} base type")
    return "big" if base.order == ">" else "little", isinstance(base, FixedPoint) and base.signed


def _enum(c: Reader, version: int, flags: int, size: int, depth: int) -> Enum:
    n = flags & 0xFFFF
    base = decode(c, depth + 1)
    if base.size != size:
        raise FormatError(f"datatype: enum of size {size} over a {base.size}-byte base type")
    per = (8 if version < 3 else 1) + base.size
    if n * per > c.remaining():
        raise FormatError(f"datatype: enum claims {n} members, the message holds at most {c.remaining() // per}")
    if version < 3:
        names = tuple(_padded_name(c) for _ in range(n))
    else:
        names = tuple(_name(c.cstring()) for _ in range(n))
    raw = tuple(c.bytes(base.size) for _ in range(n))
    byteorder, signed = _enum_ints(base)
    values = tuple(int.from_bytes(r, byteorder, signed=signed) for r in raw)
    return Enum(version, size, base, names, values, raw)


def _encode_enum(w: Writer, dt: Enum) -> int:
    if len(dt.values) != len(dt.names) or len(dt.names) > 0xFFFF:
        raise ValueError(f"datatype: enum of {len(dt.names)} names and {len(dt.values)} values")
    byteorder, signed = _enum_ints(dt.base)
    encode(w, dt.base)
    for name in dt.names:
        _write_name(w, name, dt.version, "enum name")
    for v in dt.values:
        w.bytes(v.to_bytes(dt.base.size, byteorder, signed=signed))
    return len(dt.names)


def _varlen(c: Reader, version: int, flags: int, size: int, depth: int) -> VarLen:
    kind = flags & 0x0F
    if kind > VLEN_STRING:
        raise FormatError(f"datatype: unknown variable-length type {kind}")
    pad, cset = (flags >> 4) & 0x0F, (flags >> 8) & 0x0F
    if kind == VLEN_STRING and (pad > SPACEPAD or cset > UTF8):
        raise FormatError(f"datatype: vlen string with reserved padding {pad} or charset {cset}")
    return VarLen(version, size, kind, pad, cset, decode(c, depth + 1))


def _encode_varlen(w: Writer, dt: VarLen) -> int:
    encode(w, dt.base)
    return dt.kind | dt.padding << 4 | dt.charset << 8


def _array(c: Reader, version: int, flags: int, size: int, depth: int) -> Array:
    rank = c.u8()
    if rank == 0 or rank > MAX_ARRAY_RANK:
        raise FormatError(f"datatype: array rank {rank} outside 1..{MAX_ARRAY_RANK}")
    perm = None
    if version < 3:
        c.skip(3)
    dims = c.fields(f"{rank}I")
    if version < 3:
        perm = c.fields(f"{rank}I")
    base = decode(c, depth + 1)
    n = 1
    for d in dims:
        n *= d
    if n == 0 or n * base.size != size:
        raise FormatError(f"datatype: array {dims} of {base.size}-byte elements does not make {size} bytes")
    return Array(version, size, dims, base, perm)


def _encode_array(w: Writer, dt: Array) -> int:
    rank = len(dt.dims)
    w.u8(rank)
    if dt.version < 3:
        w.zeros(3)
    w.fields(f"{rank}I", *dt.dims)
    if dt.version < 3:
        w.fields(f"{rank}I", *(range(rank) if dt.permutation is None else dt.permutation))
    encode(w, dt.base)
    return 0


def _complex(c: Reader, version: int, flags: int, size: int, depth: int) -> Complex:
    homogeneous = bool(flags & 1)
    form = (flags >> 1) & 3
    if not homogeneous:
        raise Unsupported("heterogeneous complex number datatype")
    if form == 3:
        raise FormatError("datatype: reserved complex number form")
    base = decode(c, depth + 1)
    if not isinstance(base, FloatingPoint):
        raise FormatError(f"datatype: complex number base is {base.class_name}, not floating-point")
    if base.size * 2 != size:
        raise FormatError(f"datatype: complex of {base.size}-byte parts has size {size}")
    return Complex(version, size, homogeneous, form, base)


def _encode_complex(w: Writer, dt: Complex) -> int:
    encode(w, dt.base)
    return int(dt.homogeneous) | dt.form << 1


_DECODERS: tuple[Callable[[Reader, int, int, int, int], Datatype], ...] = (
    _fixed, _float, _time, _string, _bitfield, _opaque, _compound, _reference, _enum, _varlen, _array, _complex)
_ENCODERS: tuple[Callable[[Writer, Any], int], ...] = (
    _encode_fixed, _encode_float, _encode_time, _encode_string, _encode_bitfield, _encode_opaque,
    _encode_compound, _encode_reference, _encode_enum, _encode_varlen, _encode_array, _encode_complex)


def walk(dt: Datatype):
    """Yield dt and every type nested inside it (depth first)."""
    yield dt
    if isinstance(dt, Compound):
        for m in dt.members:
            yield from walk(m.type)
    elif isinstance(dt, (Enum, VarLen, Array, Complex)):
        yield from walk(dt.base)
