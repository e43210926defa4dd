"""What the round-trip tests share (the one place: no round-trip module imports another):
making files with libhdf5 (any format bound, 2-, 4- and 8-byte offsets and lengths; the files of
several modules: messages, chunk indexes, dense storage, VDS; libhdf5's C API through ctypes),
Hypothesis settings and strategies, checking one structure against the bytes libhdf5 stored, and
a walker that finds every structure of a file.

`structures(path)` opens a file with h5fs's engine and yields every structure instance in it, each
a `Structure`: its kind, where it lives (and where its bytes start in the file), the bytes
libhdf5 stored, a decoder and an encoder. `check(s)` decodes and encodes one: the bytes are equal
(checksums included), and a record with one field changed survives encode -> decode;
`checked(path)` does both for a whole file.

The walker starts at the superblock (and its driver information block) and follows every object
header (each object once, by address: hard links, shared messages in other headers), every
message in them, and what the messages name: symbol-table groups (local heap, v1 B-tree nodes,
symbol table nodes), dense link and attribute storage (fractal heap blocks, v2 B-tree nodes, heap
IDs, the messages in the heap), the shared-message (SOHM) table, lists, index and heap (and the
message bodies there), free-space managers (the file's, named by the file space info message, and
each fractal heap's), every dataset's chunk index (every node, block and page of each index
type), the names of external files, VDS mapping blocks, and the global heap collections that
reading vlen data and references touches. Each structure is one small generator function below;
a kind the walker meets but cannot encode comes with `encode=None` (`check` refuses it, the
tests count it).
"""

from __future__ import annotations

import ctypes
import glob
import os
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

import h5py
import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st

# builders test_engine and test_datatype own (their own tests use them): the round-trip modules
# reach them only through here; every other builder they use lives in this module
from datatype_support import PLAIN, bfloat16, custom_float, opaque, partial_int, py, vax_float  # noqa: F401
from datatype_support import _write_revised_refs as write_revised_refs  # noqa: F401

from h5fs.format import btree_v1 as B1
from h5fs.format import btree_v2 as bt
from h5fs.format import extensible_array as ea
from h5fs.format import fixed_array as fa
from h5fs.format import fractal_heap as fh
from h5fs.format import free_space_manager as FS
from h5fs.format import global_heap as gh
from h5fs.format import local_heap as LH
from h5fs.format import object_header as OH
from h5fs.format import selection as S
from h5fs.format import superblock as SB
from h5fs.format import symbol_table_node as SNOD
from h5fs.format import vds_mapping
from h5fs.format.codec import Reader, Sizes, Writer
from h5fs.format.messages import dataspace as DS
from h5fs.format.messages import datatype as D
from h5fs.format.messages import external_files as E
from h5fs.format.messages import filter_pipeline as P
from h5fs.format.messages import layout as L
from h5fs.format.messages import shared
from h5fs.format.messages import sohm_table as T
from h5fs.format.object_header import FLAG_SHARED, RawMessage
from h5fs.format.symbol_table_entry import CACHE_STAB
from h5fs.model import messages as M
from h5fs.model.dataset import Dataset
from h5fs.model.file import H5File
from h5fs.model.group import Group
from h5fs.model.varlen_views import needs_decoding
from h5fs.storage.fractal_heap import reader as fh_reader
from h5fs.storage import btree_v1 as b1_reader
from h5fs.storage.btree_v2 import reader as bt_reader
from h5fs.storage.index.extensible_array import reader as ea_reader
from h5fs.storage.index import fixed_array as fa_reader
from h5fs.storage import global_heap as gh_reader
from h5fs.storage import local_heap as lh_reader

# -- files libhdf5 writes ----------------------------------------------------------------------

LIBVERS = {"earliest": h5py.h5f.LIBVER_EARLIEST, "v108": h5py.h5f.LIBVER_V18, "v110": h5py.h5f.LIBVER_V110,
           "v114": h5py.h5f.LIBVER_V114, "latest": h5py.h5f.LIBVER_LATEST}
# (size of offsets, size of lengths) of the message files, in every format bound
FILE_SIZES = [(8, 8), (4, 4), (2, 4)]
HID = ctypes.c_int64


def new_file(path, libver="latest", sizes=(8, 8), fcpl=None) -> h5py.File:
    """An h5py File with these format bounds and field widths (skips what libhdf5 refuses)."""
    fcpl = fcpl or h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fcpl.set_sizes(*sizes)
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(LIBVERS[libver], h5py.h5f.LIBVER_LATEST)
    try:
        fid = h5py.h5f.create(str(path).encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl)
    except Exception as e:  # noqa: BLE001 - libhdf5 refuses some combinations of widths
        pytest.skip(f"libhdf5 refuses sizes {sizes}: {e}")
    return h5py.File(fid)


def build_files(tmp_path_factory, builders: dict[str, Callable]) -> dict[str, Any]:
    """name -> path of each file `builders[name](path)` wrote, each in its own directory."""
    out = {}
    for name, build in builders.items():
        path = tmp_path_factory.mktemp(name) / f"{name}.h5"
        build(path)
        out[name] = path
    return out


def libhdf5(name: str | None = None):
    """The libhdf5 inside the h5py wheel (or its function `name`), for what h5py does not expose."""
    libdir = os.path.join(os.path.dirname(h5py.__file__), os.pardir, "h5py.libs")
    libs = glob.glob(os.path.join(libdir, "libhdf5-*.so*"))
    if not libs:
        pytest.skip("cannot reach the libhdf5 h5py bundles")
    lib = ctypes.CDLL(libs[0])
    return lib if name is None else getattr(lib, name)


def c_call(name: str, *args, types=None) -> int:
    """libhdf5's function `name` (arguments: an hid_t and unsigned ints unless `types` says
    otherwise); a negative return fails."""
    fn = libhdf5(name)
    fn.argtypes = types or [HID] + [ctypes.c_uint] * (len(args) - 1)
    fn.restype = HID
    out = fn(*args)
    assert out >= 0, name
    return out


def addresses(path) -> dict[str, int]:
    """Object header address of every object in the file, by path (h5py's view)."""
    out = {}
    with h5py.File(path, "r") as f:
        f.visit(lambda name: out.update({"/" + name: h5py.h5o.get_info(f[name].id).addr}) and None)
    return out


def objects(hf: H5File) -> Iterator[tuple[str, Any]]:
    """(path, object) of every object reachable by hard links, once each (h5fs's engine's view)."""
    seen: set[int] = set()
    todo = [("/", hf.root_address)]
    while todo:
        path, addr = todo.pop()
        if addr in seen:
            continue
        seen.add(addr)
        obj = hf.get(addr, path)
        yield path, obj
        if isinstance(obj, Group):
            todo += [(f"{path.rstrip('/')}/{link.name}", link.address) for link in obj.links()
                     if link.address is not None]


def btree_k_fcpl(internal: int, leaf: int, chunks: int | None = None):
    """A file creation property list with these v1 B-tree K values (a group's internal and leaf
    nodes, a chunk index's nodes): small ones make deep trees from few entries."""
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    c_call("H5Pset_sym_k", fcpl.id, internal, leaf)
    if chunks is not None:
        c_call("H5Pset_istore_k", fcpl.id, chunks)
    return fcpl


def sohm_fcpl(list_max: int, btree_min: int):
    """Two shared-message indexes (datatypes and attributes; dataspaces, fill values and filter
    pipelines), each a list up to `list_max` messages."""
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    c_call("H5Pset_shared_mesg_nindexes", fcpl.id, 2)
    c_call("H5Pset_shared_mesg_index", fcpl.id, 0, 1 << M.DATATYPE | 1 << M.ATTRIBUTE, 1)
    c_call("H5Pset_shared_mesg_index", fcpl.id, 1, 1 << M.DATASPACE | 1 << M.FILL | 1 << M.FILTERS, 1)
    c_call("H5Pset_shared_mesg_phase_change", fcpl.id, list_max, btree_min)
    return fcpl


def shared_messages_fcpl():
    """A file creation property list that shares every message type through one v2 B-tree
    index (no list phase), however small the message."""
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    c_call("H5Pset_shared_mesg_nindexes", fcpl.id, 1)
    c_call("H5Pset_shared_mesg_index", fcpl.id, 0, 0x182A, 0)
    c_call("H5Pset_shared_mesg_phase_change", fcpl.id, 0, 0)
    return fcpl


# links and attributes of every kind: what h5py cannot make, through libhdf5's C API

UD_LINK = 65               # a user-defined link class registered below
_TRAVERSE = ctypes.CFUNCTYPE(HID, ctypes.c_char_p, HID, ctypes.c_void_p, ctypes.c_size_t, HID, HID)


