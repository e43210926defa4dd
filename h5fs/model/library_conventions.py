"""What the libraries that build on HDF5 do with attribute edits in files they wrote, so that an
edit through the mount leaves the file as that library would. A file is theirs when its root
group carries their mark: netCDF-4 `_NCProperties` (netCDF-C since 4.4.1, h5netcdf), PyTables
`PYTABLES_FORMAT_VERSION`.

netCDF-4 (netCDF-C's nc_put_att and nc_del_att, libhdf5 2.x era):
- the attributes it keeps itself (its reserved, read-only names: the dimension scale plumbing
  CLASS, NAME, DIMENSION_LIST, REFERENCE_LIST, its `_Netcdf4...` and file marks) are never set or
  removed by a user (NC_ENAMEINUSE; hidden from the user, so removal is NC_ENOTATT);
- a variable's `_FillValue` cannot be set once the variable exists in the file (NC_ELATEFILL):
  its data was written with the old fill value, which the dataset's fill value message keeps.
  Removing it is allowed, as is a group's (global) `_FillValue`, an ordinary attribute.
Both are refused here with EINVAL and the reason in the log.

A new text attribute is written as each writes one: netCDF-4 a fixed-length ASCII string (NC_CHAR),
PyTables a fixed-length UTF-8 one, both null-terminated and exactly the text's length, where h5py
writes a variable-length string. PyTables writes an empty string as a null dataspace; its own
attributes (TITLE, CLASS...) read a stored pad byte back as "\\x00" (attribute_values.fitted_types).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import InvalidWrite
from ..format.messages import datatype as T
from .dataset import Dataset

if TYPE_CHECKING:
    from .objects import H5Object

NETCDF, PYTABLES = "netCDF-4", "PyTables"
MARKS = {"_NCProperties": NETCDF, "PYTABLES_FORMAT_VERSION": PYTABLES}
NETCDF_RESERVED = frozenset({"CLASS", "NAME", "DIMENSION_LIST", "REFERENCE_LIST", "_Netcdf4Coordinates",
                             "_Netcdf4Dimid", "_NCProperties", "_IsNetcdf4", "_SuperblockVersion", "_nc3_strict",
                             "_Format"})


@dataclass(frozen=True)
class TextForm:
    """How a library stores a text attribute: its character set, and "" as a null dataspace."""
    charset: int
    empty_null: bool


TEXT_FORMS = {NETCDF: TextForm(T.ASCII, False), PYTABLES: TextForm(T.UTF8, True)}


def written_by(f) -> str | None:
    """NETCDF, PYTABLES or None: the library whose mark the file's root group carries."""
    for attr in f.root.attributes():
        if attr.name in MARKS:
            return MARKS[attr.name]
    return None


def text_form(f) -> TextForm | None:
    """How the library that wrote the file stores text attributes (None: not one of these)."""
    lib = written_by(f)
    return None if lib is None else TEXT_FORMS[lib]


def check_attribute_edit(f, obj: H5Object, name: str, removing: bool = False) -> None:
    """InvalidWrite when the library that wrote the file refuses this edit of attribute `name`."""
    if written_by(f) != NETCDF:
        return
    if name in NETCDF_RESERVED:
        raise InvalidWrite(f"{obj.path}: attribute {name!r} is netCDF-4's own (reserved: netCDF refuses "
                           "to set or remove it)")
    if name == "_FillValue" and not removing and isinstance(obj, Dataset):
        raise InvalidWrite(f"{obj.path}: netCDF-4 fixes a variable's _FillValue when it is defined "
                           "(NC_ELATEFILL): its data holds the old fill value")
