"""Views of data whose stored bytes are not its values: variable-length data and references.

The raw view of a variable-length string dataset is its strings as text, one per line; the
`.npy` view holds fixed-width unicode. Other variable-length and reference data use the forms
`dtypes.npy_dtype` documents; their raw view is the `.npy` body.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import Unsupported
from .dtypes import is_converted

if TYPE_CHECKING:
    from .dataset import Dataset
    from .file import H5File


def needs_materializing(dt) -> bool:
    return is_converted(dt)


def decode_elements(file: H5File, dt, raw: bytes, count: int, what: str) -> np.ndarray:
    """Decode `count` stored elements of type `dt` into a NumPy array of values."""
    raise Unsupported(f"{what}: variable-length or reference data")


def dataset_views(ds: Dataset) -> tuple[bytes, np.dtype, bytes]:
    """(raw view bytes, .npy dtype, .npy body bytes) for a dataset that needs materializing."""
    raise Unsupported(f"{ds.path}: variable-length or reference data")
