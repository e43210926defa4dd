"""Reads a local heap: its prefix, then the data segment the prefix points to; `extents`: the
blocks a heap occupies."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...format.local_heap import PREFIX, LocalHeap, decode, decode_prefix, prefix_size

if TYPE_CHECKING:
    from ..extent_sink import ExtentSink


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
