"""Each on-disk structure decoded from files libhdf5 wrote, field by field against what libhdf5
itself reports for the same file (h5py's low-level API), in the oldest and newest formats."""

from __future__ import annotations

import os

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

from h5fs.errors import FormatError  # noqa: E402
from h5fs.format import btree_v1  # noqa: E402
from h5fs.format.codec import Reader  # noqa: E402
from h5fs.format.messages import dataspace, fill_value, filter_pipeline, layout, link  # noqa: E402
from h5fs.model import messages as M  # noqa: E402
from h5fs.model.file import H5File  # noqa: E402
from h5fs.storage.blockio import BlockReader  # noqa: E402
from h5fs.storage import local_heap, superblock, symbol_table  # noqa: E402
from h5fs.storage.btree_v1 import iterate_leaves  # noqa: E402
from h5fs.storage.object_header import reader as object_header  # noqa: E402

LIBVERS = ("earliest", "latest")


@pytest.fixture(scope="module", params=LIBVERS)
def sample(request, tmp_path_factory):
    libver = request.param
    path = tmp_path_factory.mktemp(libver) / "structures.h5"
    with h5py.File(path, "w", libver=libver, userblock_size=1024) as f:
        f.create_dataset("contig", data=np.arange(12, dtype="<i4").reshape(3, 4))
        f.create_dataset("chunked", data=np.arange(1000, dtype=">f8"), chunks=(64,), maxshape=(None,),
                         compression="gzip", compression_opts=7, shuffle=True, fletcher32=True, fillvalue=-1.0)
        f.create_dataset("sparse", shape=(40, 40), chunks=(10, 10), dtype="u2", fillvalue=9,
                         maxshape=(40, None))
        f["sparse"][5, 5] = 1
        f.create_dataset("scalar", data=np.float32(2.5))
        f.create_dataset("null", data=h5py.Empty("i8"))
        g = f.create_group("group")
        for name in ["zz", "aa", "mm"]:
            g.create_group(name)
        g["soft"] = h5py.SoftLink("/contig")
        # an external link needs a new-style group (libhdf5 converts a symbol table on adding one)
        f.create_group("with_external")["ext"] = h5py.ExternalLink("other.h5", "/x")
        ordered = f.create_group("ordered", track_order=True)  # a new-style group in any format
        for name in ["zz", "aa", "mm"]:
            ordered[name] = np.int8(0)
        f["contig"].attrs["note"] = "text"
    ours = H5File.open(str(path))
    theirs = h5py.File(path, "r")
    yield libver, path, ours, theirs
    theirs.close()
    ours.close()


def addr(obj) -> int:
    return h5py.h5o.get_info(obj.id).addr


def test_superblock(sample):
    libver, path, ours, theirs = sample
    fd = os.open(path, os.O_RDONLY)
    try:
        sb = superblock.read(fd)
    finally:
        os.close(fd)
    fcpl = theirs.id.get_create_plist()
    assert sb.version == fcpl.get_version()[0]
    assert (sb.sizes.offset, sb.sizes.length) == fcpl.get_sizes()
    assert sb.location == fcpl.get_userblock() == 1024
    assert sb.root_header_address == addr(theirs)
    assert sb.eof_address == os.path.getsize(path)  # absolute: the user block counts


def test_object_headers(sample):
    libver, path, ours, theirs = sample
    for name in ["contig", "chunked", "group", "scalar"]:
        info = h5py.h5o.get_info(theirs[name].id)
        header = object_header.read(ours.reader, info.addr, name)
        assert header.version == info.hdr.version, name
        assert header.refcount == info.rc or header.version == 2, name
        # libhdf5 counts NIL and continuation messages too; h5fs keeps only the real ones
        assert 0 < len(header.messages) <= info.hdr.nmesgs, name
        assert len(header.find(M.ATTRIBUTE)) == info.num_attrs or info.num_attrs > 8, name


