#!/usr/bin/env bash
# Installs everything h5fs needs on a fresh Debian machine (run as root): FUSE, tools, the package.
set -euo pipefail
cd "$(dirname "$0")/.."
# systemd: systemd-analyze verifies the units; mount: mount(8), umount(8), findmnt (util-linux)
if ! command -v fusermount3 >/dev/null || ! command -v getfattr >/dev/null || ! command -v h5dump >/dev/null \
        || ! command -v fio >/dev/null || ! command -v systemd-analyze >/dev/null || ! command -v findmnt >/dev/null \
        || ! command -v rsync >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq fuse3 libfuse3-dev pkg-config hdf5-tools \
        attr fio systemd mount rsync >/dev/null
fi
python3 -m pip install -q --disable-pip-version-check -e ".[test]" 2>&1 | grep -v -i "warning" || true
python3 -c "import h5fs, pyfuse3, h5py" 
# mount(8)'s helpers (mount -t fuse.h5fs, fstab, umount) and /usr/local/bin/h5fs, for this Python
python3 -m h5fs.cli install-helpers >/dev/null
