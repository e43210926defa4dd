"""Object header message type numbers (IV.A.2): the one table every layer names them by. Each
type's decoder and encoder is in its message's module here; model/messages.py tables them."""

NIL, DATASPACE, LINK_INFO, DATATYPE, FILL_OLD, FILL, LINK, EXTERNAL = 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07
LAYOUT, GROUP_INFO, FILTERS, ATTRIBUTE, COMMENT, MTIME_OLD, SOHM_TABLE = 0x08, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F
CONTINUATION, SYMBOL_TABLE, MTIME, BTREE_K, ATTRIBUTE_INFO, REFCOUNT, FSINFO = 0x10, 0x11, 0x12, 0x13, 0x15, 0x16, 0x17

# message types h5fs decodes or knowingly ignores
KNOWN_TYPES = frozenset(range(0x00, 0x19))
