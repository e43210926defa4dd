"""The objects of an HSDS domain as the mount's namespace functions (model/namespace.py) use
local objects: groups, named datatypes (and, in dataset.py, datasets), with their attributes.

An object is a handle (the domain, the HSDS id, the mount's address for it, the path it was
found by): making one does no I/O. What it shows comes from the domain's metadata cache
(metadata.py), kept `refresh` seconds: its record, a group's link listing and single links, the
attribute list, facts, stat numbers. Nothing here lives in object headers (`headers_local`
False): every answer may need the network, so the FUSE layer asks from a worker thread.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Any, Callable, Hashable

import numpy as np

from ...format.messages import dataspace as DS
from ...format.messages.datatype import Datatype
from ...format.messages.link import EXTERNAL, HARD, SOFT, Link
from ...storage.hsds import records
from ...storage.hsds.transport import HsdsError
from ..dtypes import describe
from .datatypes import record_of
from .elements import npy_values

if TYPE_CHECKING:
    from .domain import HsdsDomain


class HsdsObject:
    __slots__ = ("domain", "id", "address", "path")
    kind = "object"
    headers_local = False       # no answer comes from an object header read locally
    dense_attributes = True     # reading attributes is I/O
    facts_from_header = False
    nlink = 1                   # HSDS keeps no count of the hard links to an object

    def __init__(self, domain: HsdsDomain, obj_id: str, address: int, path: str):
        self.domain = domain
        self.id = obj_id
        self.address = address
        self.path = path

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.path} {self.id}>"

    def cached(self, kind: Hashable, compute: Callable[[], Any], nbytes: Any = 0) -> Any:
        """A value derived from this object, kept `refresh` seconds (`nbytes` is the local
        engine's cost accounting: the metadata cache here is bounded by its object count)."""
        return self.domain.meta.get(self.id, kind, compute)

    @property
    def record(self) -> Any:
        """HSDS's description of the object (records.Group, Dataset or Datatype)."""
        return self.cached("record", self._fetch_record)

    def _fetch_record(self) -> Any:
        raise NotImplementedError

    @property
    def mtime(self) -> float | None:
        return self.record.last_modified or None

    @property
    def ctime(self) -> float | None:
        return self.record.created or None

    def message(self, mtype: int) -> None:
        """No HDF5 header messages: everything comes from HSDS's records."""
        return None

    def attributes(self) -> list[HsdsAttribute]:
        return list(self.cached("attributes", self._read_attributes))

    def _read_attributes(self) -> tuple[HsdsAttribute, ...]:
        found = self.domain.client.attributes(self.id, with_values=True)
        return tuple(HsdsAttribute(self.domain, self.path, a) for a in sorted(found, key=lambda a: a.name))

    def facts(self) -> dict[str, str]:
        """Readable facts (a copy: callers may add theirs)."""
        return dict(self.cached("facts", self._compute_facts))

    def _compute_facts(self) -> dict[str, str]:
        return {"kind": self.kind, "address": str(self.address), "hsds_id": self.id}


class HsdsGroup(HsdsObject):
    __slots__ = ()
    kind = "group"

    def _fetch_record(self) -> records.Group:
        return self.domain.client.get_group(self.id)

    def links(self) -> list[Link]:
        """The links in name order, as the local engine lists a group h5py wrote (callers do
        not change the list)."""
        return self._table()[0]

    def _table(self) -> tuple[list[Link], dict[str, Link]]:
        return self.cached("links", self._read_links)

    def _read_links(self) -> tuple[list[Link], dict[str, Link]]:
        links = sorted((self._link(ln) for ln in self.domain.client.links(self.id)), key=lambda ln: ln.name)
        return links, {ln.name: ln for ln in links}

    def link(self, name: str) -> Link | None:
        """The link `name` (None: none): from a fresh listing, else one request for it."""
        table = self.domain.meta.peek(self.id, "links", None)
        if table is not None:
            return table[1].get(name)
        return self.cached(("link", name), lambda: self._fetch_link(name))

    def _fetch_link(self, name: str) -> Link | None:
        try:
            return self._link(self.domain.client.get_link(self.id, name))
        except HsdsError as e:
            if e.errno == errno.ENOENT:
                return None
            raise

    def _link(self, ln: records.Link) -> Link:
        if ln.kind == records.HARD:
            return Link(ln.title, HARD, address=self.domain.address_of(ln.id))
        if ln.kind == records.SOFT:
            return Link(ln.title, SOFT, target=ln.h5path)
        return Link(ln.title, EXTERNAL, target=ln.h5path, filename=ln.h5domain)

    def _compute_facts(self) -> dict[str, str]:
        return {**super()._compute_facts(), "storage": "hsds"}


class HsdsDatatype(HsdsObject):
    __slots__ = ()
    kind = "datatype"

    def _fetch_record(self) -> records.Datatype:
        return self.domain.client.get_datatype(self.id)

    @property
    def datatype(self) -> Datatype:
        return record_of(self.record.type)

    def _compute_facts(self) -> dict[str, str]:
        return {**super()._compute_facts(), "dtype": describe(self.datatype)}


class HsdsAttribute:
    """One attribute: `value` is what the local engine's Attribute.value gives for the same
    attribute in a local file (0-d for scalars; text as str ('U'), fixed strings as bytes
    ('S'), h5py's booleans as bool; an empty (H5S_NULL) one as an empty array), read-only."""

    __slots__ = ("domain", "owner_path", "record", "name", "_value")
    value_in_header = False

    def __init__(self, domain: HsdsDomain, owner_path: str, record: records.Attribute):
        self.domain = domain
        self.owner_path = owner_path
        self.record = record
        self.name = record.name
        self._value: np.ndarray | None = None

    @property
    def path(self) -> str:
        return f"{self.owner_path}: attribute {self.name!r}"

    @property
    def datatype(self) -> Datatype:
        return record_of(self.record.type)

    @property
    def dataspace(self) -> DS.Dataspace:
        shape = self.record.shape
        if shape is None:
            return DS.Dataspace(DS.NULL, (), ())
        return DS.Dataspace(DS.SIMPLE if shape else DS.SCALAR, shape, shape)

    @property
    def value(self) -> np.ndarray:
        if self._value is None:
            self._value = self._decode()
        return self._value

    def _decode(self) -> np.ndarray:
        rec = self.record
        stored = rec.value if rec.value is not None else np.zeros(0, rec.dtype)
        values = npy_values(stored, self.datatype, self.domain.address_of, self.domain.ref_text)
        # values are (count, *dims of an array type): those dims follow the dataspace's
        shape = () if rec.shape is None else rec.shape
        values = values[:0] if rec.shape is None else values.reshape(shape + values.shape[1:])
        values.flags.writeable = False
        return values
