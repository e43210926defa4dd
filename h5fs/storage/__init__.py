"""File I/O, filters, chunk indexes and the chunk grid."""
