"""Fractal heaps against files libhdf5 wrote (dense link and attribute storage), plus synthetic
heaps for tiny IDs and corruption."""

from __future__ import annotations

import shutil
import struct

import h5py
import numpy as np
import pytest

from h5fs.errors import ChecksumError, FormatError, Unsupported
from h5fs.format import btree_v2
from h5fs.format.checksum import lookup3
from h5fs.format.codec import Sizes
from h5fs.storage.metadata_cache import MetadataCache
from h5fs.model import messages as M
from h5fs.model.file import H5File
from h5fs.storage.fractal_heap.reader import FractalHeap
from h5fs.storage.btree_v2.reader import iterate, read_header
from message_names import attr_name, link_name
import roundtrip_support as R


def address(path, name):
    with h5py.File(path, "r") as f:
        return h5py.h5o.get_info(f[name].id).addr


def dense_group(path, n, track_order=False, target_len=0):
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("x", data=[1])
        g = f.create_group("g", track_order=track_order)
        names = []
        for i in range(n):
            name = f"link_{i:05d}_" + "x" * (i % 37)
            if target_len:
                g[name] = h5py.SoftLink("/" + "t" * target_len)
            else:
                g[name] = f["x"]
            names.append(name)
    return names


@pytest.fixture(scope="module")
def big_group(tmp_path_factory):
    """3000 soft links with long targets: a heap with child indirect blocks."""
    p = tmp_path_factory.mktemp("fh") / "big.h5"
    names = dense_group(p, 3000, track_order=True, target_len=200)
    return p, names


def test_dense_links_by_name(tmp_path):
    p = tmp_path / "g.h5"
    names = dense_group(p, 200)
    with H5File.open(str(p)) as hf:
        info = hf.get(address(p, "g"), "/g").message(M.LINK_INFO)
        heap = FractalHeap(hf.reader, info.heap_address, "links")
        got = []
        for rec in iterate(hf.reader, info.name_index_address, btree_v2.decode_link_name):
            name = link_name(heap.get(rec.heap_id))
            assert rec.hash == lookup3(name.encode())
            got.append((rec.hash, name))
        assert [h for h, _ in got] == sorted(h for h, _ in got)
        assert sorted(n for _, n in got) == sorted(names)


def test_big_heap_indirect_blocks(big_group):
    p, names = big_group
    with H5File.open(str(p)) as hf:
        info = hf.get(address(p, "g"), "/g").message(M.LINK_INFO)
        heap = FractalHeap(hf.reader, info.heap_address, "links")
        assert heap.header.root_rows > heap.max_direct_rows        # child indirect blocks in use
        recs = list(iterate(hf.reader, info.order_index_address, btree_v2.decode_link_corder))
        assert [r.corder for r in recs] == list(range(len(names)))
        got = [heap.get(r.heap_id) for r in recs]
        assert [link_name(b) for b in got] == names
        assert all(b.endswith(b"/" + b"t" * 200) for b in got)
        # both indexes name the same heap objects
        by_name = {r.heap_id for r in iterate(hf.reader, info.name_index_address)}
        assert by_name == {r.heap_id for r in recs}


