"""HSDS types and binary values (storage/hsds/types.py, values.py): type JSON <-> dtype for every
class, what cannot map refused by name, the variable-length binary form byte for byte as HSDS's
own code (h5json's array_util) writes it, hostile bytes refused without allocating what they
claim; then every type through the local HSDS both ways, h5pyd the oracle."""

from __future__ import annotations

import errno
import tracemalloc

import h5pyd
import numpy as np
import pytest
from h5json import array_util

from h5fs.errors import FormatError
from h5fs.storage.hsds import HsdsError, TypeNotMapped, whole
from h5fs.storage.hsds.types import INTEGERS, FLOATS, is_variable, item_size, to_dtype, to_json
from h5fs.storage.hsds.values import COUNT, decode, encode
from h5fs.storage.hsds import values
from hsds_support import assert_same, h5pyd_file, hsds, new_client  # noqa: F401 - fixtures

VSTR = np.dtype("O", metadata={"vlen": str})
VBYTES = np.dtype("O", metadata={"vlen": bytes})


def vlen(base) -> np.dtype:
    return np.dtype("O", metadata={"vlen": np.dtype(base)})


# type JSON <-> dtype ---------------------------------------------------------------------------

@pytest.mark.parametrize("order", ["LE", "BE"])
def test_predefined_numbers(order):
    for name, code in {**INTEGERS, **FLOATS}.items():
        full = name + order
        want = np.dtype(("<" if order == "LE" else ">") + code)
        cls = "H5T_FLOAT" if "IEEE" in name else "H5T_INTEGER"
        assert to_dtype(full) == want and to_dtype({"class": cls, "base": full}) == want
        # one byte has no order: NumPy's '|i1' goes as the LE name
        assert to_json(want) == {"class": cls, "base": full if want.itemsize > 1 else name + "LE"}


def test_every_class():
    cases = [
        ({"class": "H5T_STRING", "length": 7, "charSet": "H5T_CSET_ASCII", "strPad": "H5T_STR_NULLPAD"}, "S7"),
        ({"class": "H5T_OPAQUE", "size": 5}, "V5"),
        ({"class": "H5T_ARRAY", "dims": [2, 3], "base": "H5T_STD_I16BE"}, np.dtype((">i2", (2, 3)))),
        ({"class": "H5T_COMPOUND", "fields": [{"name": "a", "type": "H5T_STD_U8LE"},
                                              {"name": "b", "type": {"class": "H5T_FLOAT", "base": "H5T_IEEE_F64BE"}}]},
         np.dtype([("a", "u1"), ("b", ">f8")])),
    ]
    for type_json, want in cases:
        assert to_dtype(type_json) == np.dtype(want), type_json
    # compounds are packed (HSDS keeps no offsets): 1 + 8 bytes, no padding
    assert to_dtype(cases[3][0]).itemsize == 9
    utf8 = to_dtype({"class": "H5T_STRING", "length": 4, "charSet": "H5T_CSET_UTF8"})
    assert utf8 == np.dtype("S4") and utf8.metadata == {"h5py_encoding": "utf-8"}
    assert to_json(utf8)["charSet"] == "H5T_CSET_UTF8"
    vs = to_dtype({"class": "H5T_STRING", "length": "H5T_VARIABLE", "charSet": "H5T_CSET_UTF8"})
    assert vs.kind == "O" and vs.metadata == {"vlen": str} and is_variable(vs) and item_size(vs) is None
    assert to_dtype({"class": "H5T_STRING", "length": "H5T_VARIABLE", "charSet": "H5T_CSET_ASCII"}).metadata == \
        {"vlen": bytes}
    vl = to_dtype({"class": "H5T_VLEN", "base": {"class": "H5T_INTEGER", "base": "H5T_STD_I32BE"}})
    assert vl.metadata == {"vlen": np.dtype(">i4")}
    enum = to_dtype({"class": "H5T_ENUM", "base": {"class": "H5T_INTEGER", "base": "H5T_STD_U16LE"},
                     "members": [{"name": "R", "value": 0}, {"name": "G", "value": 7}]})
    assert enum == np.dtype("<u2") and enum.metadata == {"enum": {"R": 0, "G": 7}}
    assert to_json(enum) == {"class": "H5T_ENUM", "base": {"class": "H5T_INTEGER", "base": "H5T_STD_U16LE"},
                             "mapping": {"R": 0, "G": 7}}
    ref = to_dtype({"class": "H5T_REFERENCE", "base": "H5T_STD_REF_OBJ", "length": 80})
    assert ref == np.dtype("S48") and item_size(ref) == 48      # HSDS sends 48 bytes whatever "length" says
    region = to_dtype({"class": "H5T_REFERENCE", "base": "H5T_STD_REF_DSETREG"})
    assert is_variable(region)
    compound = np.dtype([("n", "<i4"), ("s", VSTR), ("m", ("<f4", (2,)))])
    assert is_variable(compound) and to_dtype(to_json(compound)) == compound
    for dt in (vs, vl, enum, ref, region, np.dtype((">i2", (2, 3)))):
        again = to_dtype(to_json(dt))
        assert again == dt and again.metadata == dt.metadata, dt


