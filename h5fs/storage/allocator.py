"""The space allocator: new blocks go to free space (first fit) or the end of the file.

Space a transaction frees is not reusable at once: until the change that stopped using it is
durable, a crash could bring the old structure back, so it waits in `pending` until `release()`
(called after the commit's last barrier); on a mount, until its walk finds the file sound too
(`hold_frees`, `release_held`). Addresses are relative to the superblock's base, like
every address in the file; `eoa` is the end of allocated space that the superblock records.

Free space lives in pools, the free-space managers libhdf5 would keep for the file (numbered as
their slots in the File Space Info message), so that a file persisting its free space can
list each pool in its manager (h5fs.storage.free_space_manager):
- one pool (META) for a file without persistent managers;
- META and RAW (metadata and raw data, sec2's "dichotomy" type map) for libhdf5's FSM_AGGR
  strategy with persistent managers: each kind takes its own pool first, then the other;
- paged aggregation (strategy PAGE, H5MF__alloc_pagefs), with or without persistence: a request of
  a page or more is "large": page aligned, from the LARGE pool or the end of the file, which stays
  page aligned (the rest of the last page is a LARGE section); a smaller one takes room in a page
  of its own kind (META or RAW pool; pages never mix kinds, sections never cross a page) or a new
  page. A freed block under a page goes to the pool of its page's kind and merges within the page
  only; a page wholly free returns to LARGE (H5MF__sect_small_merge).

Outside paged aggregation every block starts on an 8-byte boundary and a metadata block of a page
(4 KiB) or less never straddles a page boundary: rewriting it in place later is one page write,
which a killed daemon does not tear. Raw data (chunks) always goes to fresh space, so small chunks
(sparse ones are often under 1 KiB) pack without gaps.
"""

from __future__ import annotations

import bisect
import threading
from typing import Callable

from ..errors import H5fsError
from ..spans import Spans
from ..format.messages.file_space_info import SLOT_LARGE as LARGE
from ..format.messages.file_space_info import SLOT_META as META
from ..format.messages.file_space_info import SLOT_RAW as RAW

ALIGNMENT = 8   # every block starts on an 8-byte boundary
PAGE = 4096

Extent = tuple[int, int]     # (address, size)


