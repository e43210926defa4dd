"""h5fs command line: `h5fs mount [-f] [-o OPTIONS] FILE MOUNTPOINT`, `h5fs umount MOUNTPOINT`.

mount
    Returns only when the mount answers (exit 0), or prints why it could not mount (exit 1).
    Runs in the background unless `-f`: the CLI forks before any thread or trio starts; the
    child opens the file (so format errors are reported from the engine), mounts, serves, and
    reports "ready" or an error through a pipe; the parent prints it and exits. The child
    detaches (setsid) and redirects its stdio once ready.

    -o options h5fs reads (the rest go to FUSE, e.g. allow_other, default_permissions):
      ro                 read-only mount (also the case when FILE is not writable)
      log=PATH           daemon log; default: stderr with -f, else
                         $XDG_RUNTIME_DIR/h5fs/<mountpoint>.log or /tmp/h5fs-<uid>/<mountpoint>.log
                         (<mountpoint> = the absolute path with '/' replaced by '_')
      verbose            log at DEBUG level
      readahead_kb=N     the mount's bdi read-ahead (default 4096; 0 leaves the kernel's)
      fsname=NAME        default: the absolute path of FILE; subtype is always h5fs

umount
    Unmounts with `fusermount3 -u` and returns once the daemon (its pid is the xattr
    `user.h5fs.pid` of the mount root) has exited.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import subprocess
import sys
import time

from . import __version__
from .fuse import mounts

PROG = "h5fs"
DEFAULT_READAHEAD_KB = 4096
DEFAULT_WRITEBACK_MB = 64     # dirty data the daemon holds before writes flush it (-o writeback_mb=N)
# FUSE options that pyfuse3's low-level session cannot take (tested: max_read= makes the
# kernel's INIT fail after the mount exists; the others are libfuse high-level options).
REJECTED_OPTIONS = {
    "max_read": "max_read= is not supported through pyfuse3 (the FUSE session fails at INIT)",
    "auto_cache": "auto_cache is a libfuse high-level option; h5fs always keeps the page cache",
}
IGNORED_OPTIONS = {"kernel_cache"}  # what h5fs does anyway (keep_cache on every open)


class CliError(Exception):
    pass


# ----------------------------------------------------------------------------------- parsing


def _split_options(values: list[str] | None) -> list[str]:
    out = []
    for value in values or []:
        cur = ""
        i = 0
        while i < len(value):
            c = value[i]
            if c == "\\" and i + 1 < len(value):
                cur += value[i + 1]
                i += 2
                continue
            if c == ",":
                if cur:
                    out.append(cur)
                cur = ""
            else:
                cur += c
            i += 1
        if cur:
            out.append(cur)
    return out


def _fuse_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace(",", "\\,")


def _default_log(mountpoint: str) -> str:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = os.path.join(runtime, "h5fs") if runtime and os.path.isdir(runtime) else f"/tmp/h5fs-{os.getuid()}"
    os.makedirs(base, mode=0o700, exist_ok=True)
    name = mountpoint.strip("/").replace("/", "_") or "root"
    return os.path.join(base, name + ".log")


class MountConfig:
    def __init__(self, args: argparse.Namespace):
        self.foreground = args.foreground
        self.source = os.path.abspath(args.file)
        self.mountpoint = mounts.canonical(args.mountpoint)
        self.readonly = False
        self.log_path: str | None = None
        self.verbose = False
        self.readahead_kb = DEFAULT_READAHEAD_KB
        self.writeback_mb = DEFAULT_WRITEBACK_MB
        self.writeback_cache = False
        self.compression: str | None = None   # new datasets' filters (None: the default)
        fsname = self.source
        passthrough: list[str] = []
        for opt in _split_options(args.options):
            key, eq, val = opt.partition("=")
            if key == "ro" and not eq:
                self.readonly = True
            elif key == "rw" and not eq:
                self.readonly = False
            elif key == "log" and eq:
                self.log_path = os.path.abspath(val)
            elif key == "verbose" and not eq:
                self.verbose = True
            elif key in ("readahead_kb", "writeback_mb") and eq:
                try:
                    setattr(self, key, int(val))
                except ValueError:
                    raise CliError(f"bad value in -o {opt}: an integer is needed") from None
            elif key == "writeback_cache" and not eq:
                self.writeback_cache = True
            elif key == "compression" and eq:
                from .model.filter_spec import parse_filters
                try:
                    parse_filters(val)
                except ValueError as exc:
                    raise CliError(f"bad value in -o {opt}: {exc}") from None
                self.compression = val
            elif key == "fsname" and eq:
                fsname = val
            elif key == "subtype" or key in IGNORED_OPTIONS:
                pass  # subtype is always h5fs: `h5fs umount` and mount listings rely on it
            elif key in REJECTED_OPTIONS:
                raise CliError(f"-o {opt}: {REJECTED_OPTIONS[key]}")
            else:
                passthrough.append(opt)
        self.fsname = fsname
        self.passthrough = passthrough

    def fuse_options(self) -> set[str]:
        opts = {"default_permissions", "subtype=h5fs", "fsname=" + _fuse_escape(self.fsname)}
        opts.update(self.passthrough)
        if self.readonly:
            opts.add("ro")
        return opts


# ----------------------------------------------------------------------------------- mount


def _check_paths(cfg: MountConfig) -> None:
    try:
        st = os.stat(cfg.source)
    except OSError as exc:
        raise CliError(f"{cfg.source}: {exc.strerror}") from None
    import stat as stat_mod
    if not stat_mod.S_ISREG(st.st_mode):
        raise CliError(f"{cfg.source}: not a regular file")
    if not os.access(cfg.source, os.R_OK):
        raise CliError(f"{cfg.source}: {os.strerror(errno.EACCES)}")
    if not os.access(cfg.source, os.W_OK):
        cfg.readonly = True
    existing = mounts.find_mount(cfg.mountpoint)
    if existing is not None:
        raise CliError(f"{cfg.mountpoint}: busy: already a mount point ({existing.fstype} {existing.source})")
    try:
        mst = os.stat(cfg.mountpoint)
    except OSError as exc:
        raise CliError(f"mount point {cfg.mountpoint}: {exc.strerror}") from None
    if not stat_mod.S_ISDIR(mst.st_mode):
        raise CliError(f"mount point {cfg.mountpoint}: not a directory")
    if not os.path.exists("/dev/fuse"):
        raise CliError("FUSE is not available: /dev/fuse is missing (modprobe fuse?)")


def _setup_logging(cfg: MountConfig) -> None:
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    if cfg.log_path:
        # names from hostile files may hold undecodable bytes: escape them, never fail to log
        handler: logging.Handler = logging.FileHandler(cfg.log_path, errors="backslashreplace")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(
        "%(asctime)s h5fs[%(process)d] %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if cfg.verbose else logging.INFO)


def _open_file(cfg: MountConfig):
    from .errors import H5fsError
    from .model.file import H5File
    try:
        return H5File.open(cfg.source, writable=not cfg.readonly, lock=True)
    except H5fsError as exc:
        raise CliError(f"{cfg.source}: {exc}") from None
    except OSError as exc:
        raise CliError(f"{cfg.source}: {exc.strerror or exc}") from None


def _run_daemon(cfg: MountConfig, on_ready, on_fail) -> int:
    """Open, mount and serve (in the process that stays); errors before ready go to on_fail."""
    try:
        h5 = _open_file(cfg)
    except CliError as exc:
        on_fail(str(exc))
        return 1
    try:
        from .fuse.daemon import serve
        from .model.writeback import Writeback
        info = {"pid": os.getpid(), "file": cfg.source, "log": cfg.log_path or "stderr"}
        writeback = None if cfg.readonly else Writeback(h5, cfg.writeback_mb << 20)
        return serve(h5, cfg.source, cfg.mountpoint, cfg.fuse_options(), writeback=writeback,
                     writeback_cache=cfg.writeback_cache, compression=cfg.compression, info=info,
                     readahead_kb=cfg.readahead_kb,
                     on_ready=on_ready, on_fail=on_fail)
    except Exception as exc:
        logging.getLogger("h5fs").exception("daemon failed")
        on_fail(f"daemon failed: {exc}")
        return 1
    finally:
        try:
            h5.close()
        except Exception:
            logging.getLogger("h5fs").exception("closing %s failed", cfg.source)


def cmd_mount(args: argparse.Namespace) -> int:
    cfg = MountConfig(args)
    _check_paths(cfg)
    if cfg.foreground:
        _setup_logging(cfg)
        failed: list[str] = []

        def on_fail(msg: str) -> None:
            failed.append(msg)
            print(f"{PROG}: {msg}", file=sys.stderr, flush=True)

        status = _run_daemon(cfg, lambda: logging.getLogger("h5fs").info("ready"), on_fail)
        return 1 if failed else status
    if cfg.log_path is None:
        cfg.log_path = _default_log(cfg.mountpoint)
    return _mount_background(cfg)


def _mount_background(cfg: MountConfig) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the daemon
        os.close(rfd)
        status = 1
        try:
            os.setsid()
            os.chdir("/")
            _setup_logging(cfg)
            state = {"reported": False}

            def report(line: str) -> None:
                if state["reported"]:
                    return
                state["reported"] = True
                try:
                    os.write(wfd, line.encode("utf-8", "replace") + b"\n")
                    os.close(wfd)
                except OSError:
                    pass

            def on_ready() -> None:
                report("ready")
                _detach_stdio(cfg.log_path)

            def on_fail(msg: str) -> None:
                logging.getLogger("h5fs").error("%s", msg)
                report("error " + msg)

            status = _run_daemon(cfg, on_ready, on_fail)
            report("error the daemon exited before the mount was ready")
        except BaseException as exc:  # never return into the parent's code
            try:
                os.write(wfd, f"error daemon failed: {exc}\n".encode())
            except OSError:
                pass
        finally:
            os._exit(status)
    os.close(wfd)
    data = b""
    while True:
        chunk = os.read(rfd, 4096)
        if not chunk:
            break
        data += chunk
        if b"\n" in data:
            break
    os.close(rfd)
    line = data.split(b"\n", 1)[0].decode("utf-8", "replace")
    if line == "ready":
        return 0
    msg = line[len("error "):] if line.startswith("error ") else f"the daemon died before the mount was ready (see {cfg.log_path})"
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    raise CliError(msg)


def _detach_stdio(log_path: str | None) -> None:
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    if log_path:
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.dup2(fd, 2)
        os.close(fd)
    else:
        os.dup2(devnull, 2)
    os.close(devnull)
    sys.stderr = open(2, "w", closefd=False, buffering=1)
    sys.stdout = open(1, "w", closefd=False)


# ----------------------------------------------------------------------------------- umount


def _read_pid(mp: str, timeout: float = 10.0) -> int | None:
    """The daemon's pid from the root's `user.h5fs.pid` (None: dead or hung daemon)."""
    import threading
    box: list[int] = []

    def ask() -> None:
        try:
            box.append(int(os.getxattr(mp, "user.h5fs.pid")))
        except (OSError, ValueError):
            pass  # a dead daemon (ENOTCONN): unmounting is all there is to do
    t = threading.Thread(target=ask, daemon=True)
    t.start()
    t.join(timeout)
    return box[0] if box else None


def cmd_umount(args: argparse.Namespace) -> int:
    mp = mounts.canonical(args.mountpoint)
    m = mounts.find_mount(mp)
    if m is None:
        raise CliError(f"{mp}: not mounted")
    if m.fstype != mounts.FSTYPE:
        raise CliError(f"{mp}: not an h5fs mount ({m.fstype})")
    pid = _read_pid(mp)
    cmd = ["fusermount3", "-u"] + (["-z"] if args.lazy else []) + [mp]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        msg = proc.stderr.strip() or f"fusermount3 exited with {proc.returncode}"
        raise CliError(f"cannot unmount {mp}: {msg}")
    if pid is not None:
        deadline = time.monotonic() + args.timeout
        while mounts.process_alive(pid):
            if time.monotonic() > deadline:
                raise CliError(f"{mp} is unmounted but the daemon (pid {pid}) has not exited after {args.timeout:g} s")
            time.sleep(0.02)
    return 0


# ----------------------------------------------------------------------------------- check


def cmd_check(args: argparse.Namespace) -> int:
    from .check import run
    if args.repair:   # what the next read-write mount would do: finish interrupted updates
        from .errors import H5fsError
        from .model.file import H5File
        try:
            H5File.open(args.file, writable=True, lock=True).close()
        except (OSError, H5fsError) as exc:
            print(f"{PROG}: {args.file}: cannot repair: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
            return 2
    return run(args.file)


# ----------------------------------------------------------------------------------- create

CREATE_XATTR = "user.h5fs.create"   # the request the daemon takes on a directory of its mount


def _dims(text: str | None, what: str, none_ok: bool = False) -> list | None:
    if text is None:
        return None
    try:
        return [None if none_ok and d.strip().lower() == "none" else int(d) for d in text.split(",") if d.strip()]
    except ValueError:
        raise CliError(f"bad {what} {text!r}: comma-separated integers{' or None' if none_ok else ''}") from None


def cmd_create(args: argparse.Namespace) -> int:
    """An empty dataset made by the daemon of the mount PATH lies in (never a second writer)."""
    import json
    parent, name = os.path.split(os.path.abspath(args.path))
    if not name:
        raise CliError(f"{args.path}: no dataset name")
    try:
        kind = os.getxattr(parent, "user.h5fs.kind")   # every object of a mount answers it
    except OSError:
        kind = None
    if kind != b"group":
        raise CliError(f"{parent}: not a directory of an h5fs mount")
    request = {"name": name, "shape": _dims(args.shape, "shape"), "dtype": args.dtype,
               "chunks": _dims(args.chunks, "chunks"), "maxshape": _dims(args.maxshape, "maxshape", True),
               "filters": args.filters, "fill": args.fill, "layout": "sparse" if args.sparse else args.layout}
    try:
        os.setxattr(parent, CREATE_XATTR, json.dumps(request).encode())
    except OSError as exc:
        raise CliError(f"cannot create {args.path}: {exc.strerror} (the mount's log says why)") from None
    return 0


# ----------------------------------------------------------------------------------- main


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Mount an HDF5 file as a directory tree.")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("mount", help="mount FILE on MOUNTPOINT",
                       description="Mount FILE on MOUNTPOINT; returns when the mount is ready.")
    m.add_argument("-f", "--foreground", action="store_true", help="stay in the foreground")
    m.add_argument("-o", dest="options", action="append", metavar="OPTIONS",
                   help="comma-separated options: ro, log=PATH, verbose, readahead_kb=N, writeback_mb=N, "
                        "writeback_cache, compression=SPEC (new datasets; default gzip:4,shuffle; none), fsname=NAME, and FUSE options (allow_other, default_permissions, ...)")
    m.add_argument("file", metavar="FILE")
    m.add_argument("mountpoint", metavar="MOUNTPOINT")
    m.set_defaults(func=cmd_mount)
    u = sub.add_parser("umount", aliases=["unmount"], help="unmount and wait for the daemon to exit")
    u.add_argument("-z", "--lazy", action="store_true", help="lazy unmount (fusermount3 -z)")
    u.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the daemon (60)")
    u.add_argument("mountpoint", metavar="MOUNTPOINT")
    u.set_defaults(func=cmd_umount)
    c = sub.add_parser("check", help="verify FILE without mounting it",
                       description="Verify every structure of FILE; exit 0 when sound, 1 with one line per "
                                   "problem, 2 when FILE cannot be read.")
    c.add_argument("--repair", action="store_true",
                   help="first finish the updates a crash interrupted (replay the journal), as a mount does")
    c.add_argument("file", metavar="FILE")
    c.set_defaults(func=cmd_check)
    k = sub.add_parser("create", help="create an empty dataset through a read-write mount",
                       description="Create dataset PATH (inside a read-write h5fs mount) with the given "
                                   "layout; the mount's daemon writes it.")
    k.add_argument("path", metavar="PATH")
    k.add_argument("--shape", required=True, help="e.g. 1000,1000")
    k.add_argument("--dtype", required=True, help="a NumPy dtype: f4, <i8, S10, ...")
    k.add_argument("--chunks", help="chunk shape, e.g. 100,100 (chunked layout)")
    k.add_argument("--maxshape", help="maximum shape, None for unlimited, e.g. None,1000")
    k.add_argument("--filters", default="none",
                   help="e.g. gzip:4,shuffle (chunked layout; default none); sparse datasets: each section's, "
                        "e.g. values=shuffle,gzip:4,selection=gzip:1")
    k.add_argument("--fill", type=float, help="fill value (sparse datasets: what undefined elements read as)")
    k.add_argument("--layout", choices=["contiguous", "chunked", "compact"],
                   help="default: chunked when chunks, maxshape or filters are given, else contiguous")
    k.add_argument("--sparse", action="store_true",
                   help="a sparse dataset: structured chunks holding only the defined elements (needs --chunks "
                        "or takes h5py's guess)")
    k.set_defaults(func=cmd_create)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except CliError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
