"""NumPy dtype -> HDF5 datatype record, as h5py maps it when it creates a dataset.

The mapping is h5py's `h5t.py_create(dtype, logical=True)`:
- integers of 1, 2, 4, 8 bytes: fixed-point, as stored (byte order, signedness), full precision;
- float16/32/64: IEEE floating point; long double: the platform's native long double (x87
  80-bit extended in 12 or 16 bytes, or IEEE binary128);
- bool: an enum FALSE=0 / TRUE=1 over a native signed 8-bit integer;
- complex64/128/256: a compound {r, i} of two floats of half the size (complex256: two native
  long doubles; h5py ignores a big-endian complex256's byte order, so that one is refused);
- `S<n>`: fixed-length string, null-padded, ASCII; `V<n>` without fields: opaque, empty tag;
- structured dtypes: compounds. Member offsets follow h5py: fields are laid out in offset order,
  each at max(its NumPy offset, the end of the previous one) (numpy allows overlapping fields,
  HDF5 does not), the compound as large as max(NumPy itemsize, the end of the last member);
  members keep the dtype's field order. Subarrays (fields, or the whole dtype) are array types.
- a dtype marked by `h5py.opaque_dtype`: an opaque type tagged "NUMPY:" + its str, which h5py
  reads back as that dtype; datetime64 and timedelta64 (which h5py stores only so marked, and a
  `.npy` cannot mark) are stored so too.
Refused (DtypeError, EINVAL): what h5py cannot store (`U` "No conversion path", object,
zero-sized types), NumPy 2 StringDType (h5py makes variable-length strings:
no fixed element bytes to stream), sizes the format cannot express, and types nested deeper than
our own reader takes.

Versions are libhdf5's: a new type is version 1 except arrays (at least 2, and never below their
base); inserting a member of a later version into a compound raises the compound and every
compound, array and enum already inside it to that version (H5T__insert); at dataset creation
the whole type is raised to the low bound's version when that is higher (H5T_set_version).
"""

from __future__ import annotations

import sys

import numpy as np

from ..errors import InvalidWrite
from ..format.messages.datatype import (
    ASCII, MAX_ARRAY_RANK, MAX_DEPTH, NORM_IMPLIED, NORM_NONE, NULLPAD, Array, Compound, Datatype, Enum, FixedPoint,
    FloatingPoint, Member, Opaque, String)
from .dtypes import NPY_KINDS, NUMPY_TAG
from .libver import datatype_version

NATIVE = ">" if sys.byteorder == "big" else "<"
MAX_SIZE = 0xFFFFFFFF        # the datatype message's 4-byte size field (and array dimension sizes)
MAX_MEMBERS = 0xFFFF         # the compound's 16-bit member count

# IEEE formats: (size, sign bit, exponent location, exponent size, mantissa size, exponent bias)
_IEEE = {np.float16: (2, 15, 10, 5, 10, 15), np.float32: (4, 31, 23, 8, 23, 127),
         np.float64: (8, 63, 52, 11, 52, 1023)}


class DtypeError(InvalidWrite, TypeError):
    """A dtype HDF5 (as h5py writes it) cannot hold; the message names it and why."""


def datatype_of(dtype: np.dtype | str, libver: str = "earliest") -> Datatype:
    """The datatype record libhdf5 writes for a dataset h5py creates with `dtype` in a file of
    format bound `libver`."""
    dt = np.dtype(dtype)
    record = _convert(dt, 0)
    bound = datatype_version(libver)
    return _raised(record, bound) if bound > record.version else record


def moves_fields(dtype: np.dtype | str) -> bool:
    """Whether h5py stores some field of `dtype` elsewhere than NumPy does (fields that overlap:
    h5py moves them apart): then an element's bytes differ between the two."""
    dt = np.dtype(dtype)
    if dt.subdtype is not None:
        return moves_fields(dt.subdtype[0])
    if dt.names is None:
        return False
    end = 0
    for name in sorted(dt.names, key=lambda n: dt.fields[n][1]):
        ftype, offset = dt.fields[name][:2]
        if offset < end or moves_fields(ftype):
            return True
        end = offset + ftype.itemsize
    return False


def _order(dt: np.dtype) -> str:
    return dt.byteorder if dt.byteorder in "<>" else NATIVE


def _refuse(dt: np.dtype, why: str) -> DtypeError:
    return DtypeError(f"dtype {dt.str!r} ({dt}) cannot be stored in HDF5: {why}")


def _convert(dt: np.dtype, depth: int) -> Datatype:
    if depth > MAX_DEPTH:
        raise _refuse(dt, f"nested deeper than {MAX_DEPTH} levels")
    if dt.itemsize == 0:
        raise _refuse(dt, "zero-sized elements (HDF5 types have a positive size)")
    if dt.itemsize > MAX_SIZE:
        raise _refuse(dt, f"elements of {dt.itemsize} bytes (at most {MAX_SIZE})")
    kind = dt.kind
    if kind in "mM" or (dt.metadata or {}).get("h5py_opaque"):
        return _tagged_opaque(dt)
    if kind == "V" and dt.names is not None:
        return _compound(dt, depth)
    if kind == "V" and dt.subdtype is not None:
        return _array(dt, depth)
    if kind == "V":
        return Opaque(1, dt.itemsize, "")
    if kind in "iu":
        return FixedPoint(1, dt.itemsize, _order(dt), kind == "i", 0, 0, 0, 8 * dt.itemsize)
    if kind == "f":
        return _float(dt)
    if kind == "c":
        return _complex(dt)
    if kind == "S":
        return String(1, dt.itemsize, NULLPAD, ASCII)
    if kind == "b":
        return Enum(1, 1, FixedPoint(1, 1, NATIVE, True, 0, 0, 0, 8), ("FALSE", "TRUE"), (0, 1), (b"\0", b"\1"))
    if kind == "O":
        raise _refuse(dt, "Python objects have no HDF5 equivalent")
    if kind == "U":
        raise _refuse(dt, "h5py has no conversion path for fixed-length unicode (store UTF-8 bytes as 'S')")
    if kind == "T":
        raise _refuse(dt, "variable-length strings have no fixed-size element bytes")
    raise _refuse(dt, "h5py has no conversion path for it")


