"""HSDS descriptions -> what the local engine shows for the same content: HSDS type JSON as the
HDF5 datatype record libhdf5 writes for it (so `dtypes.describe`, `npy_dtype` and `to_npy`
answer as for a local file), HSDS filters as the local filter labels, layouts by their local
names, a fill value's text.

The record is the one h5py makes for the NumPy type HSDS's type stands for (dtype_encode's
`datatype_of` for numbers), except where HSDS's JSON says more than NumPy can: a string's
padding and character set are HSDS's own. Compounds are packed, as HSDS packs them (no offsets
travel); a variable-length member takes the 16 bytes a local file gives it (a 4-byte count, an
8-byte heap address, a 4-byte index: `elements.py` lays HSDS values out so).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import Any

import numpy as np

from ...errors import Unsupported
from ...format.messages.datatype import (
    ASCII, NULLPAD, NULLTERM, REF_OBJECT1, REF_REGION1, SPACEPAD, UTF8, VLEN_SEQUENCE, VLEN_STRING, Array, Compound,
    Datatype, Enum, FixedPoint, Member, Opaque, Reference, String, VarLen)
from ...format.messages.filter_pipeline import KNOWN_NAMES
from ...storage.hsds.types import REF_OBJ, REF_REGION, VARIABLE, TypeNotMapped, to_dtype
from ..dtype_encode import datatype_of

VLEN_SIZE = 16          # count, heap address (8-byte offsets), heap index
OBJECT_REF_SIZE = 8     # an old-style object reference: an address
REGION_REF_SIZE = 12    # an old-style region reference: a heap address and index
_PADS = {"H5T_STR_NULLTERM": NULLTERM, "H5T_STR_NULLPAD": NULLPAD, "H5T_STR_SPACEPAD": SPACEPAD}
_CSETS = {"H5T_CSET_ASCII": ASCII, "H5T_CSET_UTF8": UTF8}
_CHAR = FixedPoint(1, 1, "<", False, 0, 0, 0, 8)    # the base libhdf5 gives a vlen string
LAYOUTS = {"H5D_CONTIGUOUS": "contiguous", "H5D_CHUNKED": "chunked", "H5D_COMPACT": "compact",
           "H5D_CONTIGUOUS_REF": "contiguous (linked file)", "H5D_CHUNKED_REF": "chunked (linked file)",
           "H5D_CHUNKED_REF_INDIRECT": "chunked (linked file, indirect)"}


def record_of(type_json: Any) -> Datatype:
    """The HDF5 datatype record of HSDS type JSON (TypeNotMapped for what has none here)."""
    try:
        key = json.dumps(type_json, sort_keys=True)
    except (TypeError, ValueError):
        raise TypeNotMapped(f"HSDS type {str(type_json)[:200]}: not JSON") from None
    return _record(key)


@lru_cache(maxsize=512)
def _record(key: str) -> Datatype:
    # memoized by the JSON text: the datasets of a domain share a few types
    return _convert(json.loads(key))


def _convert(t: Any) -> Datatype:
    if isinstance(t, str):
        return datatype_of(to_dtype(t))
    if not isinstance(t, dict):
        raise TypeNotMapped(f"HSDS type {str(t)[:200]}: neither a name nor an object")
    cls = t.get("class")
    if cls in ("H5T_INTEGER", "H5T_FLOAT"):
        return datatype_of(to_dtype(t))
    if cls == "H5T_STRING":
        to_dtype(t)     # checks length and character set
        pad = _PADS.get(t.get("strPad", "H5T_STR_NULLTERM"), NULLTERM)
        cset = _CSETS[t.get("charSet", "H5T_CSET_ASCII")]
        if t["length"] == VARIABLE:
            return VarLen(1, VLEN_SIZE, VLEN_STRING, pad, cset, _CHAR)
        return String(1, t["length"], pad, cset)
    if cls == "H5T_COMPOUND":
        to_dtype(t)     # checks the fields' names
        members, offset = [], 0
        for f in t["fields"]:
            member = _convert(f["type"])
            members.append(Member(f["name"], offset, member))
            offset += member.size
        return Compound(max(m.type.version for m in members), offset, tuple(members))
    if cls == "H5T_ARRAY":
        base_dt = to_dtype(t)   # checks the dims; arrays of variable-length elements refused there
        dims = tuple(base_dt.shape)
        base = _convert(t["base"])
        return Array(max(base.version, 2), base.size * math.prod(dims), dims, base, tuple(range(len(dims))))
    if cls == "H5T_VLEN":
        to_dtype(t)
        return VarLen(1, VLEN_SIZE, VLEN_SEQUENCE, 0, 0, _convert(t["base"]))
    if cls == "H5T_ENUM":
        dt = to_dtype(t)
        base = _convert(t["base"])
        mapping = sorted(dt.metadata["enum"].items())       # libhdf5 keeps members sorted by name
        base_np = np.dtype(dt.str)
        return Enum(1, base.size, base, tuple(n for n, _ in mapping), tuple(int(v) for _, v in mapping),
                    tuple(np.array(v, base_np).tobytes() for _, v in mapping))
    if cls == "H5T_OPAQUE":
        tag = t.get("tag", "")
        return Opaque(1, to_dtype(t).itemsize, tag if isinstance(tag, str) else "")
    if cls == "H5T_REFERENCE":
        base = t.get("base")
        if base == REF_OBJ:
            return Reference(1, OBJECT_REF_SIZE, REF_OBJECT1)
        if base == REF_REGION:
            return Reference(1, REGION_REF_SIZE, REF_REGION1)
    to_dtype(t)     # names what is not mapped
    raise TypeNotMapped(f"HSDS type {str(t)[:200]}: no HDF5 record here")


def filter_text(filters: tuple[dict, ...]) -> str:
    """The `filters` fact: the local labels (by filter id) in pipeline order, "none" for none."""
    labels = []
    for f in filters:
        fid = f.get("id")
        label = KNOWN_NAMES.get(fid) if isinstance(fid, int) else None
        labels.append(label or str(f.get("name") or f.get("class") or f"filter {fid}"))
    return ",".join(labels) if labels else "none"


def linked_layout(layout: str | None) -> bool:
    """Whether HSDS serves the dataset's data from a linked HDF5 file (`hsload --link`:
    H5D_CONTIGUOUS_REF, H5D_CHUNKED_REF, H5D_CHUNKED_REF_INDIRECT)."""
    return layout is not None and "_REF" in layout


def layout_text(layout: str | None) -> str:
    """The `layout` fact of HSDS's layout class (an H5S_NULL dataset has none: contiguous, as
    libhdf5 gives one)."""
    if layout is None:
        return "contiguous"
    return LAYOUTS.get(layout, layout)


def fill_text(fill: Any, dtype: np.dtype, stored: np.dtype) -> str:
    """The `fill_value` fact of HSDS's fill value JSON (None: unset), as the local engine words
    it: the element read back in its stored type (`stored`: numpy_dtype of the record)."""
    if fill is None:
        return "0 (default)"
    try:
        value = np.array(_tuples(fill) if dtype.names else fill, dtype=dtype)
        return str(np.frombuffer(value.tobytes(), stored)[0])
    except (TypeError, ValueError, Unsupported):
        return str(fill)


def _tuples(value: Any) -> Any:
    """A compound value's JSON (nested lists) as the tuples NumPy takes for records."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value
