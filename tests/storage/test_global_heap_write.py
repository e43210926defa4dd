"""Global heap writes (h5fs.storage.global_heap) against libhdf5: attribute values replaced
by the engine and by libhdf5 (H5Awrite removes the old object, inserts the new one) in twin files
give the same collections; libhdf5's CWFS choices; new collections (4096 bytes, or sized to fit);
emptied collections freed; libhdf5 inserting into collections the engine made; aborted
transactions; random insert/remove sequences audited."""

from __future__ import annotations

import shutil
import struct

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from h5fs.check import check
from h5fs.errors import CannotWrite, FormatError
from h5fs.format import global_heap as gh
from h5fs.format.codec import Writer
from h5fs.model.file import H5File
from h5fs.storage import global_heap as ghw
from h5fs.storage.global_heap import GlobalHeapReader
from global_heap_support import new_file, rewrite_attribute, commit

SIZES = [(8, 8), (4, 4), (2, 2)]
STR = h5py.string_dtype()


def descriptors(hf: H5File, name: str) -> list[tuple[int, int, int]]:
    """(length, collection address, index) of each element of root attribute `name`."""
    attr = next(a for a in hf.root.attributes() if a.name == name)
    fmt = "<I" + ("Q" if hf.sizes.offset == 8 else "I" if hf.sizes.offset == 4 else "H") + "I"
    return [struct.unpack_from(fmt, attr.msg.data, k * struct.calcsize(fmt)) for k in range(attr.dataspace.count)]


def set_attribute(hf: H5File, txn, name: str, elements: list[tuple[int, gh.HeapID]]) -> None:
    """Point root attribute `name`'s elements at heap objects."""
    w = Writer(hf.sizes)
    for length, hid in elements:
        w.u32(length)
        gh.encode_heap_id(w, hid)
    rewrite_attribute(hf, txn, name, w.getvalue())


def engine_write(hf: H5File, txn, name: str, value: bytes) -> None:
    """What H5Awrite does to a scalar vlen string attribute: the old object removed (when not
    empty: H5T__vlen_disk_delete), the new one inserted (H5T__vlen_disk_write)."""
    (length, addr, index), = descriptors(hf, name)
    if length:
        ghw.remove(txn, addr, index)
    set_attribute(hf, txn, name, [(len(value), ghw.insert(txn, value))])


def collection(hf: H5File, address: int) -> gh.Collection:
    return GlobalHeapReader(hf.reader).collection(address)


def state(path, names) -> dict:
    """Each attribute's descriptors and the records of every collection they name."""
    with H5File.open(str(path)) as hf:
        out = {n: descriptors(hf, n) for n in names}
        for n in names:
            for _, addr, _ in out[n]:
                out[addr] = collection(hf, addr).entries
        return out


def h5py_attrs(path) -> dict:
    with h5py.File(path, "r") as f:
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in f.attrs.items()}


def twin(tmp_path, build, sizes=(8, 8), libver="earliest"):
    a, b = tmp_path / "libhdf5.h5", tmp_path / "engine.h5"
    with new_file(a, sizes, libver) as f:
        build(f)
    shutil.copy(a, b)
    return a, b


def fill(f: h5py.File) -> None:
    for i in range(6):
        f.attrs[f"a{i}"] = f"value {i}" * (i + 1)
    f.create_dataset("d", data=np.array(["one", "two", "three"], dtype=STR))


@pytest.mark.parametrize("libver", ["earliest", "latest"])
@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: f"O{s[0]}")
@pytest.mark.parametrize("edits", [
    [("a2", ["new text!"])],
    [("a5", ["short"])],                          # the highest index: libhdf5's nused goes on
    [("a0", ["p" * 3000]), ("a1", [""]), ("a5", ["q" * 200])],
], ids=["middle", "highest", "several"])
def test_replace_attribute_as_libhdf5(tmp_path, libver, sizes, edits):
    a, b = twin(tmp_path, fill, sizes, libver)
    with h5py.File(a, "r+") as f:
        for name, values in edits:
            f.attrs.get_id(name).write(np.array(values, dtype=STR).reshape(f.attrs.get_id(name).shape))
    with H5File.open(str(b), writable=True) as hf:
        for name, values in edits:     # one open file, as libhdf5's session
            txn = hf.store.begin()
            engine_write(hf, txn, name, values[0].encode())
            commit(hf, txn)
    names = [f"a{i}" for i in range(6)]
    assert state(b, names) == state(a, names)
    assert h5py_attrs(b) == h5py_attrs(a)
    with h5py.File(b, "r") as f:
        assert f["d"][()].tolist() == [b"one", b"two", b"three"]
    assert check(str(b)).sound


