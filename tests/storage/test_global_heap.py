"""Global heap collections: h5py-written collections (located by scanning for the signature,
acceptable in tests only), the caching reader, and hostile collections."""

from __future__ import annotations

import os
import struct

import h5py
import numpy as np
import pytest

from h5fs.errors import FormatError
from h5fs.format.codec import Reader, Sizes
from h5fs.format.global_heap import (
    HeapID, decode_collection, decode_heap_id, header_size, heap_id_size,
    object_header_size)
from h5fs.storage.blockio import BlockReader
from h5fs.storage import superblock
from h5fs.storage.global_heap import GlobalHeapReader


def _file(path, sizes):
    if sizes == (8, 8):
        return h5py.File(path, "w")
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fcpl.set_sizes(*sizes)
    return h5py.File(h5py.h5f.create(path.encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl))


WORDS = ["alpha", "", "β-gamma", "d" * 5000, "e" * 7, "f" * 8, "g" * 9]


@pytest.fixture(params=[(8, 8), (4, 4), (2, 2), (4, 8)], ids=lambda s: f"O{s[0]}L{s[1]}")
def vlen_file(request, tmp_path):
    sizes = request.param
    path = str(tmp_path / "heap.h5")
    with _file(path, sizes) as f:
        f.create_dataset("s", data=np.array(WORDS, dtype=h5py.string_dtype()))
        f.create_dataset("t", data=np.array([f"item {i}" for i in range(300)], dtype=h5py.string_dtype()))
        off, n = f["s"].id.get_offset(), f["s"].id.get_storage_size()
    return path, Sizes(*sizes), off, n


def _collections(data: bytes):
    i = data.find(b"GCOL")
    while i >= 0:
        yield i
        i = data.find(b"GCOL", i + 1)


def test_scan_collections(vlen_file):
    path, sizes, _, _ = vlen_file
    data = open(path, "rb").read()
    found = {}
    addrs = list(_collections(data))
    assert len(addrs) >= 2         # the 5000-byte string and 300 items need more than one
    for addr in addrs:
        col = decode_collection(data[addr:], sizes, addr)
        assert col.size >= 4096 or col.size >= len(WORDS[3])
        used = sum(object_header_size(sizes) + ((len(o.data) + 7) & ~7) for o in col.objects.values())
        assert header_size(sizes) + used + col.free == col.size
        for o in col.objects.values():
            found[o.data] = o.index
    for w in WORDS:
        assert w.encode() in found
    for i in range(300):
        assert f"item {i}".encode() in found


def test_reader_follows_heap_ids(vlen_file):
    path, sizes, off, n = vlen_file
    fd = os.open(path, os.O_RDONLY)
    try:
        sb = superblock.read(fd)
        assert sb.sizes == sizes
        heap = GlobalHeapReader(BlockReader(fd, sb.location, sb.sizes))
        raw = os.pread(fd, n, off)
        c = Reader(raw, 0, sizes, "vlen")
        got = []
        for _ in WORDS:
            length = c.u32()
            hid = decode_heap_id(c)
            got.append(heap.get_id(hid)[:length].decode())
        assert got == WORDS
        assert len(raw) == len(WORDS) * (4 + heap_id_size(sizes))
        # cached: the same collection object comes back
        assert heap.collection(hid.address) is heap.collection(hid.address)
        with pytest.raises(FormatError, match="no object"):
            heap.get(hid.address, 60000)
        with pytest.raises(FormatError):
            heap.get(None, 1)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------- hostile bytes

S8 = Sizes(8, 8)


def build(objects, size=None, sizes=S8, version=1, free=True):
    """A collection holding (index, data) objects, with object 0 covering the rest."""
    L = sizes.length
    fmt = {2: "H", 4: "I", 8: "Q"}[L]
    hdr_len = header_size(sizes)
    body = b""
    for idx, data in objects:
        oh = struct.pack(f"<HHI{fmt}", idx, 0, 0, len(data)).ljust(object_header_size(sizes), b"\0")
        body += oh + data + b"\0" * ((-len(data)) % 8)
    total = size if size is not None else max(4096, hdr_len + len(body) + object_header_size(sizes))
    rest = total - hdr_len - len(body)
    if free and rest >= object_header_size(sizes):
        body += struct.pack(f"<HHI{fmt}", 0, 0, 0, rest).ljust(object_header_size(sizes), b"\0")
        body += b"\0" * (rest - object_header_size(sizes))
    else:
        body += b"\0" * max(rest, 0)
    head = (b"GCOL" + bytes([version, 0, 0, 0]) + total.to_bytes(L, "little")).ljust(hdr_len, b"\0")
    return head + body


