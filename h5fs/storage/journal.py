"""The write-ahead journal beside the file (`FILE.h5fs-journal`): every commit's updates of live
metadata (and the new blocks they publish) are appended here as one record, and none of them
touches the .h5 file before the record is durable, so a crash in the middle of applying them is
finished at the next open.

Records follow one another: magic, entry count, check count, deferred edit count, flags, record
length, the end of allocation the superblock records before and after the record, checks
(position, length and CRC-32 of data the commit wrote into the file directly: new chunks),
entries (absolute file position, length, bytes), deferred edits (length, bytes: link edits the
commit acknowledged and left out of the file's structures, storage/pending_links.py), CRC-32 of
all that. A record flagged LANDS holds every deferred edit of the records before it (applied, or
deferred again among its own): a replay lands the deferred edits of the last such record and of
those after it (`deferred`), through the engine, at the next read-write open. A group commit
while edits wait cannot empty the journal (only memory would hold them for an instant): it
appends a CHECKPOINT instead, a LANDS record saying the file holds every update before it, and
a replay starts there (space those updates wrote may hold newer bytes since). A record is appended without waiting for the disk (`append`: a
`kill -9` of the daemon leaves every record to the kernel) and made durable with the group commit
(`sync`, then `Store.group_commit` applies the batch). Replay applies every complete record in order,
stopping at the first that is incomplete, fails its CRC or names data the file does not hold
(`holding`; a marker says the data of the records before it is durable, so theirs is not
checked): after a power loss the records not yet synced may survive in part, and what replays
is a prefix of them, each record the whole change of one commit. Replaying a record whose bytes
already reached the file writes the same bytes again, so the journal is retired lazily: once the
file is fsynced after applying (`Store.group_commit`, or when the journal passes `LIMIT` bytes).

A journal belongs to one state of its file: the file a crash left holds the end of allocation
from before the first record or after one of them (the superblock is the first update a record
applies, and it is written nowhere else while records wait). A file whose end of allocation is
none of those was written by something else since the crash (recreated by h5py, copied over):
replaying would write stale metadata into it, so the journal is set aside, unreplayed (`Stale`).
Records of an older h5fs carry no deferred edits (`V3_MAGIC`), no checks either (`V2_MAGIC`), or
no end of allocation either (`OLD_MAGIC`), and replay as they are.

An open that must not write (read-only) reads the file through the records instead (`overlay`):
it sees the file as the replay will leave it, never a record half applied.

An empty journal is given `LIMIT` bytes of allocated zeros (fallocate): a record written inside
them leaves the file's size alone, so `fdatasync` makes it durable without committing a new size
(here 210 -> 130 us per record, measured once). Replay stops at the zeros as at any incomplete
record.
"""

from __future__ import annotations

import logging
import os
import struct
import time
import zlib
from dataclasses import dataclass, replace
from typing import Callable

from ..errors import H5fsError
from .page_overlay import PageOverlay
from .file_writer import FileWriter, Recorder

log = logging.getLogger("h5fs")

MAGIC = b"H5FSJRN4"
MARK = b"H5FSJMK3"       # a marker: the data the records before it check is durable
V3_MAGIC = b"H5FSJRN3"   # no deferred edits
V2_MAGIC = b"H5FSJRN2"   # no checks
OLD_MAGIC = b"H5FSJRN1"  # no checks, no end of allocation
# magic, entries, checks, deferred edits, flags, record length, end of allocation before and after
_HEAD = struct.Struct("<8sIIIIQQQ")
_V3_HEAD = struct.Struct("<8sIIQQQ")
_V2_HEAD = struct.Struct("<8sIQQQ")
_OLD_HEAD = struct.Struct("<8sIQ")
_ENTRY = struct.Struct("<QI")
_CHECK = struct.Struct("<QII")     # position, length, CRC-32 of bytes written into the file directly
_CRC = struct.Struct("<I")
_OP = struct.Struct("<I")          # the length of a deferred edit
LANDS = 1        # flag: the record lands every deferred edit of the records before it
CHECKPOINT = 2   # flag: the file holds every update of the records before it (they are not replayed)
SUFFIX = ".h5fs-journal"
TAG = 1   # the journal's tag in a write recording (the .h5 file is 0)
LIMIT = 8 << 20   # bytes of records kept before the file is fsynced and the journal emptied


class Stale(H5fsError):
    """The journal's records belong to another state of the file."""


