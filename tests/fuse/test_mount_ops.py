"""Operations handlers called directly (no kernel): the error boundary, lookups, reads, xattrs."""

from __future__ import annotations

import errno
import logging

import numpy as np
import pyfuse3
import pytest
import trio

from conftest import make_h5
from h5fs.errors import FormatError
from h5fs.fuse.operations import Operations
from h5fs.model.dataset import Dataset
from h5fs.model.file import H5File


def build(f):
    f["a"] = np.arange(100, dtype="<i4")
    g = f.create_group("g")
    g["b"] = np.arange(6, dtype="<f8").reshape(2, 3)
    g.attrs["n"] = np.int16(5)
    g.attrs["huge"] = np.arange(40000, dtype="<i8")  # its text exceeds the 64 KiB xattr limit
    f["link"] = __import__("h5py").SoftLink("/g/b")


@pytest.fixture
def ops(tmp_path):
    h5 = make_h5(tmp_path / "ops.h5", build, "latest")
    f = H5File.open(str(h5))
    try:
        yield Operations(f, str(h5), info={"pid": 1})
    finally:
        f.close()


def run(fn, *args):
    return trio.run(fn, *args)


def fuse_errno(fn, *args) -> int:
    with pytest.raises(pyfuse3.FUSEError) as e:
        trio.run(fn, *args)
    return e.value.errno


def test_lookup_getattr_read(ops):
    a = run(ops.lookup, pyfuse3.ROOT_INODE, b"a", None)
    assert a.st_size == 400 and a.st_nlink == 1
    fi = run(ops.open, a.st_ino, 0, None)
    assert fi.keep_cache
    assert run(ops.read, fi.fh, 8, 8) == np.arange(2, 4, dtype="<i4").tobytes()
    assert run(ops.read, fi.fh, 396, 100) == np.int32(99).tobytes()
    assert run(ops.read, fi.fh, 400, 100) == b""
    npy = run(ops.lookup, pyfuse3.ROOT_INODE, b"a.npy", None)
    body = run(ops.read, run(ops.open, npy.st_ino, 0, None).fh, 0, npy.st_size)
    assert len(body) == npy.st_size and body.startswith(b"\x93NUMPY")
    missing = run(ops.lookup, pyfuse3.ROOT_INODE, b"nope", None)
    assert missing.st_ino == 0  # a cached negative entry
    missing = run(ops.lookup, pyfuse3.ROOT_INODE, b"nope.npy", None)
    assert missing.st_ino == 0
    g = run(ops.lookup, pyfuse3.ROOT_INODE, b"g", None)
    assert fuse_errno(ops.open, g.st_ino, 0, None) == errno.EISDIR
    assert fuse_errno(ops.open, a.st_ino, 1, None) == errno.EROFS  # O_WRONLY
    assert fuse_errno(ops.getattr, 10**9, None) == errno.ESTALE
    link = run(ops.lookup, pyfuse3.ROOT_INODE, b"link", None)
    assert run(ops.readlink, link.st_ino, None) == b"g/b"
    npy_link = run(ops.lookup, pyfuse3.ROOT_INODE, b"link.npy", None)   # its target is a dataset
    assert run(ops.readlink, npy_link.st_ino, None) == b"g/b.npy"


def listing(ops, ino: int) -> dict[bytes, int]:
    """name -> inode of a directory's snapshot, handed out as readdirplus does."""
    parent = ops.state.table.get(ino)
    out = {}
    for entry in ops.state.handles.dirs[run(ops.opendir, ino, None)].entries:
        node = ops.state.table.intern(parent, entry)
        node.lookups += 1
        out[entry.name] = node.ino
    return out


def test_lookup_before_listing_keeps_inodes(ops):
    g = run(ops.lookup, pyfuse3.ROOT_INODE, b"g", None)
    b = run(ops.lookup, g.st_ino, b"b", None)
    bn = run(ops.lookup, g.st_ino, b"b.npy", None)
    assert listing(ops, g.st_ino) == {b"b": b.st_ino, b"b.npy": bn.st_ino}


