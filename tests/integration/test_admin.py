"""h5fs run as a system filesystem, through the real commands: mount(8) with `-t fuse.h5fs` and
an fstab entry, umount(8), findmnt, mount.fuse3's fallback, the systemd units (verified by
systemd-analyze, the Type=notify handshake against a socket this test listens on), `h5fs status`
during a write, progress on a terminal, logs (SIGHUP, syslog or its fallback, crash recovery).

Every mount is taken down at teardown even when a test fails (a clean unmount, else the FUSE
connection aborted and the mount detached): a hung mount must never block the rest of the run.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import H5FS, REPO, force_unmount, is_mounted, make_h5, run_h5fs, wait_until
from crash_support import kill_daemon
from h5fs import mount_helper, utab
from h5fs.fuse.mounts import find_mount, process_alive
from write_support import verify_file
from units import UNITS, unit_command

ROOT = REPO
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mount(8), utab and fstab need root")


def build(f):
    f["x"] = np.arange(1000, dtype="<i4")
    f.create_dataset("z", shape=(4096, 1024), chunks=(64, 1024), dtype="<f4", compression="gzip",
                     compression_opts=4, shuffle=True, maxshape=(None, 1024))
    f["g/y"] = np.ones((10, 10))


@pytest.fixture
def h5(tmp_path):
    return make_h5(tmp_path / "f.h5", build)


@pytest.fixture(scope="module", autouse=True)
def helpers():
    """mount(8) finds /sbin/mount.fuse.h5fs and umount(8) /sbin/umount.h5fs (scripts/setup.sh
    installs them; installed again here so the tests use this checkout's interpreter)."""
    mount_helper.install()


class Mounts:
    """Mount points this test made, taken down at teardown whatever happened."""

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.points: list[Path] = []

    def point(self, name: str = "mp") -> Path:
        mp = self.tmp_path / name
        mp.mkdir(exist_ok=True)
        self.points.append(mp)
        return mp

    def cleanup(self) -> None:
        for mp in self.points:
            if not is_mounted(mp):
                continue
            try:
                if run_h5fs("umount", mp, timeout=30).returncode == 0:
                    continue
            except subprocess.TimeoutExpired:
                pass
            force_unmount(mp)


@pytest.fixture
def mounts(tmp_path):
    m = Mounts(tmp_path)
    try:
        yield m
    finally:
        m.cleanup()


def pid_of(mp) -> int:
    return int(os.getxattr(mp, "user.h5fs.pid"))


def utab_lines() -> list[str]:
    try:
        return Path("/run/mount/utab").read_text().splitlines()
    except FileNotFoundError:
        return []


def has_utab_line(mp) -> bool:
    return any(utab.ours(ln) and utab.fields(ln).get("TARGET") == str(mp) for ln in utab_lines())


# -- mount(8), fstab, umount(8), findmnt ----------------------------------------------------------

def test_mount_t_with_options_findmnt_and_umount(h5, mounts, tmp_path):
    mp = mounts.point()
    log = tmp_path / "log"
    proc = subprocess.run(["mount", "-t", "fuse.h5fs", str(h5), str(mp), "-o",
                           f"ro,nofail,noauto,_netdev,x-systemd.automount,defaults,noatime,uid=1234,"
                           f"gid=5678,umask=027,cache_mb=32,log={log}"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    found = subprocess.run(["findmnt", "-n", "-o", "SOURCE,FSTYPE,OPTIONS", str(mp)], capture_output=True, text=True)
    source, fstype, options = found.stdout.split()
    assert (source, fstype) == (str(h5), "fuse.h5fs")
    assert "ro" in options.split(",") and "noatime" in options.split(",")
    st = os.stat(mp / "x")
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1234, 5678, 0o440)
    assert stat.S_IMODE(os.stat(mp / "g").st_mode) == 0o550
    assert open(mp / "x", "rb").read() == np.arange(1000, dtype="<i4").tobytes()
    assert json.loads(os.getxattr(mp, "user.h5fs.status"))["cache_limit_bytes"] == 32 << 20
    assert "mount(8) options ignored: nofail,_netdev" in log.read_text()   # mount(8) keeps the rest itself
    assert has_utab_line(mp)
    pid = pid_of(mp)
    proc = subprocess.run(["umount", str(mp)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert not is_mounted(mp) and not process_alive(pid)   # umount(8) ran our helper: it waited
    assert not has_utab_line(mp)
    assert re.search(r"unmounted .* \(ro, up \d+m \d+s\)", log.read_text())


def test_fstab_entry_write_and_plain_umount_waits_for_the_data(h5, mounts, tmp_path):
    mp = mounts.point()
    log = tmp_path / "log"
    fstab = tmp_path / "fstab"
    fstab.write_text(f"# test\n{h5} {mp} fuse.h5fs rw,noauto,user,_netdev,flush_delay=600,"
                     f"writeback_mb=512,log={log} 0 0\n")
    proc = subprocess.run(["mount", "-T", str(fstab), str(mp)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert find_mount(str(mp)).source == str(h5)
    data = np.random.default_rng(1).random((4096, 1024), dtype=np.float32)
    with open(mp / "z", "r+b") as fh:   # 16 MiB of gzip chunks, left dirty (flush_delay=600)
        fh.write(data.tobytes())
    state = json.loads(os.getxattr(mp, "user.h5fs.status"))
    assert state["dirty_bytes"] > 0 and state["mode"] == "rw"
    pid = pid_of(mp)
    proc = subprocess.run(["umount", str(mp)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert not process_alive(pid)
    with h5py.File(h5, "r") as f:   # in the file the moment umount returned
        assert np.array_equal(f["z"][()], data)
    verify_file(h5, h5dump=True)


def test_mount_fuse3_fallback_runs_h5fs_file_dir_o(h5, mounts, tmp_path):
    """Without our helper, mount(8) runs mount.fuse3, which runs `h5fs FILE DIR -o OPTIONS`."""
    if shutil.which("mount.fuse3", path="/sbin:/usr/sbin") is None:
        pytest.fail("fuse3's mount.fuse3 is missing (scripts/setup.sh installs fuse3)")
    mp = mounts.point()
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}   # mount(8)'s
    proc = subprocess.run(["mount.fuse3", str(h5), str(mp), "-t", "fuse.h5fs", "-o", f"ro,log={tmp_path / 'log'}"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert find_mount(str(mp)).fstype == "fuse.h5fs"
    assert sorted(os.listdir(mp / "g")) == ["y", "y.npy"]
    assert run_h5fs("umount", mp).returncode == 0


def test_mount_helper_flags(h5, mounts):
    mp = mounts.point()
    helper = "/sbin/mount.fuse.h5fs"
    fake = subprocess.run([helper, str(h5), str(mp), "-f", "-o", "ro"], capture_output=True, text=True)
    assert fake.returncode == 0 and not is_mounted(mp)   # -f: everything but the mount
    ns = subprocess.run([helper, str(h5), str(mp), "-N", "1"], capture_output=True, text=True)
    assert ns.returncode == 32 and "-N" in ns.stderr
    missing = subprocess.run([helper, str(h5)], capture_output=True, text=True)
    assert missing.returncode == 32 and "usage" in missing.stderr


@pytest.mark.parametrize("how", ["h5fs", "mount"])
def test_unknown_option_is_refused_with_exit_2(h5, mounts, how):
    mp = mounts.point()
    if how == "h5fs":
        proc = run_h5fs("mount", "-o", "ro,cache_mb=64,no_such_thing=1", h5, mp)
    else:
        proc = subprocess.run(["mount", "-t", "fuse.h5fs", str(h5), str(mp), "-o", "ro,no_such_thing=1"],
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "unknown option 'no_such_thing=1'" in proc.stderr
    bad = run_h5fs("mount", "-o", "cache_mb=lots", h5, mp)
    assert bad.returncode == 2 and "cache_mb=lots: an integer is needed" in bad.stderr
    assert not is_mounted(mp)


def test_stale_utab_lines_are_pruned_at_the_next_mount(h5, mounts, tmp_path):
    ghost = str(tmp_path / "ghost")   # a daemon killed before it could remove its line
    assert utab.add("/nowhere.h5", ghost)
    assert any(utab.fields(ln).get("TARGET") == ghost for ln in utab_lines())
    mp = mounts.point()
    assert run_h5fs("mount", "-o", f"ro,log={tmp_path / 'log'}", h5, mp).returncode == 0
    assert not any(utab.fields(ln).get("TARGET") == ghost for ln in utab_lines())
    assert has_utab_line(mp)


# -- options that change what the mount does ------------------------------------------------------

def test_new_dataset_options_chunk_kb_and_compression(h5, mounts, tmp_path):
    mp = mounts.point()
    assert run_h5fs("mount", "-o", f"rw,chunk_kb=64,compression=none,log={tmp_path / 'log'}", h5, mp).returncode == 0
    arr = np.arange(200_000, dtype="<f8").reshape(2000, 100)
    src = tmp_path / "a.npy"
    np.save(src, arr)
    shutil.copy(src, mp / "a.npy")
    assert run_h5fs("umount", mp).returncode == 0
    with h5py.File(h5, "r") as f:
        d = f["a"]
        assert np.array_equal(d[()], arr)
        assert d.compression is None and not d.shuffle
        assert np.prod(d.chunks) * 8 <= 64 * 1024 and d.chunks[1] == 100
    verify_file(h5, h5dump=True)


# -- h5fs status ----------------------------------------------------------------------------------

def test_status_during_a_long_write(h5, mounts, tmp_path):
    mp = mounts.point()
    log = tmp_path / "log"
    assert run_h5fs("mount", "-o", f"rw,writeback_mb=1024,flush_delay=600,log={log}", h5, mp).returncode == 0
    writer = subprocess.Popen(["dd", "if=/dev/urandom", f"of={mp / 'z'}", "bs=1M", "count=256",
                               "conv=notrunc", "status=none"])
    try:
        seen = []

        def busy() -> bool:
            proc = run_h5fs("status", "--json")
            entries = [e for e in json.loads(proc.stdout) if e["mountpoint"] == str(mp)]
            seen.extend(entries)
            return bool(entries) and entries[0]["dirty_bytes"] > 0 and writer.poll() is None
        assert wait_until(busy, 60, 0.05), "no status showed dirty data while dd was writing"
    finally:
        assert writer.wait(timeout=120) == 0
    state = seen[-1]
    assert state["file"] == str(h5) and state["mode"] == "rw" and state["pid"] == pid_of(mp)
    assert state["chunks_waiting"] > 0 and state["uptime_s"] >= 0 and state["log"] == str(log)
    text = run_h5fs("status", mp)
    assert text.returncode == 0
    assert f"{mp}: {h5}" in text.stdout and "mode rw" in text.stdout and "waiting to be written" in text.stdout
    assert run_h5fs("umount", mp).returncode == 0
    gone = run_h5fs("status", mp)
    assert gone.returncode == 1 and "no h5fs mounts" in gone.stdout


def test_status_counts_errors_and_names_the_object(tmp_path, mounts):
    path = make_h5(tmp_path / "bad.h5", lambda f: f.create_dataset(
        "broken", data=np.arange(100_000, dtype="<i4"), chunks=(1000,), compression="gzip"))
    with h5py.File(path, "r") as f:
        offset = f["broken"].id.get_chunk_info(3).byte_offset
    with open(path, "r+b") as fh:   # one chunk's deflate stream garbled
        fh.seek(offset + 10)
        fh.write(b"\xff" * 64)
    mp = mounts.point()
    assert run_h5fs("mount", "-o", f"ro,log={tmp_path / 'log'}", path, mp).returncode == 0
    with pytest.raises(OSError):
        open(mp / "broken", "rb").read()
    state = json.loads(run_h5fs("status", "--json", mp).stdout)[0]
    assert state["errors"] >= 1
    assert any("/broken" in line for line in state["last_errors"]), state["last_errors"]


# -- progress on a terminal -----------------------------------------------------------------------

def run_on_pty(argv: list[str], timeout: float = 120) -> tuple[int, str]:
    """Run `argv` with its stdout and stderr on a pseudo-terminal; (status, what it showed)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:   # EIO: the other side closed
                    break
                if not data:
                    break
                out += data
            elif proc.poll() is not None:
                break
        return proc.wait(timeout=10), out.decode("utf-8", "replace")
    finally:
        os.close(master)


def test_umount_shows_flush_progress_on_a_terminal_only(h5, mounts, tmp_path):
    mp = mounts.point()
    assert run_h5fs("mount", "-o", f"rw,writeback_mb=1024,flush_delay=600,log={tmp_path / 'log'}", h5, mp).returncode == 0
    # 16 MiB of gzip chunks within the dataset (a write past its end commits what came before at
    # each growth), more than a close commits: the unmount writes them
    data = np.random.default_rng(2).random((4096, 1024), dtype=np.float32)
    with open(mp / "z", "r+b") as fh:
        fh.write(data.tobytes())
    status, shown = run_on_pty(H5FS + ["umount", str(mp)])
    assert status == 0, shown
    assert re.search(r"h5fs: writing into the file: \d+ of \d+ chunks", shown), shown
    assert not is_mounted(mp)
    with h5py.File(h5, "r") as f:
        assert np.array_equal(f["z"][()], data)
    # not a terminal: nothing but errors
    mp2 = mounts.point("mp2")
    assert run_h5fs("mount", "-o", f"rw,flush_delay=600,log={tmp_path / 'log2'}", h5, mp2).returncode == 0
    with open(mp2 / "z", "r+b") as fh:
        fh.write(data[:4096].tobytes())
    quiet = run_h5fs("umount", mp2)
    assert quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == ""


def test_foreground_daemon_shows_its_final_flush_on_a_terminal(h5, mounts, tmp_path):
    mp = mounts.point()
    master, slave = pty.openpty()
    daemon = subprocess.Popen(H5FS + ["mount", "-f", "-o", "rw,writeback_mb=1024,flush_delay=600", str(h5), str(mp)],
                              stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    shown = bytearray()

    def read() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                return
            if not data:
                return
            shown.extend(data)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert wait_until(lambda: is_mounted(mp) and os.path.exists(mp / "z"), 30)
        with open(mp / "z", "r+b") as fh:   # 16 MiB of gzip chunks, left dirty (flush_delay=600)
            fh.write(np.random.default_rng(4).random((4096, 1024), dtype=np.float32).tobytes())
        subprocess.run(["fusermount3", "-u", str(mp)], check=True)   # the daemon writes them as it exits
        assert daemon.wait(timeout=120) == 0
        reader.join(10)
    finally:
        if daemon.poll() is None:
            force_unmount(mp, daemon.pid)
            daemon.wait(timeout=30)
        os.close(master)
    text = shown.decode("utf-8", "replace")
    assert re.search(r"h5fs: writing into the file: \d+ of \d+ chunks", text), text
    verify_file(h5, h5dump=True)


def test_check_shows_progress_on_a_terminal(h5):
    status, shown = run_on_pty(H5FS + ["check", str(h5)])
    assert status == 0 and "sound" in shown
    assert "h5fs check:" in shown and "objects walked" in shown
    quiet = run_h5fs("check", h5)
    assert "objects walked" not in quiet.stdout + quiet.stderr


# -- systemd --------------------------------------------------------------------------------------

def test_units_pass_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing (scripts/setup.sh installs systemd)"
    for unit in ("h5fs@.service", "mnt-run1.mount"):
        shutil.copy(UNITS / unit, tmp_path / unit)
    shutil.copy(UNITS / "h5fs@.service", tmp_path / "h5fs@mnt-run1.service")
    proc = subprocess.run([analyze, "verify", "--man=no", str(tmp_path / "h5fs@mnt-run1.service"),
                           str(tmp_path / "mnt-run1.mount")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    escaped = subprocess.run(["systemd-escape", "--path", "/mnt/run1"], capture_output=True, text=True)
    assert escaped.stdout.strip() == "mnt-run1"   # the README's instance naming


def test_notify_handshake_and_stop_of_the_service(h5, mounts, tmp_path):
    """The unit's own ExecStart under a NOTIFY_SOCKET this test listens on: READY=1 only once the
    mount answers, STOPPING=1 and the last changes in the file on SIGTERM (systemctl stop)."""
    mp = mounts.point()
    sock_path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(60)
    cmd = unit_command("ExecStart", mp, h5, f"rw,flush_delay=600,log={tmp_path / 'log'}")
    assert cmd[0] == "/usr/local/bin/h5fs" and os.access(cmd[0], os.X_OK)
    service = subprocess.Popen(cmd, env={**os.environ, "NOTIFY_SOCKET": str(sock_path)},
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        message = sock.recv(4096).decode()
        assert "READY=1" in message, message
        assert is_mounted(mp) and sorted(os.listdir(mp / "g")) == ["y", "y.npy"]   # ready means usable
        fields = dict(line.split("=", 1) for line in message.splitlines())
        assert fields["MAINPID"] == str(service.pid) == str(pid_of(mp))
        data = np.full((4096, 1024), 7, np.float32)   # 16 MiB: more than a close commits
        with open(mp / "z", "r+b") as fh:   # not flushed: flush_delay=600
            fh.write(data.tobytes())
        service.send_signal(signal.SIGTERM)
        stopping = sock.recv(4096).decode()
        assert "STOPPING=1" in stopping
        assert service.wait(timeout=120) == 0
        sock.settimeout(0.5)
        later = []
        try:
            while True:
                later.append(sock.recv(4096).decode())
        except socket.timeout:
            pass
        # systemctl status shows the final flush: the chunks it writes
        assert any(re.search(r"STATUS=h5fs: writing into the file: \d+ of \d+ chunks", m) for m in later), later
        assert not is_mounted(mp)
        with h5py.File(h5, "r") as f:
            assert np.array_equal(f["z"][:4096], data)
        # ExecStopPost clears what a dead daemon would leave (nothing here): it must not fail
        post = unit_command("ExecStopPost", mp, h5, "")
        subprocess.run(post, capture_output=True, timeout=30)
        assert not is_mounted(mp)
    finally:
        sock.close()
        if service.poll() is None:
            service.kill()
            service.wait(timeout=30)


def test_signal_during_the_final_flush_is_deferred(h5, mounts, tmp_path):
    mp = mounts.point()
    log = tmp_path / "log"
    proc = subprocess.Popen(H5FS + ["mount", "-f", "-o", f"rw,writeback_mb=1024,flush_delay=600,log={log}", str(h5), str(mp)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: is_mounted(mp) and os.path.exists(mp / "z"), 30)
        data = np.random.default_rng(3).random((4096 * 8, 1024), dtype=np.float32)   # 128 MiB gzip
        with open(mp / "z", "r+b") as fh:
            fh.write(data.tobytes())
        proc.send_signal(signal.SIGTERM)     # starts the unmount and the final flush
        assert wait_until(lambda: "writing the last changes" in log.read_text() or
                          not is_mounted(mp), 30)
        for _ in range(3):
            proc.send_signal(signal.SIGTERM)  # deferred while the flush runs
            proc.send_signal(signal.SIGINT)
            time.sleep(0.05)
        assert proc.wait(timeout=180) == 0
    finally:
        if proc.poll() is None:
            force_unmount(mp, proc.pid)
            proc.wait(timeout=30)
    with h5py.File(h5, "r") as f:
        assert np.array_equal(f["z"][()], data)
    verify_file(h5, h5dump=True)


# -- logs -----------------------------------------------------------------------------------------

def test_sighup_reopens_the_log_file(h5, mounts, tmp_path):
    mp = mounts.point()
    log = tmp_path / "log"
    assert run_h5fs("mount", "-o", f"ro,log={log}", h5, mp).returncode == 0
    os.rename(log, tmp_path / "log.1")   # what logrotate does
    os.kill(pid_of(mp), signal.SIGHUP)
    assert wait_until(lambda: log.exists() and "log file reopened" in log.read_text(), 10)
    assert is_mounted(mp) and open(mp / "x", "rb").read(8) == np.arange(2, dtype="<i4").tobytes()
    assert "mounted" in (tmp_path / "log.1").read_text()


def test_background_daemon_logs_to_syslog_or_says_why_not(h5, mounts, tmp_path):
    """Without log=: syslog when /dev/log answers (a socket this test binds stands in for
    journald), else the per-user file, whose first line says why."""
    mp = mounts.point()
    made = not os.path.exists("/dev/log")
    sock, received = None, []
    if made:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind("/dev/log")
        sock.settimeout(0.2)

        def drain() -> None:   # a full datagram queue would block the daemon's logging
            while sock.fileno() >= 0:
                try:
                    received.append(sock.recv(65536).decode())
                except socket.timeout:
                    continue
                except OSError:
                    return
        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
    try:
        assert run_h5fs("mount", "-o", "ro", h5, mp).returncode == 0
        assert os.getxattr(mp, "user.h5fs.log") == b"syslog"
        if sock is not None:
            assert wait_until(lambda: received, 30)
            assert re.match(r"<\d+>h5fs\[\d+\]: INFO h5fs.fuse: mounted ", received[0]), received
        assert run_h5fs("umount", mp).returncode == 0
        if sock is not None:
            assert wait_until(lambda: any("unmounted" in m for m in received), 30), received
    finally:
        if sock is not None:
            sock.close()
            os.unlink("/dev/log")
    if not made:
        return
    # /dev/log gone: the file, and why
    assert run_h5fs("mount", "-o", "ro", h5, mp).returncode == 0
    where = os.getxattr(mp, "user.h5fs.log").decode()
    first = Path(where).read_text().splitlines()
    assert any(f"logging to {where}: not syslog: /dev/log does not exist" in ln for ln in first[:3]), first[:3]
    assert run_h5fs("umount", mp).returncode == 0


def test_recovery_after_a_crash_is_logged(tmp_path, mounts):
    path = make_h5(tmp_path / "f.h5", build, "latest")
    mp = mounts.point()
    assert run_h5fs("mount", "-o", f"rw,flush_delay=600,log={tmp_path / 'log1'}", path, mp).returncode == 0
    os.setxattr(mp / "x", "user.note", b"set")   # journaled as the bytes it changes
    os.mkdir(mp / "made")   # journaled: a new group waiting with its link (it would land before another edit)
    kill_daemon(mp, pid_of(mp))
    log2 = tmp_path / "log2"
    assert run_h5fs("mount", "-o", f"rw,log={log2}", path, mp).returncode == 0
    assert os.path.isdir(mp / "made") and os.getxattr(mp / "x", "user.note") == b"set"
    text = log2.read_text()
    assert "metadata updates a crash had interrupted" in text
    assert "landed 1 link edit and 1 new group a crash had left in the journal" in text
    assert run_h5fs("umount", mp).returncode == 0
    verify_file(path, h5dump=False)


def test_auto_unmount_option(h5, mounts, tmp_path):
    mp = mounts.point()
    assert run_h5fs("mount", "-o", f"ro,auto_unmount,log={tmp_path / 'log'}", h5, mp).returncode == 0
    pid = pid_of(mp)
    watchers = subprocess.run(["pgrep", "-x", "fusermount3"], capture_output=True, text=True).stdout.split()
    assert watchers, "libfuse's fusermount3 watcher is not running"
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not process_alive(pid), 30)
    if not wait_until(lambda: not is_mounted(mp), 10):
        force_unmount(mp)
        pytest.xfail("fusermount3 (fuse 3.14) left the mount of a killed daemon in place (a libfuse race)")


def test_install_helpers_writes_scripts_running_this_python(tmp_path):
    proc = run_h5fs("install-helpers", "--root", tmp_path)
    assert proc.returncode == 0
    for path in ("sbin/mount.fuse.h5fs", "sbin/mount.h5fs", "sbin/umount.h5fs", "sbin/umount.fuse.h5fs",
                 "usr/local/bin/h5fs"):
        script = tmp_path / path
        assert os.access(script, os.X_OK), path
        assert os.path.abspath(sys.executable) in script.read_text()
    version = subprocess.run([str(tmp_path / "usr/local/bin/h5fs"), "--version"], capture_output=True, text=True,
                             env={"PATH": "/usr/bin:/bin"})
    assert version.returncode == 0 and version.stdout.startswith("h5fs ")


def test_helpers_installed_from_a_venv_run_the_venvs_python(h5, mounts, tmp_path):
    """pip in a venv (as current Debian requires) or pipx: the helpers must run the venv's own
    bin/python, whose pyvenv.cfg gives it the venv's packages; its resolved target is the base
    interpreter, which lacks them ('No module named pyfuse3')."""
    venv = tmp_path / "a venv"   # a space in the path: the scripts quote it
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(ROOT)],
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr
    try:
        proc = subprocess.run([str(venv / "bin" / "h5fs"), "install-helpers"], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert f"exec {shlex.quote(str(python))} " in Path("/sbin/mount.fuse.h5fs").read_text()
        mp = mounts.point()
        proc = subprocess.run(["mount", "-t", "fuse.h5fs", str(h5), str(mp), "-o", f"ro,log={tmp_path / 'log'}"],
                              capture_output=True, text=True, timeout=60, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        assert proc.returncode == 0, proc.stderr
        assert open(mp / "x", "rb").read() == np.arange(1000, dtype="<i4").tobytes()
        daemon = Path(f"/proc/{pid_of(mp)}/cmdline").read_bytes().split(b"\0")[0].decode()
        assert daemon == str(python)
        proc = subprocess.run(["umount", str(mp)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert not is_mounted(mp)
    finally:
        mount_helper.install()   # the helpers of this checkout's interpreter again


def test_h5fs_status_of_a_hung_daemon_times_out(h5, mounts, tmp_path):
    mp = mounts.point()
    assert run_h5fs("mount", "-o", f"ro,log={tmp_path / 'log'}", h5, mp).returncode == 0
    pid = pid_of(mp)
    os.kill(pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        proc = run_h5fs("status", "--json", mp, timeout=30)
        assert time.monotonic() - start < 15
        state = json.loads(proc.stdout)[0]
        assert proc.returncode == 1 and "has not answered" in state["error"]
    finally:
        os.kill(pid, signal.SIGCONT)
    assert json.loads(run_h5fs("status", "--json", mp).stdout)[0]["pid"] == pid
