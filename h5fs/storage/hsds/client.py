"""HsdsClient: one HSDS domain through the service's REST API (HDFGroup/hsds, docs in
HDFGroup/hdf-rest-api): the domain, its groups and links, datasets and their values by
hyperslab, committed datatypes, attributes. Synchronous and thread-safe (the transport pools
connections); every failure is an HsdsError carrying the errno for the file system call.

Values travel as binary wherever HSDS allows it (dataset values both ways; attribute values of
fixed-size types as base64 inside the JSON, which HSDS checks byte for byte): no float goes
through decimal text. Attributes of variable-length types are written as JSON (HSDS takes no
binary for them) and read as base64 of their binary form (`/value?encoding=base64`).
HSDS facts the calls rely on (tests/storage/test_hsds_client.py checks each against the local
service): links and attributes list in name order and page with Limit and Marker (the last name
seen); a PUT of a link or attribute identical to one there answers 200, a different one 409 (an
attribute: unless replace=1); DELETE of a missing link answers 200; deleting an object leaves
the links to it (they lead to 410); `PUT /?flush=1` answers 204 once the data node has written
everything to storage.
"""

from __future__ import annotations

import base64
import binascii
import errno
import math
from typing import Any, Sequence

import numpy as np

from . import values
from .records import Attribute, Dataset, Datatype, Described, Domain, Group, Link, collection, entries
from .settings import HsdsSettings, resolve
from .transport import BINARY, HsdsError, TooLarge, Transport, segment
from .types import is_variable, item_size, to_json

PAGE = 1000        # links or attributes asked for per request
DESCRIBE_JSON = 16 << 20     # the largest answer taken for an object with its links and attributes
PARSERS = {"groups": Group.parse, "datasets": Dataset.parse, "datatypes": Datatype.parse}


def selection(sel: Sequence[slice], shape: Sequence[int] | None = None) -> tuple[str, tuple[int, ...]]:
    """(HSDS's `select` text "[a:b,c:d:s]", the shape it selects) of one slice per dimension with
    explicit, non-negative bounds (start <= stop; a step of 1 or more). With `shape`, the
    selection must fit inside it."""
    parts, out = [], []
    if shape is not None and len(shape) != len(sel):
        raise HsdsError(f"a selection of {len(sel)} dimensions for a shape of {len(shape)}", errno.EINVAL)
    for i, s in enumerate(sel):
        start, stop, step = s.start, s.stop, 1 if s.step is None else s.step
        if not all(isinstance(v, (int, np.integer)) for v in (start, stop, step)) or \
                not (0 <= start <= stop) or step < 1 or (shape is not None and stop > shape[i]):
            raise HsdsError(f"selection {s} of dimension {i}: explicit bounds 0 <= start <= stop"
                            f"{f' <= {shape[i]}' if shape is not None else ''} and a step >= 1", errno.EINVAL)
        parts.append(f"{start}:{stop}" if step == 1 else f"{start}:{stop}:{step}")
        out.append(len(range(start, stop, step)))
    return "[" + ",".join(parts) + "]", tuple(out)


def whole(shape: Sequence[int]) -> tuple[slice, ...]:
    """The selection of every element of `shape`."""
    return tuple(slice(0, n) for n in shape)


