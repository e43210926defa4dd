"""`setfattr` text -> the value an HSDS attribute PUT takes, parsed as the local engine parses it
(model/attribute_values.py): on the HDF5 datatype record of the attribute's HSDS type
(datatypes.record_of), so the text reads back as the mount shows it.

- An existing attribute keeps its type and shape; a fixed-length string's length is fitted to
  the text (`fitted_types`), as h5py and netCDF-4 recreate one.
- A new attribute from text alone is a scalar variable-length UTF-8 string, as h5py writes a str.
- `h5fs attr --dtype` (`typed`): a number, bool or complex dtype, the shape the text's. HSDS has no
  boolean or complex class: they go as h5py stores them, an int8 enum {FALSE, TRUE} and a
  compound {r, i} (the element bytes are the same).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...errors import CannotWrite, InvalidWrite
from ...format.messages import dataspace as DS
from ...format.messages.datatype import String
from ...storage.hsds.records import Attribute
from ...storage.hsds.types import TypeNotMapped, to_json
from ..attribute_values import fitted_types, new_attribute, parse_value, value_shape
from .datatypes import record_of
from .elements import SIZES

BOOL = np.dtype("i1", metadata={"enum": {"FALSE": 0, "TRUE": 1}})   # h5py's boolean
TEXT = np.dtype("O", metadata={"vlen": str})                         # h5py's str


def hsds_dtype(dtype: Any) -> np.dtype:
    """The dtype HSDS types hold a NumPy dtype as (bool and complex as h5py stores them);
    CannotWrite for one HSDS has no type for."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return BOOL
    if dt.kind == "c":
        part = np.dtype(f"{dt.byteorder if dt.byteorder in '<>' else '='}f{dt.itemsize // 2}")
        return np.dtype([("r", part), ("i", part)])
    try:
        to_json(dt)
    except TypeNotMapped as e:
        raise CannotWrite(f"HSDS has no type for {dt}: {e}") from None
    return dt


def new_text(name: str, text: bytes) -> str:
    """The value of a new text attribute: UTF-8 without NUL (h5py's str)."""
    if not name or "\0" in name:
        raise InvalidWrite(f"attribute name {name!r}: empty or holding a NUL")
    try:
        value = text.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidWrite(f"attribute {name!r}: a new text attribute takes UTF-8 text") from None
    if "\0" in value:
        raise InvalidWrite(f"attribute {name!r}: a string attribute cannot hold a NUL byte")
    return value


def revalued(attr: Attribute, text: bytes) -> tuple[np.ndarray | None, np.dtype, Any]:
    """(value, dtype, type JSON) of `attr` holding `text`: its type and shape kept, a
    fixed-length string resized to the text. Value None: an empty (H5S_NULL) attribute."""
    datatype = record_of(attr.type)
    shape = attr.shape
    space = (DS.Dataspace(DS.NULL) if shape is None else
             DS.Dataspace(DS.SIMPLE if shape else DS.SCALAR, shape, shape))
    fitted, space = fitted_types(text, datatype, space)
    dtype, type_json = attr.dtype, attr.type
    if isinstance(fitted, String) and fitted.size != datatype.size:
        if not isinstance(type_json, dict) or "id" in type_json:
            raise CannotWrite(f"attribute {attr.name!r}: a committed string type keeps its length")
        dtype = np.dtype(f"S{fitted.size}", metadata=attr.dtype.metadata or {})
        type_json = {**type_json, "length": fitted.size}
    if space.kind == DS.NULL:
        if text:
            raise InvalidWrite(f"attribute {attr.name!r} holds no elements")
        return None, dtype, type_json
    parsed = parse_value(text, fitted, space)
    if isinstance(parsed, list):     # variable-length strings: each element's bytes
        try:
            items = [b.decode("utf-8") for b in parsed]
        except UnicodeDecodeError:
            raise CannotWrite(f"attribute {attr.name!r}: HSDS takes variable-length text as UTF-8") from None
        value = np.empty(len(items), dtype)
        value[:] = items
        return value.reshape(space.dims), dtype, type_json
    count = math.prod(space.dims)
    value = np.frombuffer(parsed, np.dtype([("v", dtype)]) if dtype.shape else dtype, count=count)
    return (value["v"] if dtype.shape else value).reshape(space.dims + dtype.shape), dtype, type_json


def typed(name: str, dtype: Any, text: bytes) -> tuple[np.ndarray, np.dtype]:
    """(value, HSDS dtype) of `h5fs attr --dtype`: a number, bool or complex dtype, the value and
    its shape from `text` as the local engine reads them (attribute_values.new_attribute)."""
    dt = np.dtype(dtype)
    msg = new_attribute(name, dt, text, SIZES)      # checks the name, the dtype and the text
    stored = hsds_dtype(dt)
    return np.frombuffer(msg.data, stored).reshape(value_shape(text)), stored
