"""The `-o` options of `h5fs mount`, mount(8), fstab and the systemd units: one table.

The table drives the parser, `h5fs mount --help` and the README's options table (a test checks
that the README lists every option). Options mount(8) keeps for itself (`noauto`, `nofail`,
`x-systemd.*`...) arrive when h5fs is mounted from fstab; they are dropped here. Generic mount
flags (`noatime`, `nodev`...) go to the kernel through FUSE. Anything else is an error: a typo
must not mount with a default the user did not ask for. A URL's options (endpoint=...timeout=)
make the `remote` RemoteOptions, an HSDS domain's (username=...refresh=) fields of their own;
`for_source` refuses what does not fit the source.
"""

from __future__ import annotations

import grp
import os
import pwd
from dataclasses import dataclass, field, replace

from .model.filter_spec import ARITY as FILTER_ARITY, parse_filters
from .storage.remote.options import RemoteOptions

DEFAULT_READAHEAD_KB = 4096
DEFAULT_WRITEBACK_MB = 64
DEFAULT_CACHE_MB = 128
DEFAULT_FLUSH_DELAY = 2.0
DEFAULT_CHUNK_KB = 1024
REMOTE_DEFAULTS = RemoteOptions()
DEFAULT_REFRESH = 3.0
MIN_BLOCK_KB, MAX_BLOCK_KB = 4, 65536
MAX_REQUESTS = 256


class OptionError(ValueError):
    """A malformed or unknown option (`h5fs mount` exits 2)."""


@dataclass(frozen=True)
class Option:
    name: str
    value: str       # "" for a flag, else what the value is ("N", "PATH", ...)
    help: str


