"""What the simulated node's training stack writes about its collectives, on the node's clock.

``CollectiveLogs`` takes the model's collectives chunk by chunk (TrafficModel.collectives)
and writes, under ``<trace>/collectives/``:

- ``nccl-inspector/<host>-pid<pid>.log``: one NCCL Inspector dump file per local rank (GPU
  i, rail i), verbose (``NCCL_INSPECTOR_DUMP_VERBOSE=1``);
- ``nccl-inspector-plain/<host>-pid<pid>.log``: the same records without ``event_trace_*``;
- ``pytorch/<host>-rank<i>.pt.trace.json``: each local rank's PyTorch profiler trace
  (kineto_trace.py), every collective, Send and Recv included.

Clock. The model's time m is seen by the node at wall m + skew_ns + start_wall_ns +
clock_offset_ns (tracegen.simulate_trace): the counters and these records share it, as they
share CLOCK_REALTIME on a real host, so the trace's recorded clock offset applies to both.

Times of one rank's part of a collective, from the model's issue and the rank's last byte
(CollectiveSchedule.rank_end_ns), with small lags drawn per collective, rank and channel
from the seed (not the host, so two nodes' records differ only by their clocks):

- the GPU kernel (PyTorch's kernel event, and the Inspector's ``coll_exec_time_us``) runs
  from issue + KERNEL_LAUNCH_NS to the rank's last byte + KERNEL_DRAIN_NS;
- an Inspector channel's ``kernel_start_ts``/``kernel_stop_ts`` are when NCCL's proxy thread
  saw the kernel's channel start and finish (``src/transport/profiler.cc``): the kernel's
  start and end plus PROXY_POLL_NS, floored to whole microseconds (``gettimeofday``);
- ``coll_start_ts``/``coll_stop_ts`` are the CPU's launch, before the kernel
  (``ncclProfilerStartTaskEvents``/``StopTaskEvents`` in NCCL's ``src/plugin/profiler.cc``).

So a verbose record's span [earliest kernel_start_ts, latest kernel_stop_ts] over a node's
ranks starts SPAN_START_LAG_US after the model's issue and ends SPAN_END_LAG_US after its
end (CollectiveSchedule's "in flight"), within the bounds given there.

Coverage and sampling of the Inspector as NCCL 2.29.7 builds it (NVIDIA/nccl
``plugins/profiler/inspector/inspector.cc`` and ``inspector_plugin.cc`` at v2.29.7-1):

- it enables only ``ncclProfileColl | ncclProfileKernelCh`` events, so Send and Recv (the
  pipeline's traffic) are never written. Nor is the MoE all-to-all: NCCL 2.29 runs
  ``ncclAlltoAll`` as P2P tasks (``src/enqueue.cc``) and PyTorch builds ``all_to_all`` from
  grouped Send/Recv. ``all_to_all_name`` writes them anyway, as collectives of that name
  (2.30 spells the function "All2All"), for a join that wants EP from these logs;
- each communicator keeps only its last completed collective (``completedCollInfo``, a
  ``dump`` flag set at each completion) and the dump thread, every
  NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS, writes it if the flag is set
  (``inspectorCommInfoDump``). Collectives of one communicator that complete within one
  interval leave only the last: ``coll_sn`` (NCCL's ``seqNumber[func]`` per communicator)
  then skips. The thread sleeps the interval after each dump; the time a dump takes is not
  modelled, so dumps fall on a fixed grid with a per-rank phase.
- ``json.cc`` writes each object compactly on one line, doubles as ``%lf``.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np

from burstscope.collector.simulation.collective_times import (
    NCCL_CHANNELS,
    Place,
    Places,
    RankTimes,
    mixed,
    process_id,
    rank_times,
)
from burstscope.collector.simulation.collectives import (
    ALL_GATHER,
    ALL_TO_ALL,
    GPUS_PER_NODE,
    GROUPS,
    REDUCE_SCATTER,
    CollectiveSchedule,
)
from burstscope.collector.simulation.kineto_trace import KinetoTrace

COLLECTIVES_DIR = "collectives"
INSPECTOR_DIR = "nccl-inspector"
INSPECTOR_PLAIN_DIR = "nccl-inspector-plain"
PYTORCH_DIR = "pytorch"

# The README's example interval (NVIDIA/nccl plugins/profiler/inspector/README.md).
DEFAULT_DUMP_INTERVAL_US = 500
GIT_REV = "v2.29.7-1"  # `git describe` of the plugin's build (its Makefile's version.cc)


@dataclass(slots=True)
class _Completed:
    """One rank's collective, completed, waiting for the dump thread."""

    completion_us: int
    group: int
    verbose: str  # the coll_perf object, verbose and plain
    plain: str


