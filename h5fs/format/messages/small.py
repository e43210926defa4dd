"""Small informational messages: object reference count (0x16), comment (0x0D), B-tree 'K' values
(0x13), group info (0x0A).

The reference count decodes to its int and the comment to its str (what the model uses); both
are the whole message, so they encode back from that value. A comment decodes with
surrogateescape, so any bytes survive; only a comment missing its terminating NUL gains one.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError
from ..codec import Reader, Writer


def decode_refcount(c: Reader) -> int:
    if c.u8() != 0:
        raise FormatError("reference count message: unknown version")
    return c.u32()


def encode_refcount(w: Writer, count: int) -> None:
    w.fields("BI", 0, count)


def decode_comment(c: Reader) -> str:
    raw = c.bytes(c.remaining())
    return raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def encode_comment(w: Writer, text: str) -> None:
    w.cstring(text.encode("utf-8", "surrogateescape"))


@dataclass(frozen=True, slots=True)
class BTreeK:
    indexed_storage_internal: int
    group_internal: int
    group_leaf: int


def decode_btree_k(c: Reader) -> BTreeK:
    if c.u8() != 0:
        raise FormatError("B-tree 'K' values message: unknown version")
    return BTreeK(*c.fields("HHH"))


def encode_btree_k(w: Writer, k: BTreeK) -> None:
    w.fields("BHHH", 0, k.indexed_storage_internal, k.group_internal, k.group_leaf)


GI_PHASE_CHANGE, GI_ESTIMATES = 0x01, 0x02


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """None: the pair is not stored (libhdf5 then assumes 8/6 links and 4 entries of 8 bytes)."""

    max_compact: int | None
    min_dense: int | None
    est_entries: int | None
    est_name_len: int | None


def decode_group_info(c: Reader) -> GroupInfo:
    if c.u8() != 0:
        raise FormatError("group info message: unknown version")
    flags = c.u8()
    max_compact, min_dense = c.fields("HH") if flags & GI_PHASE_CHANGE else (None, None)
    est, nlen = c.fields("HH") if flags & GI_ESTIMATES else (None, None)
    return GroupInfo(max_compact, min_dense, est, nlen)


def encode_group_info(w: Writer, gi: GroupInfo) -> None:
    phase, estimates = gi.max_compact is not None, gi.est_entries is not None
    w.fields("BB", 0, (GI_PHASE_CHANGE if phase else 0) | (GI_ESTIMATES if estimates else 0))
    if phase:
        w.fields("HH", gi.max_compact, gi.min_dense)
    if estimates:
        w.fields("HH", gi.est_entries, gi.est_name_len)