class _LinkClass(ctypes.Structure):   # H5L_class_t, version 1
    _fields_ = [("version", ctypes.c_int), ("id", ctypes.c_int), ("comment", ctypes.c_char_p),
                ("create", ctypes.c_void_p), ("move", ctypes.c_void_p), ("copy", ctypes.c_void_p),
                ("traverse", _TRAVERSE), ("delete", ctypes.c_void_p), ("query", ctypes.c_void_p)]


_never_traversed = _TRAVERSE(lambda *args: -1)   # kept alive: libhdf5 holds the pointer
_UD_CLASS = _LinkClass(1, UD_LINK, b"h5fs test link", None, None, None, _never_traversed, None, None)


def ud_link(group: h5py.Group, name: bytes, value: bytes) -> None:
    c_call("H5Lregister", ctypes.byref(_UD_CLASS), types=[ctypes.POINTER(_LinkClass)])
    c_call("H5Lcreate_ud", group.id.id, name, UD_LINK, value, len(value), 0, 0,
           types=[HID, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, HID, HID])


def utf8_attribute(obj, name: str, value: int) -> None:
    """An attribute whose name libhdf5 labels UTF-8 (h5py's attrs leave the label ASCII)."""
    acpl = c_call("H5Pcreate", HID.in_dll(libhdf5(), "H5P_CLS_ATTRIBUTE_CREATE_ID_g").value, types=[HID])
    c_call("H5Pset_char_encoding", acpl, 1, types=[HID, ctypes.c_int])
    space = h5py.h5s.create(h5py.h5s.SCALAR)
    aid = c_call("H5Acreate2", obj.id.id, name.encode(), h5py.h5t.STD_I32LE.id, space.id, acpl, 0,
                 types=[HID, ctypes.c_char_p, HID, HID, HID, HID])
    buf = np.array(value, "<i4")
    c_call("H5Awrite", aid, h5py.h5t.NATIVE_INT32.id, buf.ctypes.data, types=[HID, HID, ctypes.c_void_p])
    c_call("H5Aclose", aid, types=[HID])
    c_call("H5Pclose", acpl, types=[HID])


def utf8_lcpl():
    lcpl = h5py.h5p.create(h5py.h5p.LINK_CREATE)
    lcpl.set_char_encoding(h5py.h5t.CSET_UTF8)
    return lcpl


def group(parent, name: str, tracked=False, phase=None, estimates=None, times=False) -> h5py.Group:
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    if tracked:
        order = h5py.h5p.CRT_ORDER_TRACKED | h5py.h5p.CRT_ORDER_INDEXED
        gcpl.set_link_creation_order(order)
        gcpl.set_attr_creation_order(order)
    if phase:
        c_call("H5Pset_link_phase_change", gcpl.id, *phase)
    if estimates:
        c_call("H5Pset_est_link_info", gcpl.id, *estimates)
    gcpl.set_obj_track_times(times)
    return h5py.Group(h5py.h5g.create(parent.id, name.encode(), gcpl=gcpl))


def links_and_attributes(g: h5py.Group, target: h5py.Dataset, nlinks: int, nattrs: int) -> None:
    """Links of every kind (hard, soft, external, user-defined; long and UTF-8 names) and attributes."""
    g["hard"] = target
    g["soft"] = h5py.SoftLink(target.name)
    g["ext"] = h5py.ExternalLink("other.h5", "/x/y")
    g["l" * 300] = h5py.SoftLink("/")
    g.id.links.create_soft("grüße".encode(), b"/d", lcpl=utf8_lcpl())
    ud_link(g, b"ud", b"payload\0\1")
    for i in range(nlinks):
        g[f"s{i:02d}"] = h5py.SoftLink(f"/target{i}")
    for i in range(nattrs):
        g.attrs[f"a{i:02d}"] = np.arange(i + 1, dtype="<i2")
    utf8_attribute(g, "größe", 7)


def messages_file(path, libver: str, sizes) -> None:
    """Every message of groups, links and attributes: comments, times, reference counts, shared
    (committed) datatypes, old-style, compact and dense groups, creation order."""
    with new_file(path, libver, sizes, btree_k_fcpl(5, 6, 20)) as f:
        d = f.create_dataset("d", data=np.arange(4, dtype="<i4"), track_times=True)
        h5py.h5o.set_comment(d.id, "a comment, é".encode())
        d.attrs["scalar"] = np.float64(1.5)
        d.attrs["text"] = "text"
        utf8_attribute(d, "größe", 7)
        f["hard"] = d                                   # two links: a reference count
        f["tdt"] = np.dtype("<i2")                      # committed: shared references to it
        typed = f.create_dataset("typed", data=[1, 2], dtype=f["tdt"])
        typed.attrs.create("typed", 3, dtype=f["tdt"])
        links_and_attributes(f.create_group("plain"), d, 2, 2)     # old-style in earliest, compact otherwise
        custom = group(f, "custom", phase=(12, 4), estimates=(9, 20), times=True)
        h5py.h5o.set_comment(custom.id, b"group comment")
        links_and_attributes(custom, d, 2, 0)
        links_and_attributes(group(f, "ordered", tracked=True), d, 1, 2)     # compact, creation order indexed
        links_and_attributes(group(f, "dense", tracked=True), d, 20, 12)     # dense links and attributes
        links_and_attributes(f.create_group("many"), d, 20, 12)              # dense, untracked (unless earliest)


# chunk indexes, dense storage, virtual datasets

def ints(shape, seed=0):
    return np.random.default_rng(seed).integers(0, 50, size=shape).astype("i4")


def _implicit(f, name, shape, maxshape, chunks):
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk(chunks)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    h5py.h5d.create(f.id, name.encode(), h5py.h5t.NATIVE_INT32, h5py.h5s.create_simple(shape, maxshape), dcpl=dcpl)
    f[name][...] = ints(shape)


def chunked_datasets(f, unlimited: bool) -> None:
    """Every chunk index, filtered and not: single, implicit, fixed array (unpaged and paged),
    extensible array (super blocks, paged data blocks), v2 B-tree (several levels)."""
    for comp in (None, "gzip"):
        sfx = comp or "raw"
        f.create_dataset(f"single_{sfx}", data=ints((20, 30)), chunks=(20, 30), compression=comp)
        f.create_dataset(f"fa_{sfx}", data=ints((40, 50)), chunks=(10, 10), compression=comp)
        p = f.create_dataset(f"fapaged_{sfx}", (5001,), "i2", chunks=(2,), compression=comp)
        p[0:100] = 7
        p[4200:5001] = np.arange(801)
        if not unlimited:
            continue
        e = f.create_dataset(f"ea_{sfx}", data=ints((600, 7)), chunks=(2, 7), maxshape=(None, 7), compression=comp)
        e.resize((650, 7))
        e[640:650] = 5
        ep = f.create_dataset(f"eapaged_{sfx}", (200000,), "u1", chunks=(1,), maxshape=(None,), compression=comp)
        for i in (0, 3, 250, 131055, 131061, 160000, 199999):
            ep[i] = 1 + i % 200
        b = f.create_dataset(f"bt_{sfx}", (120, 90), "i4", chunks=(1, 1), maxshape=(None, None), compression=comp)
        b[...] = ints((120, 90))
        f.create_dataset(f"btsmall_{sfx}", data=ints((20, 25)), chunks=(3, 4), maxshape=(None, None),
                         compression=comp)
    _implicit(f, "implicit", (10, 11), (25, 30), (3, 4))


def filtered_group(f, name: str, targets: dict[str, str]) -> None:
    """A group whose link heap is deflated (h5py does not expose H5Pset_deflate on a gcpl)."""
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    c_call("H5Pset_deflate", gcpl.id, 6)
    h5py.h5g.create(f.id, name.encode(), gcpl=gcpl)
    for link, target in targets.items():
        f[name][link] = h5py.SoftLink(target)


