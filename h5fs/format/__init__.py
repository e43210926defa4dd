"""HDF5 on-disk structures: bytes to frozen dataclasses and back, and pure geometry; no file I/O
(h5fs.storage.readers reads and walks them)."""
