"""Whole files round trip, structure by structure: for every structure in a set of files libhdf5
writes (every library version bound whose formats differ, 2-, 4- and 8-byte offsets and lengths,
every message type, chunk index and heap h5py can make), decode -> encode gives the bytes libhdf5
wrote, checksums included (`roundtrip_support.check`; the walker that finds them is
`roundtrip_support.structures`).

Where a message or block may end in undefined space, the comparison allows zeros after the
encoding: a message in a version-1 object header is padded to 8 bytes, and a SOHM record list
(SMLI) is allocated for its cutoff (records, checksum, then zeros). Everywhere else the bytes are
equal, undefined bytes included (libhdf5 writes them as zeros, and so do the encoders). A kind
met without an encoder fails the test.
"""

from __future__ import annotations

import re
from collections import Counter

import h5py
import hdf5plugin
import numpy as np
import pytest
from roundtrip_support import (CHANGES, SHARED_REF, btree_k_fcpl, build_files, build_everything, check_all,
                               chunked_datasets, dense_file, messages_file, new_file, shared_messages_fcpl, sohm_fcpl,
                               structures, vds_file, write_revised_refs)

from h5fs.format import btree_v1 as B1
from h5fs.format import btree_v2 as bt
from h5fs.format import object_header as OH
from h5fs.format.messages import datatype as D
from h5fs.format.messages import layout as L
from h5fs.model import messages as M

# every message type libhdf5 writes but NIL (undefined space, checked as part of its header), the
# old modification time (not written since 1.6), the bogus message (tests only) and driver info
# (multi-file drivers with a version 2+ superblock)
MESSAGES = {M.DATASPACE, M.LINK_INFO, M.DATATYPE, M.FILL_OLD, M.FILL, M.LINK, M.EXTERNAL, M.LAYOUT, M.GROUP_INFO,
            M.FILTERS, M.ATTRIBUTE, M.COMMENT, M.SOHM_TABLE, OH.CONTINUATION, M.SYMBOL_TABLE, M.MTIME, M.BTREE_K,
            M.ATTRIBUTE_INFO, M.REFCOUNT, M.FSINFO, SHARED_REF}
# every block that starts with a signature: each one in a file is a structure the walk met, but
# UNWALKED
SIGNATURES = (b"OHDR", b"OCHK", b"TREE", b"SNOD", b"HEAP", b"GCOL", b"BTHD", b"BTIN", b"BTLF", b"FRHP", b"FHDB",
              b"FHIB", b"FAHD", b"FADB", b"EAHD", b"EAIB", b"EASB", b"EADB", b"SMTB", b"SMLI", b"FSHD", b"FSSE")
# an old-style group that gets an external or user-defined link becomes a group of link messages:
# libhdf5 leaves its symbol table (B-tree node, symbol table node, local heap) behind, unreferenced
UNWALKED = {"everything-earliest": Counter({"TREE": 1, "SNOD": 1, "HEAP": 1}),
            "messages-earliest-4-4": Counter({"TREE": 3, "SNOD": 3, "HEAP": 3})}


def shared_content(f: h5py.File) -> None:
    """Datasets and attributes whose messages a SOHM index shares (dense attributes too)."""
    for i in range(6):
        d = f.create_dataset(f"d{i}", data=np.arange(i % 3 + 1, dtype="<f4" if i % 2 else "<i8"),
                             chunks=(1,) if i % 2 else None, compression="gzip" if i % 2 else None)
        d.attrs["scalar"] = np.int32(i)
        d.attrs["text"] = "shared " * (i % 3)
        for j in range(12 if i == 5 else 0):
            d.attrs[f"a{j}"] = np.arange(10)


