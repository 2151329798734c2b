"""Pure parsers of command output: ``build_argv()`` + ``parse()`` per tool; no I/O."""
