"""h5fs command line: mount, umount, status, check, create, install-helpers.

mount
    Returns only when the mount answers (exit 0), or prints why it could not mount (exit 1; 2 for
    a bad option). Runs in the background unless `-f`: the CLI forks before any thread or trio
    starts; the child opens the file (so format errors are reported from the engine), mounts,
    serves, and reports "ready" or an error through a pipe; the parent prints it and exits. The
    child detaches (setsid) and redirects its stdio once ready. Options: h5fs/mount_options.py.
    FILE may be a URL (s3://, http(s)://): kept as given, mounted read-only, reached when the
    daemon opens it (a missing object or an unreachable server is the one line of exit 1).
    `h5fs FILE MOUNTPOINT -o OPTIONS` (what mount.fuse3 runs for `-t fuse.h5fs` when our own
    helpers are not installed) is `h5fs mount`.

umount
    Writes every change into the file first (an fsync of the mount root, with a progress line on
    a terminal), unmounts with `fusermount3 -u` and returns once the daemon (its pid is the xattr
    `user.h5fs.pid` of the mount root) has exited.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import json
import logging
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

from . import __version__, mount_options
from .errors import H5fsError
from .fuse import mounts
from .logs import Logs, default_file
from .progress import Line, flush_text
from .status import ask
from .storage.byte_source import is_url
from .storage.hsds.settings import is_domain_url, split_domain_url

# The engine (numpy, the model) is imported inside the commands that use it: umount, status and
# --help answer without loading it.
PROG = "h5fs"
COMMANDS = ("mount", "umount", "unmount", "status", "check", "create", "attr", "install-helpers")


class CliError(Exception):
    pass


class UsageError(CliError):
    """A bad option or argument: exit status 2."""


class MountConfig:
    def __init__(self, args: argparse.Namespace):
        self.foreground = args.foreground
        self.domain = is_domain_url(args.file)   # an HSDS domain (model/hsds)
        self.url = is_url(args.file) or self.domain
        self.source = args.file if self.url else os.path.abspath(args.file)   # a URL as given
        self.mountpoint = mounts.canonical(args.mountpoint)
        self.options = _options(args.options, self.source, self.url)


def _options(values: list[str] | None, source: str, url: bool) -> mount_options.MountOptions:
    """The parsed options, checked against the source (UsageError: exit 2)."""
    if url and ("?" in source or "#" in source):   # obstore asks for the path alone: a signature would be lost
        raise UsageError(f"{source}: a URL with a query string (a presigned URL) is not supported")
    if url and "@" in urlsplit(source).netloc:   # it would show in /proc/mounts, the status and the log
        raise UsageError("a URL with a user name or password in it is refused: it would be shown to every user "
                         "of the machine (give S3 credentials in the environment or ~/.aws)")
    try:
        opts = mount_options.parse(values)
        mount_options.for_source(opts, source, url)
    except mount_options.OptionError as exc:
        raise UsageError(str(exc)) from None
    return opts


def _named(source: str, exc: BaseException) -> str:
    """The error's message naming `source` once (remote errors begin with the URL already)."""
    text = str(getattr(exc, "strerror", None) or exc)
    return text if text.startswith(source) else f"{source}: {text}"


# ----------------------------------------------------------------------------------- mount


def _check_paths(cfg: MountConfig) -> None:
    if not cfg.url:   # a URL is checked when the daemon opens it
        _check_file(cfg)
    existing = mounts.find_mount(cfg.mountpoint)
    if existing is not None:
        raise CliError(f"{cfg.mountpoint}: busy: already a mount point ({existing.fstype} {existing.source})")
    try:
        mst = os.stat(cfg.mountpoint)
    except OSError as exc:
        raise CliError(f"mount point {cfg.mountpoint}: {exc.strerror}") from None
    if not stat.S_ISDIR(mst.st_mode):
        raise CliError(f"mount point {cfg.mountpoint}: not a directory")
    if not os.path.exists("/dev/fuse"):
        raise CliError("FUSE is not available: /dev/fuse is missing (modprobe fuse?)")


