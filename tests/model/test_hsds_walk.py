"""A walk of an HSDS domain through the engine (issue 27): about one request per object (its
record, attributes and a group's links in one answer), attribute values taken from that answer's
JSON only where they equal the binary form byte for byte (the service's own base64 answer and the
local engine's values for the same data written by h5py are the oracles), a group whose answer
does not hold every link still listed whole, and listings that describe their children in
parallel, a bounded number at a time, each object asked for once."""

from __future__ import annotations

import base64
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import h5py
import h5pyd
import numpy as np
import pytest

from h5fs.model import namespace
from h5fs.model.file import H5File
from h5fs.model.hsds import HsdsDomain
from h5fs.model.hsds import domain as domain_module
from h5fs.storage.hsds import HsdsClient, client as client_module, values
from h5fs.storage.hsds.transport import Transport
from hsds_server import PASSWORD, USER
from hsds_support import domain_for, h5pyd_file, hsds  # noqa: F401 - the session fixture

VSTR = h5py.string_dtype()
# name -> value: every kind the engine takes from JSON, with the values that could go wrong
# (extremes, byte orders, NaN and infinities, -0.0, subnormals, text with NULs and non-ASCII)
TAKEN = {
    "i1": np.int8(-128), "u1": np.uint8(255), "i2be": np.array([-2, 3], ">i2"),
    "i8": np.array([-2**63, 2**63 - 1, 0], "<i8"), "u8": np.array([2**64 - 1, 0], "<u8"),
    "u4be": np.array([[1, 2, 3], [4, 5, 2**32 - 1]], ">u4"),
    "f2": np.array([0.1, -65504, np.inf], "<f2"), "f4": np.array([0.1, -0.0, np.nan, np.inf, -np.inf, 1e-45], "<f4"),
    "f4be": np.array([3.4028235e38, -1.5], ">f4"), "f8": np.array([0.1, 5e-324, -np.inf, np.nan, 1 / 3], "<f8"),
    "f8scalar": np.float64(2.5), "nan": np.float32(np.nan), "flag": np.bool_(True), "flags": np.array([True, False]),
    "fixed": np.bytes_(b"fixed"), "fixed_nul": np.array([b"a\0b", b"", b"full"], "S4"),
    "text": "tree ✓", "texts": np.array([["a", "bé"], ["", "γδε"]], dtype=VSTR),
    "zero": np.zeros((0,), "<i4"), "empty_text": "",
}
DEFERRED = {   # kinds the engine leaves to the binary form
    "rec": np.array([(1, 2.5)], dtype=[("a", "<i4"), ("b", "<f8")]),
    "seq": np.empty(2, dtype=h5py.vlen_dtype(np.dtype("<i2"))),
}
DEFERRED["seq"][0], DEFERRED["seq"][1] = np.arange(3, dtype="<i2"), np.arange(1, dtype="<i2")


def engine_for(hsds, domain: str, **options) -> HsdsDomain:
    return HsdsDomain.open(domain, endpoint=hsds.endpoint, username=USER, password=PASSWORD, **options)


def requests(eng: HsdsDomain) -> int:
    return eng.client.stats()["requests"]


def walk(eng: HsdsDomain) -> int:
    """What `find -ls` and `getfattr -R -d` ask of the engine: every entry, its facts and
    attribute values; the objects seen (the root included)."""
    seen = {eng.root_address}
    namespace.facts(eng.root)
    [a.value for a in eng.root.attributes()]

    def visit(group, path: str) -> None:
        for e in namespace.entries(eng, group, path):
            if e.kind not in (namespace.DIR, namespace.RAW, namespace.DTYPE):
                continue
            obj = eng.get(e.address, e.path)
            seen.add(e.address)
            namespace.facts(obj)
            for a in obj.attributes():
                a.value
            if e.kind == namespace.DIR:
                visit(obj, e.path)
    visit(eng.root, "/")
    return len(seen)


@pytest.fixture(scope="module")
def objects(hsds):
    """A domain of 8 groups of 6 scalar datasets, an attribute on each object (as the benchmark's)."""
    domain = hsds.domain("walk_objects.h5")
    with h5pyd_file(hsds, domain, "w") as f:
        for g in range(8):
            grp = f.create_group(f"g{g}")
            grp.attrs["index"] = g
            for d in range(6):
                grp.create_dataset(f"d{d}", data=np.float64(g + d / 10)).attrs["units"] = "m"
    return domain


