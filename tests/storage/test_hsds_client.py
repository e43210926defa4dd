"""The HSDS client (storage/hsds) against a real local HSDS (tests/hsds_server.py), h5pyd the
oracle: a domain h5pyd wrote read whole through the client (tree, links, datasets' facts and
values byte for byte, attributes); edits made through the client read back by h5pyd; paging,
names HTTP would mangle, errors and their errnos, credentials as h5pyd finds them, counters,
and what a flush promises (the data survives both nodes killed)."""

from __future__ import annotations

import errno
import os
import signal
import threading
import time

import h5pyd
import numpy as np
import pytest

from h5fs.storage.hsds import HsdsClient, HsdsError, selection, whole
from h5fs.storage.hsds.records import EXTERNAL, HARD, SOFT
from h5fs.storage.hsds.settings import SettingsError, resolve
from hsds_server import ADMIN, ADMIN_PASSWORD, PASSWORD, USER, HSDSServer
from hsds_support import assert_same, domain_for, h5pyd_file, hsds, new_client  # noqa: F401 - fixtures

VSTR = np.dtype("O", metadata={"vlen": str})
GZIP = {"class": "H5Z_FILTER_DEFLATE", "id": 1, "level": 6}
SHUFFLE = {"class": "H5Z_FILTER_SHUFFLE", "id": 2}


def build(f) -> dict[str, np.ndarray]:
    """A domain of most of what HDF5 has, written by h5pyd; the arrays it holds, by path."""
    rng = np.random.default_rng(3)
    data = {"/a/b/c/deep": np.arange(6, dtype="<i2"),
            "/grid": rng.random((300, 70)).astype("<f4"),
            "/ints": rng.integers(-2**40, 2**40, (50, 3, 4)).astype(">i8"),
            "/grow": np.arange(40, dtype="<u2").reshape(10, 4),
            "/names": np.array(["α", "beta", ""], dtype=object)}
    f.attrs["title"] = "tree"
    f.attrs["version"] = np.int32(3)
    c = f.create_group("a/b/c")
    c.attrs["where"] = "deep"
    c.create_dataset("deep", data=data["/a/b/c/deep"])
    ds = f.create_dataset("grid", data=data["/grid"], chunks=(64, 35), compression="gzip", shuffle=True,
                          fillvalue=np.float32(-1.5))
    ds.attrs["units"] = "K"
    ds.attrs["range"] = np.array([0.0, 1.0])
    f.create_dataset("ints", data=data["/ints"], chunks=(10, 3, 4), compression="gzip", compression_opts=9)
    f.create_dataset("grow", data=data["/grow"], maxshape=(None, 4), chunks=(5, 4))
    f.create_dataset("names", data=data["/names"], dtype=h5pyd.string_dtype())
    f["T"] = np.dtype([("x", "<i4"), ("y", "<f8")])
    f["soft"] = h5pyd.SoftLink("/a/b")
    f["dangling"] = h5pyd.SoftLink("/nowhere")
    f["ext"] = h5pyd.ExternalLink("/home/other/file.h5", "/x/y")
    f["a"]["alias"] = f["grid"]                      # a second hard link to one dataset
    return data


@pytest.fixture(scope="module")
def tree(hsds):
    domain = hsds.domain("client_tree.h5")
    with h5pyd_file(hsds, domain, "w") as f:
        data = build(f)
    return domain, data


def walk(client: HsdsClient, gid: str, path: str = "") -> dict[str, object]:
    """path -> Link of everything reachable by hard links from `gid`, each group once."""
    out: dict[str, object] = {}
    for link in client.links(gid):
        p = f"{path}/{link.title}"
        out[p] = link
        if link.kind == HARD and link.id.startswith("g-"):
            out.update(walk(client, link.id, p))
    return out


