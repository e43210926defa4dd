"""Global heap IDs and object references inside element bytes (vlen data, old region
references, revised references, old-style object references), found for whole arrays of
elements at once: what the space walk follows to global heap collections and records as the
objects references name (storage/space_walk.py)."""

from __future__ import annotations

from math import prod
from typing import Iterator

import numpy as np

from ..errors import Unsupported
from ..format.messages import datatype as dtm

VLEN, REF_REGION1, REF_REVISED = "vlen", "region reference", "reference"
OBJECT = "object reference"                # an old-style object reference: an address, no heap ID
REF_EXTERNAL = "reference to another file"   # a revised reference whose heap object names another file
REVISED_INLINE = 3   # a revised object reference in this file: type, flags, token size, then the token
MAX_HEAP_IDS = 1 << 16   # heap IDs one element may hold (an array of vlen data) that the walk follows


def heap_id_fields(dt, at: int = 0) -> list[tuple[int, str, object]]:
    """(offset in the element, kind, vlen base type) of every global heap ID an element of `dt`
    holds, and of every old-style object reference (kind OBJECT: an address): vlen data (a
    4-byte length, then the ID), old region references (the ID), revised references (a 2-byte
    header, a 4-byte size, then the ID, unless inline)."""
    if isinstance(dt, dtm.VarLen):
        return [(at + 4, VLEN, dt.base)]
    if isinstance(dt, dtm.Reference):
        if dt.ref_type == dtm.REF_OBJECT1:
            return [(at, OBJECT, None)]
        if dt.ref_type == dtm.REF_REGION1:
            return [(at, REF_REGION1, None)]
        return [(at, REF_REVISED, None)] if dt.ref_type in (dtm.REF_OBJECT2, dtm.REF_REGION2, dtm.REF_ATTR) else []
    if isinstance(dt, dtm.Compound):
        return [f for m in dt.members for f in heap_id_fields(m.type, at + m.offset)]
    if isinstance(dt, dtm.Array):
        inner = heap_id_fields(dt.base)
        if len(inner) * prod(dt.dims) > MAX_HEAP_IDS:
            raise Unsupported(f"elements of {len(inner) * prod(dt.dims)} global heap IDs (at most {MAX_HEAP_IDS} "
                              "are followed)")
        return [(at + k * dt.base.size + off, kind, base) for k in range(prod(dt.dims)) for off, kind, base in inner]
    return []


def _rows(raw: bytes, size: int) -> np.ndarray:
    count = len(raw) // size
    return np.frombuffer(raw, np.uint8, count * size).reshape(count, size)


def _inline_object(arr: np.ndarray, off: int) -> np.ndarray:
    """Which revised references at `off` are object references to this file (held inline)."""
    return (arr[:, off] == dtm.REF_OBJECT2) & (arr[:, off + 1] & 1 == 0)


def heap_ids(raw: bytes, size: int, fields, offset_size: int) -> Iterator[tuple[int, int, str, object]]:
    """(collection address, object index, kind, vlen base) of every non-empty heap ID in `raw`
    (whole elements of `size` bytes), each pair once; a revised reference to another file is of
    kind REF_EXTERNAL."""
    arr = _rows(raw, size)
    if not len(arr):
        return
    undefined = (1 << 8 * offset_size) - 1
    seen: set[tuple[int, int]] = set()
    for off, kind, base in fields:
        if kind == OBJECT:
            continue
        if kind == REF_REVISED:   # inline object references to this file name no heap object
            external = arr[:, off + 1] & 1 == 1
            keep = (arr[:, off] != 0) & ~_inline_object(arr, off)
            parts = [(keep & ~external, REF_REVISED), (keep & external, REF_EXTERNAL)]
            off += 6
        elif kind == VLEN:
            parts = [(_uint(arr, off - 4, 4) != 0, kind)]
        else:
            parts = [(np.ones(len(arr), bool), kind)]
        for keep, named in parts:
            addr, index = _uint(arr, off, offset_size)[keep], _uint(arr, off + offset_size, 4)[keep]
            for pair in zip(addr.tolist(), index.tolist()):
                if pair[0] not in (0, undefined) and pair not in seen:
                    seen.add(pair)
                    yield pair[0], pair[1], named, base


def object_addresses(raw: bytes, size: int, fields, offset_size: int) -> set[int]:
    """The object addresses the object references held in `raw` name: old-style ones (kind
    OBJECT) and revised ones to this file (held inline); null references left out."""
    arr = _rows(raw, size)
    out: set[int] = set()
    for off, kind, _ in fields if len(arr) else ():
        if kind == OBJECT:
            out.update(_uint(arr, off, offset_size).tolist())
        elif kind == REF_REVISED:
            inline = arr[_inline_object(arr, off) & (arr[:, off + 2] >= offset_size)]
            out.update(_uint(inline, off + REVISED_INLINE, offset_size).tolist())
    out.discard(0)
    out.discard((1 << 8 * offset_size) - 1)
    return out


def heap_reference(data: bytes, kind: str, offset_size: int) -> int | None:
    """The object a reference's global heap object names: an old region reference's begins with
    the address, a revised reference's with the token's size and the token (whose first bytes
    are the address); None for other kinds and tokens too short."""
    if kind == REF_REGION1 and len(data) >= offset_size:
        return int.from_bytes(data[:offset_size], "little")
    if kind == REF_REVISED and len(data) > offset_size and data[0] >= offset_size:
        return int.from_bytes(data[1:1 + offset_size], "little")
    return None


def _uint(arr: np.ndarray, off: int, width: int) -> np.ndarray:
    """The little-endian unsigned field at byte `off` of every row."""
    out = np.zeros(len(arr), np.uint64)
    for i in range(width):
        out |= arr[:, off + i].astype(np.uint64) << np.uint64(8 * i)
    return out
