"""Dataspace message (0x0001), versions 1 and 2: scalar, simple and null extents."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError, Unsupported
from ..codec import Reader

SCALAR, SIMPLE, NULL = 0, 1, 2
MAX_RANK = 32
UNLIMITED = None  # a maximum dimension of all ones (H5S_UNLIMITED)


@dataclass(frozen=True)
class Dataspace:
    kind: int
    dims: tuple[int, ...] = ()
    maxdims: tuple[int | None, ...] = ()

    @property
    def shape(self) -> tuple[int, ...]:
        return self.dims

    @property
    def count(self) -> int:
        """Number of elements (1 for scalar, 0 for null)."""
        if self.kind == NULL:
            return 0
        n = 1
        for d in self.dims:
            n *= d
        return n


def decode(c: Reader) -> Dataspace:
    version = c.u8()
    rank = c.u8()
    flags = c.u8()
    if rank > MAX_RANK:
        raise FormatError(f"dataspace: rank {rank} exceeds {MAX_RANK}")
    if version == 1:
        c.skip(5)
        kind = SIMPLE if rank > 0 else SCALAR
    elif version == 2:
        kind = c.u8()
        if kind not in (SCALAR, SIMPLE, NULL):
            raise FormatError(f"dataspace: unknown type {kind}")
    else:
        raise Unsupported(f"dataspace message version {version}")
    dims = tuple(c.length() for _ in range(rank))
    maxdims: tuple[int | None, ...] = dims
    if flags & 1:
        unl = (1 << (8 * c.sizes.length)) - 1
        maxdims = tuple(None if m == unl else m for m in (c.length() for _ in range(rank)))
    if flags & 2 and version == 1:
        c.skip(4 * rank)  # permutation indices: never implemented by libhdf5
    if kind == SCALAR:
        return Dataspace(SCALAR)
    if kind == NULL:
        return Dataspace(NULL)
    if rank == 0:
        return Dataspace(SCALAR)
    return Dataspace(SIMPLE, dims, maxdims)
