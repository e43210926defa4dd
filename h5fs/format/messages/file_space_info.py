"""File Space Info message (0x0017, IV.A.2.x): how libhdf5 manages the file's free space, and where
the file's free-space managers (III.H) live when free space persists across opens.

Version 0 (libhdf5 1.10.0 only): strategy, threshold, and six manager addresses (one per
allocation type H5FD_MEM_SUPER..OHDR) only under the ALL_PERSIST strategy. Version 1 (1.10.1+):
strategy, persist flag, threshold, page size, page-end metadata threshold, the EOA before the
managers allocated their own space, and twelve manager addresses (the six small-section managers,
then the six large-section ones) only when persisting. `persist` keeps the stored byte (any
nonzero value persists); in a version 0 message it is 1 under ALL_PERSIST, 0 otherwise.

`eoa_before_managers` (libhdf5's eoa_pre_fsm_fsalloc) is a relative address, as every address in
the file. libhdf5 1.10.1 to 1.10.x allocated its managers' own blocks at the end of the file at
close and stored the end of allocation before them here; at the first allocation after a
read-write open it released everything from there to the end of allocation
(H5MF_tidy_self_referential_fsm_hack). Later versions store the final end of allocation (the
hack then releases nothing) and use the field in assertions only (H5MF_settle_meta_data_fsm).

Which slots hold managers: libhdf5 maps each allocation type to a manager through the file
driver's type map; with the sec2 (and core) driver's "dichotomy" map every metadata type shares
H5FD_MEM_SUPER's manager and raw data shares H5FD_MEM_DRAW's (global heaps and huge fractal heap
objects count as raw data), and under paged aggregation every request of a page or more goes to
one generic large manager (H5F_MEM_PAGE_LARGE_SUPER) (H5MF__alloc_to_fs_type).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatError
from ..codec import Reader, Writer

V0_ALL_PERSIST = 1                      # version 0 strategy H5F_FILE_SPACE_ALL_PERSIST
V1_FSM_AGGR, V1_PAGE, V1_AGGR, V1_NONE = 0, 1, 2, 3
MANAGERS = {0: 6, 1: 12}                # version -> manager addresses stored when persisting
SLOT_META, SLOT_RAW, SLOT_LARGE = 0, 2, 6   # slots of the managers libhdf5 fills (module docstring)


@dataclass(frozen=True, slots=True)
class FileSpaceInfo:
    version: int
    strategy: int
    persist: int
    threshold: int                      # smallest section a manager tracks
    page_size: int = 0                  # version 1 only (as the fields below)
    page_end_threshold: int = 0
    eoa_before_managers: int | None = None
    managers: tuple[int | None, ...] = ()   # free-space manager header addresses (None: none)


def decode(c: Reader) -> FileSpaceInfo:
    version = c.u8()
    if version == 0:
        strategy, threshold = c.fields("BL")
        persist = int(strategy == V0_ALL_PERSIST)
        page_size, page_end, eoa = 0, 0, None
    elif version == 1:
        strategy, persist, threshold, page_size, page_end, eoa = c.fields("BBLLHO")
        eoa = c.sizes.address(eoa)
    else:
        raise FormatError(f"file space info message version {version}")
    managers = tuple(map(c.sizes.address, c.fields("O" * MANAGERS[version]))) if persist else ()
    return FileSpaceInfo(version, strategy, persist, threshold, page_size, page_end, eoa, managers)


def encode(w: Writer, info: FileSpaceInfo) -> None:
    if info.version not in MANAGERS:
        raise ValueError(f"file space info version {info.version}")
    if info.version == 0 and info.persist != (info.strategy == V0_ALL_PERSIST):
        raise ValueError("a version 0 file space info persists exactly under the ALL_PERSIST strategy")
    if len(info.managers) != (MANAGERS[info.version] if info.persist else 0):
        raise ValueError(f"file space info version {info.version}: {len(info.managers)} manager addresses")
    if info.version == 0:
        w.fields("BBL", 0, info.strategy, info.threshold)
    else:
        w.fields("BBBLLHO", 1, info.strategy, info.persist, info.threshold, info.page_size,
                 info.page_end_threshold, w.sizes.raw_address(info.eoa_before_managers))
    if info.managers:
        w.fields("O" * len(info.managers), *map(w.sizes.raw_address, info.managers))
