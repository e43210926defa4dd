"""Files persisting their free space (libhdf5's File Space Info "persist"; h5py fs_persist=True):
h5fs allocates from the file's free-space managers and keeps them listing the free space.

h5py writes files with the FSM_AGGR and PAGE strategies (8- and 4-byte offsets and lengths, page
sizes 4096 and 512, libver latest and earliest) and deletes datasets in them, so that the managers
list free space. The engine rewrites every chunk of a dataset (through the writeback, or `dd`
through a mount): the new chunks move, the old ones are freed. Then h5py reads every dataset equal
to a NumPy model, `h5fs check` passes, the managers (decoded here) list exactly the unused space,
the new chunks lie in space the managers listed (or that the rewrite freed) and the file did not
grow; libhdf5 then opens the file read-write (except with 4-byte lengths, where libhdf5 itself
crashes reopening its own file for writing), allocates from the managers, writes, closes, and all
of it reads back and checks again. A file h5fs can only honour (a page-end threshold) keeps its
managers untouched. A power loss at any barrier of such an edit leaves a file that checks sound.
(Chunks here stay a page or larger under paged aggregation: a smaller one is raw data only when
the writer says so, which the allocator's unit tests cover, h5fs.storage.allocator.)
"""

from __future__ import annotations

import logging
import subprocess
from dataclasses import replace

import h5py
import numpy as np
import pytest
from conftest import run_h5fs
from crash_support import replayed_prefixes
from roundtrip_support import new_file
from write_support import verify_file

from h5fs.check import check
from h5fs.format import free_space_manager as fsm
from h5fs.format.codec import Reader, Writer
from h5fs.format.messages import file_space_info as fsi
from h5fs.format.messages.types import FSINFO
from h5fs.model.file import H5File
from h5fs.model.writeback import Writeback
from h5fs.storage.object_header.edit import rewrite_message
from h5fs.storage.index import IndexContext, open_index

STRATEGIES = {"fsm": h5py.h5f.FSPACE_STRATEGY_FSM_AGGR, "page": h5py.h5f.FSPACE_STRATEGY_PAGE}
CASES = {   # name -> strategy, (offset, length) sizes, libver, page size
    "fsm": ("fsm", (8, 8), "latest", 4096),
    "fsm-4-8": ("fsm", (4, 8), "latest", 4096),
    "fsm-4-4": ("fsm", (4, 4), "latest", 4096),
    "fsm-earliest": ("fsm", (8, 8), "earliest", 4096),
    "page": ("page", (8, 8), "latest", 4096),
    "page-512-4-8": ("page", (4, 8), "latest", 512),
}
CHUNK = 4000   # float32 elements: about 8 KiB deflated, larger than a page


def build(path, strategy: str, sizes=(8, 8), libver: str = "latest", page: int = 4096,
          delete: bool = True, chunk: int = CHUNK) -> dict[str, np.ndarray]:
    """Datasets written, two of them deleted in the same session (libhdf5 cannot reopen a file
    with 4-byte lengths and persistent free space for writing); returns the model."""
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fcpl.set_file_space_strategy(STRATEGIES[strategy], True, 1)
    if strategy == "page":
        fcpl.set_file_space_page_size(page)
    rng = np.random.default_rng(0)
    model = {}
    with new_file(path, libver, sizes, fcpl) as f:
        for name, n in (("gone1", 60000), ("edit", 40000), ("gone2", 50000), ("keep", 30000)):
            model[name] = rng.integers(0, 1000, n).astype("<f4")
            f.create_dataset(name, data=model[name], chunks=(chunk,), compression="gzip")
        model["small"] = np.arange(10)
        f["small"] = model["small"]
        f["keep"].attrs["note"] = "kept"
        if delete:
            del f["gone1"], f["gone2"]
    if delete:
        del model["gone1"], model["gone2"]
    return model


