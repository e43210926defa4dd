"""Object headers (IV.A.1) read, edited and created; their bytes are decoded and encoded by
h5fs.format.object_header, their messages by h5fs.format.messages.

reader     a header with its continuation blocks, through the metadata cache; its link count;
           the blocks it occupies
edit       HeaderEdit: messages added, removed and replaced in one header inside a transaction
placement  Layout: where those edits put messages and blocks, as libhdf5 places them
create     a new header laid out as libhdf5 lays one out
"""
