"""Where a structure's `extents` function reports the blocks it occupies.

Each structure's module says which blocks the structure occupies, once (`extents` in
superblock.py, object_header/reader.py, local_heap.py, symbol_table.py, btree_v1.py,
btree_v2/reader.py, fractal_heap/reader.py, free_space_manager.py, sohm_table/reader.py,
global_heap.py, index/fixed_array.py, index/extensible_array/reader.py). Two kinds of sink
listen:
- the space map's walk (storage/space_walk.py) records each block; a block outside the file, or
  one that cannot be read, is a problem of that structure, and the walk goes on with the rest;
- a writer deleting a structure (`Freeing`) frees each block in its transaction; what cannot be
  read raises, and the transaction fails with nothing freed.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, ContextManager, Protocol

from ..errors import FormatError

if TYPE_CHECKING:
    from .transaction import Transaction


class ExtentSink(Protocol):
    def add(self, address: int | None, size: int, path: str, structure: str, raw: bool = False) -> bool:
        """Take the block at [address, address + size) (`raw`: raw data); False when it must
        not be read (it lies outside the file)."""

    def guard(self, path: str, structure: str) -> ContextManager[None]:
        """Around reading a block: what the reading raises becomes a problem of `structure`
        (the code after the block goes on), or goes up."""

    def problem(self, path: str, structure: str, error: BaseException | str) -> None:
        """Damage found in `structure` of the object at `path`."""

    def first_time(self, key: object) -> bool:
        """Whether `key` (a structure more than one object may name) is met the first time."""


class Freeing:
    """A writer's sink: every block is freed in `txn` (as the walk would record it); damage
    raises."""

    def __init__(self, txn: Transaction):
        self.txn = txn
        self.seen: set[object] = set()

    def add(self, address: int | None, size: int, path: str, structure: str, raw: bool = False) -> bool:
        if address is None:
            self.problem(path, structure, "undefined address")
        self.txn.free(address, size, raw)
        return True

    def guard(self, path: str, structure: str) -> ContextManager[None]:
        return contextlib.nullcontext()

    def problem(self, path: str, structure: str, error: BaseException | str) -> None:
        raise FormatError(f"{path}: {structure}: {error}")

    def first_time(self, key: object) -> bool:
        if key in self.seen:
            return False
        self.seen.add(key)
        return True
