"""Reads a free-space manager (a fractal heap's or one of the file's): `extents`, its blocks
and, for a file manager, the free space its section list holds. A file manager's header must
describe its list (counts and total space: libhdf5 reads the list by them) and its sections be
of the type its slot holds (h5fs.storage.persistent_space)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import FormatError
from ...format import free_space_manager as fsm

if TYPE_CHECKING:
    from ..extent_sink import ExtentSink


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
