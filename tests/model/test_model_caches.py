"""Model objects are handles over the file's caches: files written by h5py, changed on disk by h5py
in place (addresses kept), and read by h5fs before and after `H5File.invalidate`; the two caches
(metadata, chunks) on their own: budgets, pinning, invalidation, decodes in flight."""

from __future__ import annotations

import inspect
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from write_support import verify_file

h5py = pytest.importorskip("h5py")

from h5fs.errors import NotFound  # noqa: E402
from h5fs.model.attributes import Attribute  # noqa: E402
from h5fs.model.dataset import Dataset, MaterializedView  # noqa: E402
from h5fs.model.file import H5File  # noqa: E402
from h5fs.model.group import Group  # noqa: E402
from h5fs.model.objects import H5Object, NamedDatatype, derived  # noqa: E402
from h5fs.model.tree_edit import TreeEditor  # noqa: E402
from h5fs.storage.chunk_cache import ChunkCache  # noqa: E402
from h5fs.storage.metadata_cache import MetadataCache  # noqa: E402
from h5fs.storage.object_header.reader import HEADER  # noqa: E402
from h5fs.storage.sources import RawSource  # noqa: E402

LIBVERS = ("earliest", "latest")
IDENTITY = {"file", "address", "path", "generation"}


def header_extent(obj) -> tuple[int, int, int]:
    """(address, bytes, chunks) of an h5py object's header, as libhdf5 reports them."""
    info = h5py.h5o.get_info(obj.id)
    return info.addr, info.hdr.space.total, info.hdr.nchunks


def attr_values(obj) -> dict:
    return {a.name: a.value for a in obj.attributes()}


def assert_attrs_equal(ours: dict, theirs) -> None:
    assert sorted(ours) == sorted(theirs.keys())
    for name, value in ours.items():
        assert np.array_equal(value, theirs[name]), name


# -- 1. handles hold nothing but identity ------------------------------------------------------

def test_handle_classes_have_slots_only():
    """A handle is its identity (and, privately, a reference into the file's cache): no
    per-instance dict, nothing a caller could hang state on."""
    for cls in (H5Object, Group, Dataset, NamedDatatype):
        slots = {s for c in cls.__mro__ for s in getattr(c, "__slots__", ())}
        assert IDENTITY <= slots and all(s.startswith("_") for s in slots - IDENTITY), cls
        assert "__dict__" not in dir(cls), cls


def test_two_handles_share_one_cached_state(tmp_path):
    path = tmp_path / "f.h5"
    with h5py.File(path, "w", libver="latest") as f:
        g = f.create_group("g")
        g.attrs["a"] = np.arange(3)
        g["soft"] = h5py.SoftLink("/d")
        d = f.create_dataset("d", data=np.arange(20.0), chunks=(5,))
        d.attrs["unit"] = "m"
        f["t"] = np.dtype("<i2")
    with H5File.open(str(path)) as hf:
        for name, cls in (("g", Group), ("d", Dataset), ("t", NamedDatatype)):
            addr = hf.root.link(name).address
            one, two = hf.get(addr, "/" + name), hf.get(addr, "/" + name)
            assert one is not two and type(one) is type(two) is cls
            assert not hasattr(one, "__dict__")
            with pytest.raises(AttributeError):
                one.extra = 1
            assert one.header is two.header
            assert one.attributes() == two.attributes()
            for a, b in zip(one.attributes(), two.attributes()):
                assert a is b and a.value is b.value
            assert one.facts() == two.facts()
        g1, g2 = hf.resolve("/g"), hf.resolve("/g")
        assert g1.links() is g2.links()
        d1, d2 = hf.resolve("/d"), hf.resolve("/d")
        assert d1.source is d2.source and d1.dtype is d2.dtype
        assert d1.read_array().tolist() == list(range(20))
        # one invalidation, seen by both
        old = d1.header
        hf.invalidate(d1.address)
        assert d1.header is d2.header and d1.header is not old


@pytest.fixture(scope="module")
def many_objects(tmp_path_factory):
    """A file of 2,425 objects (24 groups of 100 datasets), each with attributes, and what h5py
    reports of every one: path -> (kind, attributes, shape)."""
    path = tmp_path_factory.mktemp("many") / "many.h5"
    with h5py.File(path, "w", libver="latest") as f:
        for i in range(24):
            g = f.create_group(f"g{i:02d}")
            g.attrs["index"] = i
            for j in range(100):
                d = g.create_dataset(f"d{j:03d}", data=np.arange(j % 7 + 1, dtype="i2") + j)
                d.attrs["j"] = j
                d.attrs["name"] = f"dataset {i}/{j}"
    expected: dict[str, tuple] = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            shape = obj.shape if isinstance(obj, h5py.Dataset) else None
            expected["/" + name] = (type(obj).__name__, dict(obj.attrs), shape)
        f.visititems(visit)
    return path, expected


