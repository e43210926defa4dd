"""HsdsEditor: the namespace and attribute edits of an HSDS domain, with the method surface the
FUSE layer calls on the local engine's TreeEditor (model/tree_edit.py): the same arguments
(objects from `HsdsDomain.get`, names as str), returns and refusals (NamespaceError with its
errno). Each edit is one or a few REST calls; then the domain forgets what it kept of every
object whose links, attributes or record changed, so the mount's next look asks the service.
In a mount (an editor with a writeback) `mkdir`, and `setfattr` on a group made so, wait a
moment and go in bulk instead (creations.py), shown from the domain's cache meanwhile; every
other edit sends them first.

What HSDS does not keep, and what follows from it:
- No link counts. Removing an object's link removes the object too (the service would keep it
  forever, unreachable), unless this editor made another hard link to it (`ln`): then only
  the link goes. A second link made elsewhere (h5pyd, another mount) is not known: it is left
  leading to a deleted object (ENOENT).
- No rename: `rename` puts the new link, then deletes the old one (not atomic; see there).
- A POST that makes an object linked under a name already taken answers 409 after making the
  object: the empty object is left unreachable (the FUSE layer's own name check comes first,
  so only a concurrent writer meets this).
- No settable times: `touch` does nothing; the service stamps its own.
- An object whose last link goes while it is open stays until its last close (`orphans`,
  `free_orphan`), as the local engine keeps one; a crash in between leaves it unreachable.
"""

from __future__ import annotations

import errno
import logging
import time
from collections import deque
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ...errors import CannotWrite, NotFound
from ...format.messages.link import HARD, Link
from ...storage.hsds import records
from ...storage.hsds.client import attribute_json
from ...storage.hsds.transport import HsdsError
from ..filter_spec import DEFLATE, FLETCHER32, LZF, NAMES, SHUFFLE, Filter, parse_filters
from ..tree_edit import NamespaceError
from . import attribute_text, replacement
from .domain import DOMAIN
from .objects import HsdsAttribute, HsdsGroup, HsdsObject

if TYPE_CHECKING:
    from .dataset import HsdsDataset
    from .domain import HsdsDomain
    from .writeback import HsdsWriteback

log = logging.getLogger(__name__)

# the filters sent to HSDS, by the class names it takes (it refuses others with 400)
FILTER_CLASSES = {DEFLATE: "H5Z_FILTER_DEFLATE", SHUFFLE: "H5Z_FILTER_SHUFFLE", FLETCHER32: "H5Z_FILTER_FLETCHER32",
                  LZF: "H5Z_FILTER_LZF"}


