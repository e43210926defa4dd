"""Fractal heap edits (h5fs.storage.fractal_heap) against libhdf5: heaps grown object by
object compared with the heaps libhdf5 builds from the same objects (header, block layout, free
sections), edits of heaps h5py made followed by libhdf5 editing the same heap, huge objects, and
random edit sequences; every heap audited: its free sections cover exactly the bytes no object
uses."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from h5fs.check import check
from h5fs.errors import Unsupported
from h5fs.format import btree_v2
from h5fs.format import fractal_heap as fh
from h5fs.format import free_space_manager as fsm
from h5fs.format.codec import Writer
from h5fs.format.messages import filter_pipeline
from h5fs.model import messages as M
from h5fs.model.file import H5File
from h5fs.storage.fractal_heap import writer as fw
from h5fs.storage.fractal_heap.reader import FractalHeap
from h5fs.storage.btree_v2.reader import iterate, read_header
from message_names import link_name


def obj_address(path, name):
    with h5py.File(path, "r") as f:
        return h5py.h5o.get_info(f[name].id).addr


def dense_group(path, n, target=0, sizes=(8, 8)):
    """A group of `n` links made dense by libhdf5, in creation order (groups, or soft links whose
    targets grow with `target`)."""
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fcpl.set_sizes(*sizes)
    fid = h5py.h5f.create(str(path).encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl,
                          fapl=h5py.File(path, "w", libver="latest").id.get_access_plist())
    with h5py.File(fid) as f:
        f.create_dataset("x", data=[1])
        g = f.create_group("g", track_order=True)
        for i in range(n):
            if target:
                g[f"l{i}"] = h5py.SoftLink("/" + "t" * (target * (i % 7 + 1)))
            else:
                g.create_group(f"grp_{i:05d}")


def group_heap(path, gname="g", attrs=False):
    """(heap address, the heap's objects in creation order, every heap ID an index names)."""
    with H5File.open(str(path)) as hf:
        obj = hf.get(obj_address(path, gname), gname)
        if attrs:
            info = obj.message(M.ATTRIBUTE_INFO)
            corder = list(iterate(hf.reader, info.order_index_address, btree_v2.decode_attr_corder))
        else:
            info = obj.message(M.LINK_INFO)
            corder = list(iterate(hf.reader, info.order_index_address, btree_v2.decode_link_corder))
        heap = FractalHeap(hf.reader, info.heap_address)
        return info.heap_address, [heap.get(r.heap_id) for r in corder], [r.heap_id for r in corder]


def summary(reader, address):
    """What libhdf5 decides when it grows a heap: header fields (not addresses), free sections,
    which entries of which indirect blocks hold blocks."""
    heap = FractalHeap(reader, address)
    h = heap.header
    fields = {k: getattr(h, k) for k in h.__dataclass_fields__
              if k not in ("address", "root_address", "free_space_manager_address", "huge_btree_address")}
    sections = None
    if h.free_space_manager_address is not None:
        mh, sl = manager(reader, h.free_space_manager_address)
        sections = (mh.total_space, mh.total_sections, mh.serial_sections, mh.ghost_sections, mh.sections_size,
                    [(s.size, s.sections) for s in sl.sets])
    return fields, sections, sorted(iblocks(heap))


def manager(reader, address):
    s = reader.sizes
    mh = fsm.decode_header(reader.read(address, fsm.header_size(s)), address, s, "manager")
    return mh, fsm.decode_sections(reader.read(mh.sections_address, mh.sections_size), mh, s, "sections")


def iblocks(heap):
    """(block offset, rows, allocated direct entries, allocated indirect entries) of each
    indirect block."""
    h, g = heap.header, heap.geometry
    out, stack = [], ([(h.root_address, h.root_rows, 0)] if h.root_rows else [])
    while stack:
        addr, nrows, off = stack.pop()
        ib = heap.read_indirect(addr, nrows, off)
        out.append((off, nrows, tuple(e.address is not None for e in ib.direct),
                    tuple(a is not None for a in ib.indirect)))
        for j, child in enumerate(ib.indirect):
            if child is not None:
                entry = j + g.max_direct_rows * h.width
                size = g.row_block_size[entry // h.width]
                stack.append((child, fh.rows_for_block(g, size), fh.entry_offset(h, g, off, entry)))
    return out


def audit(reader, address, live: dict[bytes, bytes]):
    """Every live object reads back; the heap's free sections and its live managed objects tile
    each direct block exactly; free ranges cover exactly the unallocated entries before the
    iterator; the header's free space adds up."""
    heap = FractalHeap(reader, address)
    h, g = heap.header, heap.geometry
    for hid, data in live.items():
        assert heap.get(hid) == data
    dblocks, holes = {}, []                        # block offset -> size; (entry offset, row)
    if h.root_rows == 0 and h.root_address is not None:
        dblocks[0] = h.start_block_size
    stack = [(h.root_address, h.root_rows, 0)] if h.root_rows else []
    while stack:
        addr, nrows, off = stack.pop()
        ib = heap.read_indirect(addr, nrows, off)
        for entry, a in enumerate([e.address for e in ib.direct] + list(ib.indirect)):
            row = entry // h.width
            eoff = fh.entry_offset(h, g, off, entry)
            if a is None:
                holes.append((eoff, row))
            elif row < g.max_direct_rows:
                dblocks[eoff] = g.row_block_size[row]
            else:
                stack.append((a, fh.rows_for_block(g, g.row_block_size[row]), eoff))
    singles, ranges = [], []
    if h.free_space_manager_address is not None:
        sl = manager(reader, h.free_space_manager_address)[1]
        for s in sl.sets:
            for sec in s.sections:
                (singles if sec.type == fsm.HEAP_SINGLE else ranges).append((sec.offset, s.size, sec.indirect))
    pieces = sorted([(o, n) for o, n, _ in singles] + [
        (d.offset, d.length) for d in (fh.decode_id(i, g, "id") for i in live) if isinstance(d, fh.ManagedId)])
    cursor = {off: off + g.dblock_overhead for off in dblocks}
    for o, n in pieces:
        block = max(b for b in dblocks if b <= o)
        assert o == cursor[block], f"gap or overlap at heap offset {o} (block {block} at {cursor[block]})"
        cursor[block] = o + n
    assert all(cursor[b] == b + dblocks[b] for b in dblocks), "a direct block's bytes are not all accounted"
    covered = set()
    for _, _, i in ranges:
        for k in range(i.num_blocks):
            e = i.start_row * h.width + i.start_col + k
            covered.add(fh.entry_offset(h, g, i.block_offset, e))
    below = {o for o, _ in holes if o < h.iterator_offset}
    assert covered == below, "free ranges differ from the unallocated entries before the iterator"
    rfree = fh.row_free_space(g)
    assert h.free_space == sum(n for _, n, _ in singles) + sum(rfree[r] for _, r in holes)


def twin(path, objs, params=fh.LINK_HEAP):
    """A fresh heap in `path` grown by the engine with `objs` (one transaction per object)."""
    with H5File.open(str(path), writable=True) as hf:
        txn = hf.store.begin()
        addr = fw.create(txn, params)
        txn.commit()
        ids = []
        for o in objs:
            txn = hf.store.begin()
            ids.append(fw.insert(txn, addr, o))
            txn.commit()
    return addr, ids


@pytest.mark.parametrize("n,target", [(20, 0), (1000, 0), (300, 100), (200, 550), (3000, 30)])
def test_heap_grows_as_libhdf5_grows_it(tmp_path, n, target):
    p = tmp_path / "g.h5"
    dense_group(p, n, target)
    theirs, objs, _ = group_heap(p)
    addr, ids = twin(p, objs)
    with H5File.open(str(p)) as hf:
        assert summary(hf.reader, addr) == summary(hf.reader, theirs)
        audit(hf.reader, addr, dict(zip(ids, objs)))
    assert check(str(p)).sound


def test_attribute_heap_grows_as_libhdf5_grows_it(tmp_path):
    """Objects of 1 to 4 KiB: blocks skipped, free ranges in child indirect blocks."""
    p = tmp_path / "a.h5"
    with h5py.File(p, "w", libver="latest") as f:
        gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
        gcpl.set_attr_phase_change(0, 0)             # dense from the first attribute: in creation order
        gcpl.set_attr_creation_order(h5py.h5p.CRT_ORDER_TRACKED | h5py.h5p.CRT_ORDER_INDEXED)
        g = h5py.Group(h5py.h5g.create(f.id, b"d", gcpl=gcpl))
        rng = np.random.default_rng(5)
        for i, n in enumerate(rng.integers(1, 4000, 60)):
            g.attrs[f"a{i}"] = np.zeros(int(n), np.uint8)
    theirs, objs, _ = group_heap(p, "d", attrs=True)
    addr, ids = twin(p, objs, fh.ATTRIBUTE_HEAP)
    with H5File.open(str(p)) as hf:
        ours, libs = summary(hf.reader, addr), summary(hf.reader, theirs)
        assert ours == libs
        assert any(sec.type == fsm.HEAP_FIRST_ROW for _, secs in libs[1][5] for sec in secs)
        audit(hf.reader, addr, dict(zip(ids, objs)))


def test_libhdf5_edits_a_heap_after_ours(tmp_path):
    """Objects the engine put in a group's heap survive libhdf5 adding and removing links in
    the same heap, which allocates from the free-space manager the engine wrote (single sections
    and the free range a large object made the heap skip)."""
    p = tmp_path / "g.h5"
    dense_group(p, 10)                                    # dense, still one root direct block
    heap_addr, objs, link_ids = group_heap(p)
    rng = np.random.default_rng(1)
    sizes = {"big": 3000, "tiny": 3, "same": 700, "other": 1500, "max": 4000, "huge": 6000, "small": 90}
    mine = {k: bytes(rng.integers(0, 256, n, dtype=np.uint8)) for k, n in sizes.items()}
    with H5File.open(str(p), writable=True) as hf:
        with hf.store.transaction() as txn, fw.HeapWriter(txn, heap_addr) as w:
            ids = {k: w.insert(o) for k, o in mine.items()}
        txn.commit()
        libs = summary(hf.reader, heap_addr)
    assert any(sec.type == fsm.HEAP_FIRST_ROW for _, secs in libs[1][5] for sec in secs)
    live = {ids[k]: mine[k] for k in mine}
    with H5File.open(str(p), writable=True) as hf:
        with hf.store.transaction() as txn, fw.HeapWriter(txn, heap_addr) as w:
            for k in ("tiny", "huge", "small", "big"):   # "big" alone in its block: the block kept empty
                w.remove(ids[k])
                del live[ids[k]]
            assert w.replace(ids["same"], b"r" * 700) == ids["same"]      # same size: in place
            live[ids["same"]] = b"r" * 700
            del live[ids["other"]]
            live[w.replace(ids["other"], b"s" * 10)] = b"s" * 10           # other size: a new object
        txn.commit()
    with H5File.open(str(p)) as hf:
        audit(hf.reader, heap_addr, {**live, **dict(zip(link_ids, objs))})
        assert (4096 - 21) in [size for size, _ in summary(hf.reader, heap_addr)[1][5]]
    assert check(str(p)).sound
    with h5py.File(p, "r+") as f:
        g = f["g"]
        for i in range(300):
            g[f"new{i}"] = h5py.SoftLink("/" + "n" * (i % 90 + 1))
        for i in range(0, 10, 3):
            del g[f"grp_{i:05d}"]
    _, objs2, link_ids2 = group_heap(p)
    with H5File.open(str(p)) as hf:
        audit(hf.reader, heap_addr, {**live, **dict(zip(link_ids2, objs2))})
    with h5py.File(p, "r") as f:
        assert len(f["g"]) == 10 - 4 + 300
        assert f["g"].get("new299", getlink=True).path == "/" + "n" * 30
    assert check(str(p)).sound


def test_emptied_root_block_empties_the_heap(tmp_path):
    p = tmp_path / "e.h5"
    h5py.File(p, "w", libver="latest").close()
    with H5File.open(str(p), writable=True) as hf:
        txn = hf.store.begin()
        addr = fw.create(txn)
        a, b = fw.insert(txn, addr, b"a" * 40), fw.insert(txn, addr, b"b" * 30)
        txn.commit()
        txn = hf.store.begin()
        fw.remove(txn, addr, a)
        txn.commit()
        with H5File.open(str(p)) as ro:
            audit(ro.reader, addr, {b: b"b" * 30})
        txn = hf.store.begin()
        fw.remove(txn, addr, b)
        txn.commit()
    with H5File.open(str(p)) as hf:
        h = FractalHeap(hf.reader, addr).header
        assert (h.root_address, h.managed_size, h.managed_alloc_size, h.free_space, h.managed_count) == (None, 0, 0, 0, 0)
        assert h.free_space_manager_address is None
    assert check(str(p)).sound


@pytest.mark.parametrize("sizes", [(8, 8), (4, 4), (2, 4)])
def test_huge_objects_indexed_as_libhdf5_indexes_them(tmp_path, sizes):
    """A soft link target over 4 KiB makes libhdf5 store a huge object; ours go the same way
    (the same B-tree type, node size and record size; IDs direct when they hold address and
    length)."""
    p = tmp_path / "h.h5"
    dense_group(p, 9, target=700, sizes=sizes)      # targets up to 4900 bytes: huge ones
    theirs, objs, _ = group_heap(p)
    addr, ids = twin(p, objs)
    with H5File.open(str(p)) as hf:
        ours, libs = (FractalHeap(hf.reader, a).header for a in (addr, theirs))
        assert ours.huge_count == libs.huge_count > 0
        assert (ours.huge_size, ours.next_huge_id) == (libs.huge_size, libs.next_huge_id)
        bo, bl = (read_header(hf.reader, h.huge_btree_address) for h in (ours, libs))
        assert (bo.type, bo.node_size, bo.record_size, bo.split_percent, bo.merge_percent, bo.total_records) == \
            (bl.type, bl.node_size, bl.record_size, bl.split_percent, bl.merge_percent, bl.total_records)
        audit(hf.reader, addr, dict(zip(ids, objs)))
    with H5File.open(str(p), writable=True) as hf:
        with hf.store.transaction() as txn, fw.HeapWriter(txn, addr) as w:
            for i, o in zip(ids, objs):
                if len(o) > 4096:
                    w.remove(i)
        txn.commit()
    with H5File.open(str(p)) as hf:
        h = FractalHeap(hf.reader, addr).header
        assert (h.huge_count, h.huge_size, h.huge_btree_address, h.next_huge_id) == (0, 0, None, 0)
    assert check(str(p)).sound


def test_filtered_heap_refused(tmp_path):
    p = tmp_path / "f.h5"
    h5py.File(p, "w", libver="latest").close()
    with H5File.open(str(p), writable=True) as hf:
        txn = hf.store.begin()
        w = Writer(hf.reader.sizes)
        filter_pipeline.encode(w, filter_pipeline.FilterPipeline(
            (filter_pipeline.FilterSpec(1, 0, "", (6,)),)))
        info = w.getvalue()
        addr = txn.allocate(fh.header_size(hf.reader.sizes, len(info)))
        h = fh.new_header(addr, fh.LINK_HEAP)
        h = fh.FractalHeapHeader(**{**{k: getattr(h, k) for k in h.__dataclass_fields__},
                                    "filter_len": len(info), "filter_info": info})
        txn.write_new(addr, fh.encode_header(h, hf.reader.sizes))
        with pytest.raises(Unsupported, match="I/O filters"):
            fw.insert(txn, addr, b"x" * 100)


edits = st.lists(st.tuples(st.sampled_from(["insert", "insert", "insert", "remove", "replace", "commit"]),
                           st.integers(1, 5000), st.integers(0, 1000)), min_size=1, max_size=60)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=edits)
@example(ops=[("insert", 4097, 0), ("remove", 1, 0)])           # a huge object inserted and removed in one writer
def test_random_edits(tmp_path_factory, ops):
    """Random inserts, removals and replacements of objects from 1 byte to past the huge limit,
    committed at random points: every object reads back and the free space stays exact."""
    p = tmp_path_factory.mktemp("rnd") / "r.h5"
    h5py.File(p, "w", libver="latest").close()
    live: dict[bytes, bytes] = {}
    with H5File.open(str(p), writable=True) as hf:
        txn = hf.store.begin()
        addr = fw.create(txn, fh.ATTRIBUTE_HEAP)
        w = fw.HeapWriter(txn, addr)
        for k, (op, n, pick) in enumerate(ops):
            data = bytes([k % 251]) * n
            if op == "insert" or (op in ("remove", "replace") and not live):
                live[w.insert(data)] = data
            elif op == "commit":
                w.close()
                txn.commit()
                with H5File.open(str(p)) as ro:
                    audit(ro.reader, addr, live)
                txn = hf.store.begin()
                w = fw.HeapWriter(txn, addr)
            else:
                hid = sorted(live)[pick % len(live)]
                assert w.get(hid) == live[hid]
                old = live.pop(hid)
                if op == "remove":
                    w.remove(hid)
                else:
                    data = data if pick % 2 else bytes(reversed(old))
                    live[w.replace(hid, data)] = data
        w.close()
        txn.commit()
    with H5File.open(str(p)) as ro:
        audit(ro.reader, addr, live)
    assert check(str(p)).sound


def test_delete_frees_every_block(tmp_path):
    """A deleted heap leaves no byte in use (h5fs check: the freed extents are gaps no
    structure claims) while the rest of the file stays whole."""
    from h5fs.storage.space_walk import used_extents
    p = tmp_path / "d.h5"
    dense_group(p, 9, target=700)                          # a huge object too
    with h5py.File(p, "r") as f:
        before = {k: f["g"].get(k, getlink=True).path for k in f["g"]}
    with H5File.open(str(p), writable=True) as hf:
        txn = hf.store.begin()
        addr = fw.create(txn)
        for n in (10, 600, 3000, 5000, 20):
            fw.insert(txn, addr, b"q" * n)
        txn.commit()
        with H5File.open(str(p)) as ro:
            heap = FractalHeap(ro.reader, addr)
            mine = list(heap.block_extents())
            assert heap.header.huge_btree_address is not None and heap.header.free_space_manager_address is not None
        txn = hf.store.begin()
        fw.delete(txn, addr)
        freed = sorted(txn.freed)
        txn.commit()
    assert set(mine) <= set(freed)
    assert sum(n for _, n in freed) > sum(n for _, n in mine)        # + header, manager, huge object, B-tree
    with H5File.open(str(p)) as hf:
        used = used_extents(hf)
    for a, n in freed:
        assert not any(u.address < a + n and a < u.address + u.size for u in used)
    with h5py.File(p, "r") as f:
        assert {k: f["g"].get(k, getlink=True).path for k in f["g"]} == before
    assert check(str(p)).sound


@pytest.mark.parametrize("step", [5, 2])
def test_removal_frees_as_libhdf5_frees(tmp_path, step):
    """libhdf5 deleting every `step`-th link of a dense group and the engine removing the same
    heap objects from a copy leave equal heaps (no block emptied: both keep the same blocks)."""
    import shutil
    p, q = tmp_path / "a.h5", tmp_path / "b.h5"
    dense_group(p, 400, target=10)
    shutil.copy(p, q)
    names = [f"l{i}" for i in range(0, 400, step)]
    with H5File.open(str(q)) as hf:
        info = hf.get(obj_address(q, "g"), "/g").message(M.LINK_INFO)
        heap = FractalHeap(hf.reader, info.heap_address)
        by_name = {link_name(heap.get(r.heap_id)): r.heap_id
                   for r in iterate(hf.reader, info.name_index_address, btree_v2.decode_link_name)}
    with h5py.File(p, "r+") as f:
        for n in names:
            del f["g"][n]
    with H5File.open(str(q), writable=True) as hf:
        with hf.store.transaction() as txn, fw.HeapWriter(txn, info.heap_address) as w:
            for n in names:
                w.remove(by_name[n])
        txn.commit()
    with H5File.open(str(p)) as a, H5File.open(str(q)) as b:
        assert summary(b.reader, info.heap_address) == summary(a.reader, info.heap_address)
