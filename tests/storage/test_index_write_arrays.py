"""Write side of the single chunk (layout index type 1), implicit (2), fixed array (3) and
extensible array (4) chunk indexes, against libhdf5 through h5py.

h5py creates the dataset (and writes some chunks first, or none); h5fs's engine writes chunks and
puts, replaces and removes their records batch by batch (one transaction each, the layout message
rewritten when the index returns a new one); then h5py reads the dataset and lists its chunks by
coordinates. A twin file that h5py grows chunk by chunk in the same order holds the same chunks
with the same contents, and an array with the same blocks: header counters, index block, super
blocks, data blocks with their offsets, page-init bitmaps. Small pages and blocks in the layout
message (libhdf5 creates its arrays with those parameters too) make paged data blocks and super
blocks from a few hundred chunks.
"""

from __future__ import annotations

import random
import tempfile
import zlib
from dataclasses import replace
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from h5fs.check import check as h5fs_check
from h5fs.format.codec import Writer
from h5fs.format.messages import layout as L
from h5fs.model import messages as M
from h5fs.model.file import H5File
from h5fs.storage.object_header.edit import HeaderEdit
from h5fs.storage.index import ChunkRecord, IndexContext, open_index
from h5fs.storage.index.extensible_array.reader import ExtensibleArray
from h5fs.storage.index.fixed_array import FixedArray
from index_support import CHUNK, LEVEL, Engine, Spy, chunk_values, our_records, region, write_layout

# small arrays: fixed array pages of 16 slots; extensible arrays with 3 elements in the index
# block, data blocks from 2 elements, pages of 8 (paged data blocks from super block 5 on)
SMALL = {L.FIXED_ARRAY: {"page_bits": 4},
         L.EXTENSIBLE_ARRAY: {"index_elements": 3, "min_pointers": 2, "min_elements": 2, "page_bits": 3}}
# chunk grids (current extent) and the position of the extensible array's unlimited dimension
GRIDS = {1: (300,), 2: (30, 9), 3: (7, 8, 6)}
UNLIMITED = {1: 0, 2: 1, 3: 1}


# -- files ---------------------------------------------------------------------------------------

def inside(values: np.ndarray, coords, shape) -> np.ndarray:
    return values[tuple(slice(0, r.stop - r.start) for r in region(coords, shape))]


def put_model(model: np.ndarray, puts, shape) -> None:
    """The (coords, chunk values) of `puts` written into `model`."""
    for c, v in puts:
        model[region(c, shape)] = inside(v, c, shape)


def create(path: Path, kind: str, grid: tuple[int, ...], comp: str | None, small: bool = True,
           unlimited: int | None = None) -> tuple[int, ...]:
    """A file with an empty dataset "d" of int16 chunks of CHUNK (of the whole dataset for
    "single") whose last chunk of each dimension is a partial edge chunk, indexed by `kind`;
    its shape. Extensible arrays are created with one chunk along the unlimited dimension
    (`unlimited`, by default UNLIMITED's) and grown by h5py to the grid."""
    shape = tuple(g * CHUNK - 1 for g in grid)
    u = UNLIMITED[len(shape)] if unlimited is None else unlimited
    with h5py.File(path, "w", libver="latest") as f:
        if kind == "single":
            f.create_dataset("d", shape=shape, chunks=shape, dtype="i2", compression=comp)
        elif kind == "implicit":
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_chunk((CHUNK,) * len(shape))
            dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
            h5py.h5d.create(f.id, b"d", h5py.h5t.STD_I16LE, h5py.h5s.create_simple(shape), dcpl=dcpl)
        elif kind == "fixed":
            f.create_dataset("d", shape=shape, chunks=(CHUNK,) * len(shape), dtype="i2", compression=comp)
        else:
            first = tuple(CHUNK if i == u else s for i, s in enumerate(shape))
            f.create_dataset("d", shape=first, maxshape=tuple(None if i == u else s for i, s in enumerate(shape)),
                             chunks=(CHUNK,) * len(shape), dtype="i2", compression=comp)
    want = {"single": L.SINGLE, "implicit": L.IMPLICIT, "fixed": L.FIXED_ARRAY, "extensible": L.EXTENSIBLE_ARRAY}[kind]
    with H5File.open(str(path), writable=True) as f:
        ds = f.resolve("/d")
        assert ds.layout.index.index_type == want
        if small and want in SMALL:   # before any chunk: libhdf5 creates the array with these
            assert ds.layout.index.address is None
            txn = f.store.begin()
            write_layout(f, ds, txn, replace(ds.layout, index=replace(ds.layout.index, **SMALL[want])))
            txn.commit()
    if kind == "extensible":
        with h5py.File(path, "r+") as f:
            f["d"].resize(shape)
    return shape


