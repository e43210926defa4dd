"""Transactions: how every change reaches the .h5 file so that a crash at any instant leaves a file
libhdf5 reads, each element holding its old or its new value.

A transaction stages two kinds of writes:
- `write_new`: blocks in space it allocated (chunk data, new index nodes, new heaps): nothing in
  the file points there yet, so they are written first and a crash only leaks them;
- `write_in_place`: live metadata (an index slot, a node, an object header block, the superblock's
  end-of-allocation): nothing may see them before the new blocks are durable.

`commit` goes one of two ways:
- the group commit's way, for metadata and chunk data alike (new metadata blocks of at most
  MAX_LOGGED_NEW bytes): the new blocks and in-place updates are appended whole to the journal as
  one record, without waiting for it to be durable, and laid over the file in the store's `batch`
  (a page overlay every read of metadata goes through), not written into it. Chunk data is
  written into fresh space at once (`write_data`, not fsynced) and the record carries its CRC-32.
  The commit is acknowledged once the kernel holds its record: a `kill -9` loses nothing
  acknowledged, the next open replays the records. `Store.group_commit` is the group commit: data
  written directly since the last one fsynced and a marker appended (the replay then need not
  check that data again: the batch may reuse space it was in), the records made durable (one
  fsync), the batch written into the file (each page once, however many edits changed it), the
  file fsynced, the journal emptied. Space the batch's commits freed is reusable by later
  commits of the batch at once (they land with it, or a replay of a prefix of the records stops
  before them), but the file itself uses it until the group commit: a direct write there (chunk
  data, contiguous data) settles first. The group commit runs at fsync, fsyncdir and unmount (the
  writeback's `flush`), a few seconds after the last edit (the mount's flusher), and when the
  records pass JOURNAL_LIMIT or the batch BATCH_LIMIT bytes. A power loss leaves the file as the
  last group commit left it, with a prefix of the records after it: each record holds every byte
  its edit changed, so any prefix replays to the state after one of the edits, and the replay
  stops at the first record whose chunk data the file does not hold (journal.holding); the open
  after a replay gives the file back the length its end of allocation says;
- otherwise (large new blocks): the batch settled first, then the new blocks (and the chunk data
  written before) written and fsynced, durable before anything points at them; then the
  superblock's end of allocated space (when it grew) and the in-place updates: one update that
  lies within one page is written directly (a page write is not torn) and fsynced; several are
  appended to the journal first (fsync), then applied.
Either way, space the transaction freed becomes reusable (the allocator's `release`) after the
commit.
A crash after a record is durable is finished at the next open: the replay writes every pending
record again, in order.
Before all that, a file persisting its free space has its free-space managers rewritten as the
transaction leaves the allocator (h5fs.storage.free_space_manager): their updates are part of the
same commit.

While a transaction builds its changes, `reader` shows the file as it will be after the commit
(staged metadata over the batch over the file's bytes) with a private metadata cache, so the
engine's readers and decoders work on it unchanged.
"""

from __future__ import annotations

import bisect
import os
import threading
import weakref
import zlib
from contextlib import contextmanager
from dataclasses import replace
from typing import Callable, Iterator

from ..errors import FormatError
from ..format import superblock as sbf
from .blockio import MAX_METADATA_BLOCK, BlockReader
from .journal import LIMIT as JOURNAL_LIMIT
from .journal import SUFFIX, Journal
from .metadata_cache import MetadataCache
from ..spans import Spans
from .page_overlay import PageOverlay
from .object_header import reader as header_reader
from .pending_links import INSERT, REMOVE, UNREF, Op, PendingLinks
from .free_space_manager import setup
from .allocator import PAGE
from .file_writer import FileWriter, Recorder
from ..format.messages.link import Link


MAX_LOGGED_NEW = 1 << 20   # new blocks a commit may put in the journal rather than fsync in place
BATCH_LIMIT = 64 << 20     # bytes of pages the batch holds before a group commit


