"""Free-space managers (III.H): the blocks of any manager (a fractal heap's or one of the
file's), and the file's persistent managers used and kept current.

`extents`: a manager's blocks and, for a file manager, the free space its section list holds. A
file manager's header must describe its list (counts and total space: libhdf5 reads the list by
them) and its sections be of the type its slot holds (`SLOTS`).

The file's persistent free-space managers (libhdf5's "persist" strategy): at a writable open,
`setup` reads the File Space Info message (superblock extension) and returns the allocator the
file's strategy calls for (h5fs.storage.allocator) and, when the file persists its free space, a
`PersistentSpace`:
- active (version 1 message, strategy FSM_AGGR or PAGE, managers only in the slots libhdf5's sec2
  driver fills, sections that check out): the managers' sections are loaded into the allocator's
  pools, so new chunks and metadata reuse them; `stage_managers`, called by every commit that allocated or
  freed space, rewrites the managers so that each lists exactly its pool as the commit leaves it;
- honouring only (anything else: a version 0 message of libhdf5 1.10.0, another strategy, other
  slots, a paged file with a page-end threshold (libhdf5 then grows a section read near a page's
  end over bytes it does not track: H5MF__sect_small_add), sections that do not check out): the
  sections stay out of every pool and the managers are never changed, as libhdf5 left them. The
  log says why.

`stage_managers` stages everything in the committing transaction (the journal makes it one atomic
change): the transaction's frees are listed at once (the managers become visible together with
the change that stopped using that space); each manager's header is rewritten in place (whole,
checksum recomputed); its section list in place while it fits its allocation, else in fresh space
with 20% to spare (libhdf5's expand percent), the header pointing there and the old list freed
(and listed); a pool with sections and no manager gets one (header and list in fresh space, its
address in the message). Allocating those blocks changes the pools, so the lists are computed
again until no block moves (lists only grow, so this ends). A manager whose pool empties keeps its
blocks and lists nothing (deleting it would free blocks its own pool then lists). In either mode
the message's end of allocation before the managers (libhdf5's eoa_pre_fsm_fsalloc) follows the
end of allocation, so that libhdf5 1.10's H5MF_tidy_self_referential_fsm_hack releases nothing
(h5fs.format.messages.file_space_info).

What libhdf5 (1.10.1 to 2.0) does with such a file opened read-write (H5Fsuper.c, H5MF.c,
H5FScache.c): it reads the message and opens a manager at its first allocation or free of that
type; it loads the sections as they are (H5FS__cache_sinfo_deserialize: the header's section
counts and total must describe the list, whose size is exactly what H5FS__sect_serialize_size
gives); at close it frees every manager's blocks into the managers, shrinks the end of allocation
and allocates the blocks again (H5MF_settle_raw_data_fsm, H5MF_settle_meta_data_fsm). So any
managers listing only free space, with their section types (simple; paged: small in slots 0 and 2,
large in slot 6), are what it needs.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..errors import FormatError, H5fsError
from ..format import free_space_manager as fsm
from ..format import superblock as sbf
from ..format.codec import Reader, Sizes, Writer
from ..format.messages import file_space_info as fsi
from ..format.messages.types import FSINFO
from .object_header import reader as header_reader
from .object_header.edit import rewrite_message
from .allocator import LARGE, META, RAW, Allocator, Extent

if TYPE_CHECKING:
    from .extent_sink import ExtentSink

log = logging.getLogger("h5fs")

SLOTS = {fsi.V1_FSM_AGGR: {META: fsm.FILE_SIMPLE, RAW: fsm.FILE_SIMPLE},
         fsi.V1_PAGE: {META: fsm.FILE_SMALL, RAW: fsm.FILE_SMALL, LARGE: fsm.FILE_LARGE}}   # slot -> section type
SHRINK, EXPAND = 80, 120   # libhdf5's H5MF_FSPACE_SHRINK and _EXPAND percents
SEC2_MAXADDR = (1 << 63) - 1   # the file's maximum address with libhdf5's sec2 driver
FAULTS = (H5fsError, ValueError, LookupError, struct.error)   # what decoding a bad message raises


def extents(out: ExtentSink, reader, path: str, label: str, address: int, client: int,
            stype: int | None = None) -> list[tuple[int, int]]:
    """The header's and the section list's extents; a file manager's sections (address,
    size), free space (of section type `stype` where the strategy fixes it)."""
    s = reader.sizes
    if not out.first_time(("free-space manager", address)) or \
            not out.add(address, fsm.header_size(s), path, f"{label} header"):
        return []
    with out.guard(path, label):
        h = fsm.decode_header(reader.read(address, fsm.header_size(s), label), address, s, label)
        if h.client != client:
            raise FormatError(f"manager of client {h.client}, expected {client}")
        if h.sections_address is None and client == fsm.CLIENT_FILE and (h.total_sections or h.total_space):
            raise FormatError(f"counts {h.total_sections} sections of {h.total_space} bytes and has no list")
        if h.sections_address is None or not out.add(h.sections_address, h.sections_alloc_size, path,
                                                     f"{label} section list"):
            return []
        if h.sections_size > h.sections_alloc_size:
            raise FormatError(f"section list of {h.sections_size} bytes in {h.sections_alloc_size}")
        found = fsm.decode_sections(reader.read(h.sections_address, h.sections_size, label), h, s, label)
        if client != fsm.CLIENT_FILE:
            return []
        total = sum(st.size * len(st.sections) for st in found.sets)
        counts = h.total_sections, h.serial_sections, h.ghost_sections, h.total_space
        if counts != (found.sections, found.sections, 0, total):
            out.problem(path, f"{label} header", f"counts {h.total_sections} sections ({h.serial_sections} "
                        f"serialized, {h.ghost_sections} ghosts) of {h.total_space} bytes, its list "
                        f"{found.sections} of {total}")
        wrong = [sec for st in found.sets for sec in st.sections if stype is not None and sec.type != stype]
        if wrong:
            out.problem(path, f"{label} section list", f"{len(wrong)} sections of type {wrong[0].type} "
                        f"(at {wrong[0].offset}; this manager's are of type {stype})")
        return [(sec.offset, st.size) for st in found.sets for sec in st.sections]
    return []


class Unusable(Exception):
    """Why the managers are honoured only."""


def setup(reader, sb: sbf.Superblock, eoa: int, name: str) -> tuple[Allocator, PersistentSpace | None]:
    """The allocator for the file (`name`, for the log) open for writing, and its persistent
    managers (or None)."""
    try:
        info = _file_space_info(reader, sb)
    except FAULTS as e:   # what h5fs did before it read the message: the broken part stays as it is
        log.warning("%s: free-space strategy unknown (file space info message unreadable: %s)", name, e)
        return Allocator(eoa), None
    if info is None:
        return Allocator(eoa), None
    page = info.page_size if info.version == 1 and info.strategy == fsi.V1_PAGE else None
    if not info.persist:
        return Allocator(eoa, page), None
    try:
        headers, lists, pools = _load(reader, sb, info, eoa)
    except (Unusable, *FAULTS) as e:
        log.warning("%s: the free space its managers list is left as it is (not reused, the managers never "
                    "changed): %s", name, e)
        return Allocator(eoa, page), PersistentSpace(sb, info, None)
    allocator = Allocator(eoa, page, split=page is None)
    for pool, extents in pools.items():
        allocator.load(pool, extents)
    log.info("%s: its free-space managers list %d bytes, reused (by a mount: once its walk finds the file "
             "sound) and kept current", name, sum(n for e in pools.values() for _, n in e))
    return allocator, PersistentSpace(sb, info, Managers(headers, lists))


def _file_space_info(reader, sb: sbf.Superblock) -> fsi.FileSpaceInfo | None:
    if sb.extension_address is None:
        return None
    header = header_reader.read(reader, sb.extension_address, "superblock extension")
    raw = header.first(FSINFO)
    return None if raw is None else fsi.decode(Reader(raw.data, 0, sb.sizes, "file space info message"))


@dataclass(frozen=True)
class Managers:
    headers: dict[int, fsm.FreeSpaceHeader]   # slot -> the manager's header as in the file
    lists: dict[int, bytes]                   # slot -> its section list's bytes as in the file


def _load(reader, sb: sbf.Superblock, info: fsi.FileSpaceInfo, eoa: int) \
        -> tuple[dict[int, fsm.FreeSpaceHeader], dict[int, bytes], dict[int, list[Extent]]]:
    """The managers' headers, section lists and sections by pool; Unusable when h5fs cannot
    both use and update them safely (module docstring)."""
    if info.version != 1 or info.strategy not in SLOTS:
        raise Unusable(f"file space info version {info.version}, strategy {info.strategy}")
    slots = SLOTS[info.strategy]
    if info.strategy == fsi.V1_PAGE and info.page_end_threshold:
        raise Unusable(f"paged aggregation with a page-end threshold of {info.page_end_threshold} bytes")
    extra = [i for i, a in enumerate(info.managers) if a is not None and i not in slots]
    if extra:
        raise Unusable(f"managers in slots {extra} (a file driver other than sec2 wrote them)")
    s = sb.sizes
    headers, lists, pools = {}, {}, {slot: [] for slot in slots}
    blocks = [(0, len(sbf.encode(sb)))]   # space no section may hold
    for slot, stype in slots.items():
        address = info.managers[slot]
        if address is None:
            continue
        what = f"free-space manager {slot}"
        h = fsm.decode_header(reader.read(address, fsm.header_size(s), what), address, s, what)
        headers[slot] = h
        blocks.append((address, fsm.header_size(s)))
        if h.client != fsm.CLIENT_FILE or h.ghost_sections:
            raise Unusable(f"{what}: client {h.client}, {h.ghost_sections} ghost sections")
        if h.sections_address is None:
            if h.serial_sections:
                raise Unusable(f"{what}: {h.serial_sections} sections and no section list")
            continue
        if h.sections_size > h.sections_alloc_size:
            raise Unusable(f"{what}: a section list of {h.sections_size} bytes in {h.sections_alloc_size}")
        blocks.append((h.sections_address, h.sections_alloc_size))
        image = reader.read(h.sections_address, h.sections_size, what)
        found = fsm.decode_sections(image, h, s, what)
        lists[slot] = image
        extents = [(sec.offset, st.size) for st in found.sets for sec in st.sections if sec.type == stype]
        if len(extents) != found.sections or h.total_sections != found.sections or \
                h.total_space != sum(n for _, n in extents):
            raise Unusable(f"{what}: its header does not describe its {found.sections} sections of type {stype}")
        pools[slot] = extents
    _check(pools, blocks, eoa, info.page_size if info.strategy == fsi.V1_PAGE else None)
    return headers, lists, pools


def _check(pools: dict[int, list[Extent]], blocks: list[Extent], eoa: int, page: int | None) -> None:
    """Sections inside the end of allocation, none overlapping another or a manager's block or
    the superblock; paged: a small section within one page, no page in both small pools."""
    tagged = sorted([(a, n, slot) for slot, extents in pools.items() for a, n in extents] +
                    [(a, n, None) for a, n in blocks])
    reach = 0
    for a, n, slot in tagged:
        if a < reach or n <= 0:
            raise Unusable(f"section {a}+{n} overlaps another section or a block")
        reach = a + n
    if reach > eoa:
        raise Unusable(f"a section or block reaches {reach}, past the end of allocation ({eoa})")
    if page is not None:
        kinds: dict[int, int] = {}
        for slot in (META, RAW):
            for a, n in pools.get(slot, []):
                if a // page != (a + n - 1) // page or kinds.setdefault(a // page, slot) != slot:
                    raise Unusable(f"small section {a}+{n} crosses a page or shares it with the other kind")


class PersistentSpace:
    def __init__(self, sb: sbf.Superblock, info: fsi.FileSpaceInfo, managers: Managers | None):
        self.sizes: Sizes = sb.sizes
        self.extension = sb.extension_address
        self.info = info
        self.managers = managers    # None: honoured only

    def stage_managers(self, txn) -> None:
        """Stage the managers (and the message) as the committing transaction leaves the
        allocator's pools (module docstring); they are adopted once the commit succeeds."""
        allocator = txn.store.allocator
        headers, lists, fresh = {}, {}, set()
        if self.managers is not None:
            headers = dict(self.managers.headers)
            placed = True
            while placed:   # until no manager block had to be (re)placed
                placed = False
                future = allocator.after(txn.frees())
                for slot, stype in SLOTS[self.info.strategy].items():
                    h, image, moved = self._manager(txn, slot, headers.get(slot), future[slot], stype, fresh)
                    if h is not None:
                        headers[slot], lists[slot] = h, image
                    placed |= moved
            self._stage(txn, headers, lists, fresh)
        info = self.info
        if info.version == 1:   # version 0 (libhdf5 1.10.0) has no such field; honoured only
            addresses = tuple(headers[i].address if i in headers else a for i, a in enumerate(info.managers))
            info = replace(info, eoa_before_managers=allocator.eoa, managers=addresses)
        if info != self.info:
            self._rewrite_message(txn, info)
        txn.on_commit(lambda: self._adopt(info, headers, lists))

    def _manager(self, txn, slot: int, h: fsm.FreeSpaceHeader | None, extents: list[Extent], stype: int,
                 fresh: set[int]) -> tuple[fsm.FreeSpaceHeader | None, bytes, bool]:
        """The manager of `slot` listing `extents`, its section list's bytes, and whether one of
        its blocks was (re)allocated."""
        moved = False
        if h is None:
            if not extents:
                return None, b"", False
            h = self._new_header(txn.allocate(fsm.header_size(self.sizes)))
            fresh.add(h.address)
            moved = True
        h = replace(h, total_space=sum(n for _, n in extents), total_sections=len(extents),
                    serial_sections=len(extents))
        sections = fsm.SectionList(h.address, fsm.section_sets([(n, fsm.Section(a, stype)) for a, n in extents]))
        image = fsm.encode_sections(sections, h, self.sizes)
        if not extents and h.sections_address is None:
            return replace(h, sections_size=0), b"", moved
        if h.sections_address is None or len(image) > h.sections_alloc_size:
            if h.sections_address is not None:
                txn.free(h.sections_address, h.sections_alloc_size)
            size = len(image) * EXPAND // 100
            h = replace(h, sections_address=txn.allocate(size), sections_alloc_size=size)
            fresh.add(h.sections_address)
            moved = True
        return replace(h, sections_size=len(image)), image, moved

    def _new_header(self, address: int) -> fsm.FreeSpaceHeader:
        """A manager as libhdf5 creates one (H5MF__create_fstype), its address space and
        largest section taken from the file's other managers when it has any."""
        like = next(iter(self.managers.headers.values()), None)
        bits, largest = (like.address_bits, like.max_section_size) if like is not None else \
            (SEC2_MAXADDR.bit_length(), min(SEC2_MAXADDR, (1 << 8 * self.sizes.length) - 1))
        return fsm.FreeSpaceHeader(address, fsm.CLIENT_FILE, 0, 0, 0, 0, fsm.SECTION_TYPES[fsm.CLIENT_FILE], SHRINK,
                                   EXPAND, bits, largest, None, 0, 0)

    def _stage(self, txn, headers: dict[int, fsm.FreeSpaceHeader], lists: dict[int, bytes], fresh: set[int]) -> None:
        """Stage what changed: blocks this staging allocated as new, the others in place."""
        def put(address: int, data: bytes) -> None:
            (txn.write_new if address in fresh else txn.write_in_place)(address, data)

        old = self.managers
        for slot, h in headers.items():
            if h.sections_address is not None and (h.sections_address in fresh or lists[slot] != old.lists.get(slot)):
                put(h.sections_address, lists[slot])
            if h != old.headers.get(slot):
                put(h.address, fsm.encode_header(h, self.sizes))

    def _rewrite_message(self, txn, info: fsi.FileSpaceInfo) -> None:
        header = header_reader.read(txn.reader, self.extension, "superblock extension")
        w = Writer(self.sizes)
        fsi.encode(w, info)
        rewrite_message(txn, header, header.first(FSINFO), w.getvalue())

    def _adopt(self, info: fsi.FileSpaceInfo, headers: dict[int, fsm.FreeSpaceHeader], lists: dict[int, bytes]) -> None:
        """The commit landed: the file's managers and message are these now."""
        self.info = info
        if self.managers is not None:
            self.managers = Managers(headers, lists)