def managers(path) -> dict[int, list[tuple[int, int]]]:
    """Slot -> (address, size) of every section the file's managers list, decoded here."""
    with H5File.open(str(path)) as f:
        s = f.sizes
        info = fsi.decode(Reader(f.extension.first(FSINFO).data, 0, s))
        out = {}
        for slot, address in enumerate(info.managers):
            if address is not None:
                h = fsm.decode_header(f.reader.read(address, fsm.header_size(s)), address, s, "manager")
                listed = [] if h.sections_address is None else \
                    fsm.decode_sections(f.reader.read(h.sections_address, h.sections_size), h, s, "manager").sets
                out[slot] = sorted((sec.offset, st.size) for st in listed for sec in st.sections)
        return out


def listed(path) -> list[tuple[int, int]]:
    return sorted(e for sections in managers(path).values() for e in sections)


def chunk_extents(path, name: str) -> list[tuple[int, int]]:
    with h5py.File(path, "r") as f:
        dsid = f[name].id
        return [(info.byte_offset, info.size) for info in map(dsid.get_chunk_info, range(dsid.get_num_chunks()))]


def covered(extent: tuple[int, int], extents: list[tuple[int, int]]) -> bool:
    """Whether `extent` lies within the union of `extents`."""
    start, end = extent[0], extent[0] + extent[1]
    for a, n in sorted(extents):
        if a <= start < a + n:
            start = a + n
            if start >= end:
                return True
    return False


def same(data: dict[str, np.ndarray], model: dict[str, np.ndarray]) -> None:
    for name, want in model.items():
        assert np.array_equal(data[name], want), name


def sound_and_listed(path) -> None:
    """`h5fs check` passes and every unused byte below the end of allocation is listed."""
    report = check(str(path))
    assert report.sound, report.problems
    assert report.unused == report.listed_free == sum(n for _, n in listed(path))


def edit_through_engine(path, model: dict[str, np.ndarray]) -> None:
    model["edit"] = model["edit"] + 1
    with H5File.open(str(path), writable=True) as f:
        wb = Writeback(f)
        wb.write(f.resolve("/edit"), 0, model["edit"].tobytes())
        wb.close()


def after_edit(path, model, before: list[tuple[int, int]], old: list[tuple[int, int]], size: int) -> None:
    """The checks every edit is followed by (module docstring), libhdf5's read-write open last."""
    same(verify_file(path, h5dump=False), model)
    sound_and_listed(path)
    new = chunk_extents(path, "edit")
    assert all(covered(e, before + old) for e in new), "a new chunk lies in space nobody listed free"
    assert any(covered(e, before) for e in new), "no new chunk reused a section the managers listed"
    assert path.stat().st_size == size, "the file grew though the freed space sufficed"


def libhdf5_writes_on(path, model) -> None:
    free = listed(path)
    with h5py.File(path, "r+") as f:
        f["keep"][:500] = -1
        model["keep"][:500] = -1
        model["more"] = np.arange(20000, dtype="<f8")
        f.create_dataset("more", data=model["more"], chunks=(2500,))
        f["more"].attrs["x"] = 1
    same(verify_file(path, h5dump=False), model)
    sound_and_listed(path)
    assert any(covered(e, free) for e in chunk_extents(path, "more")), "libhdf5 did not use the managers"


@pytest.mark.parametrize("case", sorted(CASES))
def test_engine_edit_reuses_and_updates_the_managers(tmp_path, case):
    strategy, sizes, libver, page = CASES[case]
    path = tmp_path / f"{case}.h5"
    model = build(path, strategy, sizes, libver, page)
    before, old, size = listed(path), chunk_extents(path, "edit"), path.stat().st_size
    assert sum(n for _, n in before) > sum(n for _, n in old)
    sound_and_listed(path)
    edit_through_engine(path, model)
    after_edit(path, model, before, old, size)
    if sizes[1] == 8:
        libhdf5_writes_on(path, model)