@pytest.mark.parametrize("reads", [("first", "second"), ("second", "first")])
def test_cwfs_order_as_libhdf5(tmp_path, reads):
    """Two collections: libhdf5 puts a new object in the one it read last (the list's front)."""
    def build(f):
        f.attrs["first"] = "in collection 1"

    a, b = twin(tmp_path, build)
    for path in (a, b):
        with h5py.File(path, "r+") as f:          # a fresh open lists nothing: a new collection
            f.attrs["second"] = "in collection 2"
            f.attrs["third"] = ""
    with h5py.File(a, "r+") as f:
        for name in reads:
            f.attrs[name]                                 # libhdf5 loads the collection
        f.attrs.get_id("third").write(np.array("where?", dtype=STR))
    with H5File.open(str(b), writable=True) as hf:
        txn = hf.store.begin()
        for name in reads:
            (_, addr, index), = descriptors(hf, name)
            ghw.read(txn, addr, index)
        engine_write(hf, txn, "third", b"where?")
        txn.commit()
    names = ["first", "second", "third"]
    assert state(b, names) == state(a, names)
    with H5File.open(str(b)) as hf:
        assert descriptors(hf, "third")[0][1] == descriptors(hf, reads[-1])[0][1]


def test_large_object_and_emptied_collection(tmp_path):
    """An object larger than a collection gets one sized to fit (H5HG__create); replacing it
    empties that collection, which is freed; the new object goes to a new 4096-byte one."""
    def build(f):
        f.attrs["big"] = "b" * 5000

    a, b = twin(tmp_path, build)
    with H5File.open(str(a)) as hf:
        (_, big, _), = descriptors(hf, "big")
        assert collection(hf, big).size == gh.new_collection_size(gh.object_size(5000, hf.sizes), hf.sizes) == 5032
    with h5py.File(a, "r+") as f:
        f.attrs.get_id("big").write(np.array("small", dtype=STR))
    with H5File.open(str(b), writable=True) as hf:
        txn = hf.store.begin()
        engine_write(hf, txn, "big", b"small")
        assert txn.freed == [(big, 5032)]
        txn.commit()
    with H5File.open(str(a)) as ha, H5File.open(str(b)) as hb:
        (_, ca, _), (_, cb, _) = descriptors(ha, "big")[0], descriptors(hb, "big")[0]
        assert collection(ha, ca).entries == collection(hb, cb).entries
        assert collection(hb, cb).size == 4096
    assert h5py_attrs(b) == {"big": "small"}
    assert check(str(b)).sound


@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: f"O{s[0]}")
def test_new_objects_then_libhdf5_edits(tmp_path, sizes):
    """Objects inserted into existing and new collections read back; libhdf5 reads the file,
    then writes into a collection the engine made; everything reads back after."""
    path = tmp_path / "f.h5"
    words = ["alpha", "", "β", "d" * 600]
    with new_file(path, sizes) as f:
        f.create_dataset("s", data=np.array(words, dtype=STR))
        f.attrs["target"] = "old"
    blobs = [b"", b"x", b"y" * 7, b"z" * 8, b"w" * 9, bytes(range(256)) * 5, b"v" * 5000]
    with H5File.open(str(path), writable=True) as hf:
        txn = hf.store.begin()
        ids = [ghw.insert(txn, blob) for blob in blobs]
        commit(hf, txn)
        (_, addr, index), = descriptors(hf, "target")
        txn = hf.store.begin()
        ghw.remove(txn, addr, index)
        set_attribute(hf, txn, "target", [(1, ids[1])])      # the engine's b"x"
        txn.commit()
    assert len({hid.address for hid in ids}) == 2     # the big one alone in a collection sized to fit
    with H5File.open(str(path)) as hf:
        for hid, blob in zip(ids, blobs):
            assert GlobalHeapReader(hf.reader).get_id(hid) == blob
    with h5py.File(path, "r") as f:
        assert [s.decode() for s in f["s"][()]] == words
        assert f.attrs["target"] == "x"
    assert check(str(path)).sound
    with h5py.File(path, "r+") as f:
        assert f.attrs["target"] == "x"              # libhdf5 loads the engine's collection ...
        f.attrs["more"] = "libhdf5 wrote this"        # ... and puts the new object there
        f.create_dataset("t", data=np.array(["p", "q" * 50], dtype=STR))
    with H5File.open(str(path)) as hf:
        (_, more, index), = descriptors(hf, "more")
        assert (more, index) == (ids[0].address, ids[-2].index + 1)
        for hid, blob in zip(ids, blobs):
            assert GlobalHeapReader(hf.reader).get_id(hid) == blob
    with h5py.File(path, "r") as f:
        assert dict(f.attrs) == {"target": "x", "more": "libhdf5 wrote this"}
        assert [s.decode() for s in f["t"][()]] == ["p", "q" * 50]
    assert check(str(path)).sound


