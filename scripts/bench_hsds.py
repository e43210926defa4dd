"""HSDS mounts (issue 27) against h5pyd doing the same work on the same local service, same run.

    python3 scripts/bench_hsds.py [--size-mib 256] [--objects 2000] [--runs 3] [--dir /tmp/h5fs-bench-hsds]

A local HSDS (tests/hsds_server.py: its service and data nodes on loopback, POSIX storage in
--dir, kept between runs) serves two domains h5pyd writes once:
- data.h5: `data`, --size-mib MiB of float32 in rows of 4,096, chunks of 128 x 4,096 (2 MiB), no
  filter: what is measured is the transfer, not HSDS's decompression;
- objects.h5: --objects objects, groups of 9 scalar datasets, an attribute on every object (the
  walk of scripts/bench_remote.py).
Cases, the medians of --runs, each on a fresh mount (the page cache dropped):
- read: `cat D > /dev/null` of the raw view after a fresh mount; h5pyd reading the whole dataset
  (`ds[...]`); the floor: the service's own answer to a client that knows what to fetch, the
  dataset's chunk rows read with HsdsClient.read_bytes, 8 at a time.
- walk: mount, `find -ls` and `getfattr -R -d`, unmount; h5pyd's visititems reading every
  attribute and shape.
- write: `cp` of a --size-mib MiB `.npy` of float32 (rows of 4,096) into a fresh domain through
  a read-write mount (the mount's default gzip 4 + shuffle), then its fsync (the service holds
  it); h5pyd `create_dataset(data=arr)` with the same chunks and filters (the chunks h5fs gives a
  copied .npy: dataset_create.npy_storage), the file's close, then the service's durability flush
  (`PUT /?flush=1`, which h5pyd's close does not ask for; fsync does).
- create: 1,000 `mkdir` + `setxattr` in a fresh domain, then the unmount (which returns once the
  service holds them durably); h5pyd making 1,000 groups with an attribute each, closing the file,
  then the same durability flush (its time to the close is printed too).
Targets (issue 27): reads and writes at least as fast as h5pyd; the walk and the creations within
1.5x h5pyd's time, unmount included. Prints each measurement, then a markdown table with the
daemon's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
import bench_read as br  # noqa: E402
from hsds_server import PASSWORD, USER, HSDSServer  # noqa: E402

from h5fs.model.dataset_create import npy_storage  # noqa: E402

MIB = 1 << 20
COLS = 4096
CHUNK_ROWS = 128
H5PYD = r"""
import json, sys, time
import h5pyd, numpy as np
domain, mode = sys.argv[1], sys.argv[2]
if mode.startswith("write:"):
    arr = np.load(mode[6:])
t = time.perf_counter()
with h5pyd.File(domain, "w" if mode.startswith(("write", "create")) else "r") as f:
    if mode.startswith("write:"):
        f.create_dataset("data", data=arr, chunks=tuple(json.loads(sys.argv[3])), compression="gzip",
                         compression_opts=4, shuffle=True)
    elif mode == "create":
        for i in range(1000):
            f.create_group(f"g{i:04d}").attrs["note"] = "made by the benchmark"
    elif mode == "walk":
        dict(f.attrs)
        def visit(name, obj):
            dict(obj.attrs)
            if isinstance(obj, h5pyd.Dataset):
                obj.shape
        f.visititems(visit)
    else:
        f["data"][...]
closed = time.perf_counter() - t
if mode.startswith(("write:", "create")):   # durable, as the mount's fsync and unmount make it
    from h5fs.storage.hsds import HsdsClient
    with HsdsClient(domain) as client:
        client.flush()