class FreeList:
    """Free extents of one pool, sorted by start, merged when adjacent unless a `boundary`
    multiple lies between them. Each extent is also listed in its size class (the bit length of
    its size), so a first fit scans only the classes that can hold the request (alignment
    leaves a few bytes behind most blocks allocated at the end of the file: thousands of tiny
    extents in a file of many small objects). `undo`, when set, collects the inverse of every
    change (the allocator's snapshot)."""

    def __init__(self, boundary: int | None = None):
        self.boundary = boundary
        self.starts: list[int] = []
        self.sizes: dict[int, int] = {}
        self.classes: dict[int, list[int]] = {}   # size.bit_length() -> starts, sorted
        self.undo: list[tuple[FreeList, bool, int, int]] | None = None

    def copy(self) -> FreeList:
        out = FreeList(self.boundary)
        out.starts, out.sizes = list(self.starts), dict(self.sizes)
        out.classes = {c: list(starts) for c, starts in self.classes.items()}
        return out

    def extents(self) -> list[Extent]:
        return [(a, self.sizes[a]) for a in self.starts]

    def overlaps(self, address: int, size: int) -> bool:
        i = bisect.bisect_left(self.starts, address)
        return i < len(self.starts) and self.starts[i] < address + size or \
            bool(i) and self.starts[i - 1] + self.sizes[self.starts[i - 1]] > address

    def add(self, address: int, size: int) -> Extent:
        """Add an extent (merged with its neighbours); returns the extent it became part of."""
        if self.overlaps(address, size):
            raise H5fsError(f"space allocator: extent {address}+{size} freed twice")
        if self.undo is not None:
            self.undo.append((self, False, address, size))
        i = bisect.bisect_left(self.starts, address)
        if i < len(self.starts) and self.starts[i] == address + size and self._joins(address + size):
            size += self._drop(i)   # merge with the next
        if i and (prev := self.starts[i - 1]) + self.sizes[prev] == address and self._joins(address):
            size += self._drop(i - 1)   # and the previous
            address = prev
            i -= 1
        self._put(i, address, size)
        return address, size

    def _put(self, i: int, address: int, size: int) -> None:
        """List the extent at index `i` of `starts`."""
        self.starts.insert(i, address)
        self.sizes[address] = size
        bisect.insort(self.classes.setdefault(size.bit_length(), []), address)

    def _drop(self, i: int) -> int:
        """Unlist the extent at index `i` of `starts`; returns its size."""
        address = self.starts.pop(i)
        size = self.sizes.pop(address)
        same = self.classes[size.bit_length()]
        del same[bisect.bisect_left(same, address)]
        if not same:
            del self.classes[size.bit_length()]
        return size

    def _joins(self, at: int) -> bool:
        """Whether extents meeting at `at` may merge (each lies within one boundary interval)."""
        return self.boundary is None or at % self.boundary != 0

    def take(self, size: int, place: Callable[[int, int], int]) -> int | None:
        """First fit: the first extent holding `size` bytes at `place(start, size)`, carved. The
        first fitting extent of each class that can hold it, the lowest of them wins."""
        sizes, best = self.sizes, None
        for c in [c for c in self.classes if c >= size.bit_length()]:
            for start in self.classes[c]:
                if best is not None and start >= best:
                    break
                have = sizes[start]
                if have < size:   # only in the request's own class; placing only moves forward
                    continue
                at = place(start, size)
                if at + size <= start + have:
                    best, best_at = start, at
                    break
        if best is None:
            return None
        self.remove(best_at, size)
        return best_at

    def remove(self, address: int, size: int) -> None:
        """Carve [address, address + size) out of the extent holding it."""
        i = bisect.bisect_right(self.starts, address) - 1
        start = self.starts[i] if i >= 0 else address
        end = start + self.sizes.get(start, 0)
        if i < 0 or address + size > end:
            raise H5fsError(f"space allocator: {address}+{size} is not free")
        if self.undo is not None:
            self.undo.append((self, True, address, size))
        self._drop(i)
        for a, b in ((address + size, end), (start, address)):
            if b > a:
                self._put(i, a, b - a)


