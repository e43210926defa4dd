"""How a remote object is reached and cached: the mount options of an s3:// or http(s):// mount."""

from __future__ import annotations

import os
from dataclasses import dataclass


def default_cache_dir() -> str:
    """Where blocks are kept between mounts: $XDG_CACHE_HOME/h5fs, ~/.cache/h5fs, or for root
    (a system mount, fstab or systemd) /var/cache/h5fs."""
    if os.geteuid() == 0:
        return "/var/cache/h5fs"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "h5fs")


@dataclass(frozen=True)
class RemoteOptions:
    endpoint: str | None = None     # an S3-compatible server (MinIO, Ceph, moto); None: AWS
    region: str | None = None       # None: the environment, the profile, what S3 says, else us-east-1
    anonymous: bool = False         # unsigned requests (public buckets)
    profile: str | None = None      # a profile of ~/.aws/credentials and ~/.aws/config
    cache_dir: str | None = None    # None: default_cache_dir(); "none": no cache kept between mounts
    disk_cache_mb: int = 2048       # the block cache's size on disk (all objects of cache_dir)
    block_kb: int = 1024            # the unit fetched and cached
    requests: int = 16              # range requests in flight at once (an index walk's nodes, read-ahead)
    retries: int = 3                # attempts after the first, with backoff, before EIO
    timeout: float = 30.0           # seconds a request may take (connect and each read)

    @property
    def block(self) -> int:
        return self.block_kb * 1024

    def cache_path(self) -> str | None:
        if self.cache_dir == "none":
            return None
        return self.cache_dir or default_cache_dir()
