"""Walkers: read HDF5 structures from the file through a BlockReader (following continuation
blocks, tree nodes, heap and array blocks, through the file's metadata cache) and decode their
bytes with h5fs.format, which does no I/O. One module per structure, named as in h5fs.format;
each says which blocks its structure occupies (`extents`, storage/extent_sink.py)."""
