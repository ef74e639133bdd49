# Types of the compiled tick (collector/sources/_tick.c), for mypy. The buffers are any
# objects with the buffer protocol (collections.abc.Buffer from Python 3.12).
from typing import Any

def read_ports(
    buffer: Any,
    offset: int,
    ports: int,
    xmit_fds: Any,
    rcv_fds: Any,
    scales: Any,
    next_status: Any,
    pending: Any,
) -> int: ...
def run_ticks(
    buffer: Any,
    records: int,
    capacity: int,
    record_bytes: int,
    header: tuple[int, int, int, int, int],
    ports: int,
    xmit_fds: Any,
    rcv_fds: Any,
    scales: Any,
    next_status: Any,
    pending: Any,
    interval_ns: int,
    spin_ns: int,
    deadline: int,
    ticks: int,
    missed: int,
    parent: int,
) -> tuple[int, int, int, int, int, int]: ...

# The ring's head word (collector/ring.py): release store then release fence; load-acquire;
# acquire fence then load. `index` is the word's place in the 64-word header.
def ring_publish_head(buffer: Any, index: int, value: int) -> None: ...
def ring_acquire_head(buffer: Any, index: int) -> int: ...
def ring_recheck_head(buffer: Any, index: int) -> int: ...