def test_mount_dd_rewrites_chunks_from_the_managers(tmp_path, mount):
    path = tmp_path / "mounted.h5"
    model = build(path, "fsm")
    before, old, size = listed(path), chunk_extents(path, "edit"), path.stat().st_size
    model["edit"] = model["edit"] * 2
    piece = tmp_path / "piece"
    piece.write_bytes(model["edit"].tobytes())
    mp = mount(path, "rw")
    subprocess.run(["dd", f"if={piece}", f"of={mp / 'edit'}", "bs=64k", "conv=notrunc", "status=none"], check=True,
                   timeout=60)
    run_h5fs("umount", mp, check=True)
    after_edit(path, model, before, old, size)
    libhdf5_writes_on(path, model)


def test_edits_again_and_again_keep_the_file_size(tmp_path):
    """Rewriting a dataset many times: the space each rewrite frees is listed, then reused."""
    path = tmp_path / "again.h5"
    model = build(path, "page")
    size = path.stat().st_size
    for _ in range(5):
        edit_through_engine(path, model)
        sound_and_listed(path)
    assert path.stat().st_size == size
    same(verify_file(path, h5dump=False), model)


def move_chunks(path, name: str) -> None:
    """Every chunk of `name` moved to fresh space and its old space freed, both as raw data (what
    the writeback does), in one transaction."""
    with H5File.open(str(path), writable=True) as f:
        ds = f.resolve("/" + name)
        with f.store.transaction() as txn:
            index = open_index(IndexContext(txn.reader, ds.layout, ds.dataspace.dims, ds.dataspace.maxdims,
                                            bool(ds.filters), ds.path))
            moved = []
            for rec in index.records():
                address = txn.allocate(rec.size, raw=True)
                txn.write_data(address, txn.read_data(rec.address, rec.size))
                txn.free(rec.address, rec.size, raw=True)
                moved.append(replace(rec, address=address))
            assert index.put(txn, moved) is None
            txn.commit()


def test_a_manager_created_where_the_file_has_none(tmp_path):
    """A file that freed no raw data: the raw data an edit frees gets a manager (made as libhdf5
    makes one, its address in the message), which libhdf5 then opens and uses."""
    path = tmp_path / "none.h5"
    model = build(path, "fsm", delete=False)
    slot = fsi.SLOT_RAW
    assert slot not in managers(path)
    old = chunk_extents(path, "edit")
    move_chunks(path, "edit")
    same(verify_file(path, h5dump=False), model)
    sound_and_listed(path)
    assert all(covered(e, managers(path)[slot]) for e in old)
    libhdf5_writes_on(path, model)