def test_a_walk_costs_one_request_per_object_then_none(hsds, objects):
    with engine_for(hsds, objects, refresh=60) as eng:
        before = requests(eng)
        count = walk(eng)
        assert count == 1 + 8 + 8 * 6
        # and the domain's scan (allocated sizes), and the tree's links (HsdsDomain.prefetch_tree)
        assert requests(eng) - before <= count + 2
        before = requests(eng)
        walk(eng)                       # within refresh: everything kept
        assert requests(eng) == before


def test_sizes_and_times_from_the_domains_scan_are_each_datasets_verbose_answer(hsds, objects, monkeypatch):
    asked: list[tuple[str, dict]] = []
    real = Transport.request

    def record(self, method, path, params=None, **kw):
        asked.append((path, dict(params or {})))
        return real(self, method, path, params, **kw)
    with HsdsClient(objects, endpoint=hsds.endpoint, username=USER, password=PASSWORD) as client:
        last = client.links(client.links(client.get_domain().root)[-1].id)[-1].id
        deadline = time.monotonic() + 30
        while client.get_dataset(last, verbose=True).raw.get("allocated_size") != 8:   # scanned
            assert time.monotonic() < deadline
            client.flush()
            status, _, body = hsds.request("PUT", "/", {"domain": objects, "rescan": 1})
            assert status in (200, 204), body
            time.sleep(0.2)
        with engine_for(hsds, objects) as eng:
            monkeypatch.setattr(Transport, "request", record)
            sizes = []
            for g in range(8):
                for d in range(6):
                    ds = eng.resolve(f"/g{g}/d{d}")
                    with monkeypatch.context() as m:
                        m.setattr(Transport, "request", real)
                        verbose = client.get_dataset(ds.id, verbose=True)
                    assert ds.storage_size == verbose.raw["allocated_size"]
                    assert ds.mtime == verbose.last_modified and ds.record.raw["num_chunks"] == verbose.raw["num_chunks"]
                    sizes.append(ds.storage_size)
            assert sizes == [0] + [8] * 47      # /g0/d0 holds 0.0, the fill value: h5pyd writes nothing
            assert requests(eng) == 3 + 8 + 8 * 6       # the domain, the root, the scan, each object
            assert [p for p, q in asked if q.get("verbose")] == ["/"]  # no dataset's own verbose request


def test_concurrent_askers_of_one_object_share_one_request(hsds, objects):
    with engine_for(hsds, objects) as eng:
        g = eng.resolve("/g3")          # the root described; g3 not yet
        before = requests(eng)
        barrier = threading.Barrier(8)

        def ask(_):
            barrier.wait()
            return eng.get(g.address, "/g3").record
        with ThreadPoolExecutor(8) as pool:
            found = list(pool.map(ask, range(8)))
        assert all(r is found[0] for r in found) and requests(eng) - before == 1


@pytest.fixture(scope="module")
def attributes(hsds, tmp_path_factory):
    """(the local engine's root, the client, the root's id, the domain) for TAKEN and DEFERRED as
    attributes of the root, written by h5py into a local file and by h5pyd into a domain."""
    path = tmp_path_factory.mktemp("hsds_walk") / "attrs.h5"
    domain = hsds.domain("walk_attributes.h5")
    for lib, opened in ((h5py, h5py.File(path, "w")), (h5pyd, h5pyd_file(hsds, domain, "w"))):
        with opened as f:
            for name, value in {**TAKEN, **DEFERRED}.items():
                if isinstance(value, np.ndarray) and value.dtype.kind == "O" and h5py.check_string_dtype(value.dtype):
                    f.attrs.create(name, value, dtype=lib.string_dtype())
                elif isinstance(value, str):
                    f.attrs.create(name, value, dtype=lib.string_dtype())
                else:
                    f.attrs[name] = value
    local = H5File.open(str(path))
    client = HsdsClient(domain, endpoint=hsds.endpoint, username=USER, password=PASSWORD)
    yield local, client, client.get_domain().root, domain
    client.close()
    local.close()


