"""A local heap (III.D) read and edited.

Reading: its prefix, then the data segment the prefix points to; `extents`: the blocks a heap
occupies.

Editing (`HeapEdit`, in a transaction) the way libhdf5's H5HL.c does, so that libhdf5 keeps
allocating from the heap afterwards without overwriting anything:

- objects take 8-byte-aligned room (H5HL_ALIGN); a free block is never smaller than the two
  fields it holds, aligned (H5HL_SIZEOF_FREE);
- `insert` (H5HL_insert) takes the first free block of the list that fits exactly or leaves a
  usable remainder, else grows the data segment by at least its size (doubling), extending a free
  block that ends the segment or prepending a new one; bytes the segment gains are zeros;
- `remove` (H5HL_remove) joins the freed room to an adjacent free block (and that one to the next
  block it then touches), or prepends it, or loses it when it is too small to hold the free-list
  fields; a free block ending a large segment shrinks the segment (H5HL__minimize_heap_space);
- the free list keeps libhdf5's order; undefined bytes (padding, freed names) keep what they held.

`stage` writes the heap back once per edit. A grown data segment goes to fresh space and the
prefix, rewritten in place, points to it (libhdf5 may extend the segment where it lies; the
structure is the same); the old segment is freed. A shrunk segment stays where it is, its tail
freed. Otherwise the prefix and the segment (one block when contiguous) are rewritten in place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import CannotWrite, FormatError
from ..format import local_heap as lh
from ..format.local_heap import PREFIX, LocalHeap, decode, decode_prefix, prefix_size

if TYPE_CHECKING:
    from .extent_sink import ExtentSink
    from .transaction import Transaction

MIN_HEAP = 128    # H5HL_MIN_HEAP: the segment size a shrink stops at


def read(reader, address: int | None, what: str) -> LocalHeap:
    label = f"{what}: local heap"
    prefix = reader.read(address, reader.sizes.layout(PREFIX).size, label)
    size, _, data_addr = decode_prefix(prefix, reader.sizes, label)
    return decode(prefix, reader.read(data_addr, size, f"{what}: local heap data"), reader.sizes, label)


def extents(out: ExtentSink, reader, path: str, address: int | None, label: str) -> LocalHeap | None:
    """The prefix's and the data segment's extents; the heap (None when met before or unreadable)."""
    if not out.first_time(("local heap", address)) or not out.add(address, prefix_size(reader.sizes), path, label):
        return None
    with out.guard(path, label):
        heap = read(reader, address, f"{path}: {label}")
        out.add(heap.data_address, len(heap.data), path, f"{label} data segment")
        return heap
    return None


class HeapEdit:
    """One local heap opened for editing in a transaction."""

    def __init__(self, txn: Transaction, address: int, heap: lh.LocalHeap, what: str):
        self.txn, self.address, self.what = txn, address, what
        self.data = bytearray(heap.data)
        self.free = [[b.offset, b.size] for b in heap.free]     # [offset, size], in list order
        self.data_address = heap.data_address
        self.stored_size = len(heap.data)      # the segment's size where it lies now
        self.free_size = lh.free_block_size(txn.sizes)
        self.limit = 1 << (8 * txn.sizes.length)              # offsets and sizes are lengths

    @classmethod
    def open(cls, txn: Transaction, address: int, what: str) -> HeapEdit:
        heap = read(txn.reader, address, what)
        for block in heap.free:
            if block.offset % 8 or block.size % 8:
                raise FormatError(f"{what}: local heap free block {block.offset}+{block.size} is not aligned")
        return cls(txn, address, heap, what)

    @classmethod
    def create(cls, txn: Transaction, size_hint: int, what: str) -> HeapEdit:
        """A new heap (H5HL_create): the prefix and the data segment in one block, all of it
        free. Nothing is written before `stage`."""
        size = lh.align(max(size_hint, lh.free_block_size(txn.sizes)))
        address = txn.allocate(lh.prefix_size(txn.sizes) + size)
        heap = lh.LocalHeap(bytes(size), address + lh.prefix_size(txn.sizes), (lh.FreeBlock(0, size),))
        edit = cls(txn, address, heap, what)
        edit.stored_size = 0     # nothing in the file yet
        return edit

    def string(self, offset: int) -> bytes:
        end = self.data.find(b"\0", offset) if 0 <= offset < len(self.data) else -1
        if end < 0:
            raise FormatError(f"{self.what}: no string at local heap offset {offset}")
        return bytes(self.data[offset:end])

    # -- H5HL_insert ---------------------------------------------------------------------------
    def insert(self, buf: bytes) -> int:
        """Store `buf`; its offset in the data segment."""
        need = lh.align(len(buf))
        last = None       # the free block nearest the end among those passed over
        for i, block in enumerate(self.free):
            if block[1] > need and block[1] - need >= self.free_size:
                offset = block[0]
                block[0] += need
                block[1] -= need
                break
            if block[1] == need:
                offset = block[0]
                del self.free[i]
                break
            if last is None or last[0] < block[0]:
                last = block
        else:
            offset = self._grow(need, last)
            self.data[offset + len(buf):] = bytes(len(self.data) - offset - len(buf))
        self.data[offset:offset + len(buf)] = buf
        return offset

    def _grow(self, need: int, last: list[int] | None) -> int:
        """Enlarge the segment for `need` bytes (at least doubling it); where they start."""
        old = len(self.data)
        at_end = last is not None and last[0] + last[1] == old
        more = max(need, old)
        if not at_end and more < need + self.free_size:
            more = need
        if old + more >= self.limit:
            raise CannotWrite(f"{self.what}: the local heap cannot grow past {self.limit - 1} bytes")
        self.data.extend(bytes(more))
        if at_end:
            offset = last[0]
            last[0] += need
            last[1] += more - need
            if last[1] < self.free_size:
                self.free.remove(last)
            return offset
        if more - need >= self.free_size:
            self.free.insert(0, [old + need, more - need])
        return old

    # -- H5HL_remove ---------------------------------------------------------------------------
    def remove(self, offset: int, size: int) -> None:
        """Give back the `size` bytes at `offset` (an object `insert` stored)."""
        size = lh.align(size)
        if offset % 8 or size <= 0 or offset + size > len(self.data):
            raise FormatError(f"{self.what}: cannot free {offset}+{size} of a {len(self.data)}-byte local heap")
        for i, block in enumerate(self.free):
            if offset + size == block[0]:
                block[0], block[1] = offset, block[1] + size
                self._join(i, True)
                return
            if block[0] + block[1] == offset:
                block[1] += size
                self._join(i, False)
                return
        if size < self.free_size:
            return    # too small to list: lost, as libhdf5 loses it
        self.free.insert(0, [offset, size])
        self._shrink_if_free_end(self.free[0])

    def _join(self, i: int, grew_down: bool) -> None:
        """Merge into free block `i` (grown down or up) the first later block it now touches."""
        block = self.free[i]
        for j in range(i + 1, len(self.free)):
            other = self.free[j]
            if (other[0] + other[1] == block[0]) if grew_down else (block[0] + block[1] == other[0]):
                if grew_down:
                    block[0] = other[0]
                block[1] += other[1]
                del self.free[j]
                break
        self._shrink_if_free_end(block)

    def _shrink_if_free_end(self, block: list[int]) -> None:
        if block[0] + block[1] == len(self.data) and 2 * block[1] > len(self.data):
            self._minimize()

    def _minimize(self) -> None:
        """H5HL__minimize_heap_space: cut a large free block ending the segment."""
        size = new = len(self.data)
        last = next((b for b in self.free if b[0] + b[1] == size), None)
        if last is None or last[1] < size // 2 or size <= MIN_HEAP:
            return
        while new > MIN_HEAP and new >= last[0] + self.free_size:
            new //= 2
        if new < last[0] + self.free_size:
            if len(self.free) == 1:
                last[1] = lh.align(2 * new - last[0])
                new = last[0] + last[1]
            else:
                new = last[0]
                self.free.remove(last)
        else:
            last[1] = lh.align(new - last[0])
            new = last[0] + last[1]
        del self.data[new:]

    # -- writing -------------------------------------------------------------------------------
    def record(self) -> lh.LocalHeap:
        return lh.LocalHeap(bytes(self.data), self.data_address,
                            tuple(lh.FreeBlock(o, s) for o, s in self.free))

    def stage(self) -> None:
        """Stage the heap's new state in the transaction (see the module docstring)."""
        txn, sizes = self.txn, self.txn.sizes
        size, old_address, old_size = len(self.data), self.data_address, self.stored_size
        moved = old_size and size > old_size
        if moved:
            self.data_address = txn.allocate(size)
        heap = self.record()
        prefix, data = lh.encode_prefix(heap, sizes), lh.encode_data(heap, sizes)
        if not old_size:           # a new heap: one block
            txn.write_new(self.address, prefix + data)
        elif moved:
            txn.write_new(self.data_address, data)
            txn.write_in_place(self.address, prefix)
            txn.free(old_address, old_size)
        else:
            if self.data_address == self.address + lh.prefix_size(sizes):
                txn.write_in_place(self.address, prefix + data)
            else:
                txn.write_in_place(self.address, prefix)
                txn.write_in_place(self.data_address, data)
            txn.free(self.data_address + size, old_size - size)
        self.stored_size = size
