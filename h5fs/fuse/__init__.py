"""The FUSE layer: a thin pyfuse3 + trio adapter that shows an HDF5 file as a directory tree.

What the mount shows, and every number it reports, is the engine's answer
(h5fs/model/namespace.py: entries of a group, one name, stat numbers, facts, attributes). This
package keeps what only an adapter can:

Modules: `operations` (the pyfuse3 subclass: forwards each request, with the mount's state, to
the module that answers it), `mount_state` (what one mount keeps, passed to every handler, and
the helpers they share), the handlers by job: `lookups` (lookup, getattr, forget, readlink,
statfs), `listings` (opendir, readdir, releasedir), `open_files` (open, read, write, setattr,
flush, fsync, release), `xattrs` and `xattr_edits` (reading, and setting or removing, xattrs),
`namespace_edits` (mkdir, rmdir, unlink, rename, link, symlink), `npy_arrivals` (create, mknod:
new files and arrays arriving); what they share: `stat_replies` (the attributes handed to the
kernel), `editing` (how an edit runs and what it tells), `names` (file names checked), `writes`
(the write side: data writes, truncation, the background flush); `inodes` (the kernel's inodes,
with lookup counts: released on forget), `handles` (per-open file state; directory snapshots
that readdir cookies index), `blocks` (st_blocks that take a chunk index walk, counted in the
background), `invalidate` (telling the kernel what changed), `views` (xattr names and value
text), `errors` (the one error boundary; it counts requests), `offload` (the one worker-thread
helper), `prefetch` (sequential read-ahead per open file), `lru` (bounded caches),
`points_stream` (a `.points.npy` being written), `daemon` (mount, serve, unmount), `mounts`
(mount table helpers).

What the mount shows
- Group -> directory (mode 0555 until writes exist; st_nlink = the group's hard-link count).
- Dataset `D` -> file `D` (the raw view; st_size = raw size, st_blocks = bytes allocated in the
  file / 512, st_blksize = 1 MiB) and `D.npy` right after it (exactly what `np.save` writes:
  header padded to 64 bytes, then the data; st_blocks = 0: a view allocates nothing). If the
  group also has a real link named `D.npy`, the real link wins and the view is not shown.
  st_blocks of a chunked dataset whose index must be walked is counted in the background: a
  listing (readdirplus) answers 0 at once and the kernel is told the true number when it is
  known; a lookup or stat waits up to half a second for it.
- Named datatype -> a small read-only file holding its description (`user.h5fs.dtype`) and a newline.
- Soft link -> symlink. An absolute HDF5 target becomes a path inside the mount relative to the
  symlink's directory (`/x/y` from the group `/a/b` -> `../../x/y`); a relative target stays.
  The directory's depth is that of the path the group's inode was found by: a group with several
  hard links at different depths has one inode, so its absolute soft links are right for that path.
- External link -> symlink `FILE:/object/path` (it goes nowhere real).
- Attributes -> listed xattrs; h5fs facts -> xattrs read by name, not listed (see `views`).
- A broken object (header or metadata that cannot be read) is still listed by its link name, so
  the rest of the tree stays browsable; lookup/getattr/open/read/xattrs on it answer EIO, and
  the log names its path and the reason, once.
- Writes answer EROFS for now (the kernel does so itself with `-o ro`).
"""
