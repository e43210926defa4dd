"""The format engine against h5py: files written by libhdf5 in its oldest and newest formats, read
object by object through h5fs.model and compared with what h5py reads."""

from __future__ import annotations

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

from h5fs.errors import FormatError, Unsupported  # noqa: E402
from h5fs.model.dataset import Dataset  # noqa: E402
from h5fs.model.file import H5File  # noqa: E402
from h5fs.model.group import Group  # noqa: E402
from h5fs.storage.remote import RemoteOptions  # noqa: E402
from remote_support import SOURCES, Published, range_server, s3_server  # noqa: E402,F401 (fixtures)
from roundtrip_support import build_everything

LIBVERS = ("earliest", "latest")


def h5py_objects(f):
    """path -> h5py object for every object reachable by hard links, one path per object."""
    out = {"/": f}
    seen = {f.id.addr if hasattr(f.id, "addr") else None}

    def visit(name, obj):
        out["/" + name] = obj
    f.visititems(visit)
    del seen
    return out


@pytest.fixture(scope="module", params=[(v, s) for v in LIBVERS for s in SOURCES], ids="-".join)
def pair(request, tmp_path_factory):
    """(h5fs on the file, or on a copy of it on the HTTP server or in S3; h5py on the file)."""
    libver, source = request.param
    path = tmp_path_factory.mktemp(libver) / "everything.h5"
    build_everything(path, libver)
    published = Published(request, source, path.parent / "block-cache")
    if source == "local":
        ours = H5File.open(str(path))
    else:
        url, remote = published.url(path, f"engine-{libver}")
        ours = H5File.open(url, remote=RemoteOptions(**remote))
    theirs = h5py.File(path, "r")
    ours.libver = libver
    yield ours, theirs
    theirs.close()
    ours.close()
    published.remove()


def test_superblock_version(pair):
    ours, theirs = pair
    expected = 0 if ours.libver == "earliest" else 3
    assert ours.superblock.version == expected


def test_every_group_lists_like_h5py(pair):
    ours, theirs = pair
    for path, obj in h5py_objects(theirs).items():
        if isinstance(obj, h5py.Group):
            group = ours.resolve(path)
            assert isinstance(group, Group), path
            names = [ln.name for ln in group.links()]
            assert names == list(obj.keys()), path


def test_link_kinds(pair):
    ours, _ = pair
    links = {ln.name: ln for ln in ours.resolve("/links").links()}
    assert links["soft_abs"].kind == "soft" and links["soft_abs"].target == "/links/target"
    assert links["soft_rel"].target == "target"
    assert links["dangling"].target == "/nowhere"
    assert links["external"].kind == "external"
    assert (links["external"].filename, links["external"].target) == ("other.h5", "/some/path")
    assert links["hard"].address == links["target"].address
    assert ours.resolve("/links/target").nlink == 2


def test_creation_order_listing(pair):
    ours, _ = pair
    assert [ln.name for ln in ours.resolve("/ordered").links()] == ["zeta", "alpha", "mid"]


def _expected_npy(ds) -> np.ndarray:
    if ds.shape is None:
        return None
    arr = ds[()]
    info = h5py.check_string_dtype(ds.dtype)
    if info is not None and info.length is None:
        return np.array([s.decode() if isinstance(s, bytes) else s for s in np.ravel(arr)]).reshape(ds.shape)
    return arr


def test_every_dataset_matches_h5py(pair):
    ours, theirs = pair
    checked = 0
    for path, obj in h5py_objects(theirs).items():
        if not isinstance(obj, h5py.Dataset):
            continue
        ds = ours.resolve(path)
        assert isinstance(ds, Dataset), path
        assert ds.shape == (obj.shape or ()), path
        assert ds.maxshape == (obj.maxshape or ()), path
        expected = _expected_npy(obj)
        if expected is None:
            assert ds.raw_size == 0
            continue
        got = ds.read_array()
        if expected.dtype.kind == "U":
            assert got.tolist() == expected.tolist(), path
        else:
            # h5py's bool enum reads as numpy bool in the .npy view too
            assert got.dtype == expected.dtype, path
            assert got.tobytes() == expected.tobytes(), path
        if obj.dtype.kind != "O":
            assert ds.read_raw(0, ds.raw_size) == expected.tobytes(), path
        checked += 1
    assert checked > 30


@pytest.mark.parametrize("name", ["layout/gzip", "layout/3d", "layout/partial", "layout/many_chunks",
                                  "layout/contiguous", "layout/two_unlimited", "layout/full_rows",
                                  "layout/full_planes"])
def test_raw_reads_at_odd_offsets(pair, name):
    ours, theirs = pair
    expected = theirs[name][()].tobytes()
    ds = ours.resolve(name)
    rng = np.random.default_rng(3)
    for _ in range(60):
        a = int(rng.integers(0, len(expected)))
        n = int(rng.integers(0, 3000))
        assert ds.read_raw(a, n) == expected[a:a + n], (name, a, n)
    assert ds.read_raw(len(expected) - 1, 100) == expected[-1:]
    assert ds.read_raw(len(expected), 100) == b""


