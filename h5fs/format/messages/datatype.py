"""Datatype message (0x0003), versions 1-5, every class libhdf5 2.0 writes.

One frozen dataclass per datatype class, all derived from `Datatype` (which holds the
message version and the element size). `decode(c)` reads one message from a Reader and
leaves the cursor just past it (nested member/base types are decoded recursively from the
same cursor).

Hostile-file bounds: nesting depth is limited to MAX_DEPTH; member counts are checked
against the bytes left in the message *before* anything is allocated for them; array ranks
are limited to MAX_ARRAY_RANK and array sizes must multiply out to the declared size; compound
members must lie inside the compound. Violations raise FormatError; a well-formed feature we
cannot serve (an unknown class or a future message version) raises Unsupported.

Notes on libhdf5's behaviour (H5Odtype.c) that the 3.0 spec does not spell out:
- Class 11 (complex, libhdf5 2.0, message version 5): bit 0 of the class bit field is
  "homogeneous" (both parts share the base type, the only form libhdf5 writes), bits 1-2 the
  form (0 rectangular, 1 polar, 2 exponential); the properties are the base (float) type.
- Opaque tags are NUL-padded to a multiple of 8 bytes; the bit field holds the padded length.
- Revised references (message version 4): bits 0-3 reference type (2 object, 3 region,
  4 attribute), bits 4-7 the reference encoding version (1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...errors import FormatError, Unsupported
from ..codec import Reader

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


@dataclass(frozen=True)
class Datatype:
    """Common part of every datatype: message version and element size in bytes."""

    version: int
    size: int
    class_id: ClassVar[int] = -1

    @property
    def class_name(self) -> str:
        return CLASS_NAMES[self.class_id]


@dataclass(frozen=True)
class FixedPoint(Datatype):
    order: str            # '<' or '>'
    signed: bool
    lo_pad: int
    hi_pad: int
    bit_offset: int
    precision: int
    class_id: ClassVar[int] = FIXED


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class Time(Datatype):
    order: str
    precision: int
    class_id: ClassVar[int] = TIME


@dataclass(frozen=True)
class String(Datatype):
    padding: int          # NULLTERM / NULLPAD / SPACEPAD
    charset: int          # ASCII / UTF8
    class_id: ClassVar[int] = STRING


@dataclass(frozen=True)
class Bitfield(Datatype):
    order: str
    lo_pad: int
    hi_pad: int
    bit_offset: int
    precision: int
    class_id: ClassVar[int] = BITFIELD


@dataclass(frozen=True)
class Opaque(Datatype):
    tag: str
    class_id: ClassVar[int] = OPAQUE


@dataclass(frozen=True)
class Member:
    """One compound member. Version-1 messages' array members come back as Array types."""

    name: str
    offset: int
    type: Datatype


@dataclass(frozen=True)
class Compound(Datatype):
    members: tuple[Member, ...]
    class_id: ClassVar[int] = COMPOUND


@dataclass(frozen=True)
class Reference(Datatype):
    ref_type: int         # REF_*
    encoding_version: int = 0   # revised references (message v4+): 1
    class_id: ClassVar[int] = REFERENCE

    @property
    def revised(self) -> bool:
        return self.ref_type >= REF_OBJECT2


@dataclass(frozen=True)
class Enum(Datatype):
    base: Datatype
    names: tuple[str, ...]
    values: tuple[int, ...]       # decoded with the base integer type
    raw_values: tuple[bytes, ...]
    class_id: ClassVar[int] = ENUM


@dataclass(frozen=True)
class VarLen(Datatype):
    kind: int             # VLEN_SEQUENCE / VLEN_STRING
    padding: int          # strings only
    charset: int          # strings only
    base: Datatype
    class_id: ClassVar[int] = VLEN

    @property
    def is_string(self) -> bool:
        return self.kind == VLEN_STRING


@dataclass(frozen=True)
class Array(Datatype):
    dims: tuple[int, ...]
    base: Datatype
    permutation: tuple[int, ...] | None = None   # version-2 messages only (never used by libhdf5)
    class_id: ClassVar[int] = ARRAY


@dataclass(frozen=True)
class Complex(Datatype):
    homogeneous: bool
    form: int             # COMPLEX_*
    base: Datatype
    class_id: ClassVar[int] = COMPLEX


# ---------------------------------------------------------------------------------------------

