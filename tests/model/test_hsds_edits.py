"""Edits of an HSDS domain through the HSDS engine (model/hsds/edits.py HsdsEditor,
model/hsds/writeback.py HsdsWriteback) against the local HSDS (tests/hsds_server.py). The oracle is
h5pyd opening the domain afterwards, and the REST API (HsdsClient) where h5pyd hides things
(deleted objects, removed attributes). The engine under test keeps what it reads for 600 s: each
edit must make it forget what changed, or its next look would show the old state."""

from __future__ import annotations

import errno

import h5pyd
import numpy as np
import pytest

from h5fs.errors import CannotWrite, H5fsError, InvalidWrite, NotFound
from h5fs.fuse.views import format_value
from h5fs.model import namespace
from h5fs.model.filter_spec import parse_filters
from h5fs.model.hsds import HsdsDomain
from h5fs.model.hsds.edits import HsdsEditor
from h5fs.model.hsds.staging import Staged
from h5fs.model.hsds.writeback import HsdsWriteback
from h5fs.model.tree_edit import NamespaceError
from h5fs.storage.hsds import HsdsClient, HsdsError
import hsds_server
from hsds_server import PASSWORD, USER, HSDSServer
from hsds_support import domain_for, h5pyd_file, hsds  # noqa: F401 - the session fixture


@pytest.fixture
def made(hsds, request):
    """(engine, editor, client, domain) on a fresh domain h5pyd filled with a small tree."""
    domain = domain_for(hsds, request)
    with h5pyd_file(hsds, domain, "w") as f:
        f.create_group("g/sub")
        f.create_group("empty")
        f.create_dataset("d", data=np.arange(10, dtype="<i4"))
        f.create_dataset("g/e", data=np.arange(4, dtype="<f8"))
        f["soft"] = h5pyd.SoftLink("/g")
        f["ext"] = h5pyd.ExternalLink("other.h5", "/x")
        f.attrs["i"] = np.int32(7)
        f.attrs["f"] = np.float64(0.5)
        f.attrs["arr"] = np.arange(3, dtype="<i2")
        f.attrs["grid"] = np.arange(4, dtype="<u1").reshape(2, 2)
        f.attrs["fixed"] = np.bytes_(b"abc")
        f.attrs["text"] = "old"
        f.attrs["flag"] = np.bool_(False)
    engine = HsdsDomain.open(domain, endpoint=hsds.endpoint, username=USER, password=PASSWORD, refresh=600)
    in_use: set[int] = set()
    editor = HsdsEditor(engine, None, in_use=in_use.__contains__)
    editor.test_in_use = in_use
    yield engine, editor, engine.client, domain
    engine.close()


def names(group) -> list[str]:
    return [ln.name for ln in group.links(prefetch=False)]


def refused(err: int, call, *args):
    with pytest.raises(NamespaceError) as e:
        call(*args)
    assert e.value.errno == err, e.value
    return e.value


def gone(client: HsdsClient, obj_id: str) -> bool:
    getter = {"g-": client.get_group, "d-": client.get_dataset, "t-": client.get_datatype}[obj_id[:2]]
    try:
        getter(obj_id)
    except HsdsError as e:
        assert e.errno == errno.ENOENT
        return True
    return False


# -- groups ------------------------------------------------------------------------------------

def test_mkdir_makes_a_group_the_engine_and_h5pyd_see(hsds, made):
    engine, editor, client, domain = made
    root = engine.root
    assert "new" not in names(root)     # kept for 600 s: only forget shows the new group
    address = editor.mkdir(root, "new")
    assert "new" in names(engine.root)
    g = engine.get(address, "/new")
    assert g.kind == "group" and g.links() == []
    inner = editor.mkdir(g, "inner")
    assert names(engine.get(address, "/new")) == ["inner"]
    refused(errno.EEXIST, editor.mkdir, engine.root, "new")
    refused(errno.EEXIST, editor.mkdir, engine.root, "d")
    with h5pyd_file(hsds, domain) as f:
        assert isinstance(f["new/inner"], h5pyd.Group) and f["new/inner"].id.id == engine.id_of(inner)


