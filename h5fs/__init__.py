"""h5fs: mount an HDF5 file as a directory tree."""

__version__ = "0.1.0"