OPTIONS: tuple[Option, ...] = (
    Option("ro", "", "read-only mount (also when FILE is not writable)"),
    Option("rw", "", "read-write mount (the default when FILE is writable)"),
    Option("allow_other", "", "other users may use the mount (FUSE; needs user_allow_other in "
                              "/etc/fuse.conf for non-root mounts)"),
    Option("allow_root", "", "root may use the mount too (FUSE)"),
    Option("default_permissions", "", "the kernel checks permissions from the modes shown (always on)"),
    Option("auto_unmount", "", "unmount when the daemon dies (FUSE's fusermount3 watches it)"),
    Option("uid", "USER", "owner shown for every object (name or number; default: FILE's owner)"),
    Option("gid", "GROUP", "group shown for every object (name or number; default: FILE's group)"),
    Option("umask", "OCTAL", "mode bits taken away from 0777 (directories) and 0666 (files); "
                             "default: directories 0555, files 0444, plus owner write when read-write"),
    Option("cache_mb", "N", f"decoded-chunk cache in MiB (default {DEFAULT_CACHE_MB})"),
    Option("writeback_mb", "N", f"dirty data held before writes flush it, MiB (default {DEFAULT_WRITEBACK_MB})"),
    Option("flush_delay", "S", f"seconds without writes before dirty data is flushed (default {DEFAULT_FLUSH_DELAY:g})"),
    Option("chunk_kb", "N", f"chunk size of datasets created through the mount, KiB (default {DEFAULT_CHUNK_KB})"),
    Option("compression", "SPEC", "filters of datasets created through the mount: gzip:4,shuffle (the "
                                  "default), gzip:N, lzf, shuffle, none; commas inside stay with it"),
    Option("writeback_cache", "", "let the kernel cache writes and send them in 1 MiB pieces (a faster cp of large files); a file's writes reach its other view and the .h5 file when the writer closes or fsyncs it"),
    Option("kernel_cache", "", "accepted for other FUSE file systems' fstab lines: h5fs always keeps "
                               "the page cache of files nothing changed"),
    Option("log", "PATH", "daemon log file; default: stderr with -f, else syslog/the journal, else "
                          "a per-user file"),
    Option("verbose", "", "log at debug level"),
    Option("readahead_kb", "N", f"the mount's read-ahead in KiB (default {DEFAULT_READAHEAD_KB}; 0 keeps the kernel's)"),
    Option("fsname", "NAME", "source shown in the mount table (default: FILE's absolute path, or the URL)"),
    # a URL's (s3://BUCKET/KEY, http(s)://HOST/PATH): how it is reached and cached
    Option("endpoint", "URL", "s3://: an S3-compatible server (MinIO, Ceph...), default AWS; hsds://: the HSDS "
                              "service, default the URL's HOST:PORT, else HS_ENDPOINT, else hs_endpoint in ~/.hscfg"),
    Option("region", "NAME", "s3:// only: the bucket's region; default: AWS_REGION, the profile's, else the one "
                             "S3 names for the bucket, else us-east-1"),
    Option("anonymous", "", "s3:// only: unsigned requests (public buckets), no credentials looked for"),
    Option("profile", "NAME", "s3:// only: the profile of ~/.aws/credentials and ~/.aws/config to use "
                              "(default: AWS_PROFILE, else default)"),
    Option("cache_dir", "DIR", "URLs: where fetched blocks are kept between mounts, or none; default: "
                               "~/.cache/h5fs ($XDG_CACHE_HOME/h5fs), /var/cache/h5fs for root"),
    Option("disk_cache_mb", "N", f"URLs: the block cache's size on disk in MiB, all objects of cache_dir "
                                 f"together (default {REMOTE_DEFAULTS.disk_cache_mb})"),
    Option("block_kb", "N", f"URLs: the unit fetched and cached in KiB, a power of two from {MIN_BLOCK_KB} "
                            f"to {MAX_BLOCK_KB} (default {REMOTE_DEFAULTS.block_kb})"),
    Option("requests", "N", f"URLs: range requests in flight at once (default {REMOTE_DEFAULTS.requests})"),
    Option("retries", "N", f"URLs: attempts after a failed request, with backoff, before the read "
                           f"answers EIO (default {REMOTE_DEFAULTS.retries})"),
    Option("timeout", "S", f"URLs: seconds a request may take (default {REMOTE_DEFAULTS.timeout:g})"),
    # an HSDS domain's (hsds://[HOST:PORT]/DOMAIN); endpoint=URL is its service, timeout and retries apply
    Option("username", "NAME", "hsds:// only: the HSDS user (default: HS_USERNAME, else hs_username in ~/.hscfg)"),
    Option("password_file", "PATH", "hsds:// only: a file holding the HSDS password (default: HS_PASSWORD, "
                                    "else hs_password in ~/.hscfg)"),
    Option("refresh", "S", f"hsds:// only: seconds what the service said is trusted before it is asked again: "
                           f"other writers' changes show within it (default {DEFAULT_REFRESH:g})"),
)
REMOTE = ("endpoint", "region", "anonymous", "profile", "cache_dir", "disk_cache_mb", "block_kb", "requests",
          "retries", "timeout")
S3_ONLY = ("endpoint", "region", "anonymous", "profile")
HSDS = ("username", "password_file", "refresh")
HSDS_TOO = ("endpoint", "timeout", "retries", "requests")   # URL options an HSDS mount takes
BY_NAME = {o.name: o for o in OPTIONS}

# mount(8)'s own options (fstab): never for the filesystem
MOUNT8_ONLY = frozenset({"defaults", "auto", "noauto", "user", "nouser", "users", "owner", "group",
                         "_netdev", "_rnetdev", "nofail", "nosymfollow", "loud", "silent"})
MOUNT8_PREFIXES = ("x-", "comment=", "helper=", "uhelper=")
# generic VFS flags FUSE hands to the kernel
KERNEL_FLAGS = frozenset({"atime", "noatime", "relatime", "norelatime", "strictatime", "nostrictatime",
                          "lazytime", "nolazytime", "diratime", "nodiratime", "dev", "nodev", "suid",
                          "nosuid", "exec", "noexec", "sync", "async", "dirsync", "mand", "nomand"})
# compression specs hold commas: filter names after compression= belong to it
FILTER_WORDS = frozenset(FILTER_ARITY) | {"none"}