def _check_file(cfg: MountConfig) -> None:
    try:
        st = os.stat(cfg.source)
    except OSError as exc:
        raise CliError(f"{cfg.source}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise CliError(f"{cfg.source}: not a regular file")
    if not os.access(cfg.source, os.R_OK):
        raise CliError(f"{cfg.source}: {os.strerror(errno.EACCES)}")
    if not os.access(cfg.source, os.W_OK):
        cfg.options.readonly = True


def _check_log(cfg: MountConfig) -> None:
    """A log=PATH the daemon could not open is a bad option, found before anything starts (it
    creates the file, as the daemon would)."""
    path = cfg.options.log
    if path is None:
        return
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666))
    except OSError as exc:
        raise UsageError(f"log={path}: cannot write the log there: {exc.strerror}") from None


def _setup_logging(cfg: MountConfig, logs: Logs) -> None:
    opts = cfg.options
    if opts.log:
        logs.to_file(opts.log, opts.verbose)
    elif cfg.foreground:
        logs.to_stderr(opts.verbose)
    else:
        logs.to_syslog_or(default_file(cfg.mountpoint), opts.verbose)


def _open_file(cfg: MountConfig):
    # the engine, lazily (see PROG)
    from .model.file import H5File
    opts = cfg.options
    try:
        if cfg.domain:
            # HSDS's engine, lazily (see PROG)
            from .model.hsds.domain import HsdsDomain
            endpoint, domain = split_domain_url(cfg.source)
            return HsdsDomain.open(domain, endpoint=opts.remote.endpoint or endpoint, username=opts.username,
                                   password_file=opts.password_file, refresh=opts.refresh,
                                   cache_bytes=opts.cache_mb << 20, timeout=opts.remote.timeout,
                                   retries=opts.remote.retries, connections=opts.remote.requests)
        return H5File.open(cfg.source, writable=not opts.readonly, lock=True, remote=opts.remote)
    except (H5fsError, OSError) as exc:
        raise CliError(_named(cfg.source, exc)) from None


def _run_daemon(cfg: MountConfig, logs: Logs, on_ready, on_fail) -> int:
    """Open, mount and serve (in the process that stays); errors before ready go to on_fail."""
    try:
        h5 = _open_file(cfg)
    except CliError as exc:
        on_fail(str(exc))
        return 1
    try:
        # the engine, lazily (see PROG)
        from .fuse.daemon import serve
        from .model.writeback import Writeback
        opts = cfg.options
        h5.chunk_cache.budget = opts.cache_mb << 20
        writeback, editor = None, None
        if not opts.readonly and cfg.domain:
            # HSDS's write side, lazily (see PROG)
            from .model.hsds.edits import HsdsEditor
            from .model.hsds.writeback import HsdsWriteback
            writeback = HsdsWriteback(h5, opts.writeback_mb << 20)
            editor = lambda wb, in_use: HsdsEditor(h5, wb, in_use)   # noqa: E731 - made by the mount
        elif not opts.readonly:
            writeback = Writeback(h5, opts.writeback_mb << 20)
        return serve(h5, cfg.source, cfg.mountpoint, opts, writeback=writeback, logs=logs,
                     foreground=cfg.foreground, on_ready=on_ready, on_fail=on_fail, editor=editor)
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
    _check_log(cfg)
    _check_paths(cfg)
    logs = Logs()
    if cfg.foreground:
        _setup_logging(cfg, logs)
        failed: list[str] = []

        def on_fail(msg: str) -> None:
            failed.append(msg)
            print(f"{PROG}: {msg}", file=sys.stderr, flush=True)

        status = _run_daemon(cfg, logs, lambda: logging.getLogger("h5fs").info("ready"), on_fail)
        return 1 if failed else status
    return _mount_background(cfg, logs)


