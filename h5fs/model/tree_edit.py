"""Namespace edits of a writable file: groups made and removed, links added, removed and
renamed, attributes set and removed. Each edit is one transaction (crash-safe as every write:
storage/transaction.py), committed under the writeback's commit lock, after which the file's
caches of every object it touched are dropped.

Reference counts follow the hard links (libhdf5's H5O_link): a new hard link adds one to its
object's count, a removed one takes one away, and an object left with none is freed with all its
storage (storage/object_delete.py), its writes not yet in the file forgotten. A group is removed
only when empty; a group never moves into its own subtree.
"""

from __future__ import annotations

import errno
import time
from collections import deque
from contextlib import contextmanager
from typing import Iterator

from ..errors import H5fsError
from ..format import object_header as oh
from ..format.codec import Writer
from ..format.messages import link as link_msg
from ..format.messages import link_info as link_info_msg
from ..format.messages import modification_time
from ..format.messages import symbol_table as stab_msg
from ..format.messages.link import Link
from ..storage import symbol_table_write as stab_write
from ..storage.header_create import create_header
from ..storage.header_writer import HeaderEdit
from ..storage.links_write import GROUP_INFO, LINK_INFO, SYMBOL_TABLE, GroupLinks, encode_link
from ..storage.object_delete import free_object, shared_headers
from ..storage.readers.object_header import read as read_header
from ..storage.transaction import Transaction
from .dataset_create import dataset_messages
from .libver import libver_for_superblock
from .objects import H5Object


MTIME_OLD, MTIME = 0x0E, 0x12
DATASET_HEADER_HINT = 256   # libhdf5's least object header for a new dataset (H5D__update_oh_info)


class NamespaceError(H5fsError):
    """An edit the tree refuses; `errno` says why (ENOTEMPTY, EEXIST, ENOENT, EINVAL...)."""

    def __init__(self, errno_value: int, text: str):
        super().__init__(text)
        self.errno = errno_value


