"""``burstscope simulate``: a simulated GPU node, as a fast trace or a live sysfs tree."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import time
from pathlib import Path
from types import FrameType

from burstscope.arguments import DEFAULT_INTERVAL, INTERVAL_HELP
from burstscope.collector.sampler import parse_interval
from burstscope.collector.simulation.collective_logs import (
    DEFAULT_DUMP_INTERVAL_US,
    CollectiveLogs,
)
from burstscope.collector.simulation.congestion import (
    EPISODE_SECONDS,
    EPISODES_FILE,
    ThrottleEpisode,
    episode_record,
    place_episodes,
)
from burstscope.collector.simulation.model import TrafficModel
from burstscope.collector.simulation.profiles import (
    DEFAULT_PROFILE,
    PROFILES,
    SLOW_RAIL,
    RailFault,
    profile_named,
)
from burstscope.collector.simulation.stragglers import (
    STRAGGLERS_FILE,
    JobGroup,
    Straggler,
    step_starts,
)
from burstscope.collector.simulation.sysfs_writer import SysfsWriter
from burstscope.collector.threads import SignalSafeEvent
from burstscope.collector.trace import TraceError, TraceInfo, TraceWriter, prepare_output
from burstscope.collector.tracegen import (
    FIXED_EPOCH_NS,
    NodeTiming,
    SimulatedScheduler,
    simulate_trace,
)
from burstscope.errors import UsageError


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--profile",
        default=DEFAULT_PROFILE,
        help=f"traffic profile: {', '.join(PROFILES)} (default: {DEFAULT_PROFILE})",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument(
        "--duration", type=float, metavar="SECONDS", help="simulated time (--sysfs: run time)"
    )
    parser.add_argument("-o", "--output", metavar="PATH", help="write a trace directory here")
    parser.add_argument(
        "--interval",
        default=DEFAULT_INTERVAL,
        metavar="DURATION",
        help=f"{INTERVAL_HELP}, of the trace (default {DEFAULT_INTERVAL})",
    )
    parser.add_argument(
        "--start",
        default="fixed",
        metavar="WHEN",
        help="wall clock of the trace's first sample: 'fixed' (2024-01-01T00:00:00Z, "
        "reproducible), 'now', or seconds since the epoch",
    )
    parser.add_argument("--sysfs", metavar="DIR", help="write an emulated sysfs tree here")
    parser.add_argument(
        "--host",
        metavar="NAME",
        help="simulate node NAME of a fleet running the job of --seed (with -o): the "
        "same collectives as every other node, with this node's own sampler noise, a "
        "skew under 100 us and a clock offset within 20 us, all derived from NAME and "
        "recorded in the trace (default: this machine's name, one node alone)",
    )
    parser.add_argument(
        "--job-hosts",
        metavar="H1,H2,...",
        help="with --host: every node of the job, by name (the host among them): each step's "
        "collectives wait for the last node to arrive, and a node that arrives early sends "
        "only its eager bytes (4 MiB a rail) until then (the model: "
        "collector/simulation/stragglers.py)",
    )
    parser.add_argument(
        "--straggler",
        action="append",
        default=[],
        metavar="HOST:MS[:EVERY[:FIRST]]",
        help="with --job-hosts: HOST reaches each step's first collective MS milliseconds "
        "late, in every EVERY-th step (default 1) from step FIRST (default 0); repeatable. "
        "The truth goes to PATH/_stragglers.jsonl",
    )
    parser.add_argument(
        "--slow-rail",
        action="append",
        default=[],
        metavar="RAIL:FRACTION",
        help="with --job-hosts: training rail RAIL (0-7) of the job runs at FRACTION of its rate "
        "on every node (a slow link paces every rank of its ring); repeatable",
    )
    parser.add_argument(
        "--collectives",
        action="store_true",
        help="with -o: also write what the training stack logs about the node's collectives "
        "under PATH/collectives/: NCCL Inspector dumps, verbose (nccl-inspector/) and plain "
        "(nccl-inspector-plain/), as NCCL 2.29's plugin writes them (collectives only, "
        "sampled by its dump thread), and each GPU's PyTorch profiler trace (pytorch/, "
        "Send and Recv included), on the node's clock; and the trace's job table "
        "(PATH/_jobs.jsonl): each job of the model holding the rails for compute and "
        "mlx5_8 for storage",
    )
    parser.add_argument(
        "--throttle-episodes",
        action="store_true",
        help="with -o: inject throttling episodes into the slow counters of the eight rails: "
        "PFC pauses, ECN/CNP and credit waits (transmit), PFC and ECN (receive), each of "
        "0.5, 1, 2 and 5 s at times drawn from --seed, at least 3 s apart on a port direction "
        "(needs --duration 65 or more); the ground truth goes to PATH/_throttle_episodes.jsonl",
    )
    parser.add_argument(
        "--inspector-dump-interval",
        default=str(DEFAULT_DUMP_INTERVAL_US),
        metavar="MICROSECONDS",
        help="NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS of the simulated Inspector: "
        "each communicator's last completed collective is written at most once per interval "
        f"(default {DEFAULT_DUMP_INTERVAL_US}, the plugin README's example)",
    )
    parser.set_defaults(func=run)


def _dump_interval(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(
            f"--inspector-dump-interval {text!r} must be a whole number of microseconds, >= 1"
        )
    return value


def _start_ns(text: str) -> int:
    if text == "fixed":
        return FIXED_EPOCH_NS
    if text == "now":
        return time.time_ns()
    try:
        seconds = float(text)
    except ValueError:
        raise UsageError(
            f"--start {text!r} is not 'fixed', 'now' or seconds since the epoch"
        ) from None
    if not math.isfinite(seconds) or seconds < 0:
        raise UsageError(f"--start {text!r} must be a non-negative number of seconds")
    return round(seconds * 1e9)


def _validated(args: argparse.Namespace) -> TrafficModel:
    try:
        profile_named(args.profile)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.duration is not None and not (math.isfinite(args.duration) and args.duration > 0):
        raise UsageError(f"--duration {args.duration:g} must be a positive number of seconds")
    if (args.output is None) == (args.sysfs is None):
        raise UsageError("give exactly one of -o PATH (a trace) or --sysfs DIR (a live tree)")
    group = _group(args)
    return TrafficModel(
        args.profile, args.seed, group=group, host=args.host if group is not None else None
    )


def _group(args: argparse.Namespace) -> JobGroup | None:
    """The job the node is one of (--job-hosts), with what is injected into it."""
    if args.job_hosts is None:
        if args.straggler or args.slow_rail:
            raise UsageError("--straggler and --slow-rail need --job-hosts")
        return None
    if args.host is None:
        raise UsageError("--job-hosts needs --host: which of the job's nodes this one is")
    hosts = tuple(name.strip() for name in args.job_hosts.split(","))
    if args.host not in hosts:
        raise UsageError(f"--host {args.host!r} is not one of --job-hosts {args.job_hosts!r}")
    stragglers = tuple(_straggler(text) for text in args.straggler)
    faults = tuple(_slow_rail(text) for text in args.slow_rail)
    try:
        return JobGroup(hosts, stragglers, args.seed, faults)
    except ValueError as exc:
        raise UsageError(f"--job-hosts {args.job_hosts!r}: {exc}") from None


def _straggler(text: str) -> Straggler:
    parts = text.rsplit(":", 3) if text.count(":") <= 3 else []
    try:
        host, delay = parts[0], float(parts[1])
        every = int(parts[2]) if len(parts) > 2 else 1
        first = int(parts[3]) if len(parts) > 3 else 0
        if not host or not (math.isfinite(delay) and delay > 0):
            raise ValueError
        return Straggler(host, round(delay * 1e6), first, None, every)
    except (IndexError, ValueError):
        raise UsageError(
            f"--straggler {text!r} is not HOST:MS[:EVERY[:FIRST]] (a delay > 0 ms, "
            "whole numbers EVERY >= 1 and FIRST >= 0)"
        ) from None


def _slow_rail(text: str) -> RailFault:
    rail, _, fraction = text.partition(":")
    try:
        return RailFault(int(rail), SLOW_RAIL, float(fraction))
    except ValueError:
        raise UsageError(
            f"--slow-rail {text!r} is not RAIL:FRACTION (a training rail 0-7, a fraction in (0, 1])"
        ) from None


def run(args: argparse.Namespace) -> int:
    model = _validated(args)
    if args.sysfs is not None:
        if args.throttle_episodes:
            raise UsageError("--throttle-episodes writes a trace: use it with -o PATH")
        return _run_sysfs(args, model)
    if args.duration is None:
        raise UsageError("-o needs --duration SECONDS (how much traffic to simulate)")
    try:
        interval_ns = parse_interval(args.interval)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    start_ns = _start_ns(args.start)
    episodes = _episodes(args, round(args.duration * 1e9))
    dump_interval_us = _dump_interval(args.inspector_dump_interval)
    path = Path(args.output)
    try:
        prepare_output(path)
    except TraceError as exc:
        raise UsageError(str(exc)) from None
    source = f"sim:{args.profile}"
    if args.host is None:
        node = NodeTiming(args.seed)
        info = TraceInfo.here(interval_ns, source)
    else:
        if not args.host.strip():
            raise UsageError("--host needs a non-empty node name")
        node = NodeTiming.for_host(args.host, args.seed)
        info = TraceInfo(interval_ns, source, args.host, node.clock_offset_ns)
    began = time.perf_counter()
    logs = None
    scheduler = None
    if args.collectives:
        assert info.host is not None
        # The counters' mapping of model time to the node's clock (tracegen.simulate_trace).
        offset = node.skew_ns + start_ns + node.clock_offset_ns
        logs = CollectiveLogs(path, info.host, args.seed, offset, dump_interval_us)
        scheduler = SimulatedScheduler(path, info.host, args.seed, offset)
    try:
        rows = simulate_trace(
            model,
            TraceWriter(path, info=info),
            round(args.duration * 1e9),
            interval_ns,
            start_ns,
            node=node,
            collective_logs=logs,
            scheduler=scheduler,
            throttle=episodes,
        )
        if episodes:
            _write_episodes(path, episodes, model, start_ns)
        if model.group is not None and model.group.stragglers:
            duration_ns = round(args.duration * 1e9)
            records = _straggler_truth(args, model.group, node, start_ns, duration_ns)
            _write_truth(path, STRAGGLERS_FILE, records)
    except TraceError as exc:
        raise UsageError(str(exc)) from None
    elapsed = time.perf_counter() - began
    print(
        f"simulated {args.duration:g} s of {args.profile} (seed {args.seed}) in {elapsed:.2f} s "
        f"({args.duration / elapsed:.0f}x real time): {rows} rows in {path}"
    )
    if logs is not None and scheduler is not None:
        print(
            f"{logs.collectives} collectives of the node: {logs.inspector.records} Inspector "
            f"records per log kind in {logs.root}; {scheduler.jobs} jobs in the job table"
        )
    return 0


def _episodes(args: argparse.Namespace, duration_ns: int) -> tuple[ThrottleEpisode, ...]:
    if not args.throttle_episodes:
        return ()
    lengths = tuple(round(s * 1e9) for s in EPISODE_SECONDS)
    try:
        return place_episodes(args.seed, lengths, tuple(range(8)), duration_ns)
    except ValueError:
        raise UsageError(
            f"--throttle-episodes needs a longer --duration than {args.duration:g} s: "
            "every cause's episodes of 0.5-5 s, 3 s apart, on each port direction"
        ) from None


def _write_episodes(
    path: Path, episodes: tuple[ThrottleEpisode, ...], model: TrafficModel, start_ns: int
) -> None:
    """The injected episodes as the trace's ground truth, one JSON object a line."""
    lines = [
        json.dumps(
            episode_record(e, model.ports[e.port].device, model.ports[e.port].port, start_ns)
        )
        for e in episodes
    ]
    try:
        (path / EPISODES_FILE).write_text("".join(line + "\n" for line in lines))
    except OSError as exc:
        raise TraceError(f"cannot write {str(path / EPISODES_FILE)!r}: {exc.strerror}") from None


