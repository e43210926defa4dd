"""`h5fs check FILE`: verify an HDF5 file without mounting it.

`check(path)` walks the file's space map with every chunk and attribute value decoded (h5fs.storage.space_walk: every
structure reachable from the superblock is read, its checksum verified, every B-tree and array
index walked, each object's errors caught and recorded, each object's reference count compared
with the hard links and shared-datatype uses that lead to it, the shared-message table's records
compared with the uses objects make of them: storage/sohm_table/uses.py), then checks the map as a whole: no two
extents overlap (both owners named), nothing lies past the superblock's end of allocation (the
end of the file is checked as each extent is met), the free space persistent free-space managers
list is space nothing uses and no two sections overlap, the File Space Info message's end of
allocation before the managers lies within the end of allocation (libhdf5 1.10 releases the space
between the two at its first allocation), and under paged aggregation libhdf5's page rules hold:
a block of a page or more starts on a page, a smaller one lies within one page, no page holds
both raw data and metadata or a free section of the other kind's manager. A complete record in
the journal beside the file (`FILE.h5fs-journal`) means metadata updates a writer committed still wait to be replayed: the file alone is not what
was committed, which is a problem too. The Report lists the problems (`/path: structure: what is
wrong`) and sums up the space: bytes used, bytes unused (gaps below the end of allocation, which
libhdf5 and h5fs may both leave), bytes the free-space managers list, the file's size.

`run(path)` is the command: a warning line for each reference that names no object (what libhdf5
leaves when it deletes an object that references name: the file is sound, exit 0 still), then
problems on stdout, one per line (exit 1), or the one-line summary (exit 0); exit 2 when the file cannot be read or is no HDF5 file; counters on stderr while it runs if that is a
terminal.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TextIO

from .errors import H5fsError
from .format.messages.file_space_info import V1_PAGE, FileSpaceInfo
from .model.file import H5File
from .progress import Line
from .storage import journal
from .storage.blockio import open_regular
from .storage.byte_source import ByteSource, LocalSource, is_url
from .storage.locking import take_lock
from .storage.pending_links import described
from .storage import superblock as superblock_reader
from .storage.remote import RemoteOptions, open_remote
from .storage.allocator import LARGE, RAW
from .storage.space_map import FILE, UNEXPECTED, Extent, Problem, Progress, gaps, space_problems
from .storage.space_walk import walk

@dataclass(frozen=True)
class Report:
    path: str
    problems: tuple[Problem, ...]
    file_size: int = 0           # bytes from the superblock's position on
    end_of_allocation: int = 0   # what the superblock records, from the superblock's position on
    used: int = 0                # bytes below the end of allocation some structure holds
    unused: int = 0              # the rest of them
    listed_free: int = 0         # bytes the free-space managers list as free
    objects: int = 0
    chunks: int = 0
    warnings: tuple[Problem, ...] = ()   # references that name no object (h5fs.storage.space_map)

    @property
    def sound(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        state = "sound" if self.sound else _count(len(self.problems), "problem")
        if self.warnings:
            state += f" ({_count(len(self.warnings), 'dangling reference')})"
        return (f"{self.path}: {state}: {_count(self.objects, 'object')}, "
                f"{_count(self.chunks, 'chunk')}; {self.used} bytes used, {self.unused} unused ({self.listed_free} listed free) "
                f"of {self.end_of_allocation} allocated; file {self.file_size} bytes")


def check(path: str, progress: Progress | None = None, remote: RemoteOptions | None = None) -> Report:
    """Check the file at `path`, a local path or a URL (`remote`: how to reach it; see the module
    docstring). OSError when it cannot be opened, NotHDF5 when it is no HDF5 file (no signature),
    H5fsError (Locked) when a writer holds it, RemoteError when the object cannot be fetched."""
    if is_url(path):
        source: ByteSource = open_remote(path, remote or RemoteOptions())
        problems: list[Problem] = []   # no journal and no lock beside an object in a store
    else:
        fd = open_regular(path)
        try:
            problems = _journal(path, superblock_reader.recorded_eoa(fd))
            take_lock(fd, False)
        except BaseException:
            os.close(fd)
            raise
        source = LocalSource(fd, path)
    try:
        size = source.end()
        superblock_reader.find_signature(source)   # no HDF5 file at all: nothing to check (exit 2), no problem of one
        try:
            sb = superblock_reader.read(source)
        except (H5fsError, *UNEXPECTED) as e:
            source.close()
            return Report(path, tuple(problems + [Problem(FILE, "superblock", str(e))]), size)
        f = H5File(path, source, sb)
    except BaseException:
        source.close()
        raise
    with f:   # closes fd
        smap = walk(f, chunks=True, progress=progress)
        # libhdf5 stores the end of allocation with the base address added (a user block's size)
        eoa, eof = sb.eof_address - sb.base_address, size - sb.location
    used = sorted(smap.extents, key=lambda e: e.address)
    unused = sum(n for _, n in gaps(used, eoa))
    info = smap.file_space
    problems += smap.problems + space_problems(used, smap.free, eoa) + _manager_problems(smap.free, info, eoa)
    if info is not None and info.version == 1 and info.strategy == V1_PAGE:
        problems += _page_problems(used, smap.free, info.page_size)
    return Report(path, tuple(dict.fromkeys(problems)), eof, eoa, eoa - unused, unused,
                  sum(e.size for e in smap.free), smap.objects, smap.chunks, tuple(smap.warnings))


def _journal(path: str, eoa: int | None) -> list[Problem]:
    """What a journal beside the file holds (`eoa`: the end of allocation its superblock records)."""
    recs = journal.since_checkpoint(journal.left_in(journal.journal_path(path)))
    ops = journal.deferred(recs)
    entries, edits = sum(len(r.entries) for r in recs), len(ops)
    if not entries and not edits:
        return []
    where = " and ".join(([_count(entries, "metadata update")] if entries else [])
                         + ([f"deferred edits ({described(ops)})"] if edits else [])) + f" in {journal.journal_path(path)}"
    if not journal.belongs(recs, eoa):
        verb = "belongs" if entries == 1 else "belong"
        return [Problem(FILE, "journal", f"{where} {verb} to another state of the file ({journal.stale_reason(recs, eoa)}): "
                                         "a writable open sets them aside, unreplayed")]
    return [Problem(FILE, "journal", f"{where} waiting to be replayed (a writable open or mount replays them)")]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _manager_problems(free: list[Extent], info: FileSpaceInfo | None, eoa: int) -> list[Problem]:
    """Free sections listed twice (by two managers or one), the message's end of allocation
    before the managers past the end of allocation."""
    out = []
    reach = None
    for s in sorted(free, key=lambda e: e.address):
        if reach is not None and s.address < reach.end:
            out.append(Problem(s.path, s.structure, f"{s.address}+{s.size} overlaps {reach.what} at "
                                                    f"{reach.address}+{reach.size}"))
        if reach is None or s.end > reach.end:
            reach = s
    before = info.eoa_before_managers if info is not None else None
    if before is not None and before > eoa:
        out.append(Problem(FILE, "file space info message",
                           f"end of allocation before the managers {before} lies past the end of allocation ({eoa})"))
    return out


def _page_problems(used: list[Extent], free: list[Extent], page: int) -> list[Problem]:
    """libhdf5's paged aggregation (H5MF__alloc_pagefs): large blocks on pages, small blocks
    and small sections within a page, each page of small blocks of one kind (used: by address)."""
    out, kinds = [], {}   # page number -> (raw, the first extent that set it)
    for e in used:
        if e.size >= page:
            if e.address % page:
                out.append(Problem(e.path, e.structure, f"{e.address}+{e.size} is a page or more and does not start "
                                                        f"on a page ({page} bytes)"))
        elif e.address // page != (e.end - 1) // page:
            out.append(Problem(e.path, e.structure, f"{e.address}+{e.size} crosses a page boundary ({page} bytes)"))
        elif kinds.setdefault(e.address // page, (e.raw, e))[0] != e.raw:
            first = kinds[e.address // page][1]
            out.append(Problem(e.path, e.structure, f"{e.address}+{e.size} shares page {e.address // page} with "
                                                    f"{first.what} ({'raw data' if first.raw else 'metadata'})"))
    for s in free:
        if s.slot == LARGE or s.slot is None:
            continue
        if s.address // page != (s.end - 1) // page:
            out.append(Problem(s.path, s.structure, f"{s.address}+{s.size} crosses a page boundary ({page} bytes)"))
        elif kinds.setdefault(s.address // page, (s.slot == RAW, s))[0] != (s.slot == RAW):
            first = kinds[s.address // page][1]
            out.append(Problem(s.path, s.structure, f"{s.address}+{s.size} lies in page {s.address // page} with "
                                                    f"{first.what} of the other kind"))
    return out


# -- the command ----------------------------------------------------------------------------------


def run(path: str, out: TextIO | None = None, err: TextIO | None = None, remote: RemoteOptions | None = None) -> int:
    """The `h5fs check` command: 0 sound, 1 problems (one line each), 2 unreadable or not HDF5
    (`remote`: how to reach a URL)."""
    out, err = out or sys.stdout, err or sys.stderr
    line = Line.on(err)
    progress = None if line is None else (
        lambda objects, chunks: line.show(f"h5fs check: {objects} objects walked, {chunks} chunks checked"))
    try:
        report = check(path, progress, remote)
    except (OSError, H5fsError) as e:
        text = str(getattr(e, "strerror", None) or e)   # a remote error names the URL already
        _line(err, f"h5fs: {text if text.startswith(path) else f'{path}: {text}'}")
        return 2
    finally:
        if line is not None:
            line.done()
    for w in report.warnings:
        _line(out, f"warning: {w}")
    if report.sound:
        _line(out, report.summary())
        return 0
    for p in report.problems:
        _line(out, str(p))
    _line(err, report.summary())
    return 1


def _line(stream: TextIO, text: str) -> None:
    """Write a line the stream's encoding takes: names from the file may hold any bytes."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    stream.write(text.encode(encoding, "backslashreplace").decode(encoding) + "\n")