def _tagged_opaque(dt: np.dtype) -> Opaque:
    """h5py's tagged opaque type (`_c_opaque_tagged`), for the kinds `h5py.opaque_dtype` takes."""
    if dt.kind not in NPY_KINDS or dt.hasobject or dt.names is not None or dt.subdtype is not None:
        raise _refuse(dt, "h5py.opaque_dtype takes plain fixed-size types only")
    return Opaque(1, dt.itemsize, NUMPY_TAG + dt.descr[0][1])


def _float(dt: np.dtype) -> FloatingPoint:
    ieee = _IEEE.get(dt.type)
    if ieee is not None:
        size, sign, epos, esize, msize, bias = ieee
        return FloatingPoint(1, size, _order(dt), 0, 0, 0, NORM_IMPLIED, sign, 0, 8 * size, epos, esize, 0,
                             msize, bias)
    info = np.finfo(dt)
    if info.nmant == 63 and info.nexp == 15:    # x87 extended: explicit integer bit, 80 bits used
        return FloatingPoint(1, dt.itemsize, _order(dt), 0, 0, 0, NORM_NONE, 79, 0, 80, 64, 15, 0, 64, 16383)
    if info.nmant == 112 and dt.itemsize == 16:  # IEEE binary128
        return FloatingPoint(1, 16, _order(dt), 0, 0, 0, NORM_IMPLIED, 127, 0, 128, 112, 15, 0, 112, 16383)
    raise _refuse(dt, "this platform's long double has no HDF5 description")


def _complex(dt: np.dtype) -> Compound:
    part = np.dtype(f"{dt.byteorder}f{dt.itemsize // 2}")
    if part.type not in _IEEE and _order(dt) != NATIVE:
        raise _refuse(dt, "h5py stores complex long doubles in native byte order only")
    half = _float(part)
    return Compound(1, dt.itemsize, (Member("r", 0, half), Member("i", dt.itemsize // 2, half)))


def _array(dt: np.dtype, depth: int) -> Array:
    base_dt, shape = dt.subdtype
    if len(shape) > MAX_ARRAY_RANK or any(d > MAX_SIZE for d in shape):
        raise _refuse(dt, f"array of shape {shape} (rank at most {MAX_ARRAY_RANK})")
    base = _convert(base_dt, depth + 1)
    return _array_of(max(base.version, 2), dt.itemsize, tuple(shape), base)


def _array_of(version: int, size: int, dims: tuple[int, ...], base: Datatype) -> Array:
    """An array record as the decoder gives it back: versions 1-2 store the identity permutation."""
    return Array(version, size, dims, base, tuple(range(len(dims))) if version < 3 else None)


def _compound(dt: np.dtype, depth: int) -> Compound:
    names = dt.names
    if len(names) > MAX_MEMBERS:
        raise _refuse(dt, f"{len(names)} fields (at most {MAX_MEMBERS})")
    placed: dict[str, tuple[int, Datatype]] = {}
    end = 0
    for name in sorted(names, key=lambda n: dt.fields[n][1]):   # stable: ties keep field order
        if "\0" in name:
            raise _refuse(dt, f"field name {name!r} contains a NUL")
        ftype, foffset = dt.fields[name][:2]
        try:
            member = _convert(ftype, depth + 1)
        except DtypeError as e:
            raise DtypeError(f"field {name!r} of {dt}: {e}") from None
        end = max(end, foffset)
        placed[name] = (end, member)
        end += member.size
    size = max(end, dt.itemsize)
    if size > MAX_SIZE:
        raise _refuse(dt, f"a compound of {size} bytes (at most {MAX_SIZE})")
    members: list[Member] = []
    version = 1
    for name in names:
        offset, member = placed[name]
        members.append(Member(name, offset, member))
        if member.version > version:   # at most a few times: versions only go up
            version = member.version
            members = [Member(m.name, m.offset, _raised(m.type, version)) for m in members]
    return Compound(version, size, tuple(members))


def _raised(dt: Datatype, version: int) -> Datatype:
    """H5T__upgrade_version: `dt` with every compound, array and enum in it (itself included)
    raised to at least `version`; atomic types keep theirs."""
    if isinstance(dt, Compound):
        members = tuple(Member(m.name, m.offset, _raised(m.type, version)) for m in dt.members)
        return Compound(max(dt.version, version), dt.size, members)
    if isinstance(dt, Array):
        return _array_of(max(dt.version, version), dt.size, dt.dims, _raised(dt.base, version))
    if isinstance(dt, Enum):
        return Enum(max(dt.version, version), dt.size, dt.base, dt.names, dt.values, dt.raw_values)
    return dt