def test_reads_a_tree_h5pyd_wrote(hsds, new_client, tree):
    domain, data = tree
    client = new_client(domain)
    info = client.get_domain()
    assert info.owner == USER and info.root.startswith("g-") and not info.is_folder
    assert info.created <= info.last_modified and info.limits["max_request_size"] > 0
    found = walk(client, info.root)
    assert sorted(found) == ["/T", "/a", "/a/alias", "/a/b", "/a/b/c", "/a/b/c/deep", "/dangling", "/ext",
                             "/grid", "/grow", "/ints", "/names", "/soft"]
    assert found["/soft"].kind == SOFT and found["/soft"].h5path == "/a/b"
    assert found["/dangling"].h5path == "/nowhere"
    ext = found["/ext"]
    assert (ext.kind, ext.h5domain, ext.h5path) == (EXTERNAL, "/home/other/file.h5", "/x/y")
    assert found["/a/alias"].id == found["/grid"].id and found["/T"].collection == "datatypes"
    assert client.get_link(info.root, "soft") == found["/soft"]
    root = client.get_group(info.root)
    assert (root.link_count, root.attribute_count) == (9, 2)
    with h5pyd_file(hsds, domain) as f:
        for path, want in data.items():
            ds = client.get_dataset(found[path].id)
            theirs = f[path]
            assert ds.shape == theirs.shape and ds.dtype == theirs.dtype, path
            assert (ds.maxshape or ds.shape) == tuple(theirs.maxshape), path     # None: fixed
            got = client.read(ds.id, ds.dtype, whole(ds.shape))
            assert_same(got, theirs[...], path)
            assert_same(got, want, path)
        for path in ("/", "/a/b/c", "/grid"):
            obj_id = info.root if path == "/" else client.resolve(path)
            ours = {a.name: a.value for a in client.attributes(obj_id, with_values=True)}
            theirs = dict(f[path].attrs)
            assert sorted(ours) == sorted(theirs), path
            for name in ours:
                assert_same(ours[name], theirs[name], f"{path} @{name}")
    grid = client.get_dataset(found["/grid"].id)
    assert grid.layout == "H5D_CHUNKED" and grid.chunks == (64, 35) and grid.fill_value == -1.5
    assert [f["class"] for f in grid.filters] == ["H5Z_FILTER_SHUFFLE", "H5Z_FILTER_DEFLATE"]
    assert grid.attribute_count == 2 and grid.maxshape is None
    ints = client.get_dataset(found["/ints"].id)
    assert ints.filters[0]["level"] == 9 and ints.dtype == np.dtype(">i8")
    grow = client.get_dataset(found["/grow"].id)
    assert grow.maxshape == (None, 4) and grow.chunks == (5, 4)
    committed = client.get_datatype(found["/T"].id)
    assert committed.dtype == np.dtype([("x", "<i4"), ("y", "<f8")])


def test_hyperslabs(new_client, tree):
    domain, data = tree
    client = new_client(domain)
    ds = client.get_dataset(client.resolve("/grid"))
    full = data["/grid"]
    rng = np.random.default_rng(11)
    for _ in range(25):
        sel = []
        for n in full.shape:
            a, b = sorted(rng.integers(0, n + 1, 2))
            sel.append(slice(int(a), int(b), int(rng.integers(1, 5))))
        got = client.read(ds.id, ds.dtype, sel)
        assert got.tobytes() == full[tuple(sel)].tobytes() and got.shape == full[tuple(sel)].shape, sel
    raw = client.read_bytes(ds.id, (slice(299, 300), slice(69, 70)), 4)
    assert bytes(raw) == full[299:300, 69:70].tobytes()
    assert client.read(ds.id, ds.dtype, (slice(5, 5), slice(0, 3))).shape == (0, 3)    # no request at all
    assert selection((slice(1, 9, 3), slice(0, 4))) == ("[1:9:3,0:4]", (3, 4))
    with pytest.raises(HsdsError) as e:
        client.read(ds.id, ds.dtype, (slice(0, 301), slice(0, 70)))       # past the end: HSDS's 400
    assert e.value.errno == errno.EINVAL and f"GET /datasets/{ds.id}/value [{domain}]" in str(e.value)
    with pytest.raises(HsdsError, match="explicit bounds"):
        client.read(ds.id, ds.dtype, (slice(None, 3), slice(0, 70)))


