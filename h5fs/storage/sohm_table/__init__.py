"""The shared object header message table (SMTB, spec III.I) read and kept current; its bytes are
decoded and encoded by h5fs.format.messages.sohm_table, its indexes are lists or v2 B-trees
(storage/btree_v2/) over fractal heaps of message bodies (storage/fractal_heap/).

reader  the table a 0x000F message points to, the records of its indexes, what an attribute
        message shares through it; the blocks the table and its indexes occupy
writer  SharedMessages: uses of shared messages counted down in a transaction (libhdf5's
        H5SM_delete)
uses    SharedUses: `h5fs check`'s count of the uses the file's objects make of the table
"""