@dataclass
class MountOptions:
    readonly: bool = False
    allow_other: bool = False
    allow_root: bool = False
    auto_unmount: bool = False
    uid: int | None = None
    gid: int | None = None
    umask: int | None = None
    cache_mb: int = DEFAULT_CACHE_MB
    writeback_mb: int = DEFAULT_WRITEBACK_MB
    flush_delay: float = DEFAULT_FLUSH_DELAY
    chunk_kb: int = DEFAULT_CHUNK_KB
    compression: str | None = None
    log: str | None = None
    verbose: bool = False
    writeback_cache: bool = False
    readahead_kb: int = DEFAULT_READAHEAD_KB
    fsname: str | None = None
    remote: RemoteOptions = REMOTE_DEFAULTS
    username: str | None = None        # hsds://
    password_file: str | None = None
    refresh: float = DEFAULT_REFRESH
    given: set[str] = field(default_factory=set)        # the table's options given, by name
    kernel_flags: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)   # mount(8)'s, for the log

    def fuse_options(self, source: str) -> set[str]:
        """What pyfuse3.init gets: subtype is always h5fs (`h5fs umount`, `status` and listings
        find mounts by it); default_permissions always (the modes shown are the access rules)."""
        opts = {"default_permissions", "subtype=h5fs", "fsname=" + fuse_escape(self.fsname or source)}
        opts.update(self.kernel_flags)
        for name in ("allow_other", "allow_root", "auto_unmount"):
            if getattr(self, name):
                opts.add(name)
        if self.readonly:
            opts.add("ro")
        return opts


def split(values: list[str] | None) -> list[str]:
    """Comma-separated option lists (each `-o` a list; a backslash escapes a comma), with
    compression=SPEC taking the filter words that follow it."""
    out: list[str] = []
    for value in values or []:
        cur, i = "", 0
        while i < len(value):
            c = value[i]
            if c == "\\" and i + 1 < len(value):
                cur, i = cur + value[i + 1], i + 2
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
    merged: list[str] = []
    for opt in out:
        if merged and merged[-1].startswith("compression=") and opt.split(":")[0] in FILTER_WORDS:
            merged[-1] += "," + opt
        else:
            merged.append(opt)
    return merged


def fuse_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace(",", "\\,")


def parse(values: list[str] | None) -> MountOptions:
    opts = MountOptions()
    for opt in split(values):
        key, eq, val = opt.partition("=")
        if key in MOUNT8_ONLY or opt.startswith(MOUNT8_PREFIXES):
            opts.dropped.append(opt)
            continue
        if key in KERNEL_FLAGS and not eq:
            opts.kernel_flags.append(key)
            continue
        if key == "subtype":
            continue   # always h5fs (mount.fuse3 passes it along)
        spec = BY_NAME.get(key)
        if spec is None:
            raise OptionError(f"unknown option {opt!r} (h5fs mount --help lists the options)")
        if bool(spec.value) != bool(eq):
            want = f"{key}={spec.value}" if spec.value else key
            raise OptionError(f"-o {opt}: expected {want}")
        opts.given.add(key)
        if key in REMOTE:
            opts.remote = replace(opts.remote, **{key: _remote_value(key, val)})
        else:
            _apply(opts, key, val)
    return opts


def _remote_value(key: str, val: str):
    if key == "anonymous":
        return True
    if key == "endpoint":
        if not val.lower().startswith(("http://", "https://")) or len(val) <= len("https://"):
            raise OptionError(f"-o endpoint={val}: an http:// or https:// URL is needed")
        return val
    if key in ("region", "profile"):
        if not val:
            raise OptionError(f"-o {key}=: a name is needed")
        return val
    if key == "cache_dir":
        if not val:
            raise OptionError("-o cache_dir=: a directory, or none")
        return "none" if val == "none" else os.path.abspath(val)   # the daemon runs in /
    if key == "timeout":
        n = _number(key, val, float, 0.001)
        if n == float("inf"):
            raise OptionError(f"-o timeout={val}: a number of seconds is needed")
        return n
    n = _number(key, val, int, 0 if key == "retries" else 1)
    if key == "block_kb" and (n & (n - 1) or not MIN_BLOCK_KB <= n <= MAX_BLOCK_KB):
        raise OptionError(f"-o block_kb={val}: a power of two from {MIN_BLOCK_KB} to {MAX_BLOCK_KB}")
    if key == "requests" and n > MAX_REQUESTS:
        raise OptionError(f"-o requests={val}: at most {MAX_REQUESTS}")
    return n


