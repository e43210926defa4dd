"""An open HDF5 file: superblock, block reader, the metadata and chunk caches, shared messages.

Everything decoded from the file's metadata lives in one MetadataCache (`meta`) under the address
it was read from. An object header is kept with everything the model derives from it (its class,
decoded messages, link and attribute tables, a dataset's source, VDS plans...) in one
ObjectState (kind STATE). `invalidate(address)` forgets an object's state, marks it invalid for
the handles holding it, drops its dataset's cached chunks and bumps the address's generation;
`invalidate_range` forgets whatever was decoded from a freed extent (a writer that frees an
object header also invalidates the object's address). Values derived from several objects are
not tied to one of them: the table of paths that references are shown as lives at FILE_WIDE and
goes with any invalidation; a virtual dataset's plan and a message shared from another header
follow their own object only (datasets that are VDS sources, committed datatypes: a writer that
changes one invalidates what maps or shares it).
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
from collections import deque
from functools import partial
from typing import Any, Callable, Hashable

from ..errors import FormatError, H5fsError, NotFound, ReadOnly
from ..format import object_header, superblock
from ..format.codec import Reader
from ..format.messages import shared, sohm_table
from ..format.object_header import RawMessage
from ..storage.blockio import BlockReader, open_regular
from ..storage.byte_source import ByteSource, LocalSource, is_url
from ..storage.chunk_cache import ChunkCache
from ..storage.fractal_heap.reader import FractalHeap
from ..storage.pending_links import Op, PendingLinks, described
from ..storage.pending_objects import NEW, FreshOp
from ..storage.journal import Journal, Stale, journal_path, overlay as journal_overlay
from ..storage.page_overlay import PageOverlay
from ..storage.locking import take_lock
from ..storage.metadata_cache import MetadataCache
from ..storage.object_header import reader as header_reader
from ..storage import superblock as superblock_reader
from ..storage.global_heap import GlobalHeapReader
from ..storage.sohm_table.reader import read_table
from ..storage.remote import RemoteOptions, open_remote
from ..storage.remote.siblings import Siblings
from ..storage.transaction import Store
from ..storage.file_writer import open_recorder
from . import messages as M
from .dataset import Dataset
from .group import Group
from .cache_size import ENTRY, approx_size
from .objects import H5Object, NamedDatatype, ObjectState
from .safety_net import UNEXPECTED, internal_error
from .virtual_files import POOL

log = logging.getLogger("h5fs")

STATE, CLASS = "object", "object class"
VALUE = 50      # bytes a value kept in an object's state costs beyond its own (its dict slot)
FILE_WIDE = 0   # the superblock's address: values derived from the whole file are kept there
MAX_WALK = 1_000_000   # objects visited to turn reference addresses into paths


def _journal_overlay(path: str, fd: int) -> tuple[PageOverlay | None, list[bytes]]:
    """For a read-only open: the updates and deferred edits a crash left in the journal,
    read through rather than written (a read-write open writes them); none without a journal,
    or with one that belongs to another state of the file or that cannot be read (each logged)."""
    try:
        found, ops = journal_overlay(journal_path(path), fd, lambda: superblock_reader.recorded_eoa(fd))
    except Stale as e:
        log.warning("%s: the journal beside it was not read: %s", path, e)
        return None, []
    except OSError as e:
        log.warning("%s: the journal beside it cannot be read (%s): the file is read as it is", path, e.strerror)
        return None, []
    if found is not None or ops:
        log.warning("%s: %d metadata updates and %s a crash interrupted are read from the journal "
                    "(a read-write open writes them into the file)", path, found.updates if found else 0,
                    described(ops) or "no deferred edits")
    return found, ops


def _with_new_groups(overlay: PageOverlay | None, ops: list[bytes], fd: int, base: int) -> PageOverlay | None:
    """`overlay` with the headers of the new groups among `ops` laid over the file where the
    mount made them (storage/pending_objects.py), as a read-write open will land them."""
    for op in ops:
        if op[:1] == bytes([NEW]):
            new = FreshOp.decode(op)
            overlay = overlay if overlay is not None else PageOverlay(fd)
            overlay.put(base + new.address, new.data)
    return overlay


def _land_redo(f: "H5File", journal: Journal) -> None:
    """Land the edits a crash left deferred in the journal (its updates are in the file
    already). Edits that cannot land (a damaged file) are given up, loudly: what landed of them
    is settled, and the file is whole without the rest."""
    redo = journal.redo
    try:
        for op in redo:   # a new group's space is the allocator's again: it lands anywhere
            f.store.pending.apply(Op.decode(op, f.sizes), kept=False)
        f.land_links(redo=True)
    except H5fsError as exc:
        f.store.pending.clear()
        log.error("%s: acknowledged edits a crash left in the journal (%s) cannot be made (%s): given up",
                  f.path, described(redo), exc)
    else:
        log.warning("%s: landed %s a crash had left in the journal", f.path, described(redo))
    f.store.group_commit()


class H5File:
    # seconds the mount may trust what it was told (None: always; nothing changes a file under
    # the mount): an engine other writers change (model/hsds) gives its refresh time
    refresh: float | None = None

    def __init__(self, path: str, source: ByteSource, sb: superblock.Superblock, overlay: PageOverlay | None = None):
        """`source`: the file's bytes (owned: closed with the file); `overlay`: a read-only
        open's view of the updates a crash left in the journal."""
        self.path = path
        self.source = source
        self.superblock = sb
        self.sizes = sb.sizes
        self.meta = MetadataCache()
        self.reader = BlockReader(source, sb.location, sb.sizes, self.meta,
                                  *((overlay.pread, overlay.end) if overlay else ()))
        self.root_address = sb.root_header_address
        self.root_entry = sb.root_entry
        self.chunk_cache = ChunkCache()
        self.global_heap = GlobalHeapReader(self.reader)
        self._generations: dict[int, int] = {}   # address -> times it was invalidated
        self._epoch = 0                           # invalidations so far, of any address
        self._lock = threading.Lock()             # orders invalidations and cache stores
        self.store: Store | None = None           # the write side, when opened writable
        # link edits acknowledged but not in their groups' storage yet (the store's; read-only:
        # those a crash left in the journal), shown over what the groups store
        self.pending = PendingLinks()
        self.editor = None                        # its TreeEditor, once one edits it
        self.remote: RemoteOptions | None = None  # how a remote object was reached (its siblings too)
        self.siblings: Siblings | None = None     # a remote file's external data files

    @classmethod
    def open(cls, path: str, writable: bool = False, lock: bool = False,
             remote: RemoteOptions | None = None) -> H5File:
        """Open `path`, a local file or a URL (`remote`: how to reach it); `writable` opens its
        write side (journal replayed, space allocator); `lock` takes the lock libhdf5 takes
        (exclusive to write, shared to read)."""
        if is_url(path):
            return cls._open_remote(path, writable, remote or RemoteOptions())
        fd = open_regular(path, writable)
        journal, overlay, ops = None, None, []
        try:
            if lock:
                take_lock(fd, writable)
            if writable:
                journal = Journal(journal_path(path), open_recorder())
                try:
                    replayed = journal.replay(fd, lambda: superblock_reader.recorded_eoa(fd),
                                              lambda: superblock_reader.allocated_end(fd))
                except Stale as e:
                    try:
                        aside = journal.set_aside()
                    except OSError as exc:
                        raise H5fsError(f"{path}: the journal beside it was not replayed: {e}; it cannot be set "
                                        f"aside ({exc.strerror}): move {journal.path} away to open the file") from exc
                    log.error("%s: the journal of interrupted metadata updates was not replayed: %s; kept as %s",
                              path, e, aside)
                    replayed = 0
                if replayed:
                    log.warning("%s: finished %d metadata updates a crash had interrupted", path, replayed)
            else:
                overlay, ops = _journal_overlay(path, fd)
            source = LocalSource(fd, path)
            try:
                sb = superblock_reader.read(source, *((overlay.pread,) if overlay else ()))
            except UNEXPECTED as e:
                raise internal_error("superblock", e) from e
            overlay = _with_new_groups(overlay, ops, fd, sb.location)
            f = cls(path, source, sb, overlay)
            for op in ops:   # shown as a read-write open will land them
                f.pending.apply(Op.decode(op, f.sizes))
            f.root  # a file whose root group cannot be read is not mountable
            if journal is not None:
                f.store = Store(f.reader, sb, journal, journal.writer.recorder)
                f.pending = f.store.pending
                if journal.redo:
                    _land_redo(f, journal)
            return f
        except BaseException:
            if journal is not None:
                journal.close()
            os.close(fd)
            raise

    @classmethod
    def _open_remote(cls, url: str, writable: bool, options: RemoteOptions) -> H5File:
        """A remote object, read-only: no lock (nobody else writes through us) and no journal
        (a crash's journal lies beside a local file only)."""
        if writable:
            raise ReadOnly(f"{url}: a remote object is mounted read-only (h5fs edits files in place, "
                           f"which an object store cannot do)")
        source = open_remote(url, options)
        try:
            try:
                sb = superblock_reader.read(source)
            except UNEXPECTED as e:
                raise internal_error("superblock", e) from e
            f = cls(url, source, sb)
            f.remote = options
            f.siblings = Siblings(url, options)
            f.root
            return f
        except BaseException:
            source.close()
            raise

    def status(self) -> dict:
        """What `h5fs status` shows of the file beyond the mount's own numbers: a remote
        object's requests and block cache, and those of the objects beside it."""
        out: dict = {"remote": self.source.stats()}
        if self.remote is not None:
            out["siblings"] = self.sibling_stats()
        return out

    def sibling_stats(self) -> list[dict]:
        """What `h5fs status` shows of the objects a remote file names beside itself: its
        external data files, the virtual-dataset source files open (one process serves one
        mount: the pool's) and theirs, one entry per URL."""
        found: dict[str, dict] = {}
        files = [self, *POOL.remote_files()]
        for f in files:
            if f is not self:
                found.setdefault(f.source.name, f.source.stats())
            if f.siblings is not None:
                for st in f.siblings.stats():
                    found.setdefault(st["url"], st)
        return list(found.values())

    def stop(self) -> None:
        """The mount is going: reads of remote objects (this file, the objects beside it, the
        virtual-dataset source files open) stop retrying and stop waiting for the network."""
        for f in [self, *(POOL.remote_files() if self.remote is not None else [])]:
            f.source.stop()
            if f.siblings is not None:
                f.siblings.stop()

    @property
    def fd(self) -> int:
        """A local file's descriptor (the write side's); -1 for a remote object or once closed."""
        return self.source.fd

    @property
    def writable(self) -> bool:
        return self.store is not None

    def land_links(self, redo: bool = False) -> None:
        """The link edits the write side defers (storage/pending_links.py) landed in their
        groups' dense storage, in one commit (`redo`: edits a crash left in the journal)."""
        if self.store is None or not self.store.pending:
            return
        if self.editor is None:
            # imported on first use: the editor builds on this module and loads the write side
            # (~60 ms), which a read-only open never needs
            from .tree_edit import TreeEditor
            TreeEditor(self, None)
        self.editor.land(redo)

    def forget(self, txn, addresses=()) -> None:
        """Drop what the committed transaction made stale: rewritten and freed blocks, and the
        state of the objects whose headers it changed (HeaderEdit counts them)."""
        for address, size in txn.rewritten + txn.freed:
            self.invalidate_range(address, address + size)
        for address in set(addresses) | txn.owners:
            self.invalidate(address)
        freed = sorted(txn.freed)
        starts = [a for a, _ in freed]
        for address, header in txn.headers.items():   # as decoded once staged: not decoded again
            if not any(_overlaps(freed, starts, b.address, b.address + b.length) for b in header.blocks):
                self.reader.meta.get(address, header_reader.HEADER, lambda: header, header_reader.nbytes)
        self.store.forgotten = self.store.commits

    def close(self) -> None:
        if self.store is not None:
            self.land_links()
            self.store.group_commit()
            self.store.journal.close()
            self.store = None
        if self.siblings is not None:
            self.siblings.close()
        self.source.close()

    def __enter__(self) -> H5File:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- caches -----------------------------------------------------------------------------
    def cached(self, address: int, kind: Hashable, compute: Callable[[], Any],
               nbytes: int | Callable[[Any], int]) -> Any:
        """A value not derived from one object header (a heap, a table of the whole file),
        cached under (address, kind), or `compute()` (never None) stored there at a cost of
        `nbytes` (a number or a function of the value) plus the entry's own. A value computed
        while any address was invalidated is returned but not stored: it may predate the change."""
        hit = self.meta.peek(address, kind)
        if hit is not None:
            return hit
        epoch = self._epoch
        value = compute()
        size = ENTRY + (nbytes(value) if callable(nbytes) else nbytes)
        with self._lock:
            if self._epoch == epoch:
                value = self.meta.get(address, kind, lambda: value, size)
        return value

    def state(self, address: int, what: str) -> ObjectState:
        """The cached state of the object header at `address` (read on a miss; `what` names it
        in errors). Like `cached`, a state read across an invalidation is not kept."""
        generation = self._generations.get(address, 0)
        st = self.meta.peek(address, STATE)
        if st is not None and st.generation == generation:
            return st
        epoch = self._epoch
        st = ObjectState(self._read_header(address, what), generation)
        with self._lock:
            if self._epoch == epoch:
                st = self.meta.get(address, STATE, lambda: st, ENTRY + header_reader.nbytes(st.header))
            else:  # served to this caller once; its handle reads again on the next use
                st.valid = False
        return st

    def peek_state(self, address: int) -> ObjectState | None:
        st = self.meta.peek(address, STATE)
        return st if st is not None and st.generation == self._generations.get(address, 0) else None

    def remember(self, address: int, state: ObjectState, kind: Hashable, value: Any, nbytes: int) -> None:
        """Keep `value` in the object's state, its size counted in the cache's budget."""
        state.values[kind] = value
        self.charge(address, state, VALUE + nbytes)

    def charge(self, address: int, state: ObjectState, nbytes: int) -> None:
        """Count `nbytes` more for the object's state (a value decoded into something it holds)."""
        self.meta.grow(address, STATE, state, nbytes)

    def generation(self, address: int) -> int:
        """How many times `address` was invalidated: handles remember it (H5Object.generation)."""
        return self._generations.get(address, 0)

    def invalidate(self, address: int) -> None:
        """Forget the object whose header is at `address`: its header, all that was derived from
        it, its cached chunks (but the dirty ones, pinned: they move to the new generation);
        handles of it see a new generation."""
        with self._lock:
            generation = self._generations.get(address, 0)
            self._generations[address] = generation + 1
            self._epoch += 1
            _retire(self.meta.invalidate(address))
            self.meta.invalidate(FILE_WIDE)
        self.chunk_cache.invalidate_owner((address, generation), (address, generation + 1))

    def invalidate_range(self, start: int, end: int) -> None:
        """Forget every structure decoded from an address in [start, end) (a freed extent)."""
        with self._lock:
            self._epoch += 1
            _retire(self.meta.invalidate_range(start, end))

    # -- objects ----------------------------------------------------------------------------
    @property
    def root(self) -> Group:
        obj = self.get(self.root_address, "/")
        if not isinstance(obj, Group):
            raise FormatError("root object is not a group")
        return obj

    def header(self, address: int, what: str) -> object_header.ObjectHeader:
        """The object header at `address`, through the metadata cache (`what` names it in errors)."""
        return self.state(address, what).header

    def _read_header(self, address: int, what: str) -> object_header.ObjectHeader:
        try:
            return header_reader.read(self.reader, address, what)
        except UNEXPECTED as e:
            raise internal_error(what, e) from e

    def object_class(self, address: int, path: str) -> type[H5Object]:
        return self._class(address, path, self.state(address, path))

    def _class(self, address: int, path: str, st: ObjectState) -> type[H5Object]:
        cls = st.values.get(CLASS)
        if cls is None:
            cls = self._classify(address, path, st.header)
            self.remember(address, st, CLASS, cls, 0)
        return cls

    def _classify(self, address: int, path: str, header: object_header.ObjectHeader) -> type[H5Object]:
        types = {m.type for m in header.messages}
        if address == self.root_address or types & {M.SYMBOL_TABLE, M.LINK_INFO, M.LINK, M.GROUP_INFO}:
            return Group
        if M.LAYOUT in types or (M.DATASPACE in types and M.DATATYPE in types):
            return Dataset
        if M.DATATYPE in types:
            return NamedDatatype
        raise FormatError(f"{path}: object at {address} is neither a group, a dataset nor a named datatype")

    def get(self, address: int, path: str) -> H5Object:
        """A handle on the object whose header is at `address` (`path` names it in messages)."""
        generation = self._generations.get(address, 0)  # before the state: an invalidation in
        st = self.state(address, path)                    # between makes the handle check its kind
        return self._class(address, path, st)(self, address, path, generation, st)

    def resolve(self, path: str) -> H5Object:
        """The object at an absolute HDF5 path, following hard links only."""
        obj: H5Object = self.root
        walked = ""
        for part in [p for p in path.split("/") if p]:
            if not isinstance(obj, Group):
                raise FormatError(f"{walked or '/'} is not a group")
            link = obj.link(part)
            walked += "/" + part
            if link is None or link.address is None:
                raise NotFound(f"{walked}: no such object")
            obj = self.get(link.address, walked)
        return obj

    def path_of(self, address: int | None) -> str | None:
        """The shortest path by hard links to the object at `address` (how references are
        shown), or None when no walk from the root reaches it."""
        if address is None:
            return None
        # built whole, once, by one thread; cached file-wide: any invalidation forgets it
        with _walk_lock:
            paths = self.cached(FILE_WIDE, "reference paths", partial(_walk, self),
                                lambda paths: 140 * len(paths) + sum(map(len, paths.values())))
        return paths.get(address)

    # -- shared object header messages ----------------------------------------------------------
    @property
    def extension(self) -> object_header.ObjectHeader | None:
        addr = self.superblock.extension_address
        return None if addr is None else self.header(addr, "superblock extension")

    @property
    def sohm_indexes(self) -> list[sohm_table.SohmIndex]:
        addr = self.superblock.extension_address
        if addr is None:
            return []
        return self.cached(addr, "sohm indexes", self._read_sohm_indexes, approx_size)

    def _read_sohm_indexes(self) -> list[sohm_table.SohmIndex]:
        raw = self.extension.first(M.SOHM_TABLE)
        if raw is None:
            return []
        msg = sohm_table.decode(Reader(raw.data, 0, self.sizes, "shared message table message"))
        return read_table(self.reader, msg)

    def shared_message_body(self, ref: shared.SharedRef, mtype: int, what: str) -> RawMessage:
        if ref.kind == shared.IN_OBJECT_HEADER:
            if ref.address is None:
                raise FormatError(f"{what}: shared in an undefined object header")
            # usually a committed datatype: its header is read once, through the cache
            raw = self.header(ref.address, f"{what} (shared, in object header {ref.address})").first(mtype)
            if raw is None:
                raise FormatError(f"{what}: shared object header {ref.address} has no such message")
            return raw
        bit = sohm_table.type_bit(mtype)
        for index in self.sohm_indexes:
            if index.message_types & bit and index.heap_address is not None:
                heap = self._sohm_heap(index.heap_address)
                return RawMessage(mtype, 0, heap.get(ref.heap_id))
        raise FormatError(f"{what}: shared in the file's message heap, but no shared message index holds its type")

    def _sohm_heap(self, address: int):
        return self.cached(address, "shared message heap", lambda: FractalHeap(self.reader, address, "shared message heap"),
                           lambda heap: 1024 + approx_size(heap.header) + approx_size(heap.geometry))


