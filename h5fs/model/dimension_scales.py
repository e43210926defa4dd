"""Dimension scales kept consistent when an object is freed (libhdf5's H5DS rules, hl/src/H5DS.c).

A dataset names the scales of each dimension in its DIMENSION_LIST attribute (per dimension a
variable-length sequence of object references); a scale names the datasets attached to it in
its REFERENCE_LIST attribute (a compound {dataset: object reference, dimension: integer} per
attachment). libhdf5 leaves both as they are when either object is deleted, so a removed scale
leaves references to a freed header, which h5py's `dset.dims` trips over once new objects reuse
the space. Before h5fs frees an object, in the same transaction, `detach` does for each of its
attachments what H5DSdetach_scale does: a freed scale leaves the DIMENSION_LIST of every dataset
its REFERENCE_LIST names (the attribute deleted when no dimension keeps a scale), a freed
dataset leaves the REFERENCE_LIST of every scale its DIMENSION_LIST names (deleted when empty;
CLASS and NAME stay: the scale is still a scale). The freed object's own attributes go with it.
A netCDF-4 variable losing a scale leaves all of them (`_leave_dimension_list` says why).

Only old-style object references (H5R_OBJECT1, what H5DS writes) are edited. An attachment
that cannot be followed (a reference that dangles already, an attribute of another shape) is
left as it is and logged: `h5fs check` reports what dangles.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Callable

from ..errors import H5fsError
from ..format import global_heap as gh
from ..format.codec import Reader, Writer
from ..format.messages import dataspace as DS
from ..format.messages import datatype as T
from ..storage import global_heap as ghw
from ..storage.sohm_table.writer import SharedMessages
from ..storage.transaction import Transaction
from .attributes_write import Attributes
from .safety_net import UNEXPECTED

log = logging.getLogger("h5fs")

DIMENSION_LIST, REFERENCE_LIST = "DIMENSION_LIST", "REFERENCE_LIST"
NETCDF_COORDINATES = "_Netcdf4Coordinates"
Plan = tuple[Callable[[], None], set[int]]   # an edit to make, the scales to detach the object from then


@dataclass(frozen=True)
class _Object:   # what Attributes needs of an object
    address: int
    path: str


def detach(txn: Transaction, f, address: int, path: str, shared: SharedMessages) -> set[int]:
    """Detach the object at `address`, about to be freed, from every scale and dataset it is
    attached to; the header addresses of the objects edited."""
    try:
        own = Attributes(txn, f, _Object(address, path), shared)
        datasets, scales = _attached_datasets(own), _scales(own)
    except (H5fsError, *UNEXPECTED) as e:
        log.warning("%s: removed, but its dimension scale attachments could not be read: %s", path, e)
        return set()
    edited = set()
    for dataset in sorted(datasets - {address}):
        others = _edit(txn, f, dataset, path, shared, _leave_dimension_list, address)
        if others is not None:
            edited.add(dataset)
            for scale in sorted(others - {dataset}):   # a netCDF variable leaves all its scales
                if _edit(txn, f, scale, path, shared, _leave_reference_list, dataset) is not None:
                    edited.add(scale)
    for scale in sorted(scales - {address}):
        if _edit(txn, f, scale, path, shared, _leave_reference_list, address) is not None:
            edited.add(scale)
    return edited


def _edit(txn, f, target: int, path: str, shared, plan, address: int) -> set[int] | None:
    """Edit the attributes of the object at `target` as `plan` says (it reads, and returns the
    edit to make and the other scales to detach `target` from, or None); None when nothing
    changed. A target that cannot be read is logged and left alone; an edit that fails fails
    the removal."""
    try:
        planned = plan(txn, Attributes(txn, f, _Object(target, f"object at {target}"), shared), address)
    except (H5fsError, *UNEXPECTED) as e:   # a reference that dangles already, or names garbage
        log.warning("%s: removed, but the object at %d it is attached to was left as it is: %s", path, target, e)
        return None
    if planned is None:
        return None
    edit, others = planned
    edit()
    return others


# -- what the freed object names ---------------------------------------------------------------------

def _attached_datasets(attrs: Attributes) -> set[int]:
    """The datasets a scale's REFERENCE_LIST names."""
    found = attrs.get(REFERENCE_LIST)
    if found is None:
        return set()
    msg, dt, space, _ = found
    ref = _reference_member(dt)
    if ref is None:
        return set()
    return {a for a in _addresses(msg.data, dt.size, space.count, ref, attrs.txn.sizes)}


def _scales(attrs: Attributes) -> set[int]:
    """The scales a dataset's DIMENSION_LIST names."""
    found = attrs.get(DIMENSION_LIST)
    if found is None or not _is_reference_list(found[1]):
        return set()
    msg, dt, space, _ = found
    out: set[int] = set()
    for refs, _ in _sequences(attrs.txn, msg.data, space.count):
        out.update(refs)
    return out


# -- the edits ----------------------------------------------------------------------------------------