def test_walk_with_a_small_metadata_budget(many_objects):
    """Thousands of objects through a 64 KiB metadata cache: it evicts and stays in budget, and
    handles kept across the walk, and new ones, still read what h5py reports."""
    path, expected = many_objects
    with H5File.open(str(path)) as hf:
        hf.meta.budget = 64 * 1024
        handles: list[H5Object] = []
        seen: dict[str, tuple] = {}

        def check(obj: H5Object) -> None:
            kind = "Dataset" if isinstance(obj, Dataset) else "Group"
            seen[obj.path] = (kind, attr_values(obj), obj.shape if isinstance(obj, Dataset) else None)
            assert hf.meta.used <= hf.meta.budget

        def walk(group: Group, prefix: str) -> None:
            for link in group.links():
                obj = hf.get(link.address, prefix + link.name)
                handles.append(obj)
                check(obj)
                if isinstance(obj, Group):
                    walk(obj, obj.path + "/")

        walk(hf.root, "/")
        assert len(hf.meta) < len(handles) // 10   # most of what was read is gone again
        assert sorted(seen) == sorted(expected)
        for p, (kind, attrs, shape) in expected.items():
            assert seen[p][0] == kind and seen[p][2] == shape, p
            assert_attrs_equal(seen[p][1], attrs)
        # read again, long after the cache let these objects go
        for kept in handles[::7]:
            kind, attrs, shape = expected[kept.path]
            for obj in (kept, hf.get(kept.address, kept.path)):
                assert_attrs_equal(attr_values(obj), attrs)
                if shape is not None:
                    assert obj.shape == shape
                    assert obj.read_array().tolist() == (np.arange(shape[0]) + int(attrs["j"])).tolist()
        assert hf.meta.used <= hf.meta.budget


# -- 2. invalidation makes handles read again ------------------------------------------------

def _build_changeable(path, libver: str, maxshape=None) -> None:
    with h5py.File(path, "w", libver=libver) as f:
        g = f.create_group("g")
        g.attrs["a"] = np.arange(4, dtype="<i4")
        g.attrs["s"] = np.bytes_("before")
        g["keep"] = h5py.SoftLink("/d")
        g["drop"] = h5py.SoftLink("/nowhere")
        # filtered (shuffle keeps each chunk's size, so its place): unfiltered chunks are read
        # straight from the file, never through the chunk cache
        d = f.create_dataset("d", data=np.arange(64, dtype="<f8").reshape(8, 8), chunks=(4, 4), maxshape=maxshape,
                             shuffle=True)
        d.attrs["scale"] = 0.5
        f.create_dataset("other", data=np.arange(5))


def _change_in_place(path) -> dict:
    """Change the attribute values, the group's links and the dataset's data with h5py, keeping
    every address (checked: the file does not grow, chunks stay where they were); returns what
    h5py reads afterwards."""
    before = path.stat().st_size
    with h5py.File(path, "r+") as f:
        d = f["d"]
        chunks = [d.id.get_chunk_info(i) for i in range(d.id.get_num_chunks())]
        f["g"].attrs.modify("a", np.arange(4, dtype="<i4") * 10)
        f["g"].attrs.modify("s", np.bytes_("after!"))
        del f["g"]["drop"]
        d[...] = -np.arange(64).reshape(8, 8)
        assert [d.id.get_chunk_info(i) for i in range(d.id.get_num_chunks())] == chunks
    assert path.stat().st_size == before
    with h5py.File(path, "r") as f:
        return {"attrs": dict(f["g"].attrs), "links": sorted(f["g"].keys()), "data": f["d"][...]}


@pytest.mark.parametrize("libver,maxshape", [("earliest", None), ("latest", None), ("latest", (None, 8))])
def test_invalidate_serves_what_h5py_wrote(tmp_path, libver, maxshape):
    path = tmp_path / "f.h5"
    _build_changeable(path, libver, maxshape)
    with h5py.File(path, "r") as f:
        original = {"attrs": dict(f["g"].attrs), "links": sorted(f["g"].keys()), "data": f["d"][...]}
    with H5File.open(str(path)) as hf:
        g, d, other = hf.resolve("/g"), hf.resolve("/d"), hf.resolve("/other")
        assert_attrs_equal(attr_values(g), original["attrs"])
        assert sorted(ln.name for ln in g.links()) == original["links"]
        assert np.array_equal(d.read_array(), original["data"])
        other_header = other.header
        old_source, old_header = d.source, d.header
        assert old_source.owner == (d.address, 0)
        n_chunks = len(hf.chunk_cache)
        assert n_chunks == 4

        changed = _change_in_place(path)
        # the caches still serve what was read: this is what proves they are used
        assert_attrs_equal(attr_values(g), original["attrs"])
        assert sorted(ln.name for ln in g.links()) == original["links"]
        assert np.array_equal(d.read_array(), original["data"])

        hf.invalidate(g.address)
        hf.invalidate(d.address)
        assert hf.generation(d.address) == 1 and hf.generation(other.address) == 0
        assert d.header is not old_header and d.header == hf.get(d.address, "/d").header
        assert other.header is other_header    # other addresses keep their state
        # the old version's chunks are gone, and the new source reads under a new owner
        assert len(hf.chunk_cache) == 0
        assert all(hf.chunk_cache.peek((old_source.owner, c)) is None for c in np.ndindex(2, 2))
        assert d.source is not old_source and d.source.owner == (d.address, 1)
        # a chunk the old version stores late (a decode that was in flight) is never served
        hf.chunk_cache.put((old_source.owner, (0, 0)), old_source.read(0, 4 * 4 * 8))

        for handle_g, handle_d in ((g, d), (hf.get(g.address, "/g"), hf.get(d.address, "/d"))):
            assert_attrs_equal(attr_values(handle_g), changed["attrs"])
            assert sorted(ln.name for ln in handle_g.links()) == changed["links"]
            assert np.array_equal(handle_d.read_array(), changed["data"])


