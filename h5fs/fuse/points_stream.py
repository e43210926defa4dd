"""A `.points.npy` opened for writing: its bytes are kept aside (in memory, then a temporary
file) and become the dataset's set of defined elements when a close finds them a whole, valid
`.npy` (model/points_write.py). Until then the old set stays whole; a file that is not one
answers EINVAL at that close and changes nothing."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field

from ..model.points_write import read_points, replace_points
from . import offload
from .mount_state import MountState

SPOOL_BYTES = 16 << 20   # kept in memory below this, in a temporary file above


@dataclass(slots=True)
class PointsStream:
    ino: int
    address: int
    path: str                  # the dataset's path
    buffer: tempfile.SpooledTemporaryFile = field(
        default_factory=lambda: tempfile.SpooledTemporaryFile(SPOOL_BYTES, prefix="h5fs-points-"))
    size: int = 0              # the file's size: the end of the furthest write
    dirty: bool = False        # written since its content last became the defined set

    def write(self, off: int, buf: bytes) -> int:
        self.buffer.seek(off)
        self.buffer.write(buf)
        self.size = max(self.size, off + len(buf))
        self.dirty = True
        return len(buf)

    def truncate(self, size: int) -> None:
        self.buffer.truncate(size)
        self.size = size
        self.dirty = True

    def close(self) -> None:
        self.buffer.close()


async def finish(mount: MountState, stream: PointsStream) -> bool:
    """At a close: the content becomes the defined set if it was written since the last time
    (a close of nothing written, such as dd's duplicate descriptor, changes nothing). True when
    the dataset changed."""
    if stream.size == 0 or not stream.dirty:
        return False
    ds = mount.f.get(stream.address, stream.path)
    wb = mount.writes.wb

    def replace() -> None:
        indices, values = read_points(ds, stream.buffer, stream.size)
        replace_points(wb, ds, indices, values)

    await offload.run_sync(replace)
    stream.dirty = False
    return True