def test_aborted_collection_never_used(tmp_path):
    path = tmp_path / "f.h5"
    with new_file(path) as f:
        f.attrs["a"] = "a"
    with H5File.open(str(path), writable=True) as hf:
        txn = hf.store.begin()
        lost = ghw.insert(txn, b"lost")
        assert ghw.read(txn, lost.address, lost.index) == b"lost"
        txn.abort()
        txn = hf.store.begin()
        kept = ghw.insert(txn, b"kept")
        txn.commit()
        assert kept.index == 1            # a new collection: the aborted one was forgotten
        txn = hf.store.begin()
        again = ghw.insert(txn, b"again")  # committed: reused by the next transaction
        txn.commit()
        assert (again.address, again.index) == (kept.address, 2)
    with H5File.open(str(path)) as hf:
        col = collection(hf, kept.address)
        assert [o.data for o in col.objects.values()] == [b"kept", b"again"]


def test_remove_errors(tmp_path):
    path = tmp_path / "f.h5"
    with new_file(path) as f:
        f.attrs["a"] = "a"
    with H5File.open(str(path), writable=True) as hf:
        (_, addr, index), = descriptors(hf, "a")
        txn = hf.store.begin()
        with pytest.raises(FormatError):
            ghw.remove(txn, addr, index + 1)
        with pytest.raises(FormatError):
            ghw.remove(txn, 8, 1)
        assert txn.empty


def audit(hf: H5File, live: dict[gh.HeapID, bytes]) -> None:
    """Every live object reads back; each collection holding one is laid out as libhdf5 lays
    them out (objects, then the free space), with the free space adding up."""
    heap = GlobalHeapReader(hf.reader)
    for hid, blob in live.items():
        assert heap.get_id(hid) == blob
    for address in {hid.address for hid in live}:
        col = heap.collection(address)
        assert sorted(col.objects) == sorted(h.index for h in live if h.address == address)
        assert all(isinstance(e, gh.HeapObject) for e in col.entries[:-1])
        used = gh.header_size(hf.sizes) + sum(gh.entry_size(o, hf.sizes) for o in col.objects.values())
        assert col.free == col.size - used


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.one_of(st.integers(0, 1500), st.integers(1500, 6000), st.just(-1)),
                         min_size=1, max_size=12), min_size=1, max_size=6),
       st.sampled_from(SIZES), st.randoms(use_true_random=False))
def test_random_inserts_and_removes(tmp_path_factory, batches, sizes, rnd):
    """Transactions of inserts (sizes) and removals (-1: a random live object), some aborted."""
    path = tmp_path_factory.mktemp("gh") / "f.h5"
    with new_file(path, sizes) as f:
        f.attrs["a"] = "a"
    live: dict[gh.HeapID, bytes] = {}
    with H5File.open(str(path), writable=True) as hf:
        for n, batch in enumerate(batches):
            txn = hf.store.begin()
            model = dict(live)
            try:
                for op in batch:
                    if op < 0 and model:
                        hid = rnd.choice(sorted(model, key=lambda h: (h.address, h.index)))
                        del model[hid]
                        ghw.remove(txn, hid.address, hid.index)
                    elif op >= 0:
                        blob = bytes([n]) * op
                        model[ghw.insert(txn, blob)] = blob
            except CannotWrite:
                assert sizes == (2, 2)              # 64 KiB of 2-byte addresses used up
                txn.abort()
                continue
            if rnd.random() < 0.2:   # what it staged and remembered must never be taken for the file
                txn.abort()
                continue
            txn.commit()
            live = model
            heap = GlobalHeapReader(hf.reader)
            for address, (data, col) in ghw._memory(txn).decoded.items():
                if address + len(data) <= hf.reader.eof and hf.reader.read(address, len(data)) == data:
                    # taken again by the next insert: must be what decoding gives
                    hf.reader.meta.invalidate(address)
                    assert heap.collection(address) == col
            for address, _ in txn.freed:    # only emptied collections are freed
                assert not any(h.address == address for h in live)
    with H5File.open(str(path)) as hf:
        audit(hf, live)
    assert check(str(path)).sound


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("nbytes", [1, 8, 13, 3900, 3968])
def test_with_object_is_the_collection_counted_again(tmp_path, sizes, nbytes):
    """An insert's collection built from the last one's bookkeeping equals the one counted from
    scratch (entries, free bytes, objects) and encodes to bytes that decode to it, for a
    collection libhdf5 wrote, with room left for a free-space object and without."""
    path = tmp_path / "g.h5"
    with new_file(path, sizes) as f:
        f.attrs.create("a", ["x" * 5, "y" * 21, "z"], dtype=STR)
    with H5File.open(str(path)) as hf:
        (_, addr, _), *_ = descriptors(hf, "a")
        col = collection(hf, addr)
    obj = gh.HeapObject(max(col.objects) + 1, 0, bytes(i % 251 for i in range(nbytes)))
    assert col.free >= gh.entry_size(obj, col.sizes)
    built = col.with_object(obj)
    objects = col.entries[:-1] if isinstance(col.entries[-1], gh.FreeSpace) else col.entries
    rest = col.size - gh.header_size(col.sizes) - sum(gh.entry_size(o, col.sizes) for o in objects + (obj,))
    tail = (gh.FreeSpace(rest),) if rest >= gh.object_header_size(col.sizes) else ()
    counted = gh.Collection(col.address, col.size, objects + (obj,) + tail, col.sizes)
    assert built == counted and built.free == counted.free and dict(built.objects) == dict(counted.objects)
    assert gh.decode_collection(gh.encode_collection(built), col.sizes, col.address) == counted


