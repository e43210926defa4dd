"""Lossless round trips of the object header messages of groups, links and attributes: link,
link info, group info, attribute (versions 1-3), attribute info, symbol table, comment, B-tree 'K'
values, reference count, modification times, shared-message references (versions 2 and 3, in an
object header or the SOHM heap), the shared message table message, and the SOHM master table
(SMTB) and record list (SMLI) blocks.

Against libhdf5: files h5py writes (earliest/v110/latest bounds, 2-, 4- and 8-byte offsets and
lengths), every instance found through h5fs's engine (object headers, the superblock extension,
dense link and attribute heaps, the SOHM heap, references inside attributes), decoded and encoded
again: the bytes are equal (a version-1 object header pads each message to 8 bytes: the encoding
is a prefix and the rest zeros); one field changed survives encode -> decode. Against themselves:
Hypothesis strategies of valid records encode, decode back to the record, and encode again to
the same bytes.
"""

from __future__ import annotations

import calendar

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from roundtrip_support import (FILE_SIZES, HYP, SHARED_REF, SIZES, address, check, check_encoder, checked, codec,
                               encoded, exactly, messages_file, names, new_file, roundtrip, sohm_fcpl, sohm_table,
                               text, uint)

from h5fs.format import btree_v2 as bt
from h5fs.format.codec import Reader, Sizes
from h5fs.format.messages import attribute as A
from h5fs.format.messages import link as L
from h5fs.format.messages import shared
from h5fs.format.messages import small
from h5fs.format.messages import sohm_table as T
from h5fs.format.messages.attribute_info import AttributeInfo
from h5fs.format.messages.link_info import LinkInfo
from h5fs.format.messages.symbol_table import SymbolTable
from h5fs.model import messages as M
from h5fs.model.file import H5File


def variant(mtype: int, r) -> tuple:
    """What distinguishes the encodings of one message type (what the tests mean to cover)."""
    if mtype == M.LINK:
        return (r.kind, r.name_width, r.charset, r.creation_order is not None, r.hard_type_stored)
    if mtype == M.ATTRIBUTE:
        return (r.version, r.charset, r.datatype_shared, r.dataspace_shared)
    if mtype == SHARED_REF:
        return (r.version, r.kind, r.type_byte)
    if mtype in (M.LINK_INFO, M.ATTRIBUTE_INFO):
        return (r.track_order, r.index_order, r.heap_address is not None)
    if mtype == M.GROUP_INFO:
        return (r.max_compact is not None, r.est_entries is not None)
    return ()


def seen_variants(path) -> set[tuple]:
    """Every structure of the file checked against libhdf5's bytes; the messages met: (type,
    padded) + what distinguishes their encodings."""
    return {s.kind[1:] + variant(s.kind[1], record) for s, record in checked(path) if s.kind[0] == "message"}


# -- against libhdf5 ---------------------------------------------------------------------------

# kind, name-length width, character set (a UTF-8 name, a 300-byte name)
LINKS = {("hard", 1, None), ("soft", 1, None), ("soft", 2, None), ("soft", 1, 1), ("external", 1, None),
         ("user-defined", 1, None)}


@pytest.mark.parametrize("sizes", FILE_SIZES)
@pytest.mark.parametrize("libver", ["earliest", "v110", "latest"])
def test_messages_against_libhdf5(tmp_path, libver, sizes):
    p = tmp_path / "messages.h5"
    messages_file(p, libver, sizes)
    seen = seen_variants(p)
    with H5File.open(str(p)) as hf:
        assert hf.sizes == Sizes(*sizes)
    v1 = libver == "earliest"       # every header a version-1 one, but for order-tracking objects
    compact = {(M.LINK, v1, *v, False, False) for v in LINKS}
    tracked = {(M.LINK, False, *v, True, False) for v in LINKS}     # compact and dense
    assert compact | tracked <= seen
    plain = 1 if v1 else 3
    assert {(M.ATTRIBUTE, v1, plain, 0, False, False),           # h5py's attributes
            (M.ATTRIBUTE, v1, 3, 1, False, False),               # a UTF-8 name needs version 3
            (M.ATTRIBUTE, v1, 2 if v1 else 3, 0, True, False),   # committed datatype: version 2+
            (M.ATTRIBUTE, False, plain, 0, False, False),        # dense (in a heap)
            (M.ATTRIBUTE, False, 3, 1, False, False)} <= seen
    assert {(SHARED_REF, v1, 2, shared.IN_OBJECT_HEADER, 2),     # libhdf5 writes type 2, not the spec's 0
            (SHARED_REF, False, 2, shared.IN_OBJECT_HEADER, 2)} <= seen   # inside an attribute
    assert {(M.LINK_INFO, v1, False, False, False), (M.LINK_INFO, False, True, True, False),
            (M.LINK_INFO, False, True, True, True), (M.ATTRIBUTE_INFO, False, True, True, True),
            (M.GROUP_INFO, v1, False, False), (M.COMMENT, v1)} <= seen
    if v1:
        assert {(M.SYMBOL_TABLE, True), (M.MTIME, True)} <= seen
    else:   # the superblock extension holds the 'K' values; the version-2 headers their times
        assert {(M.GROUP_INFO, False, True, True), (M.REFCOUNT, False), (M.BTREE_K, False),
                (M.ATTRIBUTE_INFO, False, False, False, False)} <= seen


