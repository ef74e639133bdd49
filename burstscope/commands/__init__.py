"""Sub-commands: each module exposes register(subparsers)."""
