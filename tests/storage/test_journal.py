"""The write-ahead journal (storage/journal.py): records appended one after another into
preallocated zeros, replayed in order, a torn record and everything after it ignored, the journal
emptied after a replay."""

from __future__ import annotations

import os

import struct
import zlib

import h5py
import pytest

from h5fs.errors import H5fsError
from h5fs.model.file import H5File
from h5fs.storage.journal import LIMIT, OLD_MAGIC, Journal, Stale, decode, deferred, encode, journal_path, records


def _target(tmp_path, content: bytes) -> int:
    path = tmp_path / "file.bin"
    path.write_bytes(content)
    return os.open(path, os.O_RDWR)


def _journal(tmp_path, *records: list[tuple[int, bytes]]) -> Journal:
    j = Journal(str(tmp_path / "file.bin.h5fs-journal"), None)
    for entries in records:
        j.log(entries, (0, 0))
    return j


def _after_crash(j: Journal) -> Journal:
    """The journal as the next open finds it: the process that logged the records is gone."""
    os.close(j.writer.fd)
    return Journal(j.path, None)


def test_records_replay_in_order(tmp_path):
    j = _journal(tmp_path, [(0, b"aaaa"), (8, b"zz")], [(0, b"bb"), (10, b"x")])
    assert j.pending and decode(open(j.path, "rb").read()) == [(0, b"aaaa"), (8, b"zz"), (0, b"bb"), (10, b"x")]
    fd = _target(tmp_path, b"." * 12)
    j = _after_crash(j)
    assert j.replay(fd, lambda: 0) == 4
    assert os.pread(fd, 12, 0) == b"bbaa....zzx."   # the later record wins where both write
    assert not j.pending and decode(open(j.path, "rb").read()) is None
    os.close(fd)


def test_records_fill_preallocated_zeros(tmp_path):
    """Logging leaves the journal's size alone (fdatasync then has no size to commit)."""
    j = _journal(tmp_path)
    assert os.path.getsize(j.path) == LIMIT
    j.log([(0, b"a" * 1000)], (0, 0))
    assert os.path.getsize(j.path) == LIMIT and decode(open(j.path, "rb").read()) == [(0, b"a" * 1000)]


def test_a_torn_record_ends_the_replay(tmp_path):
    j = _journal(tmp_path, [(0, b"aa")], [(2, b"bb")])
    with open(j.path, "r+b") as fh:             # the second record lost its last byte
        fh.seek(j.size - 1)
        fh.write(b"\0")
    fd = _target(tmp_path, b"....")
    assert _after_crash(j).replay(fd, lambda: 0) == 1
    assert os.pread(fd, 4, 0) == b"aa.."
    os.close(fd)


def test_nothing_after_a_damaged_record_is_applied(tmp_path):
    first, second = encode([(0, b"aa")], (0, 0)), encode([(2, b"bb")], (0, 0))
    path = tmp_path / "file.bin.h5fs-journal"
    path.write_bytes(first[:-1] + bytes([first[-1] ^ 1]) + second)   # a bad CRC, then a sound record
    j = Journal(str(path), None)
    fd = _target(tmp_path, b"....")
    assert j.replay(fd, lambda: 0) == 0
    assert os.pread(fd, 4, 0) == b"...."
    os.close(fd)


def test_clear_empties_and_logging_starts_again(tmp_path):
    j = _journal(tmp_path, [(0, b"aa")])
    j.clear()
    j.log([(1, b"c")], (0, 0))
    fd = _target(tmp_path, b"....")
    assert _after_crash(j).replay(fd, lambda: 0) == 1 and os.pread(fd, 4, 0) == b".c.."
    os.close(fd)


def test_records_replay_only_onto_the_state_of_the_file_they_were_written_for(tmp_path):
    """The file a crash left records the end of allocation from before the first record or after
    one of them; any other value means something else wrote the file since: nothing is written."""
    for eoa, replays in ((100, True), (200, True), (300, True), (150, False), (None, False)):
        j = _journal(tmp_path)
        j.log([(0, b"aa")], (100, 200))
        j.log([(2, b"bb")], (200, 200))
        j.log([(4, b"cc")], (200, 300))
        fd = _target(tmp_path, b"......")
        j = _after_crash(j)
        if replays:
            assert j.replay(fd, lambda: eoa) == 3 and os.pread(fd, 6, 0) == b"aabbcc"
        else:
            with pytest.raises(Stale, match=f"one of 100, 200, 300, and it is now {eoa or 'unreadable'}"):
                j.replay(fd, lambda: eoa)
            assert os.pread(fd, 6, 0) == b"......"
            assert decode(open(j.path, "rb").read()) == [(0, b"aa"), (2, b"bb"), (4, b"cc")]   # kept
        os.close(fd)
        j.close()
        (tmp_path / "file.bin.h5fs-journal").unlink(missing_ok=True)


