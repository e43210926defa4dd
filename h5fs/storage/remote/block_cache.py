"""The blocks of one version of one remote object, kept in a sparse local file that outlives the
mount, so a second mount reads from local disk what the first one fetched.

A directory per object URL under the cache directory holds `meta` (URL, version, block size:
another version or block size starts the entry afresh), `data` (the object's bytes at their own
offsets, a sparse file) and `log` (16-byte records: block number, CRC-32 of its bytes, stored or
evicted), appended after each block's bytes are written. Nothing is fsync'd: a block from an
earlier mount is checked against its CRC before its first use, so bytes a power loss tore are
fetched again, never served. The page cache holds the hot blocks, so the daemon keeps no copy.

Size: the blocks of every entry together stay within the budget; at open the least recently
used other entries go, and while mounted this object's least recently used blocks are punched
out of `data`. An entry another mount holds (flock) is used by neither: the second mount takes a
private, unlinked file instead. Without a cache directory (`cache_dir=none`) the same private
file serves, within the same budget.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import stat
import struct
import tempfile
import threading
import zlib
from collections import OrderedDict

from ...errors import H5fsError

log = logging.getLogger("h5fs")


class CacheFull(H5fsError):
    """The block cache's disk takes no more: the read answers EIO (the next one tries again)."""

    transient = True

RECORD = struct.Struct("<QII")     # block number, crc32, kind
STORED, EVICTED = 1, 2
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 1, 2
_libc = ctypes.CDLL(None, use_errno=True)


def _punch(fd: int, offset: int, length: int) -> None:
    """Give the blocks' disk space back (the file keeps its size; the range reads as zeros). A
    file system that cannot only keeps the space: the block is forgotten either way."""
    if _libc.fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, ctypes.c_long(offset), ctypes.c_long(length)):
        err = ctypes.get_errno()
        if err != errno.EOPNOTSUPP:
            log.warning("block cache: space of an evicted block not given back: %s", os.strerror(err))


def _check_owner(path: str, shared_ok: bool) -> None:
    """Refuse a directory another user could have filled: its blocks would be served as the
    object's (a CRC is no signature). It must be ours (or root's, for the cache directory) and
    writable by nobody else, or, for the cache directory, sticky (as /tmp is)."""
    st = os.lstat(path)
    owners = (os.geteuid(), 0) if shared_ok else (os.geteuid(),)
    others_write = st.st_mode & 0o022 and not (shared_ok and st.st_mode & stat.S_ISVTX)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid not in owners or others_write:
        raise OSError(errno.EPERM, f"{path} is not a directory of this user's that only it can write")


def _entry_bytes(path: str) -> int:
    try:
        return os.stat(os.path.join(path, "data")).st_blocks * 512
    except OSError:
        return 0


