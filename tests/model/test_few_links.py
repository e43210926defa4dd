"""`namespace.few_links`: a group the mount lists on the trio thread (fuse/listings.py) keeps at
most FEW_LINKS links in its header, with none waiting to land there; anything else, or a group
whose header cannot be read, is listed in a worker."""

from __future__ import annotations

import h5py

from h5fs.model import namespace
from h5fs.model.file import H5File
from h5fs.model.tree_edit import TreeEditor
from h5fs.model.writeback import Writeback


def test_few_links(tmp_path):
    path = tmp_path / "f.h5"
    with h5py.File(path, "w", libver="latest") as h:
        for i in range(namespace.FEW_LINKS):
            h.create_group(f"small/g{i}")
        for i in range(namespace.FEW_LINKS + 1):
            h.create_group(f"dense/g{i}")
        h.create_group("empty")
    with h5py.File(tmp_path / "old.h5", "w") as h:
        h.create_group("stab")
    with H5File.open(str(path), writable=True) as f:
        assert namespace.few_links(f.resolve("/small")) and namespace.few_links(f.resolve("/empty"))
        assert not namespace.few_links(f.resolve("/dense"))   # past libhdf5's compact maximum: dense
        wb = Writeback(f, 1 << 20)
        TreeEditor(f, wb).mkdir(f.resolve("/empty"), "new")   # its link waits to land there
        assert not namespace.few_links(f.resolve("/empty"))
        wb.close()
    with H5File.open(str(tmp_path / "old.h5")) as f:
        assert not namespace.few_links(f.resolve("/stab"))    # a symbol table
