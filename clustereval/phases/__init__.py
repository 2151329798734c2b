"""One module per phase: build commands, run them through the transport, parse, return a record."""
