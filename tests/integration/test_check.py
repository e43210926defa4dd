"""`h5fs check`: files libhdf5 writes check clean (every structure read, chunks decoded, the space
map without overlaps and inside the file), the unused space it reports is what libhdf5 itself
tracks as free, damaged files name the object and the structure, the malformed corpus never
crashes or hangs it, and the command's exit codes, output and progress counters."""

from __future__ import annotations

import errno
import multiprocessing
import os
import pty
import resource
import shutil
import struct
import subprocess
import traceback
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

import roundtrip_support as R  # noqa: E402
from conftest import H5FS, REPO, bad_corpus, run_h5fs  # noqa: E402
from walk import default_limit_as  # noqa: E402

from h5fs.check import check  # noqa: E402
from h5fs.errors import FormatError, NotHDF5  # noqa: E402
from h5fs.format import checksum  # noqa: E402
from h5fs.format import free_space_manager as fsm  # noqa: E402
from h5fs.format import superblock as sbf  # noqa: E402
from h5fs.format.codec import Reader, Writer  # noqa: E402
from h5fs.format.messages import layout as L  # noqa: E402
from h5fs.format.messages import file_space_info  # noqa: E402
from h5fs.format.messages.types import FSINFO  # noqa: E402
from h5fs.model.file import H5File  # noqa: E402
from h5fs.storage import journal  # noqa: E402
from h5fs.storage.object_header.edit import HeaderEdit, rewrite_message  # noqa: E402
from h5fs.storage.index import IndexContext, open_index  # noqa: E402
from h5fs.storage.space_map import gaps  # noqa: E402
from h5fs.storage.space_walk import used_extents, walk  # noqa: E402

BAD_FILES = bad_corpus() + sorted((REPO / "tests" / "data").glob("*.h5"))
TIMEOUT = 20.0
S = h5py.string_dtype()


# -- files libhdf5 writes -------------------------------------------------------------------------


def persistent_fcpl(strategy=h5py.h5f.FSPACE_STRATEGY_FSM_AGGR):
    """Free space kept across opens (every section, however small): libhdf5 lists what it
    considers free in the file itself. Shared messages too (a list, then a B-tree)."""
    fcpl = R.sohm_fcpl(4, 2)
    fcpl.set_file_space_strategy(strategy, True, 1)
    return fcpl


EXTERNAL_NAME_LENGTH = 150   # one that closes (140, 180 and 200 do not)


def external_name(path: Path) -> str:
    """An absolute external file name of a fixed length beside `path`. libhdf5 2.0 loops forever
    closing some paged files after deletions (H5MF_settle_meta_data_fsm), depending on where
    their metadata falls, which the length of this name shifts: a fixed length keeps every run's
    layout the one these tests were verified with, whatever the temporary directory's name."""
    base = f"{path}.ext"
    pad = EXTERNAL_NAME_LENGTH - len(base) - 1
    assert 0 < pad < 256, f"temporary path {path} too long for a {EXTERNAL_NAME_LENGTH}-byte external name"
    folder = path.parent / ("e" * pad)
    folder.mkdir(exist_ok=True)
    return str(folder / path.name) + ".ext"


def varied(f: h5py.File, path: Path) -> None:
    """Variable-length data and references everywhere the global heap serves them, a committed
    datatype, external data, dense links and attributes, a big group, datasets to delete."""
    d = f.create_dataset("d", data=np.arange(4, dtype="<i4"))
    R.links_and_attributes(R.group(f, "dense", tracked=True), d, 20, 12)
    f.create_dataset("vlen", data=["a", "bb" * 100, "ccc"], dtype=S)
    f.create_dataset("vlenz", data=np.array(["x" * i for i in range(300)], dtype=object), dtype=S, chunks=(50,),
                     compression="gzip")
    f.create_dataset("seq", data=np.array([np.arange(i) for i in range(1, 6)], dtype=object),
                     dtype=h5py.vlen_dtype("i4"))
    f.create_dataset("cmp", data=np.array([(1, "one"), (2, "two")], dtype=[("n", "i4"), ("s", S)]))
    f.attrs.create("vattr", data=np.array(["p", "qq"], dtype=object), dtype=S)
    f.attrs.create("arr", data=np.array([("a", "b")], dtype=object), dtype=np.dtype((S, (2,))))
    f["refs"] = np.array([d.ref, f["dense"].ref], dtype=h5py.ref_dtype)
    target = f.create_dataset("target", data=np.arange(30).reshape(5, 6))
    regions = f.create_dataset("regions", (2,), dtype=h5py.regionref_dtype)
    regions[0] = target.regionref[1:3, 2:4]
    regions[1] = target.regionref[0:1, :]
    f["tdt"] = np.dtype("<i2")
    f.create_dataset("typed", data=[1, 2], dtype=f["tdt"])
    f.create_dataset("ext", (100,), "<i4", external=[(external_name(path), 0, 400)])
    for i in range(5):
        f.create_dataset(f"gone{i}", data=np.arange(300 * (i + 1)))
    f.create_dataset("gonev", data=["z" * 50] * 20, dtype=S)
    big = f.create_group("big")
    for i in range(30):
        big[f"x{i}"] = np.arange(i + 1)


