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
