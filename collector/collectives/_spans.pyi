# Types of the compiled reader of Inspector lines (collector/collectives/_spans.c), for mypy.
# The lines are any object with the buffer protocol (collections.abc.Buffer from 3.12).
from typing import Any

def scan(
    lines: Any, max_object_bytes: int
) -> tuple[list[tuple[str, str, str, str | None, int, int, str]], bytes] | None: ...
def scan_file(
    fd: int, offset: int, length: int, prefix: Any, max_object_bytes: int, chunk: int
) -> tuple[list[tuple[str, str, str, str | None, int, int, str]], bytes, int] | None: ...