def data_kinds(f: h5py.File, tmp) -> None:
    """What the other builders leave out: references and vlen data (global heap), external
    storage, filter pipelines (optional, named and parameterized filters), fill values, compact
    storage, bitfields and complex numbers, a symbol-table group deep enough for internal v1
    B-tree nodes."""
    x = f.create_dataset("x", data=np.arange(12, dtype="<i4").reshape(3, 4))
    f.create_dataset("oref", data=[x.ref, f.ref, h5py.Reference()], dtype=h5py.ref_dtype)
    r = f.create_dataset("rref", (3,), dtype=h5py.regionref_dtype)
    r[0], r[1], r[2] = x.regionref[1:3, ::2], x.regionref[...], x.regionref[0, 1]
    x.attrs.create("rref", [x.regionref[0:1, 1:3]], dtype=h5py.regionref_dtype)
    seq = np.empty(3, object)
    seq[:] = [np.arange(4, dtype="<i2"), np.array([], "<i2"), np.array([-7], "<i2")]
    f.create_dataset("vseq", data=seq, dtype=h5py.vlen_dtype(np.dtype("<i2")))
    f.create_dataset("cmp_vstr", data=np.array([(1, "one"), (2, "two" * 40)],
                                               dtype=[("n", "<i4"), ("s", h5py.string_dtype())]))
    f.attrs.create("vlen_attr", ["a", "bb" * 500], dtype=h5py.string_dtype())
    f.create_dataset("ext", (50,), "<i4", external=[("e1.bin", 0, 40), ("e2.bin", 8, h5py.h5f.UNLIMITED)],
                     efile_prefix=str(tmp))[...] = np.arange(50)
    values = np.linspace(0, 100, 400).astype("<f4")
    f.create_dataset("scaleoffset", data=values, chunks=(100,), scaleoffset=2)
    f.create_dataset("lzf", data=values, chunks=(100,), compression="lzf", fletcher32=True)
    f.create_dataset("plugin", data=values, chunks=(100,), **hdf5plugin.LZ4())
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((100,))
    dcpl.set_filter(h5py.h5z.FILTER_NBIT, 0, ())
    dcpl.set_filter(h5py.h5z.FILTER_DEFLATE, h5py.h5z.FLAG_OPTIONAL, (4,))
    dcpl.set_fill_value(np.array(-3, "<i4"))
    h5py.h5d.create(f.id, b"nbit_optional", h5py.h5t.STD_I32LE, h5py.h5s.create_simple((400,)), dcpl=dcpl).write(
        h5py.h5s.ALL, h5py.h5s.ALL, np.arange(400, dtype="<i4"))
    f.create_dataset("fill_never", (10,), "<i2", fillvalue=5, chunks=(5,))
    f.create_dataset("szip", data=np.arange(400, dtype="<i4"), chunks=(100,), compression="szip")
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    h5py.h5d.create(f.id, b"compact", h5py.h5t.STD_I16LE, h5py.h5s.create_simple((6,)), dcpl=dcpl)
    h5py.h5d.create(f.id, b"bitfield", h5py.h5t.STD_B16LE, h5py.h5s.create_simple((4,)))
    f.create_dataset("complex", data=np.arange(3) * (1 + 2j), dtype=h5py.h5t.COMPLEX_IEEE_F64LE)
    g = f.create_group("symbols")
    for i in range(60):
        g.create_group(f"group{i:03d}")


def small_k_fcpl():
    """Symbol-table nodes of 6 entries, group B-tree nodes of 4 children: deep trees early."""
    return btree_k_fcpl(2, 3)


def with_data(libver, sizes, fcpl=None):
    def build(path):
        with new_file(path, libver, sizes, fcpl() if fcpl else None) as f:
            data_kinds(f, path.parent)
    return build


def with_chunks(libver, sizes):
    def build(path):
        with new_file(path, libver, sizes) as f:
            chunked_datasets(f, unlimited=sizes[1] == 8)   # libhdf5 2.0 needs 8-byte lengths to reopen those
    return build


def with_sohm(sizes, fcpl):
    def build(path):
        with new_file(path, "latest", sizes, fcpl()) as f:
            shared_content(f)
    return build


def free_space(path) -> None:
    """Persistent free-space management (a file space info message in the superblock extension)."""
    with h5py.File(path, "w", libver="latest", fs_strategy="page", fs_persist=True, fs_threshold=1) as f:
        for i in range(5):
            f[f"d{i}"] = np.arange(100 * i)
        del f["d2"]


