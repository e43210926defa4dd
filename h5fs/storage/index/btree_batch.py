"""What the write sides of the two B-tree chunk indexes share: a batch of changes in key order,
merged into a node's sorted entries, and even node splits."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence, TypeVar

from ...errors import FormatError
from . import ChunkRecord, IndexContext

if TYPE_CHECKING:
    from ..transaction import Transaction

K = TypeVar("K")
V = TypeVar("V")


def changes(puts: Iterable[tuple[K, V]], removes: Iterable[K] = ()) -> list[tuple[K, V | None]]:
    """(key, new value or None to remove) by key, one per key: the last word on a key wins
    (removals come after the puts of the same batch)."""
    out: dict[K, V | None] = {k: v for k, v in puts}
    out.update((k, None) for k in removes)
    return sorted(out.items(), key=lambda kv: kv[0])


def merged(old: Sequence[tuple[K, V]], todo: Sequence[tuple[K, V | None]]) -> list[tuple[K, V]]:
    """`old` (sorted by key) with `todo` applied: values replaced or inserted, None removes."""
    out: list[tuple[K, V]] = []
    i = 0
    for key, value in todo:
        while i < len(old) and old[i][0] < key:
            out.append(old[i])
            i += 1
        if i < len(old) and old[i][0] == key:
            i += 1
        if value is not None:
            out.append((key, value))
    out.extend(old[i:])
    return out


def spans(n: int, groups: int) -> list[tuple[int, int]]:
    """[start, end) of `groups` consecutive runs of n items, sizes differing by at most one."""
    q, r = divmod(n, groups)
    out, start = [], 0
    for g in range(groups):
        end = start + q + (g < r)
        out.append((start, end))
        start = end
    return out


def check_coords(rec_coords: Iterable[tuple[int, ...]], rank: int, what: str) -> None:
    for c in rec_coords:
        if len(c) != rank or any(x < 0 for x in c):
            raise ValueError(f"{what}: chunk coordinates {c} for a rank-{rank} index")


def check_size(rec: ChunkRecord, limit: int, what: str) -> None:
    """A stored chunk size must fit the index's field (`limit`: its first value too large)."""
    if not 0 < rec.size < limit:
        raise ValueError(f"{what}: chunk {rec.coords} of {rec.size} bytes does not fit the index")


def not_twice(seen: set[int], address: int, what: str) -> None:
    """Refuse a node reached twice in one change (a cycle or a shared node: no tree)."""
    if address in seen:
        raise FormatError(f"{what}: node at {address} is reached twice")
    seen.add(address)


def same_view(ctx: IndexContext, txn: Transaction, what: str) -> None:
    """Nodes are read (and cached) through the index's reader: it must show the transaction's
    staged blocks, or a second change in one transaction would build on stale nodes."""
    if ctx.reader is not txn.reader:
        raise ValueError(f"{what}: the index to change must be opened on the transaction's reader")