def _mount_background(cfg: MountConfig, logs: Logs) -> int:
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
            _setup_logging(cfg, logs)
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
                _detach_stdio(None if logs.destination == "syslog" else logs.destination)

            def on_fail(msg: str) -> None:
                logging.getLogger("h5fs").error("%s", msg)
                report("error " + msg)

            status = _run_daemon(cfg, logs, on_ready, on_fail)
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
    msg = line[len("error "):] if line.startswith("error ") else f"the daemon died before the mount was ready (see {logs.destination})"
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


def _flush_first(mp: str, timeout: float) -> None:
    """Every change into the file before the unmount (an fsync of the mount root), with a
    progress line on a terminal. A daemon silent for `timeout` s is left to the unmount; a
    flush that fails keeps the mount, so what could not be written is not lost."""
    line = Line.on(sys.stderr)
    failed: list[OSError] = []

    def sync() -> None:
        try:
            fd = os.open(mp, os.O_RDONLY | os.O_DIRECTORY)
            try:
                # pages the kernel holds dirty (mmap, -o writeback_cache) reach the daemon first:
                # the fsync of the root flushes only what the daemon has
                _syncfs(fd)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            failed.append(exc)

    thread = threading.Thread(target=sync, daemon=True)
    thread.start()
    answered = time.monotonic()
    try:
        while thread.is_alive():
            state = ask(mp) if line is not None or time.monotonic() - answered > timeout / 2 else {}
            if "error" in state and time.monotonic() - answered > timeout:
                print(f"{PROG}: {mp}: {state['error']}; unmounting anyway", file=sys.stderr)
                return
            if "pid" in state:
                answered = time.monotonic()
                text = flush_text(state)
                if line is not None and text:
                    line.show(text)
            thread.join(0.2)
    finally:
        if line is not None:
            line.done()
    if failed:
        raise CliError(f"{mp}: writing the changes into the file failed ({failed[0].strerror or failed[0]}); "
                       f"still mounted, so nothing is lost (the mount's log says why)")


