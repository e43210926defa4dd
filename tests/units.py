"""The repository's systemd units, as systemd would run them (tests of administration)."""

from __future__ import annotations

import shlex
from pathlib import Path

UNITS = Path(__file__).resolve().parent.parent / "systemd"


def unit_command(key: str, mountpoint: Path, file: Path, options: str) -> list[str]:
    """The unit's `key=` command line as systemd runs it for `mountpoint` (specifiers and the
    configuration's variables substituted)."""
    text = (UNITS / "h5fs@.service").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith(key + "="))
    words = shlex.split(line[len(key) + 1:].lstrip("-"))
    subst = {"%f": str(mountpoint), "${FILE}": str(file), "${OPTIONS}": options}
    return [subst.get(w, w) for w in words]
