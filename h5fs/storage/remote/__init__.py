"""Remote objects (S3 and S3-compatible stores, HTTP(S) servers) as byte sources: a client that
pins the object's version, a persistent block cache, and the source that joins them."""


from __future__ import annotations

import importlib
from typing import Any

# imported when first asked for: the command line's option parsing needs options.py alone, not
# the HTTP stack source.py brings (a third of the time `h5fs umount` took)
_WHERE = {"RemoteOptions": "options", "RemoteSource": "source", "open_remote": "source"}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