def test_attributes_match_h5py(pair):
    ours, theirs = pair
    for path, obj in h5py_objects(theirs).items():
        if isinstance(obj, h5py.Datatype):
            continue
        attrs = {a.name: a.value for a in ours.resolve(path).attributes()}
        assert sorted(attrs) == sorted(obj.attrs.keys()), path
        for name, value in obj.attrs.items():
            got = attrs[name]
            if isinstance(value, str):
                assert got.item() == value, (path, name)
            elif isinstance(value, np.ndarray) and value.dtype.kind == "O":
                assert got.tolist() == [v.decode() if isinstance(v, bytes) else v for v in value.tolist()]
            else:
                assert np.array_equal(got, value), (path, name)


def test_storage_facts(pair):
    ours, theirs = pair
    gz = ours.resolve("layout/gzip")
    facts = gz.facts()
    assert facts["filters"] == "deflate"
    assert facts["chunks"] == "(16, 7)"
    assert 0 < gz.storage_size < gz.raw_size
    assert gz.storage_size == theirs["layout/gzip"].id.get_storage_size()
    assert ours.resolve("layout/unallocated").storage_size == 0
    assert ours.resolve("layout/unallocated").facts()["fill_value"] == "-7"
    assert ours.resolve("layout/contiguous").facts()["layout"] == "contiguous"


def test_named_datatype(pair):
    ours, _ = pair
    t = ours.resolve("committed_t")
    assert t.kind == "datatype"
    assert t.facts()["dtype"] == "<i4"


def test_user_block_and_small_offsets(tmp_path):
    path = tmp_path / "ub.h5"
    with h5py.File(path, "w", userblock_size=1024) as f:
        f["x"] = np.arange(10.0)
    with open(path, "r+b") as fh:
        fh.write(b"user block text")
    with H5File.open(str(path)) as ours:
        assert ours.superblock.location == 1024
        assert ours.resolve("x").read_array().tolist() == list(np.arange(10.0))


@pytest.mark.parametrize("libver", ["earliest", "latest"])
@pytest.mark.parametrize("offsets,lengths", [(4, 4), (8, 4), (4, 8), (2, 2)])
def test_offset_and_length_sizes(tmp_path, offsets, lengths, libver):
    path = tmp_path / f"sizes{offsets}{lengths}.h5"
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fcpl.set_sizes(offsets, lengths)
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    low = h5py.h5f.LIBVER_EARLIEST if libver == "earliest" else h5py.h5f.LIBVER_LATEST
    fapl.set_libver_bounds(low, h5py.h5f.LIBVER_LATEST)
    fid = h5py.h5f.create(str(path).encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl)
    # with 2-byte lengths a dense group's heap cannot record its 64 KiB block size: libhdf5 writes
    # one it cannot read back, so such files keep their groups compact here
    nlinks = 6 if (lengths == 2 and libver == "latest") else 12
    with h5py.File(fid) as f:
        for i in range(nlinks):
            f[f"d{i}"] = np.arange(i + 1, dtype="<i2")
        f.create_dataset("chunked", data=np.arange(200, dtype="u2"), chunks=(10,), compression="gzip")
        f.attrs["a"] = "text"
    with H5File.open(str(path)) as ours, h5py.File(path) as theirs:
        assert (ours.sizes.offset, ours.sizes.length) == (offsets, lengths)
        assert ours.superblock.version == (0 if libver == "earliest" else 3)
        assert [ln.name for ln in ours.root.links()] == list(theirs.keys())
        for name in theirs:
            assert ours.resolve(name).read_array().tobytes() == theirs[name][()].tobytes()


def test_not_hdf5(tmp_path):
    path = tmp_path / "x.h5"
    path.write_bytes(b"not an hdf5 file" * 100)
    with pytest.raises(FormatError, match="not an HDF5 file"):
        H5File.open(str(path))


def test_unsupported_is_named(tmp_path):
    path = tmp_path / "u.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(10, dtype="i4"), chunks=(5,), compression="gzip")
    data = bytearray(path.read_bytes())
    # the filter id of deflate (1) becomes an unknown id 999: in a version 1 pipeline message the
    # filter description (id, name length, flags, client values) precedes the stored name
    i = data.find(b"deflate\x00")
    assert i >= 8 and data[i - 8:i - 6] == b"\x01\x00"
    data[i - 8:i - 6] = (999).to_bytes(2, "little")
    path.write_bytes(bytes(data))
    with H5File.open(str(path)) as ours:
        with pytest.raises(Unsupported, match="999"):
            ours.resolve("x").read_raw(0, 40)


