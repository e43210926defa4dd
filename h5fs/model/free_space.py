"""Free space found after mount: a walk of every structure (the space map `h5fs check` uses)
tells which bytes below the end of allocation no structure uses; they join the allocator's free
list, minus whatever the mount allocated or freed while the walk ran (the allocator records it).

Nothing is adopted when the walk meets a structure it cannot follow (what that structure names
would look unused). The sections the file's persistent free-space managers list are not adopted
again: the allocator holds them already (h5fs.storage.free_space_manager), or, where h5fs honours
the managers only, they stay theirs. In a file persisting its free space what is adopted joins its
managers' lists at the next commit; under paged aggregation only whole free pages are adopted
(the kind of a part of a page is unknown). The first bytes at an address a reference names
where no object is (a dangling reference: h5fs check warns of it) are not reused either, so that
no new object answers the reference (storage/object_delete.py keeps those of the headers it frees
during the mount).
"""

from __future__ import annotations

import logging
from contextlib import nullcontext

from ..storage.object_delete import GRAVE
from ..storage.space_map import Progress, gaps, space_problems
from ..storage.space_walk import walk

log = logging.getLogger("h5fs")


def hold_freed_space(f) -> None:
    """As a mount starts: space freed from now on (and what the free-space managers list) is
    not reused until `find_free_space` finds the file sound (`Allocator.hold_frees`)."""
    f.store.allocator.hold_frees()


class _Moved(Exception):
    """An object got a new link, or lost one it is still in the file under, while the walk ran."""


def space_freed(f, wb) -> bool:
    """Whether the mount freed space, or its last commits may (removals waiting, `wb`'s dirty
    data): the unmount then gives back what ends the file, on a walk's word."""
    return bool(f.store.allocator.held_bytes() or f.store.pending or wb.dirty)


def find_free_space(f, quiet=nullcontext(), progress: Progress | None = None) -> int | None:
    """Adopt the unused space of the open writable file `f`; returns the bytes adopted, or None
    when the walk cannot be trusted and is to be made again later. `quiet` (a lock) holds off
    transactions while the recording starts: space a transaction in flight allocated before it
    would otherwise be missed by the walk and taken for unused. `progress`: called as the walk
    goes (a mount's walk pauses there while requests are served).

    A walk under which an existing object got a new link (ln, mv) is not trusted: the object may
    have moved from where the walk had not been yet to where it had been, and its bytes would
    look unused. Nor is one that met a problem while edits were committed under it (a link count
    read between two transactions).

    The walk is also the file's check (extents two objects share, free sections over live data,
    link counts): a sound file gets the space the allocator held since mount (`Allocator.hold_frees`);
    in a damaged one it stays held, and the objects concerned refuse edits (`Store.damaged`)."""
    allocator = f.store.allocator
    with quiet:
        f.land_links()   # the tree as the file holds it: an object whose removal waits is hidden, yet in use
        end = allocator.watch()
        commits, relinks = f.store.commits, f.store.relinks
        deferred = bool(f.store.pending)   # (landing failed: the walk would be of another tree)
    if deferred:
        allocator.reuse_gaps([])
        return None

    def watched(objects: int, chunks: int) -> None:
        if f.store.relinks != relinks:
            raise _Moved()   # what it would find is not trusted: it ends now, not at its end
        if progress is not None:
            progress(objects, chunks)

    try:
        smap = walk(f, progress=watched, clock=lambda: allocator.clock)
        problems = smap.problems or space_problems(sorted(smap.extents, key=lambda e: e.address), smap.free, end)
        problem = problems[0] if problems else None
    except _Moved:
        allocator.reuse_gaps([])
        return None
    except Exception as exc:  # noqa: BLE001 - raised again below unless the file changed
        problem, problems, smap = exc, [], None
    changed = f.store.commits != commits
    moved = f.store.relinks != relinks
    if problem is not None or moved:
        allocator.reuse_gaps([])
        if problem is None or changed:
            return None
        if isinstance(problem, Exception):
            raise problem
        for p in problems:
            for address in p.objects:
                f.store.damaged.setdefault(address, str(p))
        log.warning("%s: damaged (h5fs check tells more): %s%s; free space not reused (%d bytes freed or listed "
                    "free kept unused), %d objects refuse edits", f.path, problem,
                    f" (and {len(problems) - 1} more)" if len(problems) > 1 else "", allocator.held_bytes(),
                    len(f.store.damaged))
        return 0
    # where a dangling reference points stays unused: a new header there would be what it names
    allocator.keep([(address, GRAVE) for address in sorted(smap.dangling)])
    busy = sorted(smap.extents + smap.free, key=lambda e: e.address)
    adopted = allocator.reuse_gaps(gaps(busy, end))
    kept = allocator.release_held([(e.address, e.size, e.seen, e.owner) for e in smap.extents])
    if kept:
        log.warning("%s: %d bytes an edit freed since mount are in use by another object (the file was damaged: "
                    "h5fs check tells more): kept unused", f.path, kept)
    log.info("%s: %d bytes of unused space found, reused for new data", f.path, adopted)
    return adopted
