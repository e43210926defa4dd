"""The codec pipeline: one module per filter; `decode_chunk` undoes a dataset's pipeline and
`encode_chunk` applies it (pipeline.py)."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import CannotWrite


@dataclass(frozen=True)
class ChunkInfo:
    """What a filter may need to know about the chunk besides its bytes."""

    nbytes: int          # size of the decoded chunk in bytes (chunk elements * element size)
    element_size: int
    what: str            # object path, for error messages


class FilterFailed(CannotWrite):
    """A filter cannot encode this chunk where libhdf5's (or the plugin's) filter function fails
    (returns 0): the pipeline then skips an optional filter and records it in the chunk's
    filter mask, and refuses the write for a mandatory one."""