@dataclass(frozen=True)
class Record:
    entries: list[tuple[int, bytes]]
    eoa: tuple[int, int] | None   # the end of allocation before and after it (None: an old record)
    # (position, length, CRC-32) of data its commit wrote into the file itself, not fsynced: the
    # record is replayed only if the file holds them (a power loss may have taken them)
    checks: list[tuple[int, int, int]] = ()
    mark: bool = False   # a marker (`Journal.mark`), no record
    # edits acknowledged but kept out of the file's structures until a later commit lands them
    # (storage/pending_links.py), each as its owner encodes it; `lands`: this record's updates
    # hold every deferred edit of the records before it
    ops: list[bytes] = ()
    lands: bool = False
    checkpoint: bool = False   # the records before it are applied and durable: never replayed again
    end: int = 0   # where it ends in the journal (as read)


def journal_path(path: str) -> str:
    return path + SUFFIX


def encode(entries: list[tuple[int, bytes]], eoa: tuple[int, int], checks: list[tuple[int, int, int]] = (),
           ops: list[bytes] = (), lands: bool = False, checkpoint: bool = False) -> bytes:
    """A record of `entries` that takes the superblock's end of allocation from eoa[0] to eoa[1],
    valid only where the file holds the data `checks` describe; `ops`: edits it defers, `lands`:
    it holds those of the records before it."""
    length = _HEAD.size + _CHECK.size * len(checks) + sum(_ENTRY.size + len(data) for _, data in entries) \
        + sum(_OP.size + len(op) for op in ops)
    flags = (LANDS if lands else 0) | (CHECKPOINT if checkpoint else 0)
    parts = [_HEAD.pack(MAGIC, len(entries), len(checks), len(ops), flags, length, *eoa)]
    parts += [_CHECK.pack(*c) for c in checks]
    for position, data in entries:
        parts += [_ENTRY.pack(position, len(data)), data]
    for op in ops:
        parts += [_OP.pack(len(op)), op]
    body = b"".join(parts)
    return body + _CRC.pack(zlib.crc32(body))


def _record(buf: bytes, at: int) -> tuple[Record, int] | None:
    """The complete record at `at` and where the next begins, or None (the end, a torn record or
    foreign bytes)."""
    magic = bytes(buf[at:at + 8])
    if magic == MARK:
        end = at + len(MARK)
        if end + _CRC.size > len(buf) or _CRC.unpack_from(buf, end)[0] != zlib.crc32(MARK):
            return None
        return Record([], None, [], True), end + _CRC.size
    head = {MAGIC: _HEAD, V3_MAGIC: _V3_HEAD, V2_MAGIC: _V2_HEAD, OLD_MAGIC: _OLD_HEAD}.get(magic)
    if head is None or len(buf) - at < head.size + _CRC.size:
        return None
    nops = flags = nchecks = 0
    if head is _HEAD:
        _, count, nchecks, nops, flags, length, *eoa = head.unpack_from(buf, at)
    elif head is _V3_HEAD:
        _, count, nchecks, length, *eoa = head.unpack_from(buf, at)
    else:
        _, count, length, *eoa = head.unpack_from(buf, at)
    end = at + length
    if end + _CRC.size > len(buf) or length < head.size or _CRC.unpack_from(buf, end)[0] != zlib.crc32(buf[at:end]):
        return None
    pos = at + head.size
    checks = [_CHECK.unpack_from(buf, pos + i * _CHECK.size) for i in range(nchecks)]
    entries, pos = [], pos + nchecks * _CHECK.size
    for _ in range(count):
        position, n = _ENTRY.unpack_from(buf, pos)
        pos += _ENTRY.size
        entries.append((position, buf[pos:pos + n]))
        pos += n
    ops = []
    for _ in range(nops):
        (n,) = _OP.unpack_from(buf, pos)
        ops.append(bytes(buf[pos + _OP.size:pos + _OP.size + n]))
        pos += _OP.size + n
    return Record(entries, tuple(eoa) or None, checks, ops=ops, lands=bool(flags & LANDS),
                  checkpoint=bool(flags & CHECKPOINT)), end + _CRC.size


def _scan(buf: bytes) -> tuple[list[Record], int]:
    """Every complete record at the start of `buf`, in order (each knowing where it ends), and
    where they end."""
    out, at = [], 0
    while (rec := _record(buf, at)) is not None:
        at = rec[1]
        out.append(replace(rec[0], end=at))
    return out, at


def records(buf: bytes) -> list[Record]:
    """Every complete record, in order."""
    return _scan(buf)[0]


