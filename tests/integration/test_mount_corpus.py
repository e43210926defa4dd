"""Every malformed file of ../shared/corpus/bad through the real CLI: `h5fs mount` refuses it with a
message, or mounts it and a walk with real tools (find, bounded cat, getfattr) finishes in bounded
time while the daemon stays up and logs no unexpected exception (the `mount` fixture checks that).
Each file is mounted from the local disk; every third from a copy on the HTTP server and every
eighth from a copy in S3 too (the same open of the same bytes: H5File.open refuses the same files
with the same messages, remote or local; a mount costs 0.5 s)."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from conftest import _daemon_pid, bad_corpus, run_h5fs
from remote_support import range_server, read_mount, s3_server  # noqa: F401 (fixtures)

FILES = bad_corpus()
WALK = r"""
set -u
find "$1" > /dev/null 2>&1
find "$1" -type f -print0 2>/dev/null | xargs -0 -r -n 1 sh -c 'head -c 2097152 "$0" > /dev/null 2>&1; true'
getfattr -R -d -m - "$1" > /dev/null 2>&1
find "$1" -type l -print0 2>/dev/null | xargs -0 -r readlink > /dev/null 2>&1
exit 0
"""


CASES = [pytest.param(source, h5, id=f"{source}-{h5.name}") for source in ("local", "http", "s3")
         for h5 in {"local": FILES, "http": FILES[::3], "s3": FILES[1::8]}[source]]


@pytest.mark.parametrize("read_mount, h5", CASES, indirect=["read_mount"])
def test_corpus_file_through_a_mount(h5: Path, read_mount, tmp_path):
    mp = tmp_path / "mnt"
    mp.mkdir()
    target, options = read_mount.target(h5, exact=True)   # a user block would change what is malformed
    proc = run_h5fs("mount", "-o", ",".join([f"log={tmp_path / 'log'}", *options]), target, mp, timeout=60)
    if proc.returncode != 0:
        assert proc.stderr.strip(), "a refused mount must say why"
        assert "Traceback" not in proc.stderr
        return
    read_mount.mounts.append((mp, tmp_path / "log"))  # the fixture unmounts it and checks the log
    pid = _daemon_pid(mp)
    # every step of the walk may fail (EIO is the answer to a malformed object); a request the
    # daemon never answers fails here, as TimeoutExpired
    subprocess.run(["sh", "-c", WALK, "walk", str(mp)], capture_output=True, timeout=120)
    assert pid is not None and os.path.exists(f"/proc/{pid}"), "the daemon died during the walk"
    try:  # and still answers: a listing, or EIO when the root group itself is broken
        os.listdir(mp)
    except OSError as e:
        assert e.errno == errno.EIO
