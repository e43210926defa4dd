"""Attribute values from text (h5fs.model.attribute_values): the text the mount shows for
attributes h5py wrote (views.format_value, what getxattr answers) parses back to the bytes h5py
stored; bad text is refused; values stored as libhdf5's H5Awrite stores them (twin files); new
string attributes equal to h5py's."""

from __future__ import annotations

import errno
import os
import shutil
from dataclasses import replace

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from global_heap_support import commit, new_file, rewrite_attribute

from h5fs.check import check
from h5fs.errors import CannotWrite, InvalidWrite
from h5fs.format import global_heap as gh
from h5fs.format.codec import Reader, Sizes, Writer
from h5fs.format.messages import attribute as attr_msg
from h5fs.fuse.views import format_value
from h5fs.model import attribute_values as av
from h5fs.model import messages as M
from h5fs.model.file import H5File
from h5fs.model.libver import libver_for_superblock
from h5fs.storage.object_header.edit import rewrite_message
from h5fs.storage.global_heap import GlobalHeapReader

STR = h5py.string_dtype()
INTS = [f"{o}{k}{n}" for o in "<>" for k in "iu" for n in (1, 2, 4, 8)]
FLOATS = [f"{o}f{n}" for o in "<>" for n in (2, 4, 8)] + ["g"]
COMPLEX = ["<c8", ">c8", "<c16", ">c16", "G"]
SHAPES = [(), (1,), (5,), (2, 3), (0,), (0, 3), (3, 0), (2, 1, 2)]


def low_level(f: h5py.File, name: str, tid, data: np.ndarray, shape=(), mtype=None) -> None:
    """An attribute of an HDF5 type h5py's high level does not make (libhdf5 converts `data`
    from `mtype`)."""
    space = h5py.h5s.create(h5py.h5s.SCALAR) if shape == () else h5py.h5s.create_simple(shape)
    h5py.h5a.create(f.id, name.encode(), tid, space).write(np.ascontiguousarray(data), mtype=mtype or tid)


def values(dtype: np.dtype, shape, rng) -> np.ndarray:
    n = int(np.prod(shape))
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        v = rng.integers(info.min, info.max, n, dtype=dtype.newbyteorder("="), endpoint=True).astype(dtype)
        v[: min(n, 2)] = [info.min, info.max][: min(n, 2)]
    elif dtype.kind == "f":
        v = (rng.standard_normal(n) * 10.0 ** rng.integers(-5, 5, n)).astype(dtype)
        v[: min(n, 6)] = np.array([np.nan, np.inf, -np.inf, -0.0, np.finfo(dtype).max, np.finfo(dtype).tiny],
                                  dtype)[: min(n, 6)]
    elif dtype.kind == "c":
        part = values(np.dtype(f"{dtype.byteorder}f{dtype.itemsize // 2}"), (2 * n,), rng)
        v = np.empty(n, dtype)
        v.real, v.imag = part[0::2], part[1::2]
        v[: min(n, 2)] = [2j, complex(-0.0, -0.0)][: min(n, 2)]
    else:
        v = rng.integers(0, 2, n).astype(bool)
    return v.reshape(shape)


def same_values(parsed: bytes, stored: bytes, dtype: np.dtype) -> bool:
    """Long doubles: NumPy leaves their padding bytes undefined, so compare values."""
    a, b = np.frombuffer(parsed, dtype), np.frombuffer(stored, dtype)
    return bool(np.array_equal(a, b, equal_nan=True) and np.array_equal(np.signbit(a.real), np.signbit(b.real)))


def roundtrip(path) -> int:
    """Every root attribute's shown text parses back to what h5py stored; the count."""
    with H5File.open(str(path)) as hf:
        heap = GlobalHeapReader(hf.reader)
        attrs = hf.root.attributes()
        for a in attrs:
            text = format_value(a.value)
            parsed = av.parse_value(text, a.datatype, a.dataspace)
            stored = a.msg.data[: a.dataspace.count * a.datatype.size]
            if isinstance(parsed, list):
                elements = Reader(stored, 0, hf.sizes, "test")
                heap_bytes = []
                for _ in range(a.dataspace.count):
                    length = elements.u32()
                    heap_bytes.append(heap.get_id(gh.decode_heap_id(elements))[:length])
                assert parsed == heap_bytes, a.name
            elif a.value.dtype.kind in "fc" and a.value.dtype.itemsize > 8 + 8 * (a.value.dtype.kind == "c"):
                assert same_values(parsed, stored, a.value.dtype), a.name
            else:
                assert parsed == stored, (a.name, text)
        return len(attrs)


