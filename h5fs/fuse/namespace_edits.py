"""The mount's namespace edits: mkdir, rmdir, unlink, rename, link and symlink, each one
transaction of the engine's tree editor (how they run and what they tell: fuse/editing.py).

Names are checked here (what HDF5 can hold, what the mount shows: `D` and `D.npy` are one
dataset); the editor checks the tree (existence, emptiness, cycles). A file of bytes renamed to
`x.npy` becomes the array it holds (fuse/npy_arrivals.py).
"""

from __future__ import annotations

import errno
import logging
import os

import pyfuse3
from pyfuse3 import FUSEError

from ..model import namespace
from ..model.namespace import DIR, NPY, NPY_SUFFIX, POINTS_SUFFIX, RAW, SYMLINK, Numbers
from ..model.tree_edit import NamespaceError
from . import editing, npy_arrivals
from .editing import changed, entry_of, forget_object, forgotten, free_name, link_now, link_of, looked_up, quick, run
from .errors import boundary
from .inodes import Node
from .mount_state import MountState
from .names import array_name, link_name
from .stat_replies import hand_out

log = logging.getLogger("h5fs.fuse")


@boundary
async def mkdir(mount: MountState, parent_inode: int, name: bytes) -> pyfuse3.EntryAttributes:
    editor = mount.writable().editor
    parent = mount.dir(parent_inode)
    text = link_name(name)

    def make() -> namespace.Entry | None:   # one worker trip: the name checked, made, looked up
        # a link of that name the editor refuses itself; a view's name (D.npy) only shows here
        if text.endswith((NPY_SUFFIX, POINTS_SUFFIX)) and \
                namespace.lookup(mount.f, mount.object(parent), parent.path, name) is not None:
            raise NamespaceError(errno.EEXIST, f"{parent.path}: {text!r} exists")
        address = editor.mkdir(mount.object(parent), text)
        return namespace.object_entry(mount.f, parent.path, text, address)

    entry = await quick(mount, make)
    if entry is not None:
        mount.table.gone(entry.address)   # a node there is a freed object's whose news is on its way
    await changed(mount, parent, name)
    if entry is None:
        raise FUSEError(errno.EIO)
    return hand_out(mount, parent, entry)


@boundary
async def rmdir(mount: MountState, parent_inode: int, name: bytes) -> None:
    editor = mount.writable().editor
    parent = mount.dir(parent_inode)
    text, entry = await link_of(mount, parent, name)
    if entry.kind != DIR:
        raise FUSEError(errno.ENOTDIR)
    before = mount.table.newest
    # an empty group: its removal waits to land (model/quick_unlink.py), an edit as small as a
    # mkdir, no worker trip (`rm -r` of a tree removes every group so)
    small = namespace.links_deferred(mount.object(parent))
    left = await (quick if small else run)(mount, editor.rmdir, mount.object(parent), text)
    await changed(mount, parent, name)
    await forget_object(mount, entry.address, left, before)


@boundary
async def unlink(mount: MountState, parent_inode: int, name: bytes) -> None:
    writes = mount.writable()
    if (parent_inode, name) in writes.gone_twins:
        # the other view of a dataset removed while its directory was being read (`rm -r`
        # listed both `D` and `D.npy`, removed `D`, and now removes `D.npy`): that unlink
        # succeeds, as the file is gone
        writes.gone_twins.discard((parent_inode, name))
        return
    parent = mount.dir(parent_inode)

    def remove() -> tuple[namespace.Entry, int | None, Numbers | None, list[bytes]]:   # one worker trip
        text, entry = link_now(mount, parent, name)
        if entry.kind == DIR:
            raise FUSEError(errno.EISDIR)
        listed = [t for t in namespace.other_views(name, entry) if mount.handles.listed(parent.ino, t)]
        left = writes.editor.unlink(mount.object(parent), text)
        # the views that went with it: not a link of that name hiding one, nor one never listed
        gone = [t for t in listed if not _shows(mount, parent, t)]
        return entry, left, editing.numbers_left(mount, entry.address, left), gone

    before = mount.table.newest
    # the removal waits to land (model/quick_unlink.py): an edit as small as a mkdir, no worker trip
    small = namespace.links_deferred(mount.object(parent))
    entry, left, numbers, gone = await (quick if small else run)(mount, remove)
    await changed(mount, parent, name, namespace.other_views(name, entry))
    if mount.handles.reading(parent.ino):
        writes.gone_twins.update((parent.ino, twin) for twin in gone)
    if entry.address is not None:
        await forgotten(mount, entry.address, left, numbers, before)