def test_dense_attributes_and_huge_object(tmp_path):
    p = tmp_path / "a.h5"
    big = np.arange(50000, dtype="<i4")
    with h5py.File(p, "w", libver="latest") as f:
        d = f.create_dataset("d", data=[1.0])
        for i in range(30):
            d.attrs[f"attr{i:02d}"] = np.full(i + 1, i, dtype="<i8")
        d.attrs["huge"] = big
        o = f.create_group("o", track_order=True)
        for i in range(20):
            o.attrs[f"z{20 - i:02d}"] = i
    with H5File.open(str(p)) as hf:
        info = hf.get(address(p, "d"), "/d").message(M.ATTRIBUTE_INFO)
        heap = FractalHeap(hf.reader, info.heap_address, "attributes")
        assert heap.header.huge_count == 1 and not heap.huge_direct
        names = {}
        for rec in iterate(hf.reader, info.name_index_address, btree_v2.decode_attr_name):
            body = heap.get(rec.heap_id)
            name = attr_name(body)
            assert rec.hash == lookup3(name.encode())
            names[name] = body
        assert set(names) == {f"attr{i:02d}" for i in range(30)} | {"huge"}
        assert names["huge"].endswith(big.tobytes())
        assert names["attr29"].endswith(np.full(30, 29, dtype="<i8").tobytes())
        # the huge object is found through the heap's own v2 B-tree (type 1)
        bt = read_header(hf.reader, heap.header.huge_btree_address)
        assert bt.type == btree_v2.HUGE_INDIRECT
        (rec,) = list(iterate(hf.reader, heap.header.huge_btree_address))
        assert rec.length == len(names["huge"])

        oinfo = hf.get(address(p, "o"), "/o").message(M.ATTRIBUTE_INFO)
        oheap = FractalHeap(hf.reader, oinfo.heap_address, "attributes")
        recs = list(iterate(hf.reader, oinfo.order_index_address, btree_v2.decode_attr_corder))
        assert [r.corder for r in recs] == list(range(20))
        assert [attr_name(oheap.get(r.heap_id)) for r in recs] == [f"z{20 - i:02d}" for i in range(20)]


# -- synthetic heaps --------------------------------------------------------------------------


class FakeReader:
    def __init__(self, buf: bytes, sizes=Sizes()):
        self.buf = buf
        self.sizes = sizes
        self.meta = MetadataCache()

    def read(self, addr, size, what="block"):
        if addr is None or addr < 0 or addr + size > len(self.buf):
            raise FormatError(f"{what}: range {addr}+{size} lies outside the file")
        return self.buf[addr:addr + size]


def heap_header(id_len=7, width=4, start=512, max_direct=65536, max_bits=32, root=None, root_rows=0,
                max_man=4096, man_size=0, flags=2, sizes=Sizes()):
    L = lambda v: v.to_bytes(sizes.length, "little")      # noqa: E731
    O = lambda v: (sizes.undefined if v is None else v).to_bytes(sizes.offset, "little")  # noqa: E731
    b = b"FRHP" + bytes([0]) + struct.pack("<HHB", id_len, 0, flags) + struct.pack("<I", max_man)
    b += L(0) + O(None) + L(0) + O(None) + L(man_size) + L(man_size) + L(0) + L(0)
    b += L(0) + L(0) + L(0) + L(0)
    b += struct.pack("<H", width) + L(start) + L(max_direct) + struct.pack("<HH", max_bits, 1)
    b += O(root) + struct.pack("<H", root_rows)
    return b + struct.pack("<I", lookup3(b))


def test_tiny_ids():
    h = FractalHeap(FakeReader(heap_header(id_len=7)), 0)
    assert not h.tiny_extended and h.tiny_max == 6
    assert h.get(bytes([0x20 | 2, 1, 2, 3, 0, 0, 0])) == b"\x01\x02\x03"
    with pytest.raises(FormatError):
        h.get(bytes([0x20 | 7, 1, 2, 3, 4, 5, 6]))            # 8 bytes cannot fit a 7-byte ID
    h = FractalHeap(FakeReader(heap_header(id_len=18)), 0)
    assert not h.tiny_extended and h.tiny_max == 16            # the boundary case stays "normal"
    h = FractalHeap(FakeReader(heap_header(id_len=40)), 0)
    assert h.tiny_extended and h.tiny_max == 38
    payload = bytes(range(30))
    assert h.get(bytes([0x20 | 0, 29]) + payload + bytes(8)) == payload