@pytest.mark.parametrize("type_json, named", [
    ("H5T_STD_I24LE", "H5T_STD_I24LE"),
    ("H5T_NATIVE_INT", "H5T_NATIVE_INT"),
    ({"class": "H5T_TIME", "base": "H5T_UNIX_D32LE"}, "H5T_TIME"),
    ({"class": "H5T_BITFIELD", "base": "H5T_STD_B8LE"}, "H5T_BITFIELD"),
    ({"class": "H5T_INTEGER", "base": "H5T_IEEE_F32LE"}, "H5T_IEEE_F32LE"),
    ({"class": "H5T_STRING", "length": 0, "charSet": "H5T_CSET_ASCII"}, "length 0"),
    ({"class": "H5T_STRING", "length": 4, "charSet": "H5T_CSET_KOI8"}, "H5T_CSET_KOI8"),
    ({"class": "H5T_ARRAY", "dims": [2], "base": {"class": "H5T_STRING", "length": "H5T_VARIABLE"}}, "variable"),
    ({"class": "H5T_VLEN", "base": {"class": "H5T_VLEN", "base": "H5T_STD_I8LE"}}, "sequence"),
    ({"class": "H5T_ENUM", "base": "H5T_IEEE_F32LE", "mapping": {"a": 1}}, "enum"),
    ({"class": "H5T_REFERENCE", "base": "H5T_STD_REF_ATTR"}, "H5T_STD_REF_ATTR"),
    ({"class": "H5T_COMPOUND", "fields": []}, "no fields"),
    ({"class": "H5T_OPAQUE"}, "'size'"),
    ([1, 2], "[1, 2]"),
])
def test_unmappable_types_are_named(type_json, named):
    with pytest.raises(TypeNotMapped, match=named.replace("[", r"\[").replace("]", r"\]")):
        to_dtype(type_json)


@pytest.mark.parametrize("dt", ["c8", "M8[s]", "?", "U4", np.dtype({"names": ["a", "b"], "formats": ["u1", "<i4"],
                                                                    "offsets": [0, 4]}), "O"])
def test_numpy_types_hsds_cannot_hold(dt):
    with pytest.raises(TypeNotMapped):
        to_json(np.dtype(dt))


# the binary form -------------------------------------------------------------------------------

def _obj(items, dt):
    out = np.empty(len(items), dtype=dt)
    for i, v in enumerate(items):
        out[i] = v
    return out


BINARY_CASES = {
    "vlen str": _obj(["a", "héllo", "", "\u2603" * 40], VSTR),
    "vlen bytes": _obj([b"x", b"", b"\x00\xff" * 3], VBYTES),
    "vlen i4": _obj([np.arange(3, dtype="<i4"), np.arange(1, dtype="<i4"), np.arange(7, dtype="<i4")], vlen("<i4")),
    # elements in the base's byte order: h5json writes an element's bytes as they are (a '<f8'
    # element of a '>f8' sequence goes unswapped), encode converts them to the base type
    "vlen >f8": _obj([np.array([1.5, -0.0], ">f8"), np.array([np.inf], ">f8")], vlen(">f8")),
    "compound": _obj([(1, "x", np.arange(2, dtype="<f8")), (-2, "é", np.arange(5, dtype="<f8"))],
                     np.dtype([("n", "<i4"), ("s", VSTR), ("v", vlen("<f8"))])),
}


@pytest.mark.parametrize("case", list(BINARY_CASES))
def test_variable_length_bytes_are_hsdss(case):
    """encode gives the bytes h5json's arrayToBytes (which HSDS runs) gives, and decode reads
    them back, element for element."""
    arr = BINARY_CASES[case]
    theirs = array_util.arrayToBytes(arr)
    assert encode(arr, arr.dtype) == theirs
    back = decode(theirs, arr.dtype, len(arr))
    assert back.dtype == arr.dtype and back.dtype.metadata == arr.dtype.metadata
    assert_same(back, arr, case)
    # and h5json reads what encode wrote
    assert_same(array_util.bytesToArray(encode(arr, arr.dtype), arr.dtype, (len(arr),)), arr, case)


