"""HSDS type JSON <-> NumPy dtypes, as the service itself maps them (h5json's createDataType and
getTypeItem, which HSDS 1.0 runs): the dtype here is the layout of an element in HSDS's binary
values, so a value's bytes can be read and written without HSDS converting anything.

- H5T_INTEGER / H5T_FLOAT: the predefined types (H5T_STD_I8LE .. H5T_STD_U64BE, H5T_IEEE_F16LE ..
  H5T_IEEE_F64BE), given as a name or as {"class", "base"}.
- H5T_STRING: fixed length -> 'S<length>' (UTF-8 ones tagged {"h5py_encoding": "utf-8"} as h5py
  tags them; the padding stays in the JSON); variable length -> object dtype tagged
  {"vlen": str} (UTF-8) or {"vlen": bytes} (ASCII), h5py's tags.
- H5T_COMPOUND: fields packed one after the other (HSDS keeps no offsets; nor padding).
- H5T_ARRAY: a subarray dtype; H5T_VLEN: object dtype tagged {"vlen": base dtype};
  H5T_ENUM: its integer base tagged {"enum": {name: value}} (h5py's tag; h5py's booleans stay the
  int8 enum they are stored as); H5T_OPAQUE: 'V<size>'.
- H5T_REFERENCE: object references are 'S48' holding the target's id ("g-...", NUL padded), as HSDS
  sends them whatever "length" says; region references are variable-length byte strings (HSDS's
  encoding of a region), object dtype tagged {"ref": "H5T_STD_REF_DSETREG"}.
Anything else (bitfields, time, committed types given by id, unknown names) raises TypeNotMapped
naming it: never a guess that would give wrong bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import Unsupported

INTEGERS = {f"H5T_STD_{s}{n}": f"{s.lower()}{n // 8}" for s in ("I", "U") for n in (8, 16, 32, 64)}
FLOATS = {f"H5T_IEEE_F{n}": f"f{n // 8}" for n in (16, 32, 64)}
ORDERS = {"LE": "<", "BE": ">"}
REF_OBJ, REF_REGION = "H5T_STD_REF_OBJ", "H5T_STD_REF_DSETREG"
OBJ_REF_SIZE = 48          # h5json's special_dtype(ref=Reference): "S48" whatever the JSON's length
VARIABLE = "H5T_VARIABLE"


class TypeNotMapped(Unsupported):
    """A type HSDS sent (or one asked for) that has no exact NumPy layout here."""


def _name(type_json: Any) -> str:
    """A short text of a type for messages."""
    text = str(type_json)
    return text if len(text) <= 200 else text[:200] + "..."


def _predefined(name: Any, cls: str | None = None) -> np.dtype:
    if not isinstance(name, str) or name[-2:] not in ORDERS:
        raise TypeNotMapped(f"HSDS type {_name(name)}: not a predefined integer or float type")
    key, order = name[:-2], ORDERS[name[-2:]]
    if key in INTEGERS and cls in (None, "H5T_INTEGER"):
        return np.dtype(order + INTEGERS[key])
    if key in FLOATS and cls in (None, "H5T_FLOAT"):
        return np.dtype(order + FLOATS[key])
    raise TypeNotMapped(f"HSDS type {_name(name)}: not a predefined {cls or 'integer or float'} type")


def _field(type_json: dict, key: str) -> Any:
    if key not in type_json:
        raise TypeNotMapped(f"HSDS type {_name(type_json)}: no {key!r}")
    return type_json[key]


def _positive_int(value: Any, what: str, type_json: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise TypeNotMapped(f"HSDS type {_name(type_json)}: {what} {value!r} is not a positive integer")
    return value


def to_dtype(type_json: Any) -> np.dtype:
    """The NumPy dtype of HSDS type JSON (see the module's docstring)."""
    if isinstance(type_json, str):
        return _predefined(type_json)
    if not isinstance(type_json, dict):
        raise TypeNotMapped(f"HSDS type {_name(type_json)}: neither a name nor an object")
    cls = type_json.get("class")
    if cls in ("H5T_INTEGER", "H5T_FLOAT"):
        return _predefined(_field(type_json, "base"), cls)
    if cls == "H5T_STRING":
        length, charset = _field(type_json, "length"), type_json.get("charSet", "H5T_CSET_ASCII")
        if charset not in ("H5T_CSET_ASCII", "H5T_CSET_UTF8"):
            raise TypeNotMapped(f"HSDS type {_name(type_json)}: character set {charset!r}")
        utf8 = charset == "H5T_CSET_UTF8"
        if length == VARIABLE:
            return np.dtype("O", metadata={"vlen": str if utf8 else bytes})
        size = _positive_int(length, "length", type_json)
        return np.dtype(f"S{size}", metadata={"h5py_encoding": "utf-8"}) if utf8 else np.dtype(f"S{size}")
    if cls == "H5T_COMPOUND":
        fields = _field(type_json, "fields")
        if not isinstance(fields, list) or not fields:
            raise TypeNotMapped(f"HSDS type {_name(type_json)}: no fields")
        members = []
        for f in fields:
            if not isinstance(f, dict) or not isinstance(f.get("name"), str):
                raise TypeNotMapped(f"HSDS type {_name(type_json)}: a field without a name")
            members.append((f["name"], to_dtype(_field(f, "type"))))
        try:
            return np.dtype(members)
        except (ValueError, TypeError) as e:     # duplicate or empty names
            raise TypeNotMapped(f"HSDS type {_name(type_json)}: {e}") from None
    if cls == "H5T_ARRAY":
        dims = _field(type_json, "dims")
        dims = [dims] if isinstance(dims, int) else dims
        if not isinstance(dims, list) or not dims:
            raise TypeNotMapped(f"HSDS type {_name(type_json)}: dims {dims!r}")
        shape = tuple(_positive_int(d, "dimension", type_json) for d in dims)
        base = to_dtype(_field(type_json, "base"))
        if is_variable(base):
            raise TypeNotMapped(f"HSDS type {_name(type_json)}: an array of variable-length elements")
        return np.dtype((base, shape))
    if cls == "H5T_VLEN":
        base = to_dtype(_field(type_json, "base"))
        if is_variable(base) or base.shape:
            raise TypeNotMapped(f"HSDS type {_name(type_json)}: a sequence of {base}: only fixed-size elements")
        return np.dtype("O", metadata={"vlen": base})
    if cls == "H5T_ENUM":
        base = to_dtype(_field(type_json, "base"))
        if base.kind not in "iu":
            raise TypeNotMapped(f"HSDS type {_name(type_json)}: an enum over {base}")
        members = type_json.get("mapping", type_json.get("members"))
        if isinstance(members, list):
            mapping = {m.get("name"): m.get("value") for m in members if isinstance(m, dict)}
        elif isinstance(members, dict):
            mapping = dict(members)
        else:
            raise TypeNotMapped(f"HSDS type {_name(type_json)}: no members")
        if not mapping or not all(isinstance(k, str) and isinstance(v, int) for k, v in mapping.items()):
            raise TypeNotMapped(f"HSDS type {_name(type_json)}: members must map names to integers")
        return np.dtype(base, metadata={"enum": mapping})
    if cls == "H5T_OPAQUE":
        return np.dtype(f"V{_positive_int(_field(type_json, 'size'), 'size', type_json)}")
    if cls == "H5T_REFERENCE":
        base = _field(type_json, "base")
        if base == REF_OBJ:
            return np.dtype(f"S{OBJ_REF_SIZE}", metadata={"ref": REF_OBJ})
        if base == REF_REGION:
            return np.dtype("O", metadata={"ref": REF_REGION})
        raise TypeNotMapped(f"HSDS type {_name(type_json)}: reference kind {base!r}")
    raise TypeNotMapped(f"HSDS type {_name(type_json)}: class {cls!r} has no NumPy layout here")


def _meta(dt: np.dtype, key: str) -> Any:
    return (dt.metadata or {}).get(key)


def is_variable(dt: np.dtype) -> bool:
    """Whether elements of `dt` have no fixed size (variable-length strings and sequences, region
    references, and compounds or arrays holding any)."""
    if dt.names:
        return any(is_variable(dt.fields[n][0]) for n in dt.names)
    if dt.shape:
        return is_variable(dt.base)
    return dt.kind == "O"


def item_size(dt: np.dtype) -> int | None:
    """Bytes per element in HSDS's binary values, None for variable-length types."""
    return None if is_variable(dt) else dt.itemsize


def _order(dt: np.dtype) -> str:
    return "BE" if dt.byteorder == ">" or (dt.byteorder == "=" and np.little_endian is False) else "LE"


def to_json(dt: np.dtype) -> dict:
    """HSDS type JSON for a dtype made by to_dtype (or a plain NumPy one: '<i4', 'S10', compounds,
    subarrays, 'V8', and the tags above). NumPy types HSDS has no class for (complex, datetime,
    booleans without h5py's enum, unicode 'U') raise TypeNotMapped."""
    dt = np.dtype(dt)
    if dt.names:
        if any(dt.fields[n][1] != off for n, off in zip(dt.names, _packed_offsets(dt))) or \
                dt.itemsize != sum(dt.fields[n][0].itemsize for n in dt.names):
            raise TypeNotMapped(f"dtype {dt}: HSDS packs compound fields: no gaps or padding")
        return {"class": "H5T_COMPOUND",
                "fields": [{"name": n, "type": to_json(dt.fields[n][0])} for n in dt.names]}
    if dt.shape:
        return {"class": "H5T_ARRAY", "dims": list(dt.shape), "base": to_json(dt.base)}
    vlen, ref, enum = _meta(dt, "vlen"), _meta(dt, "ref"), _meta(dt, "enum")
    if ref == REF_OBJ:
        return {"class": "H5T_REFERENCE", "base": REF_OBJ}
    if ref == REF_REGION:
        return {"class": "H5T_REFERENCE", "base": REF_REGION}
    if vlen in (str, bytes):
        return {"class": "H5T_STRING", "length": VARIABLE, "strPad": "H5T_STR_NULLTERM",
                "charSet": "H5T_CSET_UTF8" if vlen is str else "H5T_CSET_ASCII"}
    if isinstance(vlen, np.dtype):
        return {"class": "H5T_VLEN", "base": to_json(vlen)}
    if enum is not None:
        base = to_json(np.dtype(dt.str))
        return {"class": "H5T_ENUM", "base": base,
                "mapping": {str(k): int(v) for k, v in dict(enum).items()}}
    if dt.kind in "iu":
        name = f"H5T_STD_{'I' if dt.kind == 'i' else 'U'}{dt.itemsize * 8}{_order(dt)}"
        return {"class": "H5T_INTEGER", "base": name}
    if dt.kind == "f" and dt.itemsize in (2, 4, 8):
        return {"class": "H5T_FLOAT", "base": f"H5T_IEEE_F{dt.itemsize * 8}{_order(dt)}"}
    if dt.kind == "S":
        utf8 = _meta(dt, "h5py_encoding") == "utf-8"
        return {"class": "H5T_STRING", "length": dt.itemsize, "strPad": "H5T_STR_NULLPAD",
                "charSet": "H5T_CSET_UTF8" if utf8 else "H5T_CSET_ASCII"}
    if dt.kind == "V" and dt.itemsize:
        return {"class": "H5T_OPAQUE", "size": dt.itemsize}
    raise TypeNotMapped(f"dtype {dt}: no HSDS type holds it as it is")


def _packed_offsets(dt: np.dtype) -> list[int]:
    out, at = [], 0
    for n in dt.names:
        out.append(at)
        at += dt.fields[n][0].itemsize
    return out