class HsdsClient:
    """The REST calls on `domain` (a path such as /home/USER/run1.h5) of the service the settings
    name (HsdsSettings, or resolve()'s keywords: endpoint, username, password, password_file,
    config_file and the other settings)."""

    def __init__(self, domain: str, settings: HsdsSettings | None = None, **options: Any):
        if not domain.startswith("/"):
            raise HsdsError(f"HSDS domain {domain!r}: a domain is an absolute path", errno.EINVAL)
        self.domain = domain
        self.settings = settings if settings is not None else resolve(**options)
        self.transport = Transport(self.settings)

    def __enter__(self) -> "HsdsClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.transport.close()

    def stop(self) -> None:
        """No more retries (an unmount is under way)."""
        self.transport.stop()

    def stats(self) -> dict[str, Any]:
        return self.transport.stats()

    def _json(self, method: str, path: str, params: dict | None = None, body: Any = None) -> Any:
        return self.transport.json_request(method, path, params, domain=self.domain, json_body=body)

    # the domain ------------------------------------------------------------------------------
    def get_domain(self) -> Domain:
        return Domain.parse(self.domain, self._json("GET", "/"))

    def create_domain(self, folder: bool = False) -> Domain:
        """A new domain with an empty root group (or a folder); EEXIST if there is one.
        A retry after a lost answer meets the domain the first attempt made: EEXIST too."""
        return Domain.parse(self.domain, self._json("PUT", "/", body={"folder": True} if folder else None))

    def delete_domain(self) -> None:
        self._json("DELETE", "/")

    def scan_info(self) -> dict | None:
        """What HSDS's last storage scan of the domain found (`GET /?verbose=1`): "datasets" maps
        each dataset's id to its details (allocated_bytes, num_chunks, lastModified: what
        `GET /datasets/{id}?verbose=1` merges into one record); None before any scan.
        TooLarge past DESCRIBE_JSON bytes (a domain of very many datasets)."""
        doc = self.transport.json_request("GET", "/", {"verbose": 1}, domain=self.domain, limit=DESCRIBE_JSON)
        info = doc.get("scan_info") if isinstance(doc, dict) else None
        return info if isinstance(info, dict) else None

    def flush(self) -> None:
        """Returns once the service holds every change made so far in its storage (the data
        node writes its dirty objects and chunks, then answers 204)."""
        self._json("PUT", "/", {"flush": 1})

    def resolve(self, h5path: str) -> str:
        """The id of the object at an absolute HDF5 path (hard links only); ENOENT if none."""
        doc = self._json("GET", "/", {"h5path": h5path})
        obj_id = doc.get("id") if isinstance(doc, dict) else None
        if not isinstance(obj_id, str):
            raise HsdsError(f"HSDS GET / h5path={h5path} [{self.domain}]: no object id in the answer")
        return obj_id

    # any object ----------------------------------------------------------------------------------
    def describe(self, obj_id: str, verbose: bool = False, details: dict | None = None) -> Described:
        """An object's record with its attributes (and a group's links) in one request, the way
        h5pyd asks (`include_attrs`, `include_links`); `verbose`: a dataset's allocated size too
        (HSDS reads its scan's details for each such request: costly), or `details`: the
        dataset's entry of scan_info()["datasets"], merged as the service merges it for verbose.
        HSDS answers every link and attribute it holds; an answer that holds fewer than it
        counts gives None for them (the caller lists them), and so does one over DESCRIBE_JSON
        bytes (a huge group: then the record alone is asked for). Attribute values come from
        the JSON where values.json_bytes takes it exactly, else they are `deferred`
        (attribute_value reads their binary form when asked)."""
        kind = collection(obj_id)
        params: dict[str, Any] = {"include_attrs": 1}
        if kind == "groups":
            params["include_links"] = 1
        if verbose and kind == "datasets":
            params["verbose"] = 1
        try:
            doc = self.transport.json_request("GET", f"/{kind}/{obj_id}", params, domain=self.domain,
                                              limit=DESCRIBE_JSON)
        except TooLarge:
            params = {"verbose": 1} if verbose and kind == "datasets" else {}
            doc = self._json("GET", f"/{kind}/{obj_id}", params)
        what = f"{kind[:-1]} {obj_id}"
        if not isinstance(doc, dict):
            raise HsdsError(f"HSDS GET /{kind}/{obj_id} [{self.domain}]: the answer is not a JSON object")
        if details and kind == "datasets":     # as dset_sn.GET_Dataset merges them
            doc.update({new: details[old] for old, new in (("num_chunks", "num_chunks"), ("allocated_bytes",
                        "allocated_size"), ("lastModified", "lastModified")) if old in details})
        # the record keeps the answer less what is parsed here (a big group's links once, not twice)
        record = PARSERS[kind]({k: v for k, v in doc.items() if k not in ("links", "attributes", "hrefs")}, what)
        links = None
        if kind == "groups":
            found = entries(doc, "links", record.link_count, what)
            links = None if found is None else tuple(Link.parse({**v, "title": k}, f"link of {obj_id}")
                                                      for k, v in found)
        found = entries(doc, "attributes", record.attribute_count, what)
        attrs = None if found is None else tuple(self.stored_attribute(obj_id, {**v, "name": k}) for k, v in found)
        return Described(record, links, attrs)

    def stored_attribute(self, obj_id: str, doc: dict) -> Attribute:
        """An attribute as an object's answer includes it (the value as HSDS stores it: JSON, or
        base64 where HSDS found no JSON for it)."""
        what = f"attribute of {obj_id}"
        name, type_json, dt, shape, created = Attribute.head(doc, what)
        if shape is None:
            return Attribute(name, type_json, dt, shape, None, created)
        raw = doc.get("value")
        if doc.get("encoding") == "base64" and isinstance(raw, str):
            return Attribute(name, type_json, dt, shape, self._decode64(raw, dt, shape, f"{what} {name!r}"), created)
        data = values.json_bytes(raw, dt, shape) if "value" in doc else None
        if data is None:
            return Attribute(name, type_json, dt, shape, None, created, deferred=True)
        value = values.decode(data, dt, math.prod(shape), f"{what} {name!r}").reshape(shape + dt.shape)
        return Attribute(name, type_json, dt, shape, value, created)

    # groups ----------------------------------------------------------------------------------------
    def get_group(self, gid: str) -> Group:
        return Group.parse(self._json("GET", f"/groups/{gid}"), f"group {gid}")

    def create_group(self, parent: str | None = None, name: str | None = None) -> Group:
        """A new group, linked as `name` in group `parent` when both are given."""
        return Group.parse(self._json("POST", "/groups", body=_link_body(parent, name)), "new group")

    def create_groups(self, ids: Sequence[str]) -> None:
        """New unlinked groups of the ids given (new_id's), in one request as h5pyd makes them
        (the service makes many at about 1 ms each; one POST of one group costs 2.5-4 ms)."""
        self._json("POST", "/groups", body=[{"id": obj_id} for obj_id in ids])

    def put_links(self, root: str, links: dict[str, dict[str, str]]) -> None:
        """Hard links, group id -> title -> target id, in one request (as h5pyd's flush): the
        same link again is no error; EEXIST (409) when a title names another link already."""
        body = {"grp_ids": {gid: {"links": {t: {"id": target} for t, target in titles.items()}}
                            for gid, titles in links.items()}}
        self._json("PUT", f"/groups/{root}/links", body=body)

    def put_attributes(self, root: str, attributes: dict[str, dict[str, dict]]) -> None:
        """Attributes, object id -> name -> attribute_json(), in one request (as h5pyd's flush)."""
        body = {"obj_ids": {obj_id: {"attributes": attrs} for obj_id, attrs in attributes.items()}}
        self._json("PUT", f"/groups/{root}/attributes", body=body)

    def delete_group(self, gid: str) -> None:
        """The group goes; links to it stay (HSDS keeps them; they lead to 410 Gone)."""
        self._json("DELETE", f"/groups/{gid}")

    # links -------------------------------------------------------------------------------------
    def links(self, gid: str, page: int = PAGE) -> list[Link]:
        """Every link of group `gid`, in name order, `page` per request."""
        return [Link.parse(doc, f"link of {gid}") for doc in
                self._pages(f"/groups/{gid}/links", "links", "title", page, {})]

    def tree_links(self, gid: str, limit: int = DESCRIBE_JSON) -> dict[str, list[Link]]:
        """The links of group `gid` and of every group reachable from it by hard links, by group
        id, in one request (HSDS crawls them at once: `follow_links`, the state it holds now);
        TooLarge past `limit` bytes."""
        path = f"/groups/{gid}/links"
        doc = self.transport.json_request("GET", path, {"follow_links": 1}, domain=self.domain, limit=limit)
        found = doc.get("links") if isinstance(doc, dict) else None
        if not isinstance(found, dict) or not all(isinstance(v, list) for v in found.values()):
            raise HsdsError(f"HSDS GET {path}?follow_links=1 [{self.domain}]: no links by group in the answer")
        return {g: [Link.parse(doc, f"link of {g}") for doc in links] for g, links in found.items()}

    def get_link(self, gid: str, title: str) -> Link:
        doc = self._json("GET", f"/groups/{gid}/links/{segment(title)}")
        if not isinstance(doc, dict) or not isinstance(doc.get("link"), dict):
            raise HsdsError(f"HSDS GET /groups/{gid}/links/{title} [{self.domain}]: no link in the answer")
        # one link comes as {"link": {...}, "created": ...}: its time beside it, not inside as listed
        return Link.parse({"created": doc.get("created", 0.0), **doc["link"]}, f"link of {gid}")

    def link_hard(self, gid: str, title: str, target: str) -> None:
        """EEXIST if `title` names another link already (the same one again is no error)."""
        self._json("PUT", f"/groups/{gid}/links/{segment(title)}", body={"id": target})

    def link_soft(self, gid: str, title: str, h5path: str) -> None:
        self._json("PUT", f"/groups/{gid}/links/{segment(title)}", body={"h5path": h5path})

    def link_external(self, gid: str, title: str, h5domain: str, h5path: str) -> None:
        self._json("PUT", f"/groups/{gid}/links/{segment(title)}", body={"h5path": h5path, "h5domain": h5domain})

    def delete_link(self, gid: str, title: str) -> None:
        """No error when there is no such link (HSDS answers 200)."""
        self._json("DELETE", f"/groups/{gid}/links/{segment(title)}")

    def _pages(self, path: str, key: str, name: str, page: int, params: dict) -> list[dict]:
        """Every entry of a listing that pages by Limit and Marker; a server that does not move
        past the marker is an error, not an endless loop."""
        out: list[dict] = []
        marker: str | None = None
        while True:
            query = {**params, "Limit": page} | ({"Marker": marker} if marker is not None else {})
            doc = self._json("GET", path, query)
            entries = doc.get(key) if isinstance(doc, dict) else None
            if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get(name), str)
                                                        for e in entries):
                raise HsdsError(f"HSDS GET {path} [{self.domain}]: no list of {key} in the answer")
            if len(entries) > page:
                raise HsdsError(f"HSDS GET {path} [{self.domain}]: {len(entries)} {key} for a limit of {page}")
            if marker is not None and entries and entries[0][name] <= marker:
                raise HsdsError(f"HSDS GET {path} [{self.domain}]: the page after {marker!r} starts at "
                                f"{entries[0][name]!r}")
            out += entries
            if len(entries) < page:
                return out
            marker = entries[-1][name]

    # datasets ----------------------------------------------------------------------------------
    def get_dataset(self, did: str, verbose: bool = False) -> Dataset:
        """`verbose`: also the bytes the service has allocated for it (`raw["allocated_size"]`),
        once its storage scan has counted them (absent before)."""
        params = {"verbose": 1} if verbose else None
        return Dataset.parse(self._json("GET", f"/datasets/{did}", params), f"dataset {did}")

    def create_dataset(self, dtype: Any, shape: Sequence[int] | None, maxshape: Sequence[int | None] | None = None,
                       chunks: Sequence[int] | None = None, filters: Sequence[dict] = (), fill_value: Any = None,
                       parent: str | None = None, name: str | None = None, type_json: Any = None) -> Dataset:
        """A new dataset of `dtype` (or of `type_json`: HSDS type JSON, or a committed datatype's
        id), `shape` (() scalar, None H5S_NULL), linked as `name` in `parent` when given.
        maxshape: None entries unlimited; filters: HSDS's filter JSON ({"class":
        "H5Z_FILTER_DEFLATE", "id": 1, "level": 6}, ...); fill_value: a value of the dtype."""
        dt = np.dtype(dtype)
        body: dict[str, Any] = {"type": type_json if type_json is not None else to_json(dt)}
        body["shape"] = "H5S_NULL" if shape is None else list(shape) if shape else "H5S_SCALAR"
        if maxshape is not None:
            body["maxdims"] = [0 if m is None else int(m) for m in maxshape]    # 0: unlimited
        props: dict[str, Any] = {}
        if chunks is not None:
            props["layout"] = {"class": "H5D_CHUNKED", "dims": [int(c) for c in chunks]}
        if filters:
            props["filters"] = list(filters)
        if fill_value is not None:
            props["fillValue"] = values.to_json(np.asarray(fill_value, dtype=dt), dt)
        if props:
            body["creationProperties"] = props
        body.update(_link_body(parent, name))
        return Dataset.parse(self._json("POST", "/datasets", body=body), "new dataset")

    def delete_dataset(self, did: str) -> None:
        self._json("DELETE", f"/datasets/{did}")

    def resize(self, did: str, shape: Sequence[int]) -> None:
        """New dimensions within the maximum ones; EFBIG beyond them (HSDS answers 409 Conflict)."""
        try:
            self._json("PUT", f"/datasets/{did}/shape", body={"shape": [int(n) for n in shape]})
        except HsdsError as e:
            if e.status != 409:
                raise
            raise HsdsError(f"{e} (shape {tuple(shape)} beyond the maximum)", errno.EFBIG, 409) from None

    def read_bytes(self, did: str, sel: Sequence[slice] | None, itemsize: int) -> bytearray:
        """The bytes of a fixed-size type's elements in `sel` (None: a scalar dataset's one),
        row-major: exactly count x itemsize of them, or an HsdsError."""
        params, shape = self._select(sel)
        expect = math.prod(shape) * itemsize
        if expect == 0:
            return bytearray()
        answer = self.transport.request("GET", f"/datasets/{did}/value", params, domain=self.domain,
                                        binary=True, expect=expect)
        if answer.content_type != BINARY:
            raise HsdsError(f"HSDS GET /datasets/{did}/value [{self.domain}]: answered {answer.content_type}, "
                            f"not binary data")
        return answer.body

    def read(self, did: str, dtype: np.dtype, sel: Sequence[slice] | None) -> np.ndarray:
        """The elements in `sel` (None: a scalar dataset's one) as an array of the selection's
        shape (and of a subarray type's dims after it); variable-length types as object arrays."""
        dt = np.dtype(dtype)
        params, shape = self._select(sel)
        count = math.prod(shape)
        where = f"dataset {did} {params.get('select', '')}"
        size = item_size(dt)
        if size is not None:
            data = self.read_bytes(did, sel, size)
        elif count == 0:
            data = b""
        else:
            answer = self.transport.request("GET", f"/datasets/{did}/value", params, domain=self.domain,
                                            binary=True)
            if answer.content_type != BINARY:
                raise HsdsError(f"HSDS GET /datasets/{did}/value [{self.domain}]: answered "
                                f"{answer.content_type}, not binary data")
            data = answer.body
        return values.decode(data, dt, count, where).reshape(shape + dt.shape)

    def write(self, did: str, dtype: np.dtype, sel: Sequence[slice] | None, data: Any) -> None:
        """`data` (converted to `dtype`; as many elements as `sel` selects) into `sel`."""
        dt = np.dtype(dtype)
        params, shape = self._select(sel)
        arr = np.asarray(data, dtype=dt)
        if arr.size != math.prod(shape) * max(1, math.prod(dt.shape)):
            raise HsdsError(f"HSDS dataset {did}: {arr.shape} elements for a selection of {shape}", errno.EINVAL)
        if math.prod(shape) == 0:
            return
        self.transport.request("PUT", f"/datasets/{did}/value", params, domain=self.domain,
                               body=values.encode(arr, dt))

    def write_bytes(self, did: str, sel: Sequence[slice] | None, itemsize: int, data: bytes | memoryview) -> None:
        """The row-major bytes of a fixed-size type's elements into `sel` (None: a scalar
        dataset's one), exactly count x itemsize of them: no conversion on the way (the
        mount's writes are bytes of the raw view)."""
        params, shape = self._select(sel)
        if len(data) != math.prod(shape) * itemsize:
            raise HsdsError(f"HSDS dataset {did}: {len(data)} bytes for a selection of {shape} "
                            f"{itemsize}-byte elements", errno.EINVAL)
        if len(data):
            self.transport.request("PUT", f"/datasets/{did}/value", params, domain=self.domain, body=bytes(data))

    @staticmethod
    def _select(sel: Sequence[slice] | None) -> tuple[dict[str, str], tuple[int, ...]]:
        if sel is None:
            return {}, ()
        text, shape = selection(sel)
        return {"select": text}, shape

    # committed datatypes ---------------------------------------------------------------------------
    def get_datatype(self, tid: str) -> Datatype:
        return Datatype.parse(self._json("GET", f"/datatypes/{tid}"), f"datatype {tid}")

    def create_datatype(self, dtype: Any, parent: str | None = None, name: str | None = None,
                        type_json: Any = None) -> Datatype:
        body = {"type": type_json if type_json is not None else to_json(np.dtype(dtype)), **_link_body(parent, name)}
        return Datatype.parse(self._json("POST", "/datatypes", body=body), "new datatype")

    def delete_datatype(self, tid: str) -> None:
        self._json("DELETE", f"/datatypes/{tid}")

    # attributes ----------------------------------------------------------------------------------
    def attributes(self, obj_id: str, with_values: bool = False, page: int = PAGE) -> list[Attribute]:
        """Every attribute of an object, in name order; with their values when asked (one request
        per page, and one more per attribute of a variable-length type)."""
        params = {"IncludeData": 1, "encoding": "base64"} if with_values else {"IncludeData": 0}
        docs = self._pages(f"/{collection(obj_id)}/{obj_id}/attributes", "attributes", "name", page, params)
        return [self._attribute(obj_id, doc, with_values) for doc in docs]

    def get_attribute(self, obj_id: str, name: str) -> Attribute:
        """One attribute, with its value; ENOENT if there is none of that name."""
        doc = self._json("GET", self._attr_path(obj_id, name), {"encoding": "base64"})
        return self._attribute(obj_id, doc, True)

    def _attribute(self, obj_id: str, doc: Any, with_value: bool) -> Attribute:
        what = f"attribute of {obj_id}"
        name, type_json, dt, shape, created = Attribute.head(doc, what)
        value = None
        if with_value and shape is not None:
            if doc.get("encoding") == "base64" and isinstance(doc.get("value"), str):
                value = self._decode64(doc["value"], dt, shape, f"{what} {name!r}")
            else:
                value = self.attribute_value(obj_id, name, dt, shape)
        return Attribute(name, type_json, dt, shape, value, created)

    def attribute_value(self, obj_id: str, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """An attribute's value as HSDS's binary form (base64 in JSON: the way HSDS gives
        variable-length values as bytes), of the given type and shape."""
        doc = self._json("GET", self._attr_path(obj_id, name) + "/value", {"encoding": "base64"})
        raw = doc.get("value") if isinstance(doc, dict) else None
        if not isinstance(raw, str) or doc.get("encoding") != "base64":
            raise HsdsError(f"HSDS attribute {name!r} of {obj_id} [{self.domain}]: no base64 value in the answer")
        return self._decode64(raw, np.dtype(dtype), shape, f"attribute {name!r} of {obj_id}")

    def _decode64(self, text: str, dt: np.dtype, shape: tuple[int, ...], what: str) -> np.ndarray:
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as e:
            raise HsdsError(f"HSDS {what} [{self.domain}]: its base64 value does not decode ({e})") from None
        return values.decode(raw, dt, math.prod(shape), what).reshape(shape + dt.shape)

    def put_attribute(self, obj_id: str, name: str, value: Any, dtype: Any = None, replace: bool = False,
                      type_json: Any = None) -> None:
        """Create (or with `replace`, replace) an attribute holding `value` (None: an empty,
        H5S_NULL one of `dtype`), of `dtype` (else NumPy's, text as variable-length UTF-8)
        or of `type_json`. EEXIST if another attribute of that name is there and not `replace`."""
        self._json("PUT", self._attr_path(obj_id, name), {"replace": 1} if replace else None,
                   attribute_json(value, dtype, type_json))

    def delete_attribute(self, obj_id: str, name: str) -> None:
        self._json("DELETE", self._attr_path(obj_id, name))

    @staticmethod
    def _attr_path(obj_id: str, name: str) -> str:
        return f"/{collection(obj_id)}/{obj_id}/attributes/{segment(name)}"


def attribute_json(value: Any, dtype: Any = None, type_json: Any = None) -> dict[str, Any]:
    """The JSON HSDS takes for an attribute (put_attribute's arguments)."""
    dt = _attribute_dtype(value, dtype)
    body: dict[str, Any] = {"type": type_json if type_json is not None else to_json(dt)}
    if value is None:
        body["shape"] = "H5S_NULL"
    else:
        arr = np.asarray(value, dtype=dt)
        shape = arr.shape[:arr.ndim - len(dt.shape)]
        body["shape"] = list(shape) if shape else "H5S_SCALAR"
        if is_variable(dt):
            body["value"] = values.to_json(arr, dt)
        else:
            body["value"] = base64.b64encode(values.encode(arr, dt)).decode("ascii")
            body["encoding"] = "base64"
    return body


def _link_body(parent: str | None, name: str | None) -> dict[str, Any]:
    if (parent is None) != (name is None):
        raise HsdsError("a link needs both the parent group and the name", errno.EINVAL)
    return {} if parent is None else {"link": {"id": parent, "name": name}}


def _attribute_dtype(value: Any, dtype: Any) -> np.dtype:
    if dtype is not None:
        return np.dtype(dtype)
    if value is None:
        raise HsdsError("an empty (H5S_NULL) attribute needs a dtype", errno.EINVAL)
    arr = np.asarray(value)
    if arr.dtype.kind == "U":       # text: variable-length UTF-8, as h5py stores str
        return np.dtype("O", metadata={"vlen": str})
    return arr.dtype

