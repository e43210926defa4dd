"""File and directory handles: the per-open state of the mount.

- `open` gives each open file its own handle (two readers of one file never share prefetch
  state): the inode, the engine object it reads (a handle into the file's caches, held only
  while open), and for a view the bytes that precede the data (the `.npy` header, or a named
  datatype's whole text).
- `opendir` gives each open directory a snapshot of its entries, taken at opendir; a readdir
  cookie is an index into that snapshot, so an entry is never skipped nor repeated however
  the directory changes while it is read (POSIX: a name added or removed meanwhile may or may
  not show). `releasedir` drops the snapshot.
Handle numbers are never reused while mounted. Only the trio thread touches them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

from ..model.namespace import Entry
from ..model.npy_ingest import NpyIngest


@dataclass(frozen=True, slots=True)
class OpenFile:
    ino: int
    kind: str
    obj: object          # the engine object (a dataset or a named datatype)
    prefix: bytes        # served before the data: the .npy header, a named datatype's text
    size: int            # bytes of data after the prefix


@dataclass(slots=True)
class NpyStream:
    """A `.npy` file being created (`cp x.npy DIR/`): once its header is whole (the model's
    `ingest` says what came and where each piece goes: model/npy_ingest.py), dataset `name` is
    made from it and the rest is written into it as it comes. Or one replacing an existing
    `D.npy` (opened with O_TRUNC): the array goes into a dataset no link names, which gives D
    its data at close. With `-o writeback_cache` the kernel sends a file's pages in parallel
    requests that arrive in any order: `lock` makes one write at a time."""
    ino: int
    parent: object            # the directory's node (None: replacing)
    name: str                 # the dataset's link name (the file name without `.npy`)
    ingest: NpyIngest = field(default_factory=NpyIngest)
    obj: object = None        # the dataset, once made
    replaces: object = None   # the dataset D whose data it replaces
    # ... keeping D's storage when the array fits it (model/replace_like.py); a file's bytes
    # becoming its own array (`mv T x.npy`) are stored as a new array, never as the bytes were
    keeps: bool = True
    lock: trio.Lock = field(default_factory=trio.Lock)
    # `mv T D.npy`: T's link (group, name), removed in the transaction that gives D its data;
    # then the hard links left to T's object
    moves: tuple | None = None
    left: int | None = None

    @property
    def what(self) -> str:
        """The `.npy` file's path, for messages."""
        if self.replaces is not None:
            return f"{self.replaces.path}.npy"
        return f"{self.parent.path.rstrip('/')}/{self.name}.npy"

    @property
    def unlinked(self) -> bool:
        """The array is in a dataset of its own, not yet given to the one it replaces."""
        return self.replaces is not None and self.obj is not None and self.obj is not self.replaces


@dataclass(frozen=True, slots=True)
class OpenDir:
    ino: int
    entries: list[Entry]
    address: int | None = None   # the group's
    names: frozenset[bytes] = field(init=False)   # the entries' names (`Handles.listed`)

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", frozenset(entry.name for entry in self.entries))


class Handles:
    def __init__(self) -> None:
        self.files: dict[int, OpenFile | NpyStream] = {}
        self.dirs: dict[int, OpenDir] = {}
        self._next = 1

    def holds(self, address: int) -> bool:
        """Whether an open file or directory stands for the object at `address`. Asked from the
        editing thread: each snapshot of the handles is taken whole under the GIL."""
        return (any(handle_address(state) == address for state in list(self.files.values()))
                or any(d.address == address for d in list(self.dirs.values())))

    def reading(self, ino: int) -> bool:
        """Whether a listing of directory `ino` is open."""
        return any(d.ino == ino for d in self.dirs.values())

    def listed(self, ino: int, name: bytes) -> bool:
        """Whether an open listing of directory `ino` holds `name` (thread-safe, as `holds`)."""
        return any(d.ino == ino and name in d.names for d in list(self.dirs.values()))

    def _number(self) -> int:
        fh = self._next
        self._next += 1
        return fh

    def open_file(self, state: OpenFile | NpyStream) -> int:
        fh = self._number()
        self.files[fh] = state
        return fh

    def open_dir(self, state: OpenDir) -> int:
        fh = self._number()
        self.dirs[fh] = state
        return fh


def handle_address(state) -> int | None:
    """The object an open file reads or writes: a `.npy` being copied in holds its dataset and
    the one it replaces; a points file its dataset."""
    if isinstance(state, NpyStream):
        obj = state.replaces if state.replaces is not None else state.obj
    else:
        obj = getattr(state, "obj", None)
        if obj is None:
            return getattr(state, "address", None)
    return getattr(obj, "address", None)
