"""Datatypes the tests build with h5py's low-level API (libhdf5's own encodings): strings with
each padding, opaque, partial integers, custom floats, nested and aligned compounds, and a file
with revised (H5R_ref_t) references written through libhdf5 itself."""

from __future__ import annotations

import ctypes
import os

import h5py
import numpy as np
import pytest
from h5py import h5t


def with_strpad(tid, pad):
    t = tid.copy()
    t.set_strpad(pad)
    return t


def fixed_str(n, cset=h5t.CSET_ASCII, pad=h5t.STR_NULLPAD):
    t = h5t.C_S1.copy()
    t.set_size(n)
    t.set_cset(cset)
    t.set_strpad(pad)
    return t


def opaque(n, tag):
    t = h5t.py_create(np.dtype(f"V{n}"))
    t.set_tag(tag)
    return t


def partial_int(size, prec, off, signed=True):
    t = (h5t.STD_I64LE if signed else h5t.STD_U64LE).copy()
    t.set_size(size)
    t.set_precision(prec)
    t.set_offset(off)
    return t


def custom_float():
    t = h5t.IEEE_F32LE.copy()
    t.set_fields(31, 21, 10, 0, 21)    # 10-bit exponent, 21-bit mantissa
    t.set_ebias(511)
    return t


def vax_float():
    t = h5t.IEEE_F64LE.copy()
    t.set_order(h5t.ORDER_VAX)
    return t


def bfloat16():
    t = h5t.IEEE_F32LE.copy()
    t.set_fields(15, 7, 8, 0, 7)
    t.set_offset(0)
    t.set_precision(16)
    t.set_size(2)
    t.set_ebias(127)
    return t


def py(dtype):
    return h5t.py_create(dtype, logical=True)


NESTED = np.dtype([("id", "<u8"), ("pos", [("x", ">f4"), ("y", ">f4")], (2,)),
                   ("name", "S5"), ("flags", "u1", (3,))])


ALIGNED = np.dtype({"names": ["a", "b"], "formats": ["<i2", "<f8"], "offsets": [0, 8], "itemsize": 24})


PLAIN = [
    *[(n, lambda n=n: py(np.dtype(n)), np.dtype(n)) for n in
      ["<i1", "<u1", "<i2", ">i2", "<u2", ">u4", "<i4", "<i8", ">u8", "<f2", ">f2", "<f4", ">f4", "<f8", ">f8"]],
    ("native long double", lambda: h5t.NATIVE_LDOUBLE, np.dtype(np.longdouble)),
    ("S10", lambda: py(np.dtype("S10")), np.dtype("S10")),
    ("S7 utf8 nullterm", lambda: fixed_str(7, h5t.CSET_UTF8, h5t.STR_NULLTERM), np.dtype("S7")),
    ("S3 spacepad", lambda: fixed_str(3, h5t.CSET_ASCII, h5t.STR_SPACEPAD), np.dtype("S3")),
    ("compound", lambda: py(np.dtype([("a", "<i4"), ("b", ">f8")])), np.dtype([("a", "<i4"), ("b", ">f8")])),
    ("compound aligned", lambda: py(ALIGNED), ALIGNED),
    ("compound nested", lambda: py(NESTED), NESTED),
    ("array", lambda: py(np.dtype(("<i4", (2, 3)))), np.dtype(("<i4", (2, 3)))),
    ("array of compound", lambda: py(np.dtype(([("p", "<i2"), ("q", ">f8")], (4,)))),
     np.dtype(([("p", "<i2"), ("q", ">f8")], (4,)))),
    ("enum u1", lambda: py(h5py.enum_dtype({"RED": 0, "GREEN": 1}, basetype="u1")), np.dtype("u1")),
    ("enum >i2", lambda: py(h5py.enum_dtype({"A": -5, "B": 300, "C": 7}, basetype=">i2")), np.dtype(">i2")),
    ("opaque", lambda: py(np.dtype("V7")), np.dtype("V7")),
    ("opaque tag", lambda: opaque(5, b"hello world tag"), np.dtype("V5")),
    ("opaque tag 8", lambda: opaque(3, b"12345678"), np.dtype("V3")),
    ("bitfield 8", lambda: h5t.STD_B8LE, np.dtype("u1")),
    ("bitfield 16 BE", lambda: h5t.STD_B16BE, np.dtype(">u2")),
    ("bitfield 32", lambda: h5t.STD_B32LE, np.dtype("<u4")),
    ("bitfield 64 BE", lambda: h5t.STD_B64BE, np.dtype(">u8")),
    ("complex F32LE", lambda: h5t.COMPLEX_IEEE_F32LE, np.dtype("<c8")),
    ("complex F64BE", lambda: h5t.COMPLEX_IEEE_F64BE, np.dtype(">c16")),
    ("h5py complex compound", lambda: py(np.dtype("c8")), None),
    ("vlen str utf8", lambda: py(h5py.string_dtype()), None),
    ("vlen str ascii", lambda: py(h5py.string_dtype("ascii")), None),
    ("vlen str spacepad", lambda: with_strpad(py(h5py.string_dtype()), h5t.STR_SPACEPAD), None),
    ("vlen seq i2", lambda: py(h5py.vlen_dtype(np.int16)), None),
    ("vlen seq compound", lambda: py(h5py.vlen_dtype(np.dtype([("a", "<i4"), ("b", "S2")]))), None),
    ("vlen of vlen str", lambda: h5t.vlen_create(py(h5py.string_dtype())), None),
    ("object reference", lambda: h5t.STD_REF_OBJ, None),
    ("region reference", lambda: h5t.STD_REF_DSETREG, None),
    ("int 12-bit unsigned", lambda: partial_int(2, 12, 0, signed=False), np.dtype("<u2")),
]


