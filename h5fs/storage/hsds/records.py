"""What HSDS answers, as records: a domain, a group, a link, a dataset, a committed datatype, an
attribute. Each is made from the JSON of one answer and checked on the way: a field missing or of
the wrong kind is an HsdsError (EIO) naming it, not a KeyError later. `raw` keeps the answer for
what a record does not name. Times are seconds since the epoch, as HSDS sends them.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .transport import HsdsError
from .types import TypeNotMapped, to_dtype

HARD, SOFT, EXTERNAL = "H5L_TYPE_HARD", "H5L_TYPE_SOFT", "H5L_TYPE_EXTERNAL"
UNLIMITED = "H5S_UNLIMITED"
COLLECTIONS = {"g": "groups", "d": "datasets", "t": "datatypes"}


def collection(obj_id: str) -> str:
    """groups, datasets or datatypes, by an object id's first letter."""
    try:
        return COLLECTIONS[obj_id[:2].rstrip("-")]
    except (KeyError, TypeError):
        raise HsdsError(f"HSDS object id {obj_id!r}: neither a group, a dataset nor a datatype") from None


def _get(doc: Any, key: str, kind: type | tuple[type, ...], what: str, default: Any = ...) -> Any:
    if not isinstance(doc, dict):
        raise HsdsError(f"HSDS {what}: the answer is not a JSON object")
    if key not in doc:
        if default is not ...:
            return default
        raise HsdsError(f"HSDS {what}: the answer has no {key!r}")
    value = doc[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise HsdsError(f"HSDS {what}: {key!r} is {value!r}")
    return value


def _time(doc: Any, key: str, what: str) -> float:
    return float(_get(doc, key, (int, float), what, 0.0))


def _count(doc: Any, key: str, what: str) -> int:
    value = _get(doc, key, int, what, 0)
    if value < 0:
        raise HsdsError(f"HSDS {what}: {key!r} is {value}")
    return value


def shape_of(doc: Any, what: str) -> tuple[tuple[int, ...] | None, tuple[int | None, ...] | None]:
    """(dims, maxdims) of a shape JSON: () for H5S_SCALAR, None for H5S_NULL; a maxdims entry None
    for H5S_UNLIMITED; maxdims None when the shape says none (fixed size)."""
    cls = _get(doc, "class", str, what)
    if cls == "H5S_NULL":
        return None, None
    if cls == "H5S_SCALAR":
        return (), None
    if cls != "H5S_SIMPLE":
        raise HsdsError(f"HSDS {what}: shape class {cls!r}")
    dims = _get(doc, "dims", list, what)
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims):
        raise HsdsError(f"HSDS {what}: dims {dims!r}")
    maxdims = doc.get("maxdims")
    if maxdims is None:
        return tuple(dims), None
    if not isinstance(maxdims, list) or len(maxdims) != len(dims) or \
            not all(m == UNLIMITED or (isinstance(m, int) and m >= d) for m, d in zip(maxdims, dims)):
        raise HsdsError(f"HSDS {what}: maxdims {maxdims!r} for dims {dims!r}")
    return tuple(dims), tuple(None if m == UNLIMITED else m for m in maxdims)


def _dtype(type_json: Any, what: str) -> np.dtype:
    try:
        return to_dtype(type_json)
    except TypeNotMapped as e:
        raise TypeNotMapped(f"{what}: {e}") from None


@dataclass(frozen=True, slots=True)
class Domain:
    name: str
    root: str | None                 # the root group's id; None for a folder
    owner: str | None
    created: float
    last_modified: float
    limits: dict = field(default_factory=dict)    # min/max_chunk_size, max_request_size
    compressors: tuple[str, ...] = ()
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def is_folder(self) -> bool:
        return self.root is None

    @classmethod
    def parse(cls, name: str, doc: Any) -> "Domain":
        what = f"domain {name}"
        root = _get(doc, "root", str, what, None)
        return cls(name, root, _get(doc, "owner", str, what, None), _time(doc, "created", what),
                   _time(doc, "lastModified", what), dict(_get(doc, "limits", dict, what, {})),
                   tuple(_get(doc, "compressors", list, what, [])), doc)


@dataclass(frozen=True, slots=True)
class Group:
    id: str
    created: float
    last_modified: float
    link_count: int
    attribute_count: int
    raw: dict = field(default_factory=dict, repr=False)

    @classmethod
    def parse(cls, doc: Any, what: str = "group") -> "Group":
        return cls(_get(doc, "id", str, what), _time(doc, "created", what), _time(doc, "lastModified", what),
                   _count(doc, "linkCount", what), _count(doc, "attributeCount", what), doc)


@dataclass(frozen=True, slots=True)
class Link:
    title: str
    kind: str                        # HARD, SOFT or EXTERNAL (HSDS's class names)
    id: str | None = None            # a hard link's target
    h5path: str | None = None        # a soft or external link's path
    h5domain: str | None = None      # an external link's domain (HSDS answers it as "file")
    created: float = 0.0

    @property
    def collection(self) -> str | None:
        return collection(self.id) if self.id else None

    @classmethod
    def parse(cls, doc: Any, what: str = "link") -> "Link":
        title = _get(doc, "title", str, what)
        what = f"{what} {title!r}"
        kind = _get(doc, "class", str, what)
        created = _time(doc, "created", what)
        if kind == HARD:
            target = _get(doc, "id", str, what)
            collection(target)
            return cls(title, kind, id=target, created=created)
        if kind == SOFT:
            return cls(title, kind, h5path=_get(doc, "h5path", str, what), created=created)
        if kind == EXTERNAL:
            domain = _get(doc, "file", str, what, None) or _get(doc, "h5domain", str, what)
            return cls(title, kind, h5path=_get(doc, "h5path", str, what), h5domain=domain, created=created)
        raise HsdsError(f"HSDS {what}: link class {kind!r}")