def test_numbers_roundtrip(tmp_path):
    rng = np.random.default_rng(7)
    path = tmp_path / "n.h5"
    with h5py.File(path, "w") as f:
        for code in INTS + FLOATS + COMPLEX + ["?"]:
            for shape in SHAPES:
                f.attrs[f"{code}{shape}"] = values(np.dtype(code), shape, rng)
        for code in ("<i4", "<f8", "?"):
            f.attrs[f"empty {code}"] = h5py.Empty(code)
        f.attrs["enum"] = np.array([[0, 5], [7, 5]], dtype=h5py.enum_dtype({"RED": 0, "GREEN": 5, "BLUE": 7},
                                                                           basetype=">i2"))
        f.attrs["enum scalar"] = np.array(7, dtype=h5py.enum_dtype({"A": 7, "B": -3}, basetype="i8"))
        padded = h5py.h5t.STD_I32BE.copy()
        padded.set_precision(12)
        padded.set_offset(4)
        padded.set_pad(h5py.h5t.PAD_ONE, h5py.h5t.PAD_ONE)
        low_level(f, "padded int", padded, np.array([-2048, 2047, -1, 0], "=i4"), (4,), h5py.h5t.NATIVE_INT32)
        low_level(f, "bitfield", h5py.h5t.STD_B16LE, np.array([0, 0xFFFF, 0x1234], "<u2"), (3,))
    assert roundtrip(path) == (len(INTS + FLOATS + COMPLEX) + 1) * len(SHAPES) + 3 + 4


def test_strings_roundtrip(tmp_path):
    path = tmp_path / "s.h5"
    with h5py.File(path, "w") as f:
        f.attrs["vlen"] = "héllo wörld"
        f.attrs["vlen empty"] = ""
        f.attrs["vlen array"] = ["a", "", "ccc", "ünï"]
        f.attrs["vlen 2d"] = np.array([["a", "b"], ["c", "d"]], dtype=STR)
        f.attrs["vlen ascii"] = b"bytes ~"     # (non-ASCII bytes show as U+FFFD: not kept)
        f.attrs["vlen one"] = ["only\nline"]
        f.attrs["fixed"] = np.bytes_(b"hello")
        f.attrs["fixed array"] = np.array([b"ab", b"", b"abcd"], dtype="S4")
        f.attrs["fixed 2d"] = np.array([[b"x", b"yy"], [b"zzz", b"w"]], dtype="S3")
        f.attrs["fixed empty"] = np.zeros((0,), dtype="S3")
        for pad in (h5py.h5t.STR_NULLTERM, h5py.h5t.STR_SPACEPAD):
            for cset in (h5py.h5t.CSET_ASCII, h5py.h5t.CSET_UTF8):
                data = np.array([b"ab", "été".encode(), b"sixsix"], "S6")
                mtype = h5py.h5t.py_create(data.dtype).copy()     # null-padded: libhdf5 converts
                mtype.set_cset(cset)
                tid = mtype.copy()
                tid.set_strpad(pad)
                low_level(f, f"fixed pad{pad} cset{cset}", tid, data, (3,), mtype)
    assert roundtrip(path) == 14


def test_mounted_values_roundtrip(tmp_path, mount):
    """The bytes getxattr answers through a real mount parse back to the stored values."""
    path = tmp_path / "m.h5"
    rng = np.random.default_rng(3)
    with h5py.File(path, "w") as f:
        for code in ("<i2", ">u8", "<f4", ">f8", "<c16", "?"):
            f.attrs[code] = values(np.dtype(code), (2, 3), rng)
        f.attrs["text"] = ["a b", "ü", ""]
        f.attrs["fixed"] = np.bytes_(b"abc")
    mp = mount(path)
    with H5File.open(str(path)) as hf:
        for a in hf.root.attributes():
            parsed = av.parse_value(os.getxattr(mp, f"user.{a.name}"), a.datatype, a.dataspace)
            if a.name == "text":
                assert parsed == [b"a b", "ü".encode(), b""]
            else:
                assert parsed == a.msg.data[: a.dataspace.count * a.datatype.size], a.name


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(INTS + FLOATS + COMPLEX + ["?"]),
       st.lists(st.integers(0, 4), max_size=3).map(tuple), st.integers(0, 2 ** 32 - 1))
def test_random_values_roundtrip(tmp_path_factory, code, shape, seed):
    path = tmp_path_factory.mktemp("av") / "r.h5"
    with h5py.File(path, "w") as f:
        f.attrs["x"] = values(np.dtype(code), shape, np.random.default_rng(seed))
    assert roundtrip(path) == 1