def test_rmdir_refuses_as_the_local_engine_and_removes_link_and_group(hsds, made):
    engine, editor, client, domain = made
    root = engine.root
    refused(errno.ENOENT, editor.rmdir, root, "nothing")
    refused(errno.ENOTDIR, editor.rmdir, root, "d")
    refused(errno.ENOTDIR, editor.rmdir, root, "soft")
    refused(errno.ENOTEMPTY, editor.rmdir, root, "g")
    empty_id = client.get_link(root.id, "empty").id
    assert "empty" in names(root)
    assert editor.rmdir(root, "empty") == 0
    assert "empty" not in names(engine.root)
    assert gone(client, empty_id)
    g = engine.resolve("/g")
    assert editor.rmdir(g, "sub") == 0
    assert names(engine.resolve("/g")) == ["e"]
    with h5pyd_file(hsds, domain) as f:
        assert "empty" not in f and list(f["g"]) == ["e"]


# -- links -------------------------------------------------------------------------------------

def test_unlink_removes_the_link_and_its_object(hsds, made):
    engine, editor, client, domain = made
    root = engine.root
    d_id = client.get_link(root.id, "d").id
    assert engine.resolve("/d").read_raw(0, 8) == np.arange(2, dtype="<i4").tobytes()
    assert editor.unlink(root, "d") == 0
    assert gone(client, d_id) and "d" not in names(engine.root)
    assert editor.unlink(engine.root, "soft") is None and editor.unlink(engine.root, "ext") is None
    refused(errno.EISDIR, editor.unlink, engine.root, "g")
    refused(errno.ENOENT, editor.unlink, engine.root, "d")
    with h5pyd_file(hsds, domain) as f:
        assert sorted(f) == ["empty", "g"]
        assert f["g/e"][()].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_hard_link_made_here_keeps_the_object_until_its_last_link_goes(hsds, made):
    engine, editor, client, domain = made
    ds = engine.resolve("/g/e")
    editor.hard_link(ds.address, engine.root, "alias")
    assert engine.root.link("alias").address == ds.address
    refused(errno.EEXIST, editor.hard_link, ds.address, engine.root, "d")
    assert editor.unlink(engine.resolve("/g"), "e") == 1        # one link left
    assert not gone(client, ds.id)
    with h5pyd_file(hsds, domain) as f:
        assert "e" not in f["g"] and f["alias"][()].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert editor.unlink(engine.root, "alias") == 0
    assert gone(client, ds.id)


def test_soft_and_external_links(hsds, made):
    engine, editor, client, domain = made
    editor.soft_link(engine.root, "s2", "/g/e")
    editor.external_link(engine.resolve("/g"), "x2", "far.h5", "/a/b")
    refused(errno.EEXIST, editor.soft_link, engine.root, "d", "/x")
    refused(errno.EEXIST, editor.external_link, engine.root, "g", "f.h5", "/x")
    assert engine.root.link("s2").target == "/g/e"
    x2 = engine.resolve("/g").link("x2")
    assert (x2.filename, x2.target) == ("far.h5", "/a/b")
    with h5pyd_file(hsds, domain) as f:
        assert f["s2"][()].tolist() == [0.0, 1.0, 2.0, 3.0]
        link = f["g"].get("x2", getlink=True)
        assert isinstance(link, h5pyd.ExternalLink) and (link.filename, link.path) == ("far.h5", "/a/b")


