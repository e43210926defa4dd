"""HDF5 on-disk structures: bytes to frozen dataclasses and back, and pure geometry; no file I/O
(h5fs.storage reads, walks and edits them: one module or package per structure, named as here)."""
