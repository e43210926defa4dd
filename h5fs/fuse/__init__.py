"""The FUSE layer: how an HDF5 file looks as a directory tree (pyfuse3 + trio).

Modules: `operations` (the pyfuse3 handlers), `inodes` (stable inode numbers), `views` (.npy
header, xattr names and text, symlink text), `errors` (the one error boundary), `offload` (the
one worker-thread helper), `daemon` (mount, serve, unmount), `mounts` (mount table helpers).

What the mount shows
- Group -> directory (mode 0755, 0555 when read-only; st_nlink = the group's hard-link count).
- Dataset `D` -> file `D` (the engine's raw view; st_size = raw size, st_blocks = bytes allocated
  in the file / 512, st_blksize = 1 MiB) and `D.npy` right after it (a standard NPY v1/v2 header,
  64-byte aligned, then the data; st_blocks = 0: a view allocates nothing). If the group also has
  a real link named `D.npy`, the real link wins and the view is not shown.
- Named datatype -> a small read-only file holding its description (`user.h5fs.dtype`) and a newline.
- Soft link -> symlink. An absolute HDF5 target becomes a path inside the mount relative to the
  symlink's directory (`/x/y` from the group `/a/b` -> `../../x/y`); a relative target stays.
  The directory's depth is that of the path the group was first found by: a group with several
  hard links at different depths has one inode, so its absolute soft links are right for that path.
- External link -> symlink `FILE:/object/path` (it goes nowhere real).
- Attributes -> listed xattrs; h5fs facts -> xattrs read by name, not listed (see `views`).
- A broken object (header or metadata that cannot be read) is still listed by its link name, so
  the rest of the tree stays browsable; lookup/getattr/open/read/xattrs on it answer EIO, and
  the log names its path and the reason, once.
- Writes answer EROFS for now (the kernel does so itself with `-o ro`).
"""