def test_edits_show_in_h5pyd(hsds, new_client):
    client = new_client()
    root = client.create_domain().root
    g = client.create_group(root, "g")
    sub = client.create_group(g.id, "sub")
    data = np.arange(20 * 30, dtype="<i4").reshape(20, 30)
    ds = client.create_dataset("<i4", (20, 30), maxshape=(None, 30), chunks=(5, 10), filters=[SHUFFLE, GZIP],
                               fill_value=-7, parent=g.id, name="d")
    assert ds.chunks == (5, 10) and ds.maxshape == (None, 30) and ds.fill_value == -7
    client.write(ds.id, ds.dtype, (slice(2, 7), slice(3, 9)), data[2:7, 3:9])
    client.write(ds.id, ds.dtype, (slice(10, 20, 3), slice(0, 30, 29)), data[10:20:3, 0:30:29])
    client.resize(ds.id, (40, 30))
    client.write(ds.id, ds.dtype, (slice(35, 40), slice(0, 30)), data[:5])
    client.resize(ds.id, (38, 30))
    with pytest.raises(HsdsError) as e:
        client.resize(ds.id, (38, 31))
    assert e.value.errno == errno.EFBIG
    anon = client.create_group()                                           # not linked yet
    client.link_hard(sub.id, "later", anon.id)
    client.link_soft(root, "s", "/g/d")
    client.link_external(root, "x", "/home/else.h5", "/p")
    client.put_attribute(g.id, "text", "héllo")
    client.put_attribute(g.id, "nums", np.array([1.5, np.nan, -0.0], ">f8"))
    client.put_attribute(ds.id, "list", ["a", "bb"])
    client.put_attribute(ds.id, "empty", None, dtype="<u2")
    t = client.create_datatype(np.dtype([("p", "<u1"), ("q", ">i4")]), root, "T")
    typed = client.create_dataset(None, (2,), parent=root, name="typed", type_json=t.id)
    assert typed.type.get("id") == t.id and typed.dtype == t.dtype
    client.flush()
    expected = np.full((38, 30), -7, "<i4")
    expected[2:7, 3:9] = data[2:7, 3:9]
    expected[10:20:3, 0:30:29] = data[10:20:3, 0:30:29]
    expected[35:38] = data[:3]
    with h5pyd_file(hsds, client.domain) as f:
        assert sorted(f) == ["T", "g", "s", "typed", "x"] and sorted(f["g"]) == ["d", "sub"]
        d = f["g/d"]
        assert (d.shape, d.maxshape, d.chunks, d.compression, d.shuffle, d.fillvalue) == (
            (38, 30), (None, 30), (5, 10), "gzip", True, -7)
        np.testing.assert_array_equal(d[...], expected)
        assert "later" in f["g/sub"] and f.get("s", getlink=True).path == "/g/d"
        ext = f.get("x", getlink=True)
        assert (ext.filename, ext.path) == ("/home/else.h5", "/p")
        assert f["g"].attrs["text"] == "héllo"
        assert f["g"].attrs["nums"].tobytes() == np.array([1.5, np.nan, -0.0], ">f8").tobytes()
        assert list(d.attrs["list"]) == ["a", "bb"] and d.attrs["empty"].dtype == np.dtype("<u2")
        assert f["typed"].dtype == np.dtype([("p", "<u1"), ("q", ">i4")])
    # removals (h5pyd 1.0.0 sends none of these itself; the REST answers are what counts)
    client.delete_attribute(g.id, "text")
    client.delete_link(root, "s")
    client.delete_link(root, "s")                      # HSDS: no error for a link not there
    client.delete_dataset(typed.id)
    client.delete_datatype(t.id)
    assert [a.name for a in client.attributes(g.id)] == ["nums"]
    assert [link.title for link in client.links(root)] == ["T", "g", "typed", "x"]   # links outlive objects
    for gone in (lambda: client.get_dataset(typed.id), lambda: client.get_datatype(t.id),
                 lambda: client.get_attribute(g.id, "text"), lambda: client.get_link(root, "s")):
        with pytest.raises(HsdsError) as e:
            gone()
        assert e.value.errno == errno.ENOENT and e.value.status in (404, 410)
    client.delete_group(sub.id)
    with pytest.raises(HsdsError) as e:
        client.get_group(sub.id)
    assert e.value.status == 410
    client.flush()
    with h5pyd_file(hsds, client.domain) as f:
        assert "text" not in f["g"].attrs and "s" not in f


