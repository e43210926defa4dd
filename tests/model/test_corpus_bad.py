"""Malformed files: the CVE/fuzzer corpus in shared/corpus/bad, and breakages we make ourselves.

What h5fs owes each of them (shared/corpus/bad/README.md): `H5File.open` refuses the file with a
clear H5fsError, or it opens and a walk of everything the mount would touch finishes in bounded
time and memory, the broken objects answering H5fsError (EIO) and nothing else ever escaping.
Each corpus file is walked in a forked child with RLIMIT_AS and a timeout (tests/walk.py).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from h5fs.errors import ChecksumError, FormatError, H5fsError
from h5fs.format.checksum import lookup3
from h5fs.model.file import H5File

from conftest import bad_corpus  # noqa: E402
from walk import walk, walk_isolated  # noqa: E402

h5py = pytest.importorskip("h5py")

CORPUS_PATHS = bad_corpus()
CORPUS, CORPUS_FILES = CORPUS_PATHS[0].parent, [p.name for p in CORPUS_PATHS]
TIMEOUT = float(os.environ.get("H5FS_WALK_TIMEOUT", "20"))

# Corpus files that still fail because of a module another developer owns: name -> reason.
# Kept non-strict so that the fix shows up as XPASS.
KNOWN_ELSEWHERE: dict[str, str] = {
}


def _corpus_params():
    out = []
    for name in CORPUS_FILES:
        marks = ()
        if name in KNOWN_ELSEWHERE:
            marks = (pytest.mark.xfail(reason=KNOWN_ELSEWHERE[name], strict=False),)
        out.append(pytest.param(name, marks=marks, id=name))
    return out


@pytest.mark.parametrize("name", _corpus_params())
def test_corpus_file(name):
    run = walk_isolated(str(CORPUS / name), timeout=TIMEOUT)
    assert run.status == "done", f"{name}: {run.status}: {run.detail}"
    res = run.result
    assert not res.bugs, res.summary()
    if res.refused is not None:
        assert res.refused.split(":", 1)[1].strip(), f"{name}: refused without a message"
    else:
        assert res.objects >= 1
        for o in res.errors:
            assert o.error.split(":", 1)[1].strip(), f"{name}: {o.path} [{o.step}]: empty message"


# ---------------------------------------------------------------------------------------------
# Breakages made from h5py files: the specific behaviour, compared with h5py on a pristine copy.

A = np.arange(1000, dtype="<i4")
B = np.linspace(0, 1, 240, dtype="<f8").reshape(12, 20)
C = np.arange(4000, dtype="<u2").reshape(40, 100)
Z = np.arange(100_000, dtype="<i4")


def _make(path: Path, libver: str) -> None:
    with h5py.File(path, "w", libver=(libver, "latest") if libver == "earliest" else libver) as f:
        f.create_dataset("a", data=A)
        f.create_dataset("b", data=B)
        f.create_dataset("c", data=C, chunks=(10, 25), compression="gzip")
        g = f.create_group("g")
        g.create_dataset("inner", data=A[:10])
        f.attrs["title"] = "pristine"
        # attributes added after creation push the dataset's header into a continuation block
        # (few enough to stay compact: the latest format turns 9+ attributes dense)
        for i in range(6):
            f["a"].attrs[f"note{i}"] = np.arange(40, dtype="<i8") + i
    with h5py.File(path, "a") as f:
        # added last, so that its contiguous data is what ends the file
        f.create_dataset("z", data=Z)


@pytest.fixture(scope="module", params=["earliest", "latest"])
def pristine(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / f"{request.param}.h5"
    _make(path, request.param)
    return path


def _copy(pristine: Path, tmp_path: Path) -> Path:
    out = tmp_path / "broken.h5"
    shutil.copy(pristine, out)
    return out


def _patch(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


def _addresses(path: Path) -> dict[str, int]:
    with H5File.open(str(path)) as f:
        out = {ln.name: ln.address for ln in f.root.links()}
        g = f.get(out["g"], "/g")
        out.update({"g/" + ln.name: ln.address for ln in g.links()})
        return out


def _assert_sibling_ok(f: H5File, name: str, pristine: Path) -> None:
    """`name` reads from the damaged file exactly as h5py reads it from the pristine one."""
    link = f.root.link(name) if "/" not in name else None
    obj = f.resolve("/" + name) if link is None else f.get(link.address, "/" + name)
    with h5py.File(pristine, "r") as ref:
        expected = ref[name][()]
    got = obj.read_array()
    assert got.dtype == expected.dtype and np.array_equal(got, expected), name


def _assert_clean_walk(path: Path) -> None:
    res = walk(str(path))
    assert not res.bugs, res.summary()


def _v1_messages(path: Path, address: int) -> list[tuple[int, int, int]]:
    """(type, size, data offset) of the messages of the first block of a version 1 header."""
    raw = path.read_bytes()
    assert raw[address] == 1
    size = int.from_bytes(raw[address + 8:address + 12], "little")
    pos, end, out = address + 16, address + 16 + size, []
    while pos + 8 <= end:
        mtype = int.from_bytes(raw[pos:pos + 2], "little")
        msize = int.from_bytes(raw[pos + 2:pos + 4], "little")
        out.append((mtype, msize, pos + 8))
        pos += 8 + msize
    return out


def _v2_chunk0(path: Path, address: int) -> tuple[int, int]:
    """(offset of the first message, end of messages = checksum offset) of a v2 header's chunk 0."""
    raw = path.read_bytes()
    assert raw[address:address + 4] == b"OHDR"
    flags = raw[address + 5]
    pos = address + 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
    width = 1 << (flags & 3)
    size = int.from_bytes(raw[pos:pos + width], "little")
    start = pos + width
    return start, start + size


