"""The pass-through limit: a minimal pyfuse3 + trio filesystem serving a directory read-only.

    python3 scripts/passthrough_fs.py SOURCE_DIR MOUNTPOINT                 # foreground
    python3 scripts/passthrough_fs.py --background [--ready-file F] SOURCE_DIR MOUNTPOINT

`scripts/bench_read.py` serves a plain file holding a dataset's raw view through it, so h5fs's
read throughput can be told from what any pyfuse3 daemon reaches on this machine (issue 10).

What it does, and nothing more: every file and directory under SOURCE_DIR, read-only (writes
answer EROFS); a read is one `os.pread` in the trio thread (no worker-thread hop); files are
opened with `keep_cache=False` (each open reads through FUSE again) and without `direct_io`.
Mounted as h5fs mounts read-only: options `ro`, `default_permissions`, `fsname=` the source,
otherwise pyfuse3's defaults; `st_blksize` 1 MiB (so `cat` reads in 1 MiB pieces); once the
mount answers, the mount's bdi read-ahead (`/sys/class/bdi/<major:minor>/read_ahead_kb`, root
only) is set to --readahead-kb (default 4096, as h5fs; 0 leaves the kernel's), exactly as
h5fs/fuse/daemon.py does. Entry and attribute timeouts 3600 s.

Ready handshake: once the mount answers a `stat` and the read-ahead is set, the foreground
daemon prints "ready" on stdout; with --ready-file it also writes its pid there (atomically).
--background forks first: the parent exits 0 once the daemon is ready (printing its pid), or
1 with the reason. Unmount with `fusermount3 -u MOUNTPOINT` (or SIGTERM/SIGINT the daemon).
"""

from __future__ import annotations

import argparse
import errno
import os
import sys

import bare_fuse
from bare_fuse import fuse_escape
from h5fs.fuse.mounts import find_mount, set_readahead

TIMEOUT = 3600.0
BLKSIZE = 1 << 20          # as h5fs (h5fs/fuse/stat_replies.py BLKSIZE)
DEFAULT_READAHEAD_KB = 4096  # as h5fs (h5fs/mount_options.py DEFAULT_READAHEAD_KB)
WRITING = os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND


# ------------------------------------------------------------------ mount table (h5fs's own helpers)

def mount_device(mountpoint: str) -> str | None:
    """The "major:minor" of the topmost mount at `mountpoint` (names its bdi), or None."""
    m = find_mount(mountpoint)
    return None if m is None else m.device


# ------------------------------------------------------------------ the filesystem

def make_operations():
    import pyfuse3
    from pyfuse3 import FUSEError

    def oserror(exc: OSError) -> FUSEError:
        return FUSEError(exc.errno or errno.EIO)

    class PassthroughOperations(pyfuse3.Operations):
        def __init__(self, source: str):
            super().__init__()
            self.paths: dict[int, bytes] = {pyfuse3.ROOT_INODE: os.fsencode(source)}
            self.inodes: dict[bytes, int] = {os.fsencode(source): pyfuse3.ROOT_INODE}
            self.listings: dict[int, list[tuple[bytes, int]]] = {}
            self.next_ino = pyfuse3.ROOT_INODE + 1

        def _path(self, ino: int) -> bytes:
            path = self.paths.get(ino)
            if path is None:
                raise FUSEError(errno.ESTALE)
            return path

        def _ino(self, path: bytes) -> int:
            ino = self.inodes.get(path)
            if ino is None:
                ino = self.inodes[path] = self.next_ino
                self.paths[ino] = path
                self.next_ino += 1
            return ino

        def _attr(self, ino: int, path: bytes) -> pyfuse3.EntryAttributes:
            try:
                st = os.lstat(path)
            except OSError as exc:
                raise oserror(exc) from None
            a = pyfuse3.EntryAttributes()
            a.st_ino = ino
            a.entry_timeout = a.attr_timeout = TIMEOUT
            a.st_mode = st.st_mode & ~0o222          # read-only
            a.st_nlink, a.st_uid, a.st_gid = st.st_nlink, st.st_uid, st.st_gid
            a.st_size, a.st_blocks, a.st_blksize = st.st_size, st.st_blocks, BLKSIZE
            a.st_atime_ns, a.st_mtime_ns, a.st_ctime_ns = st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns
            return a

        async def lookup(self, parent_inode, name, ctx=None):
            path = os.path.join(self._path(parent_inode), name)
            if name in (b".", b".."):
                raise FUSEError(errno.ENOENT)
            if not os.path.lexists(path):
                neg = pyfuse3.EntryAttributes()
                neg.st_ino = 0
                neg.entry_timeout = TIMEOUT
                return neg
            return self._attr(self._ino(path), path)

        async def getattr(self, inode, ctx=None):
            return self._attr(inode, self._path(inode))

        async def forget(self, inode_list):
            return None   # inodes stay known for the life of the mount (a benchmark's few files)

        async def readlink(self, inode, ctx=None):
            try:
                return os.readlink(self._path(inode))
            except OSError as exc:
                raise oserror(exc) from None

        async def opendir(self, inode, ctx=None):
            path = self._path(inode)
            try:
                names = sorted(os.listdir(path))
            except OSError as exc:
                raise oserror(exc) from None
            self.listings[inode] = [(n, self._ino(os.path.join(path, n))) for n in names]
            return inode

        async def readdir(self, fh, start_id, token):
            entries = self.listings.get(fh, [])
            for i in range(start_id, len(entries)):
                name, ino = entries[i]
                try:
                    attr = self._attr(ino, self.paths[ino])
                except FUSEError:
                    continue     # gone since opendir
                if not pyfuse3.readdir_reply(token, name, attr, i + 1):
                    return

        async def releasedir(self, fh):
            self.listings.pop(fh, None)

        async def open(self, inode, flags, ctx=None):
            if flags & WRITING:
                raise FUSEError(errno.EROFS)
            try:
                fd = os.open(self._path(inode), os.O_RDONLY)
            except OSError as exc:
                raise oserror(exc) from None
            return pyfuse3.FileInfo(fh=fd, keep_cache=False)

        async def read(self, fh, off, size):
            try:
                return os.pread(fh, size, off)
            except OSError as exc:
                raise oserror(exc) from None

        async def release(self, fh):
            os.close(fh)

        async def statfs(self, ctx=None):
            st = os.statvfs(self.paths[pyfuse3.ROOT_INODE])
            s = pyfuse3.StatvfsData()
            for name in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree",
                         "f_favail", "f_namemax"):
                setattr(s, name, getattr(st, name))
            return s

    return PassthroughOperations