@pytest.mark.parametrize("page", [4096, 512])
def test_small_raw_data_keeps_to_raw_pages(tmp_path, page):
    """Paged aggregation with chunks under a page: moved as raw data they go to raw data pages
    (or new pages), their old space to the raw data manager or back to the large one as whole
    pages; no page mixes kinds (`h5fs check`), and libhdf5 writes on."""
    path = tmp_path / "small.h5"
    model = build(path, "page", page=page, chunk=page // 8)
    old = chunk_extents(path, "edit")
    assert max(n for _, n in old) < page
    move_chunks(path, "edit")
    same(verify_file(path, h5dump=False), model)
    sound_and_listed(path)
    raw = managers(path)
    assert all(covered(e, raw.get(fsi.SLOT_RAW, []) + raw.get(fsi.SLOT_LARGE, [])) for e in old)
    libhdf5_writes_on(path, model)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_a_manager_whose_pool_empties_lists_nothing(tmp_path, strategy):
    """The raw data pool taken whole (directly here, as if h5fs had allocated all of it): its
    manager keeps its blocks and lists no section; libhdf5 opens it, writes on and closes."""
    path = tmp_path / "empty.h5"
    model = build(path, strategy)
    assert managers(path)[fsi.SLOT_RAW]
    with H5File.open(str(path), writable=True) as f:
        pools = f.store.allocator.pools
        with f.store.transaction() as txn:
            for a, n in pools[fsi.SLOT_RAW].extents():
                pools[fsi.SLOT_RAW].remove(a, n)
            txn.allocate(8)
            txn.commit()
    assert managers(path)[fsi.SLOT_RAW] == []
    assert check(str(path)).sound
    with h5py.File(path, "r+") as f:   # (the space taken from the pool stays unused: no other check)
        f["keep"][:10] = 7
        model["keep"][:10] = 7
    same(verify_file(path, h5dump=False), model)


def test_a_file_h5fs_can_only_honour_keeps_its_managers(tmp_path, caplog):
    """Paged aggregation with a page-end threshold (libhdf5 would grow a section it reads near a
    page's end over bytes it does not track): the sections stay unused, the managers unchanged,
    the log says why; the end of allocation before the managers follows the file's."""
    path = tmp_path / "honour.h5"
    model = build(path, "page")
    with H5File.open(str(path), writable=True) as f:   # the threshold, as libhdf5 would store it
        header = f.extension
        raw = header.first(FSINFO)
        info = fsi.decode(Reader(raw.data, 0, f.sizes))
        w = Writer(f.sizes)
        fsi.encode(w, replace(info, page_end_threshold=64))
        with f.store.transaction() as txn:
            rewrite_message(txn, header, raw, w.getvalue())
            txn.commit()
    before, blocks = listed(path), manager_blocks(path)
    with caplog.at_level(logging.WARNING, logger="h5fs"):
        edit_through_engine(path, model)
    assert "page-end threshold" in caplog.text
    assert listed(path) == before and manager_blocks(path) == blocks
    assert not any(covered(e, before) for e in chunk_extents(path, "edit"))
    same(verify_file(path, h5dump=False), model)
    with H5File.open(str(path)) as f:
        info = fsi.decode(Reader(f.extension.first(FSINFO).data, 0, f.sizes))
        assert info.eoa_before_managers == f.superblock.eof_address


def manager_blocks(path) -> bytes:
    """The bytes of every manager header and section list."""
    with H5File.open(str(path)) as f:
        s = f.sizes
        info = fsi.decode(Reader(f.extension.first(FSINFO).data, 0, s))
        out = b""
        for address in filter(None, info.managers):
            h = fsm.decode_header(f.reader.read(address, fsm.header_size(s)), address, s, "manager")
            out += f.reader.read(address, fsm.header_size(s)) + f.reader.read(h.sections_address, h.sections_size)
        return out


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_power_loss_at_every_barrier(tmp_path, monkeypatch, strategy):
    """The managers are updated in the commit that moves the space: the writes of an edit
    recorded, each prefix up to an fsync replayed alone and with a random part of the writes
    after it; the next writable open (journal replay) leaves a sound file whose chunks hold their
    old or new values."""
    original = tmp_path / "original.h5"
    model = build(original, strategy)
    old = model["edit"].copy()
    path = tmp_path / "live.h5"
    path.write_bytes(original.read_bytes())
    recording = tmp_path / "writes.rec"
    monkeypatch.setenv("H5FS_RECORD", str(recording))
    edit_through_engine(path, model)
    monkeypatch.delenv("H5FS_RECORD")
    out = str(tmp_path / "replayed.h5")
    for _ in replayed_prefixes(str(original), str(recording), out, seed=2):
        report = check(out)
        assert report.sound, report.problems
        with h5py.File(out, "r") as f:
            got = f["edit"][()].reshape(-1, CHUNK)
            assert np.array_equal(f["keep"][()], model["keep"])
        for row, was, now in zip(got, old.reshape(-1, CHUNK), model["edit"].reshape(-1, CHUNK)):
            assert np.array_equal(row, was) or np.array_equal(row, now)