def delete_some(path: Path) -> None:
    """libhdf5 frees space: objects, a heap object, a chunk rewritten larger."""
    with h5py.File(path, "a") as f:
        for name in ("gone0", "gone2", "gone4", "gonev", "fa_raw", "big/x3"):
            del f[name]
        f["vlenz"][5] = "changed" * 40


def persistent_file(path: Path, libver: str, strategy=h5py.h5f.FSPACE_STRATEGY_FSM_AGGR, persist: bool = True,
                    page: int = 4096) -> None:
    fcpl = persistent_fcpl(strategy)
    if not persist or page != 4096:
        fcpl.set_file_space_strategy(strategy, persist, 1)
        fcpl.set_file_space_page_size(page)
    with R.new_file(path, libver, (8, 8), fcpl) as f:
        R.chunked_datasets(f, True)
        varied(f, path)
    delete_some(path)


def filters_file(path: Path) -> None:
    """Chunks through every pipeline h5py and hdf5plugin write; partial edge chunks left
    unfiltered in one dataset."""
    data = np.arange(6000, dtype="<f4").reshape(60, 100) / 7
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("gzip_shuffle", data=data, chunks=(16, 32), compression="gzip", shuffle=True)
        f.create_dataset("fletcher", data=data, chunks=(16, 32), fletcher32=True)
        f.create_dataset("lzf", data=data, chunks=(16, 32), compression="lzf")
        f.create_dataset("scaleoffset", data=(data * 10).astype("<i4"), chunks=(16, 32), scaleoffset=0)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((16, 32))
        dcpl.set_deflate(4)
        R.c_call("H5Pset_chunk_opts", dcpl.id, 0x0002)   # H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS
        h5py.h5d.create(f.id, b"edges_raw", h5py.h5t.IEEE_F32LE, h5py.h5s.create_simple(data.shape), dcpl=dcpl)
        f["edges_raw"][...] = data
        try:
            import hdf5plugin
        except ImportError:
            return
        for name, opts in [("blosc", hdf5plugin.Blosc()), ("zstd", hdf5plugin.Zstd()), ("lz4", hdf5plugin.LZ4()),
                           ("bitshuffle", hdf5plugin.Bitshuffle()), ("bzip2", hdf5plugin.BZip2())]:
            f.create_dataset(name, data=data, chunks=(16, 32), **opts)


def shared_file(path: Path, libver: str) -> None:
    with R.new_file(path, libver, (8, 8), R.shared_messages_fcpl()) as f:
        for i in range(6):
            ds = f.create_dataset(f"d{i}", data=np.arange(10, dtype="<i4"), chunks=(5,), compression="gzip")
            ds.attrs["same"] = np.arange(4)
            ds.attrs["text"] = "shared"


def user_block_file(path: Path) -> None:
    with h5py.File(path, "w", userblock_size=1024, libver="earliest") as f:
        f.create_dataset("c", data=np.arange(5000), chunks=(100,), compression="gzip")
        f["x"] = np.arange(10.0)
    with open(path, "r+b") as fh:
        fh.write(b"user block text")


def chunked(libver: str):
    def build(path: Path) -> None:
        with R.new_file(path, libver) as f:
            R.chunked_datasets(f, True)
    return build