def test_the_documented_layout():
    """Each element: a 4-byte little-endian count of bytes, then the bytes; an empty string is
    a count of 0 (the sample is what the local HSDS sent for h5pyd's ["a", "héllo", ""])."""
    raw = b"\x01\x00\x00\x00a\x06\x00\x00\x00h\xc3\xa9llo\x00\x00\x00\x00"
    assert decode(raw, VSTR, 3).tolist() == ["a", "héllo", ""]
    seq = b"\x0c\x00\x00\x00" + np.arange(3, dtype="<i4").tobytes() + b"\x04\x00\x00\x00\x00\x00\x00\x00"
    got = decode(seq, vlen("<i4"), 2)
    assert [x.tolist() for x in got] == [[0, 1, 2], [0]]     # the count is bytes (12), not elements (3)


@pytest.mark.parametrize("raw, dt, count, message", [
    (b"\x01\x00", VSTR, 1, "length runs past the end"),
    (b"\x05\x00\x00\x00abc", VSTR, 1, "says 5 bytes, 3 remain"),
    (b"\xff\xff\xff\xffabc", VSTR, 1, "says -1 bytes"),
    (b"\x01\x00\x00\x00ab", VSTR, 1, "1 bytes after the last"),
    (b"\x02\x00\x00\x00\xc3\x28", VSTR, 1, "element 0 is not UTF-8"),
    (b"\x03\x00\x00\x00abc", vlen("<i2"), 1, "no whole number"),
    (b"\x01\x00\x00\x00a", VSTR, 2, "element 1's length"),
    (b"\x00" * 10, np.dtype("<i4"), 3, "10 bytes for 3 elements"),
    (b"\x01\x00\x00\x00" + b"x" * 3, np.dtype([("a", "<i4"), ("s", VSTR)]), 1, "element 0's length"),
])
def test_hostile_bytes_are_refused(raw, dt, count, message):
    with pytest.raises(FormatError, match=message):
        decode(raw, dt, count, "test value")


