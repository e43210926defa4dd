"""Remote objects (S3 and S3-compatible stores, HTTP(S) servers) as byte sources: a client that
pins the object's version, a persistent block cache, and the source that joins them."""

from .options import RemoteOptions
from .source import RemoteSource, open_remote

__all__ = ["RemoteOptions", "RemoteSource", "open_remote"]
