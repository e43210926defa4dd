"""Where the daemon logs, and the errors it has seen (for `h5fs status`).

- `-f`: stderr (a terminal, or the journal under systemd);
- `log=PATH`: that file, reopened on SIGHUP (logrotate moves it away, then signals);
- in the background without `log=`: syslog (the journal) when /dev/log answers, else a per-user
  file whose first line says why it is not syslog.
Object paths from hostile files may hold undecodable bytes: they are escaped, never a failure.
"""

from __future__ import annotations

import collections
import logging
import logging.handlers
import os
import socket
import time

FORMAT = "%(asctime)s h5fs[%(process)d] %(levelname)s %(name)s: %(message)s"
SYSLOG_FORMAT = "h5fs[%(process)d]: %(levelname)s %(name)s: %(message)s"
SYSLOG_SOCKET = "/dev/log"
LAST_ERRORS = 5


class ErrorTally(logging.Handler):
    """Counts the records at WARNING and above (a request refused, an object answering EIO, a
    failed flush) and keeps the last few (`h5fs status`)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self.last: collections.deque[str] = collections.deque(maxlen=LAST_ERRORS)

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.created))
        self.last.append(f"{stamp} {record.getMessage()}")


class Logs:
    """The daemon's logging: `destination` says where it goes (the root's `user.h5fs.log`)."""

    def __init__(self) -> None:
        self.tally = ErrorTally()
        self.handler: logging.Handler | None = None
        self.destination = "stderr"

    def to_stderr(self, verbose: bool) -> None:
        self._install(logging.StreamHandler(), FORMAT, verbose)
        self.destination = "stderr"

    def to_file(self, path: str, verbose: bool, why: str | None = None) -> None:
        handler = logging.FileHandler(path, errors="backslashreplace")
        self._install(handler, FORMAT, verbose)
        self.destination = path
        if why:
            logging.getLogger("h5fs").info("logging to %s: %s", path, why)

    def to_syslog_or(self, fallback: str, verbose: bool) -> None:
        """syslog when /dev/log answers, else the file `fallback` (saying why)."""
        reason = _syslog_problem()
        if reason is None:
            handler = logging.handlers.SysLogHandler(SYSLOG_SOCKET, logging.handlers.SysLogHandler.LOG_DAEMON)
            self._install(handler, SYSLOG_FORMAT, verbose)
            self.destination = "syslog"
        else:
            self.to_file(fallback, verbose, f"not syslog: {SYSLOG_SOCKET} {reason}")

    def reopen(self) -> None:
        """SIGHUP: a log file that was moved away is created again under its name."""
        if isinstance(self.handler, logging.FileHandler):
            self.handler.acquire()
            try:
                if self.handler.stream is not None:
                    self.handler.stream.close()
                self.handler.stream = self.handler._open()
            finally:
                self.handler.release()
            logging.getLogger("h5fs").info("log file reopened")

    def _install(self, handler: logging.Handler, fmt: str, verbose: bool) -> None:
        root = logging.getLogger()
        for h in list(root.handlers):
            root.removeHandler(h)
            if h is not self.tally:
                h.close()
        handler.setFormatter(logging.Formatter(fmt))
        root.addHandler(handler)
        root.addHandler(self.tally)
        root.setLevel(logging.DEBUG if verbose else logging.INFO)
        self.handler = handler


def _syslog_problem() -> str | None:
    """None when a datagram can be sent to /dev/log, else what is wrong."""
    if not os.path.exists(SYSLOG_SOCKET):
        return "does not exist"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.connect(SYSLOG_SOCKET)
    except OSError as exc:
        return f"does not answer ({exc.strerror or exc})"
    finally:
        s.close()
    return None


def default_file(mountpoint: str) -> str:
    """The per-user log file of a mount: $XDG_RUNTIME_DIR/h5fs/ or /tmp/h5fs-<uid>/, named after
    the mount point with '/' as '_'."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = os.path.join(runtime, "h5fs") if runtime and os.path.isdir(runtime) else f"/tmp/h5fs-{os.getuid()}"
    os.makedirs(base, mode=0o700, exist_ok=True)
    name = mountpoint.strip("/").replace("/", "_") or "root"
    return os.path.join(base, name + ".log")