@pytest.mark.parametrize("libver", LIBVERS)
def test_invalidate_range_over_a_header_forgets_it(tmp_path, libver):
    path = tmp_path / "f.h5"
    _build_changeable(path, libver)
    with h5py.File(path, "r") as f:
        g_addr, g_size, _ = header_extent(f["g"])
        original = dict(f["g"].attrs)
    with H5File.open(str(path)) as hf:
        g, other = hf.resolve("/g"), hf.resolve("/other")
        assert g.address == g_addr
        assert_attrs_equal(attr_values(g), original)
        other_header = other.header
        changed = _change_in_place(path)
        hf.invalidate_range(g_addr + 1, g_addr + g_size)   # the header's start left out: no effect
        assert_attrs_equal(attr_values(g), original)
        hf.invalidate_range(g_addr, g_addr + g_size)
        assert_attrs_equal(attr_values(g), changed["attrs"])
        assert sorted(ln.name for ln in g.links()) == changed["links"]
        if not g_addr <= other.address < g_addr + g_size:
            assert other.header is other_header


# -- 3. a handle whose address now holds another kind of object --------------------------------

def _copy_header(path, source: str, target: str) -> int:
    """Copy the one-block header of `source` over the header of `target` (which must be at least
    as long): the object `target` links to becomes a byte copy of `source`. Returns its address."""
    with h5py.File(path, "r") as f:
        src, src_size, src_chunks = header_extent(f[source])
        dst, dst_size, _ = header_extent(f[target])
    assert src_chunks == 1 and src_size <= dst_size
    with open(path, "r+b") as fh:
        fh.seek(src)
        body = fh.read(src_size)
        fh.seek(dst)
        fh.write(body)
    return dst


@pytest.fixture()
def kinds_file(tmp_path):
    path = tmp_path / "kinds.h5"
    with h5py.File(path, "w", libver="latest", track_order=False) as f:
        small = f.create_group("small_group")
        small["s1"] = h5py.SoftLink("/x")
        small["s2"] = h5py.SoftLink("/y/z")
        f.create_dataset("small_ds", data=np.arange(6, dtype="<i4").reshape(2, 3))
        for name in ("big_ds", "big_ds2"):
            big = f.create_dataset(name, data=np.arange(10.0))
            for i in range(6):
                big.attrs[f"attr{i}"] = np.arange(8) + i   # a long header
        big_g = f.create_group("big_group")
        for i in range(6):
            big_g.attrs[f"attr{i}"] = np.arange(8) + i
    return path


def _expected(path, name: str) -> tuple[str, object]:
    with h5py.File(path, "r") as f:
        obj = f[name]
        if isinstance(obj, h5py.Group):
            return "Group", {k: obj.get(k, getlink=True).path for k in obj}
        return "Dataset", obj[...]


@pytest.mark.parametrize("source,target", [("small_group", "big_ds"), ("small_ds", "big_group")])
def test_handle_of_a_gone_kind_raises_not_found(kinds_file, source, target):
    with H5File.open(str(kinds_file)) as hf:
        old = hf.resolve("/" + target)
        old_kind = type(old)
        assert attr_values(old)
        addr = _copy_header(kinds_file, source, target)
        assert old.address == addr
        kind, value = _expected(kinds_file, target)   # h5py now sees the source's kind there
        assert kind == ("Group" if source == "small_group" else "Dataset")
        assert attr_values(old)                        # not invalidated: still served from the cache
        hf.invalidate(addr)
        uses = [old.attributes, old.facts, lambda: old.header, lambda: old.message(1)]
        uses += [old.links] if old_kind is Group else [old.read_array, lambda: old.shape, lambda: old.source]
        for use in uses:
            with pytest.raises(NotFound):
                use()
        new = hf.get(addr, "/" + target)
        assert type(new).__name__ == kind and new.attributes() == []
        if kind == "Group":
            assert {ln.name: ln.target for ln in new.links()} == value
        else:
            assert np.array_equal(new.read_array(), value)