print(json.dumps({"seconds": time.perf_counter() - t, "closed": closed}))
"""


def build(server: HSDSServer, mib: int, objects: int) -> tuple[str, str]:
    """The two domains (written once; kept with the service's storage)."""
    import h5pyd   # the benchmark's baseline library: imported once the service is up
    kw = server.h5pyd_kwargs()
    data, walk = server.domain(f"data-{mib}m.h5"), server.domain(f"objects-{objects}.h5")
    if not complete(data, kw):
        rows = mib * MIB // 4 // COLS
        with h5pyd.File(data, "w", **kw) as f:
            ds = f.create_dataset("data", (rows, COLS), "<f4", chunks=(CHUNK_ROWS, COLS))
            step = 4 * CHUNK_ROWS
            for r in range(0, rows, step):
                n = min(step, rows - r)
                ds[r:r + n] = np.random.default_rng(r).random((n, COLS), dtype="<f4")
            f.attrs["complete"] = 1
    if not complete(walk, kw):
        with h5pyd.File(walk, "w", **kw) as f:
            for g in range(objects // 10):
                grp = f.create_group(f"g{g:04d}")
                grp.attrs["index"] = g
                for d in range(9):
                    ds = grp.create_dataset(f"d{d}", data=np.float64(g + d / 10))
                    ds.attrs["units"] = "m"
            f.attrs["complete"] = 1
    return data, walk


def complete(domain: str, kw: dict) -> bool:
    """Whether an earlier run wrote the domain to its end."""
    import h5pyd   # the benchmark's baseline library: imported once the service is up
    try:
        with h5pyd.File(domain, "r", **kw) as f:
            return f.attrs.get("complete") == 1
    except OSError:
        return False


def mounted(domain: str, mnt: Path, server: HSDSServer) -> float:
    t = time.perf_counter()
    subprocess.run(["h5fs", "mount", "-o", f"endpoint={server.endpoint}", f"hsds://{domain}", str(mnt)],
                   check=True)
    return time.perf_counter() - t


def umount(mnt: Path) -> float:
    t = time.perf_counter()
    br.unmount(["h5fs", "umount", str(mnt)], mnt)
    return time.perf_counter() - t


def h5pyd_run(domain: str, mode: str, *extra: str, closed: list[float] | None = None) -> float:
    """h5pyd's seconds (its close, then for writes and creations the durability flush); the
    seconds to its close appended to `closed` when given."""
    out = subprocess.run([sys.executable, "-c", H5PYD, domain, mode, *extra], check=True, capture_output=True,
                         text=True)
    found = json.loads(out.stdout)
    if closed is not None:
        closed.append(found["closed"])
    return found["seconds"]


def floor_read(server: HSDSServer, domain: str) -> float:
    """The dataset's chunk rows fetched by the engine's own client, 8 at a time."""
    from h5fs.storage.hsds import HsdsClient   # the service's floor: the client h5fs uses
    with HsdsClient(domain, endpoint=server.endpoint, username=USER, password=PASSWORD) as client:
        root = client.get_domain().root
        did = next(ln.id for ln in client.links(root) if ln.title == "data")
        rows = client.get_dataset(did).shape[0]
        t = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda r: client.read_bytes(did, (slice(r, min(rows, r + CHUNK_ROWS)), slice(0, COLS)), 4),
                          range(0, rows, CHUNK_ROWS)))
        return time.perf_counter() - t


