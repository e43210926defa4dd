"""How the mount's edits run (each one transaction of the engine's tree editor,
h5fs.model.tree_edit), what a name stands for in them, and what they tell afterwards; shared by
the namespace edits (fuse/namespace_edits.py), the xattr edits (fuse/xattr_edits.py) and the
arrays arriving (fuse/npy_arrivals.py).

A small edit (a group, a link, an attribute, a time) runs on the trio thread while no commit is
under way (`quick`: a worker hop costs more than the edit, whose Python holds the GIL either
way); one that may free or copy storage, in a worker (`run`). After an edit the adapter's caches
of what changed are dropped (listings, attribute tables, facts, stat numbers) and the kernel is
told of changes it did not make itself (the link count of an object with other names,
attributes of other inodes of the same object).
"""

from __future__ import annotations

import errno
import functools
import time
from dataclasses import replace

import pyfuse3
from pyfuse3 import FUSEError

from ..model import namespace
from ..model.namespace import Numbers
from . import lookups, offload
from .inodes import Node
from .mount_state import MountState
from .names import check_length, link_name


# -- running an edit -------------------------------------------------------------------------------
async def run(mount: MountState, fn, *args, **kwargs):
    """An edit that may free, copy or walk storage: in a worker."""
    try:
        return await offload.run_sync(functools.partial(fn, *args, **kwargs))
    finally:
        _edited(mount)


async def quick(mount: MountState, fn, *args, **kwargs):
    """A small edit: on the trio thread while no commit is under way, else in a worker (an
    engine whose edits are requests to a service: always)."""
    if mount.networked:
        return await run(mount, fn, *args, **kwargs)
    try:
        return await offload.run_unless_busy(mount.writes.wb.commit_lock, functools.partial(fn, *args, **kwargs))
    finally:
        _edited(mount)


def _edited(mount: MountState) -> None:
    """The group commit waits `flush_delay` s after the last edit, as after the last write
    (fuse/writes.py `_flusher`): a storm of edits is not settled every poll."""
    mount.writes.last_write = time.monotonic()


# -- what a name stands for -------------------------------------------------------------------------
async def entry_of(mount: MountState, parent: Node, name: bytes) -> namespace.Entry | None:
    return await mount.quickly(namespace.lookup, mount.f, mount.object(parent), parent.path, name)


async def link_of(mount: MountState, parent: Node, name: bytes) -> tuple[str, namespace.Entry]:
    """The link name behind a file name of `parent` (`D.npy` is the link `D`), and its entry."""
    return await mount.quickly(link_now, mount, parent, name)


def link_now(mount: MountState, parent: Node, name: bytes) -> tuple[str, namespace.Entry]:
    """`link_of` in a worker thread."""
    check_length(name)
    entry = namespace.lookup(mount.f, mount.object(parent), parent.path, name)
    if entry is None:
        raise FUSEError(errno.ENOENT)
    return namespace.view_base(name, entry).decode("utf-8", "surrogateescape"), entry


async def free_name(mount: MountState, parent: Node, name: bytes) -> str:
    """A new link name for `name`, which must not show in `parent` yet (nor as the `.npy`
    view of a dataset: `x.npy` beside dataset `x` would hide the view)."""
    text = link_name(name)
    if await entry_of(mount, parent, name) is not None:
        raise FUSEError(errno.EEXIST)
    return text


async def looked_up(mount: MountState, parent: Node, name: bytes) -> pyfuse3.EntryAttributes:
    """The new entry `name` of `parent`, handed to the kernel as a lookup hands it."""
    return await lookups.lookup(mount, parent.ino, name)