def _libhdf5():
    libdir = os.path.join(os.path.dirname(h5py.__file__), "..", "h5py.libs")
    names = [n for n in os.listdir(libdir) if n.startswith("libhdf5-")] if os.path.isdir(libdir) else []
    if not names:
        pytest.skip("bundled libhdf5 not found")
    return ctypes.CDLL(os.path.join(libdir, names[0]))


def _write_revised_refs(path):
    """Write H5R_OBJECT2 / H5R_DATASET_REGION2 / H5R_ATTR references with libhdf5's C API
    (h5py has no API for them)."""
    lib = _libhdf5()
    hid = ctypes.c_int64
    for fn in ("H5Fcreate", "H5Screate_simple", "H5Dcreate2", "H5Acreate2", "H5Gcreate2"):
        getattr(lib, fn).restype = hid
    lib.H5open()
    std_ref = hid.in_dll(lib, "H5T_STD_REF_g").value
    native_int = hid.in_dll(lib, "H5T_NATIVE_INT_g").value
    fid = lib.H5Fcreate(path.encode(), 2, hid(0), hid(0))     # H5F_ACC_TRUNC
    assert fid > 0
    dims = (ctypes.c_uint64 * 2)(3, 4)
    sid = lib.H5Screate_simple(2, dims, None)
    did = lib.H5Dcreate2(hid(fid), b"x", hid(native_int), hid(sid), hid(0), hid(0), hid(0))
    data = (ctypes.c_int * 12)(*range(12))
    assert lib.H5Dwrite(hid(did), hid(native_int), hid(0), hid(0), hid(0), data) >= 0
    one = (ctypes.c_uint64 * 1)(1)
    asid = lib.H5Screate_simple(1, one, None)
    aid = lib.H5Acreate2(hid(did), b"units", hid(native_int), hid(asid), hid(0), hid(0))
    lib.H5Aclose(hid(aid))
    gid = lib.H5Gcreate2(hid(fid), b"g", hid(0), hid(0), hid(0))
    lib.H5Gclose(hid(gid))

    refs = (ctypes.c_ubyte * (64 * 4))()
    ref = lambda i: ctypes.byref(refs, 64 * i)
    assert lib.H5Rcreate_object(hid(fid), b"/g", hid(0), ref(0)) >= 0
    start = (ctypes.c_uint64 * 2)(1, 0)
    stride = (ctypes.c_uint64 * 2)(1, 2)
    count = (ctypes.c_uint64 * 2)(2, 2)
    assert lib.H5Sselect_hyperslab(hid(sid), 0, start, stride, count, None) >= 0
    assert lib.H5Rcreate_region(hid(fid), b"/x", hid(sid), hid(0), ref(1)) >= 0
    assert lib.H5Rcreate_attr(hid(fid), b"/x", b"units", hid(0), ref(2)) >= 0
    n4 = (ctypes.c_uint64 * 1)(4)
    rsid = lib.H5Screate_simple(1, n4, None)
    rdid = lib.H5Dcreate2(hid(fid), b"refs", hid(std_ref), hid(rsid), hid(0), hid(0), hid(0))
    assert rdid > 0
    assert lib.H5Dwrite(hid(rdid), hid(std_ref), hid(0), hid(0), hid(0), refs) >= 0
    for i in range(3):
        lib.H5Rdestroy(ref(i))
    for fn, h in (("H5Dclose", rdid), ("H5Dclose", did), ("H5Sclose", rsid), ("H5Sclose", sid),
                  ("H5Sclose", asid), ("H5Fclose", fid)):
        getattr(lib, fn)(hid(h))
