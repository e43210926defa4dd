"""Format bounds ("libver"): which message versions libhdf5 writes for a new object.

libhdf5 picks each message's version from the file's *low* bound (H5Pset_libver_bounds; h5py's
`libver=`): the earliest bound keeps every message at the version the oldest library reads, each
later bound raises some of them. The names are h5py's; "latest" is libhdf5 2.0's V200 (the wheel
h5py bundles), "v18" an alias of "v108".

The file does not record the bound it was made with; its superblock version tells its format
(`libver_for_superblock`), which is what a new object in it should follow.
"""

from __future__ import annotations

LIBVERS = ("earliest", "v108", "v110", "v112", "v114", "v200")
_ALIASES = {"latest": "v200", "v18": "v108"}

# H5O_dtype_ver_bounds: the version compound, array and enum types are raised to (atomic types
# stay at 1 under every bound).
_DATATYPE_VERSION = {"earliest": 1, "v108": 3, "v110": 3, "v112": 4, "v114": 4, "v200": 5}


def canonical(libver: str) -> str:
    """`libver` as one of LIBVERS; ValueError for a name libhdf5 does not know."""
    name = _ALIASES.get(libver, libver)
    if name not in LIBVERS:
        raise ValueError(f"unknown format bound {libver!r} (one of {', '.join(LIBVERS)} or latest)")
    return name


def at_least(libver: str, bound: str) -> bool:
    return LIBVERS.index(canonical(libver)) >= LIBVERS.index(canonical(bound))


def datatype_version(libver: str) -> int:
    return _DATATYPE_VERSION[canonical(libver)]


def libver_for_superblock(version: int) -> str:
    """The bound whose objects look like the rest of a file with this superblock version:
    0-1 (symbol-table groups, v1 headers) earliest; 2 v108; 3 v110, the oldest bound writing
    superblock 3. Not later: layout message 5 and datatype message 4-5 would lock out the
    libhdf5 1.10-1.14 readers that file may have been made for."""
    return "earliest" if version < 2 else "v108" if version == 2 else "v110"