_walk_lock = threading.Lock()


def _walk(file: H5File) -> dict[int, str]:
    """Breadth-first over hard links, so each address gets its shortest path."""
    paths = {file.root_address: "/"}
    queue = deque([file.root])
    while queue and len(paths) < MAX_WALK:
        group = queue.popleft()
        try:
            links = group.links()
        except H5fsError as e:
            if e.transient:   # a table with holes would be kept: fail now, build it next time
                raise
            continue
        for link in links:
            if link.address is None or link.address in paths:
                continue
            path = f"{group.path.rstrip('/')}/{link.name}"
            paths[link.address] = path
            try:
                obj = file.get(link.address, path)
            except H5fsError as e:
                if e.transient:
                    raise
                continue
            if isinstance(obj, Group):
                queue.append(obj)
    return paths


def _retire(forgotten: list[object]) -> None:
    """Mark forgotten object states invalid: handles holding one fetch the object anew."""
    for value in forgotten:
        if isinstance(value, ObjectState):
            value.valid = False


def _overlaps(extents: list[tuple[int, int]], starts: list[int], lo: int, hi: int) -> bool:
    """Whether [lo, hi) meets one of `extents` (sorted, disjoint; `starts` their addresses): a
    freed header's first bytes stay (zeroed), its freed extent begins inside it."""
    i = bisect.bisect_left(starts, hi)
    return i > 0 and extents[i - 1][0] + extents[i - 1][1] > lo