def test_vlen_view_size_is_bounded(tmp_path, monkeypatch):
    """The .npy view of vlen strings is as wide as the longest string: a file where that would
    take more memory than allowed answers Unsupported, never allocates it."""
    from h5fs.model import values
    path = tmp_path / "wide.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("s", data=["x"] * 1000 + ["y" * 5000], dtype=h5py.string_dtype())
    monkeypatch.setattr(values, "MAX_VIEW_BYTES", 1000 * 5000 * 4)  # below 1001 x 5000 UCS-4 chars
    with H5File.open(str(path)) as ours:
        with pytest.raises(Unsupported, match="would take"):
            ours.resolve("s").read_npy_body(0, 100)


def test_vlen_payload_is_bounded_before_decoding(tmp_path):
    """Every element of a vlen string dataset may name the same large heap object: the payload
    they claim together is refused before anything is gathered."""
    path = tmp_path / "shared_heap.h5"
    n = 400
    with h5py.File(path, "w", libver="earliest") as f:
        d = f.create_dataset("s", (n,), dtype=h5py.string_dtype())
        d[0] = "x" * (1 << 20)
        d[1:] = ["y"] * (n - 1)
        offset = d.id.get_offset()
    data = bytearray(path.read_bytes())
    data[offset:offset + 16 * n] = data[offset:offset + 16] * n  # all descriptors name the 1 MiB string
    path.write_bytes(bytes(data))
    with H5File.open(str(path)) as ours:
        with pytest.raises(Unsupported, match="variable-length data of"):
            ours.resolve("s").npy_body_size


def test_each_chunk_decoded_once_in_a_row_major_read(tmp_path, monkeypatch):
    """Serving row-major bytes revisits every chunk of a row once per element row: the cache
    grows to hold a row of chunks, so a front-to-back read decodes each chunk once."""
    from h5fs.storage.chunked import ChunkedSource
    path = tmp_path / "rows.h5"
    data = np.arange(64 * 8192, dtype="<f4").reshape(64, 8192)
    with h5py.File(path, "w") as f:
        f.create_dataset("d", data=data, chunks=(8, 64), compression="gzip")  # 128 chunks per row
    loads = []
    real = ChunkedSource._load
    monkeypatch.setattr(ChunkedSource, "_load", lambda self, coords, rec: loads.append(coords) or real(self, coords, rec))
    with H5File.open(str(path)) as ours:
        ours.chunk_cache.budget = 16 * 1024  # far below one row of chunks (128 x 2 KiB)
        ds = ours.resolve("d")
        out = b"".join(ds.read_raw(off, 4096) for off in range(0, ds.raw_size, 4096))
    assert out == data.tobytes()
    assert len(loads) == len(set(loads)) == 8 * 128


def test_dense_attributes_flag_is_a_bool(tmp_path):
    """`dense_attributes` decides whether listing attributes takes a worker-thread hop: it must be
    the value (False for attributes in the header), not a bound method that is always true."""
    path = tmp_path / "attrs.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.attrs["a"] = 1
        g = f.create_group("dense")
        for i in range(20):   # past the compact maximum (8): a fractal heap holds them
            g.attrs[f"x{i}"] = i
    with H5File.open(str(path)) as hf:
        assert hf.root.dense_attributes is False
        assert hf.resolve("/dense").dense_attributes is True


@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_one_link_looked_up_as_the_listing_has_it(tmp_path, libver):
    """A name is looked up by one descent of the group's index (an old-style group's B-tree down
    to a symbol table node, a dense group's name index), not by listing the group: every name
    h5py made is found with what the listing says of it, names between and around them are not,
    in a group of 3,000 links (a B-tree of several levels), soft links and odd bytes included."""
    import random
    import h5py
    names = [f"n{i:05d}" for i in range(0, 6000, 2)] + ["a b", "~tilde", "\x01ctl", "zz"]
    if libver == "latest":   # a UTF-8 name makes libhdf5 give an old-style group link messages
        names.append("Ünïcode")
    path = tmp_path / "big.h5"
    with h5py.File(path, "w", libver=libver) as f:
        g = f.create_group("g")
        for i, name in enumerate(names):
            if i % 7 == 0:
                g[name] = h5py.SoftLink(f"/target{i}")
            else:
                g.create_group(name)
    absent = [f"n{i:05d}" for i in range(1, 6001, 2)] + ["", "a", "a c", "n", "zzz", "\x00", "ÿ"]
    with H5File.open(str(path)) as f:
        g = f.resolve("/g")
        listed = {ln.name: ln for ln in f.resolve("/g").links()}
        assert sorted(listed) == sorted(names)
    with H5File.open(str(path)) as f:   # a fresh file: no listing cached
        g = f.resolve("/g")
        assert (g._symbol_table() is not None) == (libver == "earliest")
        for name in random.Random(1).sample(names, len(names)):
            assert g.link(name) == listed[name], name
        for name in absent:
            assert g.link(name) is None, name
        assert not g.has("_links")   # looked up, never listed