FILES = {
    "everything-earliest": lambda p: build_everything(p, "earliest"),
    "everything-latest": lambda p: build_everything(p, "latest"),
    "messages-earliest-4-4": lambda p: messages_file(p, "earliest", (4, 4)),
    "messages-v110-2-4": lambda p: messages_file(p, "v110", (2, 4)),
    "messages-latest-8-8": lambda p: messages_file(p, "latest", (8, 8)),
    "data-earliest-8-8": with_data("earliest", (8, 8), small_k_fcpl),
    "data-earliest-4-4": with_data("earliest", (4, 4)),
    "data-v108-8-8": with_data("v108", (8, 8)),
    "data-latest-2-4": with_data("latest", (2, 4)),
    "data-latest-8-4": with_data("latest", (8, 4)),
    "chunks-earliest-4-8": with_chunks("earliest", (4, 8)),
    "chunks-v108-8-8": with_chunks("v108", (8, 8)),
    "chunks-v110-8-8": with_chunks("v110", (8, 8)),
    "chunks-latest-4-8": with_chunks("latest", (4, 8)),
    "chunks-latest-2-2": with_chunks("latest", (2, 2)),
    "dense-2-4": lambda p: dense_file(p, (2, 4)),
    "dense-4-4": lambda p: dense_file(p, (4, 4)),
    "sohm-btree-4-4": with_sohm((4, 4), shared_messages_fcpl),
    "sohm-list-8-8": with_sohm((8, 8), lambda: sohm_fcpl(50, 40)),
    "vds-earliest": lambda p: vds_file(p, "earliest"),
    "vds-latest": lambda p: vds_file(p, "latest"),
    "revised-references": lambda p: write_revised_refs(str(p)),
    "free-space-latest": free_space,
}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, object]:
    return build_files(tmp_path_factory, FILES)


@pytest.mark.parametrize("name", FILES)
def test_every_structure_round_trips(files, name):
    found = list(structures(files[name]))
    done, missing = check_all(found)
    assert done, f"{name}: the walk found nothing to check"
    assert not missing, f"{name}: met without an encoder: {set(missing)}"
    # nothing escaped the walk: every signature in the file starts a structure it met
    at = {a for s in found for a in s.at}
    data = files[name].read_bytes()
    unwalked = Counter(sig.decode() for sig in SIGNATURES for m in re.finditer(re.escape(sig), data)
                       if m.start() not in at)
    assert unwalked == UNWALKED.get(name, Counter())


def test_the_walk_meets_every_kind(files):
    """Together the files hold every message type, header, index, heap and block the walker
    knows, in the variants whose encodings differ."""
    kinds, missing, layouts, classes = Counter(), Counter(), set(), set()
    for path in files.values():
        for s in structures(path):
            (missing if s.encode is None else kinds)[s.kind] += 1
            if s.kind[0] == "message" and s.kind[1] == M.LAYOUT:
                layout = s.decode(s.raw)
                layouts.add((layout.version, layout.layout_class))
            elif s.kind[0] == "message" and s.kind[1] == M.DATATYPE:
                classes |= {t.class_id for t in D.walk(s.decode(s.raw))}
    assert {c for _, c in layouts} == {L.COMPACT, L.CONTIGUOUS, L.CHUNKED, L.VIRTUAL}
    assert {v for v, _ in layouts} == {3, 4, 5}
    assert classes == set(range(D.COMPLEX + 1)) - {D.TIME}    # libhdf5 cannot make a time datatype
    assert {k[1] for k in kinds | missing if k[0] == "message"} == MESSAGES
    assert not missing
    assert all(k[1] in CHANGES for k in kinds if k[0] == "message")
    assert {k[0] for k in kinds} == {
        "superblock", "object header", "message", "local heap", "v1 B-tree", "symbol table node", "global heap",
        "btree", "btree node", "btree records", "heap", "heap iblock", "heap dblock", "heap id", "fixed array",
        "fixed array dblock", "fixed array page", "extensible array", "ea iblock", "ea sblock", "ea dblock",
        "ea page", "elements", "sohm table", "sohm list", "vds mapping", "free-space header", "free-space sections"}
    assert {k[1] for k in kinds if k[0] == "superblock"} == {0, 1, 2, 3}
    assert {k[1] for k in kinds if k[0] == "free-space header"} == {0, 1}     # a fractal heap's, the file's
    headers = {k[1:] for k in kinds if k[0] == "object header"}
    assert {(1, "continued"), (2, "continued")} <= {h[:2] for h in headers}
    assert any(h[2] for h in headers) and any(h[3] for h in headers)     # NIL messages, gaps (v2)
    assert {(B1.GROUP, 2), (B1.CHUNK, 2)} <= {k[1:] for k in kinds if k[0] == "v1 B-tree"}
    assert ("symbol table node", True) in kinds and ("local heap", "free list") in kinds
    assert {k[1] for k in kinds if k[0] == "btree"} == {bt.HUGE_INDIRECT, bt.HUGE_INDIRECT_FILTERED, bt.HUGE_DIRECT,
                                                         bt.LINK_NAME, bt.LINK_CORDER, bt.SOHM, bt.ATTR_NAME,
                                                         bt.ATTR_CORDER, bt.CHUNK, bt.CHUNK_FILTERED}
