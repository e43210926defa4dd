"""The objects of an HSDS domain as the mount's namespace functions (model/namespace.py) use
local objects: groups, named datatypes (and, in dataset.py, datasets), with their attributes.

An object is a handle (the domain, the HSDS id, the mount's address for it, the path it was
found by): making one does no I/O. What it shows comes from the domain's metadata cache
(metadata.py), kept `refresh` seconds: its record, a group's link listing and single links, the
attribute list, facts, stat numbers. The record, the attributes and a group's links come in one
request (`HsdsDomain.describe`, HsdsClient.describe); a listing has its children described in
the background meanwhile. Nothing here lives in object headers (`headers_local` False): every
answer may need the network, so the FUSE layer asks from a worker thread.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterable

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

MISSING: Any = object()     # nothing kept (None is a value: a link that is not there)


class HsdsObject:
    __slots__ = ("domain", "id", "address", "path")
    kind = "object"
    headers_local = False       # no answer comes from an object header read locally
    facts_from_header = False
    nlink = 1                   # HSDS keeps no count of the hard links to an object

    def __init__(self, domain: HsdsDomain, obj_id: str, address: int, path: str):
        self.domain = domain
        self.id = obj_id
        self.address = address
        self.path = path

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.path} {self.id}>"

    @property
    def dense_attributes(self) -> bool:
        """Whether reading the attributes may need a request: not while they are kept, so the
        FUSE layer lists them on its event loop (a worker hop costs ~0.15 ms an object in a
        walk); their values may still need one (HsdsAttribute.value_in_header)."""
        return not self.domain.meta.has(self.id, "attributes")

    def cached(self, kind: Hashable, compute: Callable[[], Any], nbytes: Any = 0) -> Any:
        """A value derived from this object, kept `refresh` seconds (`nbytes` is the local
        engine's cost accounting: the metadata cache here is bounded by its object count)."""
        return self.domain.meta.get(self.id, kind, compute)

    def described(self, kind: str, listing: Callable[[], Any] | None = None) -> Any:
        """What describe() keeps of the object ("record", "attributes", "links"): kept, else
        from one describe request; what that answer did not hold whole comes from `listing`
        (paged), kept too."""
        meta = self.domain.meta
        value = meta.peek(self.id, kind, MISSING)
        if value is MISSING and not meta.has(self.id, "record"):
            value = self.domain.describe(self.id, self.path).get(kind, MISSING)
        if value is MISSING and listing is not None:
            self.domain.creations.settle(self.id)
            value = self.cached(kind, listing)
        return value

    @property
    def record(self) -> Any:
        """HSDS's description of the object (records.Group, Dataset or Datatype)."""
        value = self.described("record")
        return value if value is not MISSING else self.domain.describe(self.id, self.path)["record"]

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
        return list(self.described("attributes", self._read_attributes))

    def _read_attributes(self) -> tuple[HsdsAttribute, ...]:
        found = self.domain.client.attributes(self.id, with_values=True)
        return attribute_handles(self.domain, self.id, self.path, sorted(found, key=lambda a: a.name))

    def facts(self) -> dict[str, str]:
        """Readable facts (a copy: callers may add theirs)."""
        return dict(self.cached("facts", self._compute_facts))

    def _compute_facts(self) -> dict[str, str]:
        return {"kind": self.kind, "address": str(self.address), "hsds_id": self.id}


class HsdsGroup(HsdsObject):
    __slots__ = ()
    kind = "group"

    def links(self, prefetch: bool = True) -> list[Link]:
        """The links in name order, as the local engine lists a group h5py wrote (callers do
        not change the list). `prefetch`: the hard links' targets not kept are described in
        the background (a listing is most often followed by a stat of each entry)."""
        links = self.described("links", self._read_links)[0]
        if prefetch:
            base = self.path.rstrip("/")
            hard = [(ln.address, f"{base}/{ln.name}") for ln in links if ln.address is not None]
            if self.id == self.domain.root_id and any(self.domain.id_of(a).startswith("g-") for a, _ in hard):
                self.domain.prefetch_tree()     # a walk goes on below: every object, ahead of it
            self.domain.prefetch(hard)
        return links

    def _read_links(self) -> tuple[list[Link], dict[str, Link]]:
        return link_table(self.domain, self.domain.client.links(self.id))

    def link(self, name: str) -> Link | None:
        """The link `name` (None: none): from the group's description (one request, which the
        group's stat needs anyway) when it holds every link, else one request for it."""
        table = self.described("links")
        if table is not MISSING:
            return table[1].get(name)
        return self.cached(("link", name), lambda: self._fetch_link(name))

    def _fetch_link(self, name: str) -> Link | None:
        self.domain.creations.settle(self.id)
        try:
            return self._link(self.domain.client.get_link(self.id, name))
        except HsdsError as e:
            if e.errno == errno.ENOENT:
                return None
            raise

    def _link(self, ln: records.Link) -> Link:
        return model_link(self.domain, ln)

    def _compute_facts(self) -> dict[str, str]:
        return {**super()._compute_facts(), "storage": "hsds"}


class HsdsDatatype(HsdsObject):
    __slots__ = ()
    kind = "datatype"

    @property
    def datatype(self) -> Datatype:
        return record_of(self.record.type)

    def _compute_facts(self) -> dict[str, str]:
        return {**super()._compute_facts(), "dtype": describe(self.datatype)}


class HsdsAttribute:
    """One attribute: `value` is what the local engine's Attribute.value gives for the same
    attribute in a local file (0-d for scalars; text as str ('U'), fixed strings as bytes
    ('S'), h5py's booleans as bool; an empty (H5S_NULL) one as an empty array), read-only.
    A value the description did not carry (`record.deferred`) is read when first asked."""

    __slots__ = ("domain", "owner_id", "owner_path", "record", "name", "_value")

    def __init__(self, domain: HsdsDomain, owner_id: str, owner_path: str, record: records.Attribute):
        self.domain = domain
        self.owner_id = owner_id
        self.owner_path = owner_path
        self.record = record
        self.name = record.name
        self._value: np.ndarray | None = None

    @property
    def path(self) -> str:
        return f"{self.owner_path}: attribute {self.name!r}"

    @property
    def value_in_header(self) -> bool:
        """Whether the value is at hand: no request (and no walk for a reference's path) makes
        it, so the FUSE layer formats it on its event loop rather than in a worker thread."""
        return not self.record.deferred

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
        if rec.deferred and rec.shape is not None:
            stored = self.domain.client.attribute_value(self.owner_id, rec.name, rec.dtype, rec.shape)
        else:
            stored = rec.value if rec.value is not None else np.zeros(0, rec.dtype)
        values = npy_values(stored, self.datatype, self.domain.address_of, self.domain.ref_text)
        # values are (count, *dims of an array type): those dims follow the dataspace's
        shape = () if rec.shape is None else rec.shape
        values = values[:0] if rec.shape is None else values.reshape(shape + values.shape[1:])
        values.flags.writeable = False
        return values


def model_link(domain: HsdsDomain, ln: records.Link) -> Link:
    """HSDS's link as the local engine's (a hard link's target by the mount's address)."""
    if ln.kind == records.HARD:
        return Link(ln.title, HARD, address=domain.address_of(ln.id))
    if ln.kind == records.SOFT:
        return Link(ln.title, SOFT, target=ln.h5path)
    return Link(ln.title, EXTERNAL, target=ln.h5path, filename=ln.h5domain)


def link_table(domain: HsdsDomain, found: Iterable[records.Link]) -> tuple[list[Link], dict[str, Link]]:
    """(the links in name order, by name): what a group keeps of its links."""
    links = sorted((model_link(domain, ln) for ln in found), key=lambda ln: ln.name)
    return links, {ln.name: ln for ln in links}


def attribute_handles(domain: HsdsDomain, owner_id: str, owner_path: str,
                      found: Iterable[records.Attribute]) -> tuple[HsdsAttribute, ...]:
    return tuple(HsdsAttribute(domain, owner_id, owner_path, a) for a in found)


def described(domain: HsdsDomain, obj_id: str, path: str) -> dict[str, Any]:
    """An object's record, and its attributes and a group's links when the one answer holds
    them whole (records -> what the objects keep: HsdsAttribute handles, link tables)."""
    details = None
    if obj_id.startswith("d-"):     # the allocated size: from the domain's scan, else the dataset's own
        scan = domain.scan()
        details = None if scan is None else scan.get(obj_id, {})
    found = domain.client.describe(obj_id, verbose=obj_id.startswith("d-") and details is None, details=details)
    out: dict[str, Any] = {"record": found.record}
    if found.attributes is not None:
        out["attributes"] = attribute_handles(domain, obj_id, path, found.attributes)
    if found.links is not None:
        out["links"] = link_table(domain, found.links)
    return out