def test_rename_moves_replaces_and_refuses_as_rename2(hsds, made):
    engine, editor, client, domain = made
    root, g = engine.root, engine.resolve("/g")
    d_id, e_id = client.get_link(root.id, "d").id, client.get_link(g.id, "e").id
    assert editor.rename(root, "d", g, "moved") is None
    assert "d" not in names(engine.root) and engine.resolve("/g/moved").id == d_id
    # over an existing dataset: the replaced object is deleted
    assert editor.rename(engine.resolve("/g"), "moved", engine.resolve("/g"), "e") == 0
    assert gone(client, e_id) and engine.resolve("/g/e").id == d_id
    # links move as they are
    assert editor.rename(engine.root, "soft", engine.resolve("/g/sub"), "s") is None
    assert engine.resolve("/g/sub").link("s").target == "/g"
    refused(errno.ENOENT, editor.rename, engine.root, "nothing", engine.root, "x")
    refused(errno.EINVAL, editor.rename, engine.root, "g", engine.resolve("/g/sub"), "loop")
    refused(errno.EINVAL, editor.rename, engine.root, "g", engine.resolve("/g"), "self")
    refused(errno.ENOTEMPTY, editor.rename, engine.root, "empty", engine.root, "g")
    # a group over an empty group: the empty one goes
    empty_id = client.get_link(root.id, "empty").id
    assert editor.rename(engine.resolve("/g"), "sub", engine.root, "empty") == 0
    assert gone(client, empty_id) and names(engine.resolve("/g")) == ["e"]
    # two names of one object: nothing happens
    editor.hard_link(engine.resolve("/g/e").address, engine.root, "same")
    assert editor.rename(engine.root, "same", engine.resolve("/g"), "e") is None
    assert "same" in names(engine.root)
    with h5pyd_file(hsds, domain) as f:
        assert sorted(f) == ["empty", "ext", "g", "same"]
        assert f["g/e"][()].tolist() == list(range(10)) and f["empty"].get("s", getlink=True).path == "/g"


def test_an_object_unlinked_while_open_stays_until_freed(hsds, made):
    engine, editor, client, domain = made
    ds = engine.resolve("/d")
    editor.test_in_use.add(ds.address)
    assert editor.unlink(engine.root, "d") == 0
    assert editor.orphans == {ds.address: "/d"}
    assert engine.get(ds.address, "/d").read_raw(0, 40) == np.arange(10, dtype="<i4").tobytes()
    assert editor.free_orphan(ds.address) is False       # still open
    editor.test_in_use.clear()
    assert editor.free_orphan(ds.address) is True
    assert editor.orphans == {} and gone(client, ds.id)
    assert editor.free_orphan(ds.address) is False


def test_times_and_bookkeeping_do_nothing(made):
    engine, editor, client, domain = made
    before = client.get_group(engine.root_id).last_modified
    editor.touch(engine.root, 1_000_000_000)
    editor.land()
    assert client.get_group(engine.root_id).last_modified == before
    with pytest.raises(CannotWrite):
        editor.create_unlinked_dataset(engine.resolve("/d"), "<i4", (3,))


# -- attributes --------------------------------------------------------------------------------

@pytest.mark.parametrize("name,text,want", [
    ("i", b"-12", np.int32(-12)),
    ("f", b"2.25", np.float64(2.25)),
    ("arr", b"[4, -5, 6]", np.array([4, -5, 6], "<i2")),
    ("grid", b"[[9, 8], [7, 6]]", np.array([[9, 8], [7, 6]], "u1")),
    ("fixed", b"longer text", np.bytes_(b"longer text")),
    ("text", "néw".encode(), "néw"),
    ("flag", b"True", np.bool_(True)),
])
def test_setfattr_keeps_an_attributes_type_and_shape(hsds, made, name, text, want):
    engine, editor, client, domain = made
    root = engine.root
    before = namespace.attributes(root)[name]
    editor.set_attribute(root, name, text)
    after = namespace.attributes(engine.root)[name]
    assert after.value.shape == before.value.shape
    assert format_value(after.value, 65536) == (text if name != "text" else "néw".encode())
    with h5pyd_file(hsds, domain) as f:
        got = f.attrs[name]
        assert np.asarray(got).dtype == np.asarray(want).dtype or name in ("text", "fixed")
        if name == "text":
            assert (got.decode() if isinstance(got, bytes) else got) == want
        else:
            assert np.array_equal(np.asarray(got), np.asarray(want))


