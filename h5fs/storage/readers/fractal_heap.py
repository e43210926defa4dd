"""Moved to h5fs.storage.fractal_heap.reader; this name stays only for space_map.py (being split
on another branch): its import moves there once that lands, and this module goes."""

from ..fractal_heap.reader import FractalHeap

__all__ = ["FractalHeap"]
