"""The decoder and the encoder of each message type (IV.A.2), in two tables, and their names; the
type numbers come from h5fs.format.messages.types."""

from __future__ import annotations

from typing import Any, Callable

from ..format.codec import Sizes, Writer
from ..format.messages import (attribute, attribute_info, dataspace, datatype, external_files, fill_value,
                               filter_pipeline, layout, link, link_info, modification_time, small, sohm_table,
                               symbol_table)
from ..format.messages import file_space_info
from ..format.messages.types import (ATTRIBUTE, ATTRIBUTE_INFO, BTREE_K, COMMENT, DATASPACE, DATATYPE, EXTERNAL, FILL,
                                     FILL_OLD, FILTERS, FSINFO, GROUP_INFO, LAYOUT, LINK, LINK_INFO, MTIME, MTIME_OLD,
                                     REFCOUNT, SOHM_TABLE, SYMBOL_TABLE)


DECODERS = {
    DATASPACE: dataspace.decode, LINK_INFO: link_info.decode, DATATYPE: datatype.decode, FILL_OLD: fill_value.decode_old,
    FILL: fill_value.decode, LINK: link.decode, EXTERNAL: external_files.decode, LAYOUT: layout.decode,
    GROUP_INFO: small.decode_group_info, FILTERS: filter_pipeline.decode, ATTRIBUTE: attribute.decode,
    COMMENT: small.decode_comment, MTIME_OLD: modification_time.decode_old, SYMBOL_TABLE: symbol_table.decode,
    MTIME: modification_time.decode_new, BTREE_K: small.decode_btree_k, ATTRIBUTE_INFO: attribute_info.decode,
    REFCOUNT: small.decode_refcount, SOHM_TABLE: sohm_table.decode, FSINFO: file_space_info.decode,
}

# The inverse of DECODERS: ENCODERS[t](w, DECODERS[t](reader)) writes the bytes read back.
ENCODERS: dict[int, Callable[[Writer, Any], None]] = {
    DATASPACE: dataspace.encode, DATATYPE: datatype.encode, FILL_OLD: fill_value.encode_old, FILL: fill_value.encode,
    EXTERNAL: external_files.encode, LAYOUT: layout.encode, FILTERS: filter_pipeline.encode,
    LINK_INFO: link_info.encode, LINK: link.encode, GROUP_INFO: small.encode_group_info, ATTRIBUTE: attribute.encode,
    COMMENT: small.encode_comment, MTIME_OLD: modification_time.encode_old, SOHM_TABLE: sohm_table.encode,
    SYMBOL_TABLE: symbol_table.encode, MTIME: modification_time.encode_new, BTREE_K: small.encode_btree_k,
    ATTRIBUTE_INFO: attribute_info.encode, REFCOUNT: small.encode_refcount, FSINFO: file_space_info.encode,
}


NAMES = {DATASPACE: "dataspace", LINK_INFO: "link info", DATATYPE: "datatype", FILL_OLD: "fill value (old)",
         FILL: "fill value", LINK: "link", EXTERNAL: "external files", LAYOUT: "data layout",
         GROUP_INFO: "group info", FILTERS: "filter pipeline", ATTRIBUTE: "attribute", COMMENT: "comment",
         MTIME_OLD: "modification time (old)", SOHM_TABLE: "shared message table", SYMBOL_TABLE: "symbol table",
         MTIME: "modification time", BTREE_K: "B-tree K values", ATTRIBUTE_INFO: "attribute info",
         REFCOUNT: "reference count", FSINFO: "file space info"}


def encode(mtype: int, value: Any, sizes: Sizes) -> bytes:
    """The body of a message of type `mtype` holding `value` (a record as DECODERS returns it)."""
    w = Writer(sizes)
    ENCODERS[mtype](w, value)
    return w.getvalue()