def test_synthetic_roundtrip():
    for sizes in (Sizes(8, 8), Sizes(4, 4), Sizes(2, 2)):
        buf = build([(1, b"abc"), (7, b"12345678"), (2, b"")], sizes=sizes)
        col = decode_collection(buf, sizes, 100)
        assert col.get(1) == b"abc" and col.get(7) == b"12345678" and col.get(2) == b""
        assert set(col.objects) == {1, 2, 7}


def test_implied_free_space():
    # the tail is shorter than an object header: it is implied free space
    objs = [(1, b"x" * 8)]
    used = header_size(S8) + object_header_size(S8) + 8
    buf = build(objs, size=used + 8, free=False)
    col = decode_collection(buf, S8)
    assert col.get(1) == b"x" * 8 and col.free == 8


@pytest.mark.parametrize("mutate,needle", [
    (lambda b: b"GCOX" + b[4:], "signature"),
    (lambda b: b[:4] + b"\x02" + b[5:], "version"),
    (lambda b: b[:8] + (10).to_bytes(8, "little") + b[16:], "implausible"),
    (lambda b: b[:8] + (1 << 40).to_bytes(8, "little") + b[16:], "implausible"),
    (lambda b: b[:2000], "truncated"),
])
def test_bad_headers(mutate, needle):
    buf = build([(1, b"abc")])
    with pytest.raises(FormatError, match=needle):
        decode_collection(mutate(buf), S8)


def test_object_overruns_collection():
    buf = bytearray(build([(1, b"abc")]))
    # object 1's size field claims more than the collection holds
    pos = header_size(S8) + 8
    buf[pos:pos + 8] = (1 << 20).to_bytes(8, "little")
    with pytest.raises(FormatError, match="overruns"):
        decode_collection(bytes(buf), S8)


def test_duplicate_index():
    with pytest.raises(FormatError, match="twice"):
        decode_collection(build([(1, b"a"), (1, b"b")]), S8)


def test_zero_sized_free_space_does_not_loop():
    buf = bytearray(build([(1, b"abc")]))
    pos = header_size(S8) + object_header_size(S8) + 8     # object 0's header
    buf[pos + 8:pos + 16] = (0).to_bytes(8, "little")
    with pytest.raises(FormatError, match="free-space"):
        decode_collection(bytes(buf), S8)


def test_reader_rejects_hostile_size(tmp_path):
    path = tmp_path / "bad.h5"
    buf = bytearray(build([(1, b"abc")]))
    buf[8:16] = (1 << 33).to_bytes(8, "little")      # an 8 GiB collection
    path.write_bytes(b"\0" * 8 + bytes(buf))
    fd = os.open(path, os.O_RDONLY)
    try:
        heap = GlobalHeapReader(BlockReader(fd))
        with pytest.raises(FormatError, match="implausible"):
            heap.collection(8)
        # address 0 is the nil heap ID: refused without reading
        with pytest.raises(FormatError, match="undefined"):
            heap.collection(0)
    finally:
        os.close(fd)


def test_reader_size_beyond_eof(tmp_path):
    path = tmp_path / "short.h5"
    body = build([(1, b"abc")])
    path.write_bytes(b"\0" * 8 + body[:100])      # the collection claims 4096 bytes
    fd = os.open(path, os.O_RDONLY)
    try:
        heap = GlobalHeapReader(BlockReader(fd))
        with pytest.raises(FormatError, match="outside the file"):
            heap.get(8, 1)
    finally:
        os.close(fd)


def test_heap_id():
    c = Reader(struct.pack("<II", 4096, 3), 0, Sizes(4, 4))
    assert decode_heap_id(c) == HeapID(4096, 3)
    nil = decode_heap_id(Reader(bytes(12), 0, S8))
    assert nil.is_nil
