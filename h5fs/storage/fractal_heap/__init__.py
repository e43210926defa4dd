"""The fractal heap (spec III.G) read and edited; its bytes are decoded and encoded by
h5fs.format.fractal_heap.

reader          FractalHeap: an object's bytes from its heap ID; the blocks the heap occupies
writer          create, delete, insert, remove; HeapWriter: several edits of one heap
heap_state      what the parts of an edit share: the header as edited, the blocks allocated
managed_space   where managed objects go; the allocation iterator, the doubling table grown
managed_blocks  the direct and indirect blocks being edited
free_sections   the heap's free sections and its free-space manager
huge_objects    huge objects and their B-tree
"""