def dense_file(path, sizes) -> None:
    """Dense links (name and creation-order indexes, child indirect blocks, a huge link), dense
    attributes (a huge one, creation order), deflated link heaps (root direct block and
    indirect blocks, filtered huge objects)."""
    small = sizes[0] == 2                     # a 64 KiB file
    n, tlen = (60, 90) if small else (400, 200)
    if sizes == (8, 8):                       # enough for child indirect blocks
        n, tlen = 3000, 1
    with new_file(path, "latest", sizes) as f:
        f.create_dataset("x", data=[1])
        g = f.create_group("g", track_order=True)
        for i in range(n):
            g[f"link{i:05d}" + "x" * (i % 37)] = h5py.SoftLink("/" + "t" * (i % tlen or 200))
        g["huge"] = h5py.SoftLink("/" + "h" * 5000)
        d = f.create_dataset("d", data=[1.0])
        for i in range(30):
            d.attrs[f"attr{i:02d}"] = np.full(i + 1, i, dtype="<i8")
        d.attrs["huge"] = np.arange(3000 if small else 50000, dtype="<i4")
        o = f.create_group("o", track_order=True)
        for i in range(20):
            o.attrs[f"z{20 - i:02d}"] = i
        filtered_group(f, "fsmall", {f"s{i}": "/q" for i in range(9)} | {"huge": "/" + "w" * 5000})
        if not small:
            big = {f"l{i:05d}" + "y" * (i % 50): "/" + "q" * (100 + i % 300) for i in range(600)}
            big["huge1"] = "/" + "".join(chr(97 + (i * 7) % 26) for i in range(6000))
            filtered_group(f, "fbig", big)


def select(space, how: str):
    """Select on a 2-D (10, 12) dataspace: all, none, points, a regular or irregular hyperslab."""
    if how == "all":
        space.select_all()
    elif how == "none":
        space.select_none()
    elif how == "points":
        space.select_elements(np.array([(1, 2), (9, 11), (0, 0), (4, 7)], dtype="u8"))
    elif how == "regular":
        space.select_hyperslab((1, 2), (3, 2), (2, 3), (1, 2))
    else:
        space.select_hyperslab((0, 0), (2, 3))
        space.select_hyperslab((5, 6), (3, 1), op=h5py.h5s.SELECT_OR)
    return space


def vds_file(path, libver) -> None:
    """Virtual datasets whose mappings use all, regular and irregular hyperslab selections,
    several source files, the file itself (".") and an unlimited mapping."""
    with new_file(path.parent / "src.h5", libver) as f:
        f["data"] = np.arange(120, dtype="<i4").reshape(10, 12)
    with new_file(path, libver) as f:
        f["s"] = np.arange(120, dtype="<i4").reshape(10, 12)
        lay = h5py.VirtualLayout((4, 10, 12), "<i4")
        lay[0] = h5py.VirtualSource("src.h5", "data", shape=(10, 12))
        lay[1] = h5py.VirtualSource(".", "s", shape=(10, 12))
        lay[2, 0:5, ::3] = h5py.VirtualSource("src.h5", "data", shape=(10, 12))[::2, 0:4]
        f.create_virtual_dataset("v", lay, fillvalue=-1)
        same = h5py.VirtualLayout((3, 10, 12), "<i4")
        for i in range(3):
            same[i] = h5py.VirtualSource(".", "s", shape=(10, 12))
        f.create_virtual_dataset("x", same)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        for how in ("irregular", "regular"):   # libhdf5 refuses point selections in mappings
            vspace = select(h5py.h5s.create_simple((10, 12)), how)
            dcpl.set_virtual(vspace, b"src.h5", b"data", select(h5py.h5s.create_simple((10, 12)), how))
        h5py.h5d.create(f.id, b"w", h5py.h5t.STD_I32LE, h5py.h5s.create_simple((10, 12)), dcpl=dcpl)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        vspace = h5py.h5s.create_simple((3, 5), (3, h5py.h5s.UNLIMITED))
        vspace.select_hyperslab((0, 0), (1, h5py.h5s.UNLIMITED), (1, 5), (3, 5))
        sspace = h5py.h5s.create_simple((3, 5), (3, h5py.h5s.UNLIMITED))
        sspace.select_hyperslab((0, 0), (1, h5py.h5s.UNLIMITED), (1, 5), (3, 5))
        dcpl.set_virtual(vspace, b"src.h5", b"grow", sspace)
        h5py.h5d.create(f.id, b"u", h5py.h5t.STD_I32LE, vspace, dcpl=dcpl)


# -- Hypothesis --------------------------------------------------------------------------------

HYP = settings(max_examples=100, deadline=None)
SIZES = st.sampled_from([Sizes(2, 2), Sizes(4, 4), Sizes(8, 8), Sizes(4, 8), Sizes(2, 8), Sizes(8, 4)])


def uint(nbytes: int):
    return st.integers(0, (1 << (8 * nbytes)) - 1)


def address(s: Sizes):
    return st.none() | st.integers(0, s.undefined - 1)


def exactly(n: int):
    return st.binary(min_size=n, max_size=n)


def names(min_size=0, max_size=40):
    """Names as stored: any bytes but NUL."""
    return st.binary(min_size=min_size, max_size=max_size).filter(lambda b: b"\0" not in b)


def text(min_size=0, max_size=40):
    """Names as h5fs decodes them (surrogateescape keeps every byte)."""
    return names(min_size, max_size).map(lambda b: b.decode("utf-8", "surrogateescape"))


def with_sizes(make):
    """A strategy of (sizes, record) where the record strategy `make(sizes)` depends on the sizes."""
    return SIZES.flatmap(lambda s: st.tuples(st.just(s), make(s)))


def roundtrip(record, encode, decode) -> None:
    """A valid record encodes, decodes back to itself, and encodes again to the same bytes."""
    raw = encode(record)
    back = decode(raw)
    assert back == record
    assert encode(back) == raw


def encoded(encode, record, sizes: Sizes = Sizes()) -> bytes:
    """What an `encode(w: Writer, record)` writes."""
    w = Writer(sizes)
    encode(w, record)
    return w.getvalue()


def check_encoder(mtype: int, sizes: Sizes, record) -> None:
    """A valid message record (or shared reference) round trips through its codec."""
    decode, encode = codec(mtype, sizes)
    roundtrip(record, encode, decode)


# -- one structure against libhdf5's bytes -----------------------------------------------------


@dataclass(frozen=True)
class Structure:
    kind: tuple                          # kind[0] names the structure; the rest tells variants apart
    where: str
    raw: bytes                           # the bytes libhdf5 stored
    decode: Callable[[bytes], Any]
    encode: Callable[[Any], bytes] | None   # None: h5fs has no encoder for it (yet)
    change: Callable[[Any], Any] | None = None   # the record with a field or two changed
    slack: int = 0                       # undefined bytes (zeros, as libhdf5 writes them) that may follow
    at: tuple[int, ...] = ()             # where its bytes start in the file, block by block (none: inside another)


def check(s: Structure) -> Any:
    """decode -> encode gives libhdf5's bytes (and at most `slack` zeros less); a changed record
    survives encode -> decode. Returns the decoded record."""
    assert s.encode is not None, f"{s.kind} at {s.where}: no encoder"
    record = s.decode(s.raw)
    raw = s.encode(record)
    if raw != s.raw:
        tail = s.raw[len(raw):]
        assert s.raw[:len(raw)] == raw and len(tail) <= s.slack and not any(tail), \
            f"{s.kind} at {s.where}: encoded {raw.hex()}, stored {s.raw.hex()}"
    if s.change is not None:
        changed = s.change(record)
        assert changed != record and s.decode(s.encode(changed)) == changed, f"{s.kind} at {s.where}"
    return record


@dataclass
class Seen:
    """What round trips met, so each test can assert the variants it means to cover."""

    kinds: set

    def add(self, *kind) -> None:
        self.kinds.add(kind)


def changed_fields(**fields) -> Callable[[Any], Any]:
    return lambda record: replace(record, **fields)


# -- messages ----------------------------------------------------------------------------------

SHARED_REF = -1            # pseudo message type: the body of a message whose 'shared' flag is set


def codec(mtype: int, sizes: Sizes, whole: bool = True) -> tuple[Callable[[bytes], Any], Callable[[Any], bytes] | None]:
    """decode(bytes) and encode(record) of a message type (or of a shared reference); decode
    reads every byte unless `whole` is False (a padded body) or the type is the old modification
    time (its decoder leaves the two reserved bytes unread); encode is None for a type without an
    encoder."""
    if mtype == OH.CONTINUATION:
        return lambda raw: OH.decode_continuation(raw, sizes, "continuation"), \
            lambda record: OH.encode_continuation(record, sizes)
    dec = shared.decode if mtype == SHARED_REF else M.DECODERS[mtype]
    whole = whole and mtype != M.MTIME_OLD

    def decode(raw: bytes):
        r = Reader(raw, 0, sizes, f"message {mtype:#x}")
        record = dec(r)
        assert not whole or r.remaining() == 0, f"message {mtype:#x}: {r.remaining()} bytes left in {raw.hex()}"
        return record

    if mtype == SHARED_REF:
        return decode, lambda record: encoded(shared.encode, record, sizes)
    if mtype not in M.ENCODERS:
        return decode, None
    return decode, lambda record: M.encode(mtype, record, sizes)