def test_setfattr_refuses_text_the_type_cannot_take(made):
    engine, editor, client, domain = made
    for name, text in (("i", b"1.5"), ("i", b"99999999999"), ("arr", b"[1, 2]"), ("f", b"x"), ("flag", b"maybe")):
        with pytest.raises(InvalidWrite) as e:
            editor.set_attribute(engine.root, name, text)
        assert e.value.errno == errno.EINVAL
    assert client.get_attribute(engine.root_id, "arr").value.tolist() == [0, 1, 2]   # unchanged


def test_a_new_attribute_is_text_as_h5py_writes_a_str(hsds, made):
    engine, editor, client, domain = made
    editor.set_attribute(engine.resolve("/g"), "units", "Kelvin ✓".encode())
    editor.set_attribute(engine.resolve("/d"), "empty", b"")
    assert format_value(namespace.attributes(engine.resolve("/g"))["units"].value, 65536) == "Kelvin ✓".encode()
    attr = client.get_attribute(engine.resolve("/g").id, "units")
    assert attr.type["length"] == "H5T_VARIABLE" and attr.type["charSet"] == "H5T_CSET_UTF8" and attr.shape == ()
    with h5pyd_file(hsds, domain) as f:
        assert f["g"].attrs["units"] == "Kelvin ✓" and f["d"].attrs["empty"] == ""
    for bad in (b"\xff\xfe", b"a\0b"):
        with pytest.raises(InvalidWrite):
            editor.set_attribute(engine.root, "bad", bad)


@pytest.mark.parametrize("dtype,text,want", [
    ("<i2", b"[1, -2, 3]", np.array([1, -2, 3], "<i2")),
    (">f4", b"[[1.5, 2.0], [3.0, 4.0]]", np.array([[1.5, 2], [3, 4]], ">f4")),
    ("bool", b"True", np.bool_(True)),
    ("<c8", b"(1+2j)", np.complex64(1 + 2j)),    # HSDS's {r, i} compound, as h5py stores it
    ("<u8", b"18446744073709551615", np.uint64(2**64 - 1)),
])
def test_typed_attributes(hsds, made, dtype, text, want):
    engine, editor, client, domain = made
    editor.create_attribute(engine.root, "i", dtype, text)      # replaces the int32 there
    assert format_value(namespace.attributes(engine.root)["i"].value, 65536) == text
    with h5pyd_file(hsds, domain) as f:
        got = np.asarray(f.attrs["i"])
        assert got.dtype == np.asarray(want).dtype and np.array_equal(got, want)


def test_typed_attributes_refuse_what_they_cannot_hold(made):
    engine, editor, client, domain = made
    for dtype, text in (("<i2", b"70000"), ("S3", b"abc"), ("<i4", b"[1, [2]]")):
        with pytest.raises(H5fsError) as e:
            editor.create_attribute(engine.root, "n", dtype, text)
        assert e.value.errno == errno.EINVAL
    assert "n" not in namespace.attributes(engine.root)


def test_remove_attribute(hsds, made):
    engine, editor, client, domain = made
    assert "i" in namespace.attributes(engine.root)
    editor.remove_attribute(engine.root, "i")
    assert "i" not in namespace.attributes(engine.root)
    assert "i" not in [a.name for a in client.attributes(engine.root_id)]    # h5pyd would not tell
    with pytest.raises(NotFound):
        editor.remove_attribute(engine.root, "i")


# -- datasets ------------------------------------------------------------------------------------