@pytest.mark.parametrize("sizes", [(8, 8), (4, 4)])
@pytest.mark.parametrize("index", ["list", "btree"])
def test_shared_messages_against_libhdf5(tmp_path, index, sizes):
    p = tmp_path / "sohm.h5"
    with new_file(p, "latest", sizes, sohm_fcpl(*((50, 40) if index == "list" else (0, 0)))) as f:
        for i in range(4):
            d = f.create_dataset(f"d{i}", data=np.arange(20.0), chunks=(5,), compression="gzip")
            d.attrs["shared"] = np.arange(10)
            d.attrs["other"] = "the same text" * (i % 2 + 1)
            for j in range(10 if i == 3 else 0):       # dense attributes, some shared
                d.attrs[f"a{j}"] = np.arange(10)
    seen = seen_variants(p)
    # attributes in the SOHM heap, their datatypes and dataspaces shared there too
    assert {(M.SOHM_TABLE, False), (SHARED_REF, False, 3, shared.IN_SOHM_HEAP, None),
            (M.ATTRIBUTE, False, 3, 0, True, True)} <= seen
    with H5File.open(str(p)) as hf:
        indexes = hf.sohm_indexes
        assert len(indexes) == 2 and {i.index_type for i in indexes} == {T.LIST if index == "list" else T.BTREE}
        lists = 0
        for s in sohm_table(hf):
            record = check(s)
            if s.kind == ("sohm table",):
                assert record == indexes
            elif s.kind == ("sohm list",):   # its records, the checksum, zeros up to its allocated slots
                assert record and all(r.location == 0 for r in record)
                lists += 1
        assert lists == (2 if index == "list" else 0)


def test_old_modification_time():
    """libhdf5 has not written the old message since 1.6: an example made from the spec."""
    raw = b"19700102030405\0\0"
    decode, encode = codec(M.MTIME_OLD, Sizes())
    assert decode(raw) == 86400 + 3 * 3600 + 4 * 60 + 5
    assert encode(decode(raw)) == raw


# -- Hypothesis: valid records -> encode -> decode -> the record, and the same bytes again -------

@st.composite
def links(draw, s: Sizes):
    raw = draw(names(1, 300))
    name = raw.decode("utf-8", "surrogateescape")
    width = draw(st.sampled_from([w for w in L.WIDTH_BITS if len(raw) < 1 << 8 * w]))
    ltype = draw(st.sampled_from([L.HARD, L.SOFT, L.EXTERNAL, 65, 255]))
    common = dict(creation_order=draw(st.none() | uint(8)), charset=draw(st.none() | st.integers(0, 255)),
                  name_width=width)
    if ltype == L.HARD:
        return L.Link(name, ltype, address=draw(address(s)), hard_type_stored=draw(st.booleans()), **common)
    if ltype == L.SOFT:
        return L.Link(name, ltype, target=draw(text()), **common)
    if ltype == L.EXTERNAL:
        return L.Link(name, ltype, target=draw(text()), filename=draw(text()), external_flags=draw(uint(1)), **common)
    return L.Link(name, ltype, value=draw(st.binary(max_size=100)), **common)


@HYP
@given(st.data(), SIZES)
def test_link_encoder(data, s):
    check_encoder(M.LINK, s, data.draw(links(s)))


