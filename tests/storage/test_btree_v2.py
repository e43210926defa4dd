"""Version 2 B-trees: node geometry as libhdf5 computes it, record decoders, iteration and
lookup on trees libhdf5 wrote (link name/creation order, attribute name/creation order), and
corruption (checksums, addresses outside the file, cycles, absurd depths)."""

from __future__ import annotations

import shutil
import struct

import h5py
import numpy as np
import pytest

from h5fs.errors import ChecksumError, FormatError
from h5fs.format import btree_v2 as bt
from h5fs.format.checksum import lookup3
from h5fs.format.codec import Reader, Sizes
from h5fs.model import messages as M
from h5fs.model.file import H5File
from h5fs.storage.fractal_heap.reader import FractalHeap
from h5fs.storage.btree_v2 import reader as rbt
from message_names import attr_name, link_name

N_LINKS = 3000


def address(path, name):
    with h5py.File(path, "r") as f:
        return h5py.h5o.get_info(f[name].id).addr


@pytest.fixture(scope="module")
def links_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("bt2") / "links.h5"
    with h5py.File(p, "w", libver="latest") as f:
        f.create_dataset("x", data=[1])
        g = f.create_group("g", track_order=True)
        for i in range(N_LINKS):
            g[f"n{i * 7919 % 100003:06d}"] = f["x"]
        d = f.create_dataset("d", data=[1])
        o = f.create_group("o", track_order=True)
        for i in range(60):
            d.attrs[f"attribute_{i:03d}"] = i
            o.attrs[f"a{(i * 37) % 61:02d}"] = np.int16(i)
    return p


def test_limit_enc_size():
    assert [bt.limit_enc_size(n) for n in (0, 1, 255, 256, 65535, 65536, 2**32)] == [1, 1, 1, 2, 2, 3, 5]


def test_levels_as_libhdf5():
    """512-byte nodes of 11-byte records (type 5), depth 2: the numbers H5B2__hdr_init computes."""
    sizes = Sizes(8, 8)
    max_size, levels = bt._levels(512, 11, 2, sizes, "t")
    assert max_size == 1
    assert [(lv.max_nrec, lv.cum_max_nrec, lv.cum_max_nrec_size) for lv in levels] == \
        [(45, 45, 0), (24, 1149, 2), (22, 26449, 2)]
    # with 4-byte addresses the pointers shrink, so more records fit
    _, levels4 = bt._levels(512, 11, 2, Sizes(4, 4), "t")
    assert levels4[1].max_nrec == (512 - 10 - 5) // (11 + 5)
    assert levels4[2].max_nrec == (512 - 10 - 7) // (11 + 7)


def test_link_name_index(links_file):
    p = links_file
    with h5py.File(p, "r") as f:
        names = list(f["g"].keys())
    with H5File.open(str(p)) as hf:
        info = hf.get(address(p, "g"), "/g").message(M.LINK_INFO)
        heap = FractalHeap(hf.reader, info.heap_address, "links")
        hdr = rbt.read_header(hf.reader, info.name_index_address)
        assert hdr.type == bt.LINK_NAME and hdr.depth == 2 and hdr.total_records == N_LINKS
        recs = list(rbt.iterate(hf.reader, info.name_index_address, bt.decode_link_name, expect_type=bt.LINK_NAME))
        assert [r.hash for r in recs] == sorted(r.hash for r in recs)
        by_name = {link_name(heap.get(r.heap_id)): r for r in recs}
        assert sorted(by_name) == sorted(names)

        def finder(name):
            h = lookup3(name.encode())

            def compare(r):
                if h != r.hash:
                    return (h > r.hash) - (h < r.hash)
                other = link_name(heap.get(r.heap_id))
                return (name > other) - (name < other)
            return compare

        for name in names[::37] + [names[0], names[-1]]:
            assert rbt.find(hf.reader, info.name_index_address, finder(name), bt.decode_link_name) == by_name[name]
        assert rbt.find(hf.reader, info.name_index_address, finder("missing"), bt.decode_link_name) is None


def test_creation_order_index(links_file):
    p = links_file
    with h5py.File(p, "r") as f:
        names = list(f["g"].keys())          # track_order: creation order
    with H5File.open(str(p)) as hf:
        info = hf.get(address(p, "g"), "/g").message(M.LINK_INFO)
        heap = FractalHeap(hf.reader, info.heap_address, "links")
        recs = list(rbt.iterate(hf.reader, info.order_index_address))     # decoder chosen by type
        assert all(isinstance(r, bt.LinkCorderRecord) for r in recs)
        assert [r.corder for r in recs] == list(range(N_LINKS))
        assert [link_name(heap.get(r.heap_id)) for r in recs] == names
        for k in (0, 1, 44, 45, 1000, N_LINKS - 1):
            r = rbt.find(hf.reader, info.order_index_address, lambda r, k=k: (k > r.corder) - (k < r.corder))
            assert r == recs[k]
        assert rbt.find(hf.reader, info.order_index_address, lambda r: (N_LINKS > r.corder) - (N_LINKS < r.corder)) is None