def test_handle_of_the_same_kind_keeps_working(kinds_file):
    with H5File.open(str(kinds_file)) as hf:
        old = hf.resolve("/big_ds2")
        assert old.read_array().tolist() == list(np.arange(10.0))
        addr = _copy_header(kinds_file, "small_ds", "big_ds2")
        _, value = _expected(kinds_file, "big_ds2")
        hf.invalidate(addr)
        assert old.generation == 0 and hf.generation(addr) == 1
        assert old.shape == value.shape == (2, 3)
        assert np.array_equal(old.read_array(), value)
        assert old.attributes() == []
        assert old.facts() == hf.get(addr, "/big_ds2").facts()


# -- 4. the chunk cache ----------------------------------------------------------------------

def assert_holds(cache: ChunkCache, held: dict) -> None:
    """The cache holds exactly `held` (listed least recently used first: peeking in that order
    keeps the order) and counts exactly their bytes."""
    assert len(cache) == len(held)
    assert cache.used == sum(len(v) for v in held.values())
    for key, value in held.items():
        assert cache.peek(key) == value, key


def ckey(owner, i: int):
    """A chunk key: (owner, coordinates)."""
    return (owner, (i,))


def test_chunk_cache_pin_unpin_and_eviction():
    cache = ChunkCache(budget=100)
    a, b, c, d, e = (bytes([i]) * 40 for i in range(5))
    assert cache.get(ckey("x", 0), lambda: a) == a
    assert cache.pin(ckey("x", 0)) and cache.is_pinned(ckey("x", 0))
    assert cache.pin(ckey("x", 0))                 # pinning twice is harmless
    assert not cache.pin(ckey("x", 9))             # nothing to pin
    cache.get(ckey("x", 1), lambda: b)
    cache.get(ckey("x", 2), lambda: c)             # 120 bytes: the oldest unpinned entry goes
    assert_holds(cache, {ckey("x", 2): c, ckey("x", 0): a})
    cache.get(ckey("x", 3), lambda: d)             # 120 bytes: the pinned one stays
    assert_holds(cache, {ckey("x", 3): d, ckey("x", 0): a})
    cache.unpin(ckey("x", 0))                      # evictable again, as most recently used
    assert not cache.is_pinned(ckey("x", 0))
    cache.get(ckey("x", 4), lambda: e)
    assert_holds(cache, {ckey("x", 0): a, ckey("x", 4): e})
    cache.get(ckey("x", 5), lambda: b)
    assert_holds(cache, {ckey("x", 4): e, ckey("x", 5): b})
    cache.unpin(ckey("x", 9))                      # not pinned: nothing happens
    assert_holds(cache, {ckey("x", 4): e, ckey("x", 5): b})


def test_chunk_cache_pinned_entries_exceed_the_budget():
    cache = ChunkCache(budget=100)
    small, big = b"s" * 30, b"B" * 150
    cache.get(ckey("x", 0), lambda: small)
    cache.put(ckey("x", 1), big, pinned=True)      # held beyond the budget; the rest is evicted
    assert_holds(cache, {ckey("x", 1): big})
    cache.get(ckey("x", 2), lambda: small)         # stored, then evicted at once: over budget
    assert_holds(cache, {ckey("x", 1): big})
    cache.unpin(ckey("x", 1))                      # larger than the budget: evicted
    assert_holds(cache, {})


def test_chunk_cache_put_replaces():
    cache = ChunkCache(budget=100)
    cache.get(ckey("x", 0), lambda: b"a" * 10)
    cache.put(ckey("x", 0), b"b" * 20)
    assert_holds(cache, {ckey("x", 0): b"b" * 20})
    cache.put(ckey("x", 0), b"c" * 30, pinned=True)
    assert cache.is_pinned(ckey("x", 0))
    assert_holds(cache, {ckey("x", 0): b"c" * 30})
    cache.put(ckey("x", 0), b"d" * 5)              # a newer unpinned value replaces the pinned one
    assert not cache.is_pinned(ckey("x", 0))
    assert_holds(cache, {ckey("x", 0): b"d" * 5})
    cache.put(ckey("x", 0), b"e" * 101)            # too large to hold: the old value goes anyway
    assert_holds(cache, {})
    assert cache.get(ckey("x", 0), lambda: b"f" * 3) == b"f" * 3   # a load after put sees no stale value


