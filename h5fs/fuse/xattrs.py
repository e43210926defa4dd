"""Reading xattrs: listxattr and getxattr. An object's HDF5 attributes are listed xattrs, its
facts (`user.h5fs.*`) are read by name only (fuse/views.py: names and value text).

What an object header holds (attribute lists and small values, most facts) is answered inline;
attributes in a fractal heap, big values and facts that walk a chunk index or read heaps, in a
worker. Attribute tables, facts and formatted values are kept by object address (MountState).
"""

from __future__ import annotations

import errno
import json
import logging
from typing import Sequence

import pyfuse3
from pyfuse3 import FUSEError

from ..errors import H5fsError
from ..model import namespace
from ..model.namespace import NPY, SYMLINK
from . import offload, views, writes
from .errors import boundary
from .inodes import Node
from .mount_state import MountState

log = logging.getLogger("h5fs.fuse")


async def attributes(mount: MountState, node: Node) -> dict:
    """The object's attributes by name."""
    table = mount.attribute_tables.get(node.address)
    if table is None:
        obj = mount.object(node)
        if obj.dense_attributes:  # in a fractal heap: I/O
            table = await offload.run_sync(namespace.attributes, obj)
        else:
            table = namespace.attributes(obj)
        mount.attribute_tables.put(node.address, table)
    return table


async def _facts(mount: MountState, node: Node) -> dict[str, str]:
    key = (node.address, node.kind == NPY)
    if mount.writes is not None and node.address is not None and mount.writes.pending(node.address):
        await writes.flush(mount, durable=False)   # storage sizes and a sparse dataset's count are the file's
    facts = mount.fact_tables.get(key)
    if facts is None:
        obj = mount.object(node)
        if obj.facts_from_header:
            facts = namespace.facts(obj, key[1])
        else:  # storage sizes walk the chunk index, external and virtual facts read heaps
            facts = await offload.run_sync(namespace.facts, obj, key[1])
        if node is mount.table.root:
            facts.update(mount.info)
        mount.fact_tables.put(key, facts)
    if node is mount.table.root:
        return {**facts, "requests": str(mount.requests), "inodes": str(len(mount.table)),
                "invalidations": str(mount.invalidator.count)}
    return facts


@boundary
async def listxattr(mount: MountState, inode: int) -> Sequence[bytes]:
    node = mount.live_node(inode)
    if node.kind in (SYMLINK, NPY):
        # the .npy view answers its object's attributes by name but lists none, so a
        # recursive `getfattr -d` dumps each object once (FUSE requests dominate its cost)
        return []
    names = []
    for name in await attributes(mount, node):
        xname = views.attribute_xattr_name(name)
        if xname is None:
            log.warning("%s: attribute %r cannot be shown as an xattr name", node.path, name)
            continue
        names.append(xname)
    # Facts (user.h5fs.*) are readable by name but not listed: `getfattr -d` fetches every
    # listed name, and a dozen facts per file made a recursive dump ~6x slower.
    return names


@boundary
async def getxattr(mount: MountState, inode: int, name: bytes) -> bytes:
    node = mount.live_node(inode)
    if node.kind == SYMLINK:
        raise FUSEError(pyfuse3.ENOATTR)
    attr_name = views.attribute_name_for_xattr(name)
    if attr_name is None:
        fact = views.fact_for_xattr(name)
        if fact == "status" and node is mount.table.root:   # made when asked: it changes all the time
            return json.dumps(mount.status()).encode()
        value = None if fact is None else (await _facts(mount, node)).get(fact)
        if value is None:
            raise FUSEError(pyfuse3.ENOATTR)
        return value.encode("utf-8", "surrogateescape")
    key = (node.address, attr_name)
    value = mount.xattr_values.get(key)
    if value is None:
        attr = (await attributes(mount, node)).get(attr_name)
        if attr is None:
            raise FUSEError(pyfuse3.ENOATTR)
        text = lambda: views.format_value(attr.value, views.XATTR_SIZE_MAX)  # noqa: E731
        try:  # heap reads or a big value: a worker thread; a small value in the header: inline
            value = text() if attr.value_in_header else await offload.run_sync(text)
        except H5fsError as exc:
            log.error("%s: attribute %r cannot be read: %s", node.path, attr_name, exc)
            raise FUSEError(exc.errno) from None
        if value is None:
            raise FUSEError(errno.E2BIG)
        mount.xattr_values.put(key, value)
    return value
