#!/usr/bin/env bash
# Installs everything h5fs needs on a fresh Debian machine (run as root): FUSE, tools, the package.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v fusermount3 >/dev/null || ! command -v getfattr >/dev/null || ! command -v h5dump >/dev/null \
        || ! command -v fio >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 libfuse3-dev pkg-config hdf5-tools attr fio >/dev/null
fi
python3 -m pip install -q --disable-pip-version-check -e ".[test]" 2>&1 | grep -v -i "warning" || true
python3 -c "import h5fs, pyfuse3, h5py" 