def _changed_ref(r: shared.SharedRef) -> shared.SharedRef:
    if r.kind == shared.IN_SOHM_HEAP:
        return replace(r, heap_id=bytes(b ^ 0xFF for b in r.heap_id))
    return replace(r, address=0x1234)


def _changed_datatype(r: D.Datatype) -> D.Datatype:
    if isinstance(r, D.Enum):
        return replace(r, names=tuple(n + "_" for n in r.names))
    if isinstance(r, D.Array):
        return replace(r, dims=(*r.dims[:-1], 2 * r.dims[-1]), size=2 * r.size)
    if isinstance(r, D.Complex):
        return replace(r, form=(r.form + 1) % 3)
    return replace(r, size=r.size + 1)


def _changed_layout(r: L.DataLayout) -> L.DataLayout:
    if r.layout_class == L.CHUNKED:
        return replace(r, index=replace(r.index, address=0x1234), chunk_dims=(*r.chunk_dims[:-1], 3))
    if r.layout_class == L.COMPACT:
        return replace(r, compact_data=r.compact_data[::-1] + b"\1")
    if r.layout_class == L.CONTIGUOUS:
        return replace(r, address=0x1234, size=r.size + 8)
    return replace(r, vds_heap_index=r.vds_heap_index + 1)


def _changed_pipeline(r: P.FilterPipeline) -> P.FilterPipeline:
    first = r.filters[0]
    return replace(r, filters=(replace(first, client_data=first.client_data + (7,)),) + r.filters[1:])


# message type -> the record with a field or two changed, for every type with an encoder
CHANGES: dict[int, Callable[[Any], Any]] = {
    SHARED_REF: _changed_ref,
    M.LINK: lambda r: replace(r, creation_order=(r.creation_order or 0) + 5),
    M.LINK_INFO: changed_fields(heap_address=0x1234),
    M.ATTRIBUTE_INFO: changed_fields(name_index_address=0x1234),
    M.GROUP_INFO: changed_fields(max_compact=30, min_dense=20),
    M.ATTRIBUTE: lambda r: replace(r, data=r.data[::-1] + b"\1"),
    M.COMMENT: lambda r: r + " changed",
    M.MTIME: lambda r: r + 3600,
    M.MTIME_OLD: lambda r: r + 3600,
    M.SYMBOL_TABLE: changed_fields(heap_address=0x1234),
    M.BTREE_K: lambda r: replace(r, group_leaf=r.group_leaf + 1),
    M.REFCOUNT: lambda r: r + 1,
    M.SOHM_TABLE: changed_fields(table_address=0x1234),
    M.FSINFO: lambda r: replace(r, threshold=r.threshold + 1, managers=_moved(r.managers)),
    OH.CONTINUATION: lambda r: replace(r, length=r.length + 8),
    M.DATATYPE: _changed_datatype,
    M.DATASPACE: lambda r: replace(r, dims=tuple(d + 1 for d in r.dims), maxdims=(None,) * len(r.dims))
    if r.kind == DS.SIMPLE else replace(r, has_maxdims=True),
    M.LAYOUT: _changed_layout,
    M.FILTERS: _changed_pipeline,
    M.FILL: lambda r: replace(r, alloc_time=r.alloc_time % 3 + 1),
    M.FILL_OLD: lambda r: replace(r, value=(r.value or b"") + b"\x09"),
    M.EXTERNAL: lambda r: replace(r, slots=r.slots + (E.ExternalSlot(8, 16, 32),)),
}


def message(raw: RawMessage, where: str, sizes: Sizes, slack: int = 0) -> Structure:
    """One message body (`slack`: a version-1 header pads it to 8 bytes)."""
    mtype = SHARED_REF if raw.shared else raw.type
    known = mtype in (SHARED_REF, OH.CONTINUATION) or mtype in M.DECODERS
    decode, encode = codec(mtype, sizes, whole=not slack) if known else (None, None)
    return Structure(("message", mtype, bool(slack)), where, raw.data, decode, encode, CHANGES.get(mtype), slack)


# -- headers, the superblock, old-style groups ------------------------------------------------


def object_header(reader, header: OH.ObjectHeader, where: str) -> Structure:
    """A whole object header: its blocks one after the other (block 0, continuation blocks)."""
    s = reader.sizes
    raw = b"".join(reader.read(b.address, b.length) for b in header.blocks)

    def decode(buf: bytes) -> OH.ObjectHeader:
        blocks, pos = {}, 0
        for b in header.blocks:
            blocks[b.address], pos = buf[pos:pos + b.length], pos + b.length
        return OH.decode(blocks[header.address], header.address, s, where, lambda a, n: blocks[a][:n])

    kinds = {m.type for m in header.all_messages()}
    return Structure(("object header", header.version, "continued" if len(header.blocks) > 1 else "one block",
                      OH.NIL in kinds, any(b.gap for b in header.blocks)), where, raw, decode,
                     lambda h: b"".join(OH.encode_block(h, i) for i in range(len(h.blocks))), _changed_header,
                     at=tuple(b.address for b in header.blocks))


def _changed_header(h: OH.ObjectHeader) -> OH.ObjectHeader:
    """The first message's 'constant' flag flipped; the refcount or the times changed too."""
    first = h.blocks[0]
    msg = replace(first.messages[0], flags=first.messages[0].flags ^ OH.FLAG_CONSTANT)
    h = replace(h, blocks=(replace(first, messages=(msg,) + first.messages[1:]),) + h.blocks[1:])
    if h.version == 1:
        return replace(h, refcount=h.refcount + 3, nmesgs=h.nmesgs + 1)
    return replace(h, times=tuple(t + 1 for t in h.times)) if h.times else h


def superblock(hf: H5File) -> Iterator[Structure]:
    """The superblock (the root group's symbol table entry in versions 0-1) and the driver
    information block it may name."""
    sb = hf.superblock
    raw = hf.reader.read(0, len(SB.encode(sb)))
    change = {"eof_address": sb.eof_address + 4096}
    if sb.version >= 2:
        change["root_header_address"] = sb.root_header_address + 8
    else:
        change["root_entry"] = replace(sb.root_entry, heap_address=999)
    yield Structure(("superblock", sb.version), "superblock", raw, lambda b: SB.decode(b, sb.location), SB.encode,
                    changed_fields(**change), at=(0,))
    if sb.driver_info is not None:
        yield Structure(("driver info", sb.driver_info.driver_id), "driver information block",
                        hf.reader.read(sb.driver_info_address, len(SB.encode_driver_info(sb.driver_info))),
                        SB.decode_driver_info, SB.encode_driver_info, lambda d: replace(d, data=d.data + b"\1"),
                        at=(sb.driver_info_address,))


def local_heap(reader, address: int) -> Structure:
    """A local heap: its prefix (padded to 8 bytes) and its data segment, one after the other."""
    s = reader.sizes
    heap = lh_reader.read(reader, address, "local heap")
    size = LH.prefix_size(s)
    return Structure(("local heap", "free list" if heap.free else "full"), f"local heap at {address}",
                     reader.read(address, size) + reader.read(heap.data_address, len(heap.data)),
                     lambda b: LH.decode(b[:size], b[size:], s),
                     lambda h: LH.encode_prefix(h, s) + LH.encode_data(h, s),
                     lambda h: _other_free_list(h, s), at=(address, heap.data_address))


def _other_free_list(h: LH.LocalHeap, s: Sizes) -> LH.LocalHeap:
    """The heap moved, with another free list (its blocks' headers are in the data segment)."""
    free = h.free[:-1] if h.free else (LH.FreeBlock(len(h.data) - 2 * s.length, 2 * s.length),)
    return replace(h, data_address=12345, free=free, data=LH.encode_data(replace(h, free=free), s))


def btree_v1(reader, address: int, node_type: int, rank: int, k: int) -> Iterator[Structure]:
    """Every node of a v1 B-tree (group or chunk), parents first; returns the leaves' children."""
    s, leaves, stack = reader.sizes, [], [address]
    while stack:
        addr = stack.pop()
        node = b1_reader.read_node(reader, addr, node_type, rank, "v1 B-tree")
        sibling = {"left": 4096, "right": None} if node.left is None else {"left": None}
        yield Structure(("v1 B-tree", node_type, node.level), f"v1 B-tree node at {addr}",
                        reader.read(addr, B1.node_size(node_type, s, rank, k)),
                        lambda b, a=addr: B1.decode_node(b, a, node_type, rank, s), lambda n: B1.encode_node(n, s, k),
                        changed_fields(**sibling), at=(addr,))
        (stack if node.level else leaves).extend(node.children)
    return leaves