def test_attribute_indexes(links_file):
    p = links_file
    with h5py.File(p, "r") as f:
        d_names = set(f["d"].attrs.keys())
        o_names = list(f["o"].attrs.keys())
    with H5File.open(str(p)) as hf:
        info = hf.get(address(p, "d"), "/d").message(M.ATTRIBUTE_INFO)
        heap = FractalHeap(hf.reader, info.heap_address, "attributes")
        recs = list(rbt.iterate(hf.reader, info.name_index_address, bt.decode_attr_name))
        got = {attr_name(heap.get(r.heap_id)): r for r in recs}
        assert set(got) == d_names
        assert all(r.hash == lookup3(n.encode()) for n, r in got.items())
        oinfo = hf.get(address(p, "o"), "/o").message(M.ATTRIBUTE_INFO)
        oheap = FractalHeap(hf.reader, oinfo.heap_address, "attributes")
        orecs = list(rbt.iterate(hf.reader, oinfo.order_index_address, bt.decode_attr_corder))
        assert [attr_name(oheap.get(r.heap_id)) for r in orecs] == o_names
        r = rbt.find(hf.reader, oinfo.order_index_address, lambda r: (7 > r.corder) - (7 < r.corder))
        assert attr_name(oheap.get(r.heap_id)) == o_names[7]


def test_record_decoders():
    s = Sizes(8, 8)
    c = lambda b: Reader(b, 0, s, "rec")   # noqa: E731
    addr, length, key = (4096).to_bytes(8, "little"), (300).to_bytes(8, "little"), (5).to_bytes(8, "little")
    assert bt.decode_huge_indirect(c(addr + length + key)) == bt.HugeObjectRecord(4096, 300, id=5)
    rec = bt.decode_huge_indirect_filtered(c(addr + length + struct.pack("<I", 2) + (900).to_bytes(8, "little") + key))
    assert rec == bt.HugeObjectRecord(4096, 300, id=5, filter_mask=2, memory_size=900)
    assert bt.decode_huge_direct(c(addr + length)) == bt.HugeObjectRecord(4096, 300)
    assert bt.decode_huge_direct_filtered(c(addr + length + struct.pack("<I", 1) + (900).to_bytes(8, "little"))) == \
        bt.HugeObjectRecord(4096, 300, filter_mask=1, memory_size=900)
    heap_rec = bt.decode_sohm(c(bytes([0]) + struct.pack("<II", 0xABCD, 3) + bytes(range(8))))
    assert heap_rec == bt.SharedMessageRecord(0, 0xABCD, refcount=3, heap_id=bytes(range(8)))
    oh_rec = bt.decode_sohm(c(bytes([1]) + struct.pack("<I", 7) + bytes([0, 12]) + struct.pack("<H", 2) + addr))
    assert oh_rec == bt.SharedMessageRecord(1, 7, msg_type=12, oh_index=2, oh_address=4096)
    with pytest.raises(FormatError):
        bt.decode_sohm(c(bytes([5]) + bytes(20)))
    undef = b"\xff" * 8
    dec = bt.chunk_record_decoder(2, True, 3)
    r = dec(c(undef + (70000).to_bytes(3, "little") + struct.pack("<I", 1) + struct.pack("<QQ", 4, 9)))
    assert r == bt.ChunkRecordV2(None, (4, 9), 70000, 1)
    assert bt.record_decoder(bt.CHUNK, rank=1)(c(addr + struct.pack("<Q", 3))) == bt.ChunkRecordV2(4096, (3,))
    # chunk size widths: one byte of headroom (layout v4), size of lengths (libhdf5 2.0 layout v5)
    assert bt.chunk_size_width(400, s) == 3 and bt.chunk_size_width(255, s) == 2
    assert bt.chunk_size_width(65536, s) == 4 and bt.chunk_size_width(400, Sizes(8, 4), wide=True) == 4
    assert bt.chunk_size_width(2**62, s) == 8


# -- corruption -------------------------------------------------------------------------------