def test_xattrs(ops):
    g = run(ops.lookup, pyfuse3.ROOT_INODE, b"g", None)
    names = run(ops.listxattr, g.st_ino, None)
    assert b"user.n" in names and b"user.h5fs.kind" not in names  # facts: by name only
    assert run(ops.getxattr, g.st_ino, b"user.h5fs.kind", None) == b"group"
    assert run(ops.getxattr, g.st_ino, b"user.n", None) == b"5"
    assert fuse_errno(ops.getxattr, g.st_ino, b"user.zzz", None) == pyfuse3.ENOATTR
    assert fuse_errno(ops.getxattr, g.st_ino, b"security.selinux", None) == pyfuse3.ENOATTR
    assert run(ops.getxattr, pyfuse3.ROOT_INODE, b"user.h5fs.pid", None) == b"1"


def test_write_handlers_answer_erofs(ops):
    root = pyfuse3.ROOT_INODE
    assert fuse_errno(ops.mkdir, root, b"x", 0o755, None) == errno.EROFS
    assert fuse_errno(ops.create, root, b"x", 0o644, 0, None) == errno.EROFS
    assert fuse_errno(ops.unlink, root, b"a", None) == errno.EROFS
    assert fuse_errno(ops.rmdir, root, b"g", None) == errno.EROFS
    assert fuse_errno(ops.rename, root, b"a", root, b"b", 0, None) == errno.EROFS
    assert fuse_errno(ops.symlink, root, b"s", b"a", None) == errno.EROFS
    assert fuse_errno(ops.setxattr, root, b"user.a", b"1", None) == errno.EROFS
    assert fuse_errno(ops.removexattr, root, b"user.a", None) == errno.EROFS
    assert fuse_errno(ops.write, root, 0, b"x") == errno.EROFS
    assert fuse_errno(ops.setattr, root, None, None, None, None) == errno.EROFS


def test_error_boundary(ops, monkeypatch, caplog):
    a = run(ops.lookup, pyfuse3.ROOT_INODE, b"a", None)
    fh = run(ops.open, a.st_ino, 0, None).fh

    def broken(offset, size):
        raise FormatError("/a: chunk 3: bad deflate stream")

    def bug(offset, size):
        raise ZeroDivisionError("oops")

    monkeypatch.setattr(Dataset, "read_cached", lambda self, o, s: None)
    monkeypatch.setattr(Dataset, "read_raw", lambda self, o, s: broken(o, s))
    with caplog.at_level(logging.WARNING, logger="h5fs.fuse"):
        assert fuse_errno(ops.read, fh, 0, 10) == errno.EIO
    assert "/a" in caplog.text and "bad deflate" in caplog.text
    monkeypatch.setattr(Dataset, "read_raw", lambda self, o, s: bug(o, s))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="h5fs.fuse"):
        assert fuse_errno(ops.read, fh, 0, 10) == errno.EIO
    assert "unexpected error" in caplog.text and "/a" in caplog.text and "ZeroDivisionError" in caplog.text
    # the object is still served once the engine answers again
    monkeypatch.undo()
    assert run(ops.read, fh, 0, 4) == np.int32(0).tobytes()


def test_broken_object_is_listed(ops, monkeypatch):
    real_get = ops.state.f.get

    def get(address, path):
        if path == "/g/b":
            raise FormatError("/g/b: object header checksum mismatch")
        return real_get(address, path)

    monkeypatch.setattr(ops.state.f, "get", get)
    g = run(ops.lookup, pyfuse3.ROOT_INODE, b"g", None)
    entries = listing(ops, g.st_ino)
    assert list(entries) == [b"b"]
    assert fuse_errno(ops.lookup, g.st_ino, b"b", None) == errno.EIO
    assert fuse_errno(ops.getxattr, entries[b"b"], b"user.h5fs.kind", None) == errno.EIO


def test_npy_view_failure_keeps_raw_view(ops, monkeypatch):
    from h5fs.errors import Unsupported

    def refuse(self):
        raise Unsupported("no .npy form for this type")

    monkeypatch.setattr(Dataset, "npy_dtype", property(refuse))
    assert list(listing(ops, pyfuse3.ROOT_INODE)) == [b"a", b"a.npy", b"g", b"link", b"link.npy"]
    a = run(ops.lookup, pyfuse3.ROOT_INODE, b"a", None)
    assert run(ops.read, run(ops.open, a.st_ino, 0, None).fh, 0, 4) == np.int32(0).tobytes()
    assert fuse_errno(ops.lookup, pyfuse3.ROOT_INODE, b"a.npy", None) == errno.EIO


