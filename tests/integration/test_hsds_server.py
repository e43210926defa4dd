"""The local HSDS itself (tests/hsds_server.py), driven by h5pyd and by plain REST requests: what
HSDS-mount tests conclude from it is only as good as the server, and the REST facts here are the
ones an HSDS engine builds on (shapes of the JSON answers, binary selections, how deletes behave).
h5pyd 1.0.0's own behaviour is pinned too, as tests use it as the oracle."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time

import h5pyd
import numpy as np
import psutil
import pytest

import hsds_server
from hsds_server import ADMIN, ADMIN_PASSWORD, HOME, USER, HSDSServer, hsds  # noqa: F401 (fixture)

BINARY = {"Content-Type": "application/octet-stream"}
ACCEPT_BINARY = {"Accept": "application/octet-stream"}


def rest(server: HSDSServer, method: str, path: str, domain: str, body=None, headers=None, **params):
    """(status, JSON answer or raw bytes) of one request on `domain`."""
    status, head, raw = server.request(method, path, {"domain": domain, **params}, body, headers=headers)
    if head.get("Content-Type", "").startswith("application/json") and raw:
        return status, json.loads(raw)
    return status, raw


def links(server: HSDSServer, domain: str, group_id: str, **params) -> list[str]:
    status, answer = rest(server, "GET", f"/groups/{group_id}/links", domain, **params)
    assert status == 200, answer
    return [link["title"] for link in answer["links"]]


def attr_names(server: HSDSServer, domain: str, obj_id: str) -> list[str]:
    collection = {"g": "groups", "d": "datasets", "t": "datatypes"}[obj_id[0]]
    status, answer = rest(server, "GET", f"/{collection}/{obj_id}/attributes", domain)
    assert status == 200, answer
    return [a["name"] for a in answer["attributes"]]


def node_pids() -> set[int]:
    """The HSDS nodes this test process started and that are still there."""
    return {p.pid for p in psutil.Process().children(recursive=True)
            if any("hsds_node.py" in part for part in p.cmdline())}


def write_sample(server: HSDSServer, domain: str) -> np.ndarray:
    data = np.arange(100 * 60, dtype="<f4").reshape(100, 60)
    with h5pyd.File(domain, "w", **server.h5pyd_kwargs()) as f:
        f.attrs["title"] = "sample"
        g = f.create_group("g1/g2")
        g.attrs["level"] = np.int32(2)
        ds = f.create_dataset("g1/d", data=data, maxshape=(None, 60), chunks=(10, 20), compression="gzip")
        ds.attrs["units"] = "m"
        ds.attrs["scale"] = np.arange(3, dtype="<i8")
    return data


# h5pyd ----------------------------------------------------------------------------------------

def test_h5pyd_writes_and_reads_back(hsds):
    folder = hsds.domain("runs")
    with h5pyd.Folder(folder + "/", mode="w", **hsds.h5pyd_kwargs()) as fo:
        assert fo.owner == USER
    domain = f"{folder}/sample.h5"
    data = write_sample(hsds, domain)
    with h5pyd.File(domain, "r", **hsds.h5pyd_kwargs()) as f:
        assert sorted(f) == ["g1"] and sorted(f["g1"]) == ["d", "g2"]
        assert f.attrs["title"] == "sample" and f["g1/g2"].attrs["level"] == 2
        ds = f["g1/d"]
        assert (ds.shape, ds.maxshape, ds.chunks, ds.compression) == ((100, 60), (None, 60), (10, 20), "gzip")
        assert ds.dtype == np.dtype("<f4")
        np.testing.assert_array_equal(ds[...], data)
        np.testing.assert_array_equal(ds[7:23, 15:44], data[7:23, 15:44])
        assert ds.attrs["units"] == "m"
        np.testing.assert_array_equal(ds.attrs["scale"], [0, 1, 2])
    with h5pyd.Folder(folder + "/") as fo:      # endpoint and credentials from the fixture's os.environ
        assert list(fo) == ["sample.h5"]


def test_second_client_sees_writes(hsds):
    domain = hsds.domain("two_clients.h5")
    write_sample(hsds, domain)
    a = h5pyd.File(domain, "a", **hsds.h5pyd_kwargs())
    b = h5pyd.File(domain, "r", **hsds.h5pyd_kwargs())
    try:
        assert b["g1/d"][0, :3].tolist() == [0, 1, 2]
        a["g1/d"][0, :3] = [100, 101, 102]
        a.create_group("later")
        a.attrs["added"] = 1
        # h5pyd 1.0.0 keeps every change in its client until flush() or close()
        assert b["g1/d"][0, :3].tolist() == [0, 1, 2]
        t = time.monotonic()
        a.flush()
        flushed = time.monotonic()
        while b["g1/d"][0, 0] != 100:
            assert time.monotonic() - flushed < 5, "the write did not show"
            time.sleep(0.01)
        print(f"\nh5pyd flush {flushed - t:.3f} s; the other client read it {time.monotonic() - flushed:.3f} s later")
        # an open h5pyd file reads values anew each time, but keeps the links and attributes it
        # has seen: a file opened after the flush sees them
        assert "later" not in b and "added" not in b.attrs
        with h5pyd.File(domain, "r", **hsds.h5pyd_kwargs()) as c:
            assert "later" in c and c.attrs["added"] == 1 and c["g1/d"][0, :3].tolist() == [100, 101, 102]
    finally:
        a.close()
        b.close()


def test_h5pyd_sends_deletes_only_after_a_flush(hsds):
    """What the issue found: `del group[name]` and `del attrs[name]` on a file just opened change
    only h5pyd's client. h5pyd 1.0.0 sends a DELETE only for what was created before its last
    flush, and its last flush time starts at 0: a flush() right after opening is the workaround.
    Removals are checked through the REST API."""
    domain = hsds.domain("h5pyd_deletes.h5")
    write_sample(hsds, domain)
    gid = rest(hsds, "GET", "/", domain, h5path="/g1")[1]["id"]
    with h5pyd.File(domain, "a", **hsds.h5pyd_kwargs()) as f:
        root = f.id.id
        del f["g1"]["g2"]
        del f.attrs["title"]
        assert "g2" not in f["g1"] and "title" not in f.attrs
    assert links(hsds, domain, gid) == ["d", "g2"]
    assert attr_names(hsds, domain, root) == ["title"]
    with h5pyd.File(domain, "a", **hsds.h5pyd_kwargs()) as f:
        f.flush()
        del f["g1"]["g2"]
        del f.attrs["title"]
    assert links(hsds, domain, gid) == ["d"]
    assert attr_names(hsds, domain, root) == []


# the REST API, as an HSDS engine would use it -------------------------------------------------

def test_rest_reads_what_h5pyd_wrote(hsds):
    domain = hsds.domain("rest_read.h5")
    data = write_sample(hsds, domain)
    status, info = rest(hsds, "GET", "/", domain)
    assert status == 200 and info["class"] == "domain" and info["owner"] == USER
    root = info["root"]
    assert root.startswith("g-") and "lastModified" in info and "limits" in info
    assert links(hsds, domain, root) == ["g1"]
    status, link = rest(hsds, "GET", f"/groups/{root}/links/g1", domain)
    assert status == 200 and link["link"]["class"] == "H5L_TYPE_HARD" and link["link"]["id"].startswith("g-")
    status, obj = rest(hsds, "GET", "/", domain, h5path="/g1/d")
    did = obj["id"]
    status, dset = rest(hsds, "GET", f"/datasets/{did}", domain)
    assert status == 200
    assert dset["shape"] == {"class": "H5S_SIMPLE", "dims": [100, 60], "maxdims": ["H5S_UNLIMITED", 60]}
    assert dset["type"] == {"class": "H5T_FLOAT", "base": "H5T_IEEE_F32LE"}
    props = dset["creationProperties"]
    assert props["layout"] == {"class": "H5D_CHUNKED", "dims": [10, 20]}
    assert [(f["class"], f["name"]) for f in props["filters"]] == [("H5Z_FILTER_DEFLATE", "gzip")]
    assert dset["attributeCount"] == 2
    status, raw = rest(hsds, "GET", f"/datasets/{did}/value", domain, headers=ACCEPT_BINARY, select="[7:23,15:44]")
    assert status == 200
    np.testing.assert_array_equal(np.frombuffer(raw, "<f4").reshape(16, 29), data[7:23, 15:44])
    status, raw = rest(hsds, "GET", f"/datasets/{did}/value", domain, headers=ACCEPT_BINARY, select="[1:100:33,::20]")
    np.testing.assert_array_equal(np.frombuffer(raw, "<f4").reshape(3, 3), data[1:100:33, ::20])
    status, answer = rest(hsds, "GET", f"/datasets/{did}/value", domain, select="[0:2,0:3]")   # JSON
    assert answer["value"] == data[0:2, 0:3].tolist()
    status, attr = rest(hsds, "GET", f"/datasets/{did}/attributes/scale", domain)
    assert attr["type"] == {"class": "H5T_INTEGER", "base": "H5T_STD_I64LE"} and attr["value"] == [0, 1, 2]
    assert attr["shape"] == {"class": "H5S_SIMPLE", "dims": [3]}
    status, raw = rest(hsds, "GET", f"/datasets/{did}/attributes/scale/value", domain, headers=ACCEPT_BINARY)
    assert np.frombuffer(raw, "<i8").tolist() == [0, 1, 2]


def test_rest_edits_show_in_h5pyd(hsds):
    domain = hsds.domain("rest_edit.h5")
    status, info = rest(hsds, "PUT", "/", domain)
    assert status == 201
    root = info["root"]
    assert rest(hsds, "PUT", "/", domain)[0] == 409
    status, grp = rest(hsds, "POST", "/groups", domain, {"link": {"id": root, "name": "g"}})
    assert status == 201
    gid = grp["id"]
    body = {"type": "H5T_STD_I32LE", "shape": [20, 30], "maxdims": [0, 30],   # 0: unlimited
            "creationProperties": {"layout": {"class": "H5D_CHUNKED", "dims": [5, 10]},
                                   "filters": [{"class": "H5Z_FILTER_DEFLATE", "id": 1, "level": 6}],
                                   "fillValue": -1},
            "link": {"id": gid, "name": "d"}}
    status, dset = rest(hsds, "POST", "/datasets", domain, body)
    assert status == 201 and dset["shape"]["maxdims"] == ["H5S_UNLIMITED", 30]
    did = dset["id"]
    block = np.arange(12, dtype="<i4").reshape(3, 4)
    assert rest(hsds, "PUT", f"/datasets/{did}/value", domain, block.tobytes(), BINARY, select="[2:5,3:7]")[0] == 200
    # links: hard (made with the group), soft, external; the same again is 200, another target 409
    assert rest(hsds, "PUT", f"/groups/{root}/links/soft", domain, {"h5path": "/g/d"})[0] == 201
    assert rest(hsds, "PUT", f"/groups/{root}/links/soft", domain, {"h5path": "/g/d"})[0] == 200
    assert rest(hsds, "PUT", f"/groups/{root}/links/soft", domain, {"h5path": "/other"})[0] == 409
    assert rest(hsds, "PUT", f"/groups/{root}/links/ext", domain, {"h5path": "/x", "h5domain": "/a/b.h5"})[0] == 201
    assert rest(hsds, "PUT", f"/groups/{root}/links/alias", domain, {"id": did})[0] == 201
    # attributes: the same again is 200, another one 409 unless replace=1; a value may go as binary
    vlen = {"class": "H5T_STRING", "charSet": "H5T_CSET_UTF8", "length": "H5T_VARIABLE", "strPad": "H5T_STR_NULLTERM"}
    assert rest(hsds, "PUT", f"/groups/{gid}/attributes/units", domain,
                {"type": vlen, "shape": "H5S_SCALAR", "value": "metres"})[0] == 201
    spec = {"type": "H5T_IEEE_F64LE", "shape": [2], "value": [1.0, 2.0]}
    assert rest(hsds, "PUT", f"/datasets/{did}/attributes/w", domain, spec)[0] == 201
    assert rest(hsds, "PUT", f"/datasets/{did}/attributes/w", domain, spec)[0] == 200
    other = {**spec, "value": [3.0, 4.0]}
    assert rest(hsds, "PUT", f"/datasets/{did}/attributes/w", domain, other)[0] == 409
    assert rest(hsds, "PUT", f"/datasets/{did}/attributes/w", domain, other, replace=1)[0] == 201
    assert rest(hsds, "PUT", f"/datasets/{did}/attributes/w/value", domain,
                np.array([1.5, 2.5]).tobytes(), BINARY)[0] == 200
    assert rest(hsds, "PUT", f"/datasets/{did}/attributes/gone", domain, spec)[0] == 201
    assert rest(hsds, "DELETE", f"/datasets/{did}/attributes/gone", domain)[0] == 200
    assert rest(hsds, "GET", f"/datasets/{did}/attributes/gone", domain)[0] == 410
    # resize: grow along the unlimited dimension, shrink, and past maxdims is refused
    status, answer = rest(hsds, "PUT", f"/datasets/{did}/shape", domain, {"shape": [40, 30]})
    assert status == 201 and answer == {"selection": "[20:40,:]"}
    assert rest(hsds, "PUT", f"/datasets/{did}/shape", domain, {"shape": [10, 30]})[0] == 201
    assert rest(hsds, "PUT", f"/datasets/{did}/shape", domain, {"shape": [10, 40]})[0] == 409
    assert rest(hsds, "PUT", "/", domain, flush=1)[0] == 204   # the data node has written it all
    with h5pyd.File(domain, "r", **hsds.h5pyd_kwargs()) as f:
        assert sorted(f) == ["alias", "ext", "g", "soft"]
        ds = f["g/d"]
        assert (ds.shape, ds.maxshape, ds.chunks, ds.compression, ds.fillvalue) == (
            (10, 30), (None, 30), (5, 10), "gzip", -1)
        expected = np.full((10, 30), -1, "<i4")
        expected[2:5, 3:7] = block
        np.testing.assert_array_equal(ds[...], expected)
        np.testing.assert_array_equal(f["soft"][...], expected)
        assert f.get("soft", getlink=True).path == "/g/d"
        assert f["g"].attrs["units"] == "metres" and f["g/d"].attrs["w"].tolist() == [1.5, 2.5]


def test_rest_link_paging_and_deletes(hsds):
    domain = hsds.domain("rest_links.h5")
    root = rest(hsds, "PUT", "/", domain)[1]["root"]
    for i in range(7):
        assert rest(hsds, "POST", "/groups", domain, {"link": {"id": root, "name": f"c{i}"}})[0] == 201
    # links come in name order; Limit and Marker (the last name seen) page through them
    assert links(hsds, domain, root, Limit=3) == ["c0", "c1", "c2"]
    assert links(hsds, domain, root, Limit=3, Marker="c2") == ["c3", "c4", "c5"]
    assert links(hsds, domain, root, Limit=3, Marker="c5") == ["c6"]
    assert rest(hsds, "GET", f"/groups/{root}", domain)[1]["linkCount"] == 7
    status, answer = rest(hsds, "POST", f"/groups/{root}/links", domain, {"titles": ["c1", "c4"]})
    assert status == 200 and [link["title"] for link in answer["links"]] == ["c1", "c4"]
    assert rest(hsds, "GET", f"/groups/{root}/links/nope", domain)[0] == 404
    # deletes: one link; several (titles joined by "/"); a missing name is no error
    assert rest(hsds, "DELETE", f"/groups/{root}/links/c6", domain)[0] == 200
    assert rest(hsds, "DELETE", f"/groups/{root}/links/c6", domain)[0] == 200
    assert rest(hsds, "DELETE", f"/groups/{root}/links", domain, titles="c4/c5")[0] == 200
    assert links(hsds, domain, root) == ["c0", "c1", "c2", "c3"]
    # deleting an object leaves the links to it: they then lead to 410 Gone
    c0 = rest(hsds, "GET", f"/groups/{root}/links/c0", domain)[1]["link"]["id"]
    assert rest(hsds, "DELETE", f"/groups/{c0}", domain)[0] == 200
    assert "c0" in links(hsds, domain, root)
    assert rest(hsds, "GET", f"/groups/{c0}", domain)[0] == 410
    # the domain itself; the folder lists what it holds
    assert rest(hsds, "DELETE", "/", domain)[0] == 200
    assert rest(hsds, "GET", "/", domain)[0] == 410
    status, answer = rest(hsds, "GET", "/domains", HOME + "/")
    assert status == 200 and domain not in [d["name"] for d in answer["domains"]]


def test_rest_credentials(hsds):
    domain = hsds.domain("creds.h5")
    rest(hsds, "PUT", "/", domain)
    anonymous = hsds.request("GET", "/", {"domain": domain}, user=None)
    assert anonymous[0] in (401, 403)
    assert hsds.request("GET", "/", {"domain": domain}, user=(USER, "wrong"))[0] == 401
    status, _, raw = hsds.request("GET", "/about", user=(ADMIN, ADMIN_PASSWORD))
    about = json.loads(raw)
    assert status == 200 and about["isadmin"] and about["state"] == "READY" and about["hsds_version"] == "1.0.2"
    assert not json.loads(hsds.request("GET", "/about")[2])["isadmin"]


# the server's own life ------------------------------------------------------------------------

def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def test_lifecycle_leaves_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = node_pids()     # the session's server, if a test started it
    with HSDSServer() as server:
        pids, root, ports = server.pids, server.root, (server.sn_port, server.dn_port)
        assert all(_alive(pid) for pid in pids.values()) and root.is_dir()
        # loopback only: each node listens on 127.0.0.1 and on nothing else
        for pid in pids.values():
            addrs = {c.laddr.ip for c in psutil.Process(pid).net_connections("inet") if c.status == "LISTEN"}
            assert addrs == {"127.0.0.1"}
        idle = server.rss()
        data = np.random.default_rng(1).random((1024, 1024))   # 8 MiB
        with h5pyd.File(server.domain("big.h5"), "w", **server.h5pyd_kwargs()) as f:
            f.create_dataset("d", data=data, chunks=(256, 1024))
        with h5pyd.File(server.domain("big.h5"), "r", **server.h5pyd_kwargs()) as f:
            np.testing.assert_array_equal(f["d"][...], data)
        busy = server.rss()
        mib = {name: f"{idle[name] / 2**20:.0f} -> {busy[name] / 2**20:.0f} MiB" for name in idle}
        print(f"\nHSDS start-up {server.startup_seconds:.2f} s; RSS idle -> after 8 MiB written and read: {mib}")
        t = time.monotonic()
    print(f"HSDS stop {time.monotonic() - t:.2f} s")
    assert not any(_alive(pid) for pid in pids.values())
    assert not root.exists() and not any(_listening(p) for p in ports)
    assert node_pids() == before and list(tmp_path.iterdir()) == []


def test_stops_on_failure(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = node_pids()
    with pytest.raises(KeyError):
        with HSDSServer() as server:
            pids = server.pids
            raise KeyError("a test that fails")
    assert not any(_alive(pid) for pid in pids.values()) and list(tmp_path.iterdir()) == []
    # a node that cannot start (its port taken): start raises with the node's log, and the other
    # node goes too
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([hsds_server.free_port(), taken.getsockname()[1]])
        monkeypatch.setattr(hsds_server, "free_port", lambda: next(ports))
        with pytest.raises(RuntimeError, match="dn.log"):
            HSDSServer().start()
    assert node_pids() == before and list(tmp_path.iterdir()) == []