class Store:
    """The write side of one open file: its writer, allocator, journal and superblock."""

    def __init__(self, reader: BlockReader, superblock: sbf.Superblock, journal: Journal,
                 recorder: Recorder | None):
        self.reader, self.superblock, self.journal = reader, superblock, journal
        self.writer = FileWriter(reader.fd, 0, recorder)
        # committed metadata not yet in the file: every read of metadata sees it (`group_commit`)
        self.batch = PageOverlay(reader.fd)
        reader.pread = self.batch.pread
        # space the batch's commits freed: the file itself uses it until the group commit, so
        # nothing may be written there directly before (`write`)
        self.unsettled = Spans()
        self.direct = False   # data written into the file directly since its last fsync
        self.settled_size = os.fstat(reader.fd).st_size   # the file's length after the last group commit
        # the batch, the journal's records and direct writes: commits (under the writeback's
        # commit lock) and contiguous data written in place (without it) meet here
        self.lock = threading.RLock()
        # never hand out space the file already holds, even past the recorded end of allocation
        # (which libhdf5 stores with the base address added, unlike every other address)
        eoa = max(superblock.eof_address - superblock.base_address, os.fstat(reader.fd).st_size - reader.base)
        # the file's free-space strategy: its allocator, and its persistent managers if it keeps them
        self.allocator, self.persistent = setup(reader, superblock, eoa, journal.path.removesuffix(SUFFIX))
        # transactions committed, and those among them that gave an existing object a new link
        # (ln, mv): a walk of the file can tell that it changed under it, and whether an object
        # it had not reached yet may have moved behind it
        self.commits = self.relinks = 0
        # commits whose changes the file's metadata cache has forgotten (the model invalidates
        # after each commit): until it has for all, transactions decode what they read anew
        self.forgotten = 0
        # objects a walk of the file found damaged (header address -> what is wrong): edits that
        # would build on what they hold are refused
        self.damaged: dict[int, str] = {}
        self.sound_heaps: set[int] = set()   # group local heaps checked by a first edit (symbol_table.py)
        # object headers made by this mount: nothing in the file can hold a reference to them
        # (h5fs writes none, and no other writer opens the file), so freeing one leaves none dangling
        self.created: set[int] = set()
        # link edits acknowledged and kept out of their groups' dense storage until a commit
        # lands them (storage/pending_links.py): the journal holds them
        self.pending = PendingLinks()
        self.wants_flush: Callable[[], None] | None = None   # the model's group commit, soon (it lands them)

    @property
    def cache_current(self) -> bool:
        """Whether the file's metadata cache forgot what every commit changed (`forgotten`)."""
        return self.forgotten == self.commits

    def refuse_damaged(self, addresses) -> None:
        """FormatError when an edit would change an object a walk found damaged: it would build
        on what the object holds (a link count, a heap, storage another object shares)."""
        for address in addresses:
            reason = self.damaged.get(address)
            if reason is not None:
                raise FormatError(f"not changed: the file is damaged there ({reason}; h5fs check tells more)")

    def defer(self, ops: list, header: tuple[int, bytes] | None = None) -> None:
        """Edits acknowledged without a transaction (pending_objects.py): one journal record of
        them alone, then shown; `header`: a new group's (address, image), laid over the file in
        the batch, where reads and transactions find it."""
        with self.lock:
            eoa = self.superblock.eof_address
            self.journal.append([], (eoa, eoa), ops=[op.encode() for op in ops])
            if header is not None:
                address, image = header
                self.batch.put(self.reader.base + address, image)
                self.reader.eof = max(self.reader.eof, self.batch.end)
                self.created.add(address)
            for op in ops:
                self.pending.apply(op)
            self.commits += 1     # the tree changed (a walk tells), and nothing cached is stale
            self.forgotten += 1
        if self.journal.size > JOURNAL_LIMIT and self.wants_flush is not None:
            self.wants_flush()

    def begin(self) -> Transaction:
        return Transaction(self)

    @property
    def unsettled_changes(self) -> bool:
        """Whether committed changes are not yet durable in the file itself (in the batch,
        journal records not retired, deferred links): `land` and `group_commit` make them so."""
        return bool(self.batch) or self.journal.pending or bool(self.pending)

    def group_commit(self) -> None:
        """The group commit: every committed update durable in the file itself and the journal's
        records retired (the file alone is then whole)."""
        with self.lock:
            if self.direct:   # data written into the file directly: durable before what names it
                self.writer.sync()
                if self.journal.pending:
                    # the data every record so far checks is durable: a replay need not check it
                    # again (the batch written below may reuse space some of it was in)
                    self.journal.mark()
                self.direct = False
            if self.batch:
                self.journal.sync()   # first: a crash while the batch is written is finished by replay
                self.batch.write_to(self.writer)
                self.batch.clear()
                self.grow(self.end_of_allocation())   # libhdf5 takes a shorter file for truncated
            if self.journal.pending:
                self.writer.sync()
                if self.pending:
                    # still acknowledged and only the journal holds them: a checkpoint lists them
                    # and retires every record before it (emptying the journal first would leave
                    # an instant where only memory holds them); the next group commit with none
                    # waiting empties it
                    self.journal.checkpoint(self.superblock.eof_address, self.pending.encoded())
                else:
                    self.journal.clear()
            self.unsettled = Spans()
            self.settled_size = os.fstat(self.writer.fd).st_size   # no abort cuts into it

    def end_of_allocation(self) -> int:
        """The absolute position where the superblock says the file's allocated space ends."""
        return self.reader.base + self.superblock.eof_address - self.superblock.base_address

    def end(self) -> int:
        """Where the file's bytes end once the batch is written into it."""
        return max(os.fstat(self.writer.fd).st_size, self.batch.end)

    def grow(self, size: int) -> None:
        """The file made `size` bytes long (zeros, sparse) if it is shorter."""
        with self.lock:
            if os.fstat(self.writer.fd).st_size < size:
                self.writer.truncate(size)
                self.direct = True
            self.reader.eof = max(self.reader.eof, size)

    def write(self, position: int, data: bytes | memoryview) -> bool:
        """Bytes written into the file directly (chunk data in fresh space, contiguous data in
        place), at an absolute position: the batch's pages follow them; space a commit of the
        batch freed is first made free in the file too (a group commit first). Whether it committed the batch."""
        with self.lock:
            start = position - self.reader.base
            settled = self.unsettled.overlaps(start, start + len(data))
            if settled:
                self.group_commit()
            self.writer.pwrite(position, data)
            self.batch.patch(position, data)
            self.direct = True
            self.reader.eof = max(self.reader.eof, position + len(data))
            return settled

    def shrink(self) -> int:
        """Free space at the end of the file given back, as libhdf5 gives it back at close
        (H5MF__close_shrink_eoa): the superblock's end of allocation lowered (durably), then the
        file truncated; returns the bytes the file lost. A crash in between leaves a file longer
        than its end of allocation, which libhdf5 reads (and the next mount's walk finds that
        tail unused, so its unmount gives it back). Files whose free-space managers persist
        keep their length (the managers would have to follow); the freed headers' bytes left to
        zero are zeroed in every file."""
        with self.transaction() as txn:
            end = None if self.persistent is not None else \
                self.allocator.trim_end(self.superblock.eof_address - self.superblock.base_address)
            if end is None and txn.empty:
                return 0
            if end is not None:
                txn.set_superblock(replace(self.superblock, eof_address=end + self.superblock.base_address))
            txn.commit()   # with the freed headers' bytes left to zero (`transaction`)
        self.group_commit()
        if end is None:
            return 0
        size, new = os.fstat(self.reader.fd).st_size, self.reader.base + end
        if size <= new:
            return 0
        self.writer.truncate(new)
        self.writer.sync()
        self.reader.eof = self.settled_size = new
        return size - new

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """A transaction for the block to stage and commit; aborted when the block raises
        before the commit (chunk data already written to fresh space is then given back)."""
        txn = Transaction(self)
        graves = list(self.allocator.to_zero)   # freed headers' first bytes the walk let go
        for address, size in graves:
            txn.write_in_place(address, bytes(size))
        if graves:
            txn.on_commit(lambda: self.allocator.zeroed(graves))
        try:
            yield txn
        except BaseException:
            if not txn.committed:
                txn.abort()
            raise