def test_values_taken_from_json_are_the_binary_form_byte_for_byte(hsds, attributes):
    _, client, root, domain = attributes
    status, _, body = hsds.request("GET", f"/groups/{root}", {"domain": domain, "include_attrs": 1})
    stored = json.loads(body)["attributes"]      # as HSDS holds them: JSON values
    assert status == 200 and set(stored) == set(TAKEN) | set(DEFERRED)
    described = {a.name: a for a in client.describe(root).attributes}
    for name in TAKEN:
        status, _, raw = hsds.request("GET", f"/groups/{root}/attributes/{name}/value",
                                      {"domain": domain, "encoding": "base64"})
        binary = base64.b64decode(json.loads(raw)["value"])     # the service's binary form
        a = described[name]
        assert values.json_bytes(stored[name]["value"], a.dtype, a.shape) == binary, name


def _same(ours: np.ndarray, theirs: np.ndarray, what: str) -> None:
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, what
    if ours.dtype.kind == "O":
        assert ours.tolist() == theirs.tolist(), what
    else:
        assert ours.tobytes() == theirs.tobytes(), what


def test_attribute_values_are_the_binary_paths_and_the_local_engines(hsds, attributes):
    local, client, root, domain = attributes
    described = {a.name: a for a in client.describe(root).attributes}
    for name in TAKEN:
        a = described[name]
        assert not a.deferred and a.value is not None, name
        _same(a.value, client.attribute_value(root, name, a.dtype, a.shape), name)
    assert all(described[name].deferred for name in DEFERRED)
    with engine_for(hsds, domain) as eng:
        handles = eng.root.attributes()
        before = requests(eng)
        taken = {a.name: a.value for a in handles if a.value_in_header}    # the FUSE loop's own: no request
        assert set(taken) == set(TAKEN) and requests(eng) == before
        ours = {a.name: a.value for a in handles}
        assert requests(eng) == before + len(DEFERRED)
        theirs = {a.name: a.value for a in local.root.attributes()}
        assert set(ours) == set(theirs)
        for name in theirs:
            _same(ours[name], theirs[name], name)


@pytest.mark.parametrize("type_json, value", [
    ({"class": "H5T_FLOAT", "base": "H5T_IEEE_F32LE"}, 1e39),    # past float32: HSDS makes it inf
    ({"class": "H5T_INTEGER", "base": "H5T_STD_I32LE"}, 1.5),    # a fraction for an integer
    ({"class": "H5T_STRING", "length": 2, "charSet": "H5T_CSET_ASCII", "strPad": "H5T_STR_NULLPAD"}, "abc"),
])
def test_json_not_taken_exactly_is_read_as_binary(hsds, request, type_json, value):
    domain = domain_for(hsds, request)
    with HsdsClient(domain, endpoint=hsds.endpoint, username=USER, password=PASSWORD) as client:
        root = client.create_domain().root
        status, _, body = hsds.request("PUT", f"/groups/{root}/attributes/a", {"domain": domain},
                                       {"type": type_json, "shape": "H5S_SCALAR", "value": value})
        assert status in (200, 201), body
        a = client.describe(root).attributes[0]
        assert a.deferred and a.value is None
        binary = client.attribute_value(root, "a", a.dtype, a.shape)
        with engine_for(hsds, domain) as eng:
            attr = eng.root.attributes()[0]
            before = requests(eng)
            assert attr.value.tobytes() == binary.tobytes() and requests(eng) == before + 1
            attr.value
            assert requests(eng) == before + 1       # read once


@pytest.fixture(scope="module")
def wide(hsds):
    """A domain whose root holds 1,200 soft links (more than a page of the paged listing)."""
    domain = hsds.domain("walk_wide.h5")
    with HsdsClient(domain, endpoint=hsds.endpoint, username=USER, password=PASSWORD) as client:
        root = client.create_domain().root
    links = {f"l{i:05d}": {"h5path": f"/x{i}"} for i in range(1200)}
    status, _, body = hsds.request("PUT", f"/groups/{root}/links", {"domain": domain}, {"links": links})
    assert status in (200, 201), body
    return domain, sorted(links)


def test_a_wide_group_lists_whole_in_one_request(hsds, wide):
    domain, names = wide
    with engine_for(hsds, domain) as eng:
        before = requests(eng)
        assert [ln.name for ln in eng.root.links()] == names
        assert requests(eng) - before == 1
    with h5pyd_file(hsds, domain) as f:
        assert sorted(f) == names


