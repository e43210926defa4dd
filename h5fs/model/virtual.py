"""Virtual datasets (layout class 3): row-major bytes assembled from source datasets.

The mapping list lives in a global heap object (format/vds_mapping.py). Each mapping pairs a
selection in the virtual dataset with a selection in a source dataset; the k-th element of one
(in the selection's iteration order: row-major for hyperslabs and "all", stored order for
points) is the k-th element of the other, as in libhdf5 (H5Dvirtual.c).

Serving a read: the requested byte range becomes element boxes (chunk_grid.linear_boxes); for
each box and each mapping the selected elements inside the box and their ordinals are computed
per dimension (hyperslabs, "all" and product-shaped block lists are products of 1-D sets), the
ordinals are turned into source coordinates, and only those source elements are read, in
bounded boxes (chunk by chunk for chunked sources, row runs otherwise). Nothing proportional to
the dataset is held in memory, except for irregular block lists and point selections, which are
enumerated (at most MAX_EXPLICIT elements, else Unsupported: storage/selection_geometry.py).

Where each part lives: the mappings and the nesting guard in model/virtual_mapping.py, the plan
(mappings resolved against the sources, the extent) in model/virtual_plan.py, the byte source in
model/virtual_source.py, reading a source's boxes into place in model/virtual_read.py, source
file names and the pool of open source files in model/virtual_files.py, writes in
model/virtual_write.py; this module is what a Dataset asks of a virtual dataset.

Behaviours (libhdf5 2.0 is the reference, default access properties):
- Source file "." is the file holding the virtual dataset. Other names: an absolute name is
  tried as is; a relative name (or the base name of an absolute one that is missing) is tried
  under each directory of the HDF5_VDS_PREFIX environment variable (":"-separated, "${ORIGIN}"
  replaced by the virtual dataset's directory) and then in the virtual dataset file's
  directory. libhdf5 finally tries the name relative to the process's current directory; a
  mount daemon's current directory means nothing, so we do not. The H5Pset_virtual_prefix
  access property is a per-process setting and does not apply.
- A remote virtual dataset's source files are the objects beside it (storage/remote/siblings.py),
  fetched with its options; HDF5_VDS_PREFIX is not applied. An absolute name is a local path,
  never opened: its base name is tried beside the file, else FormatError naming it. A missing
  object (404) is a missing file. The pool keys a remote file by its URL and keeps the version
  pinned when it was opened; a process never opens a second version of one source object.
- Source dataset names are resolved from the source file's root group (hard links only).
- Printf-style names in mappings with an unlimited virtual selection and a limited source
  selection: "%b" is the block number, "%%" a percent sign (in both names). Blocks are probed
  from 0 up to the first missing source (the default printf gap of 0).
- Missing source files (no such file) and missing source datasets read as the fill value,
  like unmapped elements (libhdf5 does the same). A source file that exists but cannot be
  opened or parsed answers FormatError (EIO) naming it: libhdf5 would quietly show fill
  values, but we do not serve made-up data for a file that is there and broken.
- A limited source selection outside the source's current extent, or an "all" source selection
  whose element count differs from the virtual selection: FormatError (libhdf5 errors too).
- The extent of a virtual dataset with unlimited mappings is recomputed from the sources when
  the source is built (libhdf5's default view, H5D_VDS_LAST_AVAILABLE): `virtual_extent(ds)`.
  The stored dataspace can be stale (libhdf5 writes (0,) for a printf mapping).
- Types: the source datatype must equal the virtual dataset's (message versions aside);
  otherwise Unsupported naming both. Variable-length and reference types are refused: their
  bytes point into the source file's heaps.
- A virtual dataset that maps itself, directly or through other virtual datasets, answers
  FormatError (also beyond MAX_DEPTH levels of nesting).
- Source files are opened with H5File.open and kept in a bounded, shared, thread-safe LRU
  pool (POOL_SIZE files, model/virtual_files.py); a file in use is closed only after its last user is done.
- allocated() is 0: the data lives in the sources.

Writing (`virtual_write`, libhdf5's H5D__virtual_write is the reference) maps the written elements
through the same plan and hands each source dataset of the virtual dataset's own file (name "."
or a name that resolves to that file) its runs of consecutive elements; the caller writes them. Elements of a source in another file: ReadOnly (EROFS) naming it (a mount writes
one file); a remote virtual dataset is read-only: ReadOnly. Elements that no mapping stores
(unmapped, a missing source dataset, past an unlimited source's extent): CannotWrite (ENOTSUP).
Either refusal comes before any write.
"""

from __future__ import annotations

from ..errors import H5fsError
from ..format.messages import layout as L
from ..storage.source_registry import SourceContext, register_source
from ..storage.sources import RawSource
from .virtual_mapping import mapping_block
from .virtual_plan import check_type, plan_of
from .virtual_source import VirtualSource


def virtual_extent(ds) -> tuple[int, ...]:
    """The current extent of a virtual dataset (stored dims, or recomputed from the sources
    for mappings with unlimited selections, as libhdf5's H5D_VDS_LAST_AVAILABLE view does)."""
    return plan_of(ds).shape


def virtual_source(ctx: SourceContext) -> RawSource:
    """The RawSource of a virtual dataset. Its size follows virtual_extent(ds), not the stored
    dataspace (`ctx.size`)."""
    ds = ctx.data
    check_type(ds)
    plan = plan_of(ds)
    return VirtualSource(ds.detached(), plan.shape, plan.maps)  # kept in ds's state


register_source(L.VIRTUAL, virtual_source)


def virtual_facts(ds) -> dict[str, str]:
    """Readable facts: {"virtual_sources": "a.h5:/data[0:10] -> [0, 0:10]; ...", ...}."""
    block = mapping_block(ds)
    items = []
    for m in block.entries:
        items.append(f"{m.source_file}:{m.source_dataset}{m.source_selection.text()} -> "
                     f"{m.virtual_selection.text()}")
    out = {"virtual_sources": "; ".join(items), "virtual_mappings": str(len(block.entries))}
    try:
        shape = virtual_extent(ds)
    except H5fsError as e:
        if e.transient:   # facts are kept: a network fault must not drop one for good
            raise
        return out
    if shape != tuple(ds.dataspace.dims):
        out["virtual_extent"] = "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
    return out