def attribute(path, name):
    hf = H5File.open(str(path))
    return next(a for a in hf.root.attributes() if a.name == name)


@pytest.fixture(scope="module")
def kinds(tmp_path_factory):
    path = tmp_path_factory.mktemp("kinds") / "k.h5"
    with h5py.File(path, "w") as f:
        f.attrs["i1"] = np.int8(1)
        f.attrs["u1 array"] = np.arange(3, dtype="u1")
        f.attrs["f4"] = np.float32(1)
        f.attrs["f8 2d"] = np.zeros((2, 2))
        f.attrs["bool"] = np.True_
        f.attrs["enum"] = np.array(0, dtype=h5py.enum_dtype({"RED": 0, "GREEN": 5}, basetype="u1"))
        f.attrs["S3"] = np.bytes_(b"abc")
        f.attrs["S3 array"] = np.array([b"a", b"b"], dtype="S3")
        f.attrs["vlen"] = "x"
        f.attrs["vlen array"] = ["x", "y"]
        f.attrs["vlen ascii"] = b"x"
        f.attrs["empty"] = h5py.Empty("i4")
        f.attrs["compound"] = np.array((1, 2.0), dtype=[("a", "i4"), ("b", "f8")])
        f.attrs["opaque"] = np.void(b"1234")
        f.attrs["ref"] = f.ref
        seq = np.empty(1, dtype=h5py.vlen_dtype("i4"))
        seq[0] = np.arange(3, dtype="i4")
        f.attrs["vlen seq"] = seq
    return path


@pytest.mark.parametrize("name, text", [
    ("i1", b"128"), ("i1", b"-129"), ("i1", b"1.5"), ("i1", b"abc"), ("i1", b""), ("i1", b"[1]"),
    ("i1", b"1 2"), ("u1 array", b"[1, 2]"), ("u1 array", b"[1, 2, 256]"), ("u1 array", b"[1, 2, -1]"),
    ("u1 array", b"[1, 2, 3"), ("u1 array", b"[1, 2, 3]]"), ("u1 array", b"[1, , 3]"), ("u1 array", b"5"),
    ("u1 array", b"[[1, 2, 3]]"), ("f4", b"1e39"), ("f4", b"one"), ("f4", b"\xff"), ("f8 2d", b"[[0, 0], [0]]"),
    ("f8 2d", b"[0, 0, 0, 0]"), ("f8 2d", b"[[0, 0], [0, 1e309]]"), ("bool", b"yes"), ("bool", b"2"),
    ("enum", b"3"), ("enum", b"BLUE"), ("S3", b"abcd"), ("S3 array", b"a"), ("S3 array", b"a\nb\nc"),
    ("vlen", b"a\0b"), ("vlen", b"\xff"), ("vlen array", b"one line"), ("empty", b"[1]"), ("empty", b"1"),
    ("u1 array", b"[" * 100), ("u1 array", b"[1 2 3]"),
])
def test_bad_text_refused(kinds, name, text):
    a = attribute(kinds, name)
    with pytest.raises(InvalidWrite) as exc:
        av.parse_value(text, a.datatype, a.dataspace)
    assert exc.value.errno == errno.EINVAL


@pytest.mark.parametrize("name, text, raw", [
    ("i1", b" -128 ", b"\x80"), ("u1 array", b"[ 1,2 ,\n 3 ]", b"\x01\x02\x03"), ("bool", b"False", b"\0"),
    ("bool", b"TRUE", b"\1"), ("bool", b"1", b"\1"), ("enum", b"GREEN", b"\5"), ("enum", b"5", b"\5"),
    ("S3", b"", b"\0\0\0"), ("S3 array", b"abc\n", b"abc\0\0\0"), ("empty", b"[]", b""),
    ("vlen ascii", b"\xff\xfe", [b"\xff\xfe"]), ("vlen array", b"\n", [b"", b""]),
])
def test_other_accepted_text(kinds, name, text, raw):
    a = attribute(kinds, name)
    assert av.parse_value(text, a.datatype, a.dataspace) == raw


@pytest.mark.parametrize("name", ["compound", "opaque", "ref", "vlen seq"])
def test_types_not_written_from_text(kinds, name):
    a = attribute(kinds, name)
    with pytest.raises(CannotWrite):
        av.parse_value(format_value(a.value), a.datatype, a.dataspace)


