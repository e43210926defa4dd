"""The mount's namespace edits: mkdir, rmdir, unlink, rename, link, symlink, setxattr,
removexattr and utimens, each one transaction of the engine's tree editor
(h5fs.model.tree_edit). A small edit (a group, a link, an attribute, a time) runs on the trio
thread while no commit is under way (`_quick`: a worker hop costs more than the edit, whose
Python holds the GIL either way); one that may free or copy storage, in a worker (`_run`).

Names are checked here (what HDF5 can hold, what the mount shows: `D` and `D.npy` are one
dataset); the editor checks the tree (existence, emptiness, cycles). After an edit the adapter's
caches of what changed are dropped (listings, attribute tables, facts, stat numbers) and the
kernel is told of changes it did not make itself (the link count of an object with other names,
attributes of other inodes of the same object). New files and arrays arriving (`cp x.npy`,
a file of bytes renamed to `x.npy`) are its base class's, fuse/npy_arrivals.py.
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import os
import time
from dataclasses import replace

import numpy as np
import pyfuse3
from pyfuse3 import FUSEError

from ..errors import InvalidWrite
from ..model import namespace
from ..model.dataset_create import NPY_CHUNK_BYTES
from ..model.namespace import DIR, NPY, NPY_SUFFIX, POINTS_SUFFIX, RAW, SYMLINK, Numbers
from ..model.tree_edit import NamespaceError, TreeEditor
from . import offload, views
from .inodes import Node
from .npy_arrivals import NpyArrivals

log = logging.getLogger("h5fs.fuse")

DEFAULT_FILTERS = "gzip:4,shuffle"   # new datasets' compression (-o compression=...)
CREATE_XATTR = b"user.h5fs.create"   # `h5fs create`'s request, set on the parent directory
ATTRIBUTE_XATTR = b"user.h5fs.attribute"   # `h5fs attr --dtype`'s request, set on the object


def check_length(name: bytes) -> None:
    """ENAMETOOLONG for a name over NAME_MAX, whatever asks for it: the kernel passes names up
    to 1024 bytes (FUSE_NAME_MAX), and POSIX wants ENAMETOOLONG rather than ENOENT for them."""
    if len(name) > namespace.NAME_MAX:
        raise FUSEError(errno.ENAMETOOLONG)


def link_name(name: bytes) -> str:
    """The HDF5 link name for a file name a user gives (UTF-8, no NUL; the kernel already
    refuses '/' and empty names)."""
    check_length(name)
    if not name or b"/" in name or b"\0" in name or name in (b".", b".."):
        raise FUSEError(errno.EINVAL)
    try:
        return name.decode("utf-8")
    except UnicodeDecodeError:
        log.warning("%r: not UTF-8, HDF5 cannot hold it as a link name", name)
        raise FUSEError(errno.EINVAL) from None


class EditSide(NpyArrivals):
    def __init__(self, ops, editor: TreeEditor, filters: str = DEFAULT_FILTERS, chunk_bytes: int = NPY_CHUNK_BYTES):
        self.ops, self.editor, self.filters = ops, editor, filters
        self.chunk_bytes = chunk_bytes   # of new datasets (-o chunk_kb)
        # (dir inode, name): a view whose dataset went with its twin while a listing was open
        self.gone_twins: set[tuple[int, bytes]] = set()

    # -- what a name stands for -------------------------------------------------------------
    async def _entry(self, parent: Node, name: bytes) -> namespace.Entry | None:
        ops = self.ops
        return await ops._quickly(namespace.lookup, ops.f, ops._object(parent), parent.path, name)

    async def _link_of(self, parent: Node, name: bytes) -> tuple[str, namespace.Entry]:
        """The link name behind a file name of `parent` (`D.npy` is the link `D`), and its entry."""
        return await self.ops._quickly(self._link_now, parent, name)

    def _link_now(self, parent: Node, name: bytes) -> tuple[str, namespace.Entry]:
        """`_link_of` in a worker thread."""
        ops = self.ops
        check_length(name)
        entry = namespace.lookup(ops.f, ops._object(parent), parent.path, name)
        if entry is None:
            raise FUSEError(errno.ENOENT)
        return namespace.view_base(name, entry).decode("utf-8", "surrogateescape"), entry

    async def _free_name(self, parent: Node, name: bytes) -> str:
        """A new link name for `name`, which must not show in `parent` yet (nor as the `.npy`
        view of a dataset: `x.npy` beside dataset `x` would hide the view)."""
        text = link_name(name)
        if await self._entry(parent, name) is not None:
            raise FUSEError(errno.EEXIST)
        return text

    # -- the edits -------------------------------------------------------------------------------
    async def mkdir(self, parent: Node, name: bytes):
        text, ops = link_name(name), self.ops

        def make() -> namespace.Entry | None:   # one worker trip: the name checked, made, looked up
            # a link of that name the editor refuses itself; a view's name (D.npy) only shows here
            if text.endswith((NPY_SUFFIX, POINTS_SUFFIX)) and \
                    namespace.lookup(ops.f, ops._object(parent), parent.path, name) is not None:
                raise NamespaceError(errno.EEXIST, f"{parent.path}: {text!r} exists")
            address = self.editor.mkdir(ops._object(parent), text)
            return namespace.object_entry(ops.f, parent.path, text, address)

        entry = await self._quick(make)
        if entry is not None:
            ops.table.gone(entry.address)   # a node there is a freed object's whose news is on its way
        await self._changed(parent, name)
        if entry is None:
            raise FUSEError(errno.EIO)
        return ops._hand_out(parent, entry)

    async def rmdir(self, parent: Node, name: bytes) -> None:
        text, entry = await self._link_of(parent, name)
        if entry.kind != DIR:
            raise FUSEError(errno.ENOTDIR)
        before = self.ops.table.newest
        # an empty group; one whose link edits wait lands them first (TreeEditor.land): in a worker
        left = await self._run(self.editor.rmdir, self.ops._object(parent), text)
        await self._changed(parent, name)
        await self._forget_object(entry.address, left, before)

    async def unlink(self, parent: Node, name: bytes) -> None:
        reading = self.ops.handles.reading(parent.ino)

        def remove() -> tuple[namespace.Entry, int | None, Numbers | None, list[bytes]]:   # one worker trip
            text, entry = self._link_now(parent, name)
            if entry.kind == DIR:
                raise FUSEError(errno.EISDIR)
            shown = [t for t in namespace.other_views(name, entry) if reading and self._shows(parent, t)]
            left = self.editor.unlink(self.ops._object(parent), text)
            # the views that went with it: not a link of that name hiding one, nor a view that never was
            gone = [t for t in shown if not self._shows(parent, t)]
            return entry, left, self._numbers_left(entry.address, left), gone

        before = self.ops.table.newest
        # from a dense group the removal waits to land: an edit as small as a mkdir, no worker trip
        small = namespace.links_deferred(self.ops._object(parent))
        entry, left, numbers, gone = await (self._quick if small else self._run)(remove)
        await self._changed(parent, name, namespace.other_views(name, entry))
        if self.ops.handles.reading(parent.ino):
            self.gone_twins.update((parent.ino, twin) for twin in gone)
        if entry.address is not None:
            await self._forgotten(entry.address, left, numbers, before)

    def _shows(self, parent: Node, name: bytes) -> bool:
        """In a worker: whether `name` is an entry of `parent`."""
        ops = self.ops
        return namespace.lookup(ops.f, ops._object(parent), parent.path, name) is not None

    def unlink_gone_twin(self, parent_ino: int, name: bytes) -> bool:
        """Whether `name` is the other view of a dataset removed while its directory was being
        read (`rm -r` listed both `D` and `D.npy`, removed `D`, and now removes `D.npy`): that
        unlink succeeds, as the file is gone."""
        if (parent_ino, name) in self.gone_twins:
            self.gone_twins.discard((parent_ino, name))
            return True
        return False

    def closed_dir(self, ino: int) -> None:
        if not self.ops.handles.reading(ino):
            self.gone_twins = {key for key in self.gone_twins if key[0] != ino}

    async def rename(self, old_parent: Node, old: bytes, new_parent: Node, new: bytes, flags: int) -> None:
        if flags & ~pyfuse3.RENAME_NOREPLACE:
            raise FUSEError(errno.EINVAL)   # RENAME_EXCHANGE, RENAME_WHITEOUT: not for HDF5 links
        text, entry = await self._link_of(old_parent, old)
        link = new
        suffix = entry.suffix.encode()
        if suffix:   # mv D.npy E.npy renames the dataset (or the soft link D)
            if not new.endswith(suffix) or new == suffix:
                raise FUSEError(errno.EINVAL)
            link = new[:-len(suffix)]
        # a file of bytes renamed to x.npy (rsync's temporary file, np.save then os.replace):
        # its bytes become dataset x's array, as `cp T x.npy` would make it
        array = not suffix and entry.kind == RAW and _array_name(new) and await self._run(self._holds_bytes, old_parent, text, entry)
        if array:
            link = new[:-len(NPY_SUFFIX)]
        new_text = link_name(link)
        existing = await self._entry(new_parent, link)
        if existing is not None:
            if flags & pyfuse3.RENAME_NOREPLACE:
                raise FUSEError(errno.EEXIST)
            if existing.kind == DIR and entry.kind != DIR:
                raise FUSEError(errno.EISDIR)
            if entry.kind == DIR and existing.kind != DIR:
                raise FUSEError(errno.ENOTDIR)
        if array and existing is not None and existing.kind == RAW and existing.address not in (None, entry.address):
            target = await self._run(self._fits, old_parent, text, entry, existing.address,
                                     namespace.join(new_parent.path, new_text))
            if target is not None:   # an array that fits dataset x: x's data, as `cp T x.npy` makes it
                await self._into(old_parent, old, text, entry, target, new_parent, new, link)
                return
        if array:
            await self._to_array(old_parent, text, entry)
        if existing is not None and existing.address is not None and existing.address == entry.address \
                and existing.kind != SYMLINK:
            if array:   # mv D D.npy: D's own bytes became its array
                await self._now_a_view(entry, new_parent, new, link)
            return   # two names of one object: rename(2) does nothing
        before = self.ops.table.newest
        # replacing an object may free its storage, moving a group checks its whole subtree
        # (TreeEditor._inside): in a worker
        run = self._quick if existing is None and entry.kind != DIR else self._run
        left = await run(self.editor.rename, self.ops._object(old_parent), text, self.ops._object(new_parent), new_text)
        link_node = self.ops.table.find_link(old_parent.address, old) if entry.kind == SYMLINK else None
        # the moved object and all below it are known by their new paths (symlink targets,
        # `user.h5fs.path`, messages); a soft link's inode by its new name and text
        if entry.address is not None:
            moved = self.ops.table.moved(namespace.join(old_parent.path, text), namespace.join(new_parent.path, new_text),
                                         None if entry.kind == DIR else entry.address)
            for node in moved:
                for npy in (False, True):
                    self.ops.fact_tables.pop((node.address, npy))
        if link_node is not None:   # the kernel keeps the inode under its new name
            self.ops.table.link_moved(link_node, namespace.join(new_parent.path, link_name(new)))
        for parent, name in ((old_parent, old), (new_parent, new)):
            await self._changed(parent, name, namespace.other_views(name, entry))
        if link_node is not None:   # after `_changed`, which drops what the names had
            self.ops.table.link_renamed(link_node, new_parent.address, new)
        node = None if entry.address is None else self.ops.table.find_object(entry.address)
        if node is not None and node.numbers is not None and node.numbers.ctime_ns is not None:
            await self._refresh(entry.address)   # its change time (TreeEditor.rename)
        if array:
            await self._now_a_view(entry, new_parent, new, link)
        if existing is not None and existing.address is not None and existing.address != entry.address:
            await self._forget_object(existing.address, left, before)

    async def link(self, node: Node, new_parent: Node, new: bytes):
        if node.kind not in (RAW, NPY, DIR) or node.address is None:
            raise FUSEError(errno.EPERM)
        link = new
        if node.kind == NPY:   # ln D.npy E.npy links the dataset as E, as mv renames it
            if not new.endswith(NPY_SUFFIX.encode()) or new == NPY_SUFFIX.encode():
                raise FUSEError(errno.EINVAL)
            link = new[:-len(NPY_SUFFIX)]
            if await self._entry(new_parent, new) is not None:
                raise FUSEError(errno.EEXIST)
        text = await self._free_name(new_parent, link)
        await self._quick(self.editor.hard_link, node.address, self.ops._object(new_parent), text)
        await self._changed(new_parent, new, [link] if link != new else [])
        await self._refresh(node.address)
        return await self._lookup(new_parent, new)

    async def symlink(self, parent: Node, name: bytes, target: bytes):
        text = await self._free_name(parent, name)
        kind, where = self.link_target(parent, target)
        if kind == "external":
            await self._quick(self.editor.external_link, self.ops._object(parent), text, *where)
        else:
            await self._quick(self.editor.soft_link, self.ops._object(parent), text, where)
        await self._changed(parent, name, [name + NPY_SUFFIX.encode()])   # a soft link to a dataset: its .npy too
        return await self._lookup(parent, name)

    async def create_dataset(self, parent: Node, request: bytes) -> None:
        """`h5fs create`: an empty dataset as the request (JSON) describes it."""
        try:
            r = json.loads(request)
            name, shape, dtype = r["name"], tuple(r["shape"]), np.dtype(r["dtype"])
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidWrite(f"{parent.path}: a create request that does not parse: {exc}") from None
        raw = name.encode("utf-8", "surrogateescape")
        text = await self._free_name(parent, raw)
        maxshape = None if r.get("maxshape") is None else tuple(r["maxshape"])
        chunks = None if r.get("chunks") is None else tuple(r["chunks"])
        filters = r.get("filters") or ()
        if filters == "none":
            filters = ()
        await self._quick(self.editor.create_dataset, self.ops._object(parent), text, dtype, shape, maxshape=maxshape,
                          chunks=chunks, filters=filters, layout=r.get("layout"), fill=r.get("fill"))
        await self._changed(parent, raw, [raw + NPY_SUFFIX.encode()])
        self.ops.invalidator.entry(parent, raw)

    def link_target(self, parent: Node, target: bytes) -> tuple[str, object]:
        """("soft", HDF5 path) or ("external", (file name, HDF5 path)) for a symlink target:
        relative (kept relative, as HDF5 can: unless it climbs with `..`, which HDF5 paths
        cannot, and is then resolved against the link's group), absolute inside the mount, or
        `FILE:/path`; anything else cannot be an HDF5 link (EPERM)."""
        text = target.decode("utf-8", "surrogateescape")
        head, sep, tail = text.partition(":/")
        root = self.ops.mountpoint.rstrip("/")
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

    async def setxattr(self, node: Node, name: bytes, value: bytes) -> None:
        if name == CREATE_XATTR and node.kind == DIR:
            await self.create_dataset(node, value)
            return
        if name == ATTRIBUTE_XATTR and node.kind in (RAW, NPY, DIR):
            await self.create_attribute(node, value)
            return
        attr = self._attribute_name(node, name)
        await self._quick(self.editor.set_attribute, self.ops._object(node), attr, value)
        self._attributes_changed(node, attr)

    async def create_attribute(self, node: Node, request: bytes) -> None:
        """`h5fs attr --dtype`: attribute `name` made anew with a number, bool or complex dtype
        and the value (and shape) the request's text says."""
        try:
            r = json.loads(request)
            name, dtype, value = r["name"], np.dtype(r["dtype"]), r["value"].encode()
            if not isinstance(name, str):
                raise TypeError("the name is not a string")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidWrite(f"{node.path}: an attribute request that does not parse: {exc}") from None
        await self._quick(self.editor.create_attribute, self.ops._object(node), name, dtype, value)
        self._attributes_changed(node, name)

    async def removexattr(self, node: Node, name: bytes) -> None:
        attr = self._attribute_name(node, name)
        if attr not in await self.ops._attributes(node):
            raise FUSEError(pyfuse3.ENOATTR)
        await self._quick(self.editor.remove_attribute, self.ops._object(node), attr)
        self._attributes_changed(node, attr)

    async def touch(self, node: Node, mtime_ns: int) -> None:
        await self._quick(self.editor.touch, self.ops._object(node), mtime_ns)
        await self._refresh(node.address)

    def _attribute_name(self, node: Node, name: bytes) -> str:
        if node.kind == SYMLINK:
            raise FUSEError(errno.EPERM)   # HDF5 links carry no attributes
        attr = views.attribute_name_for_xattr(name)
        if attr is None:
            # user.h5fs.* facts are read-only; other namespaces are not HDF5 attributes
            raise FUSEError(errno.EPERM if views.fact_for_xattr(name) is not None else errno.ENOTSUP)
        return attr

    # -- telling what changed -----------------------------------------------------------------
    async def _run(self, fn, *args, **kwargs):
        """An edit that may free, copy or walk storage: in a worker."""
        try:
            return await offload.run_sync(functools.partial(fn, *args, **kwargs))
        finally:
            self._edited()

    async def _quick(self, fn, *args, **kwargs):
        """A small edit: on the trio thread while no commit is under way, else in a worker."""
        try:
            return await offload.run_unless_busy(self.editor.wb.commit_lock, functools.partial(fn, *args, **kwargs))
        finally:
            self._edited()

    def _edited(self) -> None:
        """The group commit waits `flush_delay` s after the last edit, as after the last write
        (fuse/writes.py `_flusher`): a storm of edits is not settled every poll."""
        self.ops.writes.last_write = time.monotonic()

    async def _changed(self, parent: Node, name: bytes, twins: list[bytes] = ()) -> None:
        """`name` in `parent` changed through the kernel (which updates its own dentry): the
        listing goes, the kernel forgets the dataset's other views `twins` it may hold, and
        the group's times are read again where it keeps them."""
        self.ops.listings.pop(parent.address)
        for address in self.ops.soft_listings:   # a soft link's target may have come or gone
            self.ops.listings.pop(address)
        self.ops.soft_listings.clear()
        self.ops.table.drop_link(parent.address, name)
        for twin in twins:   # a soft link's `.npy` symlink goes with it
            self.ops.table.drop_link(parent.address, twin)
            self.ops.invalidator.entry(parent, twin)
        if parent.numbers is not None and parent.numbers.mtime_ns is not None:
            # the edit set them (TreeEditor): stat shows them at once (the kernel asks again: it
            # drops a directory's attributes when an entry changes)
            try:
                parent.numbers = await self.ops._quickly(namespace.numbers, self.ops._object(parent))
            except Exception as exc:  # noqa: BLE001 - the edit is committed: logged, the old numbers kept, no EIO
                self.ops._mark_broken(parent, exc)

    async def _lookup(self, parent: Node, name: bytes):
        return await self.ops.lookup(parent.ino, name)

    async def _refresh(self, address: int) -> None:
        """An object's stat numbers (link count, times) changed: every inode of it asks again."""
        ops = self.ops
        await self._show(address, await ops._quickly(lambda: namespace.numbers(ops._by_address(address))))

    async def _show(self, address: int, numbers: Numbers) -> None:
        ops = self.ops
        for node in (ops.table.find_object(address), ops.table.find_view(address)):
            if node is not None:
                node.numbers = numbers
                await ops.invalidator.attributes(node)

    def _numbers_left(self, address: int | None, left: int | None) -> Numbers | None:
        """In a worker: the stat numbers of an object a link to went (`left`: the hard links
        the editor left it), or None when it went with it: freed with its last link, its
        header's bytes not to be read again (they may still decode, as the object it was)."""
        if address is None or not left:
            return None
        try:
            return namespace.numbers(self.ops._by_address(address))
        except Exception:  # noqa: BLE001 - a header that cannot be read: nothing to show
            return None

    async def _forget_object(self, address: int, left: int | None, before: int) -> None:
        """A link to the object went (`left`: the hard links it has now): its link count
        changed, or it is gone (`before`: the table's newest node when the edit began)."""
        numbers = await self.ops._quickly(self._numbers_left, address, left) if left else None
        await self._forgotten(address, left, numbers, before)

    async def _forgotten(self, address: int, left: int | None, numbers: Numbers | None, before: int) -> None:
        """`_forget_object` with what `_numbers_left` found (in the caller's worker trip)."""
        ops = self.ops
        ops.attribute_tables.pop(address)
        for npy in (False, True):
            ops.fact_tables.pop((address, npy))
        if numbers is not None:
            await self._show(address, numbers)
        elif left == 0 and address in self.editor.orphans:   # open still: no link left, as fstat says
            node = ops.table.find_object(address) or ops.table.find_view(address)
            if node is not None and node.numbers is not None:
                await self._show(address, replace(node.numbers, nlink=0))
        elif left == 0:   # freed: an object made in its space gets inodes of its own
            ops.table.gone(address, before)

    async def closed(self, address: int | None) -> None:
        """A handle of the object at `address` was closed: freed if its links all went and
        nothing else holds it open."""
        if address in self.editor.orphans and not self.ops.handles.holds(address):
            before = self.ops.table.newest
            if await self._run(self.editor.free_orphan, address):
                self.ops.table.gone(address, before)

    def free_orphans(self) -> None:
        """At unmount (nothing is open any more): free every object whose links all went."""
        for address in list(self.editor.orphans):
            self.editor.free_orphan(address)

    def _attributes_changed(self, node: Node, attr: str) -> None:
        self.ops.attribute_tables.pop(node.address)
        self.ops.xattr_values.pop((node.address, attr))


def _array_name(name: bytes) -> bool:
    """A file name that names an array's `.npy` view (`x.npy`, not a sparse dataset's points)."""
    return name.endswith(NPY_SUFFIX.encode()) and not name.endswith(POINTS_SUFFIX.encode()) \
        and name != NPY_SUFFIX.encode()
