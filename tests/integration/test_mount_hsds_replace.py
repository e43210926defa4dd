"""An HSDS dataset's data replaced through a read-write mount (`cp x.npy D.npy`), and datasets HSDS
serves from a linked HDF5 file, against the local HSDS of tests/hsds_server.py. What the mount
did is read back through the service's REST API (h5fs's client, checked against h5pyd in
tests/storage/test_hsds_client.py); the linked datasets are compared with h5py reading their
file.

h5pyd 1.0.0's `hsload --link` fails on every dataset here (h5json 2.0.1 refuses the maximum
shape it passes for a non-chunked layout), so the linked datasets are made as it would make
them: a POST of the dataset with the layout pointing into the file.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess

import h5py
import h5pyd
import numpy as np
import pytest

from h5fs.storage.hsds import HsdsClient
from h5fs.storage.hsds.types import to_json
from hsds_server import BUCKET, PASSWORD, USER, hsds  # noqa: F401 - the session fixture

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="FUSE mounts need root here")


@pytest.fixture
def domain(hsds, request):   # noqa: F811 - the session fixture
    """/r: 10 float64, resizable, with an attribute; /fixed: a 2 x 3 int32 of fixed shape."""
    name = hsds.domain(f"replace-{request.node.name[:40]}-{os.getpid()}.h5")
    with h5pyd.File(name, "w", **hsds.h5pyd_kwargs()) as f:
        f.create_dataset("r", data=np.arange(10, dtype="<f8"), maxshape=(None,), chunks=(4,))
        f["r"].attrs["units"] = "m"
        f["fixed"] = np.arange(6, dtype="<i4").reshape(2, 3)
    return name


@pytest.fixture
def service(hsds, domain):   # noqa: F811
    with HsdsClient(domain, endpoint=hsds.endpoint, username=USER, password=PASSWORD) as client:
        yield client


def values(client: HsdsClient, path: str) -> np.ndarray:
    rec = client.get_dataset(client.resolve(path))
    return client.read(rec.id, rec.dtype, tuple(slice(0, n) for n in rec.shape))


def datasets(client: HsdsClient) -> set[str]:
    """Every dataset of the domain, linked or not (HSDS lists them all)."""
    return set(client._json("GET", "/datasets")["datasets"])


def write_npy(path, array: np.ndarray) -> None:
    """`array` as a .npy file written over `path` in one write (as cp does), closed."""
    tmp = f"/tmp/h5fs-replace-{os.getpid()}.npy"
    np.save(tmp, array)
    try:
        shutil.copyfile(tmp, path)
    finally:
        os.unlink(tmp)


def test_cp_over_npy_keeps_the_dataset(hsds, domain, service, mount):   # noqa: F811
    mp = mount(f"hsds://{domain}", "rw")
    ids, before = service.resolve("/r"), datasets(service)
    longer = np.arange(25, dtype="<f8") * 2
    write_npy(mp / "r.npy", longer)            # grows along its unlimited dimension
    assert np.array_equal(np.load(mp / "r.npy"), longer)
    assert np.array_equal(values(service, "/r"), longer)
    subprocess.run(["cp", str(mp / "fixed.npy"), "/tmp/h5fs-fixed.npy"], check=True)
    new = np.arange(6, dtype="<i4").reshape(2, 3) + 100
    np.save("/tmp/h5fs-fixed.npy", new)
    subprocess.run(["cp", "/tmp/h5fs-fixed.npy", str(mp / "fixed.npy")], check=True)   # the shape it has
    os.unlink("/tmp/h5fs-fixed.npy")
    assert np.array_equal(values(service, "/fixed"), new)
    shorter = np.arange(3, dtype="<f8")
    write_npy(mp / "r.npy", shorter)
    assert np.array_equal(values(service, "/r"), shorter) and os.path.getsize(mp / "r") == 24
    # the same object, with its attribute; the array's own dataset went
    assert service.resolve("/r") == ids and os.getxattr(mp / "r", "user.units") == b"m"
    assert datasets(service) == before
    with h5pyd.File(domain, "r", **hsds.h5pyd_kwargs()) as f:
        assert f["r"].attrs["units"] == "m"


@pytest.mark.parametrize("array, why", [
    (np.zeros((2, 3), "<f8"), errno.ENOTSUP),     # another type
    (np.zeros((3, 3), "<i4"), errno.ENOTSUP),     # beyond a fixed dimension
    (np.zeros(6, "<i4"), errno.ENOTSUP),          # another rank
])
def test_cp_over_npy_hsds_cannot_express_is_refused(domain, service, mount, array, why):
    mp = mount(f"hsds://{domain}", "rw")
    before = datasets(service)
    tmp = f"/tmp/h5fs-bad-{os.getpid()}.npy"
    np.save(tmp, array)
    body = open(tmp, "rb").read()
    os.unlink(tmp)
    fd = os.open(mp / "fixed.npy", os.O_WRONLY | os.O_TRUNC)
    try:
        with pytest.raises(OSError) as raised:
            os.write(fd, body)
        assert raised.value.errno == why
    finally:
        with pytest.raises(OSError) as closed:   # the close says so too
            os.close(fd)
        assert closed.value.errno == why
    assert np.array_equal(values(service, "/fixed"), np.arange(6, dtype="<i4").reshape(2, 3))
    assert np.array_equal(np.load(mp / "fixed.npy"), np.arange(6, dtype="<i4").reshape(2, 3))
    assert datasets(service) == before


# -- datasets served from a linked HDF5 file ---------------------------------------------------------

@pytest.fixture
def linked(hsds, request):   # noqa: F811
    """A domain whose /contig (H5D_CONTIGUOUS_REF) and /chunked (H5D_CHUNKED_REF, gzip) HSDS
    serves from an HDF5 file h5py wrote into its bucket; (domain, the file's path)."""
    stem = f"linked-{request.node.name[:30]}-{os.getpid()}"
    source = hsds.root / "storage" / BUCKET / f"{stem}.h5"
    with h5py.File(source, "w") as f:
        f["contig"] = np.arange(1000, dtype="<f8") / 4
        f.create_dataset("chunked", data=np.arange(20000, dtype="<i4").reshape(200, 100), chunks=(50, 40),
                         compression="gzip")
    with h5py.File(source, "r") as f:
        contig = {"class": "H5D_CONTIGUOUS_REF", "file_uri": f"{BUCKET}/{stem}.h5",
                  "offset": f["contig"].id.get_offset(), "size": f["contig"].id.get_storage_size()}
        d, table = f["chunked"], {}
        for i in range(d.id.get_num_chunks()):
            info = d.id.get_chunk_info(i)
            table["_".join(str(o // c) for o, c in zip(info.chunk_offset, d.chunks))] = [info.byte_offset, info.size]
        chunked = {"class": "H5D_CHUNKED_REF", "file_uri": f"{BUCKET}/{stem}.h5", "dims": list(d.chunks),
                   "chunks": table}
    name = hsds.domain(f"{stem}.h5")
    with HsdsClient(name, endpoint=hsds.endpoint, username=USER, password=PASSWORD) as client:
        root = client.create_domain().root
        for title, dtype, shape, layout, filters in (
                ("contig", "<f8", [1000], contig, []),
                ("chunked", "<i4", [200, 100], chunked, [{"class": "H5Z_FILTER_DEFLATE", "id": 1, "level": 4}])):
            props = {"layout": layout, **({"filters": filters} if filters else {})}
            client._json("POST", "/datasets", body={"type": to_json(np.dtype(dtype)), "shape": shape,
                                                    "link": {"id": root, "name": title}, "creationProperties": props})
    yield name, source
    source.unlink()


def test_linked_datasets_read_and_refuse_writes(linked, mount):
    name, source = linked
    mp = mount(f"hsds://{name}", "rw")
    with h5py.File(source, "r") as f:
        for title in ("contig", "chunked"):
            want = f[title][...]
            assert np.array_equal(np.load(mp / f"{title}.npy"), want)
            assert open(mp / title, "rb").read() == want.tobytes()
    assert os.getxattr(mp / "contig", "user.h5fs.layout") == b"contiguous (linked file)"
    assert os.getxattr(mp / "chunked", "user.h5fs.layout") == b"chunked (linked file)"
    for title in ("contig", "chunked"):
        fd = os.open(mp / title, os.O_WRONLY)
        try:
            with pytest.raises(OSError) as raised:
                os.pwrite(fd, b"\0" * 8, 0)
            assert raised.value.errno == errno.EROFS
        finally:
            os.close(fd)
        with pytest.raises(OSError) as raised:
            os.truncate(mp / title, 0)
        assert raised.value.errno == errno.EROFS
        with pytest.raises(OSError) as raised:
            write_npy(mp / f"{title}.npy", np.zeros(3))
        assert raised.value.errno == errno.EROFS
    with h5py.File(source, "r") as f:   # nothing reached the file, nor the service's view of it
        assert np.array_equal(np.load(mp / "chunked.npy"), f["chunked"][...])
        assert np.array_equal(np.load(mp / "contig.npy"), f["contig"][...])
    os.setxattr(mp / "contig", "user.note", b"metadata stays editable")   # the service keeps attributes itself
    assert os.getxattr(mp / "contig", "user.note") == b"metadata stays editable"
