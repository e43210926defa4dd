"""Links given to groups whose links are dense (a fractal heap indexed by v2 B-trees),
acknowledged but not yet in that storage: a burst of `mkdir`s, `cp`s or `tar x` into one group
then encodes the group's heap blocks and name index once, at the commit that lands them
(`links_write.land`), not once per link.

A deferred link is acknowledged once the journal holds it, as a deferred edit of the record of
the transaction that made it (that record also holds what the link points at: the new object's
header); a `kill -9` loses none, the next read-write open lands them (journal.deferred). Reads see
them at once (`links_write.GroupLinks` in transactions, `model.group.Group` outside). Any other
change to a group holding some (a removal, a rename, its links going compact) lands them all
first, in the same transaction, whose record then says so (`Transaction.lands`).
"""

from __future__ import annotations

import struct

from ..errors import FormatError
from ..format.codec import Reader, Sizes
from ..format.messages import link as link_msg
from ..format.messages.link import Link

LINK_OP = 1
_OP = struct.Struct("<BQ")   # kind, the group's header address; then the link message


def encode_op(group: int, raw: bytes) -> bytes:
    return _OP.pack(LINK_OP, group) + raw


class PendingLinks:
    """Deferred links by group header address, then by name: (link, its encoded message)."""

    def __init__(self) -> None:
        self.groups: dict[int, dict[str, tuple[Link, bytes]]] = {}

    def __bool__(self) -> bool:
        return bool(self.groups)

    def __len__(self) -> int:
        return sum(len(g) for g in self.groups.values())

    def add(self, group: int, link: Link, raw: bytes) -> None:
        self.groups.setdefault(group, {})[link.name] = (link, raw)

    def of(self, group: int) -> dict[str, tuple[Link, bytes]]:
        return self.groups.get(group, {})

    def get(self, group: int, name: str) -> Link | None:
        found = self.groups.get(group, {}).get(name)
        return None if found is None else found[0]

    def merge(self, other: PendingLinks) -> None:
        for group, links in other.groups.items():
            self.groups.setdefault(group, {}).update(links)

    def clear(self) -> None:
        self.groups = {}

    def ops(self) -> list[bytes]:
        """Every deferred link as the journal keeps it."""
        return [encode_op(group, raw) for group, links in self.groups.items() for _, raw in links.values()]

    def add_op(self, op: bytes, sizes: Sizes) -> None:
        """A deferred link the journal kept (`ops`)."""
        if len(op) < _OP.size or op[0] != LINK_OP:
            raise FormatError(f"the journal holds a deferred edit of unknown kind {op[:1].hex()}")
        _, group = _OP.unpack_from(op)
        raw = op[_OP.size:]
        self.add(group, link_msg.decode(Reader(raw, 0, sizes, "a deferred link in the journal")), raw)