def _left(fd: int) -> tuple[list[Record], int] | None:
    """What the journal open at `fd` holds: its records and where they end; None when it does
    not begin with one, whole or torn (read no further: an empty journal is megabytes of zeros)."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, len(MAGIC), 0) not in (MAGIC, MARK, V3_MAGIC, V2_MAGIC, OLD_MAGIC):
        return None
    return _scan(os.pread(fd, size, 0))


def left_in(path: str) -> list[Record]:
    """The records the journal at `path` holds (none when there is no journal)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return []
    try:
        found = _left(fd)
    finally:
        os.close(fd)
    return found[0] if found else []


def decode(buf: bytes) -> list[tuple[int, bytes]] | None:
    """The entries of every complete record in order, or None (empty, torn or foreign)."""
    return [e for r in records(buf) for e in r.entries] or None


def belongs(recs: list[Record], eoa: int | None) -> bool:
    """Whether a file whose superblock records `eoa` as its end of allocation (None: no readable
    superblock) can be the file these records were written for (see the module's docstring)."""
    known = [r.eoa for r in recs if r.eoa is not None]
    return not known or eoa is not None and eoa in {known[0][0], *(after for _, after in known)}


def holding(recs: list[Record], fd: int) -> list[Record]:
    """The records up to the first whose data the file open at `fd` does not hold (a power loss
    took it: that record and every later one never happened). The data of records before the
    last marker was durable when the marker was written: not checked (space it was in may hold
    newer bytes since)."""
    marks = [i for i, rec in enumerate(recs) if rec.mark]
    for i, rec in enumerate(recs):
        if marks and i < marks[-1]:
            continue
        for position, length, crc in rec.checks:
            if zlib.crc32(os.pread(fd, length, position)) != crc:
                return recs[:i]
    return recs


def replayable(recs: list[Record], eoa: Callable[[], int | None], fd: int) -> list[Record]:
    """The records of `recs` a replay applies to the file open at `fd`, whose recorded end of
    allocation `eoa()` reads: from the last checkpoint on (the file holds what came before it,
    and space written then may hold newer bytes since), up to the first whose data the file does
    not hold (`holding`); Stale when they belong to another state of it."""
    recs = since_checkpoint(recs)
    if recs and not belongs(recs, now := eoa()):
        raise Stale(stale_reason(recs, now))
    return holding(recs, fd)


def since_checkpoint(recs: list[Record]) -> list[Record]:
    """The records from the last checkpoint on: those a replay considers."""
    return recs[max((i for i, rec in enumerate(recs) if rec.checkpoint), default=0):]


def updates(recs: list[Record]) -> list[tuple[int, bytes]]:
    """The updates `recs` make, in order."""
    return [e for r in recs for e in r.entries]


def deferred(recs: list[Record]) -> list[bytes]:
    """The deferred edits `recs` (as `holding` keeps them) leave to land, in order: those of the
    last record that lands the ones before it, and of every record after it."""
    start = max((i for i, rec in enumerate(recs) if rec.lands), default=0)
    return [op for rec in recs[start:] for op in rec.ops]


def stale_reason(recs: list[Record], eoa: int | None) -> str:
    known = sorted({x for r in recs if r.eoa is not None for x in r.eoa})
    return (f"its {len(recs)} record{'s' if len(recs) != 1 else ''} {'were' if len(recs) != 1 else 'was'} "
            f"written when the file's end of allocation was one of "
            f"{', '.join(map(str, known[:6]))}{'...' if len(known) > 6 else ''}, and it is now "
            f"{'unreadable' if eoa is None else eoa}: the file was written by something else since")


def overlay(path: str, fd: int, eoa: Callable[[], int | None]) -> tuple[PageOverlay | None, list[bytes]]:
    """What the journal at `path` (if any) would write into the file open at `fd` (its recorded
    end of allocation `eoa()`), for an open that must not write: the updates to lay over it
    (None: none), and the deferred link edits to show with them (storage/pending_links.py).
    Stale when the records belong to another state of the file."""
    recs = replayable(left_in(path), eoa, fd)
    entries = updates(recs)
    return (PageOverlay(fd, entries) if entries else None), deferred(recs)