def test_create_dataset_as_asked(hsds, made):
    engine, editor, client, domain = made
    address = editor.create_dataset(engine.root, "new", np.dtype("<f4"), (6, 5), maxshape=(None, 5), chunks=(3, 5),
                                    filters=parse_filters("gzip:7,shuffle"), fill=-1.5)
    ds = engine.get(address, "/new")
    facts = namespace.facts(ds)
    assert (facts["shape"], facts["maxshape"], facts["chunks"]) == ("(6, 5)", "(unlimited, 5)", "(3, 5)")
    assert facts["filters"] == "shuffle,deflate" and facts["fill_value"] == "-1.5"
    assert "new" in names(engine.root)
    flags = editor.create_dataset(engine.resolve("/g"), "flags", np.dtype(bool), (3,), fill=True)
    cplx = editor.create_dataset(engine.root, "z", np.dtype("<c16"), (2,), filters="gzip")
    assert engine.get(flags, "/g/flags").read_raw(0, 3) == b"\1\1\1"
    assert engine.get(cplx, "/z").raw_size == 32
    with h5pyd_file(hsds, domain) as f:
        d = f["new"]
        assert d.shape == (6, 5) and d.maxshape == (None, 5) and d.chunks == (3, 5)
        assert d.compression == "gzip" and d.compression_opts == 7 and d.shuffle and d.fillvalue == -1.5
        assert (d[()] == -1.5).all()
        assert f["g/flags"][()].tolist() == [True, True, True]
    refused(errno.EEXIST, editor.create_dataset, engine.root, "d", np.dtype("u1"), (1,))


@pytest.mark.parametrize("filters,named", [("lzf", "lzf"), ("zstd", "zstd"), ("shuffle,bzip2", "bzip2")])
def test_create_dataset_refuses_filters_hsds_does_not_take(made, filters, named):
    engine, editor, client, domain = made
    with pytest.raises(CannotWrite) as e:
        editor.create_dataset(engine.root, "x", np.dtype("<i4"), (10,), chunks=(5,), filters=filters)
    assert named in str(e.value) and e.value.errno == errno.ENOTSUP
    assert "x" not in [ln.title for ln in client.links(engine.root_id)]
    with pytest.raises(CannotWrite):
        editor.create_dataset(engine.root, "y", np.dtype("<i4"), (10,), layout="sparse")


# -- the writeback -----------------------------------------------------------------------------

def test_staged_ranges_merge_overlay_and_cut_as_a_byte_array_model():
    rng = np.random.default_rng(11)
    size = 5000
    model, mask = np.zeros(size, np.uint8), np.zeros(size, bool)
    st = Staged("/x", "d-x")
    for step in range(400):
        off = int(rng.integers(0, size - 1))
        data = rng.integers(0, 256, int(rng.integers(1, min(300, size - off) + 1)), dtype=np.uint8)
        added = st.put(off, data.tobytes())
        assert added == int((~mask[off:off + len(data)]).sum())
        model[off:off + len(data)], mask[off:off + len(data)] = data, True
        assert st.nbytes == mask.sum()
        ranges = list(st.ranges())
        for (a, pa), (b, _) in zip(ranges, ranges[1:]):
            assert a + len(pa) < b      # disjoint, not touching
        lo = int(rng.integers(0, size))
        out = bytearray(b"\xee" * int(rng.integers(0, 400)))
        st.overlay(lo, out)
        want = np.frombuffer(b"\xee" * len(out), np.uint8).copy()
        hi = min(size, lo + len(out))
        sel = mask[lo:hi]
        want[:hi - lo][sel] = model[lo:hi][sel]
        assert bytes(out) == want.tobytes()
        n = int(rng.integers(0, 50))
        assert st.covers(lo, n) == bool(lo + n <= size and mask[lo:lo + n].all())
        if step % 97 == 96:
            cut = int(rng.integers(0, size))
            st.cut(cut)
            mask[cut:] = False
            assert st.nbytes == mask.sum()


@pytest.fixture
def wb(made):
    engine, editor, client, domain = made
    writeback = HsdsWriteback(engine, dirty_limit=1 << 20)
    editor.wb = writeback
    yield writeback
    writeback.close()