def test_paging_and_names_http_would_mangle(new_client):
    client = new_client()
    root = client.create_domain().root
    names = ["a b", "ü%x", "q?x", "h#x", "..", ".", "x+y", "semi;colon", "tab\tx", "&amp", "", "end"]
    names = [n for n in names if n] + [f"n{i:02d}" for i in range(15)]
    for n in names:
        client.create_group(root, n)
        client.put_attribute(root, n, n)
    client.put_attribute(root, "with/slash", 1)        # attribute names may hold '/', link names not
    with pytest.raises(HsdsError) as e:
        client.create_group(root, "a/b")
    assert e.value.errno == errno.EINVAL and "invalid link title" in str(e.value)
    got = client.links(root, page=4)
    assert [link.title for link in got] == sorted(names)
    assert [link.title for link in client.links(root)] == sorted(names)
    attrs = client.attributes(root, with_values=True, page=5)
    assert [a.name for a in attrs] == sorted(names + ["with/slash"])
    assert all(a.value[()] == a.name for a in attrs if a.name != "with/slash")
    for n in names:
        assert client.get_link(root, n).title == n
        assert client.get_attribute(root, n).value[()] == n
    assert client.get_attribute(root, "with/slash").value[()] == 1
    for n in ("..", ".", "q?x"):
        client.delete_link(root, n)
        client.delete_attribute(root, n)
    assert len(client.links(root, page=3)) == len(names) - 3
    assert len(client.attributes(root)) == len(names) - 2


def test_errors_name_the_request_and_carry_errnos(hsds, new_client):
    client = new_client()
    with pytest.raises(HsdsError) as e:
        client.get_domain()
    assert e.value.errno == errno.ENOENT and f"GET / [{client.domain}]" in str(e.value)
    root = client.create_domain().root
    with pytest.raises(HsdsError) as e:
        client.create_domain()
    assert e.value.errno == errno.EEXIST and e.value.status == 409
    client.put_attribute(root, "x", 1.0)
    client.put_attribute(root, "x", 1.0)                  # the same again: no error
    with pytest.raises(HsdsError) as e:
        client.put_attribute(root, "x", 2.0)
    assert e.value.errno == errno.EEXIST and f"PUT /groups/{root}/attributes/x [{client.domain}]" in str(e.value)
    client.put_attribute(root, "x", 2.0, replace=True)
    assert client.get_attribute(root, "x").value[()] == 2.0
    client.link_soft(root, "s", "/a")
    with pytest.raises(HsdsError) as e:
        client.link_soft(root, "s", "/b")
    assert e.value.errno == errno.EEXIST
    with pytest.raises(HsdsError) as e:
        client.get_group("g-00000000-00000000-0000-000000-000000")
    assert e.value.errno == errno.ENOENT
    with pytest.raises(HsdsError) as e:
        client.get_group("not-an-id")
    assert e.value.errno == errno.EINVAL and "Invalid group id" in str(e.value)
    bad = new_client(client.domain, password="wrong")
    with pytest.raises(HsdsError) as e:
        bad.get_domain()
    assert e.value.errno == errno.EACCES and e.value.status == 401
    # another user's domain: ADMIN's, in a folder of ADMIN's
    hsds.make_folder("/home/admins", owner=ADMIN)
    theirs = new_client("/home/admins/x.h5", username=ADMIN, password=ADMIN_PASSWORD)
    other_root = theirs.create_domain().root
    mine = new_client("/home/admins/x.h5")
    for call in (mine.get_domain, lambda: mine.create_group(other_root, "g")):   # no ACL gives USER either
        with pytest.raises(HsdsError) as e:
            call()
        assert e.value.errno == errno.EPERM and e.value.status == 403
    assert client.stats()["errors"] == 6 and len(client.stats()["last_errors"]) == 5    # the last five kept
    client.delete_domain()
    with pytest.raises(HsdsError) as e:
        client.get_domain()
    assert e.value.errno == errno.ENOENT and e.value.status == 410


def test_counters_are_exact_under_threads(new_client):
    client = new_client()
    root = client.create_domain().root
    ds = client.create_dataset("<f8", (1000,), parent=root, name="d")
    payload = np.arange(1000, dtype="<f8")
    before = client.stats()
    client.write(ds.id, ds.dtype, whole((1000,)), payload)
    after_write = client.stats()
    assert after_write["requests"] == before["requests"] + 1
    assert after_write["bytes_out"] - before["bytes_out"] == 8000
    got = client.read_bytes(ds.id, whole((1000,)), 8)
    after_read = client.stats()
    assert bytes(got) == payload.tobytes() and after_read["bytes_in"] - after_write["bytes_in"] == 8000

    def work():
        for _ in range(25):
            client.get_group(root)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = client.stats()
    assert final["requests"] == after_read["requests"] + 100
    assert final["errors"] == 0 and final["retries"] == 0 and final["endpoint"] == client.settings.endpoint


# settings ------------------------------------------------------------------------------------