class HsdsEditor:
    def __init__(self, domain: HsdsDomain, writeback: HsdsWriteback | None,
                 in_use: Callable[[int], bool] = lambda address: False):
        self.domain, self.wb, self.in_use = domain, writeback, in_use
        self.client = domain.client
        self.orphans: dict[int, str] = {}     # address -> path: unlinked while open, deleted at the last close
        self.extra_links: dict[str, int] = {}     # id -> hard links this editor added beyond the first

    # -- helpers ---------------------------------------------------------------------------------
    def _fresh_link(self, group: HsdsObject, name: str) -> records.Link | None:
        """The link as the service holds it now (the domain's copy may be `refresh` old)."""
        return _unless_missing(self.client.get_link, group.id, name)

    def _existing(self, group: HsdsObject, name: str) -> records.Link:
        link = self._fresh_link(group, name)
        if link is None:
            raise NamespaceError(errno.ENOENT, f"{_join(group, name)}: no such link")
        return link

    def _changed(self, *ids: str) -> None:
        for obj_id in ids:
            self.domain.forget(obj_id)
        if self.wb is not None:
            self.wb.edited()

    def _link_count(self, group_id: str) -> int | None:
        """A group's links now (None: the group is gone, a link to it dangles)."""
        group = _unless_missing(self.client.get_group, group_id)
        return None if group is None else group.link_count

    def _drop(self, obj_id: str, path: str) -> int:
        """One hard link to the object fewer (already deleted): the links left that this
        editor knows of; the object deleted at none (kept while open: an orphan)."""
        extra = self.extra_links.get(obj_id, 0)
        if extra:
            if extra == 1:
                del self.extra_links[obj_id]
            else:
                self.extra_links[obj_id] = extra - 1
            return extra
        address = self.domain.address_of(obj_id)
        if self.in_use(address):
            self.orphans[address] = path
            return 0
        self._delete(obj_id, path)
        return 0

    def _delete(self, obj_id: str, path: str) -> None:
        if self.wb is not None:
            self.wb.discard(self.domain.address_of(obj_id))
        delete = {"g-": self.client.delete_group, "d-": self.client.delete_dataset,
                  "t-": self.client.delete_datatype}[obj_id[:2]]
        try:
            delete(obj_id)
        except HsdsError as e:
            if e.errno != errno.ENOENT:     # gone already (another writer): what was wanted
                raise
            log.debug("%s (%s) was deleted already", path, obj_id)
        self._changed(obj_id)

    def _settle(self) -> None:
        """New groups waiting to be sent go first: this edit may concern them, and edits
        reach the service in the order they were made."""
        if self.domain.creations.pending:
            self.domain.creations.send()

    # -- groups ------------------------------------------------------------------------------
    def mkdir(self, parent: HsdsObject, name: str) -> int:
        """A new empty group `name` in `parent`; its address. With a writeback (a mount) it
        waits a moment to be sent with others (creations.py), checked against the mount's
        view of `parent` and shown from the domain's cache meanwhile; else one POST."""
        if self.wb is None:
            try:
                group = self.client.create_group(parent.id, name)
            except HsdsError as e:
                raise _taken(e, parent, name) from None
            self._changed(parent.id)
            return self.domain.address_of(group.id)
        creations = self.domain.creations
        if creations.taken(parent.id, name) or (isinstance(parent, HsdsGroup) and parent.link(name) is not None):
            raise NamespaceError(errno.EEXIST, f"{_join(parent, name)}: the name is taken")
        obj_id = creations.group(parent.id, name)
        address = self.domain.address_of(obj_id)
        meta, now = self.domain.meta, time.time()
        meta.put(obj_id, "record", records.Group(obj_id, now, now, 0, 0))
        meta.put(obj_id, "links", ([], {}))
        meta.put(obj_id, "attributes", ())
        link = Link(name, HARD, address=address)
        meta.patch(parent.id, "links", lambda table: _with_link(table, link))
        meta.patch(parent.id, "record", lambda rec: replace(rec, link_count=rec.link_count + 1))
        meta.discard(parent.id, ("link", name))
        meta.discard(DOMAIN, "reference paths")
        self.wb.edited()
        return address

    def rmdir(self, parent: HsdsObject, name: str) -> int:
        """Remove the empty group `name`: its link, then the group (as `_drop` says); the hard
        links left that this editor knows of (0: deleted)."""
        self._settle()
        path = _join(parent, name)
        link = self._existing(parent, name)
        if link.kind != records.HARD or not link.id.startswith("g-"):
            raise NamespaceError(errno.ENOTDIR, f"{path}: not a group")
        count = self._link_count(link.id)
        if count:
            raise NamespaceError(errno.ENOTEMPTY, f"{path}: not empty")
        self.client.delete_link(parent.id, name)
        self._changed(parent.id)
        return 0 if count is None else self._drop(link.id, path)

    # -- links ---------------------------------------------------------------------------------
    def unlink(self, parent: HsdsObject, name: str) -> int | None:
        """Remove the link `name`; for a hard link (to a dataset or datatype) its object too
        unless this editor knows another link to it: the links left (0: deleted). None for a
        soft or external link."""
        self._settle()
        path = _join(parent, name)
        link = self._existing(parent, name)
        if link.kind == records.HARD and link.id.startswith("g-"):
            raise NamespaceError(errno.EISDIR, f"{path}: a group (rmdir removes it)")
        self.client.delete_link(parent.id, name)
        self._changed(parent.id)
        return None if link.kind != records.HARD else self._drop(link.id, path)

    def hard_link(self, address: int, parent: HsdsObject, name: str) -> None:
        self._settle()
        target = self.domain.id_of(address)
        try:
            self.client.link_hard(parent.id, name, target)
        except HsdsError as e:
            raise _taken(e, parent, name) from None
        self.extra_links[target] = self.extra_links.get(target, 0) + 1
        self._changed(parent.id, target)

    def soft_link(self, parent: HsdsObject, name: str, target: str) -> None:
        self._settle()
        try:
            self.client.link_soft(parent.id, name, target)
        except HsdsError as e:
            raise _taken(e, parent, name) from None
        self._changed(parent.id)

    def external_link(self, parent: HsdsObject, name: str, filename: str, path: str) -> None:
        self._settle()
        try:
            self.client.link_external(parent.id, name, filename, path)
        except HsdsError as e:
            raise _taken(e, parent, name) from None
        self._changed(parent.id)

    def _put_link(self, group: HsdsObject, name: str, link: records.Link) -> None:
        if link.kind == records.HARD:
            self.client.link_hard(group.id, name, link.id)
        elif link.kind == records.SOFT:
            self.client.link_soft(group.id, name, link.h5path)
        else:
            self.client.link_external(group.id, name, link.h5domain, link.h5path)

    def rename(self, src: HsdsObject, name: str, dst: HsdsObject, new: str) -> int | None:
        """Move the link `name` of `src` to `new` in `dst`, replacing a link of that name as
        rename(2) does (a group only by an empty group: ENOTEMPTY; a group never into its own
        subtree: EINVAL); the links left to the object a replaced hard link named (0: deleted),
        else None.

        HSDS has no rename: the replaced link is deleted, the new one put, the old one deleted,
        then the replaced object: NOT atomic. A failure between steps leaves both names (the
        object twice linked), or, if putting the new link fails, the replaced link put back."""
        self._settle()
        link = self._existing(src, name)
        if src.id == dst.id and name == new:
            return None
        moved_group = link.kind == records.HARD and link.id.startswith("g-")
        if moved_group and src.id != dst.id and self._inside(link.id, dst.id):
            raise NamespaceError(errno.EINVAL, f"{_join(src, name)}: cannot move a group into itself")
        old = self._fresh_link(dst, new)
        if old is not None and old.kind == records.HARD and old.id == link.id:
            return None     # two names of one object: rename(2) does nothing
        if old is not None and old.kind == records.HARD and old.id.startswith("g-") and self._link_count(old.id):
            raise NamespaceError(errno.ENOTEMPTY, f"{_join(dst, new)}: not empty")
        if old is not None:
            self.client.delete_link(dst.id, new)
        try:
            self._put_link(dst, new, link)
        except HsdsError:
            if old is not None:
                self._put_link(dst, new, old)
            raise
        finally:
            self._changed(dst.id)
        self.client.delete_link(src.id, name)
        self._changed(src.id, *([link.id] if link.id else []))
        if old is None or old.kind != records.HARD:
            return None
        return self._drop(old.id, _join(dst, new))

    def _inside(self, moved: str, group: str) -> bool:
        """Whether group `group` lies in the subtree of group `moved` (or is it): a walk down
        its hard links (the domain's listings, one request per group not kept)."""
        todo, seen = deque([(moved, "/")]), {moved}
        while todo:
            obj_id, path = todo.popleft()
            if obj_id == group:
                return True
            obj = self.domain.get(self.domain.address_of(obj_id), path)
            if not isinstance(obj, HsdsGroup):
                continue
            for ln in obj.links(prefetch=False):
                if ln.address is not None:
                    child = self.domain.id_of(ln.address)
                    if child.startswith("g-") and child not in seen:
                        seen.add(child)
                        todo.append((child, f"{path.rstrip('/')}/{ln.name}"))
        return False

    def free_orphan(self, address: int) -> bool:
        """Delete an object whose links all went while it was open, now that it is closed;
        whether it was one."""
        path = self.orphans.get(address)
        if path is None or self.in_use(address):
            return False
        self._delete(self.domain.id_of(address), path)
        self.orphans.pop(address, None)
        return True

    # -- attributes ----------------------------------------------------------------------------
    def _attribute(self, obj: HsdsObject, name: str) -> records.Attribute | None:
        return _unless_missing(self.client.get_attribute, obj.id, name)

    def set_attribute(self, obj: HsdsObject, name: str, text: bytes) -> None:
        """`setfattr`: an existing attribute keeps its type and shape, `text` parsed as the
        mount shows values; a new one is a variable-length UTF-8 string (attribute_text.py).
        On a new group still waiting to be sent it waits with it; else a name the object's
        kept attributes lack is tried as new (one PUT), then as an existing one."""
        if self.wb is not None and self._set_waiting(obj, name, text):
            return
        self.domain.creations.settle(obj.id)
        kept = self.domain.meta.peek(obj.id, "attributes", None)
        if kept is not None and all(a.name != name for a in kept):
            value = attribute_text.new_text(name, text)
            try:
                self.client.put_attribute(obj.id, name, value)
                self._changed(obj.id)
                return
            except HsdsError as e:
                if e.errno != errno.EEXIST:     # made meanwhile by another writer: as existing
                    raise
        attr = self._attribute(obj, name)
        if attr is None:
            self.client.put_attribute(obj.id, name, attribute_text.new_text(name, text))
        else:
            value, dtype, type_json = attribute_text.revalued(attr, text)
            self.client.put_attribute(obj.id, name, value, dtype, replace=True, type_json=type_json)
        self._changed(obj.id)

    def _set_waiting(self, obj: HsdsObject, name: str, text: bytes) -> bool:
        """The attribute of a group waiting to be sent, set with it and in the cache (False: the
        group is not waiting, or its cache expired, or the value is not kept whole)."""
        creations, meta = self.domain.creations, self.domain.meta
        kept = meta.peek(obj.id, "attributes", None)
        if not creations.holds(obj.id) or kept is None:
            return False
        old = next((a for a in kept if a.name == name), None)
        if old is None:
            body = attribute_json(attribute_text.new_text(name, text))
        else:
            value, dtype, type_json = attribute_text.revalued(old.record, text)
            body = attribute_json(value, dtype, type_json)
        stored = self.client.stored_attribute(obj.id, {**body, "name": name, "created": time.time(),
                                                       "shape": _shape_doc(body["shape"])})
        if stored.deferred or not creations.attribute(obj.id, name, body):
            return False
        handle = HsdsAttribute(self.domain, obj.id, obj.path, stored)
        meta.patch(obj.id, "attributes",
                   lambda attrs: tuple(sorted([a for a in attrs if a.name != name] + [handle], key=lambda a: a.name)))
        meta.patch(obj.id, "record", lambda rec: replace(rec, attribute_count=rec.attribute_count + (old is None)))
        return True

    def create_attribute(self, obj: HsdsObject, name: str, dtype: Any, text: bytes) -> None:
        """`h5fs attr --dtype`: attribute `name` made anew (any of that name replaced)."""
        self._settle()
        value, stored = attribute_text.typed(name, dtype, text)
        self.client.put_attribute(obj.id, name, value, stored, replace=True)
        self._changed(obj.id)

    def remove_attribute(self, obj: HsdsObject, name: str) -> None:
        """NotFound when there is none (HSDS answers a DELETE of a missing one with 200)."""
        self._settle()
        if self._attribute(obj, name) is None:
            raise NotFound(f"{obj.path}: no attribute {name!r}")
        self.client.delete_attribute(obj.id, name)
        self._changed(obj.id)

    # -- datasets ----------------------------------------------------------------------------
    def create_dataset(self, parent: HsdsObject, name: str, dtype: Any, shape: tuple[int, ...], *,
                       maxshape: Sequence[int | None] | None = None, chunks: Sequence[int] | None = None,
                       filters: str | Sequence[Filter] = (), layout: str | None = None, fill: Any = None) -> int:
        """A new dataset `name` in `parent` (one POST); its address. HSDS chunks every dataset
        as it sees fit where `chunks` is not given; `layout` contiguous or compact is taken as
        such a request, sparse and virtual are refused."""
        if layout not in (None, "chunked", "contiguous", "compact"):
            raise CannotWrite(f"{_join(parent, name)}: HSDS datasets have no {layout} layout")
        self._settle()
        wanted = parse_filters(filters) if isinstance(filters, str) else tuple(filters)
        stored = attribute_text.hsds_dtype(dtype)
        fill_value = None
        if fill is not None:   # bool and complex: the same bytes as HSDS's enum and compound
            fill_value = np.asarray(fill, np.dtype(dtype)).reshape(1).view(stored)[0]
        try:
            made = self.client.create_dataset(stored, tuple(shape), maxshape, chunks,
                                              [_filter_json(f, parent, name) for f in
                                               sorted(wanted, key=lambda f: f.stage)],
                                              fill_value, parent.id, name)
        except HsdsError as e:
            if e.status == 400 and wanted:
                labels = ",".join(NAMES.get(f.id, str(f.id)).split(";")[0] for f in wanted)
                raise CannotWrite(f"{_join(parent, name)}: HSDS refuses the filters {labels}: {e}") from None
            raise _taken(e, parent, name) from None
        self._changed(parent.id)
        return self.domain.address_of(made.id)

    # -- data replaced (cp y.npy D.npy): model/hsds/replacement.py ------------------------------
    def create_unlinked_dataset(self, like: HsdsDataset, dtype: Any, shape: tuple[int, ...], **storage: Any) -> int:
        """The anonymous dataset receiving an array that replaces `like`'s data (`storage`: the
        chunks and filters a copied-in array would get; HSDS chunks it, D keeps its own)."""
        self._settle()
        return replacement.create_source(self.domain, like, np.dtype(dtype), tuple(shape))

    def replace_data(self, ds: HsdsDataset, source: int, keep_storage: bool = False,
                     unlink: tuple[HsdsObject, str] | None = None) -> int | None:
        """The array in `source` becomes `ds`'s data, `ds` keeping its id, links and attributes;
        `unlink`: a link removed too (`mv T D.npy`), whose `unlink` answer is returned."""
        self._settle()
        replacement.copy_into(self.domain, self.wb, ds, source)
        return None if unlink is None else self.unlink(*unlink)

    def drop_unlinked(self, address: int, path: str) -> None:
        """Delete an anonymous dataset whose array never became its dataset's data."""
        replacement.drop(self.domain, self.wb, address)

    # -- times and the local engine's bookkeeping: nothing to do -------------------------------------
    def touch(self, obj: HsdsObject, mtime_ns: int | None = None) -> None:
        """HSDS keeps no settable time: nothing changes."""

    def land(self, redo: bool = False) -> None:
        """New groups waiting to be sent go now (creations.py); no other edit waits."""
        self._settle()