def message(ours, name, mtype, decoder):
    raw = ours.resolve(name).header.first(mtype)
    assert raw is not None, (name, mtype)
    return decoder(Reader(raw.data, 0, ours.sizes, name))


@pytest.mark.parametrize("name", ["contig", "chunked", "sparse", "scalar", "null"])
def test_dataspace_message(sample, name):
    _, _, ours, theirs = sample
    space = message(ours, name, M.DATASPACE, dataspace.decode)
    sid = theirs[name].id.get_space()
    kind = {h5py.h5s.SCALAR: dataspace.SCALAR, h5py.h5s.SIMPLE: dataspace.SIMPLE,
            h5py.h5s.NULL: dataspace.NULL}[sid.get_simple_extent_type()]
    assert space.kind == kind
    if kind == dataspace.SIMPLE:
        assert space.dims == sid.shape
        assert space.maxdims == tuple(None if m == h5py.h5s.UNLIMITED else m for m in sid.get_simple_extent_dims(True))


def test_layout_messages(sample):
    libver, _, ours, theirs = sample
    contig = message(ours, "contig", M.LAYOUT, layout.decode)
    assert contig.layout_class == layout.CONTIGUOUS
    assert contig.address is not None
    assert ours.reader.base + contig.address == theirs["contig"].id.get_offset()
    assert contig.size == theirs["contig"].id.get_storage_size()
    chunked = message(ours, "chunked", M.LAYOUT, layout.decode)
    assert chunked.layout_class == layout.CHUNKED
    assert chunked.chunk_dims == theirs["chunked"].chunks
    assert chunked.element_size == 8
    expected_index = layout.BTREE_V1 if libver == "earliest" else layout.EXTENSIBLE_ARRAY
    assert chunked.index.index_type == expected_index
    scalar = message(ours, "scalar", M.LAYOUT, layout.decode)
    assert scalar.layout_class in (layout.CONTIGUOUS, layout.COMPACT)


def test_filter_pipeline_message(sample):
    _, _, ours, theirs = sample
    pipe = message(ours, "chunked", M.FILTERS, filter_pipeline.decode)
    dcpl = theirs["chunked"].id.get_create_plist()
    assert len(pipe.filters) == dcpl.get_nfilters()
    for i, spec in enumerate(pipe.filters):
        fid, flags, cd_values, _name = dcpl.get_filter(i)
        assert (spec.id, spec.flags, spec.client_data) == (fid, flags, tuple(cd_values))
    assert [f.label for f in pipe.filters] == ["shuffle", "deflate", "fletcher32"]


@pytest.mark.parametrize("name,value", [("chunked", -1.0), ("sparse", 9)])
def test_fill_value_message(sample, name, value):
    _, _, ours, theirs = sample
    fv = message(ours, name, M.FILL, fill_value.decode)
    dcpl = theirs[name].id.get_create_plist()
    expected = np.zeros(1, theirs[name].dtype)
    dcpl.get_fill_value(expected)
    assert fv.value == expected.tobytes() and expected[0] == value
    assert fv.alloc_time == dcpl.get_alloc_time()
    assert fv.write_time == dcpl.get_fill_time()


def test_links(sample):
    libver, _, ours, theirs = sample
    ext = ours.resolve("with_external").link("ext")
    assert (ext.kind, ext.filename, ext.target) == ("external", "other.h5", "/x")
    group = ours.resolve("group")
    links = {ln.name: ln for ln in group.links()}
    gid = theirs["group"].id
    for name, ln in links.items():
        info = gid.links.get_info(name.encode())
        assert ln.link_type == {h5py.h5l.TYPE_HARD: link.HARD, h5py.h5l.TYPE_SOFT: link.SOFT,
                                h5py.h5l.TYPE_EXTERNAL: link.EXTERNAL}[info.type], name
        assert ln.creation_order is None and not info.corder_valid, name  # not tracked here
        if ln.link_type == link.HARD:
            assert ln.address == addr(theirs["group"][name])
        elif ln.link_type == link.SOFT:
            assert ln.target.encode() == gid.links.get_val(name.encode())
    assert [ln.name for ln in group.links()] == list(theirs["group"]) == sorted(links)
    # a group created with tracked order stores each link's creation order and lists by it
    ordered = ours.resolve("ordered").links()
    oid = theirs["ordered"].id
    assert [ln.creation_order for ln in ordered] == [oid.links.get_info(ln.name.encode()).corder for ln in ordered]
    assert [ln.name for ln in ordered] == list(theirs["ordered"]) == ["zz", "aa", "mm"]