def _shows(mount: MountState, parent: Node, name: bytes) -> bool:
    """In a worker: whether `name` is an entry of `parent`."""
    return namespace.lookup(mount.f, mount.object(parent), parent.path, name) is not None


def closed_dir(mount: MountState, ino: int) -> None:
    """A listing of directory `ino` was closed: with none left open, no view removed with its
    twin is looked for in it any more."""
    if not mount.handles.reading(ino):
        mount.writes.gone_twins = {key for key in mount.writes.gone_twins if key[0] != ino}


@boundary
async def rename(mount: MountState, old_parent_inode: int, old: bytes, new_parent_inode: int, new: bytes,
                 flags: int) -> None:
    editor = mount.writable().editor
    old_parent, new_parent = mount.dir(old_parent_inode), mount.dir(new_parent_inode)
    if flags & ~pyfuse3.RENAME_NOREPLACE:
        raise FUSEError(errno.EINVAL)   # RENAME_EXCHANGE, RENAME_WHITEOUT: not for HDF5 links
    text, entry = await link_of(mount, old_parent, old)
    base = new
    suffix = entry.suffix.encode()
    if suffix:   # mv D.npy E.npy renames the dataset (or the soft link D)
        if not new.endswith(suffix) or new == suffix:
            raise FUSEError(errno.EINVAL)
        base = new[:-len(suffix)]
    # a file of bytes renamed to x.npy (rsync's temporary file, np.save then os.replace):
    # its bytes become dataset x's array, as `cp T x.npy` would make it
    array = not suffix and entry.kind == RAW and array_name(new) and \
        await run(mount, npy_arrivals.holds_bytes, mount, old_parent, text, entry)
    if array:
        base = new[:-len(NPY_SUFFIX)]
    new_text = link_name(base)
    existing = await entry_of(mount, new_parent, base)
    if existing is not None:
        if flags & pyfuse3.RENAME_NOREPLACE:
            raise FUSEError(errno.EEXIST)
        if existing.kind == DIR and entry.kind != DIR:
            raise FUSEError(errno.EISDIR)
        if entry.kind == DIR and existing.kind != DIR:
            raise FUSEError(errno.ENOTDIR)
    if array and existing is not None and existing.kind == RAW and existing.address not in (None, entry.address):
        target = await run(mount, npy_arrivals.fits, mount, old_parent, text, entry, existing.address,
                           namespace.join(new_parent.path, new_text))
        if target is not None:   # an array that fits dataset x: x's data, as `cp T x.npy` makes it
            await npy_arrivals.into(mount, old_parent, old, text, entry, target, new_parent, new, base)
            return
    if array:
        await npy_arrivals.to_array(mount, old_parent, text, entry)
    if existing is not None and existing.address is not None and existing.address == entry.address \
            and existing.kind != SYMLINK:
        if array:   # mv D D.npy: D's own bytes became its array
            await npy_arrivals.now_a_view(mount, entry, new_parent, new, base)
        return   # two names of one object: rename(2) does nothing
    before = mount.table.newest
    # replacing an object may free its storage, moving a group checks its whole subtree
    # (TreeEditor._inside): in a worker
    edit = quick if existing is None and entry.kind != DIR else run
    left = await edit(mount, editor.rename, mount.object(old_parent), text, mount.object(new_parent), new_text)
    link_node = mount.table.find_link(old_parent.address, old) if entry.kind == SYMLINK else None
    # the moved object and all below it are known by their new paths (symlink targets,
    # `user.h5fs.path`, messages); a soft link's inode by its new name and text
    if entry.address is not None:
        moved = mount.table.moved(namespace.join(old_parent.path, text), namespace.join(new_parent.path, new_text),
                                  None if entry.kind == DIR else entry.address)
        for node in moved:
            for npy in (False, True):
                mount.fact_tables.pop((node.address, npy))
    if link_node is not None:   # the kernel keeps the inode under its new name
        mount.table.link_moved(link_node, namespace.join(new_parent.path, link_name(new)))
    for parent, name in ((old_parent, old), (new_parent, new)):
        await changed(mount, parent, name, namespace.other_views(name, entry))
    if link_node is not None:   # after `changed`, which drops what the names had
        mount.table.link_renamed(link_node, new_parent.address, new)
    node = None if entry.address is None else mount.table.find_object(entry.address)
    if node is not None and node.numbers is not None and node.numbers.ctime_ns is not None:
        await editing.refresh(mount, entry.address)   # its change time (TreeEditor.rename)
    if array:
        await npy_arrivals.now_a_view(mount, entry, new_parent, new, base)
    if existing is not None and existing.address is not None and existing.address != entry.address:
        await forget_object(mount, existing.address, left, before)


