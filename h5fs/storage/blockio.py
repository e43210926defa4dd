"""Bounds-checked positional reads from the .h5 file (thread-safe: positional reads only)."""

from __future__ import annotations

import os
import stat
from typing import Callable

from ..errors import FormatError
from ..format.codec import Reader, Sizes
from .byte_source import ByteSource, as_source
from .metadata_cache import MetadataCache
from .object_header import reader as header_reader

# No single metadata structure h5fs reads may claim more than this; protects against sizes
# taken from a hostile file (chunk data has its own bound: the decoded chunk size).
MAX_METADATA_BLOCK = 256 * 1024 * 1024
MAX_WANT = 1 << 20        # bytes of one index node fetched ahead of the walk
MAX_WANT_NODES = 4096     # index nodes fetched ahead at once


def open_regular(path: str, writable: bool = False, create: bool = False) -> int:
    """A read-only (or read-write) fd on `path`, refusing anything but a regular file; `create`
    makes a missing file (as libhdf5 does when it writes external data).

    Names come from the file itself (external data files, virtual dataset sources): opening a
    FIFO would block the daemon forever and a device never ends, so neither is read.
    """
    flags = (os.O_RDWR if writable else os.O_RDONLY) | (os.O_CREAT if create else 0)
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


class BlockReader:
    """Reads byte ranges at HDF5 addresses (relative to the superblock's base address)."""

    def __init__(self, source: int | ByteSource, base: int = 0, sizes: Sizes = Sizes(),
                 meta: MetadataCache | None = None, pread: Callable[[int, int], bytes] | None = None, end: int = 0):
        """`source`: the file's bytes (an fd: a local file); `pread` (size, position) and `end`
        (where its bytes end, past the file's): a read-only open's view of metadata through a
        crash's journal, or a writable file's metadata not yet in it (page_overlay). Data is read
        from `source` itself."""
        self.source = as_source(source)
        self.fd = self.source.fd
        self.meta = meta if meta is not None else MetadataCache()  # the open file's metadata cache
        self.base = base
        self.sizes = sizes
        self.pread = pread or self.source.pread
        self.eof = max(self.source.end(), end)

    def read(self, addr: int | None, size: int, what: str = "block") -> bytes:
        """Exactly `size` bytes at `addr`, or FormatError naming `what`."""
        if addr is None:
            raise FormatError(f"{what}: undefined address")
        if size < 0 or size > MAX_METADATA_BLOCK:
            raise FormatError(f"{what}: implausible size {size}")
        start = self.base + addr
        if start < 0 or start + size > self.eof:
            raise FormatError(f"{what}: range {addr}+{size} lies outside the file ({self.eof - self.base} bytes)")
        data = self.pread(size, start)
        if len(data) != size:
            raise FormatError(f"{what}: short read at {addr}")
        return data

    def object_header(self, address: int, what: str):
        """The decoded object header at `address`, cached."""
        return self.meta.get(address, header_reader.HEADER, lambda: header_reader.decode_at(self, address, what),
                             header_reader.nbytes)

    def read_upto(self, addr: int | None, size: int, what: str = "block") -> bytes:
        """Up to `size` bytes at `addr`, clipped at end of file (for structures of unknown length)."""
        if addr is None:
            raise FormatError(f"{what}: undefined address")
        start = self.base + addr
        if start < 0 or start >= self.eof:
            raise FormatError(f"{what}: address {addr} lies outside the file")
        size = min(size, self.eof - start, MAX_METADATA_BLOCK)
        return self.pread(size, start)

    def want(self, addresses, size: int) -> None:
        """Structures of about `size` bytes at these addresses are read next (the children of
        an index node): a remote object fetches them together, in parallel, instead of one
        round trip each as the walk reaches them."""
        if self.source.remote:   # a node's size comes from the file: bounded like a read of it
            spans = [(self.base + a, min(size, MAX_WANT)) for a in addresses if a is not None]
            self.source.want(spans[:MAX_WANT_NODES])

    def cursor(self, addr: int | None, size: int, what: str = "block") -> Reader:
        return Reader(self.read(addr, size, what), 0, self.sizes, what)

    def check_range(self, addr: int | None, size: int, what: str) -> None:
        """Raise unless [addr, addr+size) lies inside the file."""
        if addr is None or addr < 0 or size < 0 or self.base + addr + size > self.eof:
            raise FormatError(f"{what}: range {addr}+{size} lies outside the file")