def test_a_lying_count_allocates_nothing():
    raw = COUNT.pack(2**31 - 1) + b"x" * 16
    tracemalloc.start()
    try:
        with pytest.raises(FormatError, match="says 2147483647 bytes, 16 remain"):
            decode(raw, VBYTES, 1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_json_values_for_variable_types():
    arr = BINARY_CASES["compound"]
    assert values.to_json(arr, arr.dtype) == [[1, "x", [0.0, 1.0]], [-2, "é", [0.0, 1.0, 2.0, 3.0, 4.0]]]
    assert values.to_json(np.array("t", dtype=VSTR), VSTR) == "t"
    with pytest.raises(TypeNotMapped, match="not UTF-8"):
        values.to_json(_obj([b"\xff"], VBYTES), VBYTES)


# through the local HSDS, both ways ---------------------------------------------------------------

def _cases() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    out: dict[str, np.ndarray] = {}
    for order in "<>":
        for code in ("i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8"):
            info = np.iinfo(code)
            out[f"{code}{order}"] = np.array([info.min, info.max, 0, 1], dtype=order + code)
        for code in ("f2", "f4", "f8"):
            special = [np.nan, np.inf, -np.inf, -0.0, np.finfo(code).tiny / 2, np.finfo(code).max]
            out[f"{code}{order}"] = np.array(special + list(rng.random(4)), dtype=order + code)
    out["S1"] = np.array([b"a", b"", b"z"], dtype="S1")
    out["S10"] = np.array([b"hello", b"ten bytes!", b"a\x00b"], dtype="S10")
    out["utf8 S6"] = np.array(["é".encode(), b"ab"], dtype=np.dtype("S6", metadata={"h5py_encoding": "utf-8"}))
    out["vlen str"] = BINARY_CASES["vlen str"]
    out["vlen ascii"] = _obj([b"x", b"", b"plain"], VBYTES)
    out["compound"] = np.array([(1, 2.5, b"ab", [[1, 2, 3], [4, 5, 6]]), (-1, -0.0, b"", [[0] * 3] * 2)],
                               dtype=[("a", "<i2"), ("b", ">f8"), ("c", "S3"), ("m", "<u4", (2, 3))])
    out["nested"] = np.array([((1, 2), 3)], dtype=[("in", [("x", "u1"), ("y", ">i8")]), ("z", "<f4")])
    out["enum"] = np.array([0, 1, 2, 1], dtype=np.dtype("u1", metadata={"enum": {"R": 0, "G": 1, "B": 2}}))
    out["bool enum"] = np.array([1, 0, 1], dtype=np.dtype("i1", metadata={"enum": {"FALSE": 0, "TRUE": 1}}))
    out["opaque"] = np.frombuffer(rng.bytes(21), dtype="V7")
    out["vlen i4"] = BINARY_CASES["vlen i4"]
    out["vlen >f4"] = _obj([np.arange(3, dtype=">f4"), np.array([], ">f4"), np.array([7.5], ">f4")], vlen(">f4"))
    out["compound vlen"] = _obj([(1, "x"), (2, "héllo"), (3, "")], np.dtype([("n", "<i4"), ("s", VSTR)]))
    return out


CASES = _cases()
# attributes h5pyd 1.0.0 cannot write (HSDS answers its PUT with 400): h5pyd sends their values as
# JSON text; the client sends base64 of the bytes, which HSDS takes (test_h5pyd_reads_...)
H5PYD_CANNOT_WRITE_ATTRIBUTE = {"utf8 S6", "opaque"}
# HSDS keeps attribute values as JSON; it turns a fixed-length UTF-8 one holding non-ASCII text
# back into bytes as ASCII (h5json's jsonToArray) and fails: it takes the value, then answers 400
# to any read of it as bytes, and h5pyd cannot read it either
UNREADABLE_ATTRIBUTE = {"utf8 S6"}


def _h5pyd_dtype(dt: np.dtype) -> np.dtype:
    """The dtype h5pyd is given to write a case (its own tags for booleans and strings)."""
    if (dt.metadata or {}).get("enum") == {"FALSE": 0, "TRUE": 1}:
        return np.dtype(bool)
    return dt


@pytest.fixture(scope="module")
def written_by_h5pyd(hsds):
    domain = hsds.domain("types_by_h5pyd.h5")
    with h5pyd_file(hsds, domain, "w") as f:
        g = f.create_group("g")
        for name, arr in CASES.items():
            data = arr.astype(bool) if _h5pyd_dtype(arr.dtype) == np.dtype(bool) else arr
            f.create_dataset(name, data=data, dtype=_h5pyd_dtype(arr.dtype))
            if name not in H5PYD_CANNOT_WRITE_ATTRIBUTE:
                f["g"].attrs[name] = data
        refs = f.create_dataset("refs", data=np.array([g.ref, f.ref], dtype=h5pyd.special_dtype(ref=h5pyd.Reference)))
        assert refs is not None
        f.create_dataset("scalar", data=np.float64(3.25))
    return domain


@pytest.mark.parametrize("name", list(CASES))
def test_client_reads_what_h5pyd_wrote(hsds, new_client, written_by_h5pyd, name):
    client = new_client(written_by_h5pyd)
    want = CASES[name]
    ds = client.get_dataset(client.resolve(f"/{name}"))
    assert ds.dtype == want.dtype and (ds.dtype.metadata or {}) == (want.dtype.metadata or {}), ds.type
    ours = client.read(ds.id, ds.dtype, whole(ds.shape))
    with h5pyd_file(hsds, written_by_h5pyd) as f:
        assert_same(ours, f[name][...], name)
    assert_same(ours, want, name)          # and h5pyd wrote what it was given
    if name in H5PYD_CANNOT_WRITE_ATTRIBUTE:
        return
    attr = client.get_attribute(client.resolve("/g"), name)
    assert attr.dtype == want.dtype and attr.shape == want.shape
    with h5pyd_file(hsds, written_by_h5pyd) as f:
        assert_same(attr.value, f["g"].attrs[name], f"attribute {name}")
    assert_same(attr.value, want, name)


def test_references_and_scalars(hsds, new_client, written_by_h5pyd):
    client = new_client(written_by_h5pyd)
    ds = client.get_dataset(client.resolve("/refs"))
    assert ds.type["base"] == "H5T_STD_REF_OBJ"
    got = client.read(ds.id, ds.dtype, whole(ds.shape))
    assert [v.rstrip(b"\x00").decode() for v in got] == [client.resolve("/g"), client.get_domain().root]
    scalar = client.get_dataset(client.resolve("/scalar"))
    assert scalar.shape == () and client.read(scalar.id, scalar.dtype, None).tolist() == 3.25


@pytest.mark.parametrize("name", list(CASES))
def test_h5pyd_reads_what_the_client_wrote(hsds, new_client, name):
    client = new_client()
    root = client.create_domain().root
    want = CASES[name]
    ds = client.create_dataset(want.dtype, want.shape, parent=root, name="d")
    client.write(ds.id, want.dtype, whole(want.shape), want)
    client.put_attribute(root, "a", want, want.dtype)     # no flush: h5pyd asks the same service
    assert_same(client.read(ds.id, want.dtype, whole(want.shape)), want, name)
    if name in UNREADABLE_ATTRIBUTE:
        with pytest.raises(HsdsError) as e:
            client.get_attribute(root, "a")
        assert e.value.status == 400 and e.value.errno == errno.EINVAL
    else:
        assert_same(client.get_attribute(root, "a").value, want, name)
    with h5pyd_file(hsds, client.domain) as f:
        assert f["d"].dtype == _h5pyd_dtype(want.dtype)
        assert_same(want, f["d"][...], name)
        if name not in UNREADABLE_ATTRIBUTE:
            assert_same(want, f.attrs["a"], f"attribute {name}")
