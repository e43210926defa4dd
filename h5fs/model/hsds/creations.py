"""Creations: groups made through a read-write mount (`mkdir`) and the attributes set on them
while the service does not know them yet, sent in bulk, as h5pyd sends what it makes at its flush.

Why: one POST of a linked group costs the service about 4 ms (it reads the domain again, makes the
group, then links it) and an attribute PUT 1 ms, so `mkdir` + `setxattr` one request at a time
takes 5 ms a pair at best; in bulk (one POST of up to MAX_POST groups with ids made here, one PUT
of their links, one of their attributes) about 1 ms a group.

When they go: SEND_DELAY s after the first one waits (a timer thread), at once past MAX_BATCH
groups, at the writeback's flush (fsync, unmount: before the durability flush), and before
anything asks the service about an id they touch (`settle`: a new group, the group it is linked
in) or makes another edit (the editor settles first, so edits reach the service in order).
Meanwhile the mount shows them from the domain's metadata cache, which the editor primes.

Known only when they go: a name another writer linked meanwhile (the mount checked its own view,
up to `refresh` old): the link PUT answers 409, that group is deleted and the loss logged (as a
write to a dataset another writer deleted). A failed send keeps its batch (steps done are not
repeated; links and attributes PUT again are no error) and raises; the next send retries.
"""

from __future__ import annotations

import errno
import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...storage.hsds.records import new_id
from ...storage.hsds.transport import HsdsError

if TYPE_CHECKING:
    from ...storage.hsds.client import HsdsClient

log = logging.getLogger(__name__)
SEND_DELAY = 0.1      # seconds a creation waits for others to go with it
MAX_BATCH = 2000      # groups waiting at most: past it the creator sends them
MAX_POST = 300        # groups per POST (h5pyd's MAX_OBJECTS_PER_REQUEST)


@dataclass
class NewGroup:
    parent: str
    name: str
    made: bool = False       # the POST is done
    linked: bool = False     # its link too


class Creations:
    def __init__(self, client: HsdsClient, root: str, delay: float = SEND_DELAY):
        self.client, self.root, self.delay = client, root, delay
        self._lock = threading.Lock()         # the state below
        self._send_lock = threading.Lock()    # one send at a time (a settle waits for the one under way)
        self._groups: dict[str, NewGroup] = {}          # waiting, not being sent
        self._attrs: dict[str, dict[str, dict]] = {}    # object id -> name -> attribute JSON
        self._touched: set[str] = set()       # ids whose service state lacks something here
        self._names: set[tuple[str, str]] = set()       # (parent id, name) of every new link not sent
        self._timer: threading.Timer | None = None
        self._closed = False

    @property
    def pending(self) -> bool:
        return bool(self._touched)

    def group(self, parent: str, name: str) -> str:
        """A new group to link as `name` in `parent`: its id (nothing sent yet)."""
        obj_id = new_id("g-", self.root)
        with self._lock:
            self._groups[obj_id] = NewGroup(parent, name)
            self._touched.update((obj_id, parent))
            self._names.add((parent, name))
            full = len(self._groups) >= MAX_BATCH
            if self._timer is None and not self._closed:
                self._timer = threading.Timer(self.delay, self._background)
                self._timer.daemon = True
                self._timer.start()
        if full:
            self.send()
        return obj_id

    def holds(self, obj_id: str) -> bool:
        """Whether `obj_id` is a group waiting (not being sent): attributes set on it may wait too."""
        return obj_id in self._groups

    def taken(self, parent: str, name: str) -> bool:
        """Whether a waiting or sending group takes `name` in `parent`."""
        return (parent, name) in self._names

    def attribute(self, obj_id: str, name: str, body: dict) -> bool:
        """Set attribute `name` (HSDS's JSON) of a waiting group; False: it is not one (any
        more), the caller settles and sends the attribute itself."""
        with self._lock:
            if obj_id not in self._groups:
                return False
            self._attrs.setdefault(obj_id, {})[name] = body
            return True

    def settle(self, obj_id: str) -> None:
        """Send what waits if it touches `obj_id` (before the service is asked about it)."""
        if obj_id in self._touched:
            self.send()

    def send(self) -> None:
        """Everything waiting into the service; a failure raises with the batch kept."""
        with self._send_lock:
            with self._lock:
                groups, attrs = self._groups, self._attrs
                self._groups, self._attrs = {}, {}
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
            if not groups and not attrs:
                return
            try:
                self._send(groups, attrs)
            except BaseException:
                with self._lock:     # kept, under whatever came meanwhile
                    self._groups = {**groups, **self._groups}
                    for obj_id, found in attrs.items():
                        self._attrs[obj_id] = {**found, **self._attrs.get(obj_id, {})}
                raise
            finally:
                with self._lock:
                    self._touched = {i for i in self._groups} | {g.parent for g in self._groups.values()} | \
                        set(self._attrs)
                    self._names = {(g.parent, g.name) for g in self._groups.values()}

    def _send(self, groups: dict[str, NewGroup], attrs: dict[str, dict[str, dict]]) -> None:
        fresh = [i for i, g in groups.items() if not g.made]
        for k in range(0, len(fresh), MAX_POST):
            part = fresh[k:k + MAX_POST]
            self.client.create_groups(part)
            for obj_id in part:
                groups[obj_id].made = True
        links: dict[str, dict[str, str]] = {}
        for obj_id, g in groups.items():
            if not g.linked:
                links.setdefault(g.parent, {})[g.name] = obj_id
        if links:
            try:
                self.client.put_links(self.root, links)
            except HsdsError as e:
                if e.errno != errno.EEXIST:
                    raise
                self._link_one_by_one(groups, attrs)
            for g in groups.values():
                g.linked = True
        if attrs:       # a lost group's went with it
            self.client.put_attributes(self.root, attrs)

    def _link_one_by_one(self, groups: dict[str, NewGroup], attrs: dict[str, dict[str, dict]]) -> None:
        """After a 409 of the bulk PUT: each link alone; a group whose name another writer took
        is deleted (nothing else can reach it) with its attributes, the loss logged."""
        for obj_id, g in list(groups.items()):
            if g.linked:
                continue
            try:
                self.client.link_hard(g.parent, g.name, obj_id)
            except HsdsError as e:
                if e.errno != errno.EEXIST:
                    raise
                log.error("HSDS %s: group %r made here is lost: another writer linked that name in group %s "
                          "before it was sent", self.client.domain, g.name, g.parent)
                self.client.delete_group(obj_id)
                del groups[obj_id]
                attrs.pop(obj_id, None)
                continue
            g.linked = True

    def _background(self) -> None:
        with self._lock:
            self._timer = None
        try:
            self.send()
        except Exception as e:  # noqa: BLE001 - kept: the next send (settle, fsync, unmount) raises it
            log.error("HSDS %s: new groups not sent yet, kept for a retry: %s", self.client.domain, e)

    def close(self) -> None:
        """No more timers; what still waits (the writeback's close failed to send it) is lost."""
        with self._lock:
            if self._groups:
                log.error("HSDS %s: %d new groups never reached the service", self.client.domain, len(self._groups))
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