def symbol_table(reader, sb: SB.Superblock, btree: int, heap: int) -> Iterator[Structure]:
    """A symbol-table group: its local heap, B-tree nodes and symbol table nodes."""
    s, capacity = reader.sizes, 2 * sb.group_leaf_k
    yield local_heap(reader, heap)
    for addr in (yield from btree_v1(reader, btree, B1.GROUP, 0, sb.group_internal_k)):
        raw = reader.read(addr, SNOD.node_size(s, capacity))
        yield Structure(("symbol table node", len(SNOD.decode(raw, s, capacity).entries) == capacity),
                        f"symbol table node at {addr}", raw, lambda b: SNOD.decode(b, s, capacity),
                        lambda n: SNOD.encode(n, s),
                        lambda n: replace(n, entries=n.entries[1:] + (replace(n.entries[0], header_address=777),)),
                        at=(addr,))


def global_heap_collection(reader, address: int) -> Structure:
    s = reader.sizes
    size = gh.collection_size(reader.read(address, gh.header_size(s)), s, address)
    raw = reader.read(address, size)
    free = any(isinstance(e, gh.FreeSpace) for e in gh.decode_collection(raw, s, address).entries)
    return Structure(("global heap", "free space" if free else "full"), f"global heap collection at {address}", raw,
                     lambda b: gh.decode_collection(b, s, address), gh.encode_collection, _more_referenced,
                     at=(address,))


def _more_referenced(col: gh.Collection) -> gh.Collection:
    """The first object referenced once more."""
    i = next(i for i, e in enumerate(col.entries) if isinstance(e, gh.HeapObject))
    entry = col.entries[i]
    return replace(col, entries=col.entries[:i] + (replace(entry, refcount=entry.refcount + 1),) + col.entries[i + 1:])


# -- indexes and heaps -------------------------------------------------------------------------


def btree_v2(reader, address: int, decode_record=None, encode_record=None) -> Iterator[Structure]:
    """The header, every node and the records of every node of the v2 B-tree at `address`."""
    s = reader.sizes
    raw = reader.read(address, bt.header_size(s))
    hdr = bt.decode_header(raw, address, s)
    yield Structure(("btree", hdr.type, hdr.depth), f"v2 B-tree at {address}", raw,
                    lambda b: bt.decode_header(b, address, s), bt.encode_header,
                    lambda h: replace(h, total_records=h.total_records + 7, root_address=12345), at=(address,))
    decode_record = decode_record or bt.record_decoder(hdr.type)
    encode_record = encode_record or bt.record_encoder(hdr.type)
    total = 0
    stack = [] if hdr.root_address is None else [(hdr.root_address, hdr.root_nrecords, hdr.depth)]
    while stack:
        addr, nrec, depth = stack.pop()
        raw = reader.read(addr, hdr.node_size)
        node = bt.decode_node(raw, hdr, addr, nrec, depth)
        yield Structure(("btree node", hdr.type, depth), f"v2 B-tree node at {addr}", raw,
                        lambda b, a=addr, n=nrec, d=depth: bt.decode_node(b, hdr, a, n, d),
                        lambda r: bt.encode_node(hdr, r), _moved_child if depth else None, at=(addr,))
        yield _records(hdr, node, decode_record, encode_record)
        total += nrec
        stack += [(ch.address, ch.nrecords, depth - 1) for ch in node.children]
    assert total == hdr.total_records, f"v2 B-tree at {address}: {total} records found, {hdr.total_records} counted"


def _moved_child(node: bt.Node) -> bt.Node:
    first = node.children[0]
    return replace(node, children=(replace(first, address=first.address + 8),) + node.children[1:])


def _records(hdr: bt.BTreeV2Header, node: bt.Node, decode_record, encode_record) -> Structure:
    rs = hdr.record_size

    def decode(raw: bytes) -> list:
        records = tuple(raw[i:i + rs] for i in range(0, len(raw), rs))
        return bt.decode_records(hdr, replace(node, records=records), decode_record, "records")

    return Structure(("btree records", hdr.type), f"records of the v2 B-tree node at {node.address}",
                     b"".join(node.records), decode, lambda recs: b"".join(bt.encode_records(hdr, encode_record, recs)))


def btree_records(reader, address: int, decode_record=None) -> list:
    return list(bt_reader.iterate(reader, address, decode_record))


def heap_blocks(heap: fh_reader.FractalHeap) -> Iterator[tuple[str, int, int, int, fh.DirectEntry | None]]:
    """(kind, address, size or rows, block offset, entry) of every block of the heap."""
    h, g = heap.header, heap.geometry
    if h.root_address is None:
        return
    if h.root_rows == 0:
        yield "direct", h.root_address, h.start_block_size, 0, \
            fh.DirectEntry(h.root_address, h.root_filtered_size, h.root_filter_mask)
        return
    stack = [(h.root_address, h.root_rows, 0)]
    while stack:
        addr, nrows, off = stack.pop()
        yield "indirect", addr, nrows, off, None
        ib = heap.read_indirect(addr, nrows, off)
        for i, entry in enumerate(ib.direct):
            row, col = divmod(i, g.width)
            size = g.row_block_size[row]
            if entry.address is not None:
                yield "direct", entry.address, size, off + heap._row_offset(row) + col * size, entry
        for j, child in enumerate(ib.indirect):
            row, col = divmod(j, g.width)
            row += g.max_direct_rows
            size = g.row_block_size[row]
            if child is not None:
                stack.append((child, heap.rows_for_block(size), off + heap._row_offset(row) + col * size))


def fractal_heap(reader, address: int) -> Iterator[Structure]:
    """The header and every block of the fractal heap at `address` (filtered blocks de-filtered:
    their encoding is the bytes before the filters). Returns the heap."""
    s = reader.sizes
    heap = fh_reader.FractalHeap(reader, address)
    h, g = heap.header, heap.geometry
    root = "indirect root" if h.root_rows else "direct root"
    yield Structure(("heap", "filtered" if h.filter_len else "plain", root),
                    f"fractal heap at {address}", reader.read(address, fh.header_size(s, h.filter_len)),
                    lambda b: fh.decode_header(b, address, s, "heap"), lambda r: fh.encode_header(r, s),
                    lambda r: replace(r, managed_size=r.managed_size + 512, root_address=4096,
                                      tiny_count=r.tiny_count + 1), at=(address,))
    for kind, addr, size, off, entry in heap_blocks(heap):
        if kind == "indirect":
            raw = reader.read(addr, heap.indirect_block_size(size))
            assert fh.decode_indirect(raw, g, addr, size, "heap").block_offset == off
            yield Structure(("heap iblock", "child" if off else "root"), f"heap indirect block at {addr}", raw,
                            lambda b, a=addr, n=size: fh.decode_indirect(b, g, a, n, "heap"),
                            lambda r: fh.encode_indirect(r, g),
                            lambda r, o=off: replace(r, block_offset=o + 64,
                                                     direct=(fh.DirectEntry(None),) * len(r.direct)), at=(addr,))
            continue
        if h.filter_len:
            raw = heap._defilter(reader.read(addr, entry.filtered_size), entry.filter_mask, size, "heap")
        else:
            raw = reader.read(addr, size)
        assert fh.decode_direct(raw, g, "heap").block_offset == off
        yield Structure(("heap dblock", "checksummed" if g.checksummed else "plain"), f"heap direct block at {addr}",
                        raw, lambda b: fh.decode_direct(b, g, "heap"), lambda r: fh.encode_direct(r, g),
                        lambda r, o=off: replace(r, block_offset=o + 8, payload=bytes(len(r.payload))), at=(addr,))
    if h.huge_btree_address is not None:
        assert len(btree_records(reader, h.huge_btree_address)) == h.huge_count
        yield from btree_v2(reader, h.huge_btree_address)
    if h.free_space_manager_address is not None:
        yield from free_space_manager(reader, h.free_space_manager_address)
    return heap


def free_space_manager(reader, address: int) -> Iterator[Structure]:
    """A free-space manager (the file's or a fractal heap's): its header and its section list."""
    s, what = reader.sizes, f"free-space manager at {address}"
    raw = reader.read(address, FS.header_size(s))
    h = FS.decode_header(raw, address, s, what)
    yield Structure(("free-space header", h.client), what, raw, lambda b: FS.decode_header(b, address, s, what),
                    lambda r: FS.encode_header(r, s),
                    changed_fields(serial_sections=h.serial_sections + 1, sections_address=4096), at=(address,))
    if h.sections_address is None:
        return
    raw = reader.read(h.sections_address, h.sections_size)
    found = FS.decode_sections(raw, h, s, what)
    types = tuple(sorted({x.type for st in found.sets for x in st.sections}))
    yield Structure(("free-space sections", h.client, types), f"{what}: sections at {h.sections_address}", raw,
                    lambda b: FS.decode_sections(b, h, s, what), lambda r: FS.encode_sections(r, h, s),
                    _moved_section if found.sets else None, at=(h.sections_address,))


