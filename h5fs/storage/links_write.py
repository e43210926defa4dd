"""A group's links edited inside a transaction, whatever stores them: a symbol table (old-style
groups: local heap, v1 B-tree, symbol table nodes), link messages in the group's own header
(compact), or a fractal heap indexed by v2 B-trees (dense), switching between the last two as
libhdf5 does (H5G__obj_insert: past the group info's maximum compact count the links go dense;
H5G__obj_remove: below its minimum dense count they come back).

A hard or soft link given to, or any link removed from, a group whose links are already dense
or in a symbol table is deferred (storage/pending_links.py): lookups and listings here see it;
`land_links` lands them all, each group's storage edited once.

Reference counts of the objects hard links name are the caller's; so is committing.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from ..errors import CannotWrite
from ..format.codec import Reader, Writer
from ..format.messages import link as link_msg
from ..format.messages import link_info as link_info_msg
from ..format.messages import small
from ..format.messages import symbol_table as stab_msg
from ..format.messages.link import Link
from ..format.messages.link_info import LinkInfo
from ..format.messages.types import GROUP_INFO, LINK, LINK_INFO, SYMBOL_TABLE
from ..format.symbol_table_entry import CACHE_NONE, CACHE_STAB
from . import local_heap, symbol_table
from .dense_storage import LINKS, DenseStore
from .dense_storage import lookup as dense_lookup
from .object_header.edit import HeaderEdit
from .object_header.reader import read as read_header
from .transaction import Transaction

MAX_COMPACT, MIN_DENSE = 8, 6          # libhdf5's defaults when the group info stores none
MAX_MESSAGE = 65536                    # H5O_MESG_MAX_SIZE: larger links live in dense storage only
UTF8 = 1

log = logging.getLogger("h5fs")


def encode_link(link: Link, sizes) -> bytes:
    w = Writer(sizes)
    link_msg.encode(w, link)
    return w.getvalue()


class GroupLinks:
    """The links of the group whose header is at `address`, edited in `txn`."""

    def __init__(self, txn: Transaction, address: int, what: str):
        self.txn, self.what, self.address = txn, what, address
        self.edit = HeaderEdit(txn, read_header(txn.reader, address, what))
        self.deferred_removal = False   # the last `remove` was deferred (its object is counted down later)
        self.deferred_insert = False    # the last `insert` was deferred
        self._decoded: dict[int, tuple[object, object]] = {}   # type -> (the header it is of, message)

    # -- what the header says -----------------------------------------------------------------
    def _decode(self, mtype: int, decode):
        header = self.edit.header
        hit = self._decoded.get(mtype)
        if hit is not None and hit[0] is header:
            return hit[1]
        raw = header.first(mtype)
        value = None if raw is None else decode(Reader(raw.data, 0, self.txn.sizes, f"{self.what}: message {mtype:#x}"))
        self._decoded[mtype] = (header, value)
        return value

    @property
    def symbol_table(self) -> stab_msg.SymbolTable | None:
        return self._decode(SYMBOL_TABLE, stab_msg.decode)

    @property
    def info(self) -> LinkInfo | None:
        return self._decode(LINK_INFO, link_info_msg.decode)

    def _phase(self) -> tuple[int, int]:
        gi = self._decode(GROUP_INFO, small.decode_group_info)
        if gi is None or gi.max_compact is None:
            return MAX_COMPACT, MIN_DENSE
        return gi.max_compact, gi.min_dense

    def _compact(self) -> list[tuple[object, Link]]:
        return [(raw, link_msg.decode(Reader(raw.data, 0, self.txn.sizes, f"{self.what}: link message")))
                for raw in self.edit.header.find(LINK)]

    def is_group(self) -> bool:
        return self.symbol_table is not None or self.info is not None

    def _storage(self) -> str:
        if self.symbol_table is not None:
            return "symbol table"
        info = self.info
        if info is None:
            raise CannotWrite(f"{self.what}: a group with neither a symbol table nor link info")
        return "compact" if info.heap_address is None else "dense"

    # -- reading ---------------------------------------------------------------------------------
    def all(self) -> list[Link]:
        kind = self._storage()
        if kind == "symbol table":
            stab = self.symbol_table
            heap = local_heap.read(self.txn.reader, stab.heap_address, self.what)
            return self._with_deferred([self._from_entry(stab, e, heap) for e in
                                        symbol_table.group_entries(self.txn.reader, stab.btree_address, self.what)])
        if kind == "compact":
            return [ln for _, ln in self._compact()]
        info = self.info
        return self._with_deferred([_decode_link(raw, self.txn.sizes, self.what) for _, raw in self._dense(info).items()])

    def _with_deferred(self, stored: list[Link]) -> list[Link]:
        """The stored links as the deferred edits leave them."""
        added, gone = self.txn.deferred_links(self.address)
        return [ln for ln in stored if ln.name not in gone and ln.name not in added] + list(added.values())

    def lookup(self, name: str) -> Link | None:
        kind = self._storage()
        if kind == "compact":
            return next((ln for _, ln in self._compact() if ln.name == name), None)
        deferred = self.txn.deferred_link(self.address, name)
        if deferred is not None:
            return deferred or None   # False: its stored link goes
        if kind == "symbol table":
            return self._stab_lookup(name)
        return self._dense_lookup(name)

    def _stab_lookup(self, name: str) -> Link | None:
        stab, key = self.symbol_table, name.encode("utf-8")
        if self.txn.stab_edits or not self.txn.store.cache_current:
            entry = symbol_table.lookup(self.txn, stab, key, self.what)
            return None if entry is None else self._from_entry(stab, entry)
        # a symbol table the transaction left alone: read as committed, through the file's cache
        reader = self.txn.store.reader
        heap = local_heap.read(reader, stab.heap_address, self.what)
        entry = symbol_table.find_entry(reader, stab.btree_address, heap, key, self.what)
        return None if entry is None else self._from_entry(stab, entry, heap)

    def _from_entry(self, stab, entry, heap=None) -> Link:
        link = symbol_table.link_of(self.txn, stab, entry, self.what)
        if heap is None:
            heap = local_heap.read(self.txn.reader, stab.heap_address, self.what)
        name = heap.string(entry.name_offset).decode("utf-8", "surrogateescape")
        if link.soft_target is not None:
            return Link(name, link_msg.SOFT, target=link.soft_target.decode("utf-8", "surrogateescape"))
        return Link(name, link_msg.HARD, address=link.address)

    # -- edits -------------------------------------------------------------------------------------
    def insert(self, link: Link) -> None:
        """Add `link` (FileExistsError when the name is taken)."""
        self.deferred_insert = False
        kind = self._storage()
        if kind == "symbol table" and link.link_type not in (link_msg.HARD, link_msg.SOFT):
            self._stab_insert(link)   # the group turns new-style (its deferred edits landed first: TreeEditor)
            return
        if self.lookup(link.name) is not None:
            raise FileExistsError(f"{self.what}: a link named {link.name!r} exists")
        if kind == "symbol table":
            self.txn.defer_insert(self.address, link, encode_link(link, self.txn.sizes))
            self.deferred_insert = True
            return
        info = self.info
        if info.track_order:   # the next creation index, as H5G__obj_insert numbers links
            order = info.max_creation_index or 0
            link = replace(link, creation_order=order)
            info = replace(info, max_creation_index=order + 1)
        link = replace(link, charset=UTF8)
        raw = encode_link(link, self.txn.sizes)
        if kind == "compact" and (len(self.edit.header.find(LINK)) >= self._phase()[0] or len(raw) >= MAX_MESSAGE):
            info = self._to_dense(info)
            kind = "dense"
        if kind == "dense" and info.heap_address == (self.info.heap_address if self.info else None):
            self.txn.defer_insert(self.address, link, raw)   # storage that was dense already
            self.deferred_insert = True
            if info != self.info:
                self._set_info(info)
            return
        self.txn.owners.add(self.address)   # its storage changes: what was read of it goes
        if kind == "dense":
            store = self._dense(info)
            store.insert(link.name.encode("utf-8", "surrogateescape"), raw, link.creation_order or 0)
            store.close()
        else:
            self.edit.add(LINK, raw)
        if info != self.info:
            self._set_info(info)

    def remove(self, name: str) -> Link:
        """Remove the link `name` (FileNotFoundError when there is none); returns it. From dense
        storage the removal is deferred (`deferred_removal`)."""
        kind = self._storage()
        self.deferred_removal = kind != "compact"
        if kind != "compact":
            link = self.lookup(name)
            if link is None:
                raise FileNotFoundError(f"{self.what}: no link named {name!r}")
            self.txn.defer_remove(self.address, name)
            return link
        self.txn.owners.add(self.address)   # its storage changes: what was read of it goes
        info = self.info
        found = next(((raw, ln) for raw, ln in self._compact() if ln.name == name), None)
        if found is None:
            raise FileNotFoundError(f"{self.what}: no link named {name!r}")
        self.edit.remove(found[0])
        if not self.edit.header.find(LINK) and info.track_order:   # H5G__obj_remove_update_linfo numbers anew
            self._set_info(replace(info, max_creation_index=0))
        return found[1]

    def _stab_insert(self, link: Link) -> None:
        """A link a symbol table cannot hold: the group turns new-style first, as in libhdf5."""
        self.txn.owners.add(self.address)
        self._stab_to_new()
        self.insert(link)

    def _stab_link(self, link: Link) -> symbol_table.Link:
        """A hard or soft link as a symbol table entry names it (a group's cached symbol table)."""
        if link.link_type == link_msg.HARD:
            return symbol_table.Link(link.address, symbol_table.cached_stab(self.txn, link.address, self.what))
        return symbol_table.Link(soft_target=link.target.encode("utf-8"))

    def _stab_to_new(self) -> None:
        """A symbol-table group becomes a new-style one holding the same links (H5G__obj_insert
        converting an old-style group for a link a symbol table cannot store): the symbol
        table's blocks are freed and its message replaced by link info and group info."""
        links = self.all()
        stab = self.symbol_table
        symbol_table.delete(self.txn, stab, self.what)
        self.edit.remove(self.edit.header.first(SYMBOL_TABLE))
        w = Writer(self.txn.sizes)
        link_info_msg.encode(w, LinkInfo(False, False, None, None, None, None))
        self.edit.add(LINK_INFO, w.getvalue())
        self.edit.add(GROUP_INFO, b"\0\0")
        for link in links:
            self.insert(link)
        sb = self.txn.superblock or self.txn.store.superblock
        entry = sb.root_entry
        if entry is not None and entry.header_address == self.edit.header.address and entry.cache_type == CACHE_STAB:
            # the superblock's root entry caches the symbol table no longer there
            self.txn.set_superblock(replace(sb, root_entry=replace(entry, cache_type=CACHE_NONE, btree_address=None,
                                                                   heap_address=None)))

    def _set_info(self, info: LinkInfo) -> None:
        w = Writer(self.txn.sizes)
        link_info_msg.encode(w, info)
        self.edit.set(LINK_INFO, w.getvalue())

    # -- dense storage -------------------------------------------------------------------------
    def _dense(self, info: LinkInfo) -> DenseStore:
        return DenseStore(self.txn, LINKS, info.heap_address, info.name_index_address,
                          info.order_index_address if info.index_order else None, self.what)

    def _dense_lookup(self, name: str) -> Link | None:
        info, key = self.info, name.encode("utf-8", "surrogateescape")
        if self.txn.dense_edits or not self.txn.store.cache_current:
            raw = self._dense(info).lookup(key)
        else:   # dense storage the transaction left alone: read as committed, through the file's cache
            raw = dense_lookup(self.txn.store.reader, LINKS, info.heap_address, info.name_index_address, key, self.what)
        return None if raw is None else _decode_link(raw, self.txn.sizes, self.what)

    def _to_dense(self, info: LinkInfo) -> LinkInfo:
        """H5G__obj_insert going dense: new storage takes the link messages, in header order."""
        store = DenseStore.create(self.txn, LINKS, info.index_order, self.what)
        for raw, link in self._compact():
            store.insert(link.name.encode("utf-8", "surrogateescape"), bytes(raw.data), link.creation_order or 0)
        store.close()
        while raws := self.edit.header.find(LINK):   # each removal can move the others
            self.edit.remove(raws[0])
        return replace(info, heap_address=store.heap_address, name_index_address=store.name_index,
                       order_index_address=store.corder_index)

    def _to_compact(self, info: LinkInfo, store: DenseStore) -> LinkInfo:
        """H5G__obj_remove_update_linfo going compact: the links become messages again, in name
        index order, unless one is too large for a message."""
        raws = [raw for _, raw in store.items()]
        if any(len(raw) >= MAX_MESSAGE for raw in raws):
            return info
        for raw in raws:
            self.edit.add(LINK, raw)
        store.delete()
        return replace(info, heap_address=None, name_index_address=None, order_index_address=None)

    def land(self, added: dict[str, tuple[Link, bytes]], gone: set[str], redo: bool) -> None:
        """Deferred edits into the group's dense storage (or its header, or symbol table) at
        once: the names in `gone` out, then `added` in; below the group's minimum the links go
        compact again, none left frees the storage (as libhdf5 removes). `redo` (edits a crash
        left in the journal): a name to add the storage holds already, or one to remove it does
        not, is left out, logged."""
        if self.symbol_table is not None:
            self._land_symbol_table(added, gone, redo)
            return
        info = self.info
        if info is None:
            raise CannotWrite(f"{self.what}: a group with neither a symbol table nor link info, "
                              f"{len(added) + len(gone)} deferred edits wait")
        if info.heap_address is None:
            self._land_compact(added, gone, redo)
            return
        store = self._dense(info)
        encode = lambda name: name.encode("utf-8", "surrogateescape")   # noqa: E731
        removes = {encode(name) for name in gone}
        items = [(encode(name), raw, link.creation_order or 0) for name, (link, raw) in added.items()]
        if redo:
            for name in [n for n in removes if store.find(n) is None]:
                log.warning("%s: the journal removes a link named %r that is not there", self.what, name)
                removes.discard(name)
            for item in [item for item in items if item[0] not in removes and store.find(item[0]) is not None]:
                log.warning("%s: the journal adds a link named %r that is there already", self.what, item[0])
                items.remove(item)
        store.edit_many(removes, items)
        store.close()
        if not removes:
            return
        left = store.count()
        if left == 0:
            store.delete()
            info = replace(info, heap_address=None, name_index_address=None, order_index_address=None)
            if info.track_order:   # H5G__obj_remove_update_linfo starts numbering again
                info = replace(info, max_creation_index=0)
        elif left < self._phase()[1]:
            info = self._to_compact(info, store)
        if info != self.info:
            self._set_info(info)

    def _land_compact(self, added: dict[str, tuple[Link, bytes]], gone: set[str], redo: bool) -> None:
        """`land` into a group keeping its links in its header (new groups' links wait there too:
        model/fresh_groups.py): the names in `gone` out, then `added` in as `insert` adds them,
        the header encoded once; past the group's maximum its links go dense first, and those
        added land there."""
        for name in gone:
            if redo and self.lookup(name) is None:
                log.warning("%s: the journal removes a link named %r that is not there", self.what, name)
                continue
            self.remove(name)
        there = {ln.name for _, ln in self._compact()}
        if redo:
            for name in [n for n in added if n in there]:
                log.warning("%s: the journal adds a link named %r that is there already", self.what, name)
            added = {n: v for n, v in added.items() if n not in there}
        if len(there) + len(added) <= self._phase()[0] and all(len(raw) < MAX_MESSAGE for _, raw in added.values()):
            self.edit.add_all([(LINK, raw, 0, 0) for _, raw in added.values()])
            return
        info = self._to_dense(self.info)
        self._set_info(info)
        store = self._dense(info)
        store.edit_many(set(), [(name.encode("utf-8", "surrogateescape"), raw, link.creation_order or 0)
                                for name, (link, raw) in added.items()])
        store.close()

    def _land_symbol_table(self, added: dict[str, tuple[Link, bytes]], gone: set[str], redo: bool) -> None:
        """`land` into a symbol table: the names in `gone` out, then `added` in (in name
        order), every node and the heap edited once (symbol_table.edit_many)."""
        stab = self.symbol_table
        removes = sorted(name.encode("utf-8") for name in gone)
        inserts = [(name.encode("utf-8"), link) for name, (link, _) in sorted(added.items())]
        if redo:
            there = lambda key: symbol_table.lookup(self.txn, stab, key, self.what) is not None   # noqa: E731
            for key in [k for k in removes if not there(k)]:
                log.warning("%s: the journal removes a link named %r that is not there", self.what, key)
                removes.remove(key)
            for item in [item for item in inserts if item[0] not in removes and there(item[0])]:
                log.warning("%s: the journal adds a link named %r that is there already", self.what, item[0])
                inserts.remove(item)
        symbol_table.edit_many(self.txn, stab, removes, [(key, self._stab_link(link)) for key, link in inserts],
                               self.what)


def land_links(txn: Transaction, redo: bool = False) -> None:
    """Every link edit the store defers into its group's dense storage, in `txn` (whose record
    then says it holds every deferred edit before it): each group's heap and indexes edited once
    (GroupLinks.land). The objects to count down are deferred again, in `txn`: a later commit
    counts them down (`take_unrefs`), once no link in the file names what it frees."""
    pending = txn.store.pending
    if txn.lands or not pending:
        return
    txn.lands = True
    for group in pending.groups():
        if group in txn.store.damaged:   # a walk found it damaged since: its edits would build on that
            log.error("group at %d: %d link edits given up: the file is damaged there (%s)", group,
                      len(pending.of(group)) + len(pending.gone(group)), txn.store.damaged[group])
            continue
        txn.owners.add(group)
        GroupLinks(txn, group, f"group at {group}").land(pending.of(group), pending.gone(group), redo)
    for address, path in pending.unrefs:
        txn.defer_unref(address, path)


def take_unrefs(txn: Transaction) -> list[tuple[int, str]]:
    """The objects whose links the deferred removals took, to count down in `txn` (whose record
    then says it holds every deferred edit before it): (address, the path it had), in order."""
    pending = txn.store.pending
    if pending.groups():
        raise CannotWrite(f"objects counted down before {len(pending)} deferred link edits landed")
    txn.lands = True
    return list(pending.unrefs)


def _decode_link(raw: bytes, sizes, what: str) -> Link:
    return link_msg.decode(Reader(raw, 0, sizes, f"{what}: link message"))

