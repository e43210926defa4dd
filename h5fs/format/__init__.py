"""Decoding of HDF5 on-disk structures: bytes to frozen dataclasses, no file I/O."""
