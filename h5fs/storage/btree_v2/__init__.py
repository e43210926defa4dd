"""The version 2 B-tree (spec III.A.2) read and edited; its bytes are decoded and encoded by
h5fs.format.btree_v2. Its users: dense links and attributes, the shared-message table's indexes, a
fractal heap's huge objects, and the chunk index of type 5 (storage/index/btree_v2.py).

reader  headers and nodes through the metadata cache; every record in key order, one record by
        descent; the blocks a tree occupies
edit    BTreeV2Edit: a batch of inserted, replaced and removed records in one transaction; a new
        tree's header; a tree deleted
"""
