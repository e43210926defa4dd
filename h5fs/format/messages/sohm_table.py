"""Shared Object Header Message Table message (0x000F), the master table (SMTB) it points to and
the record lists (SMLI) of list-type indexes (III.I).

An SMLI block is allocated for the index's list cutoff, but holds only its number of messages,
then the checksum; libhdf5 zero-fills the rest, and so does a writer placing `encode_list`'s bytes
in such a block. A record kept in an object header is shorter than its slot: the unused tail of the
slot is written as zeros.

Pure bytes <-> records; h5fs.storage.sohm_table reads the table from the file.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError
from .. import checksum
from ..btree_v2 import SharedMessageRecord, decode_sohm, encode_sohm
from ..codec import Reader, Sizes, Writer

MAX_INDEXES = 32
TABLE_SIGNATURE, LIST_SIGNATURE = b"SMTB", b"SMLI"
LIST, BTREE = 0, 1
INDEX_ENTRY = "BBHIHHHOO"


def type_bit(mtype: int) -> int:
    """The bit of an index's message-type flags that tracks message type `mtype`.

    The spec's table (III.I) numbers the bits 0-4 for dataspace, datatype, fill value, filter
    pipeline and attribute; libhdf5 (H5O_SHMESG_*_FLAG) stores 1 << message type instead, and
    real files win.
    """
    return 1 << mtype


@dataclass(frozen=True, slots=True)
class SohmIndex:
    index_type: int          # 0 list, 1 v2 B-tree
    message_types: int
    heap_address: int | None
    index_address: int | None
    version: int = 0
    min_message_size: int = 0    # smaller messages are not shared
    list_cutoff: int = 50        # more messages than this: the list becomes a v2 B-tree
    btree_cutoff: int = 40       # fewer than this: the v2 B-tree becomes a list
    num_messages: int = 0


@dataclass(frozen=True, slots=True)
class SohmTableMessage:
    table_address: int | None
    nindexes: int


def decode(c: Reader) -> SohmTableMessage:
    if c.u8() != 0:
        raise FormatError("shared message table message: unknown version")
    address, nindexes = c.fields("OB")
    return SohmTableMessage(c.sizes.address(address), nindexes)


def encode(w: Writer, msg: SohmTableMessage) -> None:
    w.fields("BOB", 0, w.sizes.raw_address(msg.table_address), msg.nindexes)


def table_size(sizes: Sizes, nindexes: int) -> int:
    """Bytes of an SMTB block with `nindexes` indexes."""
    return 4 + nindexes * sizes.layout(INDEX_ENTRY).size + 4


def decode_table(c: Reader, nindexes: int) -> list[SohmIndex]:
    """An SMTB block of `nindexes` indexes (checksum verified)."""
    _checked(c, table_size(c.sizes, nindexes), TABLE_SIGNATURE, "shared message table")
    out = []
    for _ in range(nindexes):
        version, itype, flags, min_size, list_cut, btree_cut, count, index_addr, heap_addr = c.fields(INDEX_ENTRY)
        out.append(SohmIndex(itype, flags, c.sizes.address(heap_addr), c.sizes.address(index_addr),
                             version, min_size, list_cut, btree_cut, count))
    c.skip(4)
    return out


def encode_table(w: Writer, indexes: list[SohmIndex]) -> None:
    start = w.pos
    w.bytes(TABLE_SIGNATURE)
    for i in indexes:
        w.fields(INDEX_ENTRY, i.version, i.index_type, i.message_types, i.min_message_size, i.list_cutoff,
                 i.btree_cutoff, i.num_messages, w.sizes.raw_address(i.index_address),
                 w.sizes.raw_address(i.heap_address))
    _seal(w, start)


def list_slot(sizes: Sizes) -> int:
    """Bytes of one record slot in an SMLI block: location, hash and the longer of the two forms
    (reference count + heap ID, or reserved, message type, creation index + object header address)."""
    return 1 + 4 + max(4 + 8, 4 + sizes.offset)


def list_size(sizes: Sizes, count: int) -> int:
    """Bytes of an SMLI block's signature, `count` records and checksum."""
    return 4 + count * list_slot(sizes) + 4


def decode_list(c: Reader, count: int) -> list[SharedMessageRecord]:
    """The `count` records of an SMLI block (checksum verified)."""
    _checked(c, list_size(c.sizes, count), LIST_SIGNATURE, "shared message list")
    slot = list_slot(c.sizes)
    out = []
    for _ in range(count):
        end = c.pos + slot
        out.append(decode_sohm(c))
        c.pos = end
    c.skip(4)
    return out


def encode_list(w: Writer, records: list[SharedMessageRecord]) -> None:
    start = w.pos
    w.bytes(LIST_SIGNATURE)
    slot = list_slot(w.sizes)
    for r in records:
        end = w.pos + slot
        encode_sohm(w, r)
        w.zeros(end - w.pos)
    _seal(w, start)


def _checked(c: Reader, size: int, signature: bytes, what: str) -> None:
    """Verify the checksum of the `size`-byte block at the reader's position, then its signature."""
    c.need(size)
    checksum.verify(c.buf[c.pos:c.pos + size], what)
    c.signature(signature)


def _seal(w: Writer, start: int) -> None:
    w.u32(checksum.checksum(w.buf[start:]))