def _tree(p):
    with H5File.open(str(p)) as hf:
        info = hf.get(address(p, "g"), "/g").message(M.LINK_INFO)
        hdr = rbt.read_header(hf.reader, info.name_index_address)
        root = rbt.read_node(hf.reader, hdr, hdr.root_address, hdr.root_nrecords, hdr.depth)
        child = rbt.read_node(hf.reader, hdr, root.children[0].address, root.children[0].nrecords, hdr.depth - 1)
        return info.name_index_address, hdr, root, child, hf.reader.eof


def _write(path, addr, data):
    with open(path, "r+b") as fh:
        fh.seek(addr)
        fh.write(data)


def _rechecksum(path, start, length):
    with open(path, "r+b") as fh:
        fh.seek(start)
        body = fh.read(length)
        fh.write(struct.pack("<I", lookup3(body)))


def test_corrupt_leaf_checksum(links_file, tmp_path):
    addr, hdr, root, child, _ = _tree(links_file)
    leaf = child.children[0]
    q = tmp_path / "c.h5"
    shutil.copy(links_file, q)
    _write(q, leaf.address + 8, b"\x5a")
    with H5File.open(str(q)) as hf, pytest.raises(ChecksumError):
        list(rbt.iterate(hf.reader, addr, bt.decode_link_name))
    # the header is checksummed too
    q2 = tmp_path / "h.h5"
    shutil.copy(links_file, q2)
    _write(q2, addr + 8, b"\x01")
    with H5File.open(str(q2)) as hf, pytest.raises(ChecksumError):
        rbt.read_header(hf.reader, addr)


def _pointer_pos(hdr, node, k):
    """File offset of child pointer k of an internal node, and the node's checksummed length."""
    ptr = hdr.pointer_size(node.depth)
    start = node.address + 6 + len(node.records) * hdr.record_size
    return start + k * ptr, 6 + len(node.records) * hdr.record_size + len(node.children) * ptr


def test_child_outside_file(links_file, tmp_path):
    addr, hdr, root, child, eof = _tree(links_file)
    pos, length = _pointer_pos(hdr, root, 1)
    q = tmp_path / "o.h5"
    shutil.copy(links_file, q)
    _write(q, pos, (eof + 100).to_bytes(8, "little"))
    _rechecksum(q, root.address, length)
    with H5File.open(str(q)) as hf:
        with pytest.raises(FormatError, match="outside the file"):
            list(rbt.iterate(hf.reader, addr, bt.decode_link_name))


def test_cycle(links_file, tmp_path):
    """A child pointer back at the root (a cycle) or at a sibling (a shared node) is refused."""
    addr, hdr, root, child, _ = _tree(links_file)
    for target in (root.address, root.children[0].address):
        pos, length = _pointer_pos(hdr, root, 1)
        q = tmp_path / f"cy{target}.h5"
        shutil.copy(links_file, q)
        _write(q, pos, target.to_bytes(8, "little"))
        _rechecksum(q, root.address, length)
        with H5File.open(str(q)) as hf:
            with pytest.raises(FormatError):
                list(rbt.iterate(hf.reader, addr, bt.decode_link_name))
            # a lookup descends at most depth + 1 nodes, whatever the pointers say
            try:
                for h in range(0, 2**32, 2**26):
                    rbt.find(hf.reader, addr, lambda r, h=h: (h > r.hash) - (h < r.hash), bt.decode_link_name)
            except FormatError:
                pass


def test_absurd_depth_and_sizes(links_file, tmp_path):
    addr, hdr, root, child, _ = _tree(links_file)
    hsize = bt.header_size(Sizes(8, 8))
    for offset, value in ((12, struct.pack("<H", 1000)),     # depth
                          (12, struct.pack("<H", 30)),       # deep enough to overflow the counters
                          (6, struct.pack("<I", 8)),         # node size below the node prefix
                          (10, struct.pack("<H", 0))):       # record size 0
        q = tmp_path / f"d{offset}{value.hex()}.h5"
        shutil.copy(links_file, q)
        _write(q, addr + offset, value)
        _rechecksum(q, addr, hsize - 4)
        with H5File.open(str(q)) as hf, pytest.raises(FormatError):
            list(rbt.iterate(hf.reader, addr, bt.decode_link_name))
    # a root claiming more records than a node holds
    q = tmp_path / "n.h5"
    shutil.copy(links_file, q)
    _write(q, addr + 16 + 8, struct.pack("<H", 999))
    _rechecksum(q, addr, hsize - 4)
    with H5File.open(str(q)) as hf, pytest.raises(FormatError):
        list(rbt.iterate(hf.reader, addr, bt.decode_link_name))