@boundary
async def link(mount: MountState, inode: int, new_parent_inode: int, new: bytes) -> pyfuse3.EntryAttributes:
    editor = mount.writable().editor
    node = mount.live_node(inode)
    new_parent = mount.dir(new_parent_inode)
    if node.kind not in (RAW, NPY, DIR) or node.address is None:
        raise FUSEError(errno.EPERM)
    name = new
    if node.kind == NPY:   # ln D.npy E.npy links the dataset as E, as mv renames it
        if not new.endswith(NPY_SUFFIX.encode()) or new == NPY_SUFFIX.encode():
            raise FUSEError(errno.EINVAL)
        name = new[:-len(NPY_SUFFIX)]
        if await entry_of(mount, new_parent, new) is not None:
            raise FUSEError(errno.EEXIST)
    text = await free_name(mount, new_parent, name)
    await quick(mount, editor.hard_link, node.address, mount.object(new_parent), text)
    await changed(mount, new_parent, new, [name] if name != new else [])
    await editing.refresh(mount, node.address)
    return await looked_up(mount, new_parent, new)


@boundary
async def symlink(mount: MountState, parent_inode: int, name: bytes, target: bytes) -> pyfuse3.EntryAttributes:
    editor = mount.writable().editor
    parent = mount.dir(parent_inode)
    text = await free_name(mount, parent, name)
    kind, where = link_target(mount, parent, target)
    if kind == "external":
        await quick(mount, editor.external_link, mount.object(parent), text, *where)
    else:
        await quick(mount, editor.soft_link, mount.object(parent), text, where)
    await changed(mount, parent, name, [name + NPY_SUFFIX.encode()])   # a soft link to a dataset: its .npy too
    return await looked_up(mount, parent, name)


def link_target(mount: MountState, parent: Node, target: bytes) -> tuple[str, object]:
    """("soft", HDF5 path) or ("external", (file name, HDF5 path)) for a symlink target:
    relative (kept relative, as HDF5 can: unless it climbs with `..`, which HDF5 paths
    cannot, and is then resolved against the link's group), absolute inside the mount, or
    `FILE:/path`; anything else cannot be an HDF5 link (EPERM)."""
    text = target.decode("utf-8", "surrogateescape")
    head, sep, tail = text.partition(":/")
    root = mount.mountpoint.rstrip("/")
    inside = text == root or text.startswith(root + "/")
    if sep and head and not inside:   # what readlink shows of an external link
        return "external", (head, "/" + tail)
    if text.startswith("/"):
        if not inside:
            log.warning("%s: symlink target %r lies outside the mount", parent.path, text)
            raise FUSEError(errno.EPERM)
        path = text[len(root):] or "/"
    else:
        relative = os.path.normpath(text)
        if relative != "." and relative != ".." and not relative.startswith("../"):
            return "soft", relative   # HDF5 resolves it from the link's group, wherever that moves
        path = os.path.join(parent.path, text)
    path = os.path.normpath(path)
    if path.startswith("//"):
        path = path[1:]
    if not path.startswith("/") or path.startswith("/.."):
        log.warning("%s: symlink target %r leaves the file", parent.path, text)
        raise FUSEError(errno.EPERM)
    return "soft", path


async def touch(mount: MountState, node: Node, mtime_ns: int) -> None:
    """utimens: the object's modification time set (where it keeps one)."""
    await quick(mount, mount.writable().editor.touch, mount.object(node), mtime_ns)
    await editing.retimed(mount, node.address)
