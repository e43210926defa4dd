"""How attributes and facts show as xattrs: names and value text.

Pure functions over engine values; no trio, no pyfuse3, no I/O. (What a directory shows, stat
numbers, the `.npy` header and symlink text are the engine's: h5fs/model/namespace.py.)

xattr naming (see also xattrs.listxattr):
- HDF5 attribute `A` -> `user.A`.
- h5fs facts -> `user.h5fs.<fact>` (dtype, shape, maxshape, chunks, filters, layout, fill_value,
  storage_size, ... plus `kind`, `address`, `path`; the mount root also has `pid`, `file`, `log`,
  and the daemon's counters `requests` (FUSE requests served), `inodes` (inodes the kernel
  holds) and `invalidations` (cache invalidations the kernel took)),
  read by name (`getfattr -n user.h5fs.dtype D`); they are not listed, so `getfattr -d` shows
  exactly the HDF5 attributes. `D.npy` answers the same names but lists nothing.
- An HDF5 attribute whose name starts with `h5fs.` would collide with the facts, so it is shown
  as `user.h5fs.attr.<full name>`: attribute `h5fs.dtype` -> `user.h5fs.attr.h5fs.dtype`.
  No fact name starts with `attr.`, so the two never collide.

xattr value text:
- Strings (vlen or fixed): their bytes (vlen: UTF-8; fixed: as stored, trailing NULs dropped).
  An array of strings: one element per line, joined by `\\n` (no trailing newline).
- Numeric scalars: numpy's `str()` of the element (`3`, `0.1`, `True`, `(1+2j)`).
- Numeric arrays: nested brackets, elements separated by `, `: `[1, 2, 3]`, `[[1, 2], [3, 4]]`
  (readable by `ast.literal_eval`/`json.loads` for finite numbers).
- Compound: `{name: value, ...}` per element; strings inside quoted JSON-style; other kinds
  (references, vlen sequences, enums-as-integers) by their `str()`.
No value gets a trailing newline.
"""

from __future__ import annotations

import json

import numpy as np

ATTR_PREFIX = "user."
FACT_PREFIX = "user.h5fs."
RESERVED_ATTR_PREFIX = "h5fs."          # HDF5 attribute names starting so are shown ...
ESCAPED_ATTR_PREFIX = "user.h5fs.attr."  # ... under this xattr prefix, full name kept
XATTR_NAME_MAX = 255
XATTR_SIZE_MAX = 65536
_FACT, _ESCAPED = FACT_PREFIX.encode(), ESCAPED_ATTR_PREFIX.encode()


# ---------------------------------------------------------------------------------------------
# xattr names


def attribute_xattr_name(name: str) -> bytes | None:
    """The xattr name that shows HDF5 attribute `name`, or None if it cannot be shown."""
    if not name:
        return None
    if name.startswith(RESERVED_ATTR_PREFIX):
        full = ESCAPED_ATTR_PREFIX + name
    else:
        full = ATTR_PREFIX + name
    raw = full.encode("utf-8", "surrogateescape")
    if len(raw) > XATTR_NAME_MAX or b"\0" in raw:
        return None
    return raw


def attribute_name_for_xattr(xname: bytes) -> str | None:
    """The HDF5 attribute name an xattr name refers to (None: not an attribute's xattr)."""
    try:
        s = xname.decode("utf-8", "surrogateescape")
    except Exception:  # pragma: no cover
        return None
    if s.startswith(ESCAPED_ATTR_PREFIX):
        rest = s[len(ESCAPED_ATTR_PREFIX):]
        return rest if rest.startswith(RESERVED_ATTR_PREFIX) else None
    if s.startswith(FACT_PREFIX):
        return None
    if s.startswith(ATTR_PREFIX):
        return s[len(ATTR_PREFIX):]
    return None


def fact_for_xattr(xname: bytes) -> str | None:
    """The fact an xattr name asks for (None: not a fact's name)."""
    if not xname.startswith(_FACT) or xname.startswith(_ESCAPED):
        return None
    return xname[len(_FACT):].decode("utf-8", "replace")


def format_value(value, limit: int | None = None) -> bytes | None:
    """The text of an attribute value (see the module docstring); None when it would exceed
    `limit` bytes, judged before formatting where the element count alone decides it."""
    a = np.asarray(value)
    if limit is not None and a.size - 1 > limit:  # n elements need at least n - 1 separators
        return None
    text = _format(a)
    return None if limit is not None and len(text) > limit else text


def _format(a: np.ndarray) -> bytes:
    if _is_text(a):
        if a.ndim == 0:
            return _text(a[()])
        return b"\n".join(_text(x) for x in a.ravel())
    if a.ndim == 0:
        return _elem(a[()], a.dtype).encode("utf-8", "surrogateescape")
    return _nested(a).encode("utf-8", "surrogateescape")


def _is_text(a: np.ndarray) -> bool:
    if a.dtype.kind in "US":
        return True
    if a.dtype.kind == "O" and a.size > 0:
        return all(isinstance(x, (str, bytes)) for x in a.ravel())
    return False


def _text(x) -> bytes:
    if isinstance(x, bytes):
        return x
    if isinstance(x, np.bytes_):
        return bytes(x)
    return str(x).encode("utf-8", "surrogateescape")


def _elem(x, dtype: np.dtype) -> str:
    if dtype.names:
        parts = []
        for name in dtype.names:
            sub = dtype.fields[name][0]
            parts.append(f"{name}: {_elem(x[name], sub)}")
        return "{" + ", ".join(parts) + "}"
    if dtype.subdtype is not None or isinstance(x, np.ndarray):
        return _nested(np.asarray(x))
    if isinstance(x, (str, np.str_)):
        return json.dumps(str(x), ensure_ascii=False)
    if isinstance(x, (bytes, np.bytes_)):
        return json.dumps(bytes(x).decode("utf-8", "backslashreplace"), ensure_ascii=False)
    return str(x)


def _nested(a: np.ndarray) -> str:
    if a.ndim == 0:
        return _elem(a[()], a.dtype)
    if a.ndim == 1:
        return "[" + ", ".join(_elem(x, a.dtype) for x in a) + "]"
    return "[" + ", ".join(_nested(sub) for sub in a) + "]"