def _v2_messages(raw: bytes, start: int, end: int, flags: int) -> list[tuple[int, int, int]]:
    head = 6 if flags & 0x04 else 4
    pos, out = start, []
    while pos + head <= end:
        mtype, msize = raw[pos], int.from_bytes(raw[pos + 1:pos + 3], "little")
        out.append((mtype, msize, pos + head))
        pos += head + msize
    return out


# -- mount-level refusal ----------------------------------------------------------------------

def test_not_hdf5_is_refused(tmp_path):
    p = tmp_path / "x.h5"
    p.write_bytes(b"hello, world\n" * 100)
    with pytest.raises(FormatError, match="not an HDF5 file"):
        H5File.open(str(p))


def test_empty_file_is_refused(tmp_path):
    p = tmp_path / "x.h5"
    p.write_bytes(b"")
    with pytest.raises(FormatError, match="not an HDF5 file"):
        H5File.open(str(p))


@pytest.mark.parametrize("cut", [8, 9, 20, 40, 46])
def test_truncated_superblock_is_refused(pristine, tmp_path, cut):
    p = _copy(pristine, tmp_path)
    os.truncate(p, cut)
    with pytest.raises(FormatError, match="superblock"):
        H5File.open(str(p))


def test_superblock_bad_sizes_refused(pristine, tmp_path):
    p = _copy(pristine, tmp_path)
    version = p.read_bytes()[8]
    where = 13 if version in (0, 1) else 9
    _patch(p, where, b"\x03")  # size of offsets 3: not a valid width
    with pytest.raises(FormatError, match="superblock"):
        H5File.open(str(p))


def test_superblock_checksum_or_root_refused(pristine, tmp_path):
    """A flipped bit in the root address: v2+ superblocks fail their checksum; v0 ones point at
    something that is not an object header. Either way the mount is refused, naming why."""
    p = _copy(pristine, tmp_path)
    raw = p.read_bytes()
    version = raw[8]
    if version in (2, 3):
        _patch(p, 8 + 4 + 3 * 8 + 2, bytes([raw[8 + 4 + 3 * 8 + 2] ^ 0x40]))
        with pytest.raises(ChecksumError, match="superblock"):
            H5File.open(str(p))
    else:
        # root symbol table entry: link name offset (8) then object header address
        off = 8 + 16 + 4 * 8 + 8
        _patch(p, off, (len(raw) + 4096).to_bytes(8, "little"))
        with pytest.raises(FormatError, match="^/: .*outside the file"):
            H5File.open(str(p))


