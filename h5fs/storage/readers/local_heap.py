"""Reads a local heap: its prefix, then the data segment the prefix points to."""

from __future__ import annotations

from ...format.local_heap import PREFIX, LocalHeap, decode, decode_prefix


def read(reader, address: int | None, what: str) -> LocalHeap:
    label = f"{what}: local heap"
    prefix = reader.read(address, reader.sizes.layout(PREFIX).size, label)
    size, _, data_addr = decode_prefix(prefix, reader.sizes, label)
    return decode(prefix, reader.read(data_addr, size, f"{what}: local heap data"), reader.sizes, label)