@dataclass(frozen=True, slots=True)
class Dataset:
    id: str
    type: Any                        # HSDS's type JSON (with "id" when it is a committed datatype)
    dtype: np.dtype
    shape: tuple[int, ...] | None    # () scalar, None H5S_NULL
    maxshape: tuple[int | None, ...] | None   # None entries unlimited; None: the shape is fixed
    layout: str | None               # H5D_CHUNKED, H5D_CONTIGUOUS, H5D_COMPACT, H5D_CHUNKED_REF...
    chunks: tuple[int, ...] | None
    filters: tuple[dict, ...]
    fill_value: Any                  # as HSDS holds it (JSON), None when unset
    created: float
    last_modified: float
    attribute_count: int
    properties: dict = field(default_factory=dict, repr=False)    # creationProperties
    raw: dict = field(default_factory=dict, repr=False)

    @classmethod
    def parse(cls, doc: Any, what: str = "dataset") -> "Dataset":
        obj_id = _get(doc, "id", str, what)
        what = f"dataset {obj_id}"
        type_json = _get(doc, "type", (dict, str), what)
        shape, maxshape = shape_of(_get(doc, "shape", dict, what), what)
        props = _get(doc, "creationProperties", dict, what, {})
        layout_doc = _get(props, "layout", dict, what, {"class": "H5D_CONTIGUOUS"})
        layout = _get(layout_doc, "class", str, what, None)     # HSDS gives an H5S_NULL dataset none
        chunks = layout_doc.get("dims")
        if chunks is not None:
            if not isinstance(chunks, list) or shape is None or len(chunks) != len(shape) or \
                    not all(isinstance(c, int) and c > 0 for c in chunks):
                raise HsdsError(f"HSDS {what}: chunk dims {chunks!r} for shape {shape}")
            chunks = tuple(chunks)
        filters = _get(props, "filters", list, what, [])
        if not all(isinstance(f, dict) for f in filters):
            raise HsdsError(f"HSDS {what}: filters {filters!r}")
        return cls(obj_id, type_json, _dtype(type_json, what), shape, maxshape, layout, chunks, tuple(filters),
                   props.get("fillValue"), _time(doc, "created", what), _time(doc, "lastModified", what),
                   _count(doc, "attributeCount", what), props, doc)


@dataclass(frozen=True, slots=True)
class Datatype:
    id: str
    type: Any
    dtype: np.dtype
    created: float
    last_modified: float
    attribute_count: int
    raw: dict = field(default_factory=dict, repr=False)

    @classmethod
    def parse(cls, doc: Any, what: str = "datatype") -> "Datatype":
        obj_id = _get(doc, "id", str, what)
        what = f"datatype {obj_id}"
        type_json = _get(doc, "type", (dict, str), what)
        return cls(obj_id, type_json, _dtype(type_json, what), _time(doc, "created", what),
                   _time(doc, "lastModified", what), _count(doc, "attributeCount", what), doc)


@dataclass(frozen=True, slots=True)
class Attribute:
    name: str
    type: Any
    dtype: np.dtype
    shape: tuple[int, ...] | None    # () scalar, None H5S_NULL (no value at all)
    value: np.ndarray | None         # of `shape`, when asked for; None for H5S_NULL or not asked
    created: float = 0.0
    deferred: bool = False           # a value HSDS holds that was not taken from this answer

    @staticmethod
    def head(doc: Any, what: str) -> tuple[str, Any, np.dtype, tuple[int, ...] | None, float]:
        """(name, type JSON, dtype, shape, created) of an attribute's JSON."""
        name = _get(doc, "name", str, what)
        what = f"{what} {name!r}"
        type_json = _get(doc, "type", (dict, str), what)
        shape, _ = shape_of(_get(doc, "shape", dict, what), what)
        return name, type_json, _dtype(type_json, what), shape, _time(doc, "created", what)


@dataclass(frozen=True, slots=True)
class Described:
    """One answer of `GET /{collection}/{id}?include_attrs=1[&include_links=1]`: the object's
    record, and its links and attributes when the answer holds every one (None: list them)."""
    record: Group | Dataset | Datatype
    links: tuple[Link, ...] | None
    attributes: tuple[Attribute, ...] | None


def entries(doc: Any, key: str, count: int, what: str) -> list[tuple[str, dict]] | None:
    """(name, JSON) of each entry of the `key` map an object's answer includes, in name order;
    None when the map is absent or holds fewer than the `count` the answer reports."""
    found = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(found, dict) or len(found) != count:
        return None
    if not all(isinstance(v, dict) for v in found.values()):
        raise HsdsError(f"HSDS {what}: {key} {str(found)[:200]}")
    return sorted(found.items())


def new_id(prefix: str, root: str) -> str:
    """A new object id of the domain whose root group is `root`, as h5pyd makes ids before it
    sends the objects (h5json's createObjId, schema v2): "g-", "d-" or "t-", the root id's first
    16 hex digits (the service files the object under its domain by them), then 16 random ones."""
    head = root[2:].replace("-", "")[:16]
    if len(head) != 16:
        raise HsdsError(f"HSDS root id {root!r}: not a schema v2 id")
    token = head + secrets.token_hex(8)
    return f"{prefix}{token[:8]}-{token[8:16]}-{token[16:20]}-{token[20:26]}-{token[26:32]}"