def test_chunk_cache_invalidation_drops_pinned_entries():
    cache = ChunkCache(budget=1000)
    held = {}
    for owner in ("x", "y"):
        for i in range(3):
            held[ckey(owner, i)] = cache.get(ckey(owner, i), lambda i=i, o=owner: (o + str(i)).encode() * (i + 1))
    cache.pin(ckey("x", 1))
    cache.pin(ckey("y", 2))
    cache.invalidate(ckey("x", 1))
    del held[ckey("x", 1)]
    assert not cache.is_pinned(ckey("x", 1))
    assert_holds(cache, held)
    cache.invalidate(ckey("x", 7))                 # absent: nothing happens
    cache.invalidate_owner("y")
    assert_holds(cache, {ckey("x", 0): held[ckey("x", 0)], ckey("x", 2): held[ckey("x", 2)]})
    assert not cache.is_pinned(ckey("y", 2))
    cache.invalidate_owner("nobody")
    cache.invalidate_owner("x")
    assert_holds(cache, {})


class BlockedLoad:
    """A load that signals when it starts and returns once released (a decode in flight)."""

    def __init__(self, value: bytes):
        self.value, self.started, self.release, self.calls = value, threading.Event(), threading.Event(), 0

    def __call__(self) -> bytes:
        self.calls += 1
        self.started.set()
        assert self.release.wait(10)
        return self.value


def _in_thread(fn) -> tuple[threading.Thread, list]:
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    return t, out


@pytest.mark.parametrize("change", ["invalidate", "invalidate_owner", "put", "put pinned"])
def test_chunk_cache_load_in_flight_invalidated(change):
    """A decode invalidated (or overtaken by put) while in flight is handed to its caller, never
    stored; a reader waiting for it loads again."""
    cache = ChunkCache(budget=1000)
    key = ckey("x", 0)
    cache.get(ckey("x", 1), lambda: b"other")
    first = BlockedLoad(b"old" * 10)
    t1, out1 = _in_thread(lambda: cache.get(key, first))
    assert first.started.wait(10)
    second = BlockedLoad(b"new" * 5)
    second.release.set()
    t2, out2 = _in_thread(lambda: cache.get(key, second))   # waits for the decode in flight
    time.sleep(0.05)
    assert second.calls == 0
    if change == "invalidate":
        cache.invalidate(key)
    elif change == "invalidate_owner":
        cache.invalidate_owner("x")
    else:
        cache.put(key, b"put", pinned=change == "put pinned")
    first.release.set()
    t1.join(10)
    t2.join(10)
    assert out1 == [b"old" * 10]
    if change.startswith("put"):
        assert out2 == [b"put"] and second.calls == 0
        held = {key: b"put"}
    else:
        assert out2 == [b"new" * 5] and second.calls == 1
        held = {key: b"new" * 5}
    if change != "invalidate_owner":
        held[ckey("x", 1)] = b"other"
    assert_holds(cache, held)


def test_chunk_cache_one_decode_for_concurrent_readers():
    cache = ChunkCache(budget=1000)
    load = BlockedLoad(b"v" * 100)
    t1, out1 = _in_thread(lambda: cache.get(ckey("x", 0), load))
    assert load.started.wait(10)
    waiters = [_in_thread(lambda: cache.get(ckey("x", 0), load)) for _ in range(4)]
    time.sleep(0.05)
    load.release.set()
    for t, _ in [(t1, out1), *waiters]:
        t.join(10)
    assert load.calls == 1
    assert all(out == [b"v" * 100] for _, out in [(t1, out1), *waiters])
    assert_holds(cache, {ckey("x", 0): b"v" * 100})


def test_chunk_cache_failed_load_stores_nothing():
    cache = ChunkCache(budget=1000)

    def fail() -> bytes:
        raise OSError("disk")

    with pytest.raises(OSError):
        cache.get(ckey("x", 0), fail)
    assert cache.get(ckey("x", 0), lambda: b"ok") == b"ok"
    assert_holds(cache, {ckey("x", 0): b"ok"})


OPS = st.lists(st.tuples(st.sampled_from(["get", "put", "put pinned", "pin", "unpin", "invalidate",
                                          "invalidate_owner"]),
                         st.sampled_from("xy"), st.integers(0, 4), st.integers(0, 60)), max_size=40)


@settings(max_examples=150, deadline=None, database=None)
@given(OPS)
def test_chunk_cache_accounting_stays_exact(ops):
    """Any sequence of operations: used is the bytes held, unpinned entries fit the budget,
    pinned entries stay until unpinned or dropped, what was just stored is what is served."""
    cache = ChunkCache(budget=100)
    keys = [ckey(o, i) for o in "xy" for i in range(5)]
    pinned: set = set()
    for op, owner, i, size in ops:
        key, value = ckey(owner, i), bytes([i + 1]) * size
        if op == "get":
            got = cache.get(key, lambda value=value: value)
            assert got == value or key in pinned or cache.peek(key) == got
        elif op.startswith("put"):
            cache.put(key, value, pinned=op == "put pinned")
            (pinned.add if op == "put pinned" else pinned.discard)(key)
            # an unpinned value is kept unless it does not fit beside the pinned ones
            assert cache.peek(key) == value if key in pinned else cache.peek(key) in (value, None)
            if size > cache.budget and key not in pinned:
                assert cache.peek(key) is None
        elif op == "pin":
            held = cache.peek(key) is not None
            assert cache.pin(key) == held
            if held:
                pinned.add(key)
        elif op == "unpin":
            cache.unpin(key)
            pinned.discard(key)
        elif op == "invalidate":
            cache.invalidate(key)
            pinned.discard(key)
            assert cache.peek(key) is None
        else:
            cache.invalidate_owner(owner)
            pinned -= {x for x in pinned if x[0] == owner}
            assert all(cache.peek(x) is None for x in keys if x[0] == owner)
        held = {x: v for x in keys if (v := cache.peek(x)) is not None}
        assert len(cache) == len(held) and cache.used == sum(map(len, held.values()))
        assert {x for x in keys if cache.is_pinned(x)} == pinned <= held.keys()
        unpinned = sum(len(v) for x, v in held.items() if x not in pinned)
        assert cache.used <= cache.budget or unpinned == 0