class Allocator:
    def __init__(self, eoa: int, page: int | None = None, split: bool = False):
        """`page`: libhdf5's paged aggregation with that page size; `split`: metadata and raw
        data in pools of their own (a file persisting free space without paging)."""
        self.eoa = eoa
        self.page = page
        if page is not None:
            self.pools = {META: FreeList(page), RAW: FreeList(page), LARGE: FreeList()}
        else:
            self.pools = {META: FreeList(), RAW: FreeList()} if split else {META: FreeList()}
        self.kinds: dict[int, int] = {}     # paged: page number -> the small pool it belongs to
        self.pending: list[Extent] = []
        self._pending_raw: list[bool] = []
        self._lock = threading.Lock()
        self._touched: list[Extent] | None = None   # extents allocated or freed since `watch`
        self.released = Spans()   # what this mount's transactions freed (`trim_end`)
        self.graves: list[Extent] = []   # never reused this mount: freed headers' first bytes (`bury`, `keep`)
        # graves freed before the walk's verdict: (address, size, `clock` of the freeing
        # transaction, the objects it changed); and those `release_held` found unused, to be zeroed
        self.unverified: list[tuple[int, int, int, set[int]]] = []
        self.to_zero: list[Extent] = []
        self._undo: list[tuple[FreeList, bool, int, int]] = []   # the pools' changes since `snapshot`
        self._generation = 0      # snapshots taken: only the last one can be restored
        # space kept out of reuse until the file is known sound (`hold_frees`): (address, size, pool it
        # was listed in or None, raw, `clock` of the transaction that freed it, the objects it changed)
        self.held: list[tuple[int, int, int | None, bool, int, frozenset[int]]] | None = None
        self.clock = 0   # transactions begun: orders a walk's sightings and the frees

    def extents(self) -> list[Extent]:
        """The reusable free extents (start, size), by address, of every pool."""
        with self._lock:
            return sorted(e for pool in self.pools.values() for e in pool.extents())

    def meets_free(self, address: int, size: int) -> bool:
        """Whether [address, address + size) meets a free extent, reusable or pending."""
        with self._lock:
            return any(pool.overlaps(address, size) for pool in self.pools.values()) or \
                any(a < address + size and address < a + n for a, n in self.pending)

    def pool(self, pool: int) -> list[Extent]:
        with self._lock:
            return self.pools[pool].extents()

    def snapshot(self) -> tuple:
        """What `restore` needs to undo what follows (one transaction: they follow one another,
        so only the last snapshot can be restored). The pools' changes are logged from here on,
        not copied: a snapshot costs nothing however many free extents the file has."""
        with self._lock:
            self._generation += 1
            self.clock += 1
            self._undo.clear()
            for fl in self.pools.values():
                fl.undo = self._undo
            return (self._generation, self.eoa, dict(self.kinds) if self.page is not None else None,
                    len(self.pending), len(self.graves), len(self.unverified))

    def restore(self, saved: tuple) -> None:
        """Undo the allocations and frees since `snapshot` (a transaction that failed)."""
        with self._lock:
            generation, eoa, kinds, pending, graves, unverified = saved
            if generation != self._generation:
                raise H5fsError("space allocator: a transaction restored after another began")
            undo, self._undo = self._undo, []
            for fl in self.pools.values():
                fl.undo = None
            for fl, removed, address, size in reversed(undo):
                if removed:
                    fl.add(address, size)
                else:
                    fl.remove(address, size)
            for fl in self.pools.values():
                fl.undo = self._undo
            self.eoa = eoa
            if kinds is not None:
                self.kinds = kinds
            del self.pending[pending:], self._pending_raw[pending:]
            # the headers it freed are live again: never zeroed (`release_held`) nor kept out of reuse
            del self.graves[graves:], self.unverified[unverified:]

    def load(self, pool: int, extents: list[Extent]) -> None:
        """Free space a persistent manager lists (paged: its small sections type their pages)."""
        with self._lock:
            for address, size in extents:
                self.pools[pool].add(address, size)
                if self.page is not None and pool != LARGE:
                    self.kinds[address // self.page] = pool

    # -- space kept until the file is known sound ------------------------------------------------
    def hold_frees(self) -> None:
        """Keep what the pools hold now (a persistent manager's sections) and every extent freed
        from now on out of reuse until `release_held`: until a walk of the file says it is sound, a
        free that damage dictates (an extent two objects share, the last link of an object that
        more links lead to) or a section listed over live data would let new data overwrite a
        healthy object. In a damaged file the space stays unused."""
        with self._lock:
            self.held = [(a, n, p, False, self.clock, frozenset()) for p, fl in self.pools.items()
                         for a, n in fl.extents()]
            self.pools = {p: FreeList(fl.boundary) for p, fl in self.pools.items()}

    def release_held(self, used: list[tuple[int, int, int, int | None]]) -> int:
        """The file is sound: the space held becomes reusable, except where the walk found it
        in use (`used`: (address, size, `clock` when the walk met it, the object it belongs to))
        by an object other than those the freeing transaction changed, or by one of
        those once that transaction had begun: an edit made before the walk may have freed an
        extent another object shares, or an object more links lead to, and the evidence went
        with it. What the walk saw of an object before the object's own edit freed it is reused.
        Returns the bytes kept back."""
        with self._lock:
            held, self.held = sorted(self.held or [], key=lambda h: h[0]), None
            for address, size, freed, owners in self.unverified:
                if not any(start < address + size and address < start + n and (owner not in owners or seen >= freed)
                           for start, n, seen, owner in used):
                    self.to_zero.append((address, size))
            self.unverified = []
            starts = [h[0] for h in held]
            busy: list[list[Extent]] = [[] for _ in held]   # per held extent: uses its free does not explain
            for start, n, seen, owner in used if held else ():
                k = max(0, bisect.bisect_right(starts, start) - 1)   # held extents are disjoint
                while k < len(held) and held[k][0] < start + n:
                    address, size, _, _, freed, owners = held[k]
                    if address + size > start and (owner not in owners or seen >= freed):
                        busy[k].append((start, n))
                    k += 1
            kept, graves = 0, sorted(self.graves)
            for (address, size, pool, raw, _, _), over in zip(held, busy):
                for part, left in _subtract([(address, size)], graves):   # graves stay unused
                    for start, n in _subtract([(part, left)], sorted(over)):
                        if pool is None:
                            self._give(start, n, raw)
                        else:
                            self.pools[pool].add(start, n)
                        left -= n
                    kept += left
            return kept

    def held_bytes(self) -> int:
        with self._lock:
            return sum(h[1] for h in self.held or ())

    # -- the walk for unused space ------------------------------------------------------------
    def watch(self) -> int:
        """Start recording every extent allocated or freed (a walk of the file for unused space
        begins); returns the end of allocation the walk covers."""
        with self._lock:
            self._touched = []
            return self.eoa

    def reuse_gaps(self, gaps: list[Extent]) -> int:
        """Space the walk found unused: what nobody allocated or freed since `watch` and no pool
        holds already becomes reusable (paged: whole pages only, a part of a page being of
        unknown kind). Returns the bytes adopted."""
        with self._lock:
            held = [e for pool in self.pools.values() for e in pool.extents()]
            held += [h[:2] for h in self.held or ()]
            busy = sorted(self._touched + held + self.pending + self.graves)
            self._touched = None
            adopted = 0
            for start, size in _subtract(gaps, busy):
                if self.page is not None:
                    first, last = -(-start // self.page) * self.page, (start + size) // self.page * self.page
                    if last <= first:
                        continue
                    start, size = first, last - first
                self.pools[LARGE if self.page is not None else META].add(start, size)
                adopted += size
            return adopted

    # -- allocation ---------------------------------------------------------------------------
    def allocate(self, size: int, raw: bool = False) -> int:
        if size <= 0:
            raise H5fsError(f"allocation of {size} bytes")
        with self._lock:
            at = self._paged(size, raw) if self.page is not None else self._allocate(size, raw)
            if self._touched is not None:
                self._touched.append((at, size))
            return at

    def _allocate(self, size: int, raw: bool) -> int:
        mine = RAW if raw and RAW in self.pools else META
        place = _place_raw if raw else _place
        for pool in [mine] + [p for p in self.pools if p != mine]:
            at = self.pools[pool].take(size, place)
            if at is not None:
                return at
        at = place(self.eoa, size)
        if at > self.eoa:   # alignment: free, and the mount's own (`trim_end` may give it back)
            self.pools[META].add(self.eoa, at - self.eoa)
            self.released.add(self.eoa, at)
        self.eoa = at + size
        return at

    def _paged(self, size: int, raw: bool) -> int:
        page = self.page
        if size >= page:   # large: page aligned, from LARGE or a page-aligned end of file
            at = self.pools[LARGE].take(size, lambda start, _: -(-start // page) * page)
            if at is None:
                at = -(-self.eoa // page) * page
                end = -(-(at + size) // page) * page
                for a, b in ((self.eoa, at), (at + size, end)):
                    if b > a:
                        self.pools[LARGE].add(a, b - a)
                self.eoa = end
            return at
        pool = RAW if raw else META
        at = self.pools[pool].take(size, lambda start, _: -(-start // ALIGNMENT) * ALIGNMENT)
        if at is None:   # a new page of this kind
            at = self._paged(page, raw)
            self.kinds[at // page] = pool
            self.pools[pool].add(at + size, page - size)
        return at

    # -- freeing ------------------------------------------------------------------------------
    def free(self, address: int, size: int, raw: bool = False) -> None:
        """Give back an extent once the current transaction is durable."""
        if size > 0:
            with self._lock:
                self.pending.append((address, size))
                self._pending_raw.append(raw)
                if self._touched is not None:
                    self._touched.append((address, size))

    def bury(self, address: int, size: int, owners: set[int]) -> bool:
        """Bytes no longer used that stay out of reuse until unmount, even when a walk of the
        file finds them unused (storage/object_delete.py: a freed header's first bytes, to be
        zeroed); `owners`: the objects the freeing transaction changes. Whether they may be
        zeroed now: only in a file known sound; before, `release_held` decides, as for held space,
        whether an object still uses them (a link count too low freed a linked header), and
        lists them in `to_zero` if none does."""
        with self._lock:
            self.graves.append((address, size))
            if self.held is None:
                return True
            self.unverified.append((address, size, self.clock, owners))
            return False

    def keep(self, extents: list[Extent]) -> None:
        """Bytes that stay unused until unmount, whatever a walk says (a dangling reference
        names them: a new header there would answer it)."""
        with self._lock:
            self.graves += extents

    def zeroed(self, graves: list[Extent]) -> None:
        """These graves of `to_zero` were zeroed (a transaction committed the zeros)."""
        with self._lock:
            self.to_zero = [g for g in self.to_zero if g not in graves]

    def release(self, owners: frozenset[int] = frozenset()) -> None:
        """Make pending frees reusable (the change that dropped them is durable; `owners`: the
        objects it changed, for `release_held`)."""
        with self._lock:
            for (address, size), raw in zip(self.pending, self._pending_raw):
                if self.held is not None:
                    self.held.append((address, size, None, raw, self.clock, owners))
                else:
                    self._give(address, size, raw)
                self.released.add(address, address + size)
            self.pending.clear()
            self._pending_raw.clear()

    def after(self, frees: list[tuple[int, int, bool]]) -> dict[int, list[Extent]]:
        """Each pool's extents as they will be once `frees` (address, size, raw) are released."""
        with self._lock:
            saved = self.pools, self.kinds
            self.pools, self.kinds = {p: fl.copy() for p, fl in self.pools.items()}, dict(self.kinds)
            try:
                for address, size, raw in frees if self.held is None else ():
                    self._give(address, size, raw)
                return {p: fl.extents() for p, fl in self.pools.items()}
            finally:
                self.pools, self.kinds = saved

    def trim_end(self, recorded: int) -> int | None:
        """The free space that ends the allocated space given back to the file: the new (lower)
        end of allocation, or None. Only what this mount's transactions freed there, and what lies
        past `recorded` (the end of allocation the superblock records): space only the walk of
        the file called unused stays (a mistake of the walk must not cut a file short). One pool
        only: files that keep their free space in pages or persistent managers keep their length."""
        with self._lock:
            if self.page is not None or len(self.pools) > 1 or self.pending:
                return None
            pool = self.pools[META]
            if not pool.starts or pool.starts[-1] + pool.sizes[pool.starts[-1]] != self.eoa:
                return None
            start = pool.starts[-1]
            cut = max(start, min(recorded, self.eoa))
            freed = self.released.covering(cut)
            if freed is not None:
                cut = max(start, freed[0])
            if cut >= self.eoa:
                return None
            pool.remove(cut, self.eoa - cut)
            self.eoa = cut
            return cut

    def add_free(self, address: int, size: int) -> None:
        """Space found unused (by a walk of the file): reusable now."""
        with self._lock:
            self._give(address, size, False)

    def _give(self, address: int, size: int, raw: bool) -> None:
        if any(p.overlaps(address, size) for p in self.pools.values()):
            raise H5fsError(f"space allocator: extent {address}+{size} freed twice")
        page = self.page
        if page is None:
            self.pools[RAW if raw and RAW in self.pools else META].add(address, size)
            return
        if size >= page:
            self.pools[LARGE].add(address, size)
            return
        while size:   # a small block lies in one page; a piece of each page it touches if not
            n = min(size, page - address % page)
            pool = self.kinds.setdefault(address // page, RAW if raw else META)
            start, got = self.pools[pool].add(address, n)
            if got == page:   # the whole page is free: it returns to the large pool
                self.pools[pool].remove(start, got)
                del self.kinds[start // page]
                self.pools[LARGE].add(start, got)
            address, size = address + n, size - n


def _place_raw(start: int, size: int) -> int:
    """Where raw data may begin: the next 8-byte boundary."""
    return -(-start // ALIGNMENT) * ALIGNMENT


def _place(start: int, size: int) -> int:
    """The first address at or after `start` where a metadata block of `size` bytes may begin."""
    at = _place_raw(start, size)
    if size <= PAGE and at % PAGE + size > PAGE:
        at = -(-at // PAGE) * PAGE
    return at


def _subtract(gaps: list[Extent], busy: list[Extent]) -> list[Extent]:
    """The parts of `gaps` (start, size) that no extent of `busy` (sorted) overlaps."""
    out = []
    for start, size in sorted(gaps):
        end = start + size
        for b, n in busy:
            if b + n <= start or b >= end:
                continue
            if b > start:
                out.append((start, b - start))
            start = max(start, b + n)
            if start >= end:
                break
        if start < end:
            out.append((start, end - start))
    return out
