"""A fractal heap's huge objects edited (H5HFhuge.c): objects larger than the maximum managed
size, stored on their own (raw data in libhdf5's map) and listed in a v2 B-tree of type 1 or 3,
keyed by the huge ID (from ``next_huge_id``) or, when the ID holds address and length, by those.
The tree is edited by the generic v2 B-tree editor (btree_v2/edit.py)."""

from __future__ import annotations

from ...errors import FormatError, Unsupported
from ...format import btree_v2 as bt
from ...format.fractal_heap import HugeId, decode_id, encode_id
from ..btree_v2.edit import BTreeV2Edit
from ..btree_v2.edit import new_header as new_tree_header
from ..btree_v2 import reader as bt_reader
from .heap_state import HeapPart

HUGE_NODE_SIZE, HUGE_SPLIT, HUGE_MERGE = 512, 100, 40   # H5HF_HUGE_BT2_*


class HugeObjects(HeapPart):
    """Huge objects inserted, found, removed; the B-tree made with the first, freed with the last."""

    def insert(self, data: bytes) -> bytes:
        """H5HF__huge_insert: the object in its own space, recorded in the huge-object B-tree."""
        addr = self.state.alloc(len(data), raw=True)   # raw data in libhdf5's sec2 map
        self.state.put(addr, data)
        if self.g.huge_direct:
            rec, hid = bt.HugeObjectRecord(addr, len(data)), HugeId(address=addr, length=len(data))
        else:
            key = self.h.next_huge_id + 1
            if key >= 1 << (8 * self.g.huge_id_size):
                raise Unsupported(f"{self.what}: huge object IDs wrapped around")
            self.state.set(next_huge_id=key)
            rec, hid = bt.HugeObjectRecord(addr, len(data), id=key), HugeId(key=key)
        self._tree_put(rec)
        self.state.adjust(huge_count=1, huge_size=len(data))
        return encode_id(hid, self.g)

    def get(self, heap_id: bytes) -> bytes:
        rec = self.location(heap_id)
        return self.txn.reader.read(rec.address, rec.length, f"{self.what} huge object")

    def location(self, heap_id: bytes) -> bt.HugeObjectRecord:
        hid = decode_id(bytes(heap_id), self.g, self.what)
        if hid.key is None:
            return bt.HugeObjectRecord(hid.address, hid.length)
        what, key = f"{self.what} huge-object B-tree", hid.key
        if self.h.huge_btree_address is None:
            raise FormatError(f"{self.what}: huge object {key} but no huge-object B-tree")
        hdr = bt_reader.read_header(self.txn.reader, self.h.huge_btree_address, what)
        rec = bt_reader.find(self.txn.reader, hdr.address, lambda r: (key > r.id) - (key < r.id),
                             bt.record_decoder(hdr.type), what, header=hdr)
        if rec is None:
            raise FormatError(f"{self.what}: huge object {key} not found")
        return rec

    def remove(self, heap_id: bytes) -> None:
        """H5HF__huge_remove (and H5HF__huge_term once the last one goes)."""
        rec = self.location(heap_id)
        self._tree_drop(rec)
        self.txn.free(rec.address, rec.length, raw=True)
        self.state.adjust(huge_count=-1, huge_size=-rec.length)

    # -- the huge-object B-tree -------------------------------------------------------------------

    def _type(self) -> int:
        return bt.HUGE_DIRECT if self.g.huge_direct else bt.HUGE_INDIRECT

    def _key(self, r: bt.HugeObjectRecord):
        return r.id if r.id is not None and not self.g.huge_direct else (r.address, r.length)

    def _tree(self, todo: list) -> bt.BTreeV2Header:
        """Apply `todo` to the huge-object B-tree, made first when the heap has none."""
        what = f"{self.what} huge-object B-tree"
        if self.h.huge_btree_address is None:
            rsize = self.sizes.offset + self.sizes.length * (1 if self.g.huge_direct else 2)
            hdr, new = new_tree_header(self.sizes, self._type(), HUGE_NODE_SIZE, rsize, HUGE_SPLIT,
                                       HUGE_MERGE), True
        else:
            hdr, new = bt_reader.read_header(self.txn.reader, self.h.huge_btree_address, what), False
        hdr = BTreeV2Edit(self.txn, hdr, self._key, bt.record_decoder(hdr.type), bt.record_encoder(hdr.type),
                          what, new=new).apply(todo)
        self.state.set(huge_btree_address=hdr.address)
        return hdr

    def _tree_put(self, rec: bt.HugeObjectRecord) -> None:
        self._tree([(self._key(rec), rec)])

    def _tree_drop(self, rec: bt.HugeObjectRecord) -> None:
        hdr = self._tree([(self._key(rec), None)])
        if hdr.total_records == 0:     # H5HF__huge_term: the tree goes with the last huge object
            self.txn.free(hdr.address, bt.header_size(self.sizes))
            self.state.set(huge_btree_address=None, next_huge_id=0)
