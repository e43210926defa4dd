"""An HSDS domain (the HDF Group's Highly Scalable Data Service) through its REST API: settings
found as h5pyd finds them, the HTTP transport, the client's calls, the records they answer, and
HSDS's types and binary values as NumPy sees them."""


from __future__ import annotations

import importlib
from typing import Any

# where each name lives: imported when first asked for, so `h5fs umount` and `h5fs status`, which
# need only settings.py's URL parsing, do not load NumPy and urllib3 (0.1 s of every such command)
_WHERE = {"HsdsClient": "client", "selection": "client", "whole": "client", "Attribute": "records",
          "Dataset": "records", "Datatype": "records", "Domain": "records", "Group": "records",
          "Link": "records", "HsdsSettings": "settings", "resolve": "settings", "HsdsError": "transport",
          "TypeNotMapped": "types"}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
