"""A batch of changes to a B-tree of either version: one change per key in key order, merged
into a node's sorted entries; even node splits; a node reached twice refused. Used by the v2
B-tree editor (storage/btree_v2/edit.py) and the v1 B-tree chunk index (storage/index/btree_v1.py)."""

from __future__ import annotations

from typing import Iterable, Sequence, TypeVar

from ..errors import FormatError

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


def not_twice(seen: set[int], address: int, what: str) -> None:
    """Refuse a node reached twice in one change (a cycle or a shared node: no tree)."""
    if address in seen:
        raise FormatError(f"{what}: node at {address} is reached twice")
    seen.add(address)