def test_records_appended_without_a_barrier_replay_after_a_kill(tmp_path):
    """`append` leaves the record to the kernel (no fsync): a killed process's records are
    there for the next open, as those of `log`."""
    j = Journal(str(tmp_path / "file.bin.h5fs-journal"), None)
    j.append([(0, b"ab")], (0, 0))
    j.append([(3, b"c")], (0, 0))
    assert j.unsynced
    fd = _target(tmp_path, b"....")
    assert _after_crash(j).replay(fd, lambda: 0) == 2 and os.pread(fd, 4, 0) == b"ab.c"
    os.close(fd)


def test_a_record_whose_data_the_file_lacks_ends_the_replay(tmp_path):
    """A record carries the CRC-32 of the chunk data its commit wrote into the file: a power
    loss that took the data took the record, and every record after it, with it (the replay
    stops there, as at a torn record); a record whose data is there replays."""
    fd = _target(tmp_path, b"." * 8 + b"DATA" + b"." * 4)
    j = Journal(str(tmp_path / "file.bin.h5fs-journal"), None)
    j.append([(0, b"a")], (0, 0), [(8, 4, zlib.crc32(b"DATA"))])   # its data is in the file
    j.append([(1, b"b")], (0, 0), [(12, 4, zlib.crc32(b"LOST"))])  # its data never arrived
    j.append([(2, b"c")], (0, 0))                                   # after it: not replayed either
    assert _after_crash(j).replay(fd, lambda: 0) == 1
    assert os.pread(fd, 16, 0) == b"a......." + b"DATA" + b"...."
    os.close(fd)


def test_a_marker_vouches_for_the_data_of_the_records_before_it(tmp_path):
    """After a marker (the data written so far was fsynced), the checks of the records before it
    are not made: the group commit may since have written newer bytes where that data was. The
    records after the marker are checked as ever."""
    fd = _target(tmp_path, b"." * 8 + b"OVER" + b"." * 4)
    j = Journal(str(tmp_path / "file.bin.h5fs-journal"), None)
    j.append([(0, b"a")], (0, 0), [(8, 4, zlib.crc32(b"DATA"))])   # its data overwritten since
    j.mark()
    j.append([(1, b"b")], (0, 0))
    j.append([(2, b"c")], (0, 0), [(12, 4, zlib.crc32(b"LOST"))])  # after the marker: checked
    j.sync()
    assert _after_crash(j).replay(fd, lambda: 0) == 2
    assert os.pread(fd, 4, 0) == b"ab.."
    os.close(fd)


def test_the_replay_gives_the_file_back_its_allocated_length_before_retiring_the_records(tmp_path):
    """A power loss may take a growth of the file that the records' metadata relies on: the
    replay makes the file as long as the replayed superblock's end of allocation says (`end`),
    durably, before the records go."""
    fd = _target(tmp_path, b"....")
    j = Journal(str(tmp_path / "file.bin.h5fs-journal"), None)
    j.append([(0, b"ab")], (0, 0))
    assert _after_crash(j).replay(fd, lambda: 0, lambda: 100) == 1
    assert os.fstat(fd).st_size == 100 and os.pread(fd, 4, 0) == b"ab.."
    os.close(fd)


def test_records_of_an_older_h5fs_replay_as_they_are(tmp_path):
    """Records without an end of allocation (magic H5FSJRN1) cannot be checked: replayed."""
    body = struct.pack("<8sIQ", OLD_MAGIC, 1, 20 + 12 + 2) + struct.pack("<QI", 1, 2) + b"zz"
    (tmp_path / "file.bin.h5fs-journal").write_bytes(body + struct.pack("<I", zlib.crc32(body)))
    j = Journal(str(tmp_path / "file.bin.h5fs-journal"), None)
    fd = _target(tmp_path, b"....")
    assert j.replay(fd, lambda: None) == 1 and os.pread(fd, 4, 0) == b".zz."
    os.close(fd)


def test_a_file_recreated_after_a_crash_is_not_written_by_the_old_journal(tmp_path, caplog):
    """A crash left records; then h5py made the file anew (same name, same inode, another end of
    allocation). A writable open sets the journal aside under a name of its own, unreplayed,
    logs why, and the file stays exactly as h5py wrote it."""
    path = tmp_path / "data.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f["x"] = list(range(10))
    eoa = path.stat().st_size   # libhdf5 leaves the file as long as its end of allocation
    old = Journal(journal_path(str(path)), None)
    old.log([(0, b"\xff" * 64)], (eoa, eoa + 4096))   # what a mount of the old file logged
    old.writer.sync()
    os.close(old.writer.fd)                            # killed: the journal stays
    with h5py.File(path, "w", libver="latest") as f:   # made anew, larger
        f["y"] = list(range(1000))
    made = path.read_bytes()
    with H5File.open(str(path), writable=True) as f:
        assert f.store.journal.pending is False
    assert path.read_bytes() == made
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("data.h5.h5fs-journal.stale-")]
    assert len(kept) == 1 and decode(kept[0].read_bytes()) == [(0, b"\xff" * 64)]
    assert "not replayed" in caplog.text and f"it is now {len(made)}" in caplog.text
    with h5py.File(path, "r") as f:
        assert list(f["y"][:3]) == [0, 1, 2]