def test_truncated_to_half(pristine, tmp_path):
    """Cut the file in half: refused or mounted, never a crash; whatever opens reads right."""
    p = _copy(pristine, tmp_path)
    os.truncate(p, p.stat().st_size // 2)
    _assert_clean_walk(p)


@pytest.mark.parametrize("frac", [0.1, 0.3, 0.5, 0.7, 0.9, 0.99])
def test_truncated_anywhere_never_crashes(pristine, tmp_path, frac):
    p = _copy(pristine, tmp_path)
    os.truncate(p, int(p.stat().st_size * frac))
    _assert_clean_walk(p)


def test_truncated_data_is_eio_siblings_ok(pristine, tmp_path):
    """The file ends inside dataset z's contiguous data: z answers EIO naming z, the others read
    right."""
    p = _copy(pristine, tmp_path)
    with h5py.File(p, "r") as ref:
        z_at = ref["z"].id.get_offset()
    assert z_at + Z.nbytes == p.stat().st_size
    os.truncate(p, z_at + Z.nbytes // 2)
    with H5File.open(str(p)) as f:
        z = f.get(f.root.link("z").address, "/z")
        with pytest.raises(FormatError, match="^/z: .*outside the file"):
            z.read_raw(0, 16)
        for name in ("a", "b", "c", "g/inner"):
            _assert_sibling_ok(f, name, pristine)
    _assert_clean_walk(p)


# -- one broken object, the rest readable ------------------------------------------------------

def test_corrupt_object_header_is_eio_siblings_ok(pristine, tmp_path):
    p = _copy(pristine, tmp_path)
    addr = _addresses(p)["b"]
    raw = p.read_bytes()
    if raw[addr:addr + 4] == b"OHDR":
        start, end = _v2_chunk0(p, addr)
        _patch(p, start + 2, bytes([raw[start + 2] ^ 0xFF]))   # a byte of the first message
        expected = ChecksumError
    else:
        _patch(p, addr, b"\x07")                               # header version 7
        expected = FormatError
    with H5File.open(str(p)) as f:
        with pytest.raises(expected, match="^/b: "):
            f.get(addr, "/b")
        _assert_sibling_ok(f, "a", pristine)
        _assert_sibling_ok(f, "c", pristine)
        _assert_sibling_ok(f, "g/inner", pristine)
    _assert_clean_walk(p)


def test_corrupt_message_size_is_eio(pristine, tmp_path):
    """A message whose size runs past its header block (v1) or whose checksum is fixed up after
    the damage (v2): the object is EIO, the siblings read right."""
    p = _copy(pristine, tmp_path)
    addr = _addresses(p)["b"]
    raw = p.read_bytes()
    if raw[addr:addr + 4] == b"OHDR":
        start, end = _v2_chunk0(p, addr)
        flags = raw[addr + 5]
        mtype, msize, data = _v2_messages(raw, start, end, flags)[0]
        head = 6 if flags & 0x04 else 4
        buf = bytearray(raw)
        buf[data - head + 1:data - head + 3] = (0xFFF0).to_bytes(2, "little")
        buf[end:end + 4] = lookup3(bytes(buf[addr:end])).to_bytes(4, "little")
        p.write_bytes(bytes(buf))
    else:
        mtype, msize, data = _v1_messages(p, addr)[0]
        _patch(p, data - 6, (0xFFF0).to_bytes(2, "little"))
    with H5File.open(str(p)) as f:
        with pytest.raises(FormatError, match="^/b: "):
            f.get(addr, "/b")
        _assert_sibling_ok(f, "a", pristine)
        _assert_sibling_ok(f, "c", pristine)
    _assert_clean_walk(p)


def test_continuation_cycle_is_eio(pristine, tmp_path):
    """Dataset a's header continues into a block whose continuation points back: EIO, no hang."""
    p = _copy(pristine, tmp_path)
    addr = _addresses(p)["a"]
    raw = p.read_bytes()
    buf = bytearray(raw)
    if raw[addr:addr + 4] == b"OHDR":
        start, end = _v2_chunk0(p, addr)
        flags = raw[addr + 5]
        conts = [m for m in _v2_messages(raw, start, end, flags) if m[0] == 0x10]
        assert conts, "dataset a has no continuation block"
        _, _, data = conts[0]
        # point the continuation at the OHDR chunk itself: a cycle through chunk 0
        buf[data:data + 8] = addr.to_bytes(8, "little")
        buf[data + 8:data + 16] = (end + 4 - addr).to_bytes(8, "little")
        buf[end:end + 4] = lookup3(bytes(buf[addr:end])).to_bytes(4, "little")
    else:
        conts = [m for m in _v1_messages(p, addr) if m[0] == 0x10]
        assert conts, "dataset a has no continuation block"
        _, _, data = conts[0]
        size = int.from_bytes(raw[addr + 8:addr + 12], "little")
        buf[data:data + 8] = (addr + 16).to_bytes(8, "little")
        buf[data + 8:data + 16] = size.to_bytes(8, "little")
    p.write_bytes(bytes(buf))
    with H5File.open(str(p)) as f:
        with pytest.raises(FormatError, match="^/a: "):
            f.get(addr, "/a")
        _assert_sibling_ok(f, "b", pristine)
        _assert_sibling_ok(f, "c", pristine)
    _assert_clean_walk(p)


def test_btree_child_outside_file_is_eio(pristine, tmp_path):
    """Dataset c's chunk index points a chunk past the end of the file: reading c is EIO naming
    c, its facts still answer, the siblings read right."""
    p = _copy(pristine, tmp_path)
    with H5File.open(str(p)) as f:
        c = f.get(f.root.link("c").address, "/c")
        lay = c.layout
        if lay.index.index_type != 0:
            pytest.skip(f"chunk index {lay.index.index_type}, not a v1 B-tree")
        node = lay.index.address
        rank = len(lay.chunk_dims)
    raw = p.read_bytes()
    assert raw[node:node + 4] == b"TREE" and raw[node + 5] == 0
    first_child = node + 8 + 2 * 8 + (8 + 8 * (rank + 1))
    _patch(p, first_child, (len(raw) + (1 << 20)).to_bytes(8, "little"))
    with H5File.open(str(p)) as f:
        c = f.get(f.root.link("c").address, "/c")
        assert c.facts()["layout"] == "chunked"
        with pytest.raises(FormatError, match="^/c"):
            c.read_raw(0, 100)
        _assert_sibling_ok(f, "a", pristine)
        _assert_sibling_ok(f, "b", pristine)
    _assert_clean_walk(p)


def test_group_btree_child_outside_file_is_eio(pristine, tmp_path):
    """Group g's symbol-table B-tree child points past the end: g's listing is EIO naming g, the
    rest of the file reads right."""
    p = _copy(pristine, tmp_path)
    with H5File.open(str(p)) as f:
        g = f.get(f.root.link("g").address, "/g")
        stab = g.message(0x11)
        if stab is None:
            pytest.skip("g is not a symbol-table group in this format")
        node = stab.btree_address
    raw = p.read_bytes()
    assert raw[node:node + 4] == b"TREE"
    _patch(p, node + 8 + 2 * 8 + 8, (len(raw) + (1 << 20)).to_bytes(8, "little"))
    with H5File.open(str(p)) as f:
        g = f.get(f.root.link("g").address, "/g")
        with pytest.raises(FormatError, match="^/g: "):
            g.links()
        _assert_sibling_ok(f, "a", pristine)
        _assert_sibling_ok(f, "c", pristine)
    _assert_clean_walk(p)


def test_btree_cycle_is_eio(pristine, tmp_path):
    """A v1 chunk B-tree whose root becomes an internal node pointing at itself: EIO, no hang."""
    p = _copy(pristine, tmp_path)
    with H5File.open(str(p)) as f:
        c = f.get(f.root.link("c").address, "/c")
        if c.layout.index.index_type != 0:
            pytest.skip("not a v1 B-tree")
        node = c.layout.index.address
        rank = len(c.layout.chunk_dims)
    first_child = node + 8 + 2 * 8 + (8 + 8 * (rank + 1))
    _patch(p, node + 5, b"\x01")                       # level 1
    _patch(p, first_child, node.to_bytes(8, "little"))  # child 0 -> itself
    with H5File.open(str(p)) as f:
        c = f.get(f.root.link("c").address, "/c")
        with pytest.raises(FormatError, match="^/c"):
            c.read_raw(0, c.raw_size)
        with pytest.raises(FormatError, match="^/c"):
            c.storage_size
    _assert_clean_walk(p)


def test_walker_on_pristine_files_matches_h5py(pristine):
    """The walker itself: a pristine file walks with no error at all."""
    res = walk(str(pristine))
    assert res.refused is None and not res.bugs and not res.errors, res.summary()
    assert res.objects == 7


def test_null_dataspace_dataset_npy_view(tmp_path):
    """A null dataspace holds no element: its .npy view must say shape (0,), not () (one element),
    or np.load fails on the 0-byte body (found by cve-2025-2924.h5)."""
    p = tmp_path / "null.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("n", data=h5py.Empty("<f4"))
    with H5File.open(str(p)) as f:
        ds = f.get(f.root.link("n").address, "/n")
        assert ds.npy_body_size == 0 and ds.raw_size == 0
        assert ds.npy_shape == (0,)
        assert ds.read_array().shape == (0,)


def test_group_btree_shared_child_is_eio(pristine, tmp_path):
    """A symbol-table B-tree leaf whose two entries point at the same symbol table node: no tree,
    and left alone a small file could list one node's links thousands of times. EIO naming g."""
    p = _copy(pristine, tmp_path)
    with H5File.open(str(p)) as f:
        g = f.get(f.root.link("g").address, "/g")
        stab = g.message(0x11)
        if stab is None:
            pytest.skip("g is not a symbol-table group in this format")
        node = stab.btree_address
    raw = p.read_bytes()
    assert raw[node:node + 4] == b"TREE" and raw[node + 5] == 0
    assert int.from_bytes(raw[node + 6:node + 8], "little") == 1
    key0 = node + 8 + 16
    child0, key1 = key0 + 8, key0 + 16
    buf = bytearray(raw)
    buf[node + 6:node + 8] = (2).to_bytes(2, "little")            # two entries
    buf[key1 + 8:key1 + 16] = raw[child0:child0 + 8]              # child 1 = child 0
    buf[key1 + 16:key1 + 24] = raw[key1:key1 + 8]                 # right key of entry 1
    p.write_bytes(bytes(buf))
    with H5File.open(str(p)) as f:
        g = f.get(f.root.link("g").address, "/g")
        with pytest.raises(FormatError, match="^/g: .*share"):
            g.links()
        _assert_sibling_ok(f, "a", pristine)
    _assert_clean_walk(p)


def test_huge_extent_is_refused_by_name(tmp_path):
    """A chunked dataset whose extent claims more bytes than st_size can hold: EIO naming it."""
    p = tmp_path / "huge.h5"
    with h5py.File(p, "w", libver="latest") as f:
        f.create_dataset("big", shape=(1 << 40, 1 << 30), dtype="<f8", chunks=(1, 1024))
        f.create_dataset("small", data=A)
    with H5File.open(str(p)) as f:
        big = f.get(f.root.link("big").address, "/big")
        with pytest.raises(H5fsError, match="^/big: .*bytes"):
            big.raw_size
        assert f.get(f.root.link("small").address, "/small").read_array().tolist() == A.tolist()
    _assert_clean_walk(p)


@pytest.mark.parametrize("fill", [0, -7])
def test_sparse_chunked_fill_matches_h5py(tmp_path, fill):
    """Never-allocated chunks read as the fill value (the path that keeps a hostile extent of
    tiny unallocated chunks cheap), at unaligned offsets, as h5py reads them."""
    p = tmp_path / "sparse.h5"
    with h5py.File(p, "w", libver="earliest") as f:
        d = f.create_dataset("s", shape=(9, 50), dtype="<i2", chunks=(4, 4), fillvalue=fill)
        d[2:5, 7:19] = np.arange(36, dtype="<i2").reshape(3, 12) + 1
        expected = d[()]
    with H5File.open(str(p)) as f:
        s = f.get(f.root.link("s").address, "/s")
        assert np.array_equal(s.read_array(), expected)
        raw = expected.tobytes()
        for off, n in [(1, 3), (97, 301), (199, 5), (0, len(raw)), (len(raw) - 11, 50)]:
            assert s.read_raw(off, n) == raw[off:off + n]