def random_writes(wb, ds, model: np.ndarray, rng, count: int) -> None:
    """`count` writes at random byte offsets and sizes (partial elements too) into `ds` and
    into `model` (its raw bytes), each read back whole through the writeback at once."""
    raw = model.view(np.uint8).reshape(-1)
    for _ in range(count):
        off = int(rng.integers(0, raw.size - 1))
        data = rng.integers(0, 256, int(rng.integers(1, min(raw.size - off, 700) + 1)), dtype=np.uint8)
        assert wb.write(ds, off, data.tobytes()) == len(data)
        raw[off:off + len(data)] = data
        lo = int(rng.integers(0, raw.size))
        assert wb.read(ds, lo, 500) == raw[lo:lo + 500].tobytes()


@pytest.mark.parametrize("shape,dtype,chunks", [((3000,), "<i4", (256,)), ((37, 23), ">f8", (10, 8)),
                                                 ((37, 23), "<u2", None)])
def test_random_writes_read_back_at_once_and_land_at_the_flush(hsds, made, wb, shape, dtype, chunks):
    engine, editor, client, domain = made
    rng = np.random.default_rng(sum(shape))
    model = rng.integers(0, 1000, shape).astype(dtype)
    # (h5pyd 1.0.0 cannot open this tree "a": its external link's answer lacks "file")
    made_ds = client.create_dataset(dtype, shape, chunks=chunks, parent=engine.root_id, name="w")
    client.write(made_ds.id, dtype, [slice(0, n) for n in shape], model)
    ds = engine.resolve("/w")
    assert ds.read_raw(0, ds.raw_size) == model.tobytes()      # blocks kept for 600 s: the flush must drop them
    random_writes(wb, ds, model, rng, 60)
    assert wb.holds(ds.address) and wb.pending and wb.waiting()[0] > 0
    assert ds.read_raw(0, ds.raw_size) != model.tobytes()       # the service has none of it yet
    wb.flush(durable=False)
    assert not wb.holds(ds.address) and wb.waiting() == (0, 0) and wb.flush_done == wb.flush_total > 0
    assert ds.read_raw(0, ds.raw_size) == model.tobytes()
    with h5pyd_file(hsds, domain) as f:
        assert f["w"][()].tobytes() == model.tobytes()


def test_write_now_stages_without_a_request_and_refuses_what_needs_one(made, wb):
    engine, editor, client, domain = made
    ds = engine.resolve("/d")          # a handle: its record not kept yet
    assert wb.write_now(ds, 0, b"\1\0\0\0") is False
    ds.raw_size                        # described: kept
    requests = client.stats()["requests"]
    assert wb.write_now(ds, 4, np.int32(-3).tobytes()) is True
    assert wb.write_now(ds, 2, b"\0\0\0\0") is False           # not whole elements
    assert wb.write_now(ds, 36, b"\0" * 8) is False            # past the end
    assert client.stats()["requests"] == requests
    wb.flush(durable=False)
    assert client.read(ds.id, "<i4", [slice(0, 3)]).tolist() == [0, -3, 2]


def test_truncate_grows_and_shrinks_resizable_datasets_in_whole_rows(hsds, made, wb):
    engine, editor, client, domain = made
    address = editor.create_dataset(engine.root, "r", np.dtype("<i2"), (4, 3), maxshape=(10, 3), chunks=(2, 3))
    ds = engine.get(address, "/r")
    model = np.zeros((10, 3), "<i2")
    assert wb.room(ds) == 60 and wb.room(engine.resolve("/d")) == 40
    wb.write(ds, 0, np.arange(12, dtype="<i2").tobytes())
    model[:4] = np.arange(12).reshape(4, 3)
    wb.truncate(ds, 6 * 6)
    assert ds.shape == (6, 3) and client.get_dataset(ds.id).shape == (6, 3)
    assert wb.read(ds, 0, 100) == model[:6].tobytes()
    wb.truncate(ds, 2 * 6)             # a shrink drops what is staged past the end
    assert wb.waiting()[0] == 12 and wb.read(ds, 0, 100) == model[:2].tobytes()
    wb.write(ds, 7 * 6 + 1, b"\x05")   # past the end: grown to the row it ends in (8 rows)
    model[2:] = 0
    model.view(np.uint8).reshape(-1)[43] = 5
    assert ds.shape == (8, 3) and wb.read(ds, 0, 100) == model[:8].tobytes()
    for size, err in ((7, errno.EINVAL), (11 * 6, errno.EFBIG)):
        with pytest.raises(H5fsError) as e:
            wb.truncate(ds, size)
        assert e.value.errno == err
    with pytest.raises(H5fsError) as e:
        wb.truncate(engine.resolve("/d"), 80)         # a fixed shape
    assert e.value.errno == errno.EFBIG
    with pytest.raises(H5fsError) as e:
        wb.write(ds, 60, b"\1\1")
    assert e.value.errno == errno.EFBIG
    wb.flush(durable=False)
    with h5pyd_file(hsds, domain) as f:
        assert f["r"].shape == (8, 3) and f["r"][()].tobytes() == model[:8].tobytes()