def test_free_space_between_objects_is_not_edited(tmp_path):
    """A collection with a free-space object between two objects (not a layout libhdf5 makes) is
    read, but an insert passes it by (a new collection takes the object) and a removal from it is
    refused: its bookkeeping would not follow."""
    path = tmp_path / "g.h5"
    with new_file(path, (8, 8)) as f:
        f.attrs.create("a", ["x" * 5, "y" * 21, "z"], dtype=STR)
    with H5File.open(str(path)) as hf:
        (_, addr, index), *_ = descriptors(hf, "a")
        col = collection(hf, addr)
    first, *rest, tail = col.entries
    assert isinstance(tail, gh.FreeSpace) and tail.size >= 48
    hole = gh.FreeSpace(32)
    holed = gh.Collection(addr, col.size, (first, hole, *rest, gh.FreeSpace(tail.size - 32)), col.sizes)
    with open(path, "r+b") as raw:
        raw.seek(addr)
        raw.write(gh.encode_collection(holed))
    with h5py.File(path, "r") as f:   # libhdf5 reads it as it is
        assert list(f.attrs["a"]) == ["x" * 5, "y" * 21, "z"]
    with H5File.open(str(path), writable=True) as hf:
        txn = hf.store.begin()
        assert ghw.read(txn, addr, index) == b"x" * 5   # the collection joins the list
        assert ghw.insert(txn, b"new").address != addr
        with pytest.raises(CannotWrite, match="free space between objects"):
            ghw.remove(txn, addr, index)
        txn.abort()


@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: f"O{s[0]}")
def test_insert_many_is_inserts_one_by_one(tmp_path, sizes):
    """`insert_many` (a burst of new groups' string attributes landing together) leaves the
    collections and heap IDs that inserting each in turn leaves (the order libhdf5 fills them
    in: `test_new_objects_then_libhdf5_edits`): into the collections listed first, over into new
    ones, a large object in one sized to fit; libhdf5 reads every object back through an
    attribute pointed at it."""
    a, b = twin(tmp_path, fill, sizes)
    blobs = [f"note {i}".encode() * (1 + i % 5) for i in range(300)] + [b"v" * 5000, b"", b"after"]
    collections = {}
    for path, insert in ((a, lambda txn: [ghw.insert(txn, blob) for blob in blobs]), (b, lambda txn: ghw.insert_many(txn, blobs))):
        with H5File.open(str(path), writable=True) as hf:
            txn = hf.store.begin()
            ids = insert(txn)
            set_attribute(hf, txn, "a3", [(len(blob), hid) for blob, hid in zip(blobs, ids)][-1:])
            commit(hf, txn)
            collections[path] = (ids, {hid.address: collection(hf, hid.address).entries for hid in ids})
    assert collections[a] == collections[b]
    ids = collections[b][0]
    assert len({hid.address for hid in ids}) > 2   # past the collections it had, and one for the large object
    with H5File.open(str(b)) as hf:
        assert [GlobalHeapReader(hf.reader).get_id(hid) for hid in ids] == blobs
    assert h5py_attrs(b)["a3"] == "after"
    assert check(str(b)).sound
