"""Groups: old-style symbol tables, compact link messages, dense link storage."""

from __future__ import annotations

from ..errors import FormatError
from ..format.codec import Reader
from ..format.messages import link as link_msg
from ..format.messages.link import Link
from ..format.symbol_table_entry import CACHE_SOFTLINK, SymbolTableEntry
from ..storage import dense_storage, local_heap, symbol_table
from ..storage.btree_v2 import reader as btree_v2
from ..storage.fractal_heap.reader import FractalHeap
from . import messages as M
from .objects import H5Object, derived


class Group(H5Object):
    __slots__ = ()
    kind = "group"

    def links(self) -> list[Link]:
        """The links in display order (callers do not change the list): those the group stores
        (cached) as the link edits not landed yet leave them (storage/pending_links.py: they
        leave the group's state alone)."""
        pending = self.file.pending
        if not pending.holds(self.address):
            return self._links[0]
        added = {link.name: link for link, _ in list(pending.of(self.address).values())}
        gone = set(pending.gone(self.address))
        links = [ln for ln in self._links[0] if ln.name not in gone and ln.name not in added]
        info = self.message(M.LINK_INFO)   # (none: a symbol table, in name order)
        if info is not None and (info.track_order or info.index_order):   # numbered after every stored one
            return links + list(added.values())
        return sorted(links + list(added.values()), key=lambda ln: ln.name)

    def link(self, name: str) -> Link | None:
        deferred = self.file.pending.get(self.address, name)
        if deferred is not None:
            return deferred or None   # False: its stored link goes
        if not self.has("_links"):   # one descent of the group's index, not a listing
            stab = self._symbol_table()
            if stab is not None:
                return self.cached(("link", name), lambda: self._symbol_table_link(*stab, name), 400)
            info = self.message(M.LINK_INFO)
            if info is not None and info.heap_address is not None:
                return self.cached(("link", name), lambda: self._dense_link(info, name), 400)
        return self._links[1].get(name)

    def _symbol_table(self) -> tuple[int | None, int | None] | None:
        """(B-tree, local heap) addresses of an old-style group: its symbol table message, or
        the root's entry in the superblock caching them; None for a new-style group."""
        stab = self.message(M.SYMBOL_TABLE)
        if stab is not None:
            return stab.btree_address, stab.heap_address
        entry = self.file.root_entry if self.address == self.file.root_address else None
        if self.message(M.LINK_INFO) is None and entry is not None and entry.btree_address is not None:
            return entry.btree_address, entry.heap_address
        return None

    def _symbol_table_link(self, btree_addr: int | None, heap_addr: int | None, name: str) -> Link | None:
        what = f"{self.path}: symbol table"
        if btree_addr is None:
            return None
        heap = local_heap.read(self.file.reader, heap_addr, what)
        entry = symbol_table.find_entry(self.file.reader, btree_addr, heap, name.encode("utf-8", "surrogateescape"),
                                        what)
        return None if entry is None else _entry_link(entry, heap, what)

    def _dense_link(self, info, name: str) -> Link | None:
        raw = dense_storage.lookup(self.file.reader, dense_storage.LINKS, info.heap_address, info.name_index_address,
                                   name.encode("utf-8", "surrogateescape"), self.path)
        return None if raw is None else link_msg.decode(Reader(raw, 0, self.file.sizes, f"{self.path}: dense link"))

    @derived(lambda table: 300 + 400 * len(table[0]))  # a link record, its name, its dict slot
    def _links(self) -> tuple[list[Link], dict[str, Link]]:
        """The link table: in display order, and by name (the first of a duplicate name)."""
        links = self._read_links()
        by_name: dict[str, Link] = {}
        for ln in links:
            by_name.setdefault(ln.name, ln)
        return links, by_name

    def _read_links(self) -> list[Link]:
        stab = self._symbol_table()
        if stab is not None:
            return self._symbol_table_links(*stab)
        info = self.message(M.LINK_INFO)
        if info is not None and info.heap_address is not None:
            return self._dense_links(info)
        links = [self.decode(raw) for raw in self.header.find(M.LINK)]
        tracked = info is not None and info.track_order and all(ln.creation_order is not None for ln in links)
        links.sort(key=(lambda ln: ln.creation_order) if tracked else (lambda ln: ln.name))
        return links

    def _symbol_table_links(self, btree_addr: int | None, heap_addr: int | None) -> list[Link]:
        what = f"{self.path}: symbol table"
        heap = local_heap.read(self.file.reader, heap_addr, what)
        if btree_addr is None:
            return []
        return [_entry_link(entry, heap, what)
                for entry in symbol_table.group_entries(self.file.reader, btree_addr, what)]

    def _dense_links(self, info) -> list[Link]:
        what = f"{self.path}: dense links"
        heap = FractalHeap(self.file.reader, info.heap_address, what)
        by_order = info.index_order and info.order_index_address is not None
        index = info.order_index_address if by_order else info.name_index_address
        links = [link_msg.decode(Reader(heap.get(rec.heap_id), 0, self.file.sizes, what))
                 for rec in btree_v2.iterate(self.file.reader, index, what=what)]
        if not by_order:
            tracked = info.track_order and all(ln.creation_order is not None for ln in links)
            links.sort(key=(lambda ln: ln.creation_order) if tracked else (lambda ln: ln.name))
        return links

    def _compute_facts(self) -> dict[str, str]:
        out = super()._compute_facts()
        if self.header.first(M.SYMBOL_TABLE) is not None:
            out["storage"] = "symbol table"
        else:
            info = self.message(M.LINK_INFO)
            out["storage"] = "dense" if info is not None and info.heap_address is not None else "compact"
        return out


def _entry_link(entry: SymbolTableEntry, heap: local_heap.LocalHeap, what: str) -> Link:
    name = heap.string(entry.name_offset).decode("utf-8", "surrogateescape")
    if not name:
        raise FormatError(f"{what}: empty link name")
    if entry.cache_type == CACHE_SOFTLINK:
        target = heap.string(entry.softlink_offset).decode("utf-8", "surrogateescape")
        return Link(name, link_msg.SOFT, target=target)
    return Link(name, link_msg.HARD, address=entry.header_address)