def _name(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _padded_name(c: Reader, what: str) -> str:
    """A NUL-terminated name padded with NULs to a multiple of 8 bytes (messages v1/v2)."""
    start = c.pos
    raw = c.cstring()
    used = c.pos - start
    c.skip(min((-used) % 8, c.remaining()))
    return _name(raw)


def _order(bits: int) -> str:
    return ">" if bits & 1 else "<"


def decode(c: Reader, _depth: int = 0) -> Datatype:
    """Decode one datatype message at the cursor (nested types recursively)."""
    if _depth > MAX_DEPTH:
        raise FormatError(f"datatype: nesting deeper than {MAX_DEPTH} levels")
    start = c.pos
    c.need(8)
    cv = c.u8()
    version, cls = cv >> 4, cv & 0x0F
    flags = c.uint(3)
    size = c.u32()
    if version == 0:
        raise FormatError("datatype: message version 0 is invalid")
    if version > MAX_VERSION:
        raise Unsupported(f"datatype message version {version}")
    if cls > COMPLEX:
        raise Unsupported(f"unsupported datatype class {cls}")
    if size == 0 and cls not in (OPAQUE,):
        raise FormatError(f"datatype: {CLASS_NAMES[cls]} of size 0 at {start}")

    if cls == FIXED:
        off, prec = c.u16(), c.u16()
        _check_bits(off, prec, size, "fixed-point")
        return FixedPoint(version, size, _order(flags), bool(flags & 8), (flags >> 1) & 1,
                          (flags >> 2) & 1, off, prec)

    if cls == FLOAT:
        bo = flags & 1 | (flags >> 5) & 2   # bit 0 | bit 6
        if bo == 2:
            raise FormatError("datatype: reserved floating-point byte order")
        order = {0: "<", 1: ">", 3: "vax"}[bo]
        norm = (flags >> 4) & 3
        if norm == 3:
            raise FormatError("datatype: reserved floating-point normalization")
        sign = (flags >> 8) & 0xFF
        off, prec = c.u16(), c.u16()
        epos, esize, mpos, msize = c.u8(), c.u8(), c.u8(), c.u8()
        bias = c.u32()
        _check_bits(off, prec, size, "floating-point")
        if esize == 0 or msize == 0:
            raise FormatError("datatype: floating-point with empty exponent or mantissa")
        top = off + prec  # field locations are bit positions in the element, above the offset
        if epos + esize > top or mpos + msize > top or sign >= top:
            raise FormatError("datatype: floating-point fields lie outside its precision")
        return FloatingPoint(version, size, order, flags >> 1 & 1, flags >> 2 & 1, flags >> 3 & 1,
                             norm, sign, off, prec, epos, esize, mpos, msize, bias)

    if cls == TIME:
        prec = c.u16()
        _check_bits(0, prec, size, "time")
        return Time(version, size, _order(flags), prec)

    if cls == STRING:
        pad, cset = flags & 0x0F, (flags >> 4) & 0x0F
        if pad > SPACEPAD or cset > UTF8:
            raise FormatError(f"datatype: string with reserved padding {pad} or charset {cset}")
        return String(version, size, pad, cset)

    if cls == BITFIELD:
        off, prec = c.u16(), c.u16()
        _check_bits(off, prec, size, "bitfield")
        return Bitfield(version, size, _order(flags), flags >> 1 & 1, flags >> 2 & 1, off, prec)

    if cls == OPAQUE:
        taglen = flags & 0xFF
        raw = c.bytes(taglen)
        return Opaque(version, size, _name(raw.split(b"\0", 1)[0]))

    if cls == COMPOUND:
        return _compound(c, version, flags, size, _depth)

    if cls == REFERENCE:
        rtype = flags & 0x0F
        rver = (flags >> 4) & 0x0F
        if rtype > REF_ATTR:
            raise FormatError(f"datatype: unknown reference type {rtype}")
        if rtype >= REF_OBJECT2 and rver != 1:
            raise Unsupported(f"reference encoding version {rver}")
        return Reference(version, size, rtype, rver if rtype >= REF_OBJECT2 else 0)

    if cls == ENUM:
        return _enum(c, version, flags, size, _depth)

    if cls == VLEN:
        kind = flags & 0x0F
        if kind > VLEN_STRING:
            raise FormatError(f"datatype: unknown variable-length type {kind}")
        pad, cset = (flags >> 4) & 0x0F, (flags >> 8) & 0x0F
        if kind == VLEN_SEQUENCE:
            pad = cset = 0
        elif pad > SPACEPAD or cset > UTF8:
            raise FormatError(f"datatype: vlen string with reserved padding {pad} or charset {cset}")
        base = decode(c, _depth + 1)
        return VarLen(version, size, kind, pad, cset, base)

    if cls == ARRAY:
        rank = c.u8()
        if rank == 0 or rank > MAX_ARRAY_RANK:
            raise FormatError(f"datatype: array rank {rank} outside 1..{MAX_ARRAY_RANK}")
        perm = None
        if version < 3:
            c.skip(3)
        dims = tuple(c.u32() for _ in range(rank))
        if version < 3:
            perm = tuple(c.u32() for _ in range(rank))
        base = decode(c, _depth + 1)
        n = 1
        for d in dims:
            n *= d
        if n == 0 or n * base.size != size:
            raise FormatError(f"datatype: array {dims} of {base.size}-byte elements does not make {size} bytes")
        return Array(version, size, dims, base, perm)

    # COMPLEX
    homogeneous = bool(flags & 1)
    form = (flags >> 1) & 3
    if not homogeneous:
        raise Unsupported("heterogeneous complex number datatype")
    if form == 3:
        raise FormatError("datatype: reserved complex number form")
    base = decode(c, _depth + 1)
    if not isinstance(base, FloatingPoint):
        raise FormatError(f"datatype: complex number base is {base.class_name}, not floating-point")
    if base.size * 2 != size:
        raise FormatError(f"datatype: complex of {base.size}-byte parts has size {size}")
    return Complex(version, size, homogeneous, form, base)


def _check_bits(off: int, prec: int, size: int, what: str) -> None:
    if prec == 0 or off + prec > 8 * size:
        raise FormatError(f"datatype: {what} bit offset {off} + precision {prec} exceeds {8 * size} bits")


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
        minimum = 8 + 4 + 8 + (28 if version == 1 else 0)
    if n * minimum > c.remaining():
        raise FormatError(f"datatype: compound claims {n} members, the message holds at most "
                          f"{c.remaining() // minimum}")
    members = []
    for _ in range(n):
        if version >= 3:
            name = _name(c.cstring())
            off = c.uint(_offset_width(size))
        else:
            name = _padded_name(c, "compound member")
            off = c.u32()
        ndims, dims = 0, ()
        if version == 1:
            ndims = c.u8()
            c.skip(3)
            c.skip(4)      # dimension permutation (never implemented)
            c.skip(4)      # reserved
            dims4 = tuple(c.u32() for _ in range(4))
            if ndims > 4:
                raise FormatError(f"datatype: compound member array rank {ndims} exceeds 4")
            dims = dims4[:ndims]
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
        members.append(Member(name, off, mtype))
    return Compound(version, size, tuple(members))


def _enum(c: Reader, version: int, flags: int, size: int, depth: int) -> Enum:
    n = flags & 0xFFFF
    base = decode(c, depth + 1)
    if base.size != size:
        raise FormatError(f"datatype: enum of size {size} over a {base.size}-byte base type")
    per = (8 if version < 3 else 1) + base.size
    if n * per > c.remaining():
        raise FormatError(f"datatype: enum claims {n} members, the message holds at most {c.remaining() // per}")
    if version < 3:
        names = tuple(_padded_name(c, "enum name") for _ in range(n))
    else:
        names = tuple(_name(c.cstring()) for _ in range(n))
    raw = tuple(c.bytes(base.size) for _ in range(n))
    if isinstance(base, (FixedPoint, Bitfield)):
        byteorder = "big" if base.order == ">" else "little"
        signed = isinstance(base, FixedPoint) and base.signed
        values = tuple(int.from_bytes(r, byteorder, signed=signed) for r in raw)
    else:
        raise Unsupported(f"enum over a {base.class_name} base type")
    return Enum(version, size, base, names, values, raw)


def walk(dt: Datatype):
    """Yield dt and every type nested inside it (depth first)."""
    yield dt
    if isinstance(dt, Compound):
        for m in dt.members:
            yield from walk(m.type)
    elif isinstance(dt, (Enum, VarLen, Array, Complex)):
        yield from walk(dt.base)
