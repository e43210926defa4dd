#!/usr/bin/env bash
# Installs what the tests need, then runs the whole suite (real FUSE mounts: run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
python3 -m pytest -q -p no:cacheprovider "$@"