@st.composite
def index_infos(draw, record, counter: int):
    s = draw(SIZES)
    tracked, indexed = draw(st.booleans()), draw(st.booleans())
    return s, record(tracked, indexed, draw(uint(counter)) if tracked else None, draw(address(s)), draw(address(s)),
                     draw(address(s)) if indexed else None)


@HYP
@given(st.one_of(index_infos(LinkInfo, 8).map(lambda c: (M.LINK_INFO,) + c),
                 index_infos(AttributeInfo, 2).map(lambda c: (M.ATTRIBUTE_INFO,) + c)))
def test_link_and_attribute_info_encoders(case):
    check_encoder(*case)


@st.composite
def pairs(draw):
    return draw(st.just((None, None)) | st.tuples(uint(2), uint(2)))


@HYP
@given(pairs(), pairs(), st.tuples(uint(2), uint(2), uint(2)), uint(4), text(0, 200), SIZES)
def test_small_message_encoders(phase, estimates, k, count, comment, s):
    check_encoder(M.GROUP_INFO, s, small.GroupInfo(*phase, *estimates))
    check_encoder(M.BTREE_K, s, small.BTreeK(*k))
    check_encoder(M.REFCOUNT, s, count)
    check_encoder(M.COMMENT, s, comment)


@HYP
@given(st.data(), SIZES)
def test_symbol_table_and_sohm_table_message_encoders(data, s):
    check_encoder(M.SYMBOL_TABLE, s, SymbolTable(data.draw(address(s)), data.draw(address(s))))
    check_encoder(M.SOHM_TABLE, s, T.SohmTableMessage(data.draw(address(s)), data.draw(uint(1))))


@HYP
@given(uint(4), st.datetimes())
def test_modification_time_encoders(seconds, when):
    check_encoder(M.MTIME, Sizes(), float(seconds))
    check_encoder(M.MTIME_OLD, Sizes(), float(calendar.timegm(when.timetuple())))


@st.composite
def shared_refs(draw, s: Sizes):
    version = draw(st.sampled_from([1, 2, 3]))
    if version < 3:
        return shared.SharedRef(shared.IN_OBJECT_HEADER, draw(address(s)), version=version, type_byte=draw(uint(1)))
    if draw(st.booleans()):
        return shared.SharedRef(shared.IN_SOHM_HEAP, heap_id=draw(exactly(8)))
    return shared.SharedRef(shared.IN_OBJECT_HEADER, draw(address(s)))


@HYP
@given(st.data(), SIZES)
def test_shared_reference_encoder(data, s):
    check_encoder(SHARED_REF, s, data.draw(shared_refs(s)))


@HYP
@given(st.sampled_from([1, 2, 3]), text(0, 100), st.binary(max_size=60), st.binary(max_size=60),
       st.binary(max_size=100), st.booleans(), st.booleans(), uint(1), SIZES)
def test_attribute_encoder(version, name, dtype, space, value, dt_shared, ds_shared, charset, s):
    check_encoder(M.ATTRIBUTE, s, A.AttributeMessage(name, dtype, space, value, dt_shared, ds_shared, version=version,
                                             charset=charset if version == 3 else 0))


@st.composite
def sohm_indexes(draw, s: Sizes):
    return T.SohmIndex(draw(uint(1)), draw(uint(2)), draw(address(s)), draw(address(s)), draw(uint(1)),
                       draw(uint(4)), draw(uint(2)), draw(uint(2)), draw(uint(2)))


@st.composite
def sohm_records(draw, s: Sizes):
    if draw(st.booleans()):
        return bt.SharedMessageRecord(0, draw(uint(4)), refcount=draw(uint(4)), heap_id=draw(exactly(8)))
    return bt.SharedMessageRecord(1, draw(uint(4)), msg_type=draw(uint(1)), oh_index=draw(uint(2)),
                                  oh_address=draw(address(s)))


@HYP
@given(st.data(), SIZES)
def test_sohm_block_encoders(data, s):
    indexes = data.draw(st.lists(sohm_indexes(s), max_size=T.MAX_INDEXES))
    roundtrip(indexes, lambda r: encoded(T.encode_table, r, s), lambda b: T.decode_table(Reader(b, 0, s), len(indexes)))
    records = data.draw(st.lists(sohm_records(s), max_size=20))
    roundtrip(records, lambda r: encoded(T.encode_list, r, s), lambda b: T.decode_list(Reader(b, 0, s), len(records)))
