"""Namespace edits of a writable file: groups made and removed, links added, removed and
renamed, attributes set and removed. Each edit is one transaction (crash-safe as every write:
storage/transaction.py), committed under the writeback's commit lock, after which the file's
caches of every object it touched are dropped.

Reference counts follow the hard links (libhdf5's H5O_link): a new hard link adds one to its
object's count, a removed one takes one away, and an object left with none is freed with all its
storage (storage/object_delete.py), its writes not yet in the file forgotten, after it left
the dimension scales and datasets it was attached to (model/dimension_scales.py). A group is removed
only when empty; a group never moves into its own subtree.

Times are kept as a file system keeps them, where an object's header has room for them
(version 2 times, or a modification time message; none is added): an edit of a group's links
sets its modification and change times, a hard link added or removed (and a rename) the change
time of its object. New objects keep times when their group's header does.
"""

from __future__ import annotations

import errno
import functools
import logging
from collections import deque
from contextlib import contextmanager, nullcontext
from typing import Callable, Iterator

from ..errors import CannotWrite, H5fsError
from ..format import object_header as oh
from ..format.codec import Reader, Writer
from ..format.messages import link as link_msg
from ..format.messages import attribute_info as attribute_info_msg
from ..format.messages import shared as shared_msg
from ..format.messages import symbol_table as stab_msg
from ..format.messages.link import Link
from ..format.messages.types import ATTRIBUTE, ATTRIBUTE_INFO, SYMBOL_TABLE
from ..format.object_header import RawMessage
from ..storage import symbol_table
from ..storage.byte_source import WouldBlock, running_inline
from ..storage.object_header.create import create_header
from ..storage.object_header.edit import HeaderEdit, refcount_of
from ..storage.links_write import GroupLinks, land_links, take_unrefs
from ..storage.object_delete import free_object, free_storage, shared_headers
from ..storage.sohm_table.writer import SharedMessages
from ..storage.object_header.reader import read as read_header
from ..storage.transaction import Transaction
from . import attributes_write, fresh_groups, header_times, quick_unlink
from . import messages as M
from .dataset_create import NewDataset, dataset_messages
from .dimension_scales import detach as detach_scales
from .libver import libver_for_superblock
from .namespace import links_from_header
from .objects import H5Object
from .replace_like import STORAGE_MESSAGES, messages_like


DATASET_HEADER_HINT = 256   # libhdf5's least object header for a new dataset (H5D__update_oh_info)
# what describes a dataset's data (a replacement of the data replaces these messages)
DATA_MESSAGES = frozenset({M.DATASPACE, M.DATATYPE, M.FILL_OLD, M.FILL, M.EXTERNAL, M.LAYOUT, M.FILTERS})


log = logging.getLogger("h5fs")

LAND_LIMIT = 20_000   # deferred link edits (storage/pending_links.py) held before they land


class LandFirst(Exception):
    """An edit would free a group whose link edits are deferred: they land first (`_landing_first`)."""


def _landing_first(edit):
    """Run the edit again once the deferred link edits landed, when it met a group holding some."""
    @functools.wraps(edit)
    def run(self, *args, **kwargs):
        try:
            return edit(self, *args, **kwargs)
        except LandFirst:
            self.land()
        try:
            return edit(self, *args, **kwargs)
        except LandFirst as exc:   # the edit's own deferred edits meet the group it frees
            raise CannotWrite(f"{exc}: not changed") from None
    return run


class NamespaceError(H5fsError):
    """An edit the tree refuses; `errno` says why (ENOTEMPTY, EEXIST, ENOENT, EINVAL...)."""

    def __init__(self, errno_value: int, text: str):
        super().__init__(text)
        self.errno = errno_value


