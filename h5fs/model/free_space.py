"""Free space found after mount: a walk of every structure (the space map `h5fs check` uses)
tells which bytes below the end of allocation no structure uses; they join the allocator's free
list, minus whatever the mount allocated or freed while the walk ran (the allocator records it).

Nothing is adopted when the walk meets a structure it cannot follow (what that structure names
would look unused), and the sections a persistent free-space manager lists stay out: libhdf5
allocates from them when it writes the file again.
"""

from __future__ import annotations

import logging

from ..storage.space_map import gaps, walk

log = logging.getLogger("h5fs")


def find_free_space(f) -> int:
    """Adopt the unused space of the open writable file `f`; returns the bytes adopted."""
    allocator = f.store.allocator
    end = allocator.watch()
    try:
        smap = walk(f)
    except Exception:
        allocator.adopt([])
        raise
    if smap.problems:
        allocator.adopt([])
        log.warning("%s: free space not reused: %s", f.path, smap.problems[0])
        return 0
    busy = sorted(smap.extents + smap.free, key=lambda e: e.address)
    adopted = allocator.adopt(gaps(busy, end))
    log.info("%s: %d bytes of unused space found, reused for new data", f.path, adopted)
    return adopted
