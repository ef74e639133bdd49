"""One simulated rank's PyTorch profiler trace: collectives, Send and Recv, as Kineto writes it.

The file is a Chrome trace-event JSON object as pytorch/kineto ``libkineto/src/
output_json.cpp`` writes it: ``schemaVersion``, ``deviceProperties``, ``distributedInfo``,
``displayTimeUnit``, ``baseTimeNanoseconds`` (kineto#928) and ``traceEvents``, whose ``ts``
and ``dur`` are microseconds relative to the base with three decimals, the nanoseconds
(kineto#910). Per call, as c10d and the profiler record it:

- a ``record_param_comms`` CPU op (``"cat": "cpu_op"``) with ``saveNcclMeta``'s args
  (``torch/csrc/profiler/util.cpp``): "Collective name" (c10d's: ``all_to_all``, ``send``,
  ``recv``, ``_reduce_scatter_base``, ``_allgather_base``), "Process Group Name" and
  "Description" (Megatron's group names), "Process Group Ranks", "Group size", "dtype",
  "In msg nelems", "Out msg nelems", "Dst Rank" or "Src Rank" (global ranks) for send and
  recv, "Seq", and the "External id" that links it to its kernel;
- the NCCL kernel on the GPU stream of its communicator (``"cat": "kernel"``, ``pid`` the
  device), named as NCCL 2.19+ names them (``src/device/generate.py``): every Send, Recv and
  AllToAll runs in ``ncclDevKernel_SendRecv``; Kineto copies the op's metadata into the
  kernel's args (``appendCollectiveMetadata``).

The kernel runs [issue + launch, the rank's last byte + drain) on the node's clock
(collective_times.rank_times); the CPU op ends at the launch. The file is written as the
chunks come (one event a line) and closed at the end: memory stays bounded.
"""

from __future__ import annotations

import json
from pathlib import Path

from burstscope.collector.simulation.collective_times import Place, Places, rank_times
from burstscope.collector.simulation.collectives import (
    ALL_GATHER,
    ALL_TO_ALL,
    GROUPS,
    PP_NEXT,
    PP_PREVIOUS,
    RECV,
    REDUCE_SCATTER,
    SEND,
    WORLD_RANKS,
    CollectiveSchedule,
    NodePlace,
)

_C10D_NAMES = {
    ALL_TO_ALL: "all_to_all",
    RECV: "recv",
    SEND: "send",
    REDUCE_SCATTER: "_reduce_scatter_base",
    ALL_GATHER: "_allgather_base",
}
_ARGUMENTS = "(ncclDevKernelArgsStorage<4096ul>)"
_KERNELS = {
    ALL_TO_ALL: f"ncclDevKernel_SendRecv{_ARGUMENTS}",
    RECV: f"ncclDevKernel_SendRecv{_ARGUMENTS}",
    SEND: f"ncclDevKernel_SendRecv{_ARGUMENTS}",
    REDUCE_SCATTER: f"ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL{_ARGUMENTS}",
    ALL_GATHER: f"ncclDevKernel_AllGather_RING_LL{_ARGUMENTS}",
}
_STREAMS = (31, 35, 39, 27)  # the CUDA stream of each communicator (GROUPS order)
_DTYPE, _DTYPE_BYTES = "BFloat16", 2
_CPU_OP_NS = 25_000  # how long record_param_comms lasts on the CPU
_SECOND = 1_000_000_000


def _ts(ns: int) -> str:
    """Nanoseconds after the base as Kineto writes them: microseconds with three decimals."""
    micro, nano = divmod(ns, 1000)
    return f"{micro}.{nano:03d}"


