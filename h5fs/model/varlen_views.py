"""Views of data whose stored bytes are not its values: variable-length data, references, and
numbers NumPy cannot hold as stored (non-IEEE floats, integers with padding bits).

- `.npy` view: the array `values.to_npy` builds (vlen strings and references as fixed-width
  unicode, vlen sequences as {length, values} records, numbers converted; see dtypes.py).
  Datasets of fixed-size converted numbers convert per read (Dataset._converted_range) and keep
  their stored bytes as the raw view; only vlen and reference data is decoded here as a whole.
- raw view of vlen/reference data: for text-valued data (vlen strings, references) the values
  as UTF-8 text, one per line, so `cat` shows them; for other vlen data (vlen sequences,
  compounds holding vlen members) the `.npy` body.
References are shown as the path of the object they point to (the shortest path found by a walk
from the root: H5File.path_of), with `[selection]` for region and `@name` for attribute references.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .dtypes import is_converted, needs_conversion
from .values import Ref, selection_text, to_npy

if TYPE_CHECKING:
    from .dataset import Dataset
    from .file import H5File


def needs_decoding(dt) -> bool:
    """True when values differ from the stored bytes: they go through `decode_elements`."""
    return is_converted(dt) or needs_conversion(dt)


def decode_elements(file: H5File, dt, raw: bytes, count: int, what: str) -> np.ndarray:
    """Decode `count` stored elements of type `dt` into the `.npy` representation."""
    return to_npy(raw[:count * dt.size], dt, file.global_heap, file.sizes, lambda r: ref_text(file, r))


def dataset_views(ds: Dataset) -> tuple[bytes, np.dtype, bytes]:
    """(raw view bytes, .npy dtype, .npy body bytes) for a dataset holding vlen data or references."""
    stored = ds.source.read(0, ds.source.size)
    return views_of(decode_elements(ds.file, ds.datatype, stored, ds.dataspace.count, ds.path))


def views_of(arr: np.ndarray) -> tuple[bytes, np.dtype, bytes]:
    """(raw view bytes, .npy dtype, .npy body bytes) of decoded vlen or reference values (any
    engine's: model/hsds decodes the service's the same way)."""
    body = arr.tobytes()
    # an array datatype decodes to (count, *dims): one element is a subarray of them
    dtype = np.dtype((arr.dtype, arr.shape[1:])) if arr.ndim > 1 else arr.dtype
    if arr.dtype.kind == "U":
        text = "".join(f"{s}\n" for s in arr.ravel().tolist()).encode("utf-8", "surrogateescape")
        return text, dtype, body
    return body, dtype, body


def ref_text(file: H5File, ref: Ref | None) -> str:
    if ref is None:
        return ""
    prefix = f"{ref.file}:" if ref.file else ""
    target = file.path_of(ref.address) if not ref.file else None
    text = prefix + (target or f"<object at {ref.address}>")
    if ref.kind == "region" and ref.selection is not None:
        text += f"[{selection_text(ref.selection)}]"
    elif ref.kind == "attribute":
        text += f"@{ref.attribute}"
    return text