def for_source(opts: MountOptions, source: str, url: bool) -> None:
    """Refuse what does not fit the source: a URL's options on a local file, S3's options on an
    http(s):// URL, an HSDS domain's on anything else, a read-write mount of a URL (OptionError:
    exit 2)."""
    hsds = source.lower().startswith("hsds://")
    if hsds:   # read-write unless -o ro, as a file you may write (the service says who may)
        other = [o for o in REMOTE if o in opts.given and o not in HSDS_TOO]
        if other:
            raise OptionError(f"-o {','.join(other)}: options of an s3:// or http(s):// URL, not of {source}")
        return
    hsds_given = [o for o in HSDS if o in opts.given]
    if hsds_given:
        raise OptionError(f"-o {','.join(hsds_given)}: options of an HSDS domain (hsds://), not of {source}")
    given = [o for o in REMOTE if o in opts.given]
    if not url:
        if given:
            raise OptionError(f"-o {','.join(given)}: options of a URL (s3://, http(s)://); {source} is a local file")
        return
    s3_only = [o for o in S3_ONLY if o in opts.given]
    if s3_only and not source.lower().startswith("s3://"):
        raise OptionError(f"-o {','.join(s3_only)}: options of an s3:// URL, not of {source}")
    if "rw" in opts.given and not opts.readonly:
        raise OptionError(f"-o rw: {source} is a remote object, mounted read-only (h5fs edits files in place, "
                          f"and an object in a store or on a web server cannot be written in place)")
    opts.readonly = True


def _apply(opts: MountOptions, key: str, val: str) -> None:
    if key in ("ro", "rw"):
        opts.readonly = key == "ro"
    elif key in ("default_permissions", "kernel_cache"):
        pass   # what h5fs always does
    elif key in ("allow_other", "allow_root", "auto_unmount", "verbose", "writeback_cache"):
        setattr(opts, key, True)
    elif key == "uid":
        opts.uid = _id(val, pwd.getpwnam, "user", key)
    elif key == "gid":
        opts.gid = _id(val, grp.getgrnam, "group", key)
    elif key == "umask":
        try:
            opts.umask = int(val, 8)
        except ValueError:
            raise OptionError(f"-o umask={val}: an octal number is needed (e.g. 022)") from None
        if not 0 <= opts.umask <= 0o777:
            raise OptionError(f"-o umask={val}: between 000 and 777")
    elif key in ("cache_mb", "writeback_mb", "chunk_kb", "readahead_kb"):
        low = 0 if key == "readahead_kb" else 1
        setattr(opts, key, _number(key, val, int, low))
    elif key == "flush_delay":
        opts.flush_delay = _number(key, val, float, 0)
    elif key == "compression":
        try:
            parse_filters(val)
        except ValueError as exc:
            raise OptionError(f"-o compression={val}: {exc}") from None
        opts.compression = val
    elif key == "log":
        opts.log = os.path.abspath(val)
    elif key == "fsname":
        opts.fsname = val
    elif key == "username":
        if not val:
            raise OptionError("-o username=: a name is needed")
        opts.username = val
    elif key == "password_file":
        opts.password_file = os.path.abspath(val)   # the daemon runs in /
    elif key == "refresh":
        opts.refresh = _number(key, val, float, 0)


def _number(key: str, val: str, kind, low):
    try:
        n = kind(val)
    except ValueError:
        raise OptionError(f"-o {key}={val}: {'an integer' if kind is int else 'a number'} is needed") from None
    if not n >= low or n != n:
        raise OptionError(f"-o {key}={val}: at least {low}")
    return n


def _id(val: str, lookup, what: str, key: str) -> int:
    if val.isdigit():
        return int(val)
    try:
        entry = lookup(val)
    except KeyError:
        raise OptionError(f"-o {key}={val}: no such {what}") from None
    return entry[2]


def help_text() -> str:
    """The options part of `h5fs mount --help`."""
    lines = ["options (-o, comma-separated; mount(8)'s own such as noauto, nofail, x-systemd.* are "
             "ignored, generic flags such as noatime, nodev go to the kernel):"]
    for o in OPTIONS:
        name = f"{o.name}={o.value}" if o.value else o.name
        lines.append(f"  {name:<20} {o.help}")
    return "\n".join(lines)