# -- telling what changed ---------------------------------------------------------------------------
async def changed(mount: MountState, parent: Node, name: bytes, twins: list[bytes] = ()) -> None:
    """`name` in `parent` changed through the kernel (which updates its own dentry): the
    listing goes, the kernel forgets the dataset's other views `twins` it may hold, and
    the group's times are read again where it keeps them."""
    mount.listings.pop(parent.address)
    for address in mount.soft_listings:   # a soft link's target may have come or gone
        mount.listings.pop(address)
    mount.soft_listings.clear()
    mount.table.drop_link(parent.address, name)
    for twin in twins:   # a soft link's `.npy` symlink goes with it
        mount.table.drop_link(parent.address, twin)
        mount.invalidator.entry(parent, twin)
    if parent.numbers is not None and parent.numbers.mtime_ns is not None:
        # the edit set them (TreeEditor): stat shows them at once (the kernel asks again: it
        # drops a directory's attributes when an entry changes)
        try:
            parent.numbers = await mount.quickly(namespace.numbers, mount.object(parent))
        except Exception as exc:  # noqa: BLE001 - the edit is committed: logged, the old numbers kept, no EIO
            mount.mark_broken(parent, exc)


async def refresh(mount: MountState, address: int) -> None:
    """An object's stat numbers (link count, times) changed: every inode of it asks again."""
    await show(mount, address, await mount.quickly(lambda: namespace.numbers(mount.by_address(address))))


async def retimed(mount: MountState, address: int) -> None:
    """Only an object's times changed (`touch`): they are read again, its other stat numbers
    (sizes, each a decode of its messages) kept."""
    nodes = (mount.table.find_object(address), mount.table.find_view(address))
    known = next((node.numbers for node in nodes if node is not None and node.numbers is not None), None)
    if known is None:
        await refresh(mount, address)
        return
    mtime_ns, ctime_ns = await mount.quickly(lambda: namespace.times_ns(mount.by_address(address)))
    await show(mount, address, replace(known, mtime_ns=mtime_ns, ctime_ns=ctime_ns))


async def show(mount: MountState, address: int, numbers: Numbers) -> None:
    for node in (mount.table.find_object(address), mount.table.find_view(address)):
        if node is not None:
            node.numbers = numbers
            await mount.invalidator.attributes(node)


def numbers_left(mount: MountState, address: int | None, left: int | None) -> Numbers | None:
    """In a worker: the stat numbers of an object a link to went (`left`: the hard links
    the editor left it), or None when it went with it: freed with its last link, its
    header's bytes not to be read again (they may still decode, as the object it was)."""
    if address is None or not left:
        return None
    try:
        return namespace.numbers(mount.by_address(address))
    except Exception:  # noqa: BLE001 - a header that cannot be read: nothing to show
        return None


async def forget_object(mount: MountState, address: int, left: int | None, before: int) -> None:
    """A link to the object went (`left`: the hard links it has now): its link count
    changed, or it is gone (`before`: the table's newest node when the edit began)."""
    numbers = await mount.quickly(numbers_left, mount, address, left) if left else None
    await forgotten(mount, address, left, numbers, before)


async def forgotten(mount: MountState, address: int, left: int | None, numbers: Numbers | None,
                    before: int) -> None:
    """`forget_object` with what `numbers_left` found (in the caller's worker trip)."""
    mount.attribute_tables.pop(address)
    for npy in (False, True):
        mount.fact_tables.pop((address, npy))
    if numbers is not None:
        await show(mount, address, numbers)
    elif left == 0 and address in mount.writes.editor.orphans:   # open still: no link left, as fstat says
        node = mount.table.find_object(address) or mount.table.find_view(address)
        if node is not None and node.numbers is not None:
            await show(mount, address, replace(node.numbers, nlink=0))
    elif left == 0:   # freed: an object made in its space gets inodes of its own
        mount.table.gone(address, before)


async def closed(mount: MountState, address: int | None) -> None:
    """A handle of the object at `address` was closed: freed if its links all went and
    nothing else holds it open."""
    editor = mount.writes.editor
    if address in editor.orphans and not mount.handles.holds(address):
        before = mount.table.newest
        if await run(mount, editor.free_orphan, address):
            mount.table.gone(address, before)


def free_orphans(mount: MountState) -> None:
    """At unmount (nothing is open any more): free every object whose links all went."""
    editor = mount.writes.editor
    for address in list(editor.orphans):
        editor.free_orphan(address)

