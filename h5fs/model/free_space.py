"""Free space found after mount: a walk of every structure (the space map `h5fs check` uses)
tells which bytes below the end of allocation no structure uses; they join the allocator's free
list, minus whatever the mount allocated or freed while the walk ran (the allocator records it).

Nothing is adopted when the walk meets a structure it cannot follow (what that structure names
would look unused). The sections the file's persistent free-space managers list are not adopted
again: the allocator holds them already (h5fs.storage.persistent_space), or, where h5fs honours
the managers only, they stay theirs. In a file persisting its free space what is adopted joins its
managers' lists at the next commit; under paged aggregation only whole free pages are adopted
(the kind of a part of a page is unknown).
"""

from __future__ import annotations

import logging
from contextlib import nullcontext

from ..storage.space_map import gaps, walk

log = logging.getLogger("h5fs")


def find_free_space(f, quiet=nullcontext()) -> int:
    """Adopt the unused space of the open writable file `f`; returns the bytes adopted. `quiet`
    (a lock) holds off transactions while the recording starts: space a transaction in flight
    allocated before it would otherwise be missed by the walk and taken for unused."""
    allocator = f.store.allocator
    with quiet:
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