# -- 5. the metadata cache -------------------------------------------------------------------

def test_metadata_cache_evicts_least_recently_used():
    meta = MetadataCache(budget=100)
    assert meta.get(1, "a", lambda: "A", 40) == "A"
    meta.get(2, "a", lambda: "B", 40)
    assert meta.peek(1, "a") == "A"                       # 1 is now the most recently used
    meta.get(3, "a", lambda: "C", 40)
    assert (meta.peek(2, "a"), meta.used, len(meta)) == (None, 80, 2)
    assert meta.get(1, "a", lambda: "not loaded", 999) == "A"   # a hit: 1 is most recent again
    meta.get(4, "b", lambda: "D", lambda v: 30)            # size from the value
    assert (meta.peek(3, "a"), meta.used) == (None, 70)
    assert meta.get(5, "a", lambda: "huge", 101) == "huge"   # beyond the budget: not kept
    assert (meta.peek(5, "a"), meta.used, len(meta)) == (None, 70, 2)


def test_metadata_cache_invalidate_drops_every_kind_at_the_address():
    meta = MetadataCache()
    for kind, size in (("header", 10), ("class", 1), (12, 7), (("attribute", 0), 3)):
        meta.get(100, kind, lambda kind=kind: kind, size)
    meta.get(101, "header", lambda: "next", 5)
    meta.get(99, ("attribute", 0), lambda: "previous", 2)
    meta.invalidate(100)
    assert all(meta.peek(100, kind) is None for kind in ("header", "class", 12, ("attribute", 0)))
    assert (meta.peek(101, "header"), meta.peek(99, ("attribute", 0))) == ("next", "previous")
    assert (meta.used, len(meta)) == (7, 2)
    meta.invalidate(100)                                  # nothing left there: harmless


@settings(max_examples=150, deadline=None, database=None)
@given(st.sets(st.integers(0, 40), max_size=20), st.integers(0, 45), st.integers(0, 45))
def test_metadata_cache_invalidate_range_is_half_open(addresses, start, end):
    meta = MetadataCache()
    for a in addresses:
        meta.get(a, "x", lambda a=a: a, a + 1)
        meta.get(a, ("y", a), lambda a=a: -a, 2)
    meta.invalidate_range(start, end)
    kept = {a for a in addresses if not start <= a < end}
    assert {a for a in addresses if meta.peek(a, "x") is not None} == kept
    assert {a for a in addresses if meta.peek(a, ("y", a)) is not None} == kept
    assert meta.used == sum(a + 3 for a in kept) and len(meta) == 2 * len(kept)


@settings(max_examples=150, deadline=None, database=None)
@given(st.lists(st.tuples(st.sampled_from(["get", "invalidate", "range"]), st.integers(0, 20), st.integers(0, 24),
                          st.sampled_from(["x", "y"])), max_size=60))
def test_metadata_cache_ranges_after_evictions(ops):
    """Entries come and go (evicted by a small budget, invalidated one address at a time or by
    range): a range invalidation still forgets exactly the addresses inside it."""
    meta = MetadataCache(budget=40)
    keys = [(a, k) for a in range(21) for k in ("x", "y")]

    def present() -> set:
        return {key for key in keys if meta.peek(*key) is not None}

    for op, a, b, kind in ops:
        before = present()
        if op == "get":
            meta.get(a, kind, lambda: (a, kind), 1 + b % 9)
        elif op == "invalidate":
            meta.invalidate(a)
            assert present() == {key for key in before if key[0] != a}
        else:
            meta.invalidate_range(a, b)
            assert present() == {key for key in before if not a <= key[0] < b}
        assert meta.used == sum(meta._items[key][1] for key in meta._items)