def _straggler_truth(
    args: argparse.Namespace, group: JobGroup, node: NodeTiming, start_ns: int, duration_ns: int
) -> list[dict[str, int | str]]:
    """The injected stragglers of every step the trace covers, each step's start and end
    on this node's clock (model time + skew + start + clock offset, as its samples)."""
    model = TrafficModel(args.profile, args.seed, group=group, host=args.host)
    offset = node.skew_ns + start_ns + node.clock_offset_ns
    steps = []
    time_ns = 0
    while time_ns <= duration_ns:
        block = model.block_at(time_ns)
        if block.shape is not None:
            steps.append((block.index, block.start_ns + offset, block.end_ns + offset))
        time_ns = block.end_ns
        model.forget_before(time_ns)
    return step_starts(steps, group)


def _write_truth(path: Path, name: str, records: list[dict[str, int | str]]) -> None:
    try:
        (path / name).write_text("".join(json.dumps(r) + "\n" for r in records))
    except OSError as exc:
        raise TraceError(f"cannot write {str(path / name)!r}: {exc.strerror}") from None


def _prepare_tree(root: Path) -> None:
    if root.exists() and not root.is_dir():
        raise UsageError(f"--sysfs {str(root)!r} exists and is not a directory")
    if root.is_dir() and any(root.iterdir()):
        raise UsageError(f"--sysfs {str(root)!r} already exists and is not empty")
    try:
        root.mkdir(parents=False, exist_ok=True)
        if not os.access(root, os.W_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as exc:
        raise UsageError(f"cannot write --sysfs {str(root)!r}: {exc.strerror}") from None


def _run_sysfs(args: argparse.Namespace, model: TrafficModel) -> int:
    root = Path(args.sysfs)
    _prepare_tree(root)
    writer = SysfsWriter(root, model)
    stop = SignalSafeEvent()  # set from a signal handler

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        writer.create()
        print(
            f"emulated sysfs under {root}: {len(model.ports)} ports of profile {args.profile}, "
            f"data counters every 1 ms; read it with --sysfs-root {root}",
            flush=True,
        )
        duration_ns = None if args.duration is None else round(args.duration * 1e9)
        try:
            missed = writer.run(duration_ns, stop=stop)
        except KeyboardInterrupt:
            missed = 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        writer.close()
    print(f"stopped after {writer.updates} updates ({missed} ticks missed)")
    return 0