def test_variable_length_data_is_not_written(hsds, made, wb):
    engine, editor, client, domain = made
    client.create_dataset(np.dtype("O", metadata={"vlen": str}), (2,), parent=engine.root_id, name="v")
    with pytest.raises(CannotWrite) as e:
        wb.write(engine.resolve("/v"), 0, b"x")
    assert "/v" in str(e.value) and e.value.errno == errno.ENOTSUP
    assert not wb.pending


def test_flush_is_durable_and_pending_says_what_is_not(made, wb):
    engine, editor, client, domain = made
    assert not wb.pending
    editor.mkdir(engine.root, "x")          # an edit: in the service, not yet flushed to its storage
    assert wb.pending
    wb.flush()
    assert not wb.pending
    wb.write(engine.resolve("/d"), 0, b"\x09\0\0\0")
    assert wb.pending
    wb.flush()
    assert not wb.pending and client.read(engine.resolve("/d").id, "<i4", [slice(0, 1)]).tolist() == [9]


def test_new_groups_wait_and_go_in_bulk_shown_from_the_cache_meanwhile(hsds, made, wb):
    engine, editor, client, domain = made
    engine.creations.delay = 600          # sent only when something needs them there
    root_links = {ln.title for ln in client.links(engine.root_id)}
    names(engine.root)                    # the mount's view of the root, which mkdir checks names against
    before = client.stats()["requests"]
    a = editor.mkdir(engine.root, "new")
    new = engine.get(a, "/new")
    editor.set_attribute(new, "note", b"first")
    editor.set_attribute(new, "note", b"second")
    inner = editor.mkdir(new, "inner")
    assert client.stats()["requests"] == before      # nothing sent: all shown from the cache
    assert "new" in names(engine.root) and names(new) == ["inner"]
    assert [(x.name, x.value[()]) for x in new.attributes()] == [("note", "second")]
    refused(errno.EEXIST, editor.mkdir, engine.root, "new")
    assert {ln.title for ln in client.links(engine.root_id)} == root_links     # the service: not yet
    engine.meta.forget(new.id)            # anything asking the service about them sends them first
    assert names(engine.get(a, "/new")) == ["inner"]
    assert client.stats()["requests"] - before <= 5 and not engine.creations.pending
    with h5pyd_file(hsds, domain) as f:
        assert f["new"].attrs["note"] == "second" and f["new/inner"].id.id == engine.id_of(inner)


def test_a_new_group_s_name_taken_meanwhile_by_another_writer_is_lost_and_logged(hsds, made, wb, caplog):
    engine, editor, client, domain = made
    engine.creations.delay = 600
    names(engine.root)                    # the root's links kept: another writer's next one is not seen
    a = editor.mkdir(engine.root, "both")
    editor.mkdir(engine.root, "mine")
    editor.set_attribute(engine.get(a, "/both"), "note", b"lost")
    theirs = client.create_group(engine.root_id, "both")
    wb.flush()
    assert "another writer linked that name" in caplog.text
    found = {ln.title: ln for ln in client.links(engine.root_id)}
    assert found["both"].id == theirs.id and "mine" in found and gone(client, engine.id_of(a))
    assert not engine.creations.pending


