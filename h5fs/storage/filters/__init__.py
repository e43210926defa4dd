"""The codec pipeline: one module per filter; `decode_chunk` undoes a dataset's pipeline."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChunkInfo:
    """What a filter may need to know about the chunk besides its bytes."""

    nbytes: int          # size of the decoded chunk in bytes (chunk elements * element size)
    element_size: int
    what: str            # object path, for error messages
