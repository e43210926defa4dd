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

New groups wait here too, with the attributes set on them (storage/pending_objects.py): they
land with the link edits, their headers first; their links wait even in a group that keeps its
links in its header (compact), where the landing adds them in one header edit.

Edits are kept as their net effect: links added (by group, then name), names whose stored link
goes (a name can be both: removed, then added anew), and the objects to count down, in order; a
link added and removed again leaves nothing. The journal keeps the net effect too (`encoded`).
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, replace

from ..errors import FormatError
from ..format.codec import Reader, Sizes, Writer
from ..format.messages import link as link_msg
from ..format.messages.link import Link
from . import pending_objects
from .pending_objects import Fresh, FreshOp

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
    def decode(op: bytes, sizes: Sizes) -> Op | FreshOp:
        if op[:1] and op[0] in pending_objects.KINDS:
            return FreshOp.decode(op)
        if len(op) < _OP.size or op[0] not in (INSERT, REMOVE, UNREF):
            raise FormatError(f"the journal holds a deferred edit of unknown kind {op[:1].hex()}")
        kind, group = _OP.unpack_from(op)
        body = op[_OP.size:]
        if kind == INSERT:
            link = link_msg.decode(Reader(body, 0, sizes, "a deferred link in the journal"))
            return Op(kind, group, link.name, link, body)
        return Op(kind, group, body.decode("utf-8", "surrogateescape"))


def described(ops: list[bytes]) -> str:
    """What deferred edits (as the journal keeps them) hold, counted: "40 link edits, 40 new
    groups and 1 attribute edit"."""
    kinds = Counter(op[0] for op in ops if op)
    counts = [(sum(kinds[k] for k in (INSERT, REMOVE, UNREF)), "link edit"),
              (kinds[pending_objects.NEW], "new group"),
              (kinds[pending_objects.SETATTR] + kinds[pending_objects.DELATTR], "attribute edit")]
    parts = [f"{n} {noun}" + ("" if n == 1 else "s") for n, noun in counts if n]
    return " and ".join(parts) if len(parts) < 3 else f"{parts[0]}, {parts[1]} and {parts[2]}"


class PendingLinks:
    """The net effect of deferred edits (see the module's docstring)."""

    def __init__(self) -> None:
        self.added: dict[int, dict[str, tuple[Link, bytes]]] = {}   # group -> name -> (link, message)
        self.removed: dict[int, set[str]] = {}                      # group -> names whose stored link goes
        self.unrefs: list[tuple[int, str]] = []                     # (object address, the path it had)
        self.countdowns: Counter[int] = Counter()                  # object address -> its unrefs
        self.fresh: dict[int, Fresh] = {}                           # new groups by address (pending_objects.py)
        self.in_headers: set[int] = set()   # groups keeping their links in their headers with removals waiting
        self._size = 0   # len(self), kept as ops apply (an edit asks it each time)

    def __bool__(self) -> bool:
        return bool(self.unrefs) or bool(self.fresh) or any(self.added.values()) or any(self.removed.values())

    def __len__(self) -> int:
        """The links added, the names removed, the countdowns and the new groups waiting."""
        return self._size

    def apply(self, op: Op | FreshOp, kept: bool = True) -> None:
        """`op` taken in (`kept`: a new group's space is kept for it, as when this mount made it)."""
        if isinstance(op, FreshOp):
            self._size += pending_objects.apply(self.fresh, op, kept)
        elif op.kind == INSERT:
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

    def drop_removals(self, group: int) -> None:
        """The group's removals given up: its storage is freed whole (model/quick_unlink.doomed)."""
        self._size -= len(self.removed.pop(group, ()))

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

    def relink(self, moved: dict[int, int], sizes: Sizes) -> None:
        """The links added to new groups pointed at the places they moved to (old -> new
        address: a replay put their headers elsewhere)."""
        for links in self.added.values():
            for name, (link, _) in list(links.items()):
                if link.address in moved:
                    link = replace(link, address=moved[link.address])
                    w = Writer(sizes)
                    link_msg.encode(w, link)
                    links[name] = (link, w.getvalue())

    def encoded_ops(self) -> list[Op | FreshOp]:
        """The net effect as edits (applied in order, they make it again): the new groups, each
        group's removals, then its additions, then the countdowns."""
        ops: list[Op | FreshOp] = [op for group in self.fresh.values() for op in group.ops()]
        ops += [Op(REMOVE, group, name) for group, names in self.removed.items() for name in sorted(names)]
        ops += [Op(INSERT, group, name, link, raw) for group, links in self.added.items()
                for name, (link, raw) in links.items()]
        return ops + [Op(UNREF, address, path) for address, path in self.unrefs]

    def encoded(self) -> list[bytes]:
        """The net effect as the journal keeps it (`encoded_ops`)."""
        return [op.encode() for op in self.encoded_ops()]
