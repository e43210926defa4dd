"""The mount's namespace as the engine answers it: what a group shows, what one name means, the
stat numbers of an object, its facts and its attributes by name.

Plain synchronous code over model objects (no trio, no pyfuse3): the FUSE adapter asks, and
decides only where to ask, inline or from a worker thread (`numbers_from_header`,
`links_from_header`, `Dataset.facts_from_header` and `dense_attributes` say when object headers
are enough; `lookup(header_only=True)` raises BeyondHeader when they are not), and how to tell
the kernel.

What a group shows (`entries`, in the group's link order; `lookup` answers one name alike):
- a hard link to a group: a directory (DIR); to a named datatype: a small text file (DTYPE);
  to a dataset `D`: its raw view `D` (RAW) and, right after it, its `.npy` view `D.npy` (NPY),
  unless the group has a real link of that name (the real link wins) or the name is too long;
  a sparse dataset also its defined elements `D.points.npy` (POINTS), after the `.npy` view;
- a soft link: a symlink (SYMLINK); an absolute HDF5 target becomes a path inside the mount,
  relative to the link's directory (`/x/y` from the group `/a/b` -> `../../x/y`), a relative
  one stays; when its target is a dataset, also a symlink `NAME.npy` to the target's `.npy`
  view right after it (NeXus links a plot's axes so: `np.load("data/x.npy")` must work as for
  a hard link); an external link: a symlink `FILE:OBJECT` (it goes nowhere real);
- a hard link whose object cannot be read: listed by its name (BROKEN, answers EIO);
- names that cannot be file names (empty, `.`, `..`, `/` or NUL inside, over 255 bytes), links of
  unknown kinds and duplicate names (after the first) are skipped, each with a log line.

Stat numbers (`Numbers`): hard-link count, modification time, the file's size, st_blocks (bytes
allocated in the file / 512; None when only walking the chunk index can tell: `storage_blocks`),
and the `.npy` view's size, derived from dtype and shape (`npy_header.npy_header_size`)
without building the header.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Callable

from ..errors import FormatError
from ..format.messages import layout as L
from ..format.messages.link import HARD, Link
from . import messages as M
from .dtypes import is_converted
from .npy_header import npy_header_size

if TYPE_CHECKING:
    from .attributes import Attribute
    from .file import H5File
    from .group import Group
    from .objects import H5Object

log = logging.getLogger("h5fs.model")

# entry kinds
DIR = "dir"          # a group
RAW = "raw"          # a dataset's raw view
NPY = "npy"          # a dataset's .npy view
POINTS = "points"    # a sparse dataset's defined elements (model/points_view.py)
DTYPE = "dtype"      # a named datatype (a small read-only text file)
SYMLINK = "symlink"  # a soft or external link
BROKEN = "broken"    # an object that could not be read: listed, answers EIO

NAME_MAX = 255
NPY_SUFFIX = ".npy"
POINTS_SUFFIX = ".points.npy"
_KINDS = {"group": DIR, "dataset": RAW, "datatype": DTYPE}
# chunk indexes whose allocated size takes a walk over them (the engine counts an implicit
# index's chunks one by one); a single-chunk index, or one never allocated, is answered by the
# layout message
_WALKED = (L.BTREE_V1, L.IMPLICIT, L.FIXED_ARRAY, L.EXTENSIBLE_ARRAY, L.BTREE_V2)
# chunk indexes whose opening reads nothing beyond the layout message
_OPENED_FROM_HEADER = (L.BTREE_V1, L.SINGLE, L.IMPLICIT)


@dataclass(frozen=True, slots=True)
class Numbers:
    """What stat says about an object (and its `.npy` view)."""
    nlink: int
    mtime_ns: int | None              # None: the object records no time
    size: int = 0                     # the raw view, or a named datatype's text
    blocks: int | None = 0            # 512-byte blocks allocated; None: `storage_blocks` must walk the index
    npy_size: int = 0
    npy_error: BaseException | None = None  # the raw view works, the .npy view cannot be served
    sparse: bool = False              # a sparse dataset: it has a `.points.npy` view
    ctime_ns: int | None = None       # None: the object records no change time


@dataclass(frozen=True, slots=True)
class Entry:
    """One name a directory shows."""
    name: bytes
    kind: str
    path: str                         # the HDF5 path it was found by (logs, symlink depth)
    address: int | None = None        # object header address (hard links)
    numbers: Numbers | None = None    # None for symlinks and broken entries
    target: bytes | None = None       # symlink text
    error: BaseException | None = None  # why it is broken (the .npy view: why it cannot be served)
    suffix: str = ""                  # a view's suffix after its link's name (`D.npy`: ".npy")
    soft_target: str | None = None    # a soft link's HDF5 target (`soft_link_text` makes its text)


class BeyondHeader(Exception):
    """Answering needs more than object headers (heaps, B-trees, index structures, data):
    ask again from a worker thread."""


def join(dir_path: str, name: str) -> str:
    return ("/" if dir_path == "/" else dir_path + "/") + name


# -- names ------------------------------------------------------------------------------------

Known = Callable[[int], "tuple[str, Numbers] | None"]


def entries(file: H5File, group: Group, dir_path: str, known: Known | None = None) -> list[Entry]:
    """Every entry of `group` as the mount shows it (reads each child's object header, unless
    `known(address)` gives the child's kind and stat numbers: what the caller already knows of
    objects, e.g. the kernel's inodes, when a listing is asked again)."""
    links = group.links()
    taken = {ln.name for ln in links}
    out: list[Entry] = []
    seen: set[bytes] = set()
    for link in links:
        entry = _entry(file, dir_path, link, known=known)
        if entry is None:
            continue
        if entry.name in seen:
            log.warning("%s: duplicate link name %r, the first one wins", dir_path, link.name)
            continue
        seen.add(entry.name)
        out.append(entry)
        if link.kind == "soft" and link.name + NPY_SUFFIX not in taken:
            twin = soft_npy_entry(file, dir_path, link, entry)
            if twin is not None and twin.name not in seen:
                seen.add(twin.name)
                out.append(twin)
        if entry.kind == RAW:
            for view, suffix in ((npy_entry, NPY_SUFFIX), (points_entry, POINTS_SUFFIX)):
                if suffix == POINTS_SUFFIX and not entry.numbers.sparse:
                    continue
                name = entry.name + suffix.encode()
                if link.name + suffix in taken or name in seen:
                    log.warning("%s%s: hidden by a link of that name", entry.path, suffix)
                elif len(name) <= NAME_MAX:
                    seen.add(name)
                    out.append(view(entry))
    return out


def lookup(file: H5File, group: Group, dir_path: str, name: bytes, header_only: bool = False) -> Entry | None:
    """The entry `name` of `group`, without listing the group (None: no such entry).
    `header_only`: raise BeyondHeader rather than read anything but object headers."""
    if header_only and not links_from_header(group):
        raise BeyondHeader
    text = name.decode("utf-8", "surrogateescape")
    link = group.link(text)
    if link is not None:
        return _entry(file, dir_path, link, header_only)
    for suffix, view in ((NPY_SUFFIX, npy_entry), (POINTS_SUFFIX, points_entry)):
        if not text.endswith(suffix):
            continue
        link = group.link(text[:-len(suffix)])
        if link is not None and link.kind == "soft" and suffix == NPY_SUFFIX:
            if header_only:   # its target is looked up
                raise BeyondHeader
            entry = _entry(file, dir_path, link)
            return None if entry is None else soft_npy_entry(file, dir_path, link, entry)
        if link is not None and link.kind == "hard":
            entry = _entry(file, dir_path, link, header_only)
            if entry is not None and entry.kind == RAW and (view is npy_entry or entry.numbers.sparse):
                return view(entry)
    return None


def object_entry(file: H5File, dir_path: str, name: str, address: int) -> Entry | None:
    """The entry of a hard link `name` to the object at `address` (one just made: no lookup of
    the name in its group, whose index the edit just rewrote)."""
    return _entry(file, dir_path, Link(name, HARD, address=address))


def links_from_header(group: Group) -> bool:
    """True when the group's links are link messages in its own header (compact storage)."""
    if not group.headers_local:
        return False
    try:
        info = group.message(M.LINK_INFO)
        return info is not None and info.heap_address is None and group.header.first(M.SYMBOL_TABLE) is None
    except Exception:  # noqa: BLE001 - the worker reading the links reports it
        return False


def links_deferred(group: Group) -> bool:
    """True when a link removed from the group waits to land (storage/pending_links.py: a symbol
    table, or a new-style group, its links dense or in its header): it frees nothing until then."""
    try:
        return group.message(M.SYMBOL_TABLE) is not None or group.message(M.LINK_INFO) is not None
    except Exception:  # noqa: BLE001 - the edit reading the links reports it
        return False


FEW_LINKS = 8   # libhdf5's default most links a group keeps in its header


def few_links(group: Group) -> bool:
    """Whether the group keeps at most FEW_LINKS links in its header (listed with little work);
    False for anything else, or what cannot be read here."""
    try:
        return links_from_header(group) and len(group.header.find(M.LINK)) <= FEW_LINKS \
            and not group.file.pending.holds(group.address)
    except Exception:  # noqa: BLE001 - the listing reports it
        return False


def view_base(name: bytes, entry: Entry) -> bytes:
    """The link name behind a view's file name (`D` for `D.npy` and `D.points.npy`, soft link
    `L` for the symlink `L.npy`)."""
    return name[:-len(entry.suffix)] if entry.suffix else name


def other_views(name: bytes, entry: Entry) -> list[bytes]:
    """The names of a dataset's other views (`D.npy` for `D`, `D` for `D.npy`, and a sparse
    dataset's `D.points.npy`); a soft link's and its `.npy` symlink's, each other's (an external
    link has none)."""
    if entry.kind not in (RAW, NPY, POINTS, SYMLINK) or (entry.kind == SYMLINK and entry.soft_target is None):
        return []
    base = view_base(name, entry)
    views = [base, base + NPY_SUFFIX.encode()]
    if entry.numbers is not None and entry.numbers.sparse:
        views.append(base + POINTS_SUFFIX.encode())
    return [v for v in views if v != name]


def npy_entry(raw: Entry) -> Entry:
    """The `.npy` view beside the raw view `raw`."""
    return replace(raw, name=raw.name + NPY_SUFFIX.encode(), kind=NPY, path=raw.path + NPY_SUFFIX,
                   error=raw.numbers.npy_error, suffix=NPY_SUFFIX)


def points_entry(raw: Entry) -> Entry:
    """The `.points.npy` view beside the raw view of a sparse dataset."""
    return replace(raw, name=raw.name + POINTS_SUFFIX.encode(), kind=POINTS, path=raw.path + POINTS_SUFFIX,
                   suffix=POINTS_SUFFIX)


def soft_npy_entry(file: H5File, dir_path: str, link: Link, symlink: Entry) -> Entry | None:
    """The symlink `NAME.npy` beside soft link `symlink`, to its target's `.npy` view, when the
    target is a dataset (None: it is not, or cannot be found; the symlink itself still shows)."""
    name = symlink.name + NPY_SUFFIX.encode()
    if len(name) > NAME_MAX:
        return None
    try:
        obj = _soft_target(file, dir_path, link.target or "", SOFT_LINK_NESTING)
    except Exception as exc:  # noqa: BLE001 - a target that cannot be read has no view to show
        if getattr(exc, "transient", False):
            raise   # a network fault: the listing fails now (and is made again), never without the view
        return None
    if obj is None or obj.kind != "dataset":
        return None
    return replace(symlink, name=name, path=symlink.path + NPY_SUFFIX,
                   target=soft_link_text(dir_path, link.target or "", NPY_SUFFIX), suffix=NPY_SUFFIX)


SOFT_LINK_NESTING = 16   # libhdf5's default limit of soft links followed in one traversal


def _soft_target(file: H5File, dir_path: str, target: str, budget: int) -> H5Object | None:
    """The object soft link `target` (found in the group at `dir_path`) names, following soft
    links on the way as libhdf5 does (None: missing, external, or more than `budget` soft links)."""
    path = target if target.startswith("/") else join(dir_path, target)
    obj, walked = file.root, "/"
    for part in [p for p in path.split("/") if p]:
        if obj.kind != "group":
            return None
        link = obj.link(part)
        if link is None:
            return None
        if link.kind == "soft":
            if budget <= 0:
                return None
            obj = _soft_target(file, walked, link.target or "", budget - 1)
            if obj is None:
                return None
        elif link.kind == "hard" and link.address is not None:
            obj = file.get(link.address, join(walked, part))
        else:
            return None
        walked = join(walked, part)
    return obj


def _entry(file: H5File, dir_path: str, link: Link, header_only: bool = False,
           known: Known | None = None) -> Entry | None:
    name = link.name.encode("utf-8", "surrogateescape")
    if not name or name in (b".", b"..") or len(name) > NAME_MAX or b"/" in name or b"\0" in name:
        log.warning("%s: link %r cannot be shown as a file name, skipped", dir_path, link.name)
        return None
    path = join(dir_path, link.name)
    if link.kind == "hard":
        if link.address is None:
            return Entry(name, BROKEN, path, error=FormatError(f"{path}: hard link without an address"))
        hit = None if known is None else known(link.address)
        if hit is not None:
            return Entry(name, hit[0], path, link.address, hit[1])
        try:
            obj = file.get(link.address, path)
            if header_only and not numbers_from_header(obj):
                raise BeyondHeader
            return Entry(name, _KINDS[obj.kind], path, link.address, numbers(obj))
        except BeyondHeader:
            raise
        except Exception as exc:  # a broken object must not hide the rest of its group
            if getattr(exc, "transient", False):
                raise   # a network fault: the listing fails now, and is made again next time
            return Entry(name, BROKEN, path, link.address, error=exc)
    if link.kind == "soft":
        return Entry(name, SYMLINK, path, target=soft_link_text(dir_path, link.target or ""),
                     soft_target=link.target or "")
    if link.kind == "external":
        target = f"{link.filename or ''}:{link.target or ''}"
        return Entry(name, SYMLINK, path, target=target.encode("utf-8", "surrogateescape"))
    log.warning("%s: link of unknown kind %r skipped", path, link.kind)
    return None


def soft_link_text(dir_path: str, target: str, suffix: str = "") -> bytes:
    """The symlink text of a soft link to `target` in the group at `dir_path` (its `.npy`
    symlink's with `suffix`): it changes when the group moves to another depth."""
    return (soft_link_target(dir_path, target) + suffix).encode("utf-8", "surrogateescape")


def soft_link_target(dir_path: str, target: str) -> str:
    """The symlink text for HDF5 soft link `target` found in the group at `dir_path`."""
    if not target.startswith("/"):
        return target
    depth = len([c for c in dir_path.split("/") if c])
    return "/".join([".."] * depth + [c for c in target.split("/") if c]) or "."


# -- stat numbers -----------------------------------------------------------------------------

NUMBERS_NBYTES = 200   # a Numbers record kept in the object's state


def numbers(obj: H5Object) -> Numbers:
    """The stat numbers of `obj` (kept in its state); st_blocks is left None where the chunk
    index must be walked."""
    return obj.cached("numbers", partial(_numbers, obj), NUMBERS_NBYTES)


def times_ns(obj: H5Object) -> tuple[int | None, int | None]:
    """The modification and change times of `obj` as its stat numbers give them (ns)."""
    mtime, ctime = obj.mtime, obj.ctime
    return None if mtime is None else int(mtime * 1e9), None if ctime is None else int(ctime * 1e9)


def _numbers(obj: H5Object) -> Numbers:
    nlink, (mtime_ns, ctime_ns) = max(1, int(obj.nlink)), times_ns(obj)
    if obj.kind == "datatype":
        return Numbers(nlink, mtime_ns, size=len(datatype_text(obj)), ctime_ns=ctime_ns)
    if obj.kind != "dataset":
        return Numbers(nlink, mtime_ns, ctime_ns=ctime_ns)
    npy_size, npy_error = 0, None
    try:
        npy_size = npy_header_size(obj.npy_dtype, obj.npy_shape) + int(obj.npy_body_size)
    except Exception as exc:  # noqa: BLE001 - only the .npy view is lost
        if getattr(exc, "transient", False):
            raise   # a network fault is not the view's: nothing is kept of it
        npy_error = exc
    blocks = None if _walks_index(obj) else _blocks(obj.storage_size)
    return Numbers(nlink, mtime_ns, int(obj.raw_size), blocks, npy_size, npy_error, obj.sparse, ctime_ns)


def storage_blocks(ds) -> int:
    """st_blocks of a dataset, walking its chunk index if need be (I/O)."""
    return _blocks(ds.storage_size)


def numbers_from_header(obj: H5Object) -> bool:
    """True when `numbers(obj)` needs nothing beyond the object's header (no heap, no index
    structure, no other file, no decoding of variable-length data)."""
    if not obj.headers_local:
        return False
    if obj.kind != "dataset":
        return True
    try:
        if is_converted(obj.datatype):
            return False
        if obj.facts_from_header:  # compact or contiguous in this file
            return True
        lay = obj.layout
        return lay.chunked and (lay.index.address is None or lay.index.index_type in _OPENED_FROM_HEADER)
    except Exception:  # noqa: BLE001 - the worker computing them reports it
        return False


def _walks_index(ds) -> bool:
    if not ds.headers_local:   # an HSDS dataset tells its allocated size itself
        return False
    lay = ds.layout
    return lay.chunked and lay.index.address is not None and lay.index.index_type in _WALKED


def _blocks(nbytes: int) -> int:
    return (int(nbytes) + 511) // 512


# -- facts and attributes ---------------------------------------------------------------------

def facts(obj: H5Object, npy: bool = False) -> dict[str, str]:
    """The h5fs facts of `obj` (xattrs `user.h5fs.*`), of its `.npy` view when `npy`."""
    out: dict[str, str] = {}
    for key, value in obj.facts().items():
        if key.startswith("attr."):
            log.warning("%s: engine fact %r clashes with the attribute namespace", obj.path, key)
            continue
        out[str(key)] = value if isinstance(value, str) else str(value)
    out["kind"] = obj.kind
    out["address"] = str(obj.address)
    out["path"] = obj.path
    if npy:
        out["view"] = "npy"
    return out


def datatype_text(obj: H5Object) -> bytes:
    """The content of the small read-only file that shows a named datatype."""
    return (obj.facts().get("dtype", "") + "\n").encode("utf-8", "surrogateescape")


def attributes(obj: H5Object) -> dict[str, Attribute]:
    """An object's attributes by name (the first of duplicate names wins)."""
    out: dict[str, Attribute] = {}
    for attr in obj.attributes():
        out.setdefault(attr.name, attr)
    return out