def test_an_answer_without_every_link_falls_back_to_the_listing(hsds, wide, monkeypatch):
    domain, names = wide
    real = Transport.json_request

    def fewer(self, method, path, params=None, **kw):
        doc = real(self, method, path, params, **kw)
        if (params or {}).get("include_links") and isinstance(doc.get("links"), dict):
            doc["links"] = dict(list(doc["links"].items())[:500])    # a service that caps them
        return doc
    monkeypatch.setattr(Transport, "json_request", fewer)
    with engine_for(hsds, domain) as eng:
        before = requests(eng)
        assert [ln.name for ln in eng.root.links()] == names
        assert eng.root.link("l01199") is not None
        assert requests(eng) - before == 1 + 2       # the description, then two pages


def test_an_answer_too_large_falls_back_to_the_record_and_the_listing(hsds, wide, monkeypatch):
    domain, names = wide
    monkeypatch.setattr(client_module, "DESCRIBE_JSON", 4096)
    with engine_for(hsds, domain) as eng:
        before = requests(eng)
        assert [ln.name for ln in eng.root.links()] == names
        assert requests(eng) - before == 2 + 2       # too large, the record alone, two pages
        assert eng.client.stats()["errors"] == 0


def test_a_root_listing_describes_the_whole_tree_ahead_of_a_walk(hsds, objects):
    """Listing the root (with subgroups) has every object described in the background, in the
    order a walk visits them, from one request for the whole tree's links."""
    asked: list[list[str]] = []
    with engine_for(hsds, objects, refresh=60) as eng:
        real = eng.prefetch

        def prefetch(objects):
            objects = list(objects)
            asked.append([path for _, path in objects])
            return real(objects)
        eng.prefetch = prefetch
        eng.root.links()
        ids = {ln.id for links in eng.client.tree_links(eng.root_id).values() for ln in links}
        assert len(ids) == 8 + 8 * 6
        deadline = time.monotonic() + 10
        while not all(eng.meta.has(i, "record") for i in ids) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert all(eng.meta.has(i, "record") for i in ids)
        # the root's entries first, then each group's entries, in name order
        tree = next(paths for paths in asked if len(paths) == len(ids))
        assert tree == [f"/g{g}" for g in range(8)] + [f"/g{g}/d{d}" for g in range(8) for d in range(6)]
        before = requests(eng)
        assert walk(eng) == 1 + 8 + 8 * 6 and requests(eng) == before     # the walk finds all kept


@pytest.fixture(scope="module")
def many(hsds):
    """A group of 40 datasets."""
    domain = hsds.domain("walk_many.h5")
    with h5pyd_file(hsds, domain, "w") as f:
        for i in range(40):
            f.create_dataset(f"d{i:02d}", data=np.int32(i)).attrs["i"] = i
    return domain


def test_a_listing_describes_its_children_in_parallel_within_the_bound(hsds, many, monkeypatch):
    state = {"now": 0, "peak": 0}
    lock = threading.Lock()
    real = Transport.request

    def slow(self, method, path, params=None, **kw):
        prefetching = threading.current_thread().name.startswith("h5fs-hsds-describe")
        with lock:
            state["now"] += prefetching
            state["peak"] = max(state["peak"], state["now"])
        try:
            time.sleep(0.02)             # a service 20 ms away: serial, 40 children take 0.8 s
            return real(self, method, path, params, **kw)
        finally:
            with lock:
                state["now"] -= prefetching
    monkeypatch.setattr(Transport, "request", slow)
    with engine_for(hsds, many, connections=4) as eng:
        t = time.monotonic()
        before = requests(eng)
        entries = namespace.entries(eng, eng.root, "/")      # a listing, each child's stat numbers
        assert len(entries) == 80 and time.monotonic() - t < 0.6
        assert 2 <= state["peak"] <= 4
        for e in entries:
            if e.kind == namespace.RAW:
                [a.value for a in eng.get(e.address, e.path).attributes()]
        assert requests(eng) - before == 1 + 1 + 40     # the root, the domain's scan, the children


def test_prefetching_stops_at_its_queue_bound(hsds, many, monkeypatch):
    monkeypatch.setattr(domain_module, "PREFETCH_QUEUED", 5)
    with engine_for(hsds, many) as eng:
        links = eng.root.links()

        def kept() -> int:
            return sum(eng.meta.has(eng.id_of(ln.address), "record") for ln in links)
        deadline = time.monotonic() + 10
        while kept() < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert kept() == 5 and requests(eng) == 3 + 5     # the domain, the root, its scan, 5 children