def _moved_section(sl: FS.SectionList) -> FS.SectionList:
    """The first section one byte further (libhdf5 never fills a section list's widths)."""
    first = sl.sets[0]
    sec = replace(first.sections[0], offset=first.sections[0].offset + 1)
    return replace(sl, sets=(replace(first, sections=(sec,) + first.sections[1:]),) + sl.sets[1:])


def heap_ids(heap: fh_reader.FractalHeap, ids) -> Iterator[Structure]:
    """Heap IDs as libhdf5 stored them (in B-tree records, lists)."""
    g = heap.geometry
    for raw in ids:
        hid = fh.decode_id(raw, g, "heap ID")
        yield Structure(("heap id", type(hid).__name__, g.huge_direct if isinstance(hid, fh.HugeId) else None),
                        f"heap ID {raw.hex()} of the heap at {g.heap_address}", raw,
                        lambda b: fh.decode_id(b, g, "heap ID"), lambda r: fh.encode_id(r, g))


def elements(raw: bytes, sizes: Sizes, client_id: int, element_size: int, where: str) -> Structure:
    """The chunk elements of an array block or page, one after the other."""
    filtered = client_id == fa.CLIENT_FILTERED_CHUNKS
    width = element_size - sizes.offset - 4 if filtered else 0
    decode_one = fa.chunk_element_decoder(sizes, filtered, width)
    encode_one = fa.chunk_element_encoder(sizes, filtered, width)
    return Structure(("elements", element_size), where, raw,
                     lambda b: [decode_one(b[i:i + element_size]) for i in range(0, len(b), element_size)],
                     lambda els: b"".join(map(encode_one, els)),
                     (lambda els: [replace(e, address=(e.address or 0) + 8) for e in els]) if raw else None)


def _flipped(raw: bytes) -> bytes:
    return bytes(b ^ 0xFF for b in raw)


def _moved(addresses: tuple) -> tuple:
    """Defined addresses undefined, undefined ones defined."""
    return tuple(8 if a is None else None for a in addresses)


def _page(kind: str, raw: bytes, address: int) -> Structure:
    return Structure((kind,), f"page at {address}", raw, lambda b: fa.decode_page(b, "page"), fa.encode_page,
                     at=(address,))


def fixed_array(reader, address: int) -> Iterator[Structure]:
    """Header, data block, every written page, the elements of each."""
    s = reader.sizes
    raw = reader.read(address, fa.header_size(s))
    h = fa.decode_header(raw, address, s, "fixed array")
    yield Structure(("fixed array", h.client_id, "paged" if h.paged else "unpaged"), f"fixed array at {address}", raw,
                    lambda b: fa.decode_header(b, address, s, "fixed array"), lambda r: fa.encode_header(r, s),
                    changed_fields(dblock_address=777, nelmts=h.nelmts + 1), at=(address,))
    if h.dblock_address is None:
        return
    raw = reader.read(h.dblock_address, fa.dblock_size(h, s))
    where = f"fixed array data block at {h.dblock_address}"
    yield Structure(("fixed array dblock",), where, raw,
                    lambda b: fa.decode_dblock(b, h, s, h.dblock_address, "fixed array"),
                    lambda r: fa.encode_dblock(r, h, s),
                    lambda r: replace(r, bitmap=b"\xff" * len(r.bitmap), elements=bytes(len(r.elements))),
                    at=(h.dblock_address,))
    if not h.paged:
        yield elements(fa.decode_dblock(raw, h, s, h.dblock_address, "fa").elements, s, h.client_id, h.element_size,
                       where)
        return
    arr = fa_reader.FixedArray(reader, address)
    for page in range(h.npages):
        if arr.page_initialized(page):
            addr = arr.page_address(page)
            raw = reader.read(addr, h.page_count(page) * h.element_size + 4)
            yield _page("fixed array page", raw, addr)
            yield elements(fa.decode_page(raw, "page"), s, h.client_id, h.element_size, f"page at {addr}")


def extensible_array(reader, address: int) -> Iterator[Structure]:
    """Header, index block, super blocks, data blocks, pages, the elements of each."""
    s = reader.sizes
    raw = reader.read(address, ea.header_size(s))
    h = ea.decode_header(raw, address, s, "extensible array")
    yield Structure(("extensible array", h.client_id), f"extensible array at {address}", raw,
                    lambda b: ea.decode_header(b, address, s, "extensible array"), lambda r: ea.encode_header(r, s),
                    changed_fields(max_idx_set=h.max_idx_set + 3, iblock_address=None), at=(address,))
    if h.iblock_address is None:
        return
    arr = ea_reader.ExtensibleArray(reader, address)
    nd, ns = arr.iblock_ndblk_addrs, arr.iblock_nsblk_addrs
    raw = reader.read(h.iblock_address, ea.index_block_size(h, s, nd, ns))
    ib = ea.decode_index_block(raw, h, s, nd, ns, "ea")
    yield Structure(("ea iblock",), f"extensible array index block at {h.iblock_address}", raw,
                    lambda b: ea.decode_index_block(b, h, s, nd, ns, "ea"), lambda r: ea.encode_index_block(r, h, s),
                    lambda r: replace(r, elements=_flipped(r.elements), dblock_addresses=_moved(r.dblock_addresses)),
                    at=(h.iblock_address,))
    yield elements(ib.elements, s, h.client_id, h.element_size, "index block")

    def data_block(addr: int, nelmts: int, npages: int, bitmap: bytes, j: int) -> Iterator[Structure]:
        stored = 0 if npages else nelmts
        raw = reader.read(addr, ea.data_block_size(h, s, stored))
        yield Structure(("ea dblock", "paged" if npages else "unpaged"), f"extensible array data block at {addr}", raw,
                        lambda b: ea.decode_data_block(b, h, s, addr, stored, "ea"),
                        lambda r: ea.encode_data_block(r, h, s), lambda r: replace(r, block_offset=r.block_offset + 1),
                        at=(addr,))
        yield elements(ea.decode_data_block(raw, h, s, addr, stored, "ea").elements, s, h.client_id, h.element_size,
                       f"data block at {addr}")
        page_size = arr.page_nelmts * h.element_size + 4
        for p in range(npages):
            if fa.bit_set(bitmap, j * npages + p):
                at = addr + len(raw) + p * page_size
                page = reader.read(at, page_size)
                yield _page("ea page", page, at)
                yield elements(fa.decode_page(page, "page"), s, h.client_id, h.element_size, f"page at {at}")

    for u in range(arr.iblock_nsblks):
        info = arr.sblk_info[u]
        for j in range(info.ndblks):
            addr = ib.dblock_addresses[info.start_dblk + j]
            if addr is not None:
                yield from data_block(addr, info.dblk_nelmts, 0, b"", 0)
    for k, saddr in enumerate(ib.sblock_addresses):
        if saddr is None:
            continue
        u = arr.iblock_nsblks + k
        bitmap_size, ndblks = arr.bitmap_size(u), arr.sblk_info[u].ndblks
        raw = reader.read(saddr, ea.super_block_size(h, s, bitmap_size, ndblks))
        sb = ea.decode_super_block(raw, h, s, saddr, bitmap_size, ndblks, "ea")
        yield Structure(("ea sblock", "bitmap" if bitmap_size else "no bitmap"),
                        f"extensible array super block at {saddr}", raw,
                        lambda b, a=saddr, m=bitmap_size, n=ndblks: ea.decode_super_block(b, h, s, a, m, n, "ea"),
                        lambda r: ea.encode_super_block(r, h, s),
                        lambda r: replace(r, dblock_addresses=_moved(r.dblock_addresses)), at=(saddr,))
        for j, addr in enumerate(sb.dblock_addresses):
            if addr is not None:
                yield from data_block(addr, arr.sblk_info[u].dblk_nelmts, arr.npages(u), sb.bitmap, j)