# ------------------------------------------------------------------ serving

def serve(source: str, mountpoint: str, readahead_kb: int, on_ready, on_fail) -> int:
    def set_bdi_readahead() -> None:
        device = mount_device(mountpoint)
        if device is not None and readahead_kb > 0 and not set_readahead(device, readahead_kb):
            print(f"passthrough: could not set read_ahead_kb of bdi {device} (not root?)", file=sys.stderr)

    options = {"ro", "default_permissions", "subtype=passthrough", "fsname=" + fuse_escape(source)}
    return bare_fuse.serve(make_operations()(source), mountpoint, options, "passthrough",
                           lambda mp: mount_device(mp) is not None, on_ready, on_fail, set_bdi_readahead)


def write_ready_file(path: str) -> None:
    part = f"{path}.{os.getpid()}.part"
    with open(part, "w") as fh:
        fh.write(f"{os.getpid()}\n")
    os.replace(part, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", help="directory to serve")
    ap.add_argument("mountpoint")
    ap.add_argument("--readahead-kb", type=int, default=DEFAULT_READAHEAD_KB,
                    help="the mount's bdi read-ahead (default %(default)s, as h5fs; 0 leaves the kernel's)")
    ap.add_argument("--background", action="store_true",
                    help="fork; return once the mount is ready (exit 0, prints the daemon's pid) or failed (exit 1)")
    ap.add_argument("--ready-file", help="once ready, write the daemon's pid to this file")
    args = ap.parse_args()
    source = os.path.realpath(args.source)
    mountpoint = os.path.realpath(args.mountpoint)
    if not os.path.isdir(source):
        print(f"passthrough: {args.source}: not a directory", file=sys.stderr)
        return 1
    if not os.path.isdir(mountpoint):
        print(f"passthrough: mount point {args.mountpoint}: not a directory", file=sys.stderr)
        return 1
    if mount_device(mountpoint) is not None:
        print(f"passthrough: {mountpoint}: busy: already a mount point", file=sys.stderr)
        return 1

    if not args.background:
        def ready() -> None:
            if args.ready_file:
                write_ready_file(args.ready_file)
            print("ready", flush=True)

        def fail(msg: str) -> None:
            print(f"passthrough: {msg}", file=sys.stderr, flush=True)

        return serve(source, mountpoint, args.readahead_kb, ready, fail)

    # background: fork before trio or any thread starts; the child reports through a pipe
    sys.stdout.flush()
    sys.stderr.flush()
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        os.setsid()
        os.chdir("/")
        reported = False

        def report(msg: str) -> None:
            nonlocal reported
            if not reported:
                reported = True
                os.write(wfd, msg.encode() + b"\n")
                os.close(wfd)

        def ready() -> None:
            if args.ready_file:
                write_ready_file(args.ready_file)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            report("ready")

        status = 1
        try:
            status = serve(source, mountpoint, args.readahead_kb, ready, lambda msg: report(f"error {msg}"))
        finally:
            report("error the daemon exited before it was ready")
            os._exit(status)
    os.close(wfd)
    with os.fdopen(rfd) as pipe:
        line = pipe.readline().strip()
    if line == "ready":
        print(pid)
        return 0
    print(f"passthrough: {line.removeprefix('error ') or 'the daemon died'}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
