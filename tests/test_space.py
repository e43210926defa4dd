"""The space allocator: first fit or the end of the file, small blocks never straddle a page,
freed space reusable only once released, and a free-space walk's gaps adopted minus what changed
meanwhile. (Its use in real files is tested through the mount: test_mount_write.py.)"""

from __future__ import annotations

import pytest

from h5fs.errors import H5fsError
from h5fs.storage.space import PAGE, Allocator


def test_end_of_file_and_alignment():
    a = Allocator(1001)
    assert a.allocate(10) == 1008            # 8-byte aligned
    assert a.allocate(PAGE - 100) == PAGE    # at 1024 it would straddle 4096: the next page
    assert a.eoa == 2 * PAGE - 100
    assert a.extents() == [(1001, 7), (1018, PAGE - 1018)]   # what alignment skipped is free


def test_freed_space_waits_for_release_then_merges_and_is_reused():
    a = Allocator(0)
    x, y, z = a.allocate(64), a.allocate(64), a.allocate(64)
    a.free(x, 64)
    a.free(y, 64)
    assert a.allocate(32) == 192             # pending frees are not reusable yet
    a.release()
    assert a.extents() == [(0, 128)]         # merged
    assert a.allocate(100) == 0
    assert a.extents() == [(100, 28)]
    a.free(z, 64)
    a.release()
    assert a.extents() == [(100, 92)]        # merged with the neighbour freed before
    with pytest.raises(H5fsError):
        a.add_free(120, 8)                   # already free


def test_snapshot_restore_undoes_a_transaction():
    a = Allocator(100)
    saved = a.snapshot()
    a.allocate(50)
    a.free(0, 8)
    a.restore(saved)
    assert a.eoa == 100 and a.extents() == [] and a.pending == []


def test_adopt_keeps_out_what_changed_during_the_walk():
    a = Allocator(1000)
    end = a.watch()
    assert end == 1000
    b = a.allocate(100)                      # at 1000: beyond the walk's end anyway
    a.free(200, 50)                          # freed during the walk: pending, not adopted twice
    adopted = a.adopt([(0, 100), (180, 100), (900, 100)])
    assert adopted == 100 + 30 + 20 + 100
    a.release()
    assert a.extents() == [(0, 100), (180, 100), (900, 100)]
    assert b == 1000
