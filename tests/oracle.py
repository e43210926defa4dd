"""What libhdf5 (through h5py, the oracle) says of a file, for tests to compare with: every link
of a file, a dataset's filter pipeline."""

from __future__ import annotations

import h5py

from h5fs.format.messages.filter_pipeline import FilterSpec


def tree(path) -> dict[str, object]:
    """Every link of the file by path: ("group", nlink) / ("dataset", nlink, values) /
    ("soft", target) / ("external", file, path)."""
    out: dict[str, object] = {}
    with h5py.File(path, "r") as f:
        def visit(group, prefix):
            for name in group:
                p = f"{prefix}/{name}"
                link = group.get(name, getlink=True)
                if isinstance(link, h5py.SoftLink):
                    out[p] = ("soft", link.path)
                elif isinstance(link, h5py.ExternalLink):
                    out[p] = ("external", link.filename, link.path)
                else:
                    obj = group[name]
                    rc = h5py.h5o.get_info(obj.id).rc
                    if isinstance(obj, h5py.Group):
                        out[p] = ("group", rc)
                        visit(obj, p)
                    else:
                        out[p] = ("dataset", rc, obj[()].tolist())
        visit(f, "")
    return out


def pipeline(ds: h5py.Dataset) -> tuple[FilterSpec, ...]:
    pl = ds.id.get_create_plist()
    out = []
    for i in range(pl.get_nfilters()):
        fid, flags, cd, name = pl.get_filter(i)
        out.append(FilterSpec(fid, flags, name.decode(), tuple(cd)))
    return tuple(out)
