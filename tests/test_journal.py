"""The write-ahead journal (storage/journal.py): records appended one after another into
preallocated zeros, replayed in order, a torn record and everything after it ignored, the journal
emptied after a replay."""

from __future__ import annotations

import os

from h5fs.storage.journal import LIMIT, Journal, decode, encode


def _target(tmp_path, content: bytes) -> int:
    path = tmp_path / "file.bin"
    path.write_bytes(content)
    return os.open(path, os.O_RDWR)


def _journal(tmp_path, *records: list[tuple[int, bytes]]) -> Journal:
    j = Journal(str(tmp_path / "file.bin.h5fs-journal"), None)
    for entries in records:
        j.log(entries)
    return j


def test_records_replay_in_order(tmp_path):
    j = _journal(tmp_path, [(0, b"aaaa"), (8, b"zz")], [(0, b"bb"), (10, b"x")])
    assert j.pending and decode(open(j.path, "rb").read()) == [(0, b"aaaa"), (8, b"zz"), (0, b"bb"), (10, b"x")]
    fd = _target(tmp_path, b"." * 12)
    assert j.replay(fd) == 4
    assert os.pread(fd, 12, 0) == b"bbaa....zzx."   # the later record wins where both write
    assert not j.pending and decode(open(j.path, "rb").read()) is None
    os.close(fd)


def test_records_fill_preallocated_zeros(tmp_path):
    """Logging leaves the journal's size alone (fdatasync then has no size to commit)."""
    j = _journal(tmp_path)
    assert os.path.getsize(j.path) == LIMIT
    j.log([(0, b"a" * 1000)])
    assert os.path.getsize(j.path) == LIMIT and decode(open(j.path, "rb").read()) == [(0, b"a" * 1000)]


def test_a_torn_record_ends_the_replay(tmp_path):
    j = _journal(tmp_path, [(0, b"aa")], [(2, b"bb")])
    with open(j.path, "r+b") as fh:             # the second record lost its last byte
        fh.seek(j.size - 1)
        fh.write(b"\0")
    fd = _target(tmp_path, b"....")
    assert j.replay(fd) == 1
    assert os.pread(fd, 4, 0) == b"aa.."
    os.close(fd)


def test_nothing_after_a_damaged_record_is_applied(tmp_path):
    first, second = encode([(0, b"aa")]), encode([(2, b"bb")])
    path = tmp_path / "file.bin.h5fs-journal"
    path.write_bytes(first[:-1] + bytes([first[-1] ^ 1]) + second)   # a bad CRC, then a sound record
    j = Journal(str(path), None)
    fd = _target(tmp_path, b"....")
    assert j.replay(fd) == 0
    assert os.pread(fd, 4, 0) == b"...."
    os.close(fd)


def test_clear_empties_and_logging_starts_again(tmp_path):
    j = _journal(tmp_path, [(0, b"aa")])
    j.clear()
    j.log([(1, b"c")])
    fd = _target(tmp_path, b"....")
    assert j.replay(fd) == 1 and os.pread(fd, 4, 0) == b".c.."
    os.close(fd)