def _with_link(table: tuple[list[Link], dict[str, Link]], link: Link) -> tuple[list[Link], dict[str, Link]]:
    """A group's kept link table with a new link, in name order."""
    links, by_name = table
    return sorted([*links, link], key=lambda ln: ln.name), {**by_name, link.name: link}


def _shape_doc(shape: Any) -> dict[str, Any]:
    """The shape JSON HSDS answers for the shape a PUT gives (a list, H5S_SCALAR, H5S_NULL)."""
    if isinstance(shape, list):
        return {"class": "H5S_SIMPLE", "dims": shape}
    return {"class": shape}


def _unless_missing(ask: Callable[..., Any], *args: Any) -> Any:
    """`ask(*args)`, None when the service has no such object (ENOENT)."""
    try:
        return ask(*args)
    except HsdsError as e:
        if e.errno == errno.ENOENT:
            return None
        raise


def _join(group: HsdsObject, name: str) -> str:
    return f"{group.path.rstrip('/')}/{name}"


def _taken(e: HsdsError, group: HsdsObject, name: str) -> Exception:
    """409 on a new link: the name is taken (EEXIST, as the local engine refuses it)."""
    if e.status == 409:
        return NamespaceError(errno.EEXIST, f"{_join(group, name)}: the name is taken")
    return e


def _filter_json(f: Filter, group: HsdsObject, name: str) -> dict:
    cls = FILTER_CLASSES.get(f.id)
    if cls is None:
        label = NAMES.get(f.id, str(f.id)).split(";")[0]
        raise CannotWrite(f"{_join(group, name)}: HSDS takes gzip, shuffle and fletcher32 here, not {label}")
    out: dict[str, Any] = {"class": cls, "id": f.id}
    if f.id == DEFLATE:
        out["level"] = f.options[0] if f.options else 4
    return out
