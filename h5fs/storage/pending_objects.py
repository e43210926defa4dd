"""New groups, and the attributes set on them, acknowledged before the file's structures hold
them: a burst of `mkdir` + `setfattr` (`cp -r`, `rsync -a`, `tar x` of a tree of directories)
then costs each group one header and its attributes one header edit, in the commit that lands
them, instead of two transactions per group.

A new group's header is built at once, in space the allocator keeps for it (its address is the
group for the mount, as for any object), and laid over the file in the store's batch: reads,
and the edits a transaction makes elsewhere, see it as it is without its attributes. The
journal holds it as a deferred edit (NEW: the address and the header's image) and its
attributes as deferred edits too (SETATTR, DELATTR: a name, and the value's text as `setfattr`
gave it); reads show those from here (model/attributes.py). Its link is a deferred link edit
(pending_links.py): the group lands with it, its attributes added to its header in the same
commit (model/fresh_groups.py). An edit other than these lands them first, so that nothing
builds on a header the journal does not hold.

A crash leaves the edits to the next read-write open, which lands them as the mount would have,
but not at the same address: that space was kept by the mount's allocator alone, so the header
goes where the allocator says and its link is pointed there.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ..errors import FormatError
from ..format.object_header import ObjectHeader

NEW, SETATTR, DELATTR = 4, 5, 6   # after pending_links' kinds: one journal field holds both
KINDS = (NEW, SETATTR, DELATTR)
_HEAD = struct.Struct("<BQ")   # kind, the new group's address
_NAME = struct.Struct("<H")    # the attribute name's length


@dataclass(frozen=True)
class FreshOp:
    """NEW group at `address` (its header's image `data`); SETATTR `name` to the text `data`;
    DELATTR `name`."""

    kind: int
    address: int
    name: str = ""
    data: bytes = b""

    def encode(self) -> bytes:
        if self.kind == NEW:
            return _HEAD.pack(self.kind, self.address) + self.data
        name = self.name.encode("utf-8", "surrogateescape")
        return _HEAD.pack(self.kind, self.address) + _NAME.pack(len(name)) + name + self.data

    @staticmethod
    def decode(op: bytes) -> FreshOp:
        if len(op) < _HEAD.size or op[0] not in KINDS:
            raise FormatError(f"the journal holds a deferred edit of unknown kind {op[:1].hex()}")
        kind, address = _HEAD.unpack_from(op)
        body = op[_HEAD.size:]
        if kind == NEW:
            return FreshOp(kind, address, data=body)
        if len(body) < _NAME.size or len(body) < _NAME.size + _NAME.unpack_from(body)[0]:
            raise FormatError("the journal holds a deferred attribute edit cut short")
        end = _NAME.size + _NAME.unpack_from(body)[0]
        return FreshOp(kind, address, body[_NAME.size:end].decode("utf-8", "surrogateescape"), body[end:])


@dataclass
class Fresh:
    """A new group the file's structures do not hold yet."""

    address: int
    image: bytes                    # its header without the attributes
    attributes: dict[str, bytes] = field(default_factory=dict)   # name -> value text, in the order set
    kept: bool = True               # its space is kept for it (False: read from a journal, it goes anywhere)
    record: ObjectHeader | None = None   # the image decoded, when the mount made it

    def ops(self) -> list[FreshOp]:
        """The edits that make it again."""
        return [FreshOp(NEW, self.address, data=self.image)] + \
            [FreshOp(SETATTR, self.address, name, text) for name, text in self.attributes.items()]


def apply(fresh: dict[int, Fresh], op: FreshOp, kept: bool) -> int:
    """`op` applied to the new groups by address; how many more groups there are."""
    if op.kind == NEW:
        new = op.address not in fresh
        fresh[op.address] = Fresh(op.address, op.data, kept=kept)
        return int(new)
    group = fresh.get(op.address)
    if group is None:
        raise FormatError(f"the journal sets an attribute of a new group at {op.address} it does not make")
    if op.kind == SETATTR:
        group.attributes[op.name] = op.data   # set again: in its place, as a value replaced keeps it
    else:
        group.attributes.pop(op.name, None)
    return 0
