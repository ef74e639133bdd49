"""NCCL Inspector records written for known traffic: the testbed generator's collectives.

The RoCE generator (:mod:`burstscope.testing.rocegen`) sends each burst as one collective;
this module writes it, when it ends, as the record NCCL's Inspector profiler plugin writes for
a completed operation, so a join of a trace with Inspector logs can be checked against a
schedule whose truth is known. Nothing in the agent imports it.

The format is NVIDIA/nccl ``plugins/profiler/inspector/inspector_json.cc`` as of NCCL 2.30:
format "v4.0", ``comm_name`` in the header, collectives as ``coll_perf`` and Send/Recv as
``p2p_perf`` (with ``p2p_peer``), the verbose ``event_trace_sn`` and ``event_trace_ts`` of
``NCCL_INSPECTOR_DUMP_VERBOSE=1``, each object compact on one line as ``json.cc`` writes it,
in ``<dir>/<hostname>-pid<pid>.log`` opened with "w" (``inspector.cc``).
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

# The collectives the generator sends, in the Inspector's spelling (NVIDIA/nccl
# plugins/profiler/inspector/inspector.cc ncclFuncToString: "All2All" from 2.30).
ALL_TO_ALL = "All2All"
SEND = "Send"
REDUCE_SCATTER = "ReduceScatter"
ALL_GATHER = "AllGather"


@dataclass(frozen=True, slots=True)
class Communicator:
    """The NCCL communicator a type's collectives run on, as the Inspector's header has it."""

    id: str  # header.id: the communicator's hash
    rank: int  # header.rank
    n_ranks: int  # header.n_ranks
    nnodes: int  # header.nnodes
    peer: int | None = None  # p2p_perf.p2p_peer; None: the type's operations are collectives


# One MoE job's groups as seen from one rank: EP over 8 GPUs on 2 nodes, PP to the next
# stage's rank, DP over 16 ranks on 4 nodes (the largest group, which is how a reader that
# is given no names infers DP).
COMMUNICATORS = {
    "EP": Communicator("0x3b8e5f0a91c2d711", rank=3, n_ranks=8, nnodes=2),
    "PP": Communicator("0x3b8e5f0a91c2d712", rank=0, n_ranks=2, nnodes=2, peer=1),
    "DP": Communicator("0x3b8e5f0a91c2d713", rank=5, n_ranks=16, nnodes=4),
}


@dataclass(frozen=True, slots=True)
class Operation:
    """One completed burst as a collective: what a record is written from."""

    kind: str  # "EP", "PP" or "DP": picks the communicator
    collective: str  # the Inspector's name: All2All, Send, ReduceScatter, AllGather
    start_ns: int  # wall clock: the first packet handed to the socket
    send_end_ns: int  # wall clock: the last sendto returned
    end_ns: int  # wall clock: the socket's queue drained onto the wire
    bytes: int  # frame bytes this rank's link carried for it


class InspectorWriter:
    """Each finished operation as a verbose Inspector record, one line each, flushed.

    Times are integer microseconds on the wall clock, as the plugin's ``inspectorGetTime``
    (gettimeofday) gives them. The collective's start and stop (``coll_start_ts``,
    ``coll_stop_ts``) are the CPU side: the first packet handed to the socket and the last
    ``sendto`` returned. The one kernel channel runs from the first packet to the queue
    drained (the wire side), so a join that prefers kernel times, as the plugin's own
    ``coll_exec_time_us`` does, gets the burst's [start_ns, end_ns) with the start rounded
    down and the end up. Bandwidths are ``inspectorComputeOpBw``'s (``inspector.cc``),
    which leaves All2All at 0. ``comm_name`` is "unknown", what the plugin writes for a
    communicator without a name, so a reader must infer each type from the collective and
    the group's size.
    """

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.hostname = socket.gethostname()
        self.pid = os.getpid()
        self.path = directory / f"{self.hostname}-pid{self.pid}.log"
        self._file: IO[str] = self.path.open("w")
        self._sequence: Counter[str] = Counter()  # coll_sn / p2p_sn, per communicator
        self.written = 0

    def write(self, operation: Operation) -> None:
        self._file.write(json.dumps(self.record(operation), separators=(",", ":")) + "\n")
        # Flushed at once: a reader tailing the directory sees each record when it is made.
        self._file.flush()
        self.written += 1

    def record(self, operation: Operation) -> dict[str, Any]:
        communicator = COMMUNICATORS[operation.kind]
        self._sequence[operation.kind] += 1
        start_us = operation.start_ns // 1000
        stop_us = -(-operation.end_ns // 1000)
        exec_us = stop_us - start_us
        prefix = "coll" if communicator.peer is None else "p2p"
        algorithm, bus = bandwidths(operation.collective, operation.bytes, exec_us, communicator)
        perf: dict[str, Any] = {
            prefix: operation.collective,
            f"{prefix}_sn": self._sequence[operation.kind],
        }
        if communicator.peer is not None:
            perf["p2p_peer"] = communicator.peer
        perf |= {
            f"{prefix}_msg_size_bytes": operation.bytes,
            f"{prefix}_exec_time_us": exec_us,
            f"{prefix}_timing_source": "kernel_gpu",
            f"{prefix}_algobw_gbs": round(algorithm, 6),
            f"{prefix}_busbw_gbs": round(bus, 6),
            # The plugin numbers one operation's events in the order they came.
            "event_trace_sn": {
                f"{prefix}_start_sn": 1,
                f"{prefix}_stop_sn": 2,
                "kernel_events": [
                    {"channel_id": 0, "kernel_start_sn": 3, "kernel_stop_sn": 5}
                    | {"kernel_record_sn": 4}
                ],
            },
            "event_trace_ts": {
                f"{prefix}_start_ts": start_us,
                f"{prefix}_stop_ts": max(operation.send_end_ns // 1000, start_us),
                "kernel_events": [
                    {"channel_id": 0, "kernel_start_ts": start_us, "kernel_stop_ts": stop_us}
                    | {"kernel_record_ts": stop_us}
                ],
            },
        }
        return {
            "header": {
                "id": communicator.id,
                "comm_name": "unknown",
                "rank": communicator.rank,
                "n_ranks": communicator.n_ranks,
                "nnodes": communicator.nnodes,
            },
            "metadata": {
                "inspector_output_format_version": "v4.0",
                "git_rev": "",
                "rec_mechanism": "nccl_profiler_interface",
                "dump_timestamp_us": time.time_ns() // 1000,
                "hostname": self.hostname,
                "pid": self.pid,
            },
            f"{prefix}_perf": perf,
        }

    def close(self) -> None:
        self._file.close()


def bandwidths(
    collective: str, size: int, exec_us: int, communicator: Communicator
) -> tuple[float, float]:
    """Algorithm and bus bandwidth in GB/s as ``inspectorComputeOpBw`` computes them."""
    n = communicator.n_ranks
    if communicator.peer is not None:
        traffic, factor = float(size), 1.0  # Send/Recv
    elif collective in (REDUCE_SCATTER, ALL_GATHER):
        traffic, factor = float(size * n), (n - 1) / n
    else:  # All2All is not in its switch: no traffic, factor 0
        traffic, factor = 0.0, 0.0
    algorithm = traffic / 1e9 / (exec_us / 1e6) if exec_us > 0 else 0.0
    return algorithm, algorithm * factor