def h5fs_read(domain: str, mnt: Path, server: HSDSServer) -> tuple[float, float]:
    """(seconds of the first `cat` of the raw view after a fresh mount, the daemon's peak RSS MiB)."""
    mounted(domain, mnt, server)
    try:
        br.drop_caches()
        t = time.perf_counter()
        subprocess.run(["cat", str(mnt / "data")], check=True, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - t
        return seconds, br.peak_rss_mib(br.daemon_pid(mnt))
    finally:
        umount(mnt)


def h5fs_write(server: HSDSServer, npy: Path, mnt: Path, run: int) -> float:
    """`cp` of the .npy into a fresh domain's read-write mount, and its fsync."""
    mount_fresh(server, mnt, f"written-{run}")
    try:
        t = time.perf_counter()
        subprocess.run(["cp", str(npy), str(mnt / "data.npy")], check=True)
        fd = os.open(mnt / "data", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return time.perf_counter() - t
    finally:
        umount(mnt)


def h5fs_create(server: HSDSServer, mnt: Path, run: int) -> float:
    """1,000 mkdir + setxattr in a fresh domain's read-write mount, the unmount included."""
    mount_fresh(server, mnt, f"created-{run}")
    t = time.perf_counter()
    try:
        for i in range(1000):
            path = mnt / f"g{i:04d}"
            os.mkdir(path)
            os.setxattr(path, "user.note", b"made by the benchmark")
    finally:
        umount(mnt)
    return time.perf_counter() - t


def mount_fresh(server: HSDSServer, mnt: Path, name: str) -> None:
    """A new empty domain mounted read-write at `mnt`."""
    import h5pyd   # the benchmark's baseline library: imported once the service is up
    domain = server.domain(f"{name}-{time.time_ns()}.h5")
    with h5pyd.File(domain, "w", **server.h5pyd_kwargs()):
        pass
    subprocess.run(["h5fs", "mount", "-o", f"rw,endpoint={server.endpoint}", f"hsds://{domain}", str(mnt)],
                   check=True)


def h5fs_walk(domain: str, mnt: Path, server: HSDSServer) -> float:
    """Mount, `find -ls` and `getfattr -R -d`, unmount."""
    t = time.perf_counter()
    mounted(domain, mnt, server)
    try:
        subprocess.run(["find", str(mnt), "-ls"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["getfattr", "-R", "-d", str(mnt)], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    finally:
        umount(mnt)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--objects", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default="/tmp/h5fs-bench-hsds")
    args = ap.parse_args()
    storage = Path(args.dir)
    storage.mkdir(parents=True, exist_ok=True)
    server = HSDSServer(storage).start()
    os.environ.update(server.env())   # h5pyd and the mount find the service and the user here
    mnt = Path(tempfile.mkdtemp(prefix="h5fs-bench-hsds-mnt-"))
    try:
        t = time.perf_counter()
        data, walk = build(server, args.size_mib, args.objects)
        print(f"domains ready in {time.perf_counter() - t:.1f} s", flush=True)
        reads = {"h5fs": [], "h5pyd": [], "floor": []}
        walks = {"h5fs": [], "h5pyd": []}
        writes = {"h5fs": [], "h5pyd": []}
        creates = {"h5fs": [], "h5pyd": []}
        created_closed: list[float] = []     # h5pyd's creations to its close, before the durability flush
        rss: list[float] = []
        npy = storage / f"data-{args.size_mib}m.npy"
        if not npy.exists():
            rows = args.size_mib * MIB // 4 // COLS
            np.save(npy, np.random.default_rng(0).random((rows, COLS), dtype="<f4"))
        for run in range(args.runs):
            writes["h5fs"].append(h5fs_write(server, npy, mnt, run))
            chunks = npy_storage((args.size_mib * MIB // 4 // COLS, COLS), 4)[0]
            writes["h5pyd"].append(h5pyd_run(server.domain(f"h5pyd-written-{run}-{time.time_ns()}.h5"), f"write:{npy}",
                                             json.dumps(chunks)))
            creates["h5fs"].append(h5fs_create(server, mnt, run))
            creates["h5pyd"].append(h5pyd_run(server.domain(f"h5pyd-created-{run}-{time.time_ns()}.h5"), "create",
                                              closed=created_closed))
            print(f"run {run + 1}: write h5fs {writes['h5fs'][-1]:.2f} s, h5pyd {writes['h5pyd'][-1]:.2f} s; create "
                  f"h5fs {creates['h5fs'][-1]:.2f} s, h5pyd {creates['h5pyd'][-1]:.2f} s (to its close "
                  f"{created_closed[-1]:.2f} s)", flush=True)
            seconds, peak = h5fs_read(data, mnt, server)
            reads["h5fs"].append(seconds)
            rss.append(peak)
            reads["h5pyd"].append(h5pyd_run(data, "read"))
            reads["floor"].append(floor_read(server, data))
            walks["h5fs"].append(h5fs_walk(walk, mnt, server))
            walks["h5pyd"].append(h5pyd_run(walk, "walk"))
            print(f"run {run + 1}: read h5fs {reads['h5fs'][-1]:.2f} s (peak RSS {peak:.0f} MiB), h5pyd "
                  f"{reads['h5pyd'][-1]:.2f} s, floor {reads['floor'][-1]:.2f} s; walk h5fs "
                  f"{walks['h5fs'][-1]:.2f} s, h5pyd {walks['h5pyd'][-1]:.2f} s (load {os.getloadavg()[0]:.1f})",
                  flush=True)
        med = {k: statistics.median(v) for k, v in reads.items()}
        wmed = {k: statistics.median(v) for k, v in walks.items()}
        mib = args.size_mib
        print(f"\nHSDS {server.endpoint} on loopback (POSIX storage), {os.cpu_count()} cores, medians of "
              f"{args.runs} runs\n")
        print("| case | h5fs | h5pyd | floor | h5fs / h5pyd | target | met | h5fs peak RSS MiB |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        print(f"| read {mib} MiB | {med['h5fs']:.2f} s ({mib / med['h5fs']:.0f} MiB/s) | {med['h5pyd']:.2f} s "
              f"({mib / med['h5pyd']:.0f} MiB/s) | {med['floor']:.2f} s ({mib / med['floor']:.0f} MiB/s) | "
              f"{med['h5fs'] / med['h5pyd']:.2f}x the time | <= 1x | "
              f"{'yes' if med['h5fs'] <= med['h5pyd'] else 'NO'} | {max(rss):.0f} |")
        print(f"| walk {args.objects} objects (mount to unmount) | {wmed['h5fs']:.2f} s | {wmed['h5pyd']:.2f} s | - | "
              f"{wmed['h5fs'] / wmed['h5pyd']:.2f}x the time | <= 1.5x | "
              f"{'yes' if wmed['h5fs'] <= 1.5 * wmed['h5pyd'] else 'NO'} | - |")
        for label, results, factor in ((f"write {mib} MiB (cp + fsync)", writes, 1.0),
                                       ("create 1,000 groups with an attribute (unmount included)", creates, 1.5)):
            m = {k: statistics.median(v) for k, v in results.items()}
            print(f"| {label} | {m['h5fs']:.2f} s | {m['h5pyd']:.2f} s | - | {m['h5fs'] / m['h5pyd']:.2f}x the time | "
                  f"<= {factor:g}x | {'yes' if m['h5fs'] <= factor * m['h5pyd'] else 'NO'} | - |")
        closed = statistics.median(created_closed)
        print(f"\ncreate: h5pyd to its close, before the durability flush: {closed:.2f} s "
              f"(h5fs {statistics.median(creates['h5fs']) / closed:.2f}x that)")
    finally:
        server.stop()
        os.rmdir(mnt)
    return 0


if __name__ == "__main__":
    sys.exit(main())