def test_file_invalidate_forgets_everything_derived_at_an_address(tmp_path):
    """Header, decoded messages, link and attribute tables, attribute values, facts, source:
    derived anew after `H5File.invalidate`; another object keeps its own."""
    path = tmp_path / "f.h5"
    _build_changeable(path, "latest")
    with H5File.open(str(path)) as hf:
        g, d, other = hf.resolve("/g"), hf.resolve("/d"), hf.resolve("/other")

        def state(obj: H5Object) -> list:
            out = [obj.header, obj.message(1), obj._attributes, obj._facts]   # 1: the dataspace message
            out += [a.value for a in obj.attributes()]
            out += [obj._links] if isinstance(obj, Group) else [obj.source, obj.dtype, obj._view_kind]
            return out

        before = {obj.path: state(obj) for obj in (g, d, other)}
        assert all(x is y for x, y in zip(state(g), before["/g"]))   # cached: the same objects
        used = hf.meta.used
        hf.invalidate(g.address)
        hf.invalidate(d.address)
        assert hf.meta.used < used
        for obj in (g, d):
            again = state(obj)
            # (a dtype NumPy keeps one instance of, or None, may be the same object again)
            renewed = [x is not y for x, y in zip(again, before[obj.path]) if not isinstance(x, (np.dtype, type(None)))]
            assert all(renewed), obj.path
            assert [comparable(x) for x in again] == [comparable(x) for x in before[obj.path]]
        assert all(x is y for x, y in zip(state(other), before["/other"]))


# -- 6. every cached property after invalidation equals a fresh file's ---------------------------

def properties(obj: H5Object) -> list[str]:
    """The names of every property and `derived` value of the object's class."""
    names = {name for cls in type(obj).__mro__ for name, attr in vars(cls).items()
             if isinstance(attr, (property, derived))}
    return sorted(names)


def comparable(value):
    """A value with the same meaning that `==` compares (sources and views by the bytes they serve)."""
    assert not inspect.ismethod(value) and not inspect.isfunction(value)
    if isinstance(value, RawSource):
        return type(value).__name__, value.size, value.read(0, value.size)
    if isinstance(value, MaterializedView):
        return ("materialized", value.read_raw(0, value.raw_size), value.npy_dtype,
                value.read_npy_body(0, value.npy_body_size))
    if isinstance(value, Attribute):
        return value.name, value.index, value.msg, comparable(value.value)
    if isinstance(value, np.ndarray):
        return value.dtype, value.shape, value.tolist()
    if isinstance(value, (tuple, list)):
        return tuple(comparable(v) for v in value)
    if isinstance(value, dict):
        return {key: comparable(v) for key, v in value.items()}
    return value


def read_property(obj: H5Object, name: str):
    return comparable(getattr(obj, name))


@pytest.mark.parametrize("libver", LIBVERS)
def test_derived_values_after_invalidation_match_a_fresh_file(tmp_path, libver):
    path = tmp_path / "f.h5"
    with h5py.File(path, "w", libver=libver) as f:
        f.attrs["root"] = np.arange(3, dtype="<i4")
        g = f.create_group("g")
        g.attrs["a"] = np.float64(1.5)
        g["soft"] = h5py.SoftLink("/g")
        dense = f.create_group("dense")
        for i in range(20):
            dense.attrs[f"x{i:02d}"] = i
            dense.create_group(f"sub{i:02d}")
        f["t"] = np.dtype([("a", "<i4"), ("b", "<f8")])
        f["t"].attrs["a"] = np.int32(7)
        f.create_dataset("chunked", data=np.arange(60, dtype="<i4").reshape(6, 10), chunks=(3, 4))
        f["chunked"].attrs["a"] = np.arange(2, dtype="<i8")
        f.create_dataset("contiguous", data=np.arange(12.0))
        f["contiguous"].attrs["a"] = np.bytes_("unit")
        compact = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        compact.set_layout(h5py.h5d.COMPACT)
        f.create_dataset("compact", data=np.arange(5, dtype="<i2"), dcpl=compact)
        f.create_dataset("vlen", data=["a", "bb", "ccc"], dtype=h5py.string_dtype())
        f.create_dataset("typed", data=np.zeros(3, "<i4").astype(f["t"].dtype), dtype=f["t"])
        f.create_dataset("empty", shape=(10,), dtype="<f4", chunks=(5,), fillvalue=2.5)
    paths = ["/", "/g", "/dense", "/t", "/chunked", "/contiguous", "/compact", "/vlen", "/typed", "/empty"]
    with H5File.open(str(path)) as hf:
        handles = [hf.resolve(p) for p in paths]
        assert {type(h) for h in handles} == {Group, Dataset, NamedDatatype}
        before = {h.path: {name: read_property(h, name) for name in properties(h)} for h in handles}
        with h5py.File(path, "r+") as f:   # same-size values: every address stays
            f.attrs.modify("root", np.arange(3, dtype="<i4") + 5)
            f["g"].attrs.modify("a", np.float64(-2.5))
            f["t"].attrs.modify("a", np.int32(-7))
            f["chunked"].attrs.modify("a", np.arange(2, dtype="<i8") + 9)
            f["chunked"][...] = -f["chunked"][...]
            f["contiguous"].attrs.modify("a", np.bytes_("UNIT"))
            f["contiguous"][...] = np.arange(12.0) * 3
            f["compact"][...] = np.arange(5, dtype="<i2") * 2
            expected = {p: dict(f[p].attrs) for p in paths}
            expected_data = {p: (f[p].asstr() if h5py.check_string_dtype(f[p].dtype) else f[p])[...]
                             for p in paths if isinstance(f[p], h5py.Dataset)}
        for h in handles:
            hf.invalidate(h.address)
        after = {h.path: {name: read_property(h, name) for name in properties(h)} for h in handles}
        with H5File.open(str(path)) as fresh:
            for h in handles:
                for new in (fresh.resolve(h.path), hf.get(h.address, h.path)):
                    assert type(new) is type(h)
                    assert after[h.path] == {name: read_property(new, name) for name in properties(new)}, h.path
                assert_attrs_equal(attr_values(h), expected[h.path])
                if h.path in expected_data:
                    assert np.array_equal(h.read_array(), expected_data[h.path]), h.path
        changed = {p for p in paths if before[p] != after[p]}
        assert changed == {"/", "/g", "/t", "/chunked", "/contiguous", "/compact"}
        names = {p: set(after[p]) for p in paths}
        assert {"header", "_attributes", "_facts", "dense_attributes"} <= names["/t"]
        assert {"_links"} <= names["/g"] and {"dtype", "source", "_view_kind"} <= names["/vlen"]


