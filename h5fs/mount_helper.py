"""mount(8) and umount(8) helpers: `mount -t fuse.h5fs FILE DIR -o ...`, fstab lines, `umount DIR`.

mount(8) runs `/sbin/mount.fuse.h5fs FILE DIR [-sfnv] [-N NS] [-o OPTIONS] [-t TYPE]` (also
installed as `mount.h5fs`, for `-t h5fs`); umount(8) runs `/sbin/umount.h5fs DIR [-flnrv] [-N NS]
[-t TYPE]` for mounts whose utab line names the helper (h5fs/utab.py). Both call the CLI in this
process. `h5fs install-helpers` writes small scripts there that run this Python with this package:
mount(8) runs helpers with a bare PATH, where `python3` may lack numpy. Installed in a virtual
environment (a venv, pipx), the scripts run that environment's own `bin/python`: resolving its
symlink would run the base interpreter, which lacks the environment's packages.
"""

from __future__ import annotations

import os
import shlex
import sys

from . import cli

USAGE_MOUNT = "usage: mount.fuse.h5fs FILE MOUNTPOINT [-sfnv] [-o OPTIONS]"
USAGE_UMOUNT = "usage: umount.h5fs MOUNTPOINT [-flnrv]"
MOUNT_FAILURE = 32    # mount(8)'s "mount failure" status


def _split_args(argv: list[str], with_value: str) -> tuple[list[str], dict[str, list[str]], str]:
    """(positionals, {flag: values}, unknown flag or "") for mount(8)'s helper conventions:
    single-letter flags, grouped or not, some taking a value (`-o OPTS`, `-oOPTS`)."""
    positional: list[str] = []
    flags: dict[str, list[str]] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("-") and len(arg) > 1:
            for j, letter in enumerate(arg[1:], 1):
                if letter in with_value:
                    value = arg[j + 1:]
                    if not value:
                        i += 1
                        if i >= len(argv):
                            return positional, flags, f"-{letter} needs a value"
                        value = argv[i]
                    flags.setdefault(letter, []).append(value)
                    break
                if not letter.isalpha():
                    return positional, flags, f"unknown flag {arg}"
                flags.setdefault(letter, []).append("")
        else:
            positional.append(arg)
        i += 1
    return positional, flags, ""


def mount_main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    positional, flags, problem = _split_args(argv, "otN")
    if problem or len(positional) != 2:
        print(f"mount.fuse.h5fs: {problem or 'a FILE and a MOUNTPOINT are needed'}\n{USAGE_MOUNT}", file=sys.stderr)
        return MOUNT_FAILURE
    if "N" in flags:
        print("mount.fuse.h5fs: -N (another mount namespace) is not supported", file=sys.stderr)
        return MOUNT_FAILURE
    if "f" in flags:    # mount(8)'s "fake": everything but the mount itself
        return 0
    source, mountpoint = positional
    if source.startswith("h5fs#"):   # the old fuse fstab form "h5fs#FILE"
        source = source[len("h5fs#"):]
    options = [o for o in flags.get("o", []) if o]
    args = ["mount"] + [a for o in options for a in ("-o", o)] + [source, mountpoint]
    if "v" in flags:
        print(f"mount.fuse.h5fs: h5fs {' '.join(args)}", file=sys.stderr)
    status = cli.main(args)
    return status if status in (0, 2) else MOUNT_FAILURE


def umount_main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    positional, flags, problem = _split_args(argv, "tN")
    if problem or len(positional) != 1:
        print(f"umount.h5fs: {problem or 'a MOUNTPOINT is needed'}\n{USAGE_UMOUNT}", file=sys.stderr)
        return 1
    args = ["umount"] + (["-z"] if "l" in flags else []) + [positional[0]]
    return cli.main(args)


HELPERS = {
    "/sbin/mount.fuse.h5fs": "mount_main",
    "/sbin/mount.h5fs": "mount_main",
    "/sbin/umount.h5fs": "umount_main",
    "/sbin/umount.fuse.h5fs": "umount_main",
}
COMMAND = "/usr/local/bin/h5fs"


def scripts() -> dict[str, str]:
    """Path -> script text of every helper, each running this interpreter."""
    python = shlex.quote(os.path.abspath(sys.executable))
    out = {path: f"#!/bin/sh\nexec {python} -c 'import sys; from h5fs.mount_helper import {fn}; "
                 f"sys.exit({fn}())' \"$@\"\n" for path, fn in HELPERS.items()}
    out[COMMAND] = f"#!/bin/sh\nexec {python} -m h5fs.cli \"$@\"\n"
    return out


def install(root: str = "/") -> list[str]:
    """Write the helpers under `root`; the paths written."""
    written = []
    for path, text in scripts().items():
        target = os.path.join(root, path.lstrip("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = target + ".new"
        with open(tmp, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
        written.append(target)
    return written
