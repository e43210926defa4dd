"""HsdsDomain: one HSDS domain as an engine the mount's FUSE layer and `model/namespace.py` use as
they use a local file (`H5File`): the root group, objects by address, facts, attributes,
reads (edits: edits.py, writeback.py, creations.py).

An object's record, attributes and (a group's) links come in one request, `describe`; callers
asking for the same object at once share it. A group's listing has its children described in
the background, PREFETCH requests at a time (`prefetch`), so a walk's stat of each entry finds
it kept: a walk of N objects costs about N requests, made in parallel. A listing of the root
queues the whole tree at once, in the order a walk visits it (`prefetch_tree`).

Addresses: HSDS names objects by id ("g-...", "d-...", "t-..."); the mount keys its inodes by
integer addresses, so each id met gets the next small integer for the life of the engine (the
root first), and `get(address, path)` makes a handle from the id's kind with no request (FUSE
calls it on its event loop thread). Everything the service says is kept `refresh` seconds
(metadata.py, and the block cache of data in blocks.py), so another writer's change shows
within `refresh`; `forget(obj_id)` drops an object's entries at once.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Iterable

from ...errors import NotFound
from ...storage.hsds.client import HsdsClient
from ...storage.hsds.records import Domain
from ...storage.hsds.transport import HsdsError, TooLarge
from ..values import Ref
from .blocks import BLOCK_BYTES, BlockCache, DataBlocks
from .creations import Creations
from .dataset import HsdsDataset
from .metadata import Expiring
from .objects import MISSING, HsdsDatatype, HsdsGroup, HsdsObject, described

log = logging.getLogger(__name__)
KINDS: dict[str, type[HsdsObject]] = {"g-": HsdsGroup, "d-": HsdsDataset, "t-": HsdsDatatype}
MAX_WALK = 1_000_000     # objects a walk for reference paths visits at most (as H5File's walk)
DOMAIN = ""              # the metadata cache's key of what belongs to the domain, not to an object
PREFETCH = 16            # describe requests in flight at most for listings (and at most `connections`)
PREFETCH_QUEUED = 10_000     # objects waiting to be prefetched at most: past it a listing prefetches no more
TREE_JSON = 4 << 20      # bytes of the whole domain's links at most for prefetch_tree (~25,000 links)


class HsdsDomain:
    remote = None            # no byte source of a remote file: HSDS serves objects
    writable = False

    def __init__(self, client: HsdsClient, info: Domain, refresh: float = 5.0, cache_bytes: int = 256 << 20,
                 block_bytes: int = BLOCK_BYTES):
        if info.root is None:
            raise HsdsError(f"HSDS {info.name}: a folder, not a domain", errno.EISDIR)
        self.client = client
        self.name = info.name
        self.refresh = float(refresh)
        self.meta = Expiring(self.refresh)
        self.meta.put(DOMAIN, "domain", info)
        self.chunk_cache = BlockCache(cache_bytes, self.refresh)
        self.blocks = DataBlocks(client, self.chunk_cache, block_bytes)
        self.source = DomainSource(self)
        self._lock = threading.Lock()
        self._describing: dict[str, Future] = {}     # id -> the describe request under way
        self._prefetcher: ThreadPoolExecutor | None = None
        self._scan_lock = threading.Lock()
        self._queued = 0
        self._tree_at = -float("inf")            # when prefetch_tree last ran (monotonic)
        self._stopped = False
        self._ids: list[str] = []                # address - 1 -> id
        self._addresses: dict[str, int] = {}
        self.root_id = info.root
        self.root_address = self.address_of(info.root)
        self.creations = Creations(client, info.root)    # a read-write mount's new groups (edits.py)

    @classmethod
    def open(cls, domain: str, *, endpoint: str | None = None, username: str | None = None,
             password: str | None = None, password_file: str | None = None, refresh: float = 5.0,
             cache_bytes: int = 256 << 20, block_bytes: int = BLOCK_BYTES, **settings: Any) -> HsdsDomain:
        """The domain at path `domain` of the service the settings name (as h5pyd finds them:
        storage/hsds/settings.py; `settings`: HsdsSettings' other fields)."""
        client = HsdsClient(domain, endpoint=endpoint, username=username, password=password,
                            password_file=password_file, **settings)
        try:
            return cls(client, client.get_domain(), refresh, cache_bytes, block_bytes)
        except BaseException:
            client.close()
            raise

    def __enter__(self) -> HsdsDomain:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def stop(self) -> None:
        """No more retries, no more prefetching (an unmount is under way)."""
        self._stopped = True
        self.client.stop()

    def status(self) -> dict:
        """What `h5fs status` shows of the domain: the service's requests, bytes and errors."""
        return {"hsds": self.client.stats()}

    def close(self) -> None:
        self._stopped = True
        self.creations.close()
        with self._lock:
            pool, self._prefetcher = self._prefetcher, None
        if pool is not None:    # queued prefetches are dropped; those under way end with their request
            pool.shutdown(wait=True, cancel_futures=True)
        self.blocks.close()
        self.client.close()
        self.meta.clear()
        self.chunk_cache.clear()

    # -- objects -------------------------------------------------------------------------------
    def address_of(self, obj_id: str) -> int:
        """The mount's address of an HSDS id: the same for the life of the engine."""
        address = self._addresses.get(obj_id)
        if address is not None:
            return address
        with self._lock:
            address = self._addresses.get(obj_id)
            if address is None:
                self._ids.append(obj_id)
                address = self._addresses[obj_id] = len(self._ids)
            return address

    def id_of(self, address: int) -> str:
        if not 1 <= address <= len(self._ids):
            raise NotFound(f"HSDS {self.name}: no object has address {address}")
        return self._ids[address - 1]

    def get(self, address: int, path: str) -> HsdsObject:
        """The object at `address` (no request: its kind is its id's)."""
        obj_id = self.id_of(address)
        cls = KINDS.get(obj_id[:2])
        if cls is None:
            raise NotFound(f"{path}: HSDS id {obj_id!r} is neither a group, a dataset nor a datatype")
        return cls(self, obj_id, address, path)

    @property
    def root(self) -> HsdsGroup:
        return self.get(self.root_address, "/")

    # -- descriptions ----------------------------------------------------------------------------
    def describe(self, obj_id: str, path: str) -> dict[str, Any]:
        """The object's record, attributes and (a group's) links, as objects.described gives
        them, from one request, kept `refresh` seconds; a caller that comes while the request
        for the same object is under way waits for its answer rather than asking again. New
        groups touching it that wait to be sent go first (creations.py)."""
        self.creations.settle(obj_id)
        with self._lock:
            under_way = self._describing.get(obj_id)
            if under_way is None:
                mine: Future = Future()
                self._describing[obj_id] = mine
        if under_way is not None:
            return under_way.result()
        try:
            found = described(self, obj_id, path)
            for kind, value in found.items():
                self.meta.put(obj_id, kind, value)
            mine.set_result(found)
            return found
        except BaseException as e:
            mine.set_exception(e)
            raise
        finally:
            with self._lock:
                del self._describing[obj_id]

    def prefetch(self, objects: Iterable[tuple[int, str]]) -> None:
        """Describe in the background the objects (address, path) not kept yet: PREFETCH
        requests at a time, at most PREFETCH_QUEUED waiting."""
        todo = [(self.id_of(a), p) for a, p in objects]
        todo = [(i, p) for i, p in todo if not self.meta.has(i, "record")]
        if not todo or self._stopped:
            return
        with self._lock:
            room = PREFETCH_QUEUED - self._queued
            todo = todo[:max(0, room)]
            self._queued += len(todo)
            pool = self._pool()
        for n, (obj_id, path) in enumerate(todo):
            try:
                pool.submit(self._prefetch_one, obj_id, path)
            except RuntimeError:      # closed meanwhile
                with self._lock:
                    self._queued -= len(todo) - n
                return

    def _pool(self) -> ThreadPoolExecutor:
        """The prefetching threads (made at the first use; under `_lock`)."""
        if self._prefetcher is None:
            workers = max(1, min(PREFETCH, self.client.settings.connections))
            self._prefetcher = ThreadPoolExecutor(workers, thread_name_prefix="h5fs-hsds-describe")
        return self._prefetcher

    def prefetch_tree(self) -> None:
        """At a listing of the root, at most once per `refresh` seconds: every object of the
        domain described in the background, in the order `find`, `du`, `ls -R` and
        `getfattr -R` visit them (a directory's entries, then each subgroup's in name order),
        so the prefetch runs ahead of a walk rather than one group's entries at a time. The
        objects come from one request (tree_links: the service's links now), not made for a
        domain whose last scan counted more than PREFETCH_QUEUED datasets; past TREE_JSON bytes
        of links (a domain too big to walk often) nothing is done."""
        now = time.monotonic()
        with self._lock:
            if self._stopped or now - self._tree_at < self.refresh:
                return
            self._tree_at = now
            try:
                self._pool().submit(self._prefetch_tree)
            except RuntimeError:      # closed meanwhile
                pass

    def _prefetch_tree(self) -> None:
        scan = self.scan()     # the service's last count of datasets: a domain too big to crawl is not asked
        if scan is None or len(scan) > PREFETCH_QUEUED:
            return
        try:
            tree = self.client.tree_links(self.root_id, TREE_JSON)
        except TooLarge:
            return
        except Exception as e:  # noqa: BLE001 - the walk asks for what it needs itself
            log.debug("listing the domain's tree: %s", e)
            return
        order: list[tuple[int, str]] = []
        todo, seen = deque([(self.root_id, "")]), {self.root_id}
        while todo and len(order) < PREFETCH_QUEUED:
            gid, base = todo.popleft()
            subgroups = []
            for ln in sorted(tree.get(gid, ()), key=lambda ln: ln.title):
                if ln.id is None or ln.id in seen:
                    continue
                seen.add(ln.id)
                path = f"{base}/{ln.title}"
                order.append((self.address_of(ln.id), path))
                if ln.id in tree:
                    subgroups.append((ln.id, path))
            todo.extendleft(reversed(subgroups))     # depth first: this directory's subgroups next
        self.prefetch(order)

    def _prefetch_one(self, obj_id: str, path: str) -> None:
        with self._lock:
            self._queued -= 1
        if self._stopped or self.meta.has(obj_id, "record"):
            return
        try:
            self.describe(obj_id, path)
        except Exception as e:  # whoever needs the object asks again and meets the error
            log.debug("prefetching %s (%s): %s", path, obj_id, e)

    def resolve(self, path: str) -> HsdsObject:
        """The object at an absolute HDF5 path, by hard links (tests, tools)."""
        obj: HsdsObject = self.root
        walked = ""
        for part in [p for p in path.split("/") if p]:
            walked += "/" + part
            link = obj.link(part) if isinstance(obj, HsdsGroup) else None
            if link is None or link.address is None:
                raise NotFound(f"HSDS {self.name}: no object at {walked}")
            obj = self.get(link.address, walked)
        return obj

    def forget(self, obj_id: str) -> None:
        """Drop what is kept of an object (its record, links, attributes, data blocks)."""
        self.meta.forget(obj_id)
        self.chunk_cache.forget(obj_id)
        self.meta.forget(DOMAIN)

    def info(self) -> Domain:
        """The domain's record (kept `refresh` seconds)."""
        return self.meta.get(DOMAIN, "domain", self.client.get_domain)

    def scan(self) -> dict[str, dict] | None:
        """Dataset id -> what HSDS's last scan of the domain found of it (allocated bytes, last
        write), all in one request kept `refresh` seconds: the same the service reads for each
        dataset asked with verbose=1, where each such request costs it a read of the scan's
        record. None when that answer is too large (then each dataset is asked verbose)."""
        found = self.meta.peek(DOMAIN, "scan", MISSING)
        if found is not MISSING:
            return found
        with self._scan_lock:       # the prefetch's workers ask at once: one request
            found = self.meta.peek(DOMAIN, "scan", MISSING)
            if found is MISSING:
                try:
                    info = self.client.scan_info() or {}
                    found = info.get("datasets") if isinstance(info.get("datasets"), dict) else {}
                except TooLarge:
                    found = None
                self.meta.put(DOMAIN, "scan", found)
            return found

    # -- references --------------------------------------------------------------------------
    def path_of(self, address: int | None) -> str | None:
        """The shortest path by hard links to the object at `address`, as H5File.path_of (None:
        no walk from the root reaches it)."""
        if address is None:
            return None
        return self.meta.get(DOMAIN, "reference paths", self._walk).get(address)

    def _walk(self) -> dict[int, str]:
        """Breadth-first over hard links, so each address gets its shortest path."""
        paths = {self.root_address: "/"}
        queue = deque([self.root])
        while queue and len(paths) < MAX_WALK:
            group = queue.popleft()
            for link in group.links(prefetch=False):
                if link.address is None or link.address in paths:
                    continue
                path = f"{group.path.rstrip('/')}/{link.name}"
                paths[link.address] = path
                obj = self.get(link.address, path)
                if isinstance(obj, HsdsGroup):
                    queue.append(obj)
        return paths

    def ref_text(self, ref: Ref | None) -> str:
        """A reference's text, as model/varlen_views.ref_text words it."""
        if ref is None:
            return ""
        return self.path_of(ref.address) or f"<object at {ref.address}>"


class DomainSource:
    """What `h5fs status` and stat ask of the source of the mount."""

    def __init__(self, domain: HsdsDomain):
        self.domain = domain

    def stats(self) -> dict[str, Any]:
        return self.domain.client.stats()

    def owner_and_times(self) -> tuple[int, int, int, int]:
        """(uid, gid, mtime_ns, ctime_ns): the mounting process's ids, the domain's times."""
        info = self.domain.info()
        return os.getuid(), os.getgid(), int(info.last_modified * 1e9), int(info.created * 1e9)

    def end(self) -> int:
        return 0