SOUND = {
    "everything-earliest": lambda p: R.build_everything(p, "earliest"),
    "everything-latest": lambda p: R.build_everything(p, "latest"),
    "chunked-earliest": chunked("earliest"),
    "chunked-latest": chunked("latest"),
    "messages-earliest-8": lambda p: R.messages_file(p, "earliest", (8, 8)),
    "messages-latest-4": lambda p: R.messages_file(p, "latest", (4, 4)),
    "messages-earliest-2": lambda p: R.messages_file(p, "earliest", (2, 4)),
    "dense-8": lambda p: R.dense_file(p, (8, 8)),
    "dense-4": lambda p: R.dense_file(p, (4, 4)),
    "vds-latest": lambda p: R.vds_file(p, "latest"),
    "revised-refs": lambda p: R.write_revised_refs(str(p)),
    "shared-earliest": lambda p: shared_file(p, "earliest"),
    "shared-latest": lambda p: shared_file(p, "latest"),
    "persistent-earliest": lambda p: persistent_file(p, "earliest"),
    "persistent-latest": lambda p: persistent_file(p, "latest"),
    "paged-latest": lambda p: persistent_file(p, "latest", h5py.h5f.FSPACE_STRATEGY_PAGE),
    "paged-transient-512": lambda p: persistent_file(p, "latest", h5py.h5f.FSPACE_STRATEGY_PAGE, False, 512),
    "filters": filters_file,
    "user-block": user_block_file,
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            path = tmp_path_factory.mktemp(name) / f"{name}.h5"
            SOUND[name](path)
            cache[name] = path
        return cache[name]
    return get


def merged(extents) -> list[tuple[int, int]]:
    """(start, end) runs of the union of (address, size) pairs."""
    out: list[list[int]] = []
    for a, n in sorted(extents):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], a + n)
        else:
            out.append([a, a + n])
    return [tuple(r) for r in out]


@pytest.mark.parametrize("name", SOUND)
def test_libhdf5_files_check_clean(built, name):
    path = built(name)
    report = check(str(path))
    assert report.sound, "\n".join(map(str, report.problems))
    assert report.objects > 1
    assert report.used + report.unused == report.end_of_allocation <= report.file_size
    with H5File.open(str(path)) as f:
        extents = used_extents(f)
        end = os.path.getsize(path) - f.superblock.location
    assert all(a.end <= b.address for a, b in zip(extents, extents[1:])), "overlapping extents"
    assert extents[0].address == 0 and extents[-1].end <= end
    assert all(e.path and e.structure for e in extents)


@pytest.mark.parametrize("name", ["persistent-earliest", "persistent-latest"])
def test_unused_space_is_what_libhdf5_lists_free(built, name):
    """With free space persisted, libhdf5 lists every byte it considers free: exactly the gaps."""
    path = built(name)
    with h5py.File(path, "r") as f:
        free = f.id.get_freespace()
    report = check(str(path))
    assert report.sound
    assert report.unused == report.listed_free == free > 0
    with H5File.open(str(path)) as f:
        extents = used_extents(f)
        listed = [(e.address, e.size) for e in walk(f).free]
        assert merged(gaps(extents, f.superblock.eof_address)) == merged(listed)


def test_paged_aggregation_free_space(built):
    """Paged aggregation leaves page ends it does not track: what it lists lies in the gaps."""
    path = built("paged-latest")
    with h5py.File(path, "r") as f:
        free = f.id.get_freespace()
    report = check(str(path))
    assert report.sound   # a listed section that something uses would be a problem
    assert report.listed_free == free and report.unused >= free


@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_space_of_a_deleted_dataset_is_unused(tmp_path, libver):
    """Without persistent free space libhdf5 forgets what it freed: the space stays in the file,
    unused."""
    path = tmp_path / "deleted.h5"
    with h5py.File(path, "w", libver=libver) as f:
        for name in "abc":
            f.create_dataset(name, data=np.arange(20000, dtype="<i8"))
    with h5py.File(path, "a") as f:
        ds = f["b"].id
        offset, size = ds.get_offset(), ds.get_storage_size()
        del f["b"]
    report = check(str(path))
    assert report.sound
    assert report.unused >= size
    with H5File.open(str(path)) as f:
        assert not [e for e in used_extents(f) if e.address < offset + size and offset < e.end]


# -- damaged files ------------------------------------------------------------------------------


def pristine(path: Path, libver: str) -> None:
    with h5py.File(path, "w", libver=libver) as f:
        f.create_dataset("a", data=np.arange(1000, dtype="<i4"))
        f.create_dataset("c", data=np.arange(4000, dtype="<u2").reshape(40, 100), chunks=(10, 25), compression="gzip")
        f.create_dataset("r", data=np.arange(100, dtype="<i8"), chunks=(10,))
        f.create_dataset("g/inner", data=np.arange(10))
        for i in range(3):
            f["a"].attrs[f"note{i}"] = np.arange(40, dtype="<i8") + i


