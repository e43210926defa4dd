"""Writing xattrs: setxattr and removexattr set and remove HDF5 attributes (`user.A`), and carry
the requests of `h5fs create` (a new dataset, on its group's directory) and `h5fs attr --dtype`
(a typed attribute, on the object). Each is one transaction of the tree editor (fuse/editing.py).
"""

from __future__ import annotations

import errno
import json

import numpy as np
import pyfuse3
from pyfuse3 import FUSEError

from ..errors import InvalidWrite
from ..model.namespace import DIR, NPY, NPY_SUFFIX, RAW, SYMLINK
from . import views
from .editing import changed, free_name, quick
from .errors import boundary
from .inodes import Node
from .mount_state import MountState
from .xattrs import attributes

CREATE_XATTR = b"user.h5fs.create"   # `h5fs create`'s request, set on the parent directory
ATTRIBUTE_XATTR = b"user.h5fs.attribute"   # `h5fs attr --dtype`'s request, set on the object


@boundary
async def setxattr(mount: MountState, inode: int, name: bytes, value: bytes) -> None:
    editor = mount.writable().editor
    node = mount.live_node(inode)
    if name == CREATE_XATTR and node.kind == DIR:
        await _create_dataset(mount, node, value)
        return
    if name == ATTRIBUTE_XATTR and node.kind in (RAW, NPY, DIR):
        await _create_attribute(mount, node, value)
        return
    attr = _attribute_name(node, name)
    await quick(mount, editor.set_attribute, mount.object(node), attr, value)
    _attributes_changed(mount, node, attr)


@boundary
async def removexattr(mount: MountState, inode: int, name: bytes) -> None:
    editor = mount.writable().editor
    node = mount.live_node(inode)
    attr = _attribute_name(node, name)
    if attr not in await attributes(mount, node):
        raise FUSEError(pyfuse3.ENOATTR)
    await quick(mount, editor.remove_attribute, mount.object(node), attr)
    _attributes_changed(mount, node, attr)


async def _create_dataset(mount: MountState, parent: Node, request: bytes) -> None:
    """`h5fs create`: an empty dataset as the request (JSON) describes it."""
    try:
        r = json.loads(request)
        name, shape, dtype = r["name"], tuple(r["shape"]), np.dtype(r["dtype"])
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidWrite(f"{parent.path}: a create request that does not parse: {exc}") from None
    raw = name.encode("utf-8", "surrogateescape")
    text = await free_name(mount, parent, raw)
    maxshape = None if r.get("maxshape") is None else tuple(r["maxshape"])
    chunks = None if r.get("chunks") is None else tuple(r["chunks"])
    filters = r.get("filters") or ()
    if filters == "none":
        filters = ()
    await quick(mount, mount.writes.editor.create_dataset, mount.object(parent), text, dtype, shape,
                maxshape=maxshape, chunks=chunks, filters=filters, layout=r.get("layout"), fill=r.get("fill"))
    await changed(mount, parent, raw, [raw + NPY_SUFFIX.encode()])
    mount.invalidator.entry(parent, raw)


async def _create_attribute(mount: MountState, node: Node, request: bytes) -> None:
    """`h5fs attr --dtype`: attribute `name` made anew with a number, bool or complex dtype
    and the value (and shape) the request's text says."""
    try:
        r = json.loads(request)
        name, dtype, value = r["name"], np.dtype(r["dtype"]), r["value"].encode()
        if not isinstance(name, str):
            raise TypeError("the name is not a string")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InvalidWrite(f"{node.path}: an attribute request that does not parse: {exc}") from None
    await quick(mount, mount.writes.editor.create_attribute, mount.object(node), name, dtype, value)
    _attributes_changed(mount, node, name)


def _attribute_name(node: Node, name: bytes) -> str:
    if node.kind == SYMLINK:
        raise FUSEError(errno.EPERM)   # HDF5 links carry no attributes
    attr = views.attribute_name_for_xattr(name)
    if attr is None:
        # user.h5fs.* facts are read-only; other namespaces are not HDF5 attributes
        raise FUSEError(errno.EPERM if views.fact_for_xattr(name) is not None else errno.ENOTSUP)
    return attr


def _attributes_changed(mount: MountState, node: Node, attr: str) -> None:
    mount.attribute_tables.pop(node.address)
    mount.xattr_values.pop((node.address, attr))