class TreeEditor:
    def __init__(self, f, writeback):
        self.f, self.wb = f, writeback

    @contextmanager
    def _edit(self) -> Iterator[tuple[Transaction, set[int]]]:
        """A transaction for one edit; `touched` collects the object headers it changes."""
        with self.wb.commit_lock, self.f.store.transaction() as txn:
            touched: set[int] = set()
            yield txn, touched
            self.wb.commit(txn, sorted(touched))
            self.f.superblock = self.f.store.superblock
            self.f.root_entry = self.f.superblock.root_entry

    def _links(self, txn: Transaction, group: H5Object, touched: set[int]) -> GroupLinks:
        touched.add(group.address)
        return GroupLinks(txn, group.address, group.path)

    # -- groups ------------------------------------------------------------------------------
    def mkdir(self, parent: H5Object, name: str) -> int:
        """A new empty group `name` in `parent`, stored as `parent` stores its links."""
        with self._edit() as (txn, touched):
            links = self._links(txn, parent, touched)
            _refuse_existing(links, name)
            address = self._new_group(txn, links)
            touched.add(address)   # a reader may hold what the reused space held before
            links.insert(Link(name, link_msg.HARD, address=address))
        return address

    def _new_group(self, txn: Transaction, parent: GroupLinks) -> int:
        sizes = txn.sizes
        header = parent.edit.header
        if parent.symbol_table is not None:   # old style: a symbol table (H5G__stab_create)
            stab = stab_write.create(txn)
            w = Writer(sizes)
            stab_msg.encode(w, stab)
            return create_header(txn, sizes, 1, [(SYMBOL_TABLE, w.getvalue(), 0)],
                                 min_size=4 + 2 * sizes.offset)
        info = parent.info
        new_info = link_info_msg.LinkInfo(info.track_order, info.index_order, 0 if info.track_order else None,
                                          None, None, None)
        w = Writer(sizes)
        link_info_msg.encode(w, new_info)
        messages = [(LINK_INFO, w.getvalue(), 0)]
        ginfo = header.first(GROUP_INFO)
        messages.append((GROUP_INFO, ginfo.data if ginfo is not None else b"\0\0", 0))
        hint = sum(len(body) for _, body, _ in messages) + 4 * (8 + len(encode_link(
            Link("x" * 8, link_msg.HARD, address=0), sizes)))
        if header.version == 1:
            return create_header(txn, sizes, 1, messages, min_size=hint)
        return create_header(txn, sizes, 2, messages, min_size=hint,
                             track_times=bool(header.flags & oh.HDR_TIMES),
                             track_attr_order=bool(header.flags & oh.HDR_TRACK_ORDER))

    def create_dataset(self, parent: H5Object, name: str, dtype, shape: tuple[int, ...], *,
                       maxshape=None, chunks=None, filters=(), layout: str | None = None, fill=None) -> int:
        """A new dataset `name` in `parent`, described as libhdf5 would write it for this file's
        format (model/dataset_create.py); nothing allocated until data is written."""
        libver = libver_for_superblock(self.f.superblock.version)
        new = dataset_messages(dtype, shape, maxshape=maxshape, chunks=chunks, filters=filters, layout=layout,
                               fill=fill, libver=libver, sizes=self.f.sizes)
        with self._edit() as (txn, touched):
            links = self._links(txn, parent, touched)
            _refuse_existing(links, name)
            address = create_header(txn, txn.sizes, new.header_version, list(new.messages),
                                    track_times=new.header_times, min_size=DATASET_HEADER_HINT)
            touched.add(address)
            links.insert(Link(name, link_msg.HARD, address=address))
        return address

    def rmdir(self, parent: H5Object, name: str) -> None:
        with self._edit() as (txn, touched):
            links = self._links(txn, parent, touched)
            link = _existing(links, name)
            if link.link_type != link_msg.HARD:
                raise NamespaceError(errno.ENOTDIR, f"{parent.path}/{name}: not a group")
            child = GroupLinks(txn, link.address, f"{parent.path}/{name}")
            if child.all():
                raise NamespaceError(errno.ENOTEMPTY, f"{parent.path}/{name}: not empty")
            links.remove(name)
            self._unref(txn, touched, link.address, f"{parent.path}/{name}")

    # -- links ---------------------------------------------------------------------------------
    def unlink(self, parent: H5Object, name: str) -> None:
        with self._edit() as (txn, touched):
            link = self._links(txn, parent, touched).remove(name)
            if link.link_type == link_msg.HARD:
                self._unref(txn, touched, link.address, f"{parent.path}/{name}")

    def hard_link(self, address: int, parent: H5Object, name: str) -> None:
        with self._edit() as (txn, touched):
            links = self._links(txn, parent, touched)
            _refuse_existing(links, name)
            links.insert(Link(name, link_msg.HARD, address=address))
            edit = HeaderEdit(txn, read_header(txn.reader, address, f"{parent.path}/{name}"))
            edit.refcount = edit.refcount + 1
            touched.add(address)

    def soft_link(self, parent: H5Object, name: str, target: str) -> None:
        self._add_link(parent, Link(name, link_msg.SOFT, target=target))

    def external_link(self, parent: H5Object, name: str, filename: str, path: str) -> None:
        self._add_link(parent, Link(name, link_msg.EXTERNAL, target=path, filename=filename))

    def _add_link(self, parent: H5Object, link: Link) -> None:
        with self._edit() as (txn, touched):
            links = self._links(txn, parent, touched)
            _refuse_existing(links, link.name)
            links.insert(link)

    def rename(self, src: H5Object, name: str, dst: H5Object, new: str) -> None:
        """Move the link `name` of `src` to `new` in `dst`, replacing a link of that name as
        rename(2) does (a group only by an empty group)."""
        with self._edit() as (txn, touched):
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
                    self._unref(txn, touched, old.address, f"{dst.path}/{new}")
            target.insert(Link(new, link.link_type, address=link.address, target=link.target,
                               filename=link.filename))

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

    def _unref(self, txn: Transaction, touched: set[int], address: int, path: str) -> None:
        """One hard link fewer to the object at `address`; freed at none."""
        edit = HeaderEdit(txn, read_header(txn.reader, address, path))
        count = edit.refcount - 1
        touched.add(address)
        if count > 0:
            edit.refcount = count
            return
        for shared in shared_headers(edit.header, txn.sizes):   # committed datatypes it uses
            self._unref(txn, touched, shared, f"{path} (its committed datatype)")
        self.wb.discard(address)
        free_object(txn, self.f, address, path)

    # -- attributes and times ----------------------------------------------------------------------
    def set_attribute(self, obj: H5Object, name: str, text: bytes) -> None:
        with self._edit() as (txn, touched):
            touched.add(obj.address)
            from .attributes_write import set_attribute
            set_attribute(txn, self.f, obj, name, text)

    def remove_attribute(self, obj: H5Object, name: str) -> None:
        with self._edit() as (txn, touched):
            touched.add(obj.address)
            from .attributes_write import remove_attribute
            remove_attribute(txn, self.f, obj, name)

    def touch(self, obj: H5Object, mtime_ns: int | None = None) -> None:
        """The object's modification time: in a version 2 header's times, or in its
        modification time message; an object with neither gets a message when its header is
        new-style (version 2), and keeps no time otherwise (an old-style header in a file
        libhdf5 wrote without times)."""
        seconds = (time.time_ns() if mtime_ns is None else mtime_ns) // 1_000_000_000
        with self._edit() as (txn, touched):
            touched.add(obj.address)
            edit = HeaderEdit(txn, read_header(txn.reader, obj.address, obj.path))
            if edit.times is not None:
                access, _, change, birth = edit.times
                edit.times = (access, seconds, change, birth)
                return
            for mtype, encode in ((MTIME, modification_time.encode_new), (MTIME_OLD, modification_time.encode_old)):
                raw = edit.header.first(mtype)
                if raw is not None:
                    edit.replace(raw, _encoded(encode, seconds, txn.sizes))
                    return
            if edit.header.version > 1:
                edit.add(MTIME, _encoded(modification_time.encode_new, seconds, txn.sizes))


def _encoded(encode, value, sizes) -> bytes:
    w = Writer(sizes)
    encode(w, value)
    return w.getvalue()


def _existing(links: GroupLinks, name: str) -> Link:
    link = links.lookup(name)
    if link is None:
        raise NamespaceError(errno.ENOENT, f"{links.what}/{name}: no such link")
    return link


def _refuse_existing(links: GroupLinks, name: str) -> None:
    if links.lookup(name) is not None:
        raise NamespaceError(errno.EEXIST, f"{links.what}/{name}: exists")


