"""A local HSDS (the HDF Group's Highly Scalable Data Service) on loopback for HSDS-mount tests
and benchmarks.

HSDSServer starts HSDS in standalone mode as its two node processes, a service node (the REST API
clients talk to) and a data node (the storage behind it), with POSIX storage in a directory. HSDS's
own launcher (`hsds`) is not used: it binds every interface, fixes the data node's port (6101) and,
started in the background, ignores SIGINT. Here each node is tests/hsds_node.py, bound to 127.0.0.1,
on free ports; both are stopped by pid, SIGTERM then SIGKILL.
Users come from a password file (`name:password` lines); USER owns the folder HOME, where tests
make their domains; ADMIN is HSDS's admin user (folders under /, anything).
Run by hand: `python3 tests/hsds_server.py [DIR]` prints the endpoint and the h5pyd environment,
then serves until SIGINT or SIGTERM (storage in DIR, kept; by default a temporary one, removed).
"""

from __future__ import annotations

import argparse
import atexit
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from servers import die_with_parent, environ, free_port

BUCKET = "h5fs"
USER, PASSWORD = "h5fs", "h5fs-test"
ADMIN, ADMIN_PASSWORD = "admin", "admin-test"
HOME = f"/home/{USER}"
NODES = ("sn", "dn")     # service node, data node
NODE_MAIN = Path(__file__).with_name("hsds_node.py")


