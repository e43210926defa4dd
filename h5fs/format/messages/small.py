"""Small informational messages: object reference count (0x16), comment (0x0D), B-tree 'K' values
(0x13), group info (0x0A)."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError
from ..codec import Reader


def decode_refcount(c: Reader) -> int:
    if c.u8() != 0:
        raise FormatError("reference count message: unknown version")
    return c.u32()


def decode_comment(c: Reader) -> str:
    raw = c.bytes(c.remaining())
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


@dataclass(frozen=True)
class BTreeK:
    indexed_storage_internal: int
    group_internal: int
    group_leaf: int


def decode_btree_k(c: Reader) -> BTreeK:
    if c.u8() != 0:
        raise FormatError("B-tree 'K' values message: unknown version")
    return BTreeK(c.u16(), c.u16(), c.u16())


@dataclass(frozen=True)
class GroupInfo:
    max_compact: int | None
    min_dense: int | None
    est_entries: int
    est_name_len: int


def decode_group_info(c: Reader) -> GroupInfo:
    if c.u8() != 0:
        raise FormatError("group info message: unknown version")
    flags = c.u8()
    max_compact = min_dense = None
    if flags & 1:
        max_compact, min_dense = c.u16(), c.u16()
    est, nlen = 4, 8
    if flags & 2:
        est, nlen = c.u16(), c.u16()
    return GroupInfo(max_compact, min_dense, est, nlen)