def test_oversized_xattr_is_e2big_and_not_kept(ops):
    g = run(ops.lookup, pyfuse3.ROOT_INODE, b"g", None)
    assert fuse_errno(ops.getxattr, g.st_ino, b"user.huge", None) == errno.E2BIG
    assert ops.state.xattr_values.get((ops.state.table.get(g.st_ino).address, "huge")) is None
    assert run(ops.getxattr, g.st_ino, b"user.n", None) == b"5"


def test_forget_releases_inodes(ops):
    root = pyfuse3.ROOT_INODE
    a = run(ops.lookup, root, b"a", None)
    assert run(ops.lookup, root, b"a", None).st_ino == a.st_ino  # known: the same number, 2 lookups
    before = len(ops.state.table)
    run(ops.forget, [(a.st_ino, 1)])
    assert ops.state.table.get(a.st_ino) is not None
    run(ops.forget, [(a.st_ino, 1), (root, 5)])  # the root is never released
    assert ops.state.table.get(a.st_ino) is None and ops.state.table.get(root) is not None
    assert len(ops.state.table) == before - 1
    assert fuse_errno(ops.getattr, a.st_ino, None) == errno.ESTALE
    again = run(ops.lookup, root, b"a", None)
    assert again.st_ino != a.st_ino  # numbers are never reused
    assert run(ops.getxattr, pyfuse3.ROOT_INODE, b"user.h5fs.inodes", None) == str(len(ops.state.table)).encode()


def test_failed_lookup_leaves_no_inode(ops, monkeypatch):
    from h5fs.errors import Unsupported

    def refuse(self):
        raise Unsupported("no .npy form for this type")

    monkeypatch.setattr(Dataset, "npy_dtype", property(refuse))
    before = len(ops.state.table)
    assert fuse_errno(ops.lookup, pyfuse3.ROOT_INODE, b"a.npy", None) == errno.EIO
    assert len(ops.state.table) == before


def test_each_open_has_its_own_handle(ops):
    a = run(ops.lookup, pyfuse3.ROOT_INODE, b"a", None)
    first, second = run(ops.open, a.st_ino, 0, None).fh, run(ops.open, a.st_ino, 0, None).fh
    assert first != second
    assert run(ops.read, first, 0, 4) == run(ops.read, second, 0, 4) == np.int32(0).tobytes()
    run(ops.release, first)
    assert run(ops.read, second, 396, 4) == np.int32(99).tobytes()
    assert fuse_errno(ops.read, first, 0, 4) == errno.EBADF
    one, two = run(ops.opendir, pyfuse3.ROOT_INODE, None), run(ops.opendir, pyfuse3.ROOT_INODE, None)
    assert one != two and ops.state.handles.dirs[one].entries == ops.state.handles.dirs[two].entries
    run(ops.releasedir, one)
    assert one not in ops.state.handles.dirs and two in ops.state.handles.dirs


def test_requests_are_counted(ops):
    before = ops.state.requests
    run(ops.lookup, pyfuse3.ROOT_INODE, b"nope", None)
    run(ops.getattr, pyfuse3.ROOT_INODE, None)
    assert run(ops.getxattr, pyfuse3.ROOT_INODE, b"user.h5fs.requests", None) == str(before + 3).encode()


def test_a_listing_asked_again_reuses_what_the_kernel_holds(ops):
    """Once its listing is forgotten, a directory listed again takes the kind and stat numbers
    of children the kernel holds inodes of from those inodes: their headers are not read."""
    first = run(ops.opendir, pyfuse3.ROOT_INODE, None)
    listed = ops.state.handles.dirs[first].entries
    a = run(ops.lookup, pyfuse3.ROOT_INODE, b"a", None)      # the kernel now holds /a
    a_address = ops.state.table.get(a.st_ino).address
    g_address = next(e.address for e in listed if e.name == b"g")
    ops.state.listings.pop(ops.state.table.root.address)
    ops.state.f.meta.clear()
    again = ops.state.handles.dirs[run(ops.opendir, pyfuse3.ROOT_INODE, None)].entries
    assert again == listed
    assert ops.state.f.peek_state(a_address) is None                # answered by the inode
    assert ops.state.f.peek_state(g_address) is not None            # unknown to the kernel: read
