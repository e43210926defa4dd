"""An open HDF5 file: superblock, block reader, object and chunk caches, shared messages."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from functools import cached_property

from ..errors import FormatError, NotFound
from ..format import object_header, superblock
from ..format.codec import Reader
from ..format.messages import shared, sohm_table
from ..format.object_header import RawMessage
from ..storage.blockio import BlockReader, open_regular
from ..storage.chunk_cache import ChunkCache
from ..storage.metadata_cache import MetadataCache
from . import messages as M
from .dataset import Dataset
from .group import Group
from .objects import UNEXPECTED, H5Object, NamedDatatype, internal_error

OBJECT_CACHE = 16384


class H5File:
    def __init__(self, path: str, fd: int, sb: superblock.Superblock):
        self.path = path
        self.fd = fd
        self.superblock = sb
        self.sizes = sb.sizes
        self.meta = MetadataCache()
        self.reader = BlockReader(fd, sb.location, sb.sizes, self.meta)
        self.root_address = sb.root_header_address
        self.root_entry = sb.root_entry
        self.chunk_cache = ChunkCache()
        self._objects: OrderedDict[int, H5Object] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: str) -> H5File:
        fd = open_regular(path)
        try:
            try:
                sb = superblock.read(fd)
            except UNEXPECTED as e:
                raise internal_error("superblock", e) from e
            f = cls(path, fd, sb)
            f.root  # a file whose root group cannot be read is not mountable
            return f
        except BaseException:
            os.close(fd)
            raise

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> H5File:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @cached_property
    def root(self) -> Group:
        obj = self.get(self.root_address, "/")
        if not isinstance(obj, Group):
            raise FormatError("root object is not a group")
        return obj

    def get(self, address: int, path: str) -> H5Object:
        """The object whose header is at `address` (cached; `path` names it in messages)."""
        with self._lock:
            obj = self._objects.get(address)
            if obj is not None:
                self._objects.move_to_end(address)
                return obj
        try:
            header = object_header.read(self.reader, address, path)
            obj = _classify(header, address == self.root_address, path)(self, address, path, header)
        except UNEXPECTED as e:
            raise internal_error(path, e) from e
        with self._lock:
            self._objects[address] = obj
            while len(self._objects) > OBJECT_CACHE:
                self._objects.popitem(last=False)
        return obj

    def resolve(self, path: str) -> H5Object:
        """The object at an absolute HDF5 path, following hard links only."""
        obj: H5Object = self.root
        walked = ""
        for part in [p for p in path.split("/") if p]:
            if not isinstance(obj, Group):
                raise FormatError(f"{walked or '/'} is not a group")
            link = obj.link(part)
            walked += "/" + part
            if link is None or link.address is None:
                raise NotFound(f"{walked}: no such object")
            obj = self.get(link.address, walked)
        return obj

    @cached_property
    def global_heap(self):
        from ..format.global_heap import GlobalHeapReader
        return GlobalHeapReader(self.reader)

    # -- shared object header messages ----------------------------------------------------------
    @cached_property
    def extension(self) -> object_header.ObjectHeader | None:
        addr = self.superblock.extension_address
        return None if addr is None else object_header.read(self.reader, addr, "superblock extension")

    @cached_property
    def sohm_indexes(self) -> list[sohm_table.SohmIndex]:
        ext = self.extension
        raw = ext.first(M.SOHM_TABLE) if ext is not None else None
        if raw is None:
            return []
        msg = sohm_table.decode(Reader(raw.data, 0, self.sizes, "shared message table message"))
        return sohm_table.read_table(self.reader, msg)

    def shared_message_body(self, ref: shared.SharedRef, mtype: int, what: str) -> RawMessage:
        if ref.kind == shared.IN_OBJECT_HEADER:
            if ref.address is None:
                raise FormatError(f"{what}: shared in an undefined object header")
            # usually a committed datatype: through the object cache, read once
            header = self.get(ref.address, f"{what} (shared, in object header {ref.address})").header
            raw = header.first(mtype)
            if raw is None:
                raise FormatError(f"{what}: shared object header {ref.address} has no such message")
            return raw
        bit = sohm_table.type_bit(mtype)
        for index in self.sohm_indexes:
            if index.message_types & bit and index.heap_address is not None:
                heap = self._sohm_heap(index.heap_address)
                return RawMessage(mtype, 0, heap.get(ref.heap_id))
        raise FormatError(f"{what}: shared in the file's message heap, but no shared message index holds its type")

    def _sohm_heap(self, address: int):
        from ..format.fractal_heap import FractalHeap
        heaps = self.__dict__.setdefault("_sohm_heaps", {})
        if address not in heaps:
            heaps[address] = FractalHeap(self.reader, address, "shared message heap")
        return heaps[address]


def _classify(header: object_header.ObjectHeader, is_root: bool, path: str) -> type[H5Object]:
    types = {m.type for m in header.messages}
    if is_root or types & {M.SYMBOL_TABLE, M.LINK_INFO, M.LINK, M.GROUP_INFO}:
        return Group
    if M.LAYOUT in types or (M.DATASPACE in types and M.DATATYPE in types):
        return Dataset
    if M.DATATYPE in types:
        return NamedDatatype
    raise FormatError(f"{path}: object at {header.address} is neither a group, a dataset nor a named datatype")

