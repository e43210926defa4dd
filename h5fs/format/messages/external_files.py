"""External Data Files message (0x0007): raw data kept in other files, named in a local heap.

libhdf5 writes as many allocated slots as used ones and stores only the used ones:
`allocated` is None when the message says so. The 3 reserved bytes are written as zeros.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError
from ..codec import Reader, Writer

MAX_SLOTS = 65535


@dataclass(frozen=True, slots=True)
class ExternalSlot:
    name_offset: int
    file_offset: int
    size: int          # bytes reserved in that file; the all-ones value means unlimited


@dataclass(frozen=True, slots=True)
class ExternalFiles:
    heap_address: int | None
    slots: tuple[ExternalSlot, ...]
    allocated: int | None = None   # the Allocated Slots field when it differs from len(slots)


def decode(c: Reader) -> ExternalFiles:
    version = c.u8()
    if version != 1:
        raise FormatError(f"external files message version {version}")
    allocated, used, heap = c.fields("3xHHO")
    slots = c.sizes.layout("LLL").iter_unpack(c.bytes(used * 3 * c.sizes.length))
    return ExternalFiles(c.sizes.address(heap), tuple(ExternalSlot(*s) for s in slots),
                         None if allocated == used else allocated)


def encode(w: Writer, efl: ExternalFiles) -> None:
    used = len(efl.slots)
    allocated = used if efl.allocated is None else efl.allocated
    if used > MAX_SLOTS or allocated > MAX_SLOTS:
        raise ValueError(f"external files message of {used} slots ({allocated} allocated)")
    w.fields("B3xHHO", 1, allocated, used, w.sizes.raw_address(efl.heap_address))
    for s in efl.slots:
        w.fields("LLL", s.name_offset, s.file_offset, s.size)