class OverlayReader(BlockReader):
    """The file as a transaction will leave it: its staged metadata over the file's bytes."""

    def __init__(self, txn: Transaction, base: BlockReader):
        super().__init__(base.source, base.base, base.sizes, MetadataCache(16 * 1024 * 1024))
        self._base = base
        # no reference cycle: a transaction's staged chunk data must go when it does, not at
        # the next cycle collection (rare in the daemon)
        self._txn = weakref.ref(txn)

    @property
    def txn(self) -> Transaction:
        txn = self._txn()
        if txn is None:
            raise FormatError("reading through a transaction that ended")
        return txn

    def read(self, addr: int | None, size: int, what: str = "block") -> bytes:
        if addr is None:
            raise FormatError(f"{what}: undefined address")
        if size < 0 or size > MAX_METADATA_BLOCK:
            raise FormatError(f"{what}: implausible size {size}")
        end = addr + size
        if addr < 0 or end > self.txn.store.allocator.eoa:
            raise FormatError(f"{what}: range {addr}+{size} lies outside the file")
        base = self._base   # the file with the batch over it
        on_disk = max(0, min(end, base.eof - self.base) - addr)
        staged = self.txn.staged_between(addr, end)
        if not staged and on_disk == size:   # most reads: bytes the transaction left alone
            data = base.pread(size, self.base + addr)
            if len(data) == size:
                return data
        buf = bytearray(base.pread(on_disk, self.base + addr) if on_disk else b"")
        buf.extend(bytes(size - len(buf)))
        for start, data in staged:
            lo, hi = max(start, addr), min(start + len(data), end)
            buf[lo - addr:hi - addr] = data[lo - start:hi - start]
        return bytes(buf)

    def read_upto(self, addr: int | None, size: int, what: str = "block") -> bytes:
        if addr is None:
            raise FormatError(f"{what}: undefined address")
        return self.read(addr, max(0, min(size, self.txn.store.allocator.eoa - addr)), what)

    def object_header(self, address: int, what: str):
        """The header as the file's cache holds it when the transaction changed none of its
        blocks (most edits read several headers they leave alone), else decoded anew."""
        txn = self.txn
        hit = self._base.meta.peek(address, header_reader.HEADER) if txn.store.cache_current else None
        if hit is not None and not any(txn.staged_between(b.address, b.address + b.length) for b in hit.blocks):
            return hit
        return header_reader.decode_at(self, address, what)

    def check_range(self, addr: int | None, size: int, what: str) -> None:
        if addr is None or addr < 0 or size < 0 or addr + size > self.txn.store.allocator.eoa:
            raise FormatError(f"{what}: range {addr}+{size} lies outside the file")