def _syncfs(fd: int) -> None:
    """syncfs(2) of the file system holding `fd` (the os module has no syncfs)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syncfs(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def cmd_umount(args: argparse.Namespace) -> int:
    mp = mounts.canonical(args.mountpoint)
    m = mounts.find_mount(mp)
    if m is None:
        raise CliError(f"{mp}: not mounted")
    if m.fstype != mounts.FSTYPE:
        raise CliError(f"{mp}: not an h5fs mount ({m.fstype})")
    state = ask(mp)   # a dead or hung daemon answers an error: there is only the unmount to do
    pid = state.get("pid")
    if state.get("mode") == "rw" and not args.lazy:
        _flush_first(mp, args.timeout)
    cmd = ["fusermount3", "-u"] + (["-z"] if args.lazy else []) + [mp]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        msg = proc.stderr.strip() or f"fusermount3 exited with {proc.returncode}"
        raise CliError(f"cannot unmount {mp}: {msg}")
    if pid is not None and args.lazy and state.get("remote"):   # reads still waiting for a server give up
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    if pid is not None:
        deadline = time.monotonic() + args.timeout
        while mounts.process_alive(pid):
            if time.monotonic() > deadline:
                raise CliError(f"{mp} is unmounted but the daemon (pid {pid}) has not exited after {args.timeout:g} s")
            time.sleep(0.02)
    return 0


# ----------------------------------------------------------------------------------- status


def cmd_status(args: argparse.Namespace) -> int:
    # the engine, lazily (see PROG)
    from .status import run
    return run(args.mountpoint, args.json)


def cmd_install_helpers(args: argparse.Namespace) -> int:
    # the engine, lazily (see PROG)
    from .mount_helper import install
    for path in install(args.root):
        print(path)
    return 0


# ----------------------------------------------------------------------------------- check


def cmd_check(args: argparse.Namespace) -> int:
    # the engine, lazily (see PROG)
    from .check import run
    if is_domain_url(args.file):
        raise UsageError(f"check {args.file}: an HSDS domain holds no HDF5 file to check (the service keeps "
                         f"its objects itself)")
    url = is_url(args.file)
    opts = _options(args.options, args.file, url)
    other = sorted(opts.given - set(mount_options.REMOTE)) + opts.kernel_flags
    if other:
        raise UsageError(f"check -o {','.join(other)}: check takes only the options of a URL "
                         f"({', '.join(mount_options.REMOTE)})")
    if args.repair and url:
        raise UsageError(f"check --repair {args.file}: a remote object is only read (a crash leaves nothing to "
                         f"repair in it)")
    if args.repair:   # what the next read-write mount would do: finish interrupted updates
        # the engine, lazily (see PROG)
        from .model.file import H5File
        try:
            H5File.open(args.file, writable=True, lock=True).close()
        except (OSError, H5fsError) as exc:
            print(f"{PROG}: {args.file}: cannot repair: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
            return 2
    return run(args.file, remote=opts.remote if url else None)


# ----------------------------------------------------------------------------------- create

CREATE_XATTR = "user.h5fs.create"   # the request the daemon takes on a directory of its mount
ATTRIBUTE_XATTR = "user.h5fs.attribute"   # the request for a typed attribute, on the object


def _dims(text: str | None, what: str, none_ok: bool = False) -> list | None:
    if text is None:
        return None
    try:
        return [None if none_ok and d.strip().lower() == "none" else int(d) for d in text.split(",") if d.strip()]
    except ValueError:
        raise CliError(f"bad {what} {text!r}: comma-separated integers{' or None' if none_ok else ''}") from None


def cmd_create(args: argparse.Namespace) -> int:
    """An empty dataset made by the daemon of the mount PATH lies in (never a second writer)."""
    if args.sparse and args.layout not in (None, "chunked"):
        raise UsageError(f"--sparse with --layout {args.layout}: a sparse dataset is chunked (structured chunks)")
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
        # the engine, lazily (see PROG)
        from .model.dataset import MAX_VIEW_BYTES
        why = (f"its data would be more than the {MAX_VIEW_BYTES} bytes a file can show" if exc.errno == errno.EFBIG
               else "the mount's log says why")
        raise CliError(f"cannot create {args.path}: {exc.strerror} ({why})") from None
    return 0


def cmd_attr(args: argparse.Namespace) -> int:
    """Attribute NAME of the object at PATH (a directory or a dataset's file of a read-write
    mount) set to VALUE: with --dtype made anew with that dtype and the value's shape, without
    it as setfattr sets it (an existing attribute keeps its dtype and shape, a new one is a
    string)."""
    try:
        kind = os.getxattr(args.path, "user.h5fs.kind")
    except OSError:
        kind = None
    if kind not in (b"group", b"dataset"):
        raise CliError(f"{args.path}: not a group or dataset of an h5fs mount")
    if args.dtype is None:   # the xattr the mount shows the attribute as (h5fs.* names: escaped)
        prefix = "user.h5fs.attr." if args.name.startswith("h5fs.") else "user."
        name, value = prefix + args.name, args.value.encode("utf-8", "surrogateescape")
    else:
        name = ATTRIBUTE_XATTR
        value = json.dumps({"name": args.name, "dtype": args.dtype, "value": args.value}).encode()
    try:
        os.setxattr(args.path, name, value)
    except OSError as exc:
        why = ("the request is over the 64 KiB an xattr carries" if exc.errno == errno.E2BIG
               else "the mount's log says why")
        raise CliError(f"cannot set attribute {args.name!r} of {args.path}: {exc.strerror} ({why})") from None
    return 0


# ----------------------------------------------------------------------------------- main


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Mount an HDF5 file as a directory tree.")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("mount", help="mount FILE (a path or a URL) on MOUNTPOINT",
                       description="Mount FILE on MOUNTPOINT; returns when the mount is ready. FILE is a path, "
                                   "or the URL of an object to mount read-only: s3://BUCKET/KEY, "
                                   "https://HOST/PATH, http://HOST/PATH, or an HSDS domain: "
                                   "hsds://[HOST:PORT]/DOMAIN.",
                       epilog=mount_options.help_text(), formatter_class=argparse.RawDescriptionHelpFormatter)
    m.add_argument("-f", "--foreground", action="store_true", help="stay in the foreground")
    m.add_argument("-o", dest="options", action="append", metavar="OPTIONS",
                   help="comma-separated options, below (repeatable)")
    m.add_argument("file", metavar="FILE")
    m.add_argument("mountpoint", metavar="MOUNTPOINT")
    m.set_defaults(func=cmd_mount)
    u = sub.add_parser("umount", aliases=["unmount"], help="unmount and wait for the daemon to exit")
    u.add_argument("-z", "--lazy", action="store_true", help="lazy unmount (fusermount3 -z)")
    u.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the daemon (60)")
    u.add_argument("mountpoint", metavar="MOUNTPOINT")
    u.set_defaults(func=cmd_umount)
    st = sub.add_parser("status", help="every h5fs mount and what its daemon is doing",
                        description="File, mode, daemon pid, uptime, data waiting to be written, cache use "
                                    "and errors of every h5fs mount (or of MOUNTPOINT). Exit 1 when a daemon "
                                    "does not answer.")
    st.add_argument("--json", action="store_true", help="a JSON list, for scripts")
    st.add_argument("mountpoint", metavar="MOUNTPOINT", nargs="?")
    st.set_defaults(func=cmd_status)
    h = sub.add_parser("install-helpers", help="install mount(8)'s helpers (mount.fuse.h5fs, umount.h5fs) "
                                               "and /usr/local/bin/h5fs",
                       description="Write /sbin/mount.fuse.h5fs, /sbin/mount.h5fs, /sbin/umount.h5fs, "
                                   "/sbin/umount.fuse.h5fs and /usr/local/bin/h5fs, each running this Python "
                                   "with this package (mount(8) runs helpers with a bare PATH).")
    h.add_argument("--root", default="/", help="install under this directory instead of / (packaging)")
    h.set_defaults(func=cmd_install_helpers)
    c = sub.add_parser("check", help="verify FILE (a path or a URL) without mounting it",
                       description="Verify every structure of FILE (a path, or an s3:// or http(s):// URL); exit "
                                   "0 when sound, 1 with one line per problem, 2 when FILE cannot be read or is no "
                                   "HDF5 file.")
    c.add_argument("-o", dest="options", action="append", metavar="OPTIONS",
                   help="a URL's options, as h5fs mount takes them: endpoint=, region=, anonymous, profile=, "
                        "cache_dir=, disk_cache_mb=, block_kb=, requests=, retries=, timeout=")
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
                        "or takes h5py's guess; no --layout but chunked)")
    k.set_defaults(func=cmd_create)
    a = sub.add_parser("attr", help="set an attribute, of any number type, through a read-write mount",
                       description="Set attribute NAME of the group or dataset at PATH (inside a read-write "
                                   "h5fs mount) to VALUE, written as the mount shows values: 3.5, [1, 2, 3], "
                                   "[[1, 2], [3, 4]]. With --dtype the attribute is made anew with that dtype "
                                   "and VALUE's shape; without it, as setfattr -n user.NAME -v VALUE does.")
    a.add_argument("path", metavar="PATH")
    a.add_argument("name", metavar="NAME")
    a.add_argument("value", metavar="VALUE")
    a.add_argument("--dtype", help="a NumPy number, bool or complex dtype: f8, <i4, u1, ?, c16, ...")
    a.set_defaults(func=cmd_attr)
    return p


def _fuse_form(argv: list[str]) -> list[str]:
    """`h5fs FILE MOUNTPOINT [-o OPTIONS]` (mount.fuse3's call for `-t fuse.h5fs`) as `h5fs mount`."""
    if argv and argv[0] not in COMMANDS and not argv[0].startswith("-"):
        return ["mount"] + argv[2:] + argv[:2] if len(argv) >= 2 else argv
    return argv


def main(argv: list[str] | None = None) -> int:
    argv = _fuse_form(sys.argv[1:] if argv is None else list(argv))
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except CliError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