def test_attribute_from_before_an_invalidation_does_not_poison_the_new_table(tmp_path):
    path = tmp_path / "f.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.create_group("g").attrs["a"] = np.arange(4, dtype="<i4")
    with H5File.open(str(path)) as hf:
        g = hf.resolve("/g")
        old = g.attributes()[0]                  # the table is cached, the value not read yet
        with h5py.File(path, "r+") as f:
            f["g"].attrs.modify("a", np.arange(4, dtype="<i4") * 10)   # same size: in place
            want = f["g"].attrs["a"]
        hf.invalidate(g.address)
        assert np.array_equal(old.value, np.arange(4))   # the old attribute keeps its own message
        assert np.array_equal(hf.resolve("/g").attributes()[0].value, want)


def test_handle_whose_state_was_evicted_reads_again_after_invalidation(tmp_path):
    path = tmp_path / "f.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.create_group("g").attrs["a"] = np.arange(4, dtype="<i4")
        for i in range(50):
            f.create_group(f"other{i}").attrs["x"] = i
    with H5File.open(str(path)) as hf:
        hf.meta.budget = 4096
        g = hf.resolve("/g")
        g.attributes()
        for i in range(50):                      # evicts g's state from the cache; g still holds it
            hf.resolve(f"/other{i}").attributes()
        with h5py.File(path, "r+") as f:
            f["g"].attrs.modify("a", np.arange(4, dtype="<i4") * 10)
            want = f["g"].attrs["a"]
        hf.invalidate(g.address)
        assert np.array_equal(g.attributes()[0].value, want)


def test_a_value_loaded_across_an_invalidation_is_not_kept():
    """A decoder that read the old bytes while a commit invalidated them must not leave its value
    behind: it is returned to its caller once, then loaded again."""
    cache = MetadataCache()

    def load_while_committing():
        cache.invalidate_range(0, 1000)   # a commit rewrote the block meanwhile
        return "old"

    assert cache.get(100, "node", load_while_committing, 10) == "old"
    assert cache.peek(100, "node") is None
    assert cache.get(100, "node", lambda: "new", 10) == "new"
    assert cache.peek(100, "node") == "new"


def test_a_header_edited_then_freed_in_one_commit_is_not_kept(tmp_path):
    """A commit keeps the headers it decoded once staged (H5File.forget), but never one it
    freed: removing the first of two hard links rewrites the object's link count, removing the
    second frees it (its first bytes zeroed, the rest freed), all in one transaction."""
    path = tmp_path / "f.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f["d"] = np.arange(10)
        f["d2"] = f["d"]
        f["keep"] = np.arange(3)
    with H5File.open(str(path), writable=True) as f:
        ed = TreeEditor(f, None)
        address = f.resolve("/d").address
        with ed._edit() as (txn, touched):
            assert ed._remove_link(txn, touched, f.root, "d") == 1
            assert address in txn.headers          # the count's edit decoded it
            assert ed._remove_link(txn, touched, f.root, "d2") == 0
        assert f.reader.meta.peek(address, HEADER) is None
        edited = f.resolve("/keep").address
        ed.touch(f.resolve("/keep"))   # an edit that frees nothing keeps what it decoded
        assert f.reader.meta.peek(edited, HEADER) is not None
    verify_file(path, h5dump=False)
    with h5py.File(path, "r") as f:
        assert sorted(f) == ["keep"]