def _leave_dimension_list(txn: Transaction, attrs: Attributes, scale: int) -> Plan | None:
    """H5DSdetach_scale on a dataset: `scale` leaves every dimension's list; the attribute goes
    when no dimension keeps a scale. A netCDF-4 variable (`_Netcdf4Coordinates` lists its
    dimension IDs) leaves all its scales and loses that list too: netCDF-C cannot open a
    variable that names a dimension which no longer exists, nor one with a dimension without a
    scale among dimensions with one, but gives a variable without scales dimensions of its own
    (an existing dimension of the same length, else a phony one)."""
    found = attrs.get(DIMENSION_LIST)
    if found is None or not _is_reference_list(found[1]):
        return None
    msg, _, space, table_copy = found
    elements = _sequences(txn, msg.data, space.count)
    if not any(scale in refs for refs, _ in elements):
        return None
    if attrs.get(NETCDF_COORDINATES) is not None:
        def forget() -> None:
            attrs.remove(DIMENSION_LIST)
            attrs.remove(NETCDF_COORDINATES)
        return forget, {r for refs, _ in elements for r in refs} - {scale}
    if all(set(refs) <= {scale} for refs, _ in elements):
        return (lambda: attrs.remove(DIMENSION_LIST)), set()   # with every sequence's heap object

    def edit() -> None:
        sizes, w = txn.sizes, Writer(txn.sizes)
        for refs, (length, hid) in elements:
            keep = [r for r in refs if r != scale]
            if len(keep) == len(refs) and not table_copy:   # a table's copy keeps its heap objects
                w.u32(length)
                gh.encode_heap_id(w, hid)
                continue
            if length and not hid.is_nil and not table_copy:   # H5T__vlen_disk_delete
                ghw.remove(txn, hid.address, hid.index)
            w.u32(len(keep))
            data = b"".join(r.to_bytes(sizes.offset, "little") for r in keep)
            gh.encode_heap_id(w, ghw.insert(txn, data) if keep else gh.HeapID(0, 0))
        attrs.put(DIMENSION_LIST, replace(msg, data=w.getvalue()))
    return edit, set()


def _leave_reference_list(txn: Transaction, attrs: Attributes, dataset: int) -> Plan | None:
    """H5DSdetach_scale on a scale: the entries naming `dataset` go; the attribute goes when
    none is left."""
    found = attrs.get(REFERENCE_LIST)
    if found is None:
        return None
    msg, dt, space, _ = found
    ref = _reference_member(dt)
    if ref is None or space.kind != DS.SIMPLE or len(space.dims) != 1:
        return None
    sizes, size = txn.sizes, dt.size
    entries = [msg.data[i * size:(i + 1) * size] for i in range(space.count)]
    keep = [e for e in entries if _address(e, ref, sizes) != dataset]
    if len(keep) == len(entries):
        return None
    if not keep:
        return (lambda: attrs.remove(REFERENCE_LIST)), set()
    w = Writer(sizes)
    DS.encode(w, replace(space, dims=(len(keep),), maxdims=(len(keep),)))
    new = replace(msg, data=b"".join(keep), dataspace_raw=w.getvalue(), dataspace_shared=False)
    return (lambda: attrs.put(REFERENCE_LIST, new)), set()


# -- values -------------------------------------------------------------------------------------------

def _is_reference_list(dt: T.Datatype) -> bool:
    """A variable-length sequence of old-style object references (H5DS's DIMENSION_LIST)."""
    return isinstance(dt, T.VarLen) and not dt.is_string and isinstance(dt.base, T.Reference) \
        and dt.base.ref_type == T.REF_OBJECT1


def _reference_member(dt: T.Datatype) -> int | None:
    """The offset of an old-style object reference member of a compound (REFERENCE_LIST's
    "dataset"), or None."""
    if not isinstance(dt, T.Compound):
        return None
    return next((m.offset for m in dt.members
                 if isinstance(m.type, T.Reference) and m.type.ref_type == T.REF_OBJECT1), None)


def _address(element: bytes, offset: int, sizes) -> int:
    return int.from_bytes(element[offset:offset + sizes.offset], "little")


def _addresses(data: bytes, size: int, count: int, offset: int, sizes) -> list[int]:
    return [a for i in range(count) if (a := _address(data[i * size:], offset, sizes)) not in (0, sizes.undefined)]


def _sequences(txn: Transaction, data: bytes, count: int) -> list[tuple[list[int], tuple[int, gh.HeapID]]]:
    """Each element of a DIMENSION_LIST: the object addresses of its sequence, and its stored
    (length, heap ID)."""
    sizes, out = txn.sizes, []
    c = Reader(data, 0, sizes, DIMENSION_LIST)
    for _ in range(count):
        length, hid = c.u32(), gh.decode_heap_id(c)
        refs = []
        if length and not hid.is_nil:
            raw = ghw.read(txn, hid.address, hid.index)
            refs = _addresses(raw, sizes.offset, length, 0, sizes)
        out.append((refs, (length, hid)))
    return out