class Transaction:
    def __init__(self, store: Store):
        self.store = store
        self.sizes = store.reader.sizes
        self.reader = OverlayReader(self, store.reader)
        self._new: dict[int, bytes] = {}        # metadata in fresh space, by address
        self._wrote_data = False                         # chunk data written to fresh space already
        self._checks: list[tuple[int, int, int]] = []   # (position, length, CRC-32) of that data
        self._unchecked = False   # some of it without a check: fsynced before the record
        self._in_place: dict[int, bytes] = {}   # live metadata rewritten, by address
        self._starts: list[int] = []           # addresses of both staged kinds, sorted
        self.freed: list[tuple[int, int]] = []
        self._freed_raw: list[bool] = []        # whether each freed extent held raw data
        self._allocated = False
        self._on_commit: list[Callable[[], None]] = []
        self.rewritten: list[tuple[int, int]] = []   # (address, size) of in-place updates
        self._saved = store.allocator.snapshot()
        self.owners: set[int] = set()   # header addresses of the objects this change is about
        self.headers: dict[int, object] = {}   # address -> a header as the commit leaves it, decoded (HeaderEdit, create_header)
        self.committed = False
        self.superblock: sbf.Superblock | None = None   # a new one to publish (set_superblock)
        self._file_size = os.fstat(store.reader.fd).st_size
        self.deferred = PendingLinks()   # link edits this transaction defers (storage/pending_links.py)
        self.lands = False               # it lands the store's deferred edits (links_write.land_links)
        self.dense_edits = False         # it edited some dense link or attribute storage (dense_storage)
        self.stab_edits = False          # it edited some symbol table (symbol_table)

    # -- staging ------------------------------------------------------------------------------
    def allocate(self, size: int, raw: bool = False) -> int:
        """Fresh space for metadata, or for raw data (`raw`: chunks, contiguous data): a file
        with paged aggregation keeps the two kinds in pages of their own."""
        self._allocated = True
        return self.store.allocator.allocate(size, raw)

    def set_superblock(self, sb: sbf.Superblock) -> None:
        """A new superblock (e.g. the root group's entry in versions 0-1), published first at
        commit with the end of allocation it then has."""
        self.superblock = sb

    def write_data(self, address: int, data: bytes, rewritable: bool = False) -> None:
        """Chunk data into space this transaction allocated: written at once (nothing points
        there before the commit), so a transaction never holds its chunks in memory; its record
        carries their CRC-32, so a replay knows whether the file holds them. `rewritable`: space
        later writes rewrite in place (implicit chunk slots, contiguous storage), which no check
        could describe: as for any data written in place, a power loss may leave older bytes."""
        store, position = self.store, self.store.reader.base + address
        store.write(position, data)
        self._wrote_data = True
        if rewritable:
            self._unchecked = True
        else:
            self._checks.append((position, len(data), zlib.crc32(data)))

    def read_data(self, address: int, size: int) -> bytes:
        """Chunk data written by `write_data` (to move it, as an implicit index does)."""
        return os.pread(self.store.reader.fd, size, self.store.reader.base + address)

    def write_new(self, address: int, data: bytes) -> None:
        """A metadata block into space this transaction allocated (readable through `reader`)."""
        self._stage(self._new, address, data)

    def write_in_place(self, address: int, data: bytes) -> None:
        """New bytes for live metadata (readable through `reader`, published at commit)."""
        self._stage(self._in_place, address, data)

    def free(self, address: int | None, size: int, raw: bool = False) -> None:
        """Space the file stops using when this transaction commits (`raw`: it held raw data)."""
        if address is not None and size > 0:
            self.freed.append((address, size))
            self._freed_raw.append(raw)

    def frees(self) -> list[tuple[int, int, bool]]:
        """(address, size, raw) of every extent this transaction frees."""
        return [(a, n, raw) for (a, n), raw in zip(self.freed, self._freed_raw)]

    def on_commit(self, hook: Callable[[], None]) -> None:
        """Call `hook` once the commit has published the staged changes."""
        self._on_commit.append(hook)

    def _stage(self, where: dict[int, bytes], address: int, data: bytes) -> None:
        self.reader.meta.invalidate_range(address, address + len(data))  # decoded before: stale
        if address in self._new or address in self._in_place:
            (self._new if address in self._new else self._in_place)[address] = data
            return
        where[address] = data
        bisect.insort(self._starts, address)

    def staged_between(self, start: int, end: int) -> list[tuple[int, bytes]]:
        """Staged metadata blocks overlapping [start, end), in address order."""
        out = []
        i = max(0, bisect.bisect_right(self._starts, start) - 1)
        while i < len(self._starts) and self._starts[i] < end:
            a = self._starts[i]
            data = self._new.get(a) or self._in_place.get(a, b"")
            if a + len(data) > start:
                out.append((a, data))
            i += 1
        return out

    # -- deferred link edits (storage/pending_links.py), as this transaction leaves them ---------
    def defer_insert(self, group: int, link: Link, raw: bytes) -> None:
        self.deferred.apply(Op(INSERT, group, link.name, link, raw))

    def defer_remove(self, group: int, name: str) -> None:
        self.deferred.apply(Op(REMOVE, group, name))

    def defer_unref(self, address: int, path: str) -> None:
        """The object at `address` counted down (freed at no link) once the removals land."""
        self.deferred.apply(Op(UNREF, address, path))

    def _theirs(self) -> PendingLinks | None:
        return None if self.lands else self.store.pending

    def deferred_link(self, group: int, name: str) -> Link | None | bool:
        """The link deferred as `name` in the group, False when its stored link goes, None when
        nothing is deferred for the name (PendingLinks.get)."""
        found = self.deferred.get(group, name)
        if found is None and (theirs := self._theirs()) is not None:
            found = theirs.get(group, name)
        return found

    def deferred_links(self, group: int) -> tuple[dict[str, Link], set[str]]:
        """The links deferred for the group by name, and the names whose stored link goes."""
        theirs = self._theirs()
        added = {name: link for name, (link, _) in (theirs.of(group) if theirs else {}).items()}
        gone = set(theirs.gone(group)) if theirs else set()
        for name in self.deferred.gone(group):
            added.pop(name, None)
            gone.add(name)
        added.update((name, link) for name, (link, _) in self.deferred.of(group).items())
        return added, gone

    def holds_deferred(self, group: int) -> bool:
        theirs = self._theirs()
        return self.deferred.holds(group) or (theirs is not None and theirs.holds(group))

    def deferred_unrefs(self, address: int) -> int:
        """Countdowns of the object at `address` waiting for their removals to land."""
        theirs = self._theirs()
        return self.deferred.unrefs_of(address) + (theirs.unrefs_of(address) if theirs else 0)

    @property
    def empty(self) -> bool:
        return not (self._new or self._wrote_data or self._in_place or self.freed or self.deferred or self.lands)

    # -- commit -------------------------------------------------------------------------------
    def abort(self) -> None:
        """Forget the staged changes: space allocated returns, the file keeps its old length (or
        what a group commit since made it)."""
        store = self.store
        store.allocator.restore(self._saved)
        with store.lock:
            length = max(self._file_size, store.settled_size)
            if os.fstat(store.reader.fd).st_size > length:
                store.writer.truncate(length)
            store.reader.eof = max(length, store.batch.end)

    def commit(self) -> None:
        """Publish the staged changes (see the module's docstring). A failure before anything
        is published (ENOSPC while writing new blocks or the journal) leaves the file as it was."""
        self.committed = True
        store = self.store
        store.commits += 1
        if store.persistent is not None and (self._allocated or self.freed):
            try:   # the file's free-space managers follow the space this transaction moved
                store.persistent.stage_managers(self)
            except BaseException:
                self.abort()
                raise
        base, writer = store.reader.base, store.writer
        updates = [(base + a, d) for a, d in sorted(self._in_place.items())]
        eoa = store.allocator.eoa + store.superblock.base_address
        sb = self.superblock or store.superblock
        if eoa > sb.eof_address:
            sb = replace(sb, eof_address=eoa)
        sb = None if sb == store.superblock else sb
        if sb is not None:
            # first: no published pointer may lie beyond the end of allocation libhdf5 checks
            updates.insert(0, (sb.location, sbf.encode(sb)))
        journal = store.journal
        eoas = (store.superblock.eof_address, (sb or store.superblock).eof_address)   # what the records say
        new = [(base + a, d) for a, d in self._new.items()]
        batch = store.batch
        reach = max([p + len(d) for p, d in new], default=0)
        # metadata only: one record appended, the batch holds it until the group commit (the
        # file, the batch and the new blocks must reach the end of allocation, or a replay
        # leaves a file libhdf5 takes for truncated)
        batched = sum(len(d) for _, d in new) <= MAX_LOGGED_NEW \
            and max(reach, batch.end, os.fstat(writer.fd).st_size) >= base + store.allocator.eoa
        deferred = self.deferred.encoded_ops()   # its net effect (storage/pending_links.py)
        ops = [op.encode() for op in deferred]
        # a group commit from another thread (a contiguous write's `Store.write`) finds the
        # record, the batch, the superblock and the deferred edits all as before or all as after
        with store.lock:
            if batched:
                try:
                    if self._unchecked:   # durable before the record that publishes it
                        writer.sync()
                    journal.append(new + updates, eoas, self._checks, ops, self.lands)
                except BaseException:
                    self.abort()
                    raise
                for position, data in new + updates:
                    batch.put(position, data)
                store.reader.eof = max(store.reader.eof, batch.end)
            else:
                self._publish(new, updates, eoas, sb is not None, ops)
            if sb is not None:
                store.superblock = sb
            self.rewritten = [(a, len(d)) for a, d in self._in_place.items()]
            # new blocks too: a reader may have cached what the space held before it was reused
            self.rewritten += [(a, len(d)) for a, d in self._new.items()]
            for hook in self._on_commit:   # (one that forgets what was read: before the deferred edits go)
                hook()
            if self.lands:
                store.pending.clear()
            for op in deferred:
                store.pending.apply(op)
            if self.deferred.removed:   # objects hidden while still in the file: a walk under them is not trusted
                store.relinks += 1
        if journal.size > JOURNAL_LIMIT or batch.nbytes > BATCH_LIMIT:
            if store.pending and store.wants_flush is not None:
                store.wants_flush()   # the model lands the deferred edits, then settles
            else:
                store.group_commit()
        for address, size, raw in self.frees():
            store.allocator.free(address, size, raw)
            if batched:   # reusable by later commits of the batch, not by direct writes (`Store.write`)
                store.unsettled.add(address, address + size)
        store.allocator.release(frozenset(self.owners))

    def _publish(self, new: list[tuple[int, bytes]], updates: list[tuple[int, bytes]],
                 eoas: tuple[int, int], new_superblock: bool, ops: list[bytes]) -> None:
        """A commit with chunk data or large new blocks: straight into the file (see the
        module's docstring), after the batch."""
        store, writer, journal = self.store, self.store.writer, self.store.journal
        base = store.reader.base
        try:
            store.group_commit()   # a pending record may rewrite space this commit reuses: retire it first
        except BaseException:
            self.abort()
            raise
        try:
            # a single-page update is not torn: written directly (unless deferred links go with it)
            direct = len(updates) == 1 and updates[0][0] // PAGE == (updates[0][0] + len(updates[0][1]) - 1) // PAGE \
                and not (ops or self.lands)
            if new or self._wrote_data or new_superblock:
                for position, data in new:
                    store.write(position, data)
                if os.fstat(writer.fd).st_size < base + store.allocator.eoa:
                    # space allocated but never written: the file must still reach the end of
                    # allocation, or libhdf5 takes it for truncated
                    writer.truncate(base + store.allocator.eoa)
                writer.sync()
            if (updates and not direct) or ops or self.lands:
                journal.log(updates, eoas, ops, self.lands)
        except BaseException:
            self.abort()
            raise
        store.reader.eof = max(store.reader.eof, os.fstat(writer.fd).st_size)
        for position, data in updates:
            store.write(position, data)
        if updates and direct:
            writer.sync()