def test_header_validation():
    with pytest.raises(FormatError):
        FractalHeap(FakeReader(heap_header(width=3)), 0)
    with pytest.raises(FormatError):
        FractalHeap(FakeReader(heap_header(start=500)), 0)
    with pytest.raises(FormatError):
        FractalHeap(FakeReader(heap_header(max_direct=256)), 0)
    with pytest.raises(FormatError):
        FractalHeap(FakeReader(heap_header(root_rows=99, root=100)), 0)
    buf = bytearray(heap_header())
    buf[10] ^= 1
    with pytest.raises(ChecksumError):
        FractalHeap(FakeReader(bytes(buf)), 0)


def test_managed_id_checks():
    h = FractalHeap(FakeReader(heap_header(man_size=4096)), 0)
    with pytest.raises(FormatError):
        h.get(bytes([0x00]) + (5000).to_bytes(4, "little") + (10).to_bytes(2, "little"))   # beyond the heap
    with pytest.raises(FormatError):
        h.get(bytes([0x00]) + (100).to_bytes(4, "little") + (10).to_bytes(2, "little"))    # no blocks at all
    with pytest.raises(Unsupported):
        h.get(bytes([0xC0, 0, 0, 0]))                                                      # unknown version


# -- corruption of real heaps -----------------------------------------------------------------


def _rechecksum(path, start, length):
    with open(path, "r+b") as fh:
        fh.seek(start)
        body = fh.read(length - 4)
        fh.write(struct.pack("<I", lookup3(body)))


def test_corrupt_direct_block(big_group, tmp_path):
    p, names = big_group
    q = tmp_path / "c.h5"
    shutil.copy(p, q)
    gaddr = address(p, "g")
    with H5File.open(str(p)) as hf:
        info = hf.get(gaddr, "/g").message(M.LINK_INFO)
        heap = FractalHeap(hf.reader, info.heap_address, "links")
        rec = next(iter(iterate(hf.reader, info.order_index_address, btree_v2.decode_link_corder)))
        entry, bsize, boff = heap._locate_direct(int.from_bytes(rec.heap_id[1:5], "little"))
    with open(q, "r+b") as fh:
        fh.seek(entry.address + bsize - 3)
        b = fh.read(1)
        fh.seek(entry.address + bsize - 3)
        fh.write(bytes([b[0] ^ 0xFF]))
    with H5File.open(str(q)) as hf:
        heap = FractalHeap(hf.reader, info.heap_address, "links")
        with pytest.raises(ChecksumError):
            heap.get(rec.heap_id)


def test_indirect_block_cycle_and_bad_address(big_group, tmp_path):
    """A child indirect block pointing back at the root, or outside the file, is refused."""
    p, names = big_group
    gaddr = address(p, "g")
    with H5File.open(str(p)) as hf:
        info = hf.get(gaddr, "/g").message(M.LINK_INFO)
        heap = FractalHeap(hf.reader, info.heap_address, "links")
        root = heap.read_indirect(heap.header.root_address, heap.header.root_rows, 0)
        k = next(i for i, a in enumerate(root.indirect) if a is not None)
        s = hf.sizes
        pos = root.address + 4 + 1 + s.offset + heap.heap_off_size + len(root.direct) * s.offset + k * s.offset
        size = heap.indirect_block_size(root.nrows)
        ids = [r.heap_id for r in iterate(hf.reader, info.order_index_address, btree_v2.decode_link_corder)]
        eof = hf.reader.eof
    for target in (root.address, eof + 4096):
        q = tmp_path / f"cyc{target}.h5"
        shutil.copy(p, q)
        with open(q, "r+b") as fh:
            fh.seek(pos)
            fh.write(target.to_bytes(s.offset, "little"))
        _rechecksum(q, root.address, size)
        with H5File.open(str(q)) as hf:
            heap = FractalHeap(hf.reader, info.heap_address, "links")
            heap.get(ids[0])                                   # early objects live in direct rows
            with pytest.raises(FormatError):
                for i in ids:
                    heap.get(i)