class BlockCache:
    def __init__(self, directory: str | None, url: str, version: str, size: int, block: int, budget: int):
        self.size, self.block = size, block
        self.budget_blocks = max(budget // block, 64)
        self._lock = threading.Lock()
        self._blocks: OrderedDict[int, int] = OrderedDict()   # block -> crc, least recently used first
        self._unchecked: set[int] = set()                     # stored by an earlier mount
        self._pins: dict[int, int] = {}                       # blocks a read is copying out of
        self.hits = self.misses = 0
        self.path: str | None = None
        self._log_fd = -1
        self._lock_fd = -1
        if directory:
            try:
                self._open_entry(directory, url, version, budget)
            except OSError as e:
                log.warning("%s: block cache in %s not used (%s): blocks are kept in a private file", url, directory, e)
                self._close_entry()
        if self.path is None:
            fd, name = tempfile.mkstemp(prefix="h5fs-blocks-")
            os.unlink(name)
            self.fd = fd
        os.ftruncate(self.fd, size)

    # -- the entry on disk ----------------------------------------------------------------------
    def _open_entry(self, directory: str, url: str, version: str, budget: int) -> None:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        _check_owner(directory, shared_ok=True)
        path = os.path.join(directory, hashlib.sha256(url.encode()).hexdigest()[:32])
        os.makedirs(path, mode=0o700, exist_ok=True)
        _check_owner(path, shared_ok=False)
        self._lock_fd = os.open(os.path.join(path, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OSError(errno.EBUSY, "another mount of the same URL uses it") from None
        meta = {"url": url, "version": version, "block": self.block}
        meta_path = os.path.join(path, "meta")
        try:
            with open(meta_path) as fh:
                same = json.load(fh) == meta
        except (OSError, ValueError):
            same = False
        if not same:   # another version or block size: nothing in the entry is of use
            for name in ("data", "log"):
                try:
                    os.unlink(os.path.join(path, name))
                except FileNotFoundError:
                    pass
            with open(meta_path + ".new", "w") as fh:
                json.dump(meta, fh)
            os.replace(meta_path + ".new", meta_path)
        _prune(directory, keep=path, budget=budget - min(self.size, budget))
        self.fd = os.open(os.path.join(path, "data"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        log_path = os.path.join(path, "log")
        self._log_fd = os.open(log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self._load_log(log_path)
        os.utime(meta_path)   # recency, for pruning
        self.path = path

    def _load_log(self, log_path: str) -> None:
        raw = os.pread(self._log_fd, os.fstat(self._log_fd).st_size, 0)
        last = (self.size - 1) // self.block if self.size else -1
        for i in range(0, len(raw) - RECORD.size + 1, RECORD.size):
            number, crc, kind = RECORD.unpack_from(raw, i)
            if kind == STORED and number <= last:
                self._blocks[number] = crc
                self._blocks.move_to_end(number)
            elif kind == EVICTED:
                self._blocks.pop(number, None)
            else:
                break   # a torn or foreign tail: what follows is not trusted
        self._unchecked = set(self._blocks)
        if len(raw) > 4 * RECORD.size * max(len(self._blocks), 1024):
            self._compact(log_path)

    def _compact(self, log_path: str) -> None:
        """Rewrite the log with one record per stored block."""
        with open(log_path + ".new", "wb") as fh:
            fh.write(b"".join(RECORD.pack(n, crc, STORED) for n, crc in self._blocks.items()))
        os.replace(log_path + ".new", log_path)
        os.close(self._log_fd)
        self._log_fd = os.open(log_path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)

    def _close_entry(self) -> None:
        for fd in (self._log_fd, self._lock_fd):
            if fd >= 0:
                os.close(fd)
        self._log_fd = self._lock_fd = -1
        if self.path is not None:
            os.close(self.fd)
        self.path = None

    # -- blocks ---------------------------------------------------------------------------------
    def ready(self, number: int) -> bool:
        """Whether the block is here and may be served without a check."""
        return number in self._blocks and number not in self._unchecked

    def has(self, number: int) -> bool:
        """Whether the block is here, checked or not (read-ahead leaves these alone)."""
        return number in self._blocks

    def missing(self, numbers: range) -> list[int]:
        """The blocks of `numbers` that are not ready (checking those an earlier mount stored:
        a block whose bytes no longer match its CRC is dropped and counts as missing)."""
        out = []
        for n in numbers:
            if n in self._unchecked:
                self._check(n)
            if n in self._blocks:
                self.hits += 1
            else:
                self.misses += 1
                out.append(n)
        return out

    def _check(self, number: int) -> None:
        data = os.pread(self.fd, self._length(number), number * self.block)
        with self._lock:
            self._unchecked.discard(number)
            if number in self._blocks and zlib.crc32(data) != self._blocks[number]:
                del self._blocks[number]

    def _length(self, number: int) -> int:
        return min(self.block, self.size - number * self.block)

    def store(self, number: int, data: memoryview) -> None:
        """Keep block `number` (its whole length; the last block may be short). CacheFull when
        the disk cannot take it even after half the cache made room."""
        try:
            self._write(number, data)
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise CacheFull(f"block cache {self.path or 'file'}: {e.strerror}") from e
            self._evict(len(self._blocks) // 2)
            try:
                self._write(number, data)
            except OSError as e2:
                raise CacheFull(f"block cache {self.path or 'file'}: {e2.strerror} (its disk is full)") from e2
        crc = zlib.crc32(data)
        with self._lock:
            self._blocks[number] = crc
            self._blocks.move_to_end(number)
            self._unchecked.discard(number)
            evict = self._over_budget(len(self._blocks) - self.budget_blocks)
        self._log([RECORD.pack(n, 0, EVICTED) for n in evict] + [RECORD.pack(number, crc, STORED)])

    def _write(self, number: int, data: memoryview) -> None:
        if os.pwrite(self.fd, data, number * self.block) != len(data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def _evict(self, count: int) -> None:
        with self._lock:
            evict = self._over_budget(count)
        self._log([RECORD.pack(n, 0, EVICTED) for n in evict])

    def _log(self, records: list[bytes]) -> None:
        if self._log_fd >= 0 and records:
            os.write(self._log_fd, b"".join(records))

    def _over_budget(self, excess: int) -> list[int]:
        """Evict up to `excess` least recently used blocks no read is using (called with the lock
        held: a block must be gone from the disk before anyone may fetch and store it again, or
        a late punch would zero its new bytes)."""
        out = []
        for n in self._blocks:
            if len(out) >= excess:
                break
            if not self._pins.get(n):
                out.append(n)
        for n in out:
            del self._blocks[n]
            _punch(self.fd, n * self.block, self.block)
        return out

    def pin(self, numbers: range) -> None:
        """Keep these blocks until `unpin`: a read is copying them out; marks them recently used."""
        with self._lock:
            for n in numbers:
                self._pins[n] = self._pins.get(n, 0) + 1
                if n in self._blocks:
                    self._blocks.move_to_end(n)

    def unpin(self, numbers: range) -> None:
        with self._lock:
            for n in numbers:
                left = self._pins[n] - 1
                if left:
                    self._pins[n] = left
                else:
                    del self._pins[n]

    def held(self) -> int:
        """Bytes of blocks kept."""
        return len(self._blocks) * self.block

    def close(self) -> None:
        if self.path is None:
            os.close(self.fd)
        self._close_entry()


def _prune(directory: str, keep: str, budget: int) -> None:
    """Remove least recently used entries (never `keep`, never one in use) until the others fit
    in `budget` bytes."""
    entries = []
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if path != keep and os.path.isdir(path):
            try:
                entries.append((os.stat(os.path.join(path, "meta")).st_mtime, path))
            except OSError:
                entries.append((0.0, path))
    total = sum(_entry_bytes(p) for _, p in entries)
    for _, path in sorted(entries):
        if total <= budget:
            break
        try:
            fd = os.open(os.path.join(path, "lock"), os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            fd = -1
        try:
            if fd >= 0:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            size = _entry_bytes(path)
            shutil.rmtree(path, ignore_errors=True)
            total -= size
        except BlockingIOError:
            continue
        finally:
            if fd >= 0:
                os.close(fd)