def test_conversion_order_as_libhdf5():
    """H5T__conv_vlen's order, as observed on h5py-written string arrays (heap indices)."""
    assert av.conversion_order(4, 8, 16) == [2, 3, 1, 0]
    assert av.conversion_order(8, 8, 16) == [4, 5, 6, 7, 2, 3, 1, 0]
    assert av.conversion_order(1, 8, 16) == [0]
    assert av.conversion_order(3, 8, 8) == [0, 1, 2]


# ---------------------------------------------------------------------------- stored values

def strings(items) -> np.ndarray:
    """An array of str (what the mount decodes vlen strings into)."""
    out = np.empty(np.shape(items), dtype=object)
    out[...] = items
    return out


def engine_setattr(hf: H5File, name: str, text: bytes) -> None:
    a = next(x for x in hf.root.attributes() if x.name == name)
    txn = hf.store.begin()
    rewrite_attribute(hf, txn, name, av.store_value(txn, text, a.datatype, a.dataspace, a.msg.data))
    commit(hf, txn)


def heap_state(path) -> dict:
    """Each root attribute's stored value, and the collections its vlen elements name."""
    out = {}
    with H5File.open(str(path)) as hf:
        heap = GlobalHeapReader(hf.reader)
        for a in hf.root.attributes():
            out[a.name] = a.msg.data
            if a.datatype.class_name == "variable-length":
                elements = Reader(a.msg.data, 0, hf.sizes, "test")
                for _ in range(a.dataspace.count):
                    elements.u32()
                    hid = gh.decode_heap_id(elements)
                    out[hid.address] = heap.collection(hid.address).entries
    return out


@pytest.mark.parametrize("sizes", [(8, 8), (4, 4), (2, 2)], ids=lambda s: f"O{s[0]}")
@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_store_value_as_h5awrite(tmp_path, sizes, libver):
    """Values replaced by libhdf5 (h5py writing through the attribute) and by the engine from
    the text the mount would show: identical attributes and collections."""
    a, b = tmp_path / "libhdf5.h5", tmp_path / "engine.h5"
    with new_file(a, sizes, libver) as f:
        f.attrs["s"] = "one"
        f.attrs["arr"] = ["x", "", "zz", "w" * 40, "v"]
        f.attrs["arr2"] = np.array([["p", "q"], ["", "s"]], dtype=STR)
        f.attrs["num"] = np.arange(6, dtype=">i4").reshape(2, 3)
        f.attrs["fix"] = np.array([b"ab", b"cd"], dtype="S3")
    shutil.copy(a, b)
    edits = [("arr", strings(["1", "22", "", "4" * 300, "5"])), ("s", strings("two")),
             ("arr2", strings([["a", ""], ["c", "d"]])), ("num", np.arange(6, 12, dtype=">i4").reshape(2, 3)),
             ("fix", np.array([b"x", b"yyy"], "S3")), ("arr", strings([""] * 5))]
    with h5py.File(a, "r+") as f:
        for name, value in edits:
            f.attrs.get_id(name).write(np.asarray(value, dtype=STR if value.dtype.kind == "O" else value.dtype))
    with H5File.open(str(b), writable=True) as hf:
        for name, value in edits:
            engine_setattr(hf, name, format_value(value))     # the text the mount would show
    assert heap_state(b) == heap_state(a)
    assert check(str(b)).sound
    with h5py.File(b, "r+") as f:
        assert f.attrs["arr"].tolist() == [""] * 5
        assert f.attrs["s"] == "two"
        f.attrs["s"] = "libhdf5 again"
        f.attrs["new"] = ["m", "n"]
    with h5py.File(b, "r") as f:
        assert f.attrs["s"] == "libhdf5 again" and f.attrs["new"].tolist() == ["m", "n"]
        assert f.attrs["arr2"].tolist() == [["a", ""], ["c", "d"]]
    assert check(str(b)).sound


@pytest.mark.parametrize("sizes", [(8, 8), (4, 4), (2, 2)], ids=lambda s: f"O{s[0]}")
@pytest.mark.parametrize("libver", ["earliest", "v108", "v110", "latest"])
@pytest.mark.parametrize("name, text", [("plain", "text"), ("ünïcode näme", "ünï"), ("empty", "")])
def test_new_string_attribute_as_h5py(tmp_path, sizes, libver, name, text):
    """The message h5py writes for attrs[name] = text, rebuilt for the file's format bound as
    the mount sees it (its superblock version)."""
    path = tmp_path / "f.h5"
    with new_file(path, sizes, libver) as f:
        f.attrs[name] = text
    with H5File.open(str(path)) as hf:
        a = hf.root.attributes()[0]
        hid = gh.decode_heap_id(Reader(a.msg.data, 4, hf.sizes, "test"))
        ours = av.new_string_attribute(name, text.encode(), hid, hf.sizes, libver_for_superblock(hf.superblock.version))
        n = len(ours.data)         # a version-1 header pads the message: zeros past the value
        assert ours == replace(a.msg, data=a.msg.data[:n], creation_order=None) and not any(a.msg.data[n:])
        assert a.datatype == av.string_datatype(hf.sizes)