def implicit_batch(path: Path, puts: dict[tuple, np.ndarray], removes=()) -> None:
    """The dataset writer's way with an implicit index: chunks written where it puts them (in
    place), their records put to be checked; removals free nothing."""
    with H5File.open(str(path), writable=True) as f:
        ds = f.resolve("/d")
        txn = f.store.begin()
        idx = index_of(ds, txn.reader)
        records = [idx.lookup(c) for c in puts]
        for rec, values in zip(records, puts.values()):
            txn.write_data(rec.address, values.tobytes())
        assert idx.put(txn, records) is None and idx.remove(txn, list(removes)) is None
        txn.commit()


def index_of(ds, reader):
    space = ds.dataspace
    return open_index(IndexContext(reader, ds.layout, space.dims, space.maxdims, bool(ds.filters), "/d"))


# -- what libhdf5 and h5fs see -------------------------------------------------------------------

def grid_of(shape) -> tuple[int, ...]:
    return tuple(-(-s // CHUNK) for s in shape)


def h5py_chunks(path: Path) -> tuple[dict[tuple, tuple], list[tuple]]:
    """libhdf5's chunks: {coords: (address, size, filter mask)} from its lookup by coordinates,
    and the (address, size, filter mask) of each chunk its iteration lists, as many as its count.
    For an extensible array whose unlimited dimension is not the first, libhdf5 2.0's iteration
    reports wrong chunk offsets, and its lookup of chunk information by coordinates (which
    iterates) finds only chunks whose offsets came out right; there each chunk is read directly
    by coordinates instead (the dataset's own lookup), giving its size and mask (address None)."""
    with h5py.File(path, "r") as f:
        ds = f["d"]
        dsid = ds.id
        iterated = []
        dsid.chunk_iter(lambda i: iterated.append((i.byte_offset, i.size, i.filter_mask)))
        assert len(iterated) == dsid.get_num_chunks()
        iterated.sort()
        swizzled = None in ds.maxshape and ds.maxshape.index(None) > 0
        out = {}
        for coords in np.ndindex(*(-(-s // c) for s, c in zip(ds.shape, ds.chunks))):
            offset = tuple(int(x) * c for x, c in zip(coords, ds.chunks))
            if swizzled:
                if not iterated:   # no storage: h5py's direct read fails oddly (MemoryError)
                    break
                try:
                    mask, data = dsid.read_direct_chunk(offset)
                except RuntimeError:   # "chunk storage is not allocated"
                    continue
                out[tuple(map(int, coords))] = (None, len(data), mask)
                continue
            info = dsid.get_chunk_info_by_coord(offset)
            if info.byte_offset is not None:
                out[tuple(map(int, coords))] = (info.byte_offset, info.size, info.filter_mask)
    return out, iterated


def decoded_chunks(path: Path, comp: str | None) -> dict[tuple, bytes]:
    with h5py.File(path, "r") as f:
        ds = f["d"]
        out = {}
        for coords in h5py_chunks(path)[0]:
            mask, data = ds.id.read_direct_chunk(tuple(x * c for x, c in zip(coords, ds.chunks)))
            out[coords] = zlib.decompress(data) if comp and not mask else data
    return out


def check(path: Path, model: np.ndarray, chunks: set | None) -> dict:
    """h5py reads the model and lists `chunks` (None: don't care which) as we do; the file is
    sound for `h5fs check`. Returns h5py's chunk list."""
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["d"][...], model)
    listed, iterated = h5py_chunks(path)
    if chunks is not None:
        assert set(listed) == chunks
    ours = our_records(path)
    assert {c: (a if listed.get(c, (a,))[0] is not None else None, n, m) for c, (a, n, m) in ours.items()} == listed
    assert sorted(ours.values()) == iterated
    report = h5fs_check(str(path))
    assert report.sound, report.problems
    return listed


def array_shape(path: Path) -> list:
    """The array's structure without its addresses: header (counters and parameters), which
    blocks exist, their offsets, page-init bitmaps."""
    with H5File.open(str(path)) as f:
        lay = f.resolve("/d").layout
        if lay.index.address is None:
            return []
        if lay.index.index_type == L.FIXED_ARRAY:
            fa = FixedArray(f.reader, lay.index.address)
            h = fa.header
            out = [replace(h, address=0, dblock_address=h.dblock_address is not None)]
            return out + ([fa.dblock().bitmap] if h.dblock_address is not None else [])
        ea = ExtensibleArray(f.reader, lay.index.address)
        h = ea.header
        out = [replace(h, address=0, iblock_address=h.iblock_address is not None)]
        if h.iblock_address is None:
            return out
        ib = ea.index_block_record()
        for info in ea.sblk_info[:ea.iblock_nsblks]:
            for j in range(info.start_dblk, info.start_dblk + info.ndblks):
                a = ib.dblock_addresses[j]
                out.append(a and ("dblock", j, ea.data_block_record(a, info.dblk_nelmts).block_offset))
        for s, a in enumerate(ib.sblock_addresses):
            u = s + ea.iblock_nsblks
            if a is None:
                out.append(None)
                continue
            sb = ea.super_block_record(u, a)
            out.append(("sblock", u, sb.block_offset, sb.bitmap))
            n = 0 if ea.npages(u) else ea.sblk_info[u].dblk_nelmts
            out += [d and ("dblock", u, ea.data_block_record(d, n).block_offset) for d in sb.dblock_addresses]
        return out


# -- growth, replacement, removal ----------------------------------------------------------------

def twin_write(path: Path, writes: list[tuple[tuple, np.ndarray]], shape) -> None:
    """h5py writes these chunks, one by one, in this order."""
    with h5py.File(path, "r+") as f:
        for coords, values in writes:
            f["d"][region(coords, shape)] = inside(values, coords, shape)


ARRAY_CASES = [(kind, rank, comp, pre) for kind in ("fixed", "extensible") for rank in (1, 2, 3)
               for comp in (None, "gzip") for pre in (False, True)]


@pytest.mark.parametrize("kind,rank,comp,pre", ARRAY_CASES)
def test_array_grow_replace_remove(tmp_path, kind, rank, comp, pre):
    """Chunks in random order in batches of growing size (some already written by h5py with
    `pre`), replacements, then removals; the twin grown by h5py has the same blocks."""
    ours, twin = tmp_path / "ours.h5", tmp_path / "twin.h5"
    shape = create(ours, kind, GRIDS[rank], comp)
    create(twin, kind, GRIDS[rank], comp)
    rng = np.random.default_rng(rank)
    cells = [tuple(int(x) for x in c) for c in np.ndindex(*GRIDS[rank])]
    random.Random(rank).shuffle(cells)
    model = np.zeros(shape, "i2")
    writes = []
    if pre:   # libhdf5 made the array and wrote a tenth of the chunks
        writes = [(c, chunk_values(rng, c, shape)) for c in cells[-len(cells) // 10:]]
        twin_write(ours, writes, shape)
        twin_write(twin, writes, shape)
    engine = Engine(ours, comp)
    # 70% of the grid in batches of growing size; the last batch replaces chunks too
    n = len(cells) * 7 // 10
    batches = [cells[:1], cells[1:5], cells[5:30], cells[30:n // 2], cells[n // 2:n] + cells[:n // 5] + cells[-3:]]
    for batch in batches:
        puts = {c: chunk_values(rng, c, shape) for c in batch}
        engine.batch(puts, unfiltered=set(batch[-2:]) if comp else set())
        twin_write(twin, list(puts.items()), shape)
        writes += puts.items()
    put_model(model, writes, shape)
    written = {c for c, _ in writes}
    check(ours, model, written)
    assert len(engine.layouts) == (0 if pre else 1)   # the array created, then changed in place
    if comp:
        assert {m for _, _, m in our_records(ours).values()} == {0, 1}
    assert decoded_chunks(ours, comp) == decoded_chunks(twin, comp)
    assert array_shape(ours) == array_shape(twin)
    structure = array_shape(ours)
    if kind == "fixed":
        assert structure[0].paged and any(structure[1])
    else:   # super blocks with paged data blocks
        assert any(isinstance(x, tuple) and x[0] == "sblock" and any(x[3]) for x in structure)

    # removals: libhdf5 writes the undefined element back and keeps its blocks (as it does
    # when a shrink drops chunks), so do we
    cut = GRIDS[rank][0] // 2
    gone = sorted(c for c in written if c[0] >= cut)
    engine.batch(removes=gone)
    with h5py.File(twin, "r+") as f:
        f["d"].resize((cut * CHUNK,) + shape[1:])
    assert array_shape(ours) == array_shape(twin)
    scattered = sorted(c for c in written if c[0] < cut)[::3]
    engine.batch(removes=scattered)
    for c in gone + scattered:
        model[region(c, shape)] = 0
    check(ours, model, written - set(gone) - set(scattered))

    # libhdf5 keeps writing into the array we left: the rest of the grid
    with h5py.File(ours, "r+") as f:
        f["d"][...] = 7
    check(ours, np.full(shape, 7, "i2"), set(cells))


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_extensible_grows_further(tmp_path, rank):
    """After our writes, h5py grows the unlimited dimension and writes past our blocks: it
    continues from the header's counters we left (new super blocks, data blocks, pages)."""
    path = tmp_path / "f.h5"
    shape = create(path, "extensible", GRIDS[rank], "gzip")
    rng = np.random.default_rng(5)
    cells = [tuple(int(x) for x in c) for c in np.ndindex(*GRIDS[rank])]
    puts = {c: chunk_values(rng, c, shape) for c in cells[::2]}
    Engine(path, "gzip").batch(puts)
    u = UNLIMITED[rank]
    bigger = tuple(s * 2 if i == u else s for i, s in enumerate(shape))
    model = np.zeros(bigger, "i2")
    put_model(model, puts.items(), shape)
    with h5py.File(path, "r+") as f:
        f["d"].resize(bigger)
        tail = tuple(slice(s, None) if i == u else slice(None) for i, s in enumerate(shape))
        f["d"][tail] = 9
        model[tail] = 9
    listed = check(path, model, None)
    assert len(listed) > len(puts)


# -- single chunk and implicit -------------------------------------------------------------------

SINGLE = {1: (4,), 2: (2, 3), 3: (2, 2, 2)}   # chunk grids: the chunk is the whole dataset


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("comp", [None, "gzip"])
@pytest.mark.parametrize("pre", [False, True])
def test_single_chunk(tmp_path, rank, comp, pre):
    """The one chunk put (its address, filtered size and mask into the layout message),
    replaced, removed (h5py reads the fill value, lists no chunk) and put again."""
    ours, twin = tmp_path / "ours.h5", tmp_path / "twin.h5"
    shape = create(ours, "single", SINGLE[rank], comp)
    create(twin, "single", SINGLE[rank], comp)
    rng = np.random.default_rng(rank)
    values = rng.integers(1, 30000, shape).astype("i2")
    if pre:
        for path in (ours, twin):
            with h5py.File(path, "r+") as f:
                f["d"][...] = values[::-1]
    engine = Engine(ours, comp)
    origin = (0,) * rank
    engine.batch({origin: values})
    with h5py.File(twin, "r+") as f:
        f["d"][...] = values
    assert len(engine.layouts) == 1
    lay = engine.layouts[-1]
    with h5py.File(ours, "r") as f:   # what the layout message holds is what libhdf5 reports
        info = f["d"].id.get_chunk_info(0)
    assert (info.byte_offset, info.filter_mask) == (lay.index.address, 0)
    if comp:
        assert info.size == lay.index.filtered_size == len(zlib.compress(values.tobytes(), LEVEL))
    check(ours, values, {origin})
    assert decoded_chunks(ours, comp) == decoded_chunks(twin, comp)
    if comp:   # stored unfiltered, the mask says so
        engine.batch({origin: values}, unfiltered={origin})
        assert our_records(ours)[origin][1:] == (values.nbytes, 1)
        check(ours, values, {origin})
    engine.batch(removes=[origin])
    assert engine.layouts[-1].index.address is None
    check(ours, np.zeros(shape, "i2"), set())
    engine.batch({origin: values})
    check(ours, values, {origin})
    with pytest.raises(ValueError):
        Engine(ours, comp).batch({(1,) * rank: values})


def implicit_chunks(shape) -> set:
    """libhdf5 lists every chunk of the extent of an implicit index."""
    return {tuple(int(x) for x in c) for c in np.ndindex(*grid_of(shape))}


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("pre", [False, True])
def test_implicit(tmp_path, rank, pre):
    """Chunks written where the index puts them, the records checked; a record elsewhere is
    refused; removals change nothing (the chunk keeps its place and data)."""
    path = tmp_path / "f.h5"
    shape = create(path, "implicit", GRIDS[rank], None)
    rng = np.random.default_rng(rank)
    cells = [tuple(int(x) for x in c) for c in np.ndindex(*GRIDS[rank])]
    random.Random(rank).shuffle(cells)
    model = np.zeros(shape, "i2")
    if pre:
        with h5py.File(path, "r+") as f:
            f["d"][...] = 5
        model[...] = 5
    for batch in (cells[:10], cells[10:len(cells) // 2], cells[:20]):
        puts = {c: chunk_values(rng, c, shape) for c in batch}
        implicit_batch(path, puts)
        put_model(model, puts.items(), shape)
    listed = check(path, model, implicit_chunks(shape))
    implicit_batch(path, {}, removes=cells[:5])
    check(path, model, set(listed))
    with H5File.open(str(path), writable=True) as f:
        ds = f.resolve("/d")
        txn = f.store.begin()
        idx = index_of(ds, txn.reader)
        rec = idx.lookup(cells[0])
        with pytest.raises(ValueError):
            idx.put(txn, [replace(rec, address=rec.address + 2)])
        with pytest.raises(ValueError):
            idx.put(txn, [replace(rec, size=rec.size - 2)])


@pytest.mark.parametrize("by_resize", [False, True])
def test_implicit_block_allocated(tmp_path, by_resize):
    """A dataset created empty has no block: growing the extent allocates it whole (as libhdf5's
    H5Dset_extent with early allocation does), or a put does, moving the chunks written elsewhere
    in its transaction into their places."""
    path, twin = tmp_path / "f.h5", tmp_path / "twin.h5"
    for p in (path, twin):
        with h5py.File(p, "w", libver="latest") as f:
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_chunk((CHUNK, CHUNK))
            dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
            h5py.h5d.create(f.id, b"d", h5py.h5t.STD_I16LE, h5py.h5s.create_simple((0, 5), (20, 5)), dcpl=dcpl)
    shape = (9, 5)
    with h5py.File(twin, "r+") as f:
        f["d"].resize(shape)
    rng = np.random.default_rng(0)
    puts = {c: chunk_values(rng, c, shape) for c in np.ndindex(*grid_of(shape))}
    with H5File.open(str(path), writable=True) as f:
        ds = f.resolve("/d")
        assert ds.layout.index.address is None
        txn = f.store.begin()
        edit = HeaderEdit(txn, ds.header)
        edit.set(M.DATASPACE, M.encode(M.DATASPACE, replace(ds.dataspace, dims=shape), f.sizes))
        idx = open_index(IndexContext(txn.reader, ds.layout, shape, ds.dataspace.maxdims, False, "/d"))
        if by_resize:
            lay = idx.resize(txn, shape)
            assert idx.resize(txn, shape) is None
            for c, v in puts.items():
                txn.write_data(idx.lookup(c).address, v.tobytes())
            assert idx.put(txn, [idx.lookup(c) for c in puts]) is None
        else:
            records = []
            for c, v in puts.items():
                addr = txn.allocate(v.nbytes)
                txn.write_data(addr, v.tobytes())
                records.append(ChunkRecord(c, addr, v.nbytes))
            lay = idx.put(txn, records)
        assert lay is not None and lay.index.address is not None
        w = Writer(f.sizes)
        L.encode(w, lay)
        edit.set(M.LAYOUT, w.getvalue())
        txn.commit()
    model = np.zeros(shape, "i2")
    put_model(model, puts.items(), shape)
    check(path, model, implicit_chunks(shape))
    ours, theirs = (h5py_chunks(p)[0] for p in (path, twin))   # chunks where libhdf5 put them
    assert {c: (a - ours[0, 0][0], n) for c, (a, n, _) in ours.items()} == \
        {c: (a - theirs[0, 0][0], n) for c, (a, n, _) in theirs.items()}
    with h5py.File(path, "r+") as f:
        f["d"].resize((20, 5))
        f["d"][9:] = 3
        model = np.concatenate([model, np.full((11, 5), 3, "i2")])
    check(path, model, implicit_chunks((20, 5)))


# -- efficiency ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["fixed", "extensible"])
def test_batch_touches_each_block_once(tmp_path, kind):
    """A batch of new chunks and replacements over existing pages, blocks and super blocks:
    every block and page read once and written at most once."""
    path = tmp_path / "f.h5"
    grid = (40, 40)
    shape = create(path, kind, grid, None)
    cells = [tuple(int(x) for x in c) for c in np.ndindex(*grid)]
    random.Random(1).shuffle(cells)
    engine = Engine(path, None)
    one = np.ones((CHUNK, CHUNK), "i2")
    engine.batch({c: one for c in cells[:800]})
    spy = Spy()
    engine.batch({c: one * 2 for c in cells[400:1200]}, spy=spy)
    assert max(spy.writes.values()) == 1
    assert max(spy.reads.values()) == 1
    assert len(spy.writes) > 50
    model = np.zeros(shape, "i2")
    for c in cells[:1200]:
        model[region(c, shape)] = inside(one * (2 if c in set(cells[400:1200]) else 1), c, shape)
    check(path, model, set(cells[:1200]))


@pytest.mark.parametrize("kind", ["fixed", "extensible"])
def test_ten_thousand_records(tmp_path, kind):
    """10,000 chunk records in one batch (libhdf5's default array parameters: pages of 1,024
    slots, super blocks), into an empty index and again as replacements."""
    path = tmp_path / "f.h5"
    shape = create(path, kind, (100, 100), None, small=False)
    cells = [tuple(int(x) for x in c) for c in np.ndindex(100, 100)]
    random.Random(2).shuffle(cells)
    nbytes = CHUNK * CHUNK * 2
    with H5File.open(str(path), writable=True) as f:
        ds = f.resolve("/d")
        txn = f.store.begin()
        idx = index_of(ds, txn.reader)
        base = txn.allocate(len(cells) * nbytes)
        txn.write_data(base, np.repeat(np.arange(10000, dtype="i2"), CHUNK * CHUNK).tobytes())
        records = [ChunkRecord(c, base + (c[0] * 100 + c[1]) * nbytes, nbytes) for c in cells]
        layout = idx.put(txn, records)
        assert idx.put(txn, records[::-1]) is None   # every record replaced: no new layout
        write_layout(f, ds, txn, layout)
        txn.commit()
    model = np.zeros(shape, "i2")
    for c in cells:
        model[region(c, shape)] = c[0] * 100 + c[1]
    check(path, model, set(cells))


# -- random batches ------------------------------------------------------------------------------

RGRID = (12, 10)
cells_st = st.tuples(st.integers(0, RGRID[0] - 1), st.integers(0, RGRID[1] - 1))
batch_st = st.tuples(st.dictionaries(cells_st, st.integers(1, 100), max_size=40), st.sets(cells_st, max_size=20))


@pytest.mark.parametrize("kind", ["fixed", "extensible"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(batch_st, min_size=1, max_size=4), comp=st.sampled_from([None, "gzip"]),
       unlimited=st.sampled_from([0, 1]))
def test_random_batches(kind, batches, comp, unlimited):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.h5"
        shape = create(path, kind, RGRID, comp, unlimited=unlimited)
        engine = Engine(path, comp)
        model: dict[tuple, int] = {}
        for puts, removes in batches:
            engine.batch({c: np.full((CHUNK, CHUNK), v, "i2") for c, v in puts.items()}, sorted(removes))
            model.update(puts)
            for c in removes:
                model.pop(c, None)
        want = np.zeros(shape, "i2")
        for c, v in model.items():
            want[region(c, shape)] = v
        check(path, want, set(model))
