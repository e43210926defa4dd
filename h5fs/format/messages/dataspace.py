"""Dataspace message (0x0001), versions 1 and 2: scalar, simple and null extents; decode and encode.

Version 1 has no type field (rank 0 is scalar, a null extent needs version 2) and may flag
permutation indices (4 bytes each, never implemented by libhdf5, which never wrote them); its 5
reserved bytes are written as zeros. libhdf5 stores maximum dimensions for every simple extent
and for no other: `has_maxdims` is None when the message follows that rule. Extents the decoder
normalises (libhdf5 refuses or never writes them) encode in their normal form: a version-2 simple
extent of rank 0 as scalar, a scalar or null extent with dimensions without them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError, Unsupported
from ..codec import Reader, Writer

SCALAR, SIMPLE, NULL = 0, 1, 2
MAX_RANK = 32
UNLIMITED = None  # a maximum dimension of all ones (H5S_UNLIMITED)
MAXDIMS, PERMUTATION = 0x01, 0x02   # flags


@dataclass(frozen=True, slots=True)
class Dataspace:
    kind: int
    dims: tuple[int, ...] = ()
    maxdims: tuple[int | None, ...] = ()      # the dimensions themselves when not stored
    version: int = 2
    has_maxdims: bool | None = None           # None: stored exactly for simple extents
    permutation: tuple[int, ...] | None = None  # version 1 only

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

    @property
    def stores_maxdims(self) -> bool:
        return self.kind == SIMPLE if self.has_maxdims is None else self.has_maxdims


def _unlimited(width: int) -> int:
    return (1 << (8 * width)) - 1


def decode(c: Reader) -> Dataspace:
    version, rank, flags = c.fields("BBB")
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
    dims = c.fields(f"{rank}L")
    maxdims: tuple[int | None, ...] = dims
    if flags & MAXDIMS:
        unl = _unlimited(c.sizes.length)
        maxdims = tuple(None if m == unl else m for m in c.fields(f"{rank}L"))
    perm = c.fields(f"{rank}I") if flags & PERMUTATION and version == 1 else None
    if kind == SIMPLE and rank == 0:
        kind = SCALAR
    if kind != SIMPLE:
        dims = maxdims = ()
    has_maxdims = bool(flags & MAXDIMS)
    return Dataspace(kind, dims, maxdims, version, None if has_maxdims == (kind == SIMPLE) else has_maxdims, perm)


def encode(w: Writer, space: Dataspace) -> None:
    rank = len(space.dims)
    if space.version not in (1, 2) or (space.version == 1 and space.kind == NULL):
        raise ValueError(f"dataspace: version {space.version} cannot hold extent type {space.kind}")
    if (space.kind == SIMPLE) != (rank > 0) or (space.stores_maxdims and len(space.maxdims) != rank):
        raise ValueError(f"dataspace: extent type {space.kind} with dimensions {space.dims}, maximum {space.maxdims}")
    if space.permutation is not None and (space.version != 1 or len(space.permutation) != rank):
        raise ValueError("dataspace: permutation indices need version 1 and one index per dimension")
    flags = (MAXDIMS if space.stores_maxdims else 0) | (PERMUTATION if space.permutation is not None else 0)
    w.fields("BBB", space.version, rank, flags)
    if space.version == 1:
        w.zeros(5)
    else:
        w.u8(space.kind)
    w.fields(f"{rank}L", *space.dims)
    if space.stores_maxdims:
        unl = _unlimited(w.sizes.length)
        w.fields(f"{rank}L", *(unl if m is None else m for m in space.maxdims))
    if space.permutation is not None:
        w.fields(f"{rank}I", *space.permutation)