def chunk_index(reader, ds: Dataset) -> Iterator[Structure]:
    """Every node, block and page of a chunked dataset's index."""
    lay = ds.layout
    kind, addr = lay.index.index_type, lay.index.address
    if addr is None or kind in (L.SINGLE, L.IMPLICIT):
        return
    if kind == L.FIXED_ARRAY:
        yield from fixed_array(reader, addr)
    elif kind == L.EXTENSIBLE_ARRAY:
        yield from extensible_array(reader, addr)
    elif kind == L.BTREE_V2:
        rank = len(lay.chunk_dims)
        hdr = bt_reader.read_header(reader, addr)
        width = hdr.record_size - reader.sizes.offset - 4 - 8 * rank if ds.filters else 0
        yield from btree_v2(reader, addr, bt.record_decoder(hdr.type, rank, width),
                            bt.record_encoder(hdr.type, rank, width))
    else:
        yield from btree_v1(reader, addr, B1.CHUNK, len(lay.chunk_dims), ds.file.superblock.indexed_storage_k)


def vds_mappings(hf: H5File, ds: Dataset) -> Structure:
    """The mapping block of a virtual dataset (a global heap object)."""
    lay, s = ds.layout, hf.sizes
    everything = S.Selection("all", version=1)
    first = lambda b: replace(b.entries[0], source_dataset="other", virtual_selection=everything)  # noqa: E731
    blob = bytes(hf.global_heap.get(lay.vds_heap_address, lay.vds_heap_index))
    return Structure(("vds mapping",), f"{ds.path}: mapping block", blob,
                     lambda b: vds_mapping.decode(b, s), lambda r: vds_mapping.encode(r, s),
                     lambda b: replace(b, entries=(first(b),) + b.entries[1:]))


def sohm_table(hf: H5File) -> Iterator[Structure]:
    """The SOHM master table (SMTB) and each index's record list (SMLI), v2 B-tree and heap."""
    s, reader = hf.sizes, hf.reader
    msg = T.decode(Reader(hf.extension.first(M.SOHM_TABLE).data, 0, s))
    n = msg.nindexes
    yield Structure(("sohm table",), f"shared message table at {msg.table_address}",
                    reader.read(msg.table_address, T.table_size(s, n)), lambda b: T.decode_table(Reader(b, 0, s), n),
                    lambda r: encoded(T.encode_table, r, s),
                    lambda r: [replace(i, num_messages=i.num_messages + 1, min_message_size=7) for i in r],
                    at=(msg.table_address,))
    for index in hf.sohm_indexes:
        if index.index_type == T.LIST:
            raw = reader.read(index.index_address, T.list_size(s, index.list_cutoff))
            records = T.decode_list(Reader(raw, 0, s), index.num_messages)
            yield Structure(("sohm list",), f"shared message list at {index.index_address}", raw,
                            lambda b, i=index: T.decode_list(Reader(b, 0, s), i.num_messages),
                            lambda r: encoded(T.encode_list, r, s),
                            lambda r: [replace(x, refcount=x.refcount + 1) for x in r], slack=len(raw),
                            at=(index.index_address,))
        else:
            yield from btree_v2(reader, index.index_address)
            records = btree_records(reader, index.index_address)
        if index.heap_address is not None:
            heap = yield from fractal_heap(reader, index.heap_address)
            yield from heap_ids(heap, [r.heap_id for r in records if r.location == 0])


# -- the walker --------------------------------------------------------------------------------


class _RecordingHeap(gh_reader.GlobalHeapReader):
    """The file's global heap reader, noting each collection the engine reads."""

    def __init__(self, reader):
        super().__init__(reader)
        self.seen: dict[int, None] = {}

    def collection(self, address):
        self.seen.setdefault(address)
        return super().collection(address)


class Walk:
    """One walk over an open file: every object once (by header address), then the global heap
    collections reading its values touched (none when `values` is False)."""

    def __init__(self, hf: H5File, values: bool = True):
        self.hf = hf
        self.values = values
        self.sizes = hf.sizes
        self.heap = hf.__dict__["global_heap"] = _RecordingHeap(hf.reader)
        self.pending: list[tuple[int, str]] = []
        self.queued: set[int] = set()
        self.sohm_bodies: set[tuple[int, bytes]] = set()
        self.symbol_tables: set[tuple[int, int]] = set()

    def structures(self) -> Iterator[Structure]:
        hf = self.hf
        yield from superblock(hf)
        entry = hf.superblock.root_entry
        if entry is not None and entry.cache_type == CACHE_STAB:
            yield from self.symbol_table(entry.btree_address, entry.heap_address)
        if hf.extension is not None:
            yield from self.header(hf.extension, "superblock extension")
            if hf.extension.first(M.SOHM_TABLE) is not None:
                yield from sohm_table(hf)
            info = hf.extension.first(M.FSINFO)
            for addr in [] if info is None else M.DECODERS[M.FSINFO](Reader(info.data, 0, self.sizes)).managers:
                if addr is not None:
                    yield from free_space_manager(hf.reader, addr)
        self.enqueue(hf.root_address, "/")
        while self.pending:
            yield from self.object(*self.pending.pop(0))
        for addr in self.heap.seen:
            yield global_heap_collection(hf.reader, addr)

    def enqueue(self, address: int | None, path: str) -> None:
        if address is not None and address not in self.queued:
            self.queued.add(address)
            self.pending.append((address, path))

    def object(self, address: int, path: str) -> Iterator[Structure]:
        obj = self.hf.get(address, path)
        yield from self.header(obj.header, path)
        if isinstance(obj, Group):
            for link in obj.links():
                self.enqueue(link.address, f"{path.rstrip('/')}/{link.name}")
        if isinstance(obj, Dataset):
            yield from self.dataset(obj)
        for a in obj.attributes() if self.values else ():   # values in the global heap: vlen data, references
            if needs_decoding(a.datatype):
                a.value

    def header(self, header: OH.ObjectHeader, where: str) -> Iterator[Structure]:
        """The header and its messages (NIL messages are undefined space: the header's)."""
        yield object_header(self.hf.reader, header, where)
        slack = 7 if header.version == 1 else 0
        for raw in header.all_messages():
            if raw.type != OH.NIL:
                yield from self.message(raw, where, slack)

    def message(self, raw: RawMessage, where: str, slack: int = 0) -> Iterator[Structure]:
        """A message, what its body is when it is shared, and what it points to."""
        yield message(raw, where, self.sizes, slack)
        if raw.shared:
            ref = shared.decode(Reader(raw.data, 0, self.sizes))
            if ref.kind == shared.IN_OBJECT_HEADER:
                self.enqueue(ref.address, f"{where} (shared {raw.type:#x})")
            else:
                yield from self.sohm_body(raw.type, ref.heap_id, where)
            return
        follow = {M.LINK_INFO: self.dense, M.ATTRIBUTE_INFO: self.dense, M.ATTRIBUTE: self.attribute_parts,
                  M.SYMBOL_TABLE: self.group_storage, M.EXTERNAL: self.external_names}
        if raw.type in follow:
            yield from follow[raw.type](raw, where)

    def group_storage(self, raw: RawMessage, where: str) -> Iterator[Structure]:
        stab = M.DECODERS[M.SYMBOL_TABLE](Reader(raw.data, 0, self.sizes))
        yield from self.symbol_table(stab.btree_address, stab.heap_address)

    def symbol_table(self, btree: int, heap: int) -> Iterator[Structure]:
        if (btree, heap) not in self.symbol_tables:
            self.symbol_tables.add((btree, heap))
            yield from symbol_table(self.hf.reader, self.hf.superblock, btree, heap)

    def external_names(self, raw: RawMessage, where: str) -> Iterator[Structure]:
        """The local heap holding the names of a dataset's external files."""
        yield local_heap(self.hf.reader, M.DECODERS[M.EXTERNAL](Reader(raw.data, 0, self.sizes)).heap_address)

    def sohm_body(self, mtype: int, heap_id: bytes, where: str) -> Iterator[Structure]:
        if (mtype, heap_id) not in self.sohm_bodies:
            self.sohm_bodies.add((mtype, heap_id))
            body = self.hf.shared_message_body(shared.SharedRef(shared.IN_SOHM_HEAP, heap_id=heap_id), mtype, where)
            yield from self.message(body, f"{where} (SOHM heap)")

    def attribute_parts(self, raw: RawMessage, where: str) -> Iterator[Structure]:
        """The datatype and dataspace messages inside an attribute message."""
        a = M.DECODERS[M.ATTRIBUTE](Reader(raw.data, 0, self.sizes))
        for mtype, body, is_shared in ((M.DATATYPE, a.datatype_raw, a.datatype_shared),
                                       (M.DATASPACE, a.dataspace_raw, a.dataspace_shared)):
            yield from self.message(RawMessage(mtype, FLAG_SHARED if is_shared else 0, body), f"{where} @{a.name}")

    def dense(self, raw: RawMessage, where: str) -> Iterator[Structure]:
        """Dense links or attributes: the heap, its indexes, the messages in it (a shared
        attribute's in the SOHM heap)."""
        info = M.DECODERS[raw.type](Reader(raw.data, 0, self.sizes))
        if info.heap_address is None:
            return
        mtype = M.LINK if raw.type == M.LINK_INFO else M.ATTRIBUTE
        reader, what = self.hf.reader, f"{where} (dense)"
        heap = yield from fractal_heap(reader, info.heap_address)
        ids = []
        for index in (info.name_index_address, info.order_index_address):
            if index is not None:
                yield from btree_v2(reader, index)
                ids += [r.heap_id for r in btree_records(reader, index) if not getattr(r, "flags", 0) & 0x02]
        yield from heap_ids(heap, ids)
        for rec in btree_records(reader, info.name_index_address):
            if getattr(rec, "flags", 0) & 0x02:
                yield from self.sohm_body(mtype, rec.heap_id, what)
            else:
                yield from self.message(RawMessage(mtype, 0, heap.get(rec.heap_id)), what)

    def dataset(self, ds: Dataset) -> Iterator[Structure]:
        lay = ds.layout
        if lay.layout_class == L.CHUNKED:
            yield from chunk_index(self.hf.reader, ds)
        elif lay.layout_class == L.VIRTUAL:
            yield vds_mappings(self.hf, ds)
            return
        if self.values and needs_decoding(ds.datatype):   # vlen data and references: their global heap objects
            ds.read_array()