def test_symbol_table_structures(sample):
    """Old-style groups: the v1 B-tree (type 0), its symbol table nodes and the local heap."""
    libver, path, ours, theirs = sample
    if libver != "earliest":
        pytest.skip("the latest format stores groups as links")
    g = ours.resolve("group")
    stab = g.message(M.SYMBOL_TABLE)
    heap = local_heap.read(ours.reader, stab.heap_address, "group")
    names, addresses = [], []
    for _, snod, _ in iterate_leaves(ours.reader, stab.btree_address, btree_v1.GROUP, 0, "group"):
        for entry in symbol_table.node_entries(ours.reader, snod, "group"):
            names.append(heap.string(entry.name_offset).decode())
            addresses.append(entry.header_address)
    assert names == sorted(theirs["group"].keys())  # symbol tables keep name order
    for name, address in zip(names, addresses):
        if theirs["group"].get(name, getlink=True).__class__ is h5py.HardLink:
            assert address == addr(theirs["group"][name])


def test_chunk_btree_keys(sample):
    """Version 1 B-tree type 1: every chunk's offset, size, mask and address as libhdf5 lists them."""
    libver, _, ours, theirs = sample
    if libver != "earliest":
        pytest.skip("the latest format indexes chunks with the new index types")
    ds = ours.resolve("chunked")
    reader = BlockReader(ours.fd, ours.superblock.location, ours.sizes)
    got = {}
    for key, child, _ in iterate_leaves(reader, ds.layout.index.address, btree_v1.CHUNK, 1, "chunked"):
        got[key.offsets[:1]] = (key.size, key.filter_mask, reader.base + child)
    dsid = theirs["chunked"].id
    expected = {}
    for i in range(dsid.get_num_chunks()):
        info = dsid.get_chunk_info(i)
        expected[info.chunk_offset] = (info.size, info.filter_mask, info.byte_offset)
    assert got == expected


def test_chunk_btree_nodes_of_every_shape_decode_as_encoded():
    """Chunk nodes are decoded through one NumPy view of their entries: random nodes of ranks
    1-4, 2/4/8-byte addresses and up to 2K entries come back as they were encoded, and an
    undefined child address is refused."""
    import random
    from h5fs.format.codec import Sizes
    rng = random.Random(1)
    for _ in range(300):
        rank, width = rng.randint(1, 4), rng.choice([2, 4, 8])
        sizes, k = Sizes(offset=width, length=8), rng.randint(1, 40)
        used = rng.randint(1, 2 * k)
        keys = tuple(btree_v1.ChunkKey(rng.randrange(1 << 32), rng.randrange(1 << 32),
                                       tuple(rng.randrange(1 << 40) for _ in range(rank)) + (0,))
                     for _ in range(used + 1))
        children = tuple(rng.randrange((1 << 8 * width) - 1) for _ in range(used))
        node = btree_v1.Node(btree_v1.CHUNK, rng.randint(0, 3), keys, children, rng.choice([None, 96]), None, 40)
        assert btree_v1.decode_node(btree_v1.encode_node(node, sizes, k), 40, btree_v1.CHUNK, rank, sizes) == node
    bad = btree_v1.encode_node(btree_v1.Node(btree_v1.CHUNK, 0, keys[:2], (sizes.undefined,), None, None), sizes, k)
    with pytest.raises(FormatError, match="undefined child address"):
        btree_v1.decode_node(bad, 40, btree_v1.CHUNK, rank, sizes)