class TreeEditor:
    def __init__(self, f, writeback, in_use: Callable[[int], bool] = lambda address: False):
        """`writeback`: the file's (None: edits commit on their own, as when an open lands what a
        crash left deferred)."""
        self.f, self.wb = f, writeback
        f.editor = self   # lands deferred link edits for the file (H5File.land_links)
        self.shared: SharedMessages | None = None   # the edit under way's shared-message uses
        # an object whose last link goes while it is open (`in_use`, asked from the editing
        # thread) keeps its header and storage until `free_orphan`, as a file system keeps an
        # unlinked file until its last close: until then its handles read and write it, and no
        # new object can take its space (a crash leaks it: the next mount's walk reclaims it)
        self.in_use = in_use
        self.orphans: dict[int, str] = {}   # address -> path it had
        self.groups: set[int] = set()   # the edit under way's groups whose links change (`_links`)

    @contextmanager
    def _edit(self, keep_fresh: bool = False) -> Iterator[tuple[Transaction, set[int]]]:
        """A transaction for one edit; `touched` collects the object headers it changes. New
        groups waiting to land (model/fresh_groups.py), and removals from groups keeping their
        links in their headers (model/quick_unlink.py), land first, unless `keep_fresh` (an edit
        that reads none of them): a transaction reads headers as the file holds them."""
        pending = self.f.store.pending
        if (pending.fresh or pending.in_headers) and not keep_fresh:
            self.land()   # nothing builds on a header the file does not hold yet
        with self.wb.commit_lock if self.wb is not None else nullcontext(), self.f.store.transaction() as txn:
            touched = txn.owners
            self.groups = set()
            self.shared = SharedMessages(txn, self.f)
            try:
                yield txn, touched
            except FileExistsError as exc:   # a link's name taken: found by the insert's own search
                raise NamespaceError(errno.EEXIST, str(exc)) from None
            self.shared.close()
            self.f.store.refuse_damaged(touched | self.groups)
            if self.wb is not None:
                self.wb.commit(txn, sorted(touched))
            else:
                txn.commit()
                self.f.forget(txn)
            self.f.superblock = self.f.store.superblock
            self.f.root_entry = self.f.superblock.root_entry
        self._land_at_limit()

    def _land_at_limit(self) -> None:
        if len(self.f.store.pending) > LAND_LIMIT:   # memory, and what each group commit logs again
            if self.wb is not None:
                self.wb.flush_soon()   # lands them, off the thread that edits
            else:
                self.land()

    def _links(self, txn: Transaction, group: H5Object, touched: set[int]) -> GroupLinks:
        """The links of `group`, which the edit changes: its times say so (GroupLinks counts the
        group among those the edit touched when its header or storage changes: a link deferred
        for its dense storage leaves both alone)."""
        self.groups.add(group.address)
        links = GroupLinks(txn, group.address, group.path)
        now = header_times.now()
        header_times.set_times(links.edit, txn.sizes, mtime=now, ctime=now)
        return links

    # -- groups ------------------------------------------------------------------------------
    def mkdir(self, parent: H5Object, name: str) -> int:
        """A new empty group `name` in `parent`, stored as `parent` stores its links: without a
        transaction when it can wait to land (model/fresh_groups.py)."""
        if self.wb is not None:
            with self.wb.commit_lock:
                try:
                    address = fresh_groups.mkdir(self.f, parent, name)
                except FileExistsError as exc:
                    raise NamespaceError(errno.EEXIST, str(exc)) from None
            if address is not None:
                self._land_at_limit()
                return address
        # new groups may wait while this one is made, unless it is made in one of them or next
        # to waiting links that only their landing puts in the header (fresh_groups.mkdir)
        pending = self.f.store.pending
        keep = parent.address not in pending.fresh and not (pending.holds(parent.address) and links_from_header(parent))
        with self._edit(keep_fresh=keep) as (txn, touched):
            links = self._links(txn, parent, touched)
            address = self._new_group(txn, links)
            touched.add(address)   # a reader may hold what the reused space held before
            links.insert(Link(name, link_msg.HARD, address=address))
        return address

    def _new_group(self, txn: Transaction, parent: GroupLinks) -> int:
        sizes = txn.sizes
        header = parent.edit.header
        if parent.symbol_table is not None:   # old style: a symbol table (H5G__stab_create)
            stab = symbol_table.create(txn)
            w = Writer(sizes)
            stab_msg.encode(w, stab)
            return create_header(txn, sizes, 1, [(SYMBOL_TABLE, w.getvalue(), 0)],
                                 min_size=4 + 2 * sizes.offset)
        version, messages, options = fresh_groups.group_messages(header, parent.info, sizes)
        return create_header(txn, sizes, version, messages, **options)

    def create_dataset(self, parent: H5Object, name: str, dtype, shape: tuple[int, ...], **storage) -> int:
        """A new dataset `name` in `parent`, described as libhdf5 would write it for this file's
        format (model/dataset_create.py; `storage`: its keyword arguments); nothing allocated
        until data is written. It keeps times when `parent`'s header does, as a new group does."""
        new = self._describe(dtype, shape, {"track_times": bool(parent.header.flags & oh.HDR_TIMES), **storage})
        with self._edit() as (txn, touched):
            links = self._links(txn, parent, touched)
            address = _dataset_header(txn, new, new.header_version)
            touched.add(address)
            links.insert(Link(name, link_msg.HARD, address=address))
        return address

    def _describe(self, dtype, shape: tuple[int, ...], storage: dict) -> NewDataset:
        libver = libver_for_superblock(self.f.superblock.version)
        return dataset_messages(dtype, shape, libver=libver, sizes=self.f.sizes, **storage)

    # -- data replaced (cp y.npy D.npy) --------------------------------------------------------
    def create_unlinked_dataset(self, like: H5Object, dtype, shape: tuple[int, ...], **storage) -> int:
        """A dataset no link names, to receive the data `replace_data` later gives `like`; its
        header has `like`'s version, so that its messages move there as they are stored. Until
        then nothing reaches it: after a crash its space is free (the next mount's walk finds it)."""
        new = self._describe(dtype, shape, storage)
        with self._edit() as (txn, touched):
            address = _dataset_header(txn, new, like.header.version)
            touched.add(address)
        return address

    def create_unlinked_like(self, ds: H5Object, shape: tuple[int, ...]) -> int:
        """As `create_unlinked_dataset`, with `ds`'s own data messages but extent `shape` and
        no storage (model/replace_like.py): `replace_data(..., keep_storage=True)` gives `ds`
        its data keeping its storage."""
        with self._edit() as (txn, touched):
            address = create_header(txn, txn.sizes, ds.header.version, messages_like(ds, shape, txn.sizes),
                                    min_size=DATASET_HEADER_HINT)
            touched.add(address)
        return address

    def drop_unlinked(self, address: int, path: str) -> None:
        """Free a dataset `create_unlinked_dataset` made, its data not wanted."""
        with self._edit() as (txn, touched):
            touched.add(address)
            self.wb.discard(address)
            free_object(txn, self.f, address, path)

    def replace_data(self, ds: H5Object, source: int, keep_storage: bool = False,
                     unlink: tuple[H5Object, str] | None = None) -> int | None:
        """Give dataset `ds` the data of the unlinked dataset at `source` in one transaction (the
        writes into `source` in the file first): `ds`'s data messages (dataspace, datatype, fill
        value, filters, layout, external files) become `source`'s, only its dataspace and layout
        when `keep_storage` (`source` made by `create_unlinked_like`), and its old storage and
        `source`'s header are freed. Its address stays, and with it its hard links, attributes
        and other messages. `unlink`: a link (group, name) removed in the same transaction
        (`mv T D.npy`: T goes as D gets its bytes, as rename(2) is atomic); returns what
        `unlink` would."""
        types = STORAGE_MESSAGES if keep_storage else DATA_MESSAGES
        left = None
        self.wb.flush()
        with self._edit() as (txn, touched):
            if unlink is not None:
                left = self._remove_link(txn, touched, *unlink)
            touched.update((ds.address, source))
            free_storage(txn, self.f, ds.address, ds.path)
            edit = HeaderEdit(txn, read_header(txn.reader, ds.address, ds.path))
            while (raw := _data_message(edit.header, types)) is not None:
                if raw.shared:
                    self._unshare(txn, touched, raw, ds.path)
                self.shared.release(raw, ds.address, ds.path)
                edit.remove(raw)
            new = read_header(txn.reader, source, f"{ds.path} (its new data)")
            for raw in new.messages:
                if raw.type in types:
                    edit.add(raw.type, raw.data, raw.flags)
            for block in new.blocks:
                txn.free(block.address, block.length)
            self.wb.discard(ds.address)   # writes into the old data since the flush go with it
        return left

    def _unshare(self, txn: Transaction, touched: set[int], raw, path: str) -> None:
        """A message shared through another header goes: one use fewer of that header (a
        committed datatype). Shared-message table uses are `self.shared`'s."""
        ref = shared_msg.decode(Reader(raw.data, 0, txn.sizes, f"{path}: shared message"))
        if ref.kind == shared_msg.IN_OBJECT_HEADER:
            self._unref(txn, touched, ref.address, f"{path} (its committed datatype)")

    @_landing_first
    def rmdir(self, parent: H5Object, name: str) -> int:
        """Remove the empty group `name`; the hard links left to it (0: it was freed). Without
        a transaction when it can wait to land, as `unlink`."""
        if self.wb is not None:
            with self.wb.commit_lock:
                done, left = quick_unlink.unlink(self, parent, name, group=True)
            if done:
                self._land_at_limit()
                return left
        with self._edit() as (txn, touched):
            links = self._links(txn, parent, touched)
            link = _existing(links, name)
            if link.link_type != link_msg.HARD:
                raise NamespaceError(errno.ENOTDIR, f"{parent.path}/{name}: not a group")
            child = GroupLinks(txn, link.address, f"{parent.path}/{name}")
            if child.all():
                raise NamespaceError(errno.ENOTEMPTY, f"{parent.path}/{name}: not empty")
            links.remove(name)
            left = self._drop(txn, touched, links, link.address, f"{parent.path}/{name}")
        return left

    # -- links ---------------------------------------------------------------------------------
    @_landing_first
    def unlink(self, parent: H5Object, name: str) -> int | None:
        """Remove the link `name`; the hard links left to its object (0: it was freed), None
        for a soft or external link. Without a transaction when it can wait to land
        (model/quick_unlink.py)."""
        if self.wb is not None:
            with self.wb.commit_lock:
                done, left = quick_unlink.unlink(self, parent, name)
            if done:
                self._land_at_limit()
                return left
        with self._edit() as (txn, touched):
            return self._remove_link(txn, touched, parent, name)

    def _remove_link(self, txn: Transaction, touched: set[int], parent: H5Object, name: str) -> int | None:
        """`unlink` within the transaction `txn`."""
        links = self._links(txn, parent, touched)
        link = links.remove(name)
        if link.link_type == link_msg.HARD:
            return self._drop(txn, touched, links, link.address, f"{parent.path}/{name}")
        return None

    def _drop(self, txn: Transaction, touched: set[int], links: GroupLinks, address: int, path: str) -> int:
        """One hard link fewer to the object whose link `links` just removed: counted down now,
        or once the removal lands when it was deferred (storage/pending_links.py); the links left."""
        if not links.deferred_removal:
            return self._unref(txn, touched, address, path)
        self.f.store.refuse_damaged((address,))   # as `_unref` would (it is counted down later)
        # its header stays as it is until then: what the file's cache holds of it stays (its
        # link count as shown counts the deferred unrefs: H5Object.nlink)
        txn.defer_unref(address, path)
        return self._visible(txn, address, path, refcount_of(read_header(txn.reader, address, path), txn.sizes))

    def land(self, redo: bool = False) -> None:
        """Every deferred link edit into its group's storage in one commit, then the objects
        whose links the removals took counted down in another (freeing walks an object as
        committed: its links must have gone first)."""
        store = self.f.store
        if store.pending and running_inline():   # an edit on the trio thread: it goes to a worker
            raise WouldBlock(lambda: None)
        with self.wb.commit_lock if self.wb is not None else nullcontext():   # no edit between the two
            for group in quick_unlink.doomed(self, store.pending):
                store.pending.drop_removals(group)   # its storage goes whole (`_free`)
            if store.pending.groups() or store.pending.fresh:
                with self._edit(keep_fresh=True) as (txn, touched):
                    txn.on_commit(lambda: self.f.forget(txn))   # what was read of the groups, before their edits go
                    fresh_groups.land(txn, self.f, self.shared, touched)   # before the links naming them
                    land_links(txn, redo)
            if store.pending.unrefs:
                with self._edit(keep_fresh=True) as (txn, touched):
                    for address, path in take_unrefs(txn):
                        if address in store.damaged:   # what it holds may be another's: kept (a leak)
                            log.error("%s: not freed: the file is damaged there (%s)", path, store.damaged[address])
                            continue
                        self._unref(txn, touched, address, path)

    def hard_link(self, address: int, parent: H5Object, name: str) -> None:
        with self._edit() as (txn, touched):
            self.f.store.relinks += 1
            links = self._links(txn, parent, touched)
            links.insert(Link(name, link_msg.HARD, address=address))
            edit = HeaderEdit(txn, read_header(txn.reader, address, f"{parent.path}/{name}"))
            edit.refcount = edit.refcount + 1
            header_times.set_times(edit, txn.sizes, ctime=header_times.now())
            touched.add(address)

    def soft_link(self, parent: H5Object, name: str, target: str) -> None:
        self._add_link(parent, Link(name, link_msg.SOFT, target=target))

    def external_link(self, parent: H5Object, name: str, filename: str, path: str) -> None:
        self._add_link(parent, Link(name, link_msg.EXTERNAL, target=path, filename=filename))

    def _add_link(self, parent: H5Object, link: Link) -> None:
        if link.link_type == link_msg.EXTERNAL and self.f.store.pending.holds(parent.address):
            self.land()   # a symbol table turns new-style for it: with its deferred edits in
        with self._edit() as (txn, touched):
            links = self._links(txn, parent, touched)
            links.insert(link)

    @_landing_first
    def rename(self, src: H5Object, name: str, dst: H5Object, new: str) -> int | None:
        """Move the link `name` of `src` to `new` in `dst`, replacing a link of that name as
        rename(2) does (a group only by an empty group); the hard links left to the object a
        replaced hard link pointed to (0: it was freed), else None."""
        left = None
        with self._edit() as (txn, touched):
            self.f.store.relinks += 1
            source = self._links(txn, src, touched)
            link = _existing(source, name)
            if link.link_type == link_msg.HARD and self._inside(txn, link.address, dst.address):
                raise NamespaceError(errno.EINVAL, f"{src.path}/{name}: cannot move a group into itself")
            source.remove(name)
            target = source if dst.address == src.address else self._links(txn, dst, touched)
            old = target.lookup(new)
            if old is not None:
                replaced = GroupLinks(txn, old.address, new) if old.link_type == link_msg.HARD else None
                if replaced is not None and replaced.is_group() and replaced.all():
                    raise NamespaceError(errno.ENOTEMPTY, f"{dst.path}/{new}: not empty")
                target.remove(new)
                if old.link_type == link_msg.HARD:
                    left = self._drop(txn, touched, target, old.address, f"{dst.path}/{new}")
            target.insert(Link(new, link.link_type, address=link.address, target=link.target,
                               filename=link.filename))
            if link.link_type == link_msg.HARD and source.deferred_removal and not target.deferred_insert:
                # the file holds both links until the removal lands: it counts both (as `ln`,
                # then `rm` once the removal lands)
                edit = HeaderEdit(txn, read_header(txn.reader, link.address, f"{dst.path}/{new}"))
                edit.refcount = edit.refcount + 1
                touched.add(link.address)
                txn.defer_unref(link.address, f"{dst.path}/{new}")
            if link.link_type == link_msg.HARD and (old is None or old.address != link.address):
                self._renamed(txn, touched, link.address, f"{dst.path}/{new}")
        return left

    def _renamed(self, txn: Transaction, touched: set[int], address: int, path: str) -> None:
        """The change time of a renamed object, where its header keeps one (as file systems
        set a renamed inode's ctime); others are not rewritten."""
        header = read_header(txn.reader, address, path)
        if header.times is not None:
            touched.add(address)
            header_times.set_times(HeaderEdit(txn, header), txn.sizes, ctime=header_times.now())

    def _inside(self, txn: Transaction, moved: int, group: int) -> bool:
        """Whether `group` lies in the subtree of `moved` (or is it)."""
        todo, seen = deque([moved]), {moved}
        while todo:
            address = todo.popleft()
            if address == group:
                return True
            links = GroupLinks(txn, address, f"object at {address}")
            if not links.is_group():
                continue
            for link in links.all():
                if link.link_type == link_msg.HARD and link.address not in seen:
                    seen.add(link.address)
                    todo.append(link.address)
        return False

    def _unref(self, txn: Transaction, touched: set[int], address: int, path: str) -> int:
        """One hard link fewer to the object at `address`, freed at none; the links left, less
        those whose removal waits to land (an object left with none of those is gone from the
        tree: an orphan if open)."""
        edit = HeaderEdit(txn, read_header(txn.reader, address, path))
        count = edit.refcount - 1
        touched.add(address)
        if count > 0:
            edit.refcount = count
            header_times.set_times(edit, txn.sizes, ctime=header_times.now())
            return self._visible(txn, address, path, count)
        return self._free(txn, touched, edit, address, path)

    def _visible(self, txn: Transaction, address: int, path: str, count: int) -> int:
        """`count` links of the object at `address`, less those whose removal waits."""
        left = max(0, count - txn.deferred_unrefs(address))
        if left == 0 and self.in_use(address):   # open still, no link left (as fstat says): freed after
            txn.on_commit(lambda: self.orphans.__setitem__(address, path))
        return left

    def _free(self, txn: Transaction, touched: set[int], edit: HeaderEdit, address: int, path: str) -> int:
        """The object's last link went: freed, or kept while it is open (an orphan)."""
        if self.in_use(address):   # its header keeps counting the link that went
            self.orphans[address] = path
            return 0
        if txn.holds_deferred(address):   # freed as committed: its deferred link edits land first
            raise LandFirst(f"{path}: freed with link edits waiting")
        txn.on_commit(lambda: self.orphans.pop(address, None))
        for shared in shared_headers(edit.header, txn.sizes):   # committed datatypes it uses
            self._unref(txn, touched, shared, f"{path} (its committed datatype)")
        for raw in edit.header.messages:   # and what it uses of the shared message table
            self.shared.release(raw, address, path)
        info = _attribute_info(edit.header, txn.sizes, path)
        if info is not None and info.heap_address is not None:
            self.shared.release_dense_attributes(info.heap_address, info.name_index_address, path)
        if info is not None or edit.header.first(ATTRIBUTE) is not None:   # (attachments are attributes)
            touched.update(detach_scales(txn, self.f, address, path, self.shared))
        if self.wb is not None:
            self.wb.discard(address)
        free_object(txn, self.f, address, path)
        return 0

    @_landing_first
    def free_orphan(self, address: int) -> bool:
        """Free an object whose links all went while it was open, now that it is closed;
        whether it was one."""
        path = self.orphans.get(address)
        if path is None or self.in_use(address) or self.f.store.pending.unrefs_of(address):
            return False   # (a countdown waiting for its removal to land frees it then)
        with self._edit() as (txn, touched):
            self._unref(txn, touched, address, path)
        self.orphans.pop(address, None)
        return True

    # -- attributes and times ----------------------------------------------------------------------
    def set_attribute(self, obj: H5Object, name: str, text: bytes) -> None:
        if self.wb is not None:
            with self.wb.commit_lock:
                if fresh_groups.set_attribute(self.f, obj, name, text):
                    return
        with self._edit() as (txn, touched):
            touched.add(obj.address)
            attributes_write.set_attribute(txn, self.f, obj, name, text, self.shared)

    def create_attribute(self, obj: H5Object, name: str, dtype, text: bytes) -> None:
        with self._edit() as (txn, touched):
            touched.add(obj.address)
            attributes_write.create_attribute(txn, self.f, obj, name, dtype, text, self.shared)

    def remove_attribute(self, obj: H5Object, name: str) -> None:
        if self.wb is not None:
            with self.wb.commit_lock:
                if fresh_groups.remove_attribute(self.f, obj, name):
                    return
        with self._edit() as (txn, touched):
            touched.add(obj.address)
            attributes_write.remove_attribute(txn, self.f, obj, name, self.shared)

    def touch(self, obj: H5Object, mtime_ns: int | None = None) -> None:
        """The object's modification time (its change time: now); an object keeping none gets a
        message when its header is new-style (version 2)."""
        now = header_times.now()
        seconds = now if mtime_ns is None else mtime_ns // 1_000_000_000
        with self._edit() as (txn, touched):
            touched.add(obj.address)
            edit = HeaderEdit(txn, read_header(txn.reader, obj.address, obj.path))
            header_times.set_times(edit, txn.sizes, mtime=seconds, ctime=now, add=True)


def _dataset_header(txn: Transaction, new: NewDataset, version: int) -> int:
    return create_header(txn, txn.sizes, version, list(new.messages), track_times=new.header_times and version > 1,
                         min_size=DATASET_HEADER_HINT)


def _data_message(header, types: frozenset[int]) -> RawMessage | None:
    return next((m for m in header.messages if m.type in types), None)


def _existing(links: GroupLinks, name: str) -> Link:
    link = links.lookup(name)
    if link is None:
        raise NamespaceError(errno.ENOENT, f"{links.what}/{name}: no such link")
    return link


def _attribute_info(header, sizes, path: str):
    raw = header.first(ATTRIBUTE_INFO)
    return None if raw is None else attribute_info_msg.decode(Reader(raw.data, 0, sizes, f"{path}: attribute info"))