def test_settings_as_h5pyd_finds_them(tmp_path, monkeypatch, hsds, request):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    env = {}
    with pytest.raises(SettingsError, match="no HSDS endpoint"):
        resolve(environ=env)
    (home / ".hscfg").write_text(f"# h5pyd's file\nhs_endpoint = {hsds.endpoint}/\nhs_username = {USER}\n"
                                 "hs_password = pa=ss\n\n")
    s = resolve(environ=env)
    assert (s.endpoint, s.username, s.password) == (hsds.endpoint, USER, "pa=ss")   # '=' in a value kept
    s = resolve(environ={"HS_USERNAME": "envuser", "HS_PASSWORD": "envpass"})
    assert (s.username, s.password) == ("envuser", "envpass")
    s = resolve(username="given", password="secret", environ={"HS_USERNAME": "envuser"})
    assert (s.username, s.password) == ("given", "secret") and "secret" not in repr(s)
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    s = resolve(password_file=str(secret), environ={"HS_PASSWORD": "envpass"})
    assert s.password == PASSWORD
    with pytest.raises(SettingsError, match="not both"):
        resolve(password="x", password_file=str(secret))
    with pytest.raises(SettingsError, match="password file"):
        resolve(password_file=str(tmp_path / "missing"))
    with pytest.raises(SettingsError, match="not an http"):
        resolve(endpoint="ftp://host", environ=env)
    with pytest.raises(SettingsError, match="no such file"):
        resolve(config_file=str(tmp_path / "nope.cfg"))
    # a live request with the password file's password (and USER from ~/.hscfg)
    client = HsdsClient(domain_for(hsds, request), password_file=str(secret), environ={})
    try:
        assert client.create_domain().owner == USER
    finally:
        client.close()


# durability ------------------------------------------------------------------------------------

def _kill_nodes(server: HSDSServer) -> None:
    for proc in server.procs.values():
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    server.procs.clear()


def test_flush_means_the_service_holds_the_data(tmp_path):
    """What flush() promises, with both nodes killed (SIGKILL: no shutdown writes) right after
    it and a new server started on the same storage: the data and metadata are there. The
    control, written without a flush and killed at once, is lost (the data node writes an
    object about a second after its last change), so the test can tell the two apart."""
    root_dir = tmp_path / "hsds"
    data = np.random.default_rng(5).random((64, 64))
    server = HSDSServer(root_dir).start()
    try:
        kw = {"endpoint": server.endpoint, "username": USER, "password": PASSWORD}
        with HsdsClient(server.domain("durable.h5"), **kw) as client:
            root = client.create_domain().root
            ds = client.create_dataset("<f8", (64, 64), chunks=(32, 32), parent=root, name="d")
            client.write(ds.id, ds.dtype, whole((64, 64)), data)
            client.put_attribute(root, "note", "kept")
            t = time.monotonic()
            client.flush()
            print(f"\nflush took {time.monotonic() - t:.3f} s")
        with HsdsClient(server.domain("volatile.h5"), **kw) as client:
            root = client.create_domain().root
            ds = client.create_dataset("<f8", (64, 64), chunks=(32, 32), parent=root, name="d")
            t = time.monotonic()
            client.write(ds.id, ds.dtype, whole((64, 64)), data)
            _kill_nodes(server)
            quick = time.monotonic() - t < 0.5
            with pytest.raises(HsdsError) as e:       # HSDS stopped: no answer, EIO
                client.get_group(root)
            assert e.value.errno == errno.EIO and e.value.transient
    finally:
        server.stop()
    server = HSDSServer(root_dir).start()
    try:
        kw = {"endpoint": server.endpoint, "username": USER, "password": PASSWORD}
        with HsdsClient(server.domain("durable.h5"), **kw) as client:
            did = client.resolve("/d")
            assert client.read(did, "<f8", whole((64, 64))).tobytes() == data.tobytes()
            assert client.get_attribute(client.get_domain().root, "note").value[()] == "kept"
        if quick:
            with HsdsClient(server.domain("volatile.h5"), **kw) as client:
                try:
                    did = client.resolve("/d")
                    lost = not np.array_equal(client.read(did, "<f8", whole((64, 64))), data)
                except HsdsError:
                    lost = True
                assert lost, "the unflushed write survived a SIGKILL at once: the test cannot tell"
                print("the unflushed control was lost, as expected")
    finally:
        server.stop()