def structures(path, values: bool = True) -> Iterator[Structure]:
    """Every structure of the file at `path` (see the module's docstring); `values` False: no
    vlen data or reference is read (the split driver keeps them, and the global heap, apart)."""
    with H5File.open(str(path)) as hf:
        yield from Walk(hf, values).structures()


def checked(path, values: bool = True) -> Iterator[tuple[Structure, Any]]:
    """Every structure of the file checked against libhdf5's bytes (`check`), with its record."""
    for s in structures(path, values):
        yield s, check(s)


def check_all(found) -> tuple[Counter, Counter]:
    """Check every structure that has an encoder: (checked, met without an encoder), by kind."""
    done: Counter = Counter()
    missing: Counter = Counter()
    for s in found:
        if s.encode is None:
            missing[s.kind] += 1
        else:
            check(s)
            done[s.kind] += 1
    return done, missing


def build_everything(path, libver: str) -> None:
    """One file with a broad mix of groups, links, datatypes, layouts, fills and attributes."""
    rng = np.random.default_rng(1)
    with h5py.File(path, "w", libver=libver) as f:
        f.attrs["title"] = "engine test"
        f.attrs["ints"] = np.arange(5, dtype=">i8")
        f.attrs["empty_str"] = ""
        f.attrs["fixed"] = np.bytes_("fixed-bytes")
        f.attrs["strings"] = ["a", "bb", "ccc"]
        f.attrs["scalar_f"] = np.float32(2.5)
        for name, dt in [("u1", "u1"), ("i1", "i1"), ("u2be", ">u2"), ("i2", "<i2"), ("u4", "<u4"), ("i4be", ">i4"),
                         ("u8", "<u8"), ("i8be", ">i8"), ("f2", "<f2"), ("f4be", ">f4"), ("f8", "<f8"),
                         ("f8be", ">f8"), ("c8", "<c8"), ("c16", "<c16")]:
            f.create_dataset(f"types/{name}", data=(rng.normal(0, 100, (4, 5))).astype(dt))
        f["types/bool"] = np.array([True, False, True])
        f["types/fixed_str"] = np.array([b"ab", b"cdef", b""], dtype="S6")
        f.create_dataset("types/vlen_str", data=["x", "üñî", "longer string"], dtype=h5py.string_dtype())
        f.create_dataset("types/ascii_str", data=["p", "qq"], dtype=h5py.string_dtype("ascii"))
        cmp = np.dtype([("a", "<i4"), ("b", ">f8"), ("c", "S3"), ("d", [("x", "u1"), ("y", "<i2", (2,))])])
        f["types/compound"] = np.array([(1, 2.0, b"xy", (3, (4, 5))), (6, 7.5, b"z", (8, (9, 10)))], dtype=cmp)
        f["types/array"] = np.arange(24, dtype="<i4").reshape(2, 3, 4)
        f.create_dataset("types/array_dt", data=np.zeros(3, dtype=np.dtype(("<f4", (2, 2)))) + 1.5)
        enum = h5py.enum_dtype({"RED": 0, "GREEN": 1, "BLUE": 42}, basetype="u1")
        f.create_dataset("types/enum", data=np.array([0, 1, 42], dtype="u1"), dtype=enum)
        f["types/opaque"] = np.array([b"\x01\x02\x03", b"\x04\x05\x06"], dtype="V3")
        f["types/scalar"] = 3.25
        f.create_dataset("types/null", data=h5py.Empty("f4"))
        f.create_dataset("types/zero_size", shape=(0, 4), dtype="i4")
        # layouts
        f.create_dataset("layout/contiguous", data=rng.random((30, 20)))
        f.create_dataset("layout/compact", data=np.arange(10, dtype="i2"),
                         **({} if libver == "earliest" else {}))
        f.create_dataset("layout/chunked", data=rng.random((33, 17)).astype("f4"), chunks=(8, 5))
        f.create_dataset("layout/gzip", data=rng.integers(0, 50, (40, 30)), chunks=(16, 7),
                         compression="gzip", compression_opts=6)
        f.create_dataset("layout/shuffle_gzip_f32", data=rng.random(5000).astype("f4"), chunks=(1000,),
                         compression="gzip", shuffle=True)
        f.create_dataset("layout/fletcher", data=np.arange(1000, dtype="i8"), chunks=(128,), fletcher32=True)
        f.create_dataset("layout/unallocated", shape=(100,), dtype="i4", chunks=(10,), fillvalue=-7)
        part = f.create_dataset("layout/partial", shape=(100, 10), dtype="f8", chunks=(10, 10), fillvalue=1.5)
        part[20:30] = 2.0
        part[95] = 3.0
        f.create_dataset("layout/empty_contig", shape=(10,), dtype="u2", fillvalue=9)
        ext = f.create_dataset("layout/resizable", shape=(5, 4), maxshape=(None, 4), chunks=(2, 4), dtype="i4")
        ext[...] = np.arange(20).reshape(5, 4)
        ext.resize((9, 4))
        ext[7] = 99
        two = f.create_dataset("layout/two_unlimited", shape=(5, 6), maxshape=(None, None), chunks=(2, 4),
                               dtype="i2", compression="gzip")
        two[...] = np.arange(30).reshape(5, 6)
        f.create_dataset("layout/single_chunk", data=np.arange(60).reshape(6, 10), chunks=(6, 10))
        f.create_dataset("layout/single_chunk_gzip", data=np.arange(60).reshape(6, 10), chunks=(6, 10),
                         compression="gzip")
        many = f.create_dataset("layout/many_chunks", shape=(3000,), chunks=(2,), dtype="u1")
        many[::3] = 7
        f.create_dataset("layout/3d", data=rng.integers(0, 1000, (7, 8, 9)), chunks=(3, 4, 5))
        f.create_dataset("layout/full_rows", data=rng.random((30, 20)), chunks=(4, 20), compression="gzip")
        f.create_dataset("layout/full_planes", data=rng.integers(0, 9, (9, 6, 5), dtype="i2"), chunks=(2, 6, 5))
        # links and groups
        g = f.create_group("links")
        g["target"] = np.arange(3)
        g["hard"] = g["target"]
        g["soft_abs"] = h5py.SoftLink("/links/target")
        g["soft_rel"] = h5py.SoftLink("target")
        g["dangling"] = h5py.SoftLink("/nowhere")
        g["external"] = h5py.ExternalLink("other.h5", "/some/path")
        deep = f.create_group("a/b/c/d")
        deep.attrs["depth"] = 4
        big = f.create_group("biggroup")
        for i in range(40):
            big.create_group(f"g{i:03d}")
        ordered = f.create_group("ordered", track_order=True)
        for name in ["zeta", "alpha", "mid"]:
            ordered[name] = np.arange(2)
        f["committed_t"] = np.dtype("<i4")
        f.create_dataset("uses_committed", data=np.arange(4, dtype="<i4"), dtype=f["committed_t"])
        many_attrs = f.create_group("many_attrs")
        for i in range(30):
            many_attrs.attrs[f"attr{i:02d}"] = i * 1.5
        if libver == "latest":  # the earliest format cannot hold a 64 KiB+ attribute
            many_attrs.attrs["big"] = np.arange(20000, dtype="i4")