def _crashed_before_applying(tmp_path, libver: str):
    """A file and the journal a crash left right after a mkdir's record became durable, before
    any of its updates reached the file (the file's bytes are the ones before the mkdir)."""
    from h5fs.model.tree_edit import TreeEditor
    from h5fs.model.writeback import Writeback
    path = tmp_path / f"crashed-{libver}.h5"
    with h5py.File(path, "w", libver=libver) as f:
        f["x"] = list(range(5))
    before = path.read_bytes()
    with H5File.open(str(path), writable=True) as f:
        wb = Writeback(f, 1 << 20)
        TreeEditor(f, wb).mkdir(f.root, "new")
        record = open(journal_path(str(path)), "rb").read()   # before the close retires it
        wb.close()
    path.write_bytes(before)
    with open(journal_path(str(path)), "wb") as fh:
        fh.write(record)
    return path, before


@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_a_read_only_open_reads_through_the_records_and_writes_nothing(tmp_path, libver):
    """Read-only, the file is seen as the replay will leave it (the new group is there, the file
    and the journal untouched); the next read-write open writes the records into the file."""
    from h5fs.model import namespace
    path, before = _crashed_before_applying(tmp_path, libver)
    with h5py.File(path, "r") as f:
        assert sorted(f) == ["x"]           # nothing of the edit is in the file itself
    record = open(journal_path(str(path)), "rb").read()
    # a complete record: the group's bytes (an old-style one), or the new group and its link as
    # edits waiting to land (storage/pending_objects.py)
    assert decode(record) if libver == "earliest" else deferred(records(record))
    with H5File.open(str(path)) as f:
        entry = namespace.lookup(f, f.root, "/", b"new")
        assert entry is not None and entry.kind == namespace.DIR
        assert list(f.get(namespace.lookup(f, f.root, "/", b"x").address, "/x").read_array()) == [0, 1, 2, 3, 4]
    assert path.read_bytes() == before and open(journal_path(str(path)), "rb").read() == record
    H5File.open(str(path), writable=True).close()
    with h5py.File(path, "r") as f:
        assert sorted(f) == ["new", "x"] and isinstance(f["new"], h5py.Group)


def test_a_read_only_mount_shows_what_the_crash_left_in_the_journal(tmp_path, mount):
    path, before = _crashed_before_applying(tmp_path, "latest")
    mp = mount(path, "ro")
    assert sorted(os.listdir(mp)) == ["new", "x", "x.npy"]
    assert "read from the journal" in mount.log_of(mp)
    assert path.read_bytes() == before


def test_overlay_lays_records_over_the_file_in_order(tmp_path):
    """Across pages, past the end of the file, a later record over an earlier one; checked
    against applying the same entries to a copy of the bytes."""
    from h5fs.storage.page_overlay import PAGE, PageOverlay
    content = bytes(range(256)) * 40                       # 10,240 bytes: three pages
    entries = [(4090, b"A" * 20), (100, b"B" * 50), (120, b"C" * 10), (10_230, b"D" * 30), (12_300, b"E" * 4)]
    expected = bytearray(content) + bytes(12_304 - len(content))
    for position, data in entries:
        expected[position:position + len(data)] = data
    fd = _target(tmp_path, content)
    ov = PageOverlay(fd, entries)
    assert ov.end == 12_304 and ov.updates == 5
    for position, size in ((0, 12_304), (95, 40), (4000, 200), (PAGE, 10), (10_200, 500), (12_303, 10), (11_000, 50)):
        want = bytes(expected[position:min(position + size, 12_304)])
        assert ov.pread(size, position) == want, (position, size)
    assert os.pread(fd, 20_000, 0) == content              # nothing written
    os.close(fd)


def test_a_journal_with_records_survives_a_close_without_replay(tmp_path):
    """Only an empty journal is removed at close: one whose records were never replayed (the
    open failed before or during the replay) stays for the next open."""
    j = _journal(tmp_path, [(0, b"aa")])
    j.writer.sync()
    os.close(j.writer.fd)                       # killed
    again = Journal(j.path, None)
    assert again.pending
    again.close()
    assert decode(open(j.path, "rb").read()) == [(0, b"aa")]


def test_a_stale_journal_that_cannot_be_set_aside_stops_the_open(tmp_path, monkeypatch):
    """Neither replayed nor removed: the open fails, saying what to do, and both files stay."""
    path = tmp_path / "data.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f["x"] = [1, 2, 3]
    made = path.read_bytes()
    old = Journal(journal_path(str(path)), None)
    old.log([(0, b"\xff" * 64)], (1, 2))
    os.close(old.writer.fd)

    def refuse(*args):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(os, "rename", refuse)
    with pytest.raises(H5fsError, match=r"cannot be set aside \(Permission denied\): move .*data\.h5\.h5fs-journal away"):
        H5File.open(str(path), writable=True)
    assert path.read_bytes() == made
    assert decode(open(journal_path(str(path)), "rb").read()) == [(0, b"\xff" * 64)]
