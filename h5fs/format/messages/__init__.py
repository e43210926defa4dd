"""One module per object header message type; `decode_message` dispatches by type number."""
