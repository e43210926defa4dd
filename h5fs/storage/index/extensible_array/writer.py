"""Writes an extensible array chunk index (layout index type 4): one batch of put and removed chunks.

Blocks appear as libhdf5 makes them (H5EA.c H5EA__lookup_elmt and H5EA_set, H5EAiblock.c,
H5EAsblock.c, H5EAdblock.c, H5EAdblkpage.c):
- the header with the index, from the layout message's parameters, its counters zero;
- the index block at the first chunk (the header's count of elements grows by its own ones);
- a super block, a data block when a chunk first lands in it (super blocks: the count and total
  size of super blocks; data blocks: of data blocks, and the count of elements by its own; a paged
  data block's size counts every page, allocated with it); a page when a chunk first lands in it,
  its bit set in the super block's page-init bitmap. New blocks hold undefined elements (and
  addresses) but the batch's.
- block offsets: a super block's is its first element (after the index block's); a data block's
  is its super block's first element plus its index times its size, the index counted in the
  super block, or for the data blocks the index block points to, among all of those (libhdf5's
  `dblk_off`);
- the largest slot set plus one is the header's max index set; a removal writes the undefined
  element back and frees nothing (nor does libhdf5).

Each block and page the batch touches is read once and written once: new ones with `write_new`,
live ones in place with their checksum recomputed (the journal makes the commit atomic), the
header in place when a counter changes. A new array's header goes to fresh space: the layout
message the put returns publishes it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from ....errors import Unsupported
from ....format.extensible_array import (DataBlock, ExtensibleArrayHeader, IndexBlock, SuperBlock, data_block_size,
                                        decode_header, encode_data_block, encode_header, encode_index_block,
                                        encode_super_block, header_size, index_block_size, super_block_index,
                                        super_block_size)
from ....format.fixed_array import bit_set, encode_page
from ....format.messages.layout import DataLayout
from .. import ChunkRecord
from ..array_index import ArrayWriter, Slots, by_page, patched, set_bit
from .reader import ExtensibleArray


class ExtensibleArrayWriter(ArrayWriter):
    def apply(self, records: Sequence[ChunkRecord], removed: Sequence[tuple[int, ...]]) -> DataLayout | None:
        fmt = self.fmt
        todo = self.changes(records, removed)
        adds = [slot for slot, raw in todo.items() if raw != fmt.fill]
        creating = self.index.array is None
        if (creating or self.index.array.header.iblock_address is None) and not adds:
            return None   # only removals, and no chunk was ever indexed
        arr = self._new_array() if creating else self.index.array
        self.arr, self.h = arr, arr.header
        iblock, routed = {}, {}
        for slot, raw in todo.items():
            if slot < self.h.idx_blk_elmts:
                iblock[slot] = raw
                continue
            u = super_block_index(self.h, slot)
            info = arr.sblk_info[u]
            d, k = divmod(slot - self.h.idx_blk_elmts - info.start_idx, info.dblk_nelmts)
            routed.setdefault(u, {}).setdefault(d, {})[k] = raw
        self._index_block(iblock, routed)
        self.h = replace(self.h, max_idx_set=max(self.h.max_idx_set, max(adds, default=-1) + 1))
        if creating:
            self.txn.write_new(self.h.address, encode_header(self.h, self.sizes))
        elif self.h != arr.header:
            self.txn.write_in_place(self.h.address, encode_header(self.h, self.sizes))
        arr.header = self.h   # what the reader would decode from the staged header
        self.index.open_array(arr)
        return self.published(self.h.address) if creating else None

    def _new_array(self) -> ExtensibleArray:
        """A header with the layout message's parameters, staged in fresh space (it is staged
        again with its counters at the end) and opened through the transaction's reader."""
        info, sizes = self.index.ctx.layout.index, self.sizes
        h = ExtensibleArrayHeader(self.txn.allocate(header_size(sizes)), self.fmt.version, self.fmt.client_id, self.fmt.size,
                                  info.max_bits, info.index_elements, info.min_elements, info.min_pointers,
                                  info.page_bits, 0, 0, 0, 0, 0, 0, None)
        raw = encode_header(h, sizes)
        decode_header(raw, h.address, sizes, self.index.what)   # the parameters are sound
        self.txn.write_new(h.address, raw)
        return ExtensibleArray(self.txn.reader, h.address, self.index.what)

    def _count(self, **grown: int) -> None:
        """Add to the header's counters."""
        self.h = replace(self.h, **{k: getattr(self.h, k) + v for k, v in grown.items()})

    def _index_block(self, elements: Slots, routed: dict[int, dict[int, Slots]]) -> None:
        arr, h = self.arr, self.h
        if h.iblock_address is None:
            size = index_block_size(h, self.sizes, arr.iblock_ndblk_addrs, arr.iblock_nsblk_addrs)
            old = None
            ib = IndexBlock(self.txn.allocate(size), self.fmt.fill * h.idx_blk_elmts,
                            (None,) * arr.iblock_ndblk_addrs, (None,) * arr.iblock_nsblk_addrs)
            self.h = replace(h, iblock_address=ib.address, num_elements=h.num_elements + h.idx_blk_elmts)
        else:
            old = ib = arr.index_block_record()
        dblks, sblks = list(ib.dblock_addresses), list(ib.sblock_addresses)
        for u, dblocks in sorted(routed.items()):
            info = arr.sblk_info[u]
            if u >= arr.iblock_nsblks:
                s = u - arr.iblock_nsblks
                sblks[s] = self._super_block(sblks[s], u, dblocks)
                continue
            if arr.npages(u):
                raise Unsupported(f"{self.index.what}: paged data blocks in the index block (libhdf5 cannot read them)")
            for d, items in sorted(dblocks.items()):
                j = info.start_dblk + d
                dblks[j] = self._data_block(dblks[j], u, info.start_idx + j * info.dblk_nelmts, items)
        ib = IndexBlock(ib.address, patched(ib.elements, elements, 0, self.fmt.size), tuple(dblks), tuple(sblks))
        self.stage(old, ib, encode_index_block, self.h)

    def _super_block(self, address: int | None, u: int, dblocks: dict[int, Slots]) -> int | None:
        arr, info = self.arr, self.arr.sblk_info[u]
        if address is None:
            if not self.fmt.adds(raw for items in dblocks.values() for raw in items.values()):
                return None
            size = super_block_size(self.h, self.sizes, arr.bitmap_size(u), info.ndblks)
            old = None
            sb = SuperBlock(self.txn.allocate(size), info.start_idx, bytes(arr.bitmap_size(u)), (None,) * info.ndblks)
            self._count(num_super_blocks=1, super_block_size=size)
        else:
            old = sb = arr.super_block_record(u, address)
        bitmap, dblks = bytearray(sb.bitmap), list(sb.dblock_addresses)
        npages = arr.npages(u)
        for d, items in sorted(dblocks.items()):
            offset = info.start_idx + d * info.dblk_nelmts
            if npages:
                dblks[d] = self._paged_data_block(dblks[d], u, offset, items, bitmap, d * npages)
            else:
                dblks[d] = self._data_block(dblks[d], u, offset, items)
        sb = SuperBlock(sb.address, sb.block_offset, bytes(bitmap), tuple(dblks))
        self.stage(old, sb, encode_super_block, self.h)
        return sb.address

    def _data_block(self, address: int | None, u: int, offset: int, items: Slots) -> int | None:
        """An unpaged data block of super block `u` with `items` (slots within the block)."""
        n, es = self.arr.sblk_info[u].dblk_nelmts, self.fmt.size
        if address is None:
            if not self.fmt.adds(items.values()):
                return None
            size = data_block_size(self.h, self.sizes, n)
            old, db = None, DataBlock(self.txn.allocate(size), offset, patched(self.fmt.fill * n, items, 0, es))
            self._count(num_data_blocks=1, data_block_size=size, num_elements=n)
        else:
            old = self.arr.data_block_record(address, n)
            db = replace(old, elements=patched(old.elements, items, 0, es))
        self.stage(old, db, encode_data_block, self.h)
        return db.address

    def _paged_data_block(self, address: int | None, u: int, offset: int, items: Slots, bitmap: bytearray,
                          first_bit: int) -> int | None:
        """A paged data block of super block `u` with `items`; its pages' bits in `bitmap` start
        at `first_bit`."""
        arr, fmt = self.arr, self.fmt
        n, page_nelmts = arr.sblk_info[u].dblk_nelmts, arr.page_nelmts
        prefix = data_block_size(self.h, self.sizes, 0)
        live = address is not None
        if not live:
            if not fmt.adds(items.values()):
                return None
            size = prefix + n * fmt.size + (n // page_nelmts) * 4
            address = self.txn.allocate(size)
            self.stage(None, DataBlock(address, offset, b""), encode_data_block, self.h)
            self._count(num_data_blocks=1, data_block_size=size, num_elements=n)
        else:
            arr.data_block_record(address, 0)   # its prefix is sound
        page_size = page_nelmts * fmt.size + 4
        for page, part in sorted(by_page(items, page_nelmts).items()):
            at = address + prefix + page * page_size
            base = page * page_nelmts
            if live and bit_set(bitmap, first_bit + page):
                old = arr.data_block_page(address, page, False)
                data = patched(old, part, base, fmt.size)
                if data != old:
                    self.txn.write_in_place(at, encode_page(data))
            elif fmt.adds(part.values()):
                self.txn.write_new(at, encode_page(patched(fmt.fill * page_nelmts, part, base, fmt.size)))
                set_bit(bitmap, first_bit + page)
        return address