def test_other_edits_send_waiting_groups_first(hsds, made, wb):
    engine, editor, client, domain = made
    engine.creations.delay = 600
    a = editor.mkdir(engine.root, "soon")
    editor.mkdir(engine.get(a, "/soon"), "gone")
    editor.rmdir(engine.get(a, "/soon"), "gone")     # the service's own refusals and answers
    editor.soft_link(engine.get(a, "/soon"), "up", "/g")
    assert {ln.title for ln in client.links(engine.id_of(a))} == {"up"}


def test_a_budget_of_staged_bytes_flushes_as_writes_go(hsds, made):
    engine, editor, client, domain = made
    wb = HsdsWriteback(engine, dirty_limit=64 << 10)
    try:
        address = editor.create_dataset(engine.root, "big", np.dtype("<f4"), (200_000,), chunks=(20_000,))
        ds = engine.get(address, "/big")
        data = np.random.default_rng(1).random(200_000).astype("<f4")
        raw = data.tobytes()
        most = 0
        for off in range(0, len(raw), 16 << 10):
            wb.write(ds, off, raw[off:off + (16 << 10)])
            most = max(most, wb.waiting()[0])
        assert most <= 64 << 10 + 16 << 10
        wb.flush(durable=False)
        with h5pyd_file(hsds, domain) as f:
            assert f["big"][()].tobytes() == raw
    finally:
        wb.close()


def test_discard_and_close(made, wb):
    engine, editor, client, domain = made
    ds = engine.resolve("/d")
    wb.write(ds, 0, b"\1\0\0\0")
    e = engine.resolve("/g/e")
    wb.write(e, 0, np.float64(5).tobytes())
    wb.closed(e.address)            # a small one: sent at its close
    assert not wb.holds(e.address) and client.read(e.id, "<f8", [slice(0, 1)]).tolist() == [5.0]
    assert editor.unlink(engine.root, "d") == 0     # its staged bytes go with it
    assert not wb.holds(ds.address) and wb.waiting() == (0, 0)
    wb.flush(durable=False)


def test_a_stopped_service_keeps_staged_bytes_for_a_retry(tmp_path, monkeypatch):
    first = HSDSServer(tmp_path / "hsds").start()
    domain = first.domain("retry.h5")
    with h5pyd.File(domain, "w", **first.h5pyd_kwargs()) as f:
        f.create_dataset("d", data=np.zeros(1000, "<i8"), chunks=(100,))
    engine = HsdsDomain.open(domain, endpoint=first.endpoint, username=USER, password=PASSWORD, refresh=600,
                             retries=1, backoff=0.05, timeout=5.0)
    wb = HsdsWriteback(engine)
    try:
        ds = engine.resolve("/d")
        model = np.zeros(1000, "<i8")
        wb.write(ds, 800, np.arange(50, dtype="<i8").tobytes())
        model[100:150] = np.arange(50)
        wb.flush()          # durable before the service goes away
        wb.write(ds, 8 * 10, np.full(30, 7, "<i8").tobytes())
        model[10:40] = 7
        ports = iter([first.sn_port, first.dn_port])
        first.stop()
        with pytest.raises(HsdsError) as e:
            wb.flush()
        assert e.value.errno == errno.EIO
        assert wb.holds(ds.address) and wb.waiting()[0] == 240
        assert wb.read(ds, 80, 240) == model[10:40].tobytes()     # staged whole: no request
        with pytest.raises(HsdsError):
            wb.flush_data()
        monkeypatch.setattr(hsds_server, "free_port", lambda: next(ports))
        with HSDSServer(tmp_path / "hsds") as again:
            wb.flush()
            assert not wb.holds(ds.address)
            with h5pyd.File(domain, "r", **again.h5pyd_kwargs()) as f:
                assert f["d"][()].tolist() == model.tolist()
    finally:
        wb._pool.shutdown()
        wb._flusher.shutdown()
        engine.close()