def _set_deflate(plist, level=6):
    """H5Pset_deflate on a group creation property list (h5py does not expose it): called in the
    libhdf5 h5py bundles, which this process has loaded already."""
    import ctypes
    import glob
    import os
    libdir = os.path.join(os.path.dirname(h5py.__file__), os.pardir, "h5py.libs")
    libs = glob.glob(os.path.join(libdir, "libhdf5-*.so*"))
    if not libs:
        pytest.skip("cannot reach the libhdf5 h5py bundles")
    lib = ctypes.CDLL(libs[0])
    lib.H5Pset_deflate.argtypes = [ctypes.c_int64, ctypes.c_uint]
    if lib.H5Pset_deflate(plist.id, level) < 0:
        pytest.skip("H5Pset_deflate failed")


def test_filtered_heap_with_huge_objects(tmp_path):
    """A group whose link heap is deflated: filtered direct blocks (sizes and masks in the
    indirect blocks) and filtered huge objects (v2 B-tree type 2)."""
    p = tmp_path / "f.h5"
    targets = {}
    with h5py.File(p, "w", libver="latest") as f:
        gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
        _set_deflate(gcpl)
        h5py.h5g.create(f.id, b"g", gcpl=gcpl)
        g = f["g"]
        for i in range(1500):
            name = f"l{i:05d}" + "y" * (i % 50)
            targets[name] = "/" + "q" * (100 + i % 300)
        targets["huge1"] = "/" + "".join(chr(97 + (i * 7) % 26) for i in range(6000))
        targets["huge2"] = "/" + "z" * 9000
        for name, t in targets.items():
            g[name] = h5py.SoftLink(t)
        gaddr = h5py.h5o.get_info(g.id).addr
    with H5File.open(str(p)) as hf:
        info = hf.get(gaddr, "/g").message(M.LINK_INFO)
        heap = FractalHeap(hf.reader, info.heap_address, "links")
        assert heap.filters is not None and heap.header.root_rows > 0
        assert heap.header.huge_count == 2
        assert read_header(hf.reader, heap.header.huge_btree_address).type == btree_v2.HUGE_INDIRECT_FILTERED
        got = {}
        for rec in iterate(hf.reader, info.name_index_address, btree_v2.decode_link_name):
            body = heap.get(rec.heap_id)
            got[link_name(body)] = body
        assert set(got) == set(targets)
        for name, t in targets.items():
            assert got[name].endswith(t.encode())


@pytest.mark.parametrize("sizes", [(4, 4), (2, 8), (8, 4)])
def test_small_offsets_and_lengths(tmp_path, sizes):
    p = tmp_path / "s.h5"
    n = 60 if sizes[0] == 2 else 400
    with R.new_file(p, "latest", sizes) as f:
        f.create_dataset("x", data=[1])
        g = f.create_group("g", track_order=True)
        for i in range(n):
            g[f"link{i:04d}"] = h5py.SoftLink("/" + "p" * (i % 90))
        for i in range(20):
            g.attrs[f"a{i}"] = np.arange(i + 1)
    with h5py.File(p, "r") as f:
        gaddr = h5py.h5o.get_info(f["g"].id).addr
        names = list(f["g"].keys())
        anames = set(f["g"].attrs.keys())
    with H5File.open(str(p)) as hf:
        assert (hf.sizes.offset, hf.sizes.length) == sizes
        g = hf.get(gaddr, "/g")
        info = g.message(M.LINK_INFO)
        heap = FractalHeap(hf.reader, info.heap_address, "links")
        recs = list(iterate(hf.reader, info.order_index_address))
        assert [link_name(heap.get(r.heap_id)) for r in recs] == names
        ainfo = g.message(M.ATTRIBUTE_INFO)
        aheap = FractalHeap(hf.reader, ainfo.heap_address, "attributes")
        got = {attr_name(aheap.get(r.heap_id)) for r in iterate(hf.reader, ainfo.name_index_address)}
        assert got == anames
