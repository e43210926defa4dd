"""Free-space managers (FSHD, FSSE) and the File Space Info message (0x17) round trip against the
bytes libhdf5 wrote.

Files are built at test time with every file space strategy (free-space managers with aggregators,
paged aggregation, aggregators only, none), persistent or not, with 2-, 4- and 8-byte offsets and
lengths, and with objects, attributes and links created and deleted so that sections of several
sizes are free at close: the file's managers (simple sections; small and large ones when paged)
and the fractal heaps' managers (single and first-row sections) persist. The engine finds the
managers (the superblock extension's File Space Info message, each dense group's and attribute
table's heap header); their bytes come from plain file reads.
"""

from __future__ import annotations

import os
from dataclasses import replace

import h5py
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from roundtrip_support import (HYP, Seen, Structure, address, build_files, check, encoded, free_space_manager, message,
                               new_file, objects, roundtrip, uint, with_sizes)

from h5fs.errors import ChecksumError, FormatError, Unsupported
from h5fs.format import fractal_heap as fh
from h5fs.format import free_space_manager as FS
from h5fs.format.checksum import sealed
from h5fs.format.codec import Reader, Sizes
from h5fs.format.messages import file_space_info as FI
from h5fs.model import messages as M
from h5fs.model.file import H5File

STRATEGIES = {"fsm": h5py.h5f.FSPACE_STRATEGY_FSM_AGGR, "page": h5py.h5f.FSPACE_STRATEGY_PAGE,
              "aggr": h5py.h5f.FSPACE_STRATEGY_AGGR, "none": h5py.h5f.FSPACE_STRATEGY_NONE}


