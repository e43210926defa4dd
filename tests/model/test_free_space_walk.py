"""The walk for unused space after mount (h5fs.model.free_space) against edits committed while
it runs: a new link to an existing object (ln, mv) makes the walk untrusted (the object may have
moved behind it: its bytes would look unused), so nothing is adopted and the walk is to be made
again; edits that only allocate and free (recorded by the allocator) leave it trusted. Files
made by h5py with unused space in them (datasets deleted)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from h5fs.model import free_space
from h5fs.model import namespace
from h5fs.model.file import H5File
from h5fs.model.tree_edit import TreeEditor
from h5fs.model.writeback import Writeback


@pytest.fixture
def opened(tmp_path):
    path = tmp_path / "f.h5"
    with h5py.File(path, "w", libver="latest") as f:
        for i in range(20):
            f.create_dataset(f"g{i % 4}/d{i}", data=np.arange(1000) + i)
        for i in range(0, 20, 3):
            del f[f"g{i % 4}/d{i}"]   # unused space for the walk to find
    f = H5File.open(str(path), writable=True, lock=True)
    wb = Writeback(f, 16 << 20)
    try:
        yield f, TreeEditor(f, wb)
    finally:
        wb.close()
        f.close()


def _group(f, name):
    return f.get(namespace.lookup(f, f.root, "/", name.encode()).address, "/" + name)


def _during_walk(monkeypatch, edit):
    real = free_space.walk

    def walk(f, **options):
        found = real(f, **options)
        edit()
        return found
    monkeypatch.setattr(free_space, "walk", walk)


@pytest.mark.parametrize("how", ["rename", "hard_link"])
def test_a_new_link_under_the_walk_adopts_nothing(opened, monkeypatch, how):
    f, editor = opened
    g0, g3 = _group(f, "g0"), _group(f, "g3")
    if how == "rename":
        _during_walk(monkeypatch, lambda: editor.rename(g3, "d7", g0, "moved"))
    else:
        address = namespace.lookup(f, g3, "/g3", b"d7").address
        _during_walk(monkeypatch, lambda: editor.hard_link(address, g0, "again"))
    free_before = f.store.allocator.extents()
    assert free_space.find_free_space(f) is None
    assert f.store.allocator.extents() == free_before
    monkeypatch.undo()
    assert free_space.find_free_space(f) > 0   # the tree holds still: the walk is trusted again


def test_edits_that_only_allocate_leave_the_walk_trusted(opened, monkeypatch):
    f, editor = opened
    g1 = _group(f, "g1")
    _during_walk(monkeypatch, lambda: editor.mkdir(g1, "new"))
    assert free_space.find_free_space(f) > 0


def test_a_walk_a_new_link_made_untrusted_ends_there(opened):
    """The walk ends at the next object once a link moved under it (its result would be thrown
    away); the next walk, with the tree holding still, is trusted."""
    f, editor = opened
    g0, g3 = _group(f, "g0"), _group(f, "g3")
    met = []

    def progress(objects, chunks):
        met.append(objects)
        if objects == 2:
            editor.rename(g3, "d7", g0, "moved")

    free_before = f.store.allocator.extents()
    assert free_space.find_free_space(f, progress=progress) is None
    assert max(met) == 2 and f.store.allocator.extents() == free_before
    assert free_space.find_free_space(f) > 0
