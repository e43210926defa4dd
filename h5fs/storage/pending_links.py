"""Link edits of groups whose links are dense (a fractal heap indexed by v2 B-trees), acknowledged
but not yet in that storage: a burst of `mkdir`s, `cp`s, `tar x` or `rm -r` in one group then
edits the group's heap blocks and name index once, at the commit that lands them
(`links_write.land_links`), not once per link. An object whose last link such a removal takes is
counted down (and freed) then too, after every link edit landed, so the file never names freed
space.

A deferred edit is acknowledged once the journal holds it, as a deferred edit of the record of
the transaction that made it (that record also holds what the edit builds on: a new object's
header); a `kill -9` loses none, the next read-write open lands them (journal.deferred). Reads see
them at once (`links_write.GroupLinks` in transactions, `model.group.Group` outside). They land
at the group commit (`model.tree_edit.TreeEditor.land`: the link edits in one commit whose record
says it holds every deferred edit before it, `Transaction.lands`; the countdowns in the next),
and first when an edit would free a group holding some.

Edits are kept as their net effect: links added (by group, then name), names whose stored link
goes (a name can be both: removed, then added anew), and the objects to count down, in order; a
link added and removed again leaves nothing. The journal keeps the net effect too (`encoded`).
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass

from ..errors import FormatError
from ..format.codec import Reader, Sizes
from ..format.messages import link as link_msg
from ..format.messages.link import Link

INSERT, REMOVE, UNREF = 1, 2, 3
_OP = struct.Struct("<BQ")   # kind, an address (the group's header; UNREF: the object's)


@dataclass(frozen=True)
class Op:
    """One deferred edit: INSERT `link` (encoded `raw`) into `group`; REMOVE the link `name` of
    `group`; UNREF the object at `group` (its link at `name` went)."""

    kind: int
    group: int
    name: str
    link: Link | None = None
    raw: bytes = b""

    def encode(self) -> bytes:
        body = self.raw if self.kind == INSERT else self.name.encode("utf-8", "surrogateescape")
        return _OP.pack(self.kind, self.group) + body

    @staticmethod
    def decode(op: bytes, sizes: Sizes) -> Op:
        if len(op) < _OP.size or op[0] not in (INSERT, REMOVE, UNREF):
            raise FormatError(f"the journal holds a deferred edit of unknown kind {op[:1].hex()}")
        kind, group = _OP.unpack_from(op)
        body = op[_OP.size:]
        if kind == INSERT:
            link = link_msg.decode(Reader(body, 0, sizes, "a deferred link in the journal"))
            return Op(kind, group, link.name, link, body)
        return Op(kind, group, body.decode("utf-8", "surrogateescape"))


class PendingLinks:
    """The net effect of deferred edits (see the module's docstring)."""

    def __init__(self) -> None:
        self.added: dict[int, dict[str, tuple[Link, bytes]]] = {}   # group -> name -> (link, message)
        self.removed: dict[int, set[str]] = {}                      # group -> names whose stored link goes
        self.unrefs: list[tuple[int, str]] = []                     # (object address, the path it had)
        self.countdowns: Counter[int] = Counter()                  # object address -> its unrefs
        self._size = 0   # len(self), kept as ops apply (an edit asks it each time)

    def __bool__(self) -> bool:
        return bool(self.unrefs) or any(self.added.values()) or any(self.removed.values())

    def __len__(self) -> int:
        """The links added, the names removed and the countdowns waiting."""
        return self._size

    def apply(self, op: Op) -> None:
        if op.kind == INSERT:
            added = self.added.setdefault(op.group, {})
            self._size += op.name not in added
            added[op.name] = (op.link, op.raw)
        elif op.kind == REMOVE:
            added = self.added.get(op.group, {})
            if op.name in added:   # never in the storage (unless a removed stored one was replaced)
                del added[op.name]
                self._size -= 1
            else:
                removed = self.removed.setdefault(op.group, set())
                self._size += op.name not in removed
                removed.add(op.name)
        else:
            self.unrefs.append((op.group, op.name))
            self.countdowns[op.group] += 1
            self._size += 1

    def holds(self, group: int) -> bool:
        """Whether the group's storage has edits waiting."""
        return bool(self.added.get(group)) or bool(self.removed.get(group))

    def groups(self) -> list[int]:
        return [g for g in {**self.added, **self.removed} if self.holds(g)]

    def of(self, group: int) -> dict[str, tuple[Link, bytes]]:
        return self.added.get(group, {})

    def gone(self, group: int) -> set[str]:
        return self.removed.get(group, set())

    def get(self, group: int, name: str) -> Link | None | bool:
        """The link added as `name` (a Link), False when the stored one of that name goes, None
        when nothing is deferred for the name."""
        found = self.added.get(group, {}).get(name)
        if found is not None:
            return found[0]
        return False if name in self.removed.get(group, ()) else None

    def unrefs_of(self, address: int) -> int:
        return self.countdowns.get(address, 0)

    def clear(self) -> None:
        self.__init__()

    def encoded_ops(self) -> list[Op]:
        """The net effect as edits (applied in order, they make it again): each group's
        removals, then its additions, then the countdowns."""
        ops = [Op(REMOVE, group, name) for group, names in self.removed.items() for name in sorted(names)]
        ops += [Op(INSERT, group, name, link, raw) for group, links in self.added.items()
                for name, (link, raw) in links.items()]
        return ops + [Op(UNREF, address, path) for address, path in self.unrefs]

    def encoded(self) -> list[bytes]:
        """The net effect as the journal keeps it (`encoded_ops`)."""
        return [op.encode() for op in self.encoded_ops()]