@pytest.mark.parametrize("sizes", [(8, 8), (2, 2)], ids=lambda s: f"O{s[0]}")
# a superblock-3 file gets v110's objects (libver_for_superblock): libhdf5 2.0's "latest" writes
# bools and complex numbers with datatype versions 1.10-1.14 readers refuse
@pytest.mark.parametrize("libver", ["earliest", "v108", "v110"])
@pytest.mark.parametrize("dtype, value", [("<f8", 3.5), (">f4", [1.5, -2]), ("<u2", [[1, 2], [3, 4]]),
                                          ("<i8", -7), ("|b1", True), ("|b1", [False, True]),
                                          ("<c16", [1 + 2j, 3]), ("<f4", []), ("|i1", [[[1], [2]]])])
def test_new_attribute_as_h5py(tmp_path, sizes, libver, dtype, value):
    """The message h5py writes for attrs[name] = np.array(value, dtype), rebuilt from the text
    the mount shows for that value and the dtype (`h5fs attr --dtype`)."""
    path = tmp_path / "f.h5"
    with new_file(path, sizes, libver) as f:
        f.attrs["a"] = np.array(value, dtype)
    with H5File.open(str(path)) as hf:
        a = hf.root.attributes()[0]
        text = format_value(a.value)
        ours = av.new_attribute("a", np.dtype(dtype), text, hf.sizes, libver_for_superblock(hf.superblock.version))
        n = len(ours.data)         # a version-1 header pads the message: zeros past the value
        assert ours == replace(a.msg, data=a.msg.data[:n], creation_order=None) and not any(a.msg.data[n:])


@pytest.mark.parametrize("dtype, text", [("S3", b"abc"), ("O", b"1"), ("<f8", b"[1, [2]]"), ("<i4", b"1.5"),
                                         ("<u1", b"256"), ("|b1", b"yes"), ("<f8", b"")])
def test_new_attribute_refusals(dtype, text):
    with pytest.raises(InvalidWrite):
        av.new_attribute("a", np.dtype(dtype), text, Sizes())


@pytest.mark.parametrize("name, text", [("", b"x"), ("a\0b", b"x"), ("n" * 65535, b"x"), ("a", b"x\0"),
                                        ("a", b"\xff")])
def test_new_string_attribute_refusals(tmp_path, name, text):
    path = tmp_path / "f.h5"
    with new_file(path) as f:
        f.attrs["a"] = "a"
    with H5File.open(str(path), writable=True) as hf:
        txn = hf.store.begin()
        with pytest.raises(InvalidWrite):
            av.create_string_attribute(txn, name, text)
        assert txn.empty


@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_created_string_attribute_read_by_h5py(tmp_path, libver):
    """A string attribute's message replaced by one the engine made (the old value's heap object
    released): h5py reads the new string, and edits on."""
    path = tmp_path / "f.h5"
    with new_file(path, libver=libver) as f:
        f.attrs["note"] = "old value"
        f.attrs["other"] = "kept"
    with H5File.open(str(path), writable=True) as hf:
        a = next(x for x in hf.root.attributes() if x.name == "note")
        header = hf.root.header
        raw = next(r for r in header.find(M.ATTRIBUTE) if hf.root.decode(r).name == "note")
        txn = hf.store.begin()
        av.release_value(txn, a.msg.data, a.datatype, a.dataspace)
        msg = av.create_string_attribute(txn, "note", "néw välue".encode(), libver_for_superblock(hf.superblock.version))
        w = Writer(hf.sizes)
        attr_msg.encode(w, msg)
        rewrite_message(txn, header, raw, w.getvalue().ljust(len(raw.data), b"\0"))
        txn.commit()
    with h5py.File(path, "r+") as f:
        assert dict(f.attrs) == {"note": "néw välue", "other": "kept"}
        f.attrs["note"] = "h5py again"
    with h5py.File(path, "r") as f:
        assert dict(f.attrs) == {"note": "h5py again", "other": "kept"}
    assert check(str(path)).sound
