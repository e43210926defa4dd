"""Reads version 2 B-trees: headers and nodes through the file's metadata cache, every record in
key order (`iterate`, refusing cycles and shared nodes, checking the header's record count) or one
record by descending from the root (`find`); `extents`: the blocks a tree occupies."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator, TypeVar

from ...errors import FormatError
from ...format.btree_v2 import (BTreeV2Header, Node, decode_header, decode_node, decode_records, header_size,
                                node_label, record_decoder, used_size)
from ...format.codec import Reader

if TYPE_CHECKING:
    from ..extent_sink import ExtentSink

R = TypeVar("R")


def read_header(reader, address: int | None, what: str = "v2 B-tree") -> BTreeV2Header:
    def load() -> BTreeV2Header:
        buf = reader.read(address, header_size(reader.sizes), f"{what} header")
        return decode_header(buf, address, reader.sizes, f"{what} header at {address}")

    if address is None:
        return load()  # raises: undefined address
    return reader.meta.get(address, "bt2 header", load, 512)


def read_node(reader, hdr: BTreeV2Header, address: int | None, nrec: int, depth: int,
              what: str = "v2 B-tree") -> Node:
    """One node of `hdr`'s tree holding `nrec` records at `depth` (0 = leaf)."""
    size = used_size(hdr, address, nrec, depth, what)
    return decode_node(reader.read(address, size, node_label(hdr, address, depth, what)), hdr, address, nrec,
                       depth, what)


def decoded_node(reader, hdr: BTreeV2Header, addr: int, nrec: int, depth: int, decode_record,
             what: str) -> tuple[Node, list]:
    """A node and its decoded records, through the file's metadata cache."""
    def load() -> tuple[Node, list]:
        node = read_node(reader, hdr, addr, nrec, depth, what)
        return node, decode_records(hdr, node, decode_record, what)

    kind = ("bt2 node", hdr.address, nrec, depth, decode_record)
    return reader.meta.get(addr, kind, load, 200 + nrec * (hdr.record_size + 200))


def iterate(reader, address: int | None, decode_record: Callable[[Reader], R] | str | None = None,
            what: str = "v2 B-tree", expect_type: int | None = None,
            header: BTreeV2Header | None = None) -> Iterator[R]:
    """Every record of the tree whose header is at `address`, in key order.

    Without `decode_record` the decoder is chosen by the header's type (1-9; types 10/11 need
    `chunk_record_decoder`). A string in its place is taken as `what`.
    """
    if isinstance(decode_record, str):
        decode_record, what = None, decode_record
    hdr = header or read_header(reader, address, what)
    if decode_record is None:
        decode_record = record_decoder(hdr.type)
    if expect_type is not None and hdr.type != expect_type:
        raise FormatError(f"{what}: B-tree type {hdr.type}, expected {expect_type}")
    if hdr.root_address is None:
        return
    seen: set[int] = set()
    count = 0

    def walk(addr: int, nrec: int, depth: int) -> Iterator[R]:
        nonlocal count
        if addr in seen:
            raise FormatError(f"{what}: node at {addr} is reached twice (cycle or shared node)")
        seen.add(addr)
        node, recs = decoded_node(reader, hdr, addr, nrec, depth, decode_record, what)
        if depth == 0:
            count += len(recs)
            yield from recs
            return
        if len(node.children) > 1 and hasattr(reader, "want"):
            reader.want([ch.address for ch in node.children], hdr.node_size)
        for i, ch in enumerate(node.children):
            yield from walk(ch.address, ch.nrecords, depth - 1)
            if i < len(recs):
                count += 1
                yield recs[i]

    yield from walk(hdr.root_address, hdr.root_nrecords, hdr.depth)
    if count != hdr.total_records:
        raise FormatError(f"{what}: header counts {hdr.total_records} records, the nodes hold {count}")


def find(reader, address: int | None, compare: Callable[[R], int],
         decode_record: Callable[[Reader], R] | None = None, what: str = "v2 B-tree",
         header: BTreeV2Header | None = None) -> R | None:
    """The record for which compare(record) == 0, descending from the root only.

    `compare(record)` answers the sign of (wanted key - record's key): negative when the wanted
    key sorts before the record, 0 on a match, positive after it.
    """
    return find_with_leaf(reader, address, compare, decode_record, what, header)[0]


def find_with_leaf(reader, address: int | None, compare: Callable[[R], int],
                   decode_record: Callable[[Reader], R] | None = None, what: str = "v2 B-tree",
                   header: BTreeV2Header | None = None) -> tuple[R | None, list[R] | None]:
    """`find`'s record, and the records of the leaf the descent ended in (None when it ended
    on a match in an internal node): a key between that leaf's first and last lies in it."""
    hdr = header or read_header(reader, address, what)
    if decode_record is None:
        decode_record = record_decoder(hdr.type)
    if hdr.root_address is None:
        return None, None
    addr, nrec, depth = hdr.root_address, hdr.root_nrecords, hdr.depth
    for _ in range(hdr.depth + 1):
        node, recs = decoded_node(reader, hdr, addr, nrec, depth, decode_record, what)
        lo, hi = 0, len(recs)
        while lo < hi:  # first record whose key >= wanted
            mid = (lo + hi) // 2
            if compare(recs[mid]) > 0:
                lo = mid + 1
            else:
                hi = mid
        hit = recs[lo] if lo < len(recs) and compare(recs[lo]) == 0 else None
        if depth == 0:
            return hit, recs
        if hit is not None:
            return hit, None
        ch = node.children[lo]
        addr, nrec, depth = ch.address, ch.nrecords, depth - 1
    raise FormatError(f"{what}: descent did not end at a leaf")  # pragma: no cover


def extents(out: ExtentSink, reader, path: str, label: str, address: int | None, records: bool = False) -> list:
    """The header's and every node's extent; the records of types 1-9 when `records`."""
    hdr, found = None, []
    if not out.add(address, header_size(reader.sizes), path, f"{label} header"):
        return found
    with out.guard(path, f"{label} header"):
        hdr = read_header(reader, address, f"{path}: {label}")
    if hdr is None or hdr.root_address is None:
        return found
    what, whole = f"{label} node", True   # whole: every node read (else the count cannot add up)
    stack, seen, total = [(hdr.root_address, hdr.root_nrecords, hdr.depth)], set(), 0
    while stack:
        addr, nrec, depth = stack.pop()
        if addr in seen:
            out.problem(path, what, f"node at {addr} is reached twice (cycle or shared node)")
            whole = False
            continue
        seen.add(addr)
        read = False
        if out.add(addr, hdr.node_size, path, what):
            with out.guard(path, what):
                node = read_node(reader, hdr, addr, nrec, depth, f"{path}: {label}")
                if records:
                    found += decode_records(hdr, node, record_decoder(hdr.type), f"{path}: {label}")
                total += nrec
                stack += [(ch.address, ch.nrecords, depth - 1) for ch in node.children]
                read = True
        whole = whole and read
    if total != hdr.total_records and whole:
        out.problem(path, f"{label} header", f"counts {hdr.total_records} records, the nodes hold {total}")
    return found
