"""File I/O, structure readers, filters, chunk indexes and the chunk grid."""