@dataclass(slots=True)
class _InspectorRank:
    """One rank's dump thread: its files, its dump grid and its communicators' last ones."""

    verbose: TextIO
    plain: TextIO
    phase_us: int
    pending: list[_Completed] = field(default_factory=list)
    written: int = 0


def _double(value: float) -> str:
    return f"{value:.6f}"  # json.cc jsonDouble: "%lf"


class InspectorLog:
    """The eight ranks' Inspector dump files (verbose and plain) of one node."""

    def __init__(
        self,
        root: Path,
        host: str,
        seed: int,
        wall_offset_ns: int,
        dump_interval_us: int,
        all_to_all_name: str | None,
    ) -> None:
        if dump_interval_us < 1:
            raise ValueError(f"dump interval {dump_interval_us} us must be at least 1")
        self.host = host
        self.seed = seed
        self.wall_offset_ns = wall_offset_ns
        self.interval_us = dump_interval_us
        self.all_to_all_name = all_to_all_name
        self.records = 0  # objects written (per file kind)
        self.collectives = 0  # rank collectives the plugin saw
        self._pids = [process_id(host, rank) for rank in range(GPUS_PER_NODE)]
        self._ranks: list[_InspectorRank] = []
        for rank, pid in enumerate(self._pids):
            name = f"{host}-pid{pid}.log"
            phase = int(mixed(seed, zlib.crc32(host.encode()), rank) % np.uint64(dump_interval_us))
            self._ranks.append(
                _InspectorRank(
                    (root / INSPECTOR_DIR / name).open("w", encoding="utf-8"),
                    (root / INSPECTOR_PLAIN_DIR / name).open("w", encoding="utf-8"),
                    phase,
                )
            )

    def logged(self, schedule: CollectiveSchedule) -> CollectiveSchedule:
        names = [REDUCE_SCATTER, ALL_GATHER] + ([ALL_TO_ALL] if self.all_to_all_name else [])
        return schedule.take(np.isin(schedule.collective, names))

    def write(self, schedule: CollectiveSchedule, places: Places, horizon_ns: int) -> None:
        """Take a chunk's collectives; write every dump up to ``horizon_ns`` (node wall)."""
        chunk = self.logged(schedule)
        for rank, state in enumerate(self._ranks):
            times = rank_times(chunk, rank, self.seed, self.wall_offset_ns)
            for row in range(len(chunk)):
                place = places.at(int(chunk.job[row]), int(chunk.stage[row]))
                state.pending.append(self._completed(chunk, row, rank, times, place))
            self.collectives += len(chunk)
            self._dump(rank, state, horizon_ns // 1000)

    def close(self) -> None:
        for rank, state in enumerate(self._ranks):
            self._dump(rank, state, None)
            state.verbose.close()
            state.plain.close()

    def _completed(
        self,
        chunk: CollectiveSchedule,
        row: int,
        rank: int,
        times: RankTimes,
        place: Place,
    ) -> _Completed:
        group = int(chunk.communicator[row])
        info = GROUPS[group]
        code = int(chunk.collective[row])
        name = self.all_to_all_name if code == ALL_TO_ALL else _INSPECTOR_NAMES[code]
        size = int(chunk.message_bytes[row])
        # coll_exec_time_us: the longest channel's GPU time (%globaltimer, kernel_gpu).
        exec_us = int(times.kernel_end_ns[row] - times.kernel_start_ns[row]) // 1000
        n = info.n_ranks
        if code in (REDUCE_SCATTER, ALL_GATHER):  # inspectorComputeCollBw
            traffic, factor = size * n, (n - 1) / n
        else:  # 2.29 knows no AllToAll: bandwidth 0
            traffic, factor = 0, 0.0
        algorithm = traffic / 1.0e9 / (exec_us / 1e6) if exec_us else 0.0
        head = (
            f'{{"coll":"{name}","coll_sn":{int(chunk.sequence[row])},'
            f'"coll_msg_size_bytes":{size},"coll_exec_time_us":{exec_us},'
            f'"coll_timing_source":"kernel_gpu","coll_algobw_gbs":{_double(algorithm)},'
            f'"coll_busbw_gbs":{_double(algorithm * factor)}'
        )
        starts = times.channel_start_us[row].tolist()
        stops = times.channel_stop_us[row].tolist()
        launch_us = int(times.launch_ns[row]) // 1000
        # The order NCCL's events came in: collective start and stop, channel starts, then
        # each channel's record and stop.
        channels = range(NCCL_CHANNELS)
        by_sn = ",".join(
            f'{{"channel_id":{c},"kernel_start_sn":{3 + c},'
            f'"kernel_stop_sn":{4 + NCCL_CHANNELS + 2 * c},'
            f'"kernel_record_sn":{3 + NCCL_CHANNELS + 2 * c}}}'
            for c in channels
        )
        by_ts = ",".join(
            f'{{"channel_id":{c},"kernel_start_ts":{starts[c]},'
            f'"kernel_stop_ts":{stops[c]},"kernel_record_ts":{stops[c] - 1}}}'
            for c in channels
        )
        verbose = (
            f'{head},"event_trace_sn":{{"coll_start_sn":1,"coll_stop_sn":2,'
            f'"kernel_events":[{by_sn}]}},"event_trace_ts":{{"coll_start_ts":{launch_us},'
            f'"coll_stop_ts":{launch_us + 6},"kernel_events":[{by_ts}]}}}}'
        )
        header = (
            f'{{"id":"{place.communicator_id(group, rank)}",'
            f'"rank":{place.rank_in(group, rank)},"n_ranks":{n},"nnodes":{info.nnodes}}}'
        )
        return _Completed(max(stops), group, f"{header}\0{verbose}", f"{header}\0{head}}}")

    def _dump(self, rank: int, state: _InspectorRank, horizon_us: int | None) -> None:
        """Write the dumps at or before ``horizon_us`` (None: all that are left)."""
        interval, phase = self.interval_us, state.phase_us
        pending = sorted(state.pending, key=lambda c: c.completion_us)
        chosen: dict[tuple[int, int], _Completed] = {}  # (dump time, group) -> last completed
        left: list[_Completed] = []
        for done in pending:
            # The first dump at or after the completion sees it.
            dump = phase + -(-(done.completion_us - phase) // interval) * interval
            if horizon_us is not None and dump > horizon_us:
                left.append(done)
            else:
                chosen[(dump, done.group)] = done  # a later completion overwrites
        state.pending = left
        pid = self._pids[rank]
        position = 0
        previous = None
        for (dump, _), done in sorted(chosen.items()):
            position = position + 1 if dump == previous else 0
            previous = dump
            metadata = (
                f'{{"inspector_output_format_version":"v4.0","git_rev":"{GIT_REV}",'
                f'"rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":'
                f'{dump + position},"hostname":"{self.host}","pid":{pid}}}'
            )
            for text, file in ((done.verbose, state.verbose), (done.plain, state.plain)):
                header, perf = text.split("\0")
                file.write(f'{{"header":{header},"metadata":{metadata},"coll_perf":{perf}}}\n')
            state.written += 1
            self.records += 1


_INSPECTOR_NAMES = {REDUCE_SCATTER: "ReduceScatter", ALL_GATHER: "AllGather"}


class CollectiveLogs:
    """Every record file of one simulated node, written chunk by chunk in bounded memory."""

    def __init__(
        self,
        trace: Path,
        host: str,
        seed: int,
        wall_offset_ns: int,
        dump_interval_us: int = DEFAULT_DUMP_INTERVAL_US,
        all_to_all_name: str | None = None,
        pytorch_ranks: Sequence[int] = tuple(range(GPUS_PER_NODE)),
    ) -> None:
        self.root = trace / COLLECTIVES_DIR
        for folder in (INSPECTOR_DIR, INSPECTOR_PLAIN_DIR, PYTORCH_DIR):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        self.host = host
        self.seed = seed
        self.wall_offset_ns = wall_offset_ns
        self.places = Places(host, seed)
        self.inspector = InspectorLog(
            self.root, host, seed, wall_offset_ns, dump_interval_us, all_to_all_name
        )
        self.pytorch = [
            KinetoTrace(
                self.root / PYTORCH_DIR / f"{host}-rank{rank}.pt.trace.json",
                host,
                rank,
                seed,
                wall_offset_ns,
                process_id(host, rank),
            )
            for rank in pytorch_ranks
        ]
        self.collectives = 0

    def write(self, schedule: CollectiveSchedule, until_ns: int) -> None:
        """The collectives issued before model time ``until_ns`` not given yet, by issue."""
        self.collectives += len(schedule)
        # Nothing issued later completes before until_ns on the node's clock.
        self.inspector.write(schedule, self.places, until_ns + self.wall_offset_ns)
        for trace in self.pytorch:
            trace.write(schedule, self.places)

    def close(self) -> None:
        self.inspector.close()
        for trace in self.pytorch:
            trace.close()
