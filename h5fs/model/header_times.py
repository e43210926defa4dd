"""The times an object header keeps, as edits set them: a version 2 header keeps access,
modification, change and birth times among its fields; others keep a modification time
message. Link edits and `touch` set them (model/tree_edit.py), and so does the commit of a
dataset's writes (model/writeback.py: the time of its last write).
"""

from __future__ import annotations

import time

from ..format.codec import encoded
from ..format.messages import modification_time
from ..format.messages.types import MTIME, MTIME_OLD
from ..storage.object_header.edit import HeaderEdit


def now() -> int:
    """Now, in whole seconds (as HDF5 keeps times)."""
    return time.time_ns() // 1_000_000_000


def set_times(edit: HeaderEdit, sizes, *, mtime: int | None = None, ctime: int | None = None,
               add: bool = False) -> bool:
    """Set the header's modification time `mtime` and change time `ctime` (None: kept as
    they are): a version 2 header keeps both among its times, others the modification time
    alone in a message. One with neither gets a message when `add` says so and it is
    new-style (an old-style header libhdf5 wrote without times keeps none). Whether it
    changed."""
    if edit.times is not None:
        access, old_mtime, old_ctime, birth = edit.times
        edit.times = (access, old_mtime if mtime is None else mtime, old_ctime if ctime is None else ctime, birth)
        return True
    if mtime is None:
        return False
    for mtype, encode in ((MTIME, modification_time.encode_new), (MTIME_OLD, modification_time.encode_old)):
        raw = edit.header.first(mtype)
        if raw is not None:
            edit.replace(raw, encoded(encode, mtime, sizes))
            return True
    if add and edit.header.version > 1:
        edit.add(MTIME, encoded(modification_time.encode_new, mtime, sizes))
        return True
    return False