def churn(f: h5py.File, scale: int = 100) -> None:
    """Datasets and attributes of several sizes, a group with dense links and attributes; then
    some of each deleted, so that free space of several sizes remains in the file and the heaps.
    (`scale` 30 keeps a file within 2-byte offsets.)"""
    for i in range(8):
        f[f"d{i}"] = np.arange(scale * i + 10)
        f[f"d{i}"].attrs["a"] = np.arange(scale // 2 * i)
    g = f.create_group("dense")
    for i in range(40):
        g.attrs[f"attr{i}"] = np.arange(i * scale // 10)
        g[f"x{i}"] = i
    for i in range(0, 40, 3):
        del g.attrs[f"attr{i}"]
        del g[f"x{i}"]
    del f["d2"], f["d5"], f["d3"].attrs["a"]


def with_fcpl(strategy: str, persist: bool, sizes, libver="latest", threshold=1, page_size=512):
    """(libhdf5 writes dense storage it cannot read back with 2-byte lengths: 2-byte offsets come
    with 4-byte lengths.)"""
    def build(path):
        fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
        fcpl.set_file_space_strategy(STRATEGIES[strategy], persist, threshold)
        if strategy == "page":
            fcpl.set_file_space_page_size(page_size)
        with new_file(path, libver, sizes, fcpl) as f:
            churn(f, 30 if sizes[0] == 2 else 100)
    return build


def with_h5py(**kwargs):
    def build(path):
        with h5py.File(path, "w", libver="latest", **kwargs) as f:
            churn(f)
    return build


FILES = {
    "fsm-h5py": with_h5py(fs_strategy="fsm", fs_persist=True, fs_threshold=1),
    "page-h5py": with_h5py(fs_strategy="page", fs_page_size=4096, fs_persist=True),
    "fsm-4-4": with_fcpl("fsm", True, (4, 4)),
    "fsm-2-4": with_fcpl("fsm", True, (2, 4), threshold=64),
    "fsm-earliest-8-8": with_fcpl("fsm", True, (8, 8), "earliest"),
    "page-4-8": with_fcpl("page", True, (4, 8)),
    "page-2-4": with_fcpl("page", True, (2, 4)),
    "page-transient-8-4": with_fcpl("page", False, (8, 4), page_size=1024),
    "aggr-4-4": with_fcpl("aggr", False, (4, 4)),
    "none-8-8": with_fcpl("none", False, (8, 8)),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, object]:
    return build_files(tmp_path_factory, FILES)


class FileReads:
    """What the walker's `free_space_manager` reads through: plain reads of the file."""

    def __init__(self, fd: int, sizes: Sizes):
        self.fd, self.sizes = fd, sizes

    def read(self, address: int, n: int) -> bytes:
        data = os.pread(self.fd, n, address)
        assert len(data) == n
        return data


def found(path) -> tuple[Structure, Sizes, list[int]]:
    """The File Space Info message, the file's sizes and every free-space manager's header address
    (the file's, then each fractal heap's), as the engine finds them."""
    with H5File.open(str(path)) as hf:
        s, raw = hf.sizes, hf.extension.first(M.FSINFO)
        info = M.DECODERS[M.FSINFO](Reader(raw.data, 0, s))
        fsinfo = message(raw, "superblock extension", s, 7 if hf.extension.version == 1 else 0)
        managers = [a for a in info.managers if a is not None]
        heaps = set()
        for _, obj in objects(hf):
            heaps |= {m.heap_address for m in map(obj.message, (M.LINK_INFO, M.ATTRIBUTE_INFO))
                      if m is not None and m.heap_address is not None}
    with open(path, "rb") as f:
        for heap in sorted(heaps):
            header = fh.decode_header(os.pread(f.fileno(), fh.header_size(s, 0), heap), heap, s, "heap")
            if header.free_space_manager_address is not None:
                managers.append(header.free_space_manager_address)
    return fsinfo, s, managers


def test_file_space_info_round_trips(files):
    """libhdf5's bytes (padded to 8 in a version 1 header) come back; changed fields survive."""
    seen = Seen(set())
    for path in files.values():
        fsinfo, s, _ = found(path)
        info = check(fsinfo)
        changed = replace(info, page_size=info.page_size * 2, eoa_before_managers=None if info.persist else 4096)
        assert fsinfo.decode(fsinfo.encode(changed)) == changed
        seen.add(info.version, info.strategy, info.persist, s.offset, s.length)
    assert {k[1:3] for k in seen.kinds} == {(FI.V1_FSM_AGGR, 1), (FI.V1_PAGE, 1), (FI.V1_PAGE, 0),
                                            (FI.V1_AGGR, 0), (FI.V1_NONE, 0)}
    assert {k[3] for k in seen.kinds} == {2, 4, 8}


def test_managers_round_trip(files):
    """Every manager's header and section list: decode -> encode gives libhdf5's bytes; a section
    moved and the header's serial count changed survive encode -> decode."""
    kinds = set()
    for name, path in files.items():
        _, s, managers = found(path)
        with open(path, "rb") as f:
            for addr in managers:
                for structure in free_space_manager(FileReads(f.fileno(), s), addr):
                    check(structure)
                    kinds.add(structure.kind)
    assert {("free-space header", FS.CLIENT_FILE), ("free-space header", FS.CLIENT_HEAP)} <= kinds
    sections = {k[1:] for k in kinds if k[0] == "free-space sections"}
    assert {(FS.CLIENT_FILE, (FS.FILE_SIMPLE,)), (FS.CLIENT_FILE, (FS.FILE_SMALL,)),
            (FS.CLIENT_FILE, (FS.FILE_LARGE,)), (FS.CLIENT_HEAP, (FS.HEAP_SINGLE,)),
            (FS.CLIENT_HEAP, (FS.HEAP_SINGLE, FS.HEAP_FIRST_ROW))} <= sections


def test_field_changes(files):
    """The changes the walker makes, spelled out on one paged file: a section's address, the
    header's serial count."""
    _, s, managers = found(files["page-h5py"])
    with open(files["page-h5py"], "rb") as f:
        raw = os.pread(f.fileno(), FS.header_size(s), managers[0])
        h = FS.decode_header(raw, managers[0], s, "header")
        sl = FS.decode_sections(os.pread(f.fileno(), h.sections_size, h.sections_address), h, s, "sections")
    assert h.serial_sections == sl.sections > 0 and h.client == FS.CLIENT_FILE
    more = replace(h, serial_sections=h.serial_sections + 1)
    assert FS.decode_header(FS.encode_header(more, s), h.address, s, "header") == more
    last = sl.sets[-1]
    moved = replace(sl, sets=sl.sets[:-1] + (replace(last, sections=(replace(last.sections[0], offset=4096),)
                                                      + last.sections[1:]),))
    assert FS.decode_sections(FS.encode_sections(moved, h, s), h, s, "sections") == moved


def test_the_engine_still_reads_them(files):
    for name, path in files.items():
        with h5py.File(path, "r") as f, H5File.open(str(path)) as hf:
            datasets = []
            f.visititems(lambda p, o: datasets.append(p) if isinstance(o, h5py.Dataset) else None)
            assert datasets, name
            for p in datasets:
                np.testing.assert_array_equal(hf.resolve("/" + p).read_array(), f[p][()], err_msg=f"{name}: {p}")


# -- malformed input --------------------------------------------------------------------------

S8 = Sizes(8, 8)
HEADER = FS.FreeSpaceHeader(96, FS.CLIENT_HEAP, 100, 3, 3, 0, 4, 80, 120, 16, 4096, 200, 0, 0)
SECTIONS = FS.SectionList(96, (FS.SectionSet(16, (FS.Section(8, FS.HEAP_SINGLE), FS.Section(40, FS.HEAP_SINGLE))),
                               FS.SectionSet(512, (FS.Section(512, FS.HEAP_FIRST_ROW, FS.HeapIndirect(0, 1, 0, 1)),))))


def _resealed(raw: bytes, pos: int, value: bytes) -> bytes:
    return sealed(raw[:pos] + value + raw[pos + len(value):-4])


def test_malformed_blocks():
    raw = FS.encode_sections(SECTIONS, HEADER, S8)
    h = replace(HEADER, sections_size=len(raw))
    assert FS.decode_sections(raw, h, S8, "ok") == SECTIONS
    hdr = FS.encode_header(h, S8)
    with pytest.raises(ChecksumError):
        FS.decode_header(hdr[:-1] + bytes([hdr[-1] ^ 1]), 96, S8, "header")
    with pytest.raises(FormatError, match="truncated"):
        FS.decode_header(hdr[:-1], 96, S8, "header")
    with pytest.raises(Unsupported, match="client"):
        FS.decode_header(_resealed(hdr, 5, b"\x02"), 96, S8, "header")
    with pytest.raises(Unsupported, match="version"):
        FS.decode_header(_resealed(hdr, 4, b"\x01"), 96, S8, "header")
    with pytest.raises(FormatError, match="truncated"):
        FS.decode_sections(raw[:-1], h, S8, "sections")
    with pytest.raises(FormatError, match="belongs"):
        FS.decode_sections(raw, replace(h, address=97), S8, "sections")
    with pytest.raises(FormatError, match="address space"):
        FS.decode_sections(raw, replace(h, address_bits=65), S8, "sections")
    with pytest.raises(FormatError, match="set of 0"):
        FS.decode_sections(_resealed(raw, 13, b"\x00"), h, S8, "sections")
    with pytest.raises(FormatError, match="set of 4"):
        FS.decode_sections(_resealed(raw, 13, b"\x04"), h, S8, "sections")
    with pytest.raises(FormatError, match="section type 4"):
        FS.decode_sections(_resealed(raw, 13 + 1 + 2 + 2, b"\x04"), h, S8, "sections")
    with pytest.raises(FormatError, match="truncated"):     # more sections announced than stored
        FS.decode_sections(raw, replace(h, serial_sections=4), S8, "sections")
    with pytest.raises(FormatError, match="version 2"):
        FI.decode(Reader(b"\x02\x00\x01" + bytes(40), 0, S8))


def test_encoders_refuse_what_they_cannot_write():
    with pytest.raises(ValueError, match="indirect"):
        FS.encode_sections(replace(SECTIONS, sets=(FS.SectionSet(8, (FS.Section(8, FS.HEAP_FIRST_ROW),)),)),
                           HEADER, S8)
    with pytest.raises(ValueError, match="too wide"):
        FS.encode_sections(replace(SECTIONS, sets=(FS.SectionSet(8, (FS.Section(1 << 16, 0),)),)), HEADER, S8)
    with pytest.raises(ValueError, match="manager addresses"):
        encoded(FI.encode, FI.FileSpaceInfo(1, 0, 1, 1, 4096, 0, None, (None,) * 6), S8)
    with pytest.raises(ValueError, match="ALL_PERSIST"):
        encoded(FI.encode, FI.FileSpaceInfo(0, FI.V0_ALL_PERSIST, 0, 1), S8)


# -- Hypothesis --------------------------------------------------------------------------------


@st.composite
def file_space_infos(draw, s: Sizes):
    if draw(st.booleans()):
        strategy = draw(uint(1))
        persist = int(strategy == FI.V0_ALL_PERSIST)
        managers = tuple(draw(st.lists(address(s), min_size=6, max_size=6))) if persist else ()
        return FI.FileSpaceInfo(0, strategy, persist, draw(uint(s.length)), managers=managers)
    persist = draw(uint(1))
    managers = tuple(draw(st.lists(address(s), min_size=12, max_size=12))) if persist else ()
    return FI.FileSpaceInfo(1, draw(uint(1)), persist, draw(uint(s.length)), draw(uint(s.length)), draw(uint(2)),
                            draw(address(s)), managers)


@HYP
@given(with_sizes(file_space_infos))
def test_file_space_info_hypothesis(case):
    s, info = case
    roundtrip(info, lambda r: encoded(FI.encode, r, s), lambda b: FI.decode(Reader(b, 0, s)))


@st.composite
def headers(draw, s: Sizes, serial: int | None = None):
    serial = draw(uint(s.length)) if serial is None else serial
    return FS.FreeSpaceHeader(draw(st.integers(0, s.undefined - 1)), draw(st.sampled_from(sorted(FS.SECTION_TYPES))),
                              draw(uint(s.length)), draw(uint(s.length)), serial, draw(uint(s.length)),
                              draw(uint(2)), draw(uint(2)), draw(uint(2)), draw(st.integers(0, 64)),
                              draw(uint(s.length)), draw(address(s)), draw(uint(s.length)), draw(uint(s.length)))


@HYP
@given(with_sizes(headers))
def test_header_hypothesis(case):
    s, h = case
    roundtrip(h, lambda r: FS.encode_header(r, s), lambda b: FS.decode_header(b, h.address, s, "header"))


@st.composite
def section_lists(draw, s: Sizes) -> tuple[FS.FreeSpaceHeader, FS.SectionList]:
    """A header and a section list it describes (its serial count and widths fit the sections)."""
    h = draw(headers(s, serial=0))
    _, size_w, off_w = h.widths(s)
    offsets = uint(off_w)

    def section(stype: int) -> FS.Section:
        if h.client == FS.CLIENT_HEAP and stype in FS.WITH_INDIRECT:
            return FS.Section(draw(offsets), stype, FS.HeapIndirect(draw(offsets), draw(uint(2)), draw(uint(2)),
                                                                    draw(uint(2))))
        return FS.Section(draw(offsets), stype)

    types = st.integers(0, FS.SECTION_TYPES[h.client] - 1)
    sets = tuple(FS.SectionSet(draw(uint(size_w)), tuple(map(section, draw(st.lists(types, min_size=1, max_size=4)))))
                 for _ in range(draw(st.integers(0, 4))))
    sl = FS.SectionList(h.address, sets, draw(st.integers(0, 8)))
    return replace(h, serial_sections=sl.sections), sl


@HYP
@given(with_sizes(section_lists))
def test_sections_hypothesis(case):
    s, (h, sl) = case
    raw = FS.encode_sections(sl, h, s)
    h = replace(h, sections_size=len(raw))
    roundtrip(sl, lambda r: FS.encode_sections(r, h, s), lambda b: FS.decode_sections(b, h, s, "sections"))


def test_truncated_maximum_section_size(files):
    """With 4-byte lengths libhdf5 stores the file's maximum section size (2^63 - 1) truncated,
    yet writes section sizes 8 bytes wide: the decoder reads them at that width."""
    _, s, managers = found(files["fsm-4-4"])
    with open(files["fsm-4-4"], "rb") as f:
        h = FS.decode_header(os.pread(f.fileno(), FS.header_size(s), managers[0]), managers[0], s, "header")
    assert (h.client, h.max_section_size, h.address_bits) == (FS.CLIENT_FILE, (1 << 32) - 1, 63)
    assert h.widths(s)[1:] == (8, 8)