class Journal:
    def __init__(self, path: str, recorder: Recorder | None):
        self.path = path
        self._open(recorder)

    def _open(self, recorder: Recorder | None) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise H5fsError(f"cannot open the journal {self.path}: {e.strerror}") from e
        self.writer = FileWriter(fd, TAG, recorder)
        if os.fstat(fd).st_size == 0:
            self._preallocate()
        found = _left(fd)
        self.retire = found is not None   # a crash left bytes that `replay` must retire
        # the records a crash left, and the bytes of records whose updates may not be durable in
        # the file yet (those too, until a replay retires them: a journal whose replay failed is
        # never removed)
        self.left, self.size = found or ([], 0)
        self.unsynced = False   # records appended since the last barrier
        self.redo: list[bytes] = []   # deferred edits a replay left to land

    def _preallocate(self) -> None:
        try:
            os.posix_fallocate(self.writer.fd, 0, LIMIT)
        except OSError:   # a file system without it: records grow the file (fdatasync covers that)
            pass

    @property
    def pending(self) -> bool:
        return self.size > 0

    def replay(self, fd: int, eoa: Callable[[], int | None], end: Callable[[], int | None] = lambda: None) -> int:
        """Apply again the records a crash left (to the .h5 file open at `fd`, whose recorded end
        of allocation `eoa()` reads), durably, and retire them; returns how many updates they
        held. Stale (nothing written) when they belong to another state of the file. `end()`:
        the absolute position the replayed superblock says allocated space ends at; the file is
        made that long first (a power loss may have taken a growth of it the records rely on)."""
        recs = replayable(self.left, eoa, fd)
        entries = updates(recs)
        if entries:
            target = FileWriter(fd, 0, self.writer.recorder)
            for position, data in entries:
                target.pwrite(position, data)
            length = end()
            if length is not None and os.fstat(fd).st_size < length:
                target.truncate(length)
            target.sync()
        self.redo = deferred(recs)
        if self.redo:
            # kept until a commit lands them (`Store.land`); records a replay stops before never
            # happened: cut off, so that none stands between the kept ones and the next
            self.writer.truncate(recs[-1].end)
            self.writer.sync()
            self.size, self.left, self.retire = recs[-1].end, recs, False
        elif self.retire:
            self.clear()
        return len(entries)

    def set_aside(self) -> str:
        """Keep a stale journal under another name, unreplayed, and start an empty one; returns
        the name it is kept under."""
        aside = f"{self.path}.stale-{time.strftime('%Y%m%dT%H%M%S')}"
        os.rename(self.path, aside)
        os.close(self.writer.fd)
        self._open(self.writer.recorder)
        return aside

    def log(self, entries: list[tuple[int, bytes]], eoa: tuple[int, int], ops: list[bytes] = (),
            lands: bool = False) -> None:
        """Append a record (taking the end of allocation from eoa[0] to eoa[1]) and wait until it
        is durable."""
        self.append(entries, eoa, ops=ops, lands=lands)
        self.sync()

    def append(self, entries: list[tuple[int, bytes]], eoa: tuple[int, int],
               checks: list[tuple[int, int, int]] = (), ops: list[bytes] = (), lands: bool = False) -> None:
        """Append a record without waiting: the kernel holds it (a `kill -9` of the daemon loses
        nothing), a power loss may take it and every record after it (`sync`)."""
        self._append(encode(entries, eoa, checks, ops, lands))

    def checkpoint(self, eoa: int, ops: list[bytes]) -> None:
        """The file holds every record's updates, durably, but deferred edits wait (`ops`):
        a record saying so, made durable, stands for all before it (none is replayed again)."""
        self._append(encode([], (eoa, eoa), ops=ops, lands=True, checkpoint=True))
        self.sync()

    def _append(self, record: bytes) -> None:
        self.writer.pwrite(self.size, record)
        self.size += len(record)
        self.unsynced = True

    def mark(self) -> None:
        """Append a marker: the data every record so far checks is durable in the file (the
        caller fsynced it), so a replay does not check it again."""
        self.writer.pwrite(self.size, MARK + _CRC.pack(zlib.crc32(MARK)))
        self.size += len(MARK) + _CRC.size
        self.unsynced = True

    def sync(self) -> None:
        """Every record appended so far, durable."""
        if self.unsynced:
            self.writer.sync(data_only=True)
            self.unsynced = False

    def clear(self) -> None:
        """The records are applied and durable in the file: retire them (durably, so a later
        crash never replays them over newer contents; the caller fsynced the file first)."""
        self.writer.truncate(0)
        self.writer.sync()
        self.size, self.left, self.retire, self.unsynced, self.redo = 0, [], False, False, []
        self._preallocate()

    def close(self) -> None:
        """Close it, removing the file when no record waits in it (a clean close)."""
        empty = self.size == 0
        os.close(self.writer.fd)
        if empty:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
