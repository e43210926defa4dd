"""The pyfuse3 request handlers: a dispatcher that forwards each request, with the mount's
state (fuse/mount_state.py), to the module that answers it:

- names and nodes (lookup, getattr, forget, readlink, statfs): `lookups`
- directory listings (opendir, readdir, releasedir): `listings`
- files (open, read, write, setattr, flush, fsync, release): `open_files`
- xattrs read (listxattr, getxattr): `xattrs`; set and removed: `xattr_edits`
- namespace edits (mkdir, rmdir, unlink, rename, link, symlink): `namespace_edits`
- new files (create, mknod): `npy_arrivals`

Every handler is wrapped by `errors.boundary`: the one place errors become errno values, which
also counts the requests served (the root fact `user.h5fs.requests`). Only the trio thread runs
handlers and touches the mount state. What an object header answers (the stat numbers of most
objects, attribute lists and small values kept in the header, most facts) is answered inline,
and so are lookups in compact groups: a thread hop costs more than the work. On a writable
mount, lookups in a group's name index and the stat refreshes after edits are answered inline
too while no commit is under way (`MountState.quickly`), as are small edits (fuse/editing.py).
Listings (every child's header), other lookups, heap and index reads, variable-length data and
chunk decoding go through `offload.run_sync`; st_blocks that take a chunk index walk through
`blocks` (stat answers an estimate at once, the inode is invalidated once it is known; a lookup
or getattr waits up to stat_replies.SETTLE_WAIT for it first).

The kernel is told long entry, attribute and negative-entry timeouts and keeps the page cache
of open files: nothing changes under a read-only mount, and what does change (an estimated
st_blocks, what a writer changes) is invalidated (`invalidate`).
"""

from __future__ import annotations

import pyfuse3

from ..logs import Logs
from ..model.dataset_create import NPY_CHUNK_BYTES
from ..model.writeback import Writeback
from . import editing, listings, lookups, namespace_edits, npy_arrivals, open_files, writes, xattr_edits, xattrs
from .handles import Handles
from .mount_state import FLUSH_DELAY, EditorFactory, MountState


class Operations(pyfuse3.Operations):
    def __init__(self, h5file, source: str, *, writeback: Writeback | None = None, info: dict | None = None,
                 mountpoint: str = "/", compression: str | None = None, chunk_bytes: int = NPY_CHUNK_BYTES,
                 owner: tuple[int | None, int | None] = (None, None), umask: int | None = None,
                 flush_delay: float = FLUSH_DELAY, logs: Logs | None = None, editor: EditorFactory | None = None):
        super().__init__()
        self.state = MountState(h5file, source, writeback=writeback, info=info, mountpoint=mountpoint,
                                compression=compression, chunk_bytes=chunk_bytes, owner=owner, umask=umask,
                                flush_delay=flush_delay, logs=logs, editor=editor)

    def start(self, nursery) -> None:
        """Background work (prefetch, st_blocks counts, the flusher) runs in the daemon's nursery."""
        self.state.start(nursery)
        if self.state.writes is not None:
            writes.start(self.state, nursery)

    def stopping(self) -> None:
        """The kernel let the mount go: background work in workers ends (the walk for unused
        space), so that the unmount does not wait for it."""
        if self.state.writes is not None:
            self.state.writes.stopping.set()

    def close(self) -> None:
        """At unmount: every write into the file, durably."""
        state = self.state
        if state.writes is not None:
            state.handles = Handles()   # the session is over: nothing is open any more
            editing.free_orphans(state)
            writes.close(state)

    # -- names and nodes ------------------------------------------------------------------------
    async def lookup(self, parent_inode, name, ctx=None):
        return await lookups.lookup(self.state, parent_inode, name)

    async def getattr(self, inode, ctx=None):
        return await lookups.get_attributes(self.state, inode)

    async def forget(self, inode_list):
        await lookups.forget(self.state, inode_list)

    async def readlink(self, inode, ctx=None):
        return await lookups.readlink(self.state, inode)

    async def statfs(self, ctx=None):
        return await lookups.statfs(self.state)

    # -- directory listings ---------------------------------------------------------------------
    async def opendir(self, inode, ctx=None):
        return await listings.opendir(self.state, inode)

    async def readdir(self, fh, start_id, token):
        await listings.readdir(self.state, fh, start_id, token)

    async def releasedir(self, fh):
        await listings.releasedir(self.state, fh)

    # -- files ----------------------------------------------------------------------------------
    async def open(self, inode, flags, ctx=None):
        return await open_files.open_inode(self.state, inode, flags)

    async def read(self, fh, off, size):
        return await open_files.read(self.state, fh, off, size)

    async def write(self, fh, off, buf):
        return await open_files.write(self.state, fh, off, buf)

    async def setattr(self, inode, attr, fields, fh, ctx):
        return await open_files.set_attributes(self.state, inode, attr, fields, fh)

    async def flush(self, fh):
        await open_files.flush(self.state, fh)

    async def fsync(self, fh, datasync):
        await open_files.fsync(self.state, fh, datasync)

    async def fsyncdir(self, fh, datasync):
        await open_files.fsyncdir(self.state, fh, datasync)

    async def release(self, fh):
        await open_files.release(self.state, fh)

    async def create(self, parent_inode, name, mode, flags, ctx):
        return await npy_arrivals.create(self.state, parent_inode, name)

    async def mknod(self, parent_inode, name, mode, rdev, ctx):
        return await npy_arrivals.mknod(self.state, parent_inode, name, mode)

    # -- xattrs ---------------------------------------------------------------------------------
    async def listxattr(self, inode, ctx=None):
        return await xattrs.listxattr(self.state, inode)

    async def getxattr(self, inode, name, ctx=None):
        return await xattrs.getxattr(self.state, inode, name)

    async def setxattr(self, inode, name, value, ctx):
        await xattr_edits.setxattr(self.state, inode, name, value)

    async def removexattr(self, inode, name, ctx):
        await xattr_edits.removexattr(self.state, inode, name)

    # -- namespace edits ------------------------------------------------------------------------
    async def mkdir(self, parent_inode, name, mode, ctx):
        return await namespace_edits.mkdir(self.state, parent_inode, name)

    async def rmdir(self, parent_inode, name, ctx):
        await namespace_edits.rmdir(self.state, parent_inode, name)

    async def unlink(self, parent_inode, name, ctx):
        await namespace_edits.unlink(self.state, parent_inode, name)

    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        await namespace_edits.rename(self.state, parent_inode_old, name_old, parent_inode_new, name_new, flags)

    async def symlink(self, parent_inode, name, target, ctx):
        return await namespace_edits.symlink(self.state, parent_inode, name, target)

    async def link(self, inode, new_parent_inode, new_name, ctx):
        return await namespace_edits.link(self.state, inode, new_parent_inode, new_name)