class KinetoTrace:
    """One local rank's trace file, open from the first chunk to ``close``."""

    def __init__(
        self, path: Path, host: str, rank: int, seed: int, wall_offset_ns: int, pid: int
    ) -> None:
        self.path = path
        self.rank = rank
        self.seed = seed
        self.wall_offset_ns = wall_offset_ns
        self.pid = pid
        # A whole second at least one second before anything the trace holds.
        self.base_ns = (wall_offset_ns - _SECOND) // _SECOND * _SECOND
        self.events = 0
        self._external_id = 0
        self._file = path.open("w", encoding="utf-8")
        self._started = False
        self._host = host

    def _header(self, place: NodePlace) -> None:
        rank = place.global_rank(self.rank)
        distributed = {
            "backend": "nccl",
            "rank": rank,
            "world_size": WORLD_RANKS,
            "nccl_version": "2.29.7",
        }
        device = {"id": self.rank, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 84929216512}
        self._file.write(
            "{\n"
            '  "schemaVersion": 1,\n'
            f'  "deviceProperties": [{json.dumps(device)}],\n'
            f'  "distributedInfo": {json.dumps(distributed)},\n'
            '  "displayTimeUnit": "ms",\n'
            f'  "baseTimeNanoseconds": {self.base_ns},\n'
            '  "traceEvents": [\n'
        )
        start = _ts(_SECOND)
        for pid, tid, name, value in (
            (self.pid, 0, "process_name", {"name": "python"}),
            (self.rank, 0, "process_name", {"name": "python"}),
            (self.rank, 0, "process_labels", {"labels": f"GPU {self.rank}"}),
            (self.pid, self.pid, "thread_name", {"name": f"thread {self.pid} (python)"}),
        ):
            self._event(
                f'{{"name": "{name}", "ph": "M", "ts": {start}, "pid": {pid}, "tid": {tid}, '
                f'"args": {json.dumps(value)}}}'
            )

    def _event(self, text: str) -> None:
        self._file.write(("  " if not self.events else ",\n  ") + text)
        self.events += 1

    def write(self, schedule: CollectiveSchedule, places: Places) -> None:
        if not len(schedule):
            return
        if not self._started:
            self._header(places.at(int(schedule.job[0]), int(schedule.stage[0])).place)
            self._started = True
        times = rank_times(schedule, self.rank, self.seed, self.wall_offset_ns)
        for row in range(len(schedule)):
            place = places.at(int(schedule.job[row]), int(schedule.stage[row]))
            self._external_id += 1
            args = self._metadata(schedule, row, place)
            launch = int(times.launch_ns[row]) - self.base_ns
            start = int(times.kernel_start_ns[row]) - self.base_ns
            end = int(times.kernel_end_ns[row]) - self.base_ns
            op: dict[str, object] = {
                "External id": self._external_id,
                "Record function id": 0,
                "Ev Idx": 0,
            }
            op.update(args)
            op.update({"Rank": place.rank_in(int(schedule.communicator[row]), self.rank)})
            op.update({"Is asynchronized op": 0})
            self._event(
                f'{{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": {self.pid},'
                f' "tid": {self.pid}, "ts": {_ts(launch - _CPU_OP_NS)}, '
                f'"dur": {_ts(_CPU_OP_NS)}, "args": {json.dumps(op)}}}'
            )
            code = int(schedule.collective[row])
            stream = _STREAMS[int(schedule.communicator[row])]
            kernel: dict[str, object] = {
                "External id": self._external_id,
                "queued": 0,
                "device": self.rank,
                "context": 1,
                "stream": stream,
                "correlation": 100_000 + self._external_id,
            }
            kernel.update(args)
            self._event(
                f'{{"ph": "X", "cat": "kernel", "name": "{_KERNELS[code]}", "pid": {self.rank},'
                f' "tid": {stream}, "ts": {_ts(start)}, "dur": {_ts(end - start)}, '
                f'"args": {json.dumps(kernel)}}}'
            )

    def _metadata(self, schedule: CollectiveSchedule, row: int, place: Place) -> dict[str, object]:
        group = int(schedule.communicator[row])
        code = int(schedule.collective[row])
        info = GROUPS[group]
        ranks = place.place.process_group_ranks(group, self.rank)
        elements = int(schedule.message_bytes[row]) // _DTYPE_BYTES
        in_elements = elements * info.n_ranks if code == REDUCE_SCATTER else elements
        out_elements = elements * info.n_ranks if code == ALL_GATHER else elements
        found: dict[str, object] = {
            "Collective name": _C10D_NAMES[code],
            "dtype": _DTYPE,
            "In msg nelems": in_elements,
            "Out msg nelems": out_elements,
            "Group size": info.process_group_size,
            "In split size": "[]",
            "Out split size": "[]",
            "Global rank start": ranks[0],
            "Global rank stride": ranks[1] - ranks[0],
            "Process Group Name": place.place.process_group_name(group, self.rank),
            "Process Group Description": info.description,
            "Process Group Ranks": "[" + ", ".join(map(str, ranks)) + "]",
            "Seq": int(schedule.sequence[row]),
        }
        if group in (PP_PREVIOUS, PP_NEXT):
            peers = place.place.members(group, self.rank)
            me = place.place.global_rank(self.rank)
            peer = peers[0] if peers[1] == me else peers[1]
            found["Dst Rank" if code == SEND else "Src Rank"] = peer
        return found

    def close(self) -> None:
        if not self._started:
            self._header(NodePlace.for_host(self._host, self.seed, 0, 0))
        self._file.write("\n  ]\n}\n")
        self._file.close()