class HSDSServer:
    """HSDS at http://127.0.0.1:PORT; storage, password file, logs and the nodes' working directory
    in `root_dir` (a temporary directory, removed at stop, when none is given)."""

    def __init__(self, root_dir=None, log_level: str = "WARNING"):
        self._own_root = root_dir is None
        self.root = Path(root_dir) if root_dir is not None else None
        self.log_level = log_level
        self.sn_port = self.dn_port = 0
        self.procs: dict[str, subprocess.Popen] = {}
        self.startup_seconds = 0.0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.sn_port}"

    @property
    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.procs.items()}

    # lifecycle
    def start(self, timeout: float = 60.0) -> "HSDSServer":
        t0 = time.monotonic()
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="h5fs-hsds-"))
        (self.root / "storage" / BUCKET).mkdir(parents=True, exist_ok=True)
        (self.root / "config").mkdir(exist_ok=True)   # empty: no config.yml from the working directory
        passwd = self.root / "passwd.txt"
        passwd.write_text(f"{ADMIN}:{ADMIN_PASSWORD}\n{USER}:{PASSWORD}\n")
        passwd.chmod(0o600)
        self.sn_port = free_port()
        while (dn_port := free_port()) == self.sn_port:
            pass
        self.dn_port = dn_port
        atexit.register(self.stop)
        try:
            for name in NODES:
                self.procs[name] = self._spawn(name)
            self._wait_ready(t0 + timeout)
            self.make_folder("/home", owner=ADMIN)
            self.make_folder(HOME, owner=USER)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _spawn(self, name: str) -> subprocess.Popen:
        dn_url = f"http://127.0.0.1:{self.dn_port}"
        # HSDS reads its settings from the command line first (then the environment, then config.yml)
        args = ["--standalone", f"--dn_urls={dn_url}", f"--hsds_endpoint={self.endpoint}",
                f"--root_dir={self.root / 'storage'}", f"--bucket_name={BUCKET}",
                f"--config_dir={self.root / 'config'}", f"--log_level={self.log_level}"]
        if name == "sn":
            args += ["--node_type=sn", f"--sn_url={self.endpoint}", f"--password_file={self.root / 'passwd.txt'}",
                     f"--admin_user={ADMIN}", "--log_prefix=sn "]
        else:
            args += ["--node_type=dn", "--node_number=0", "--log_prefix=dn "]
        # a clean environment: HSDS takes any variable named like a setting (ROOT_DIR, TIMEOUT,
        # AWS_ACCESS_KEY_ID, which the S3 fixture sets) as an override
        env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(self.root), "PYTHONUNBUFFERED": "1",
               "LANG": "C.UTF-8"}
        with open(self.root / f"{name}.log", "ab") as log:
            return subprocess.Popen([sys.executable, str(NODE_MAIN), *args], cwd=self.root, env=env,
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    preexec_fn=die_with_parent, start_new_session=True)

    def _wait_ready(self, deadline: float) -> None:
        ports = {"sn": self.sn_port, "dn": self.dn_port}
        waiting = set(NODES)
        while waiting:
            for name in sorted(waiting):
                proc = self.procs[name]
                if proc.poll() is not None:
                    raise RuntimeError(f"HSDS {name} exited with {proc.returncode}:\n{self.log_tail(name)}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{ports[name]}/info", timeout=1) as resp:
                        if json.load(resp)["node"]["state"] == "READY":
                            waiting.discard(name)
                except (urllib.error.URLError, OSError, ValueError, KeyError):
                    pass
            if waiting and time.monotonic() > deadline:
                tails = "\n".join(self.log_tail(n) for n in sorted(waiting))
                raise RuntimeError(f"HSDS {sorted(waiting)} not ready on ports {ports}:\n{tails}")
            if waiting:
                time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> None:
        """Both nodes gone (SIGTERM, SIGKILL after `timeout`), and a temporary root removed."""
        procs, self.procs = self.procs, {}
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + timeout
        for proc in procs.values():
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._own_root and self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def __enter__(self) -> "HSDSServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # what clients need
    def env(self) -> dict[str, str]:
        """h5pyd's environment for USER (it reads these, then ~/.hscfg)."""
        return {"HS_ENDPOINT": self.endpoint, "HS_USERNAME": USER, "HS_PASSWORD": PASSWORD}

    def h5pyd_kwargs(self) -> dict[str, str]:
        return {"endpoint": self.endpoint, "username": USER, "password": PASSWORD}

    def domain(self, name: str) -> str:
        """The domain path of `name` in USER's home folder."""
        return f"{HOME}/{name}"

    def request(self, method: str, path: str, params: dict | None = None, body=None,
                user: tuple[str, str] | None = (USER, PASSWORD), headers: dict | None = None):
        """(status, headers, body bytes) of one REST request as `user` (None: anonymous); a dict
        body goes as JSON."""
        url = self.endpoint + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        headers = dict(headers or {})
        if user is not None:
            headers["Authorization"] = "Basic " + base64.b64encode(":".join(user).encode()).decode()
        if isinstance(body, dict):
            body = json.dumps(body).encode()
            headers.setdefault("Content-Type", "application/json")
        req = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    def make_folder(self, path: str, owner: str = USER) -> None:
        """A folder (a domain without a root group), made by ADMIN for `owner`."""
        status, _, body = self.request("PUT", "/", {"domain": path}, {"folder": True, "owner": owner},
                                       user=(ADMIN, ADMIN_PASSWORD))
        if status not in (201, 409):
            raise RuntimeError(f"HSDS folder {path}: {status} {body[:200]!r}")

    # observation
    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.root / f"{name}.log" if self.root else None
        if path is None or not path.exists():
            return f"({name}: no log)"
        text = path.read_text(errors="replace").splitlines()[-lines:]
        return f"--- {name}.log\n" + "\n".join(text)

    def rss(self) -> dict[str, int]:
        """Resident memory of each node in bytes (from /proc)."""
        out = {}
        for name, pid in self.pids.items():
            with open(f"/proc/{pid}/status") as fh:
                kib = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
            out[name] = kib * 1024
        return out


# ---------------------------------------------------------------------------------------------
# The session fixture: one server however many test modules import it (pytest makes a
# session-scoped fixture per importing module; they share what is started here)

_started: dict[str, HSDSServer] = {}


@pytest.fixture(scope="session")
def hsds():
    """A running HSDSServer (temporary storage), stopped at the end of the session; its endpoint
    and USER's credentials in os.environ meanwhile, where h5pyd (and `h5fs mount`, which
    run_h5fs runs with this environment) find them."""
    if "hsds" not in _started:
        _started["hsds"] = HSDSServer().start()
    try:
        with environ(_started["hsds"].env()):
            yield _started["hsds"]
    finally:
        server = _started.pop("hsds", None)
        if server is not None:
            server.stop()


# ---------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", help="storage and logs (kept); default: a temporary directory")
    args = ap.parse_args(argv)
    with HSDSServer(args.dir) as server:
        print(server.endpoint, " ".join(f"{k}={v}" for k, v in server.env().items()), flush=True)
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    return 0


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    sys.exit(main())