@pytest.fixture(scope="module", params=["earliest", "latest"])
def clean(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / "clean.h5"
    pristine(path, request.param)
    assert check(str(path)).sound
    return request.param, path


def damaged(clean, tmp_path: Path, edit) -> tuple[str, list[str]]:
    """A copy of the clean file with `edit(bytearray, h5py.File of the original)` applied:
    the command's exit status and lines."""
    libver, path = clean
    out = tmp_path / "damaged.h5"
    data = bytearray(path.read_bytes())
    with h5py.File(path, "r") as f:
        edit(data, f)
    out.write_bytes(bytes(data))
    report = check(str(out))
    return libver, [str(p) for p in report.problems]


def unique(data: bytearray, needle: bytes) -> int:
    assert data.count(needle) == 1, f"{needle.hex()} occurs {data.count(needle)} times"
    return data.find(needle)


def chunk_address(ds, coords) -> int:
    return ds.id.get_chunk_info_by_coord(coords).byte_offset


def repoint(data: bytearray, f, k: int, new: int) -> None:
    """Make the index slot of chunk (k,) of /r (ten int64 per chunk, k >= 1) hold `new`."""
    ds, latest = f["r"], data[8] >= 2   # the superblock's version: the latest format's or not
    address = chunk_address(ds, (10 * k,))
    if latest:   # a fixed array: the addresses one after the other, then a checksum
        pos = unique(data, struct.pack("<QQ", chunk_address(ds, (10 * k - 10,)), address)) + 8
    else:                          # a v1 B-tree entry: the key (size, mask, offsets), the child
        pos = unique(data, struct.pack("<IIQQQ", 80, 0, 10 * k, 0, address)) + 24
    data[pos:pos + 8] = struct.pack("<Q", new)
    if latest:
        start = data.rfind(b"FADB", 0, pos)
        end = start + 14 + 8 * ds.id.get_num_chunks()   # prefix, elements; the checksum follows
        data[end:end + 4] = struct.pack("<I", checksum.checksum(bytes(data[start:end])))


def test_flipped_checksummed_object_header(tmp_path):
    path = tmp_path / "oh.h5"
    pristine(path, "latest")   # the earliest format has no checksummed block in this file
    data = bytearray(path.read_bytes())
    with h5py.File(path, "r") as f:
        address = h5py.h5o.get_info(f["a"].id).addr
    data[address + 30] ^= 0xFF   # among the messages of its first block
    path.write_bytes(bytes(data))
    lines = [str(p) for p in check(str(path)).problems]
    assert lines and all(line.startswith("/a: object header: ") and "checksum" in line for line in lines), lines


def test_flipped_checksummed_index_block(tmp_path):
    path = tmp_path / "fa.h5"
    pristine(path, "latest")
    data = bytearray(path.read_bytes())
    with h5py.File(path, "r") as f:
        pos = unique(data, struct.pack("<Q", chunk_address(f["r"], (30,))))
    data[pos] ^= 0x01
    path.write_bytes(bytes(data))
    lines = [str(p) for p in check(str(path)).problems]
    assert any(line.startswith("/r: chunk index fixed array data block: ") and "checksum" in line
               for line in lines), lines


def test_damaged_compressed_chunk(clean, tmp_path):
    def edit(data, f):
        info = f["c"].id.get_chunk_info_by_coord((10, 25))
        for i in range(8):
            data[info.byte_offset + info.size // 2 + i] ^= 0x5A
    _, lines = damaged(clean, tmp_path, edit)
    assert any(line.startswith("/c: chunk (1, 1): ") for line in lines), lines
    assert len(lines) == 1, lines


SHARED_CHUNK = {   # the v1 B-tree reader refuses a child two entries name before it reaches the space map
    "earliest": ("/r: chunk index: ", "B-tree entries share the child"),
    "latest": ("/r: chunk (2,): ", "overlaps /r: chunk (1,)"),
}


def test_two_index_entries_share_a_chunk(clean, tmp_path):
    def edit(data, f):
        repoint(data, f, 2, chunk_address(f["r"], (10,)))
    libver, lines = damaged(clean, tmp_path, edit)
    start, text = SHARED_CHUNK[libver]
    assert any(line.startswith(start) and text in line for line in lines), lines


def test_chunk_past_end_of_file(clean, tmp_path):
    def edit(data, f):
        repoint(data, f, 5, len(data) + 4096)
    _, lines = damaged(clean, tmp_path, edit)
    assert any(line.startswith("/r: chunk (5,): ") and "outside the file" in line for line in lines), lines


def test_contiguous_data_past_end_of_file(tmp_path):
    path = tmp_path / "contig.h5"
    pristine(path, "earliest")   # v1 object headers: no checksum to mend
    data = bytearray(path.read_bytes())
    with h5py.File(path, "r") as f:
        ds = f["a"].id   # a layout message: version 3, contiguous, address, size
        pos = unique(data, struct.pack("<BBQQ", 3, 1, ds.get_offset(), ds.get_storage_size())) + 2
    data[pos:pos + 8] = struct.pack("<Q", len(data) + 100)
    path.write_bytes(bytes(data))
    lines = [str(p) for p in check(str(path)).problems]
    assert lines == [line for line in lines if line.startswith("/a: contiguous data: ")]
    assert lines and "outside the file" in lines[0]


def test_structures_past_end_of_allocation(tmp_path):
    path = tmp_path / "eoa.h5"
    pristine(path, "earliest")
    data = bytearray(path.read_bytes())
    sb = sbf.decode(bytes(data[:256]))
    new = sbf.encode(replace(sb, eof_address=sb.eof_address - 3000))
    data[:len(new)] = new
    path.write_bytes(bytes(data))
    report = check(str(path))
    assert report.problems and all("past the end of allocation" in p.message for p in report.problems)
    assert report.end_of_allocation == sb.eof_address - 3000


def test_attribute_value_that_cannot_be_read(tmp_path, mount):
    """An attribute whose dataspace claims 2**40 elements while its message holds 3: h5py cannot
    read it, the mount answers EIO, and check names it (without allocating its claimed size);
    its sibling attribute reads on."""
    path = tmp_path / "attr.h5"
    with h5py.File(path, "w", libver="earliest") as f:   # v1 object headers: no checksum to mend
        g = f.create_group("ag")
        g.attrs["ok"] = np.arange(4, dtype="<i4")
        g.attrs["zz"] = np.arange(3, dtype="<i8")
    data = bytearray(path.read_bytes())
    dims = data.find(struct.pack("<QQ", 3, 3), unique(data, b"zz\0"))   # its dimension, then its maximum
    data[dims:dims + 16] = struct.pack("<QQ", 2**40, 2**40)
    path.write_bytes(bytes(data))
    with h5py.File(path, "r") as f, pytest.raises(KeyError, match="ran off end of input buffer"):
        f["ag"].attrs["zz"]
    proc = run_h5fs("check", path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == ["/ag: attribute 'zz': its message holds 24 bytes of value, "
                                        "1099511627776 elements of 8 bytes need 8796093022208"], proc.stdout
    mp = mount(path)
    with pytest.raises(OSError) as exc:
        os.getxattr(mp / "ag", "user.zz")
    assert exc.value.errno == errno.EIO
    assert os.getxattr(mp / "ag", "user.ok") == b"[0, 1, 2, 3]"


def test_space_listed_free_but_used(built, tmp_path):
    """A persistent free-space manager listing space a structure uses (a writer that took space
    from the gaps and forgot the manager) is a problem."""
    path = tmp_path / "listed.h5"
    shutil.copy(built("persistent-latest"), path)
    with H5File.open(str(path)) as f:
        info = file_space_info.decode(Reader(f.extension.first(0x17).data, 0, f.sizes))
        address = next(a for a in info.managers if a is not None)
        header = fsm.decode_header(f.reader.read(address, fsm.header_size(f.sizes)), address, f.sizes, "fsm")
        raw = f.reader.read(header.sections_address, header.sections_size)
        listed = fsm.decode_sections(raw, header, f.sizes, "fsm")
        first = listed.sets[0]
        moved = replace(first, sections=(replace(first.sections[0], offset=0),) + first.sections[1:])
        new = fsm.encode_sections(replace(listed, sets=(moved,) + listed.sets[1:]), header, f.sizes)
        at = f.superblock.location + header.sections_address
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(new)
    lines = [str(p) for p in check(str(path)).problems]
    slot = info.managers.index(address)
    assert lines == [f"(file): free-space manager {slot} free section: 0+{first.size} is listed free but (file): "
                     f"superblock uses 0+48"], lines


def first_manager(path: Path, slot: int | None = None):
    """(File Space Info, a manager's header, its section list) of a file."""
    with H5File.open(str(path)) as f:
        info = file_space_info.decode(Reader(f.extension.first(FSINFO).data, 0, f.sizes))
        address = next(a for i, a in enumerate(info.managers) if a is not None and slot in (None, i))
        header = fsm.decode_header(f.reader.read(address, fsm.header_size(f.sizes)), address, f.sizes, "fsm")
        raw = f.reader.read(header.sections_address, header.sections_size)
        return info, header, fsm.decode_sections(raw, header, f.sizes, "fsm")


def poke(path: Path, address: int, data: bytes) -> None:
    with H5File.open(str(path)) as f:
        at = f.superblock.location + address
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(data)


def problems_of(path: Path) -> list[str]:
    return [str(p) for p in check(str(path)).problems]


def test_manager_header_describes_its_list(built, tmp_path):
    """libhdf5 reads a section list by the counts in its manager's header."""
    path = tmp_path / "counts.h5"
    shutil.copy(built("persistent-latest"), path)
    info, header, _ = first_manager(path)
    poke(path, header.address, fsm.encode_header(replace(header, total_space=header.total_space + 1), sizes(path)))
    slot = info.managers.index(header.address)
    assert any(line.startswith(f"(file): free-space manager {slot} header: counts ") for line in problems_of(path))


def sizes(path: Path):
    with H5File.open(str(path)) as f:
        return f.sizes


def test_sections_listed_twice(built, tmp_path):
    path = tmp_path / "twice.h5"
    shutil.copy(built("persistent-latest"), path)
    info, header, listed = first_manager(path)
    first, second = listed.sets[0], listed.sets[1]
    moved = replace(second, sections=(replace(second.sections[0], offset=first.sections[0].offset),)
                    + second.sections[1:])
    poke(path, header.sections_address, fsm.encode_sections(replace(listed, sets=(first, moved) + listed.sets[2:]),
                                                            header, sizes(path)))
    assert any(" overlaps (file): free-space manager" in line for line in problems_of(path))


def test_section_of_a_type_its_manager_does_not_hold(built, tmp_path):
    """Paged aggregation: a small-section manager listing a large section."""
    path = tmp_path / "typed.h5"
    shutil.copy(built("paged-latest"), path)
    info, header, listed = first_manager(path, file_space_info.SLOT_META)
    first = listed.sets[0]
    wrong = replace(first, sections=(replace(first.sections[0], type=fsm.FILE_LARGE),) + first.sections[1:])
    poke(path, header.sections_address, fsm.encode_sections(replace(listed, sets=(wrong,) + listed.sets[1:]),
                                                            header, sizes(path)))
    assert problems_of(path) == [f"(file): free-space manager 0 section list: 1 sections of type 2 (at "
                                 f"{first.sections[0].offset}; this manager's are of type 1)"]


def test_end_of_allocation_before_the_managers_past_the_end(built, tmp_path):
    """libhdf5 1.10 would release the space between the two (here: beyond the end)."""
    path = tmp_path / "eoa.h5"
    shutil.copy(built("persistent-latest"), path)
    with H5File.open(str(path), writable=True) as f:
        raw = f.extension.first(FSINFO)
        info = file_space_info.decode(Reader(raw.data, 0, f.sizes))
        w = Writer(f.sizes)
        file_space_info.encode(w, replace(info, eoa_before_managers=info.eoa_before_managers + 4096))
        with f.store.transaction() as txn:
            rewrite_message(txn, f.extension, raw, w.getvalue())
            txn.commit()
        eoa = f.superblock.eof_address
    assert problems_of(path) == [f"(file): file space info message: end of allocation before the managers "
                                 f"{eoa + 4096} lies past the end of allocation ({eoa})"]


def test_raw_data_in_a_metadata_page(built, tmp_path):
    """Paged aggregation: a small chunk moved into space allocated as metadata (a writer that did
    not say it was raw data) shares a page with metadata or the metadata manager's sections."""
    path = tmp_path / "mixed.h5"
    shutil.copy(built("paged-latest"), path)
    with H5File.open(str(path), writable=True) as f:
        ds = next(obj for _, obj in R.objects(f) if getattr(obj, "layout", None) is not None
                  and obj.layout.layout_class == L.CHUNKED and obj.layout.index.index_type == L.FIXED_ARRAY)
        with f.store.transaction() as txn:
            index = open_index(IndexContext(txn.reader, ds.layout, ds.dataspace.dims, ds.dataspace.maxdims,
                                            bool(ds.filters), ds.path))
            rec = next(iter(index.records()))
            address = txn.allocate(rec.size)
            txn.write_data(address, txn.read_data(rec.address, rec.size))
            txn.free(rec.address, rec.size, raw=True)
            index.put(txn, [replace(rec, address=address)])
            txn.commit()
    lines = problems_of(path)
    assert lines and all(f"{ds.path}: chunk " in line and "page" in line for line in lines), lines


def test_used_extents_refuses_an_incomplete_map(clean, tmp_path):
    _, path = clean
    copy = tmp_path / "u.h5"
    data = bytearray(path.read_bytes())
    with h5py.File(path, "r") as f:
        repoint(data, f, 5, len(data) + 4096)
    copy.write_bytes(bytes(data))
    with H5File.open(str(copy)) as f, pytest.raises(FormatError, match="space map incomplete: /r: "):
        used_extents(f)


def test_pending_journal(clean, tmp_path):
    _, path = clean
    copy = tmp_path / "j.h5"
    shutil.copy(path, copy)
    eoa = copy.stat().st_size   # libhdf5 leaves a file as long as its end of allocation
    record = journal.encode([(0, copy.read_bytes()[:8])], (eoa, eoa))
    Path(journal.journal_path(str(copy))).write_bytes(record[:-1])   # torn: never acknowledged
    assert check(str(copy)).sound
    Path(journal.journal_path(str(copy))).write_bytes(record)
    lines = [str(p) for p in check(str(copy)).problems]
    assert lines == [f"(file): journal: 1 metadata update in {copy}.h5fs-journal waiting to be replayed "
                     "(a writable open or mount replays them)"]
    # records written for another state of the file (its end of allocation was never this)
    Path(journal.journal_path(str(copy))).write_bytes(journal.encode([(0, b"x")], (eoa + 8, eoa + 16)))
    lines = [str(p) for p in check(str(copy)).problems]
    assert len(lines) == 1 and lines[0].startswith(f"(file): journal: 1 metadata update in {copy}.h5fs-journal "
                                                   "belongs to another state of the file")
    assert f"and it is now {eoa}" in lines[0]


# -- malformed files: bounded, never a crash -----------------------------------------------------


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (default_limit_as(), resource.getrlimit(resource.RLIMIT_AS)[1]))


def _outcome(path: str) -> list[str] | str:
    """The problem lines check(path) reports (a file without a signature: the refusal), or the
    traceback of what escaped it."""
    try:
        return [str(p) for p in check(path).problems]
    except NotHDF5 as e:
        return [f"{path}: file: {e}"]
    except BaseException:  # noqa: BLE001 - what the test reports
        return traceback.format_exc()


def test_malformed_files_never_crash_the_checker():
    """Each file checked in a child process under RLIMIT_AS, answering within TIMEOUT."""
    fork = multiprocessing.get_context("fork")
    failed: dict[str, str] = {}
    pool = fork.Pool(1, initializer=_limit_memory)
    try:
        for path in BAD_FILES:
            try:
                out = pool.apply_async(_outcome, (str(path),)).get(TIMEOUT)
            except multiprocessing.TimeoutError:   # a hang, or a child killed by a signal
                failed[path.name] = f"no answer after {TIMEOUT} s"
                pool.terminate()
                pool = fork.Pool(1, initializer=_limit_memory)
                continue
            if isinstance(out, str):
                failed[path.name] = out
            else:
                assert all(line.count(": ") >= 2 for line in out), out
    finally:
        pool.terminate()
    assert not failed, "\n".join(f"{k}: {v}" for k, v in failed.items())


# -- the command ----------------------------------------------------------------------------------


def test_command_on_a_sound_file(built):
    path = built("everything-latest")
    proc = run_h5fs("check", path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and "sound" in lines[0] and " unused " in lines[0]
    assert proc.stderr == ""   # no progress counters when stderr is not a terminal


def test_command_on_a_damaged_file(clean, tmp_path):
    libver, path = clean
    copy = tmp_path / "d.h5"
    data = bytearray(path.read_bytes())
    with h5py.File(path, "r") as f:
        repoint(data, f, 2, chunk_address(f["r"], (10,)))
        info = f["c"].id.get_chunk_info_by_coord((0, 0))
        data[info.byte_offset + info.size // 2] ^= 0xFF
    copy.write_bytes(bytes(data))
    proc = run_h5fs("check", copy)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("/c: chunk (0, 0): ") for line in lines), lines
    assert any(line.startswith(SHARED_CHUNK[libver][0]) for line in lines), lines
    assert all(line.startswith("/") and line.count(": ") >= 2 for line in lines), lines
    assert "problems" in proc.stderr


def test_command_exit_codes(tmp_path):
    assert run_h5fs("check", tmp_path / "missing.h5").returncode == 2
    assert run_h5fs("check").returncode == 2
    assert run_h5fs("check", tmp_path).returncode == 2          # a directory
    text, empty = tmp_path / "text.h5", tmp_path / "empty.h5"
    text.write_text("not an HDF5 file\n" * 10)
    empty.write_bytes(b"")
    for path in (text, empty):   # nothing to check: one line saying why
        proc = run_h5fs("check", path)
        assert proc.returncode == 2 and proc.stdout == "", proc.stdout
        assert proc.stderr == f"h5fs: {path}: not an HDF5 file (no HDF5 signature found)\n", proc.stderr
    broken = tmp_path / "broken.h5"   # an HDF5 file whose superblock is damaged: a problem of it
    broken.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\xff" * 200)
    proc = run_h5fs("check", broken)
    assert proc.returncode == 1 and proc.stdout.startswith("(file): superblock: "), proc.stdout


def test_command_shows_progress_on_a_terminal(built):
    path = built("chunked-latest")
    master, slave = pty.openpty()
    try:
        proc = subprocess.run(H5FS + ["check", str(path)], stdout=subprocess.PIPE, stderr=slave, timeout=60)
        os.close(slave)
        slave = -1
        shown = b""
        while True:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:   # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            shown += chunk
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)
    assert proc.returncode == 0
    assert b"objects walked" in shown and b"chunks checked" in shown


@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_reference_counts_are_checked(tmp_path, libver):
    """Hard links and shared datatypes count in an object's header as libhdf5 counts them
    (h5py's files are sound); a count one off is reported."""
    import h5py
    path = tmp_path / f"rc-{libver}.h5"
    with h5py.File(path, "w", libver=libver) as f:
        f["T"] = np.dtype("<f4")
        d = f.create_dataset("d", shape=(4,), dtype=f["T"])
        f.create_dataset("e", shape=(2,), dtype=f["T"])
        f["g/again"] = d
        f["soft"] = h5py.SoftLink("/d")
        assert h5py.h5o.get_info(f["T"].id).rc == 3 and h5py.h5o.get_info(d.id).rc == 2
    assert check(str(path)).sound
    with H5File.open(str(path), writable=True) as f:
        ds = f.resolve("/d")
        with f.store.transaction() as txn:
            edit = HeaderEdit(txn, ds.header)
            edit.refcount = 3
            txn.commit()
    problems = check(str(path)).problems
    assert [(p.path, p.structure) for p in problems] == [("/d", "reference count")], problems
    assert "counts 3, 2 lead" in problems[0].message


def _replace_sohm_record(path: Path, old, new) -> None:
    """Rewrite one record of index 0 of the file's shared-message table (checksums kept)."""
    from h5fs.format import btree_v2 as bt
    from h5fs.format.messages import sohm_table as T
    from h5fs.storage.btree_v2.edit import BTreeV2Edit
    from h5fs.storage.btree_v2 import reader as bt_reader
    with H5File.open(str(path), writable=True) as f:
        index = f.sohm_indexes[0]
        with f.store.transaction() as txn:
            if index.index_type == T.LIST:
                data = txn.reader.read(index.index_address, T.list_size(f.sizes, index.num_messages), "list")
                records = [new if r == old else r for r in T.decode_list(Reader(data, 0, f.sizes, "list"),
                                                                          index.num_messages)]
                w = Writer(f.sizes)
                T.encode_list(w, records)
                txn.write_in_place(index.index_address, w.getvalue())
            else:
                hdr = bt_reader.read_header(txn.reader, index.index_address, "index")
                BTreeV2Edit(txn, hdr, lambda r: r.hash, bt.decode_sohm, bt.encode_sohm, "index").apply([(old.hash, new)])
            txn.commit()


@pytest.mark.parametrize("fcpl", ["lists", "btree"])
def test_shared_message_counts_are_checked(tmp_path, fcpl):
    """libhdf5's shared-message tables check clean (uses in headers, in dense attributes, in the
    attributes the table holds, and first copies kept in their header); a record counting one use
    too many, or naming a header without such a message, is reported."""
    from h5fs.storage.sohm_table.reader import read_records
    path = tmp_path / f"sohm-{fcpl}.h5"
    with R.new_file(path, "latest", (8, 8), R.sohm_fcpl(50, 40) if fcpl == "lists" else R.shared_messages_fcpl()) as f:
        for i in range(3):
            f.create_dataset(f"d{i}", data=np.arange(10, dtype="f8")).attrs["units"] = "m/s"
        f.create_dataset("alone", data=np.arange(3, dtype="i2"))
        for i in range(10):
            f.require_group("g").attrs[f"a{i}"] = np.float64(i) if i else "text"
    assert check(str(path)).sound, check(str(path)).problems
    with H5File.open(str(path)) as f:
        records = read_records(f.reader, f.sohm_indexes[0], "index 0")
    heap_rec = next(r for r in records if r.location == 0 and r.refcount > 1)
    here_rec = next(r for r in records if r.location == 1)
    for old, new, expected in ((heap_rec, replace(heap_rec, refcount=heap_rec.refcount + 1),
                                f"counts {heap_rec.refcount + 1} uses, {heap_rec.refcount} found"),
                               (here_rec, replace(here_rec, oh_address=here_rec.oh_address + 8),
                                f"in the header at {here_rec.oh_address + 8}, which holds no such")):
        bad = tmp_path / "bad.h5"
        shutil.copy(path, bad)
        _replace_sohm_record(bad, old, new)
        lines = [str(p) for p in check(str(bad)).problems]
        assert len(lines) == 1 and "shared message index 0" in lines[0] and expected in lines[0], lines
