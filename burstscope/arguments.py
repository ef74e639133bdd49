"""Flags several commands share (port selection, source, interval) and what they build."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from burstscope.collector.discovery import DEFAULT_SYSFS_ROOT, compile_filter
from burstscope.collector.sources import build_source
from burstscope.collector.sources.base import CounterSource, SourceError, SourceOptions
from burstscope.errors import UsageError

if TYPE_CHECKING:
    from burstscope.collector.sampler import SamplerConfig


def add_port_selection(parser: argparse.ArgumentParser, defaults: bool = True) -> None:
    parser.add_argument(
        "--sysfs-root",
        default=DEFAULT_SYSFS_ROOT if defaults else None,
        help=f"root of sysfs (default: {DEFAULT_SYSFS_ROOT})",
    )
    parser.add_argument("--include", metavar="RE", help="only devices matching this expression")
    parser.add_argument("--exclude", metavar="RE", help="skip devices matching this expression")


def add_source_arguments(parser: argparse.ArgumentParser, defaults: bool = True) -> None:
    """Source flags; with defaults=False they stay None so a configuration file can fill them."""
    parser.add_argument(
        "--source",
        default="sysfs" if defaults else None,
        metavar="SPEC",
        help="sysfs (every discovered port, default), netdev:IF[,IF...], sim[:PROFILE[:SEED]], "
        "replay:PATH",
    )
    add_port_selection(parser, defaults)
    parser.add_argument(
        "--line-rate",
        metavar="GBITS",
        type=float,
        help="data rate in Gb/s of every port, instead of what the kernel says",
    )
    parser.add_argument(
        "--line-rate-for",
        metavar="DEVICE=GBITS",
        action="append",
        type=parse_line_rate_for,
        help="data rate in Gb/s of one device's ports (repeatable; like [source.line_rates] "
        "in the configuration file): for a rate file that reads 0, fails, or is wrong",
    )
    parser.add_argument(
        "--interval",
        default=DEFAULT_INTERVAL if defaults else None,
        metavar="DURATION",
        help=INTERVAL_HELP
        + (
            f" (default {DEFAULT_INTERVAL})"
            if defaults
            else f" (default {DEFAULT_INTERVAL}, or source.interval of --config)"
        ),
    )
    parser.add_argument(
        "--ethtool",
        action=argparse.BooleanOptionalAction,
        help="read the ethtool statistics (PFC) of each RoCE netdev; ethtool asks the running "
        f"kernel, so the default is on only with --sysfs-root {DEFAULT_SYSFS_ROOT}",
    )


DEFAULT_INTERVAL = "1ms"
# parse_interval's units; a bare number is seconds, as in the configuration file.
INTERVAL_HELP = (
    "sampling interval, 100us..60s, with a unit (ns, us, ms, s: 1ms, 500us, 0.002s); "
    "a bare number is seconds"
)


def format_interval(nanoseconds: int) -> str:
    """An interval for a log line, with its unit: 1 ms, 500 us, 2 s."""
    if nanoseconds >= 1_000_000_000:
        return f"{nanoseconds / 1e9:g} s"
    if nanoseconds >= 1_000_000:
        return f"{nanoseconds / 1e6:g} ms"
    return f"{nanoseconds / 1e3:g} us"


# What every "line rate unknown" message points to.
LINE_RATE_HINT = (
    "set its data rate with [source.line_rates] DEVICE = GBITS in the configuration file "
    "or --line-rate-for DEVICE=GBITS"
)


def parse_line_rate_for(text: str) -> tuple[str, float]:
    """``mlx5_0=400`` -> ("mlx5_0", 400.0); argparse reports a ValueError as a usage error."""
    device, sep, gbits = text.partition("=")
    try:
        value = float(gbits)
    except ValueError:
        value = 0.0
    if not sep or not device or not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not DEVICE=GBITS with GBITS > 0")
    return device, value


def gbits_to_bytes(gbits: float) -> int:
    return round(gbits * 1e9 / 8)


def build_source_from(
    spec: str,
    sysfs_root: str,
    include: str | None,
    exclude: str | None,
    line_rate_gbits: float | None,
    line_rates_gbits: dict[str, float] | None = None,
    ethtool: bool | None = None,
) -> CounterSource:
    """The source the flags (or their configuration-file values) name; UsageError if none.

    ``ethtool`` None: read it only over the running kernel's sysfs. SIOCETHTOOL always asks
    the running kernel, so beside a fixture or emulated tree it would read interfaces that
    are not the tree's (or fail on names the kernel does not have).
    """
    line_rate = None
    if line_rate_gbits is not None:
        if line_rate_gbits <= 0:
            raise UsageError(f"--line-rate {line_rate_gbits:g} must be positive")
        line_rate = gbits_to_bytes(line_rate_gbits)
    rates = tuple(
        sorted(
            (device, gbits_to_bytes(gbits)) for device, gbits in (line_rates_gbits or {}).items()
        )
    )
    try:
        options = SourceOptions(
            sysfs_root=sysfs_root,
            include=compile_filter(include, "--include"),
            exclude=compile_filter(exclude, "--exclude"),
            line_rate_bytes_per_second=line_rate,
            line_rates=rates,
            ethtool=sysfs_root == DEFAULT_SYSFS_ROOT if ethtool is None else ethtool,
        )
        return build_source(spec, options)
    except (ValueError, SourceError) as exc:
        raise UsageError(str(exc)) from None


def source_from_args(args: argparse.Namespace) -> CounterSource:
    return build_source_from(
        args.source,
        args.sysfs_root,
        args.include,
        args.exclude,
        args.line_rate,
        dict(args.line_rate_for or ()),
        args.ethtool,
    )


def sampler_config_from_args(args: argparse.Namespace) -> SamplerConfig:
    # Here, not at the top: the sampler loads numpy, which `discover` does not need.
    from burstscope.collector.sampler import SamplerConfig, parse_interval

    try:
        return SamplerConfig(interval_ns=parse_interval(args.interval))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


# Not a terminal (a log, a pipe): one line per port direction this often, by default.
PLAIN_EVERY_SECONDS = 5.0


def add_every_argument(parser: argparse.ArgumentParser) -> None:
    """``--every``: how often ``top`` and ``demo`` print plain lines when not on a terminal."""
    parser.add_argument(
        "--every",
        type=float,
        default=PLAIN_EVERY_SECONDS,
        metavar="SECONDS",
        help="when stdout is not a terminal: one line per port direction this often "
        f"(default {PLAIN_EVERY_SECONDS:g})",
    )


def check_every(seconds: float) -> float:
    if not 0.1 <= seconds <= 3600:
        raise UsageError(f"--every {seconds:g} must be between 0.1 and 3600 seconds")
    return seconds


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    """Job attribution (Slurm, Kubernetes): agent and top alike."""
    parser.add_argument(
        "--slurm-jobs-dir",
        metavar="DIR",
        help="where the shipped Slurm prolog writes one file per job "
        "(default /run/burstscope/jobs, made by the first job's prolog)",
    )
    parser.add_argument(
        "--kubelet-socket",
        metavar="PATH",
        help="the kubelet's pod-resources socket (default "
        "/var/lib/kubelet/pod-resources/kubelet.sock; absent: no Kubernetes jobs)",
    )
    parser.add_argument(
        "--no-jobs",
        action="store_true",
        default=None,
        help="no job attribution (Slurm, Kubernetes), whatever the configuration says",
    )


def add_collective_arguments(parser: argparse.ArgumentParser) -> None:
    """The collectives' classes on the agent's bursts, from NCCL Inspector dumps."""
    parser.add_argument(
        "--nccl-inspector-dir",
        action="append",
        metavar="DIR",
        help="an NCCL_INSPECTOR_DUMP_DIR of this node's jobs, tailed for the classes of the "
        "collectives behind each burst (repeatable; with NCCL_INSPECTOR_DUMP_VERBOSE=1)",
    )
    parser.add_argument(
        "--collective-map",
        metavar="FILE",
        help='TOML: "communicator id or group name" = "EP" | "PP" | "DP" | "other"',
    )
    parser.add_argument(
        "--collective-clock-offset",
        metavar="DURATION",
        help="added to every record's time to put it on the counters' clock (default 0)",
    )


def _positive_seconds(text: str) -> float:
    """A finite number of seconds above 0 (argparse reports the error as a usage error)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share in (0, 1]")
    return value


def add_pfc_watchdog_arguments(parser: argparse.ArgumentParser) -> None:
    """The PFC storm watchdog (collector.pfc_watchdog): RoCE pause counters at 10 Hz."""
    parser.add_argument(
        "--pfc-watchdog",
        action=argparse.BooleanOptionalAction,
        help="poll the PFC pause counters of every RoCE port (ethtool) at 10 Hz and report "
        "storms: a priority paused for most of a 400 ms window ([pfc_watchdog] enabled)",
    )
    parser.add_argument(
        "--pfc-watchdog-interval",
        type=_positive_seconds,
        metavar="SECONDS",
        help="seconds between the watchdog's polls (default 0.1; at most half the window)",
    )
    parser.add_argument(
        "--pfc-watchdog-window",
        type=_positive_seconds,
        metavar="SECONDS",
        help="the window whose paused share is judged (default 0.4, SONiC's)",
    )
    parser.add_argument(
        "--pfc-watchdog-threshold",
        type=_share,
        metavar="SHARE",
        help="paused share of the window that starts a storm (default 0.8)",
    )
