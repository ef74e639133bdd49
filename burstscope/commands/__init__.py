"""Sub-commands: each module exposes register(parser), filling its own sub-parser."""
