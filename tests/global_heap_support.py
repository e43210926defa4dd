"""Files and edits the global heap tests share: a file in the low bounds with variable-length
data, an attribute rewritten through a transaction, a commit of one."""

from __future__ import annotations

from dataclasses import replace

import h5py

from h5fs.format.codec import Writer
from h5fs.format.messages import attribute as attr_msg
from h5fs.model import messages as M
from h5fs.model.file import H5File
from h5fs.storage.object_header.edit import rewrite_message

LOW_BOUNDS = {"earliest": h5py.h5f.LIBVER_EARLIEST, "v108": h5py.h5f.LIBVER_V18, "v110": h5py.h5f.LIBVER_V110,
              "latest": h5py.h5f.LIBVER_LATEST}


def new_file(path, sizes=(8, 8), libver="earliest") -> h5py.File:
    """A new file with these sizes of offsets and lengths and this low format bound."""
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fcpl.set_sizes(*sizes)
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(LOW_BOUNDS[libver], h5py.h5f.LIBVER_LATEST)
    return h5py.File(h5py.h5f.create(str(path).encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl))


def rewrite_attribute(hf: H5File, txn, name: str, data: bytes) -> None:
    """Replace the value of root attribute `name` (its message rewritten in place)."""
    header = hf.root.header
    raw = next(r for r in header.find(M.ATTRIBUTE) if hf.root.decode(r).name == name)
    msg = hf.root.decode(raw)
    w = Writer(hf.sizes)
    attr_msg.encode(w, replace(msg, data=data + msg.data[len(data):]))
    rewrite_message(txn, header, raw, w.getvalue().ljust(len(raw.data), b"\0"))


def commit(hf: H5File, txn) -> None:
    txn.commit()
    hf.invalidate(hf.root_address)
    for address, size in txn.rewritten:
        hf.meta.invalidate_range(address, address + size)
