"""Prints docs/metrics.md's metric table from collector/exporter.py, so the table stays true.

``python dashboards/metrics_table.py`` prints the Markdown table; ``--check FILE`` exits 1
when the table between the markers in FILE differs (tests/test_dashboards.py runs it);
``--write FILE`` replaces it. Types and labels come from a scrape of the exporter over a
hand-built snapshot in which every family is present (one port with every slow counter, a
stuck counter, a renegotiation, a kept unsampled port, a recording, an MQTT publisher, a
running job holding the port), so
they are the exporter's own, not a second list; tests/test_dashboards.py compares them with
a real agent's /metrics. "Present" says when a conditional family is there: its HELP's own
sentence where it has one, else ``PRESENT_WHEN``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

WRITE_COMMAND = "python dashboards/metrics_table.py --write docs/metrics.md"
BEGIN = f"<!-- metrics-table:begin ({WRITE_COMMAND}) -->"
END = "<!-- metrics-table:end -->"
ROOT = Path(__file__).resolve().parent.parent


# When a family that is not on every node's /metrics appears, for those whose HELP does not
# say it (a HELP sentence "Present ..." or "Absent ..." is taken as it stands): what
# collector/exporter.py emits each on.
PRESENT_WHEN = {
    "burstscope_port_not_sampled": "One per port kept without sampling its bytes, which then "
    "has its state and rate but none of the sampled families.",
    "burstscope_port_physical_state": "Ports with a phys_state file (sysfs sources).",
    "burstscope_port_rdma_bytes_total": "EFA ports: one per rdma_*_bytes hw_counter.",
    "burstscope_port_pfc_pause_seconds_total": "RoCE ports whose netdev is read with ethtool "
    "(--ethtool), per priority once it has paused.",
    "burstscope_port_pfc_pause_frames_total": "RoCE ports whose netdev is read with ethtool "
    "(--ethtool), per priority the driver counts (PFC-enabled).",
    "burstscope_device_info": "One per RDMA device the sysfs source discovered.",
    "burstscope_port_refused_readings_total": "From the first refused reading of that counter "
    "file, per reason.",
    "burstscope_port_link_downed_total": "Ports with counters/link_downed.",
    "burstscope_port_errors_total": "Ports with the error PortCounters (counters/).",
    "burstscope_port_transmit_wait_total": "Ports with counters/port_xmit_wait.",
    "burstscope_port_congestion_packets_total": "Ports with the CNP/ECN hw_counters (mlx5 RoCE), "
    "per counter the port has.",
    "burstscope_port_utilization_ratio": "While the port's line rate is known.",
    "burstscope_port_bursts_total": "While the port's line rate is known.",
    "burstscope_port_burst_bytes_total": "While the port's line rate is known.",
    "burstscope_port_burst_duration_seconds": "While the port's line rate is known.",
    "burstscope_port_saturated_seconds_total": "While the port's line rate is known.",
    "burstscope_port_hidden_saturated_seconds_total": "While the port's line rate is known.",
    "burstscope_restarts_total": "Always: one per supervised component (the sampler process, "
    "the slow poller), from 0.",
    "burstscope_recording_paused": "While the agent records (--record, [recording] path).",
    "burstscope_recording_pauses_total": "While the agent records.",
    "burstscope_recording_dropped_samples_total": "While the agent records.",
    "burstscope_recording_bytes": "While the agent records.",
    "burstscope_recording_deleted_pieces_total": "While the agent records.",
    "burstscope_sampler_cpu_seconds_total": "While the sampler process runs.",
    "burstscope_sampler_resident_memory_bytes": "While the sampler process runs.",
    "burstscope_source_errors_total": "One per slow source.",
    "burstscope_job_port": "One per port a running job holds (job attribution on).",
    "burstscope_job_saturated_seconds_total": "One per running job (job attribution on).",
    "burstscope_job_hidden_saturated_seconds_total": "One per running job (job attribution on).",
    "burstscope_job_burst_bytes_total": "One per running job (job attribution on).",
    "burstscope_collective_class_hidden_saturated_seconds_total": "One per class (EP, PP, DP, "
    "other, none) with an NCCL Inspector dump directory (--nccl-inspector-dir), from 0.",
    "burstscope_collective_class_burst_bytes_total": "One per class with an NCCL Inspector dump "
    "directory, from 0.",
    "burstscope_collective_collision_saturated_seconds_total": "One per pair with an NCCL "
    "Inspector dump directory, from 0.",
    "burstscope_collective_records_total": "With an NCCL Inspector dump directory, from 0.",
    "burstscope_collective_skipped_total": "One per kind with an NCCL Inspector dump directory, "
    "from 0.",
    "burstscope_collective_files": "With an NCCL Inspector dump directory.",
    "burstscope_collective_cpu_seconds_total": "With an NCCL Inspector dump directory, from 0.",
    "burstscope_mqtt_connected": "With --mqtt, from the publisher's start.",
    "burstscope_mqtt_spool_messages": "With --mqtt, from the publisher's start.",
    "burstscope_mqtt_dropped_messages_total": "With --mqtt, from the publisher's start.",
    "burstscope_mqtt_published_messages_total": "With --mqtt, from the publisher's start.",
}
ALWAYS = "Always."
# The HELP sentence that says when a family is present ("Present from the first change",
# "absent while the state cannot be read ...").
_PRESENCE = re.compile(r"\b(?:[Pp]resent|[Aa]bsent)\b[^.]*\.")


def present_when(name: str, help_text: str) -> str:
    """When the family is on /metrics: its HELP's own sentence, PRESENT_WHEN, or always."""
    found = _PRESENCE.search(help_text)
    if found is not None:
        sentence = found.group(0)
        return sentence[0].upper() + sentence[1:]
    return PRESENT_WHEN.get(name, ALWAYS)


def _families() -> dict[str, tuple[str, list[str]]]:
    """name -> (type, labels) as the exporter emits them, from one synthetic snapshot in
    which every conditional family is present (a kept unsampled port, a stuck counter, a
    renegotiation, a refused reading, a restart, a recording, an MQTT publisher, a job,
    collective labels)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import dataclasses
    from collections import deque
    from types import SimpleNamespace

    import numpy as np

    from burstscope.collector.collectives.live import CLASSES, PAIR_NAMES, CollectiveFigures
    from burstscope.collector.discovery import DeviceInfo
    from burstscope.collector.exporter import (
        LEAN,
        BurstscopeCollector,
        collective_families,
        mqtt_families,
    )
    from burstscope.collector.jobs.model import (
        COMPUTE,
        RULE_WHOLE_NODE,
        SLURM,
        Holding,
        Job,
        JobFigures,
        JobTable,
    )
    from burstscope.collector.recording import RecordingHealth
    from burstscope.collector.slow_poller import (
        READ_BUCKETS_SECONDS,
        CounterState,
        SlowSnapshot,
        SourceHealth,
    )
    from burstscope.collector.snapshot import (
        TIMING_BUCKETS_SECONDS,
        DirectionView,
        Health,
        PortView,
        RailVerdicts,
        Snapshot,
    )
    from burstscope.collector.sources.base import PortSpec, UnsampledPort
    from burstscope.detectors.config import Thresholds
    from burstscope.detectors.live import LiveDirection
    from burstscope.detectors.rails import LIGHT

    spec = PortSpec("mlx5_0", 1, 50_000_000_000)
    view = DirectionView(
        bytes_total=0,
        live=LiveDirection(slots=deque([(0, 0.5)])),  # one sample at "now": a peak
        saturated_seconds=0.0,
        hidden_saturated_seconds=0.0,
        resets=0,
        p99=None,
    )
    interval_ns = 1_000_000
    port = PortView(
        spec,
        {"transmit": view, "receive": view},
        0,
        refused={("port_xmit_data", "EIO"): 1},
        rate_changes=1,
        resolution_ns=10 * interval_ns,
    )
    timing = np.zeros(len(TIMING_BUCKETS_SECONDS) + 1, dtype=np.int64)
    # This process stands in for the sampler, so its cost families appear in the table.
    health = Health(
        0,
        0,
        0,
        False,
        0,
        interval_ns,
        True,
        timing,
        0.0,
        timing,
        0.0,
        0,
        restarts={"sampler": 1},
        sampler_pid=os.getpid(),
        finest_interval_ns=interval_ns,
    )
    names = [
        "state",
        "phys_state",
        "link_downed",
        "port_xmit_wait",
        "symbol_error",
        "np_cnp_sent",
        "rx_prio3_pause",
        "rx_prio3_pause_duration",
        "rdma_read_bytes",
    ]
    counters = {
        # port_xmit_wait stuck at all-ones; a pause duration that has paused.
        ("mlx5_0", 1, name): CounterState(
            "port_slow", "mlx5_0", 1, name, 1, 0, 0, name == "port_xmit_wait", 0
        )
        for name in names
    }
    read_buckets = (0,) * (len(READ_BUCKETS_SECONDS) + 1)
    sources = (SourceHealth("port_slow", 0, 0, None, None, 0.0, 0, read_buckets),)
    slow = SlowSnapshot(counters, sources, refused={("mlx5_0", 1, "symbol_error", "EIO"): 1})
    snapshot = Snapshot(
        "infiniband",
        0,
        # A second port of the same model at half the rate: below its peer (silence.py).
        (port, dataclasses.replace(port, spec=PortSpec("mlx5_2", 1, 25_000_000_000))),
        health,
        slow,
        Thresholds(),
        RecordingHealth(False, 0, 0, None, 0, 0),
        (UnsampledPort("mlx5_1", 1, "no readable byte counter"),),
        (
            DeviceInfo("mlx5_0", "MT_0000000838", "28.39.1002", "MT4129"),
            DeviceInfo("mlx5_2", "MT_0000000838", "28.39.1002", "MT4129"),
        ),
        JobTable.build(
            [Job("1", SLURM, "user", "name")], [Holding("1", "mlx5_0", 1, COMPUTE, RULE_WHOLE_NODE)]
        ),
        {"1": JobFigures()},
        {("mlx5_0", 1): None},  # a port the job used, not silent
        RailVerdicts({("mlx5_0", 1): LIGHT}, 3),  # a rail carrying less than its peers
    )
    collector = BurstscopeCollector(lambda: snapshot, version="0")
    publisher = SimpleNamespace(connected=True, spool_depth=0, dropped=0, published=0)
    collector.extra_families.append(lambda: mqtt_families(publisher))
    per_class = dict.fromkeys(CLASSES, 0.0)
    collective = CollectiveFigures(
        per_class, per_class, dict.fromkeys(CLASSES, 0), dict.fromkeys(PAIR_NAMES, 0.0),
        {"nccl-inspector": 0}, {"malformed": 0}, 0,
    )  # fmt: skip
    collector.extra_families.append(lambda: collective_families(collective))
    from burstscope.collector.exporter import pfc_watchdog_families
    from burstscope.collector.pfc_watchdog import WatchdogFigures

    storm = WatchdogFigures(1, 0, 0.0, 1, {("mlx5_0", 1, "receive", 3): 1.0}, {("mlx5_0", 1): 0.4})
    collector.extra_families.append(lambda: pfc_watchdog_families(storm))
    from burstscope.collector.throttle_live import throttle_families

    collector.extra_families.append(lambda: throttle_families({"transmit": (0, 0, 0, 0)}))
    from burstscope.collector.exporter import step_families

    collector.extra_families.append(lambda: step_families(0))
    # The lean profile's own families (burstscope_node_*), from the same snapshot; those both
    # profiles serve are listed with the full profile's labels.
    lean = BurstscopeCollector(lambda: snapshot, version="0", profile=LEAN)
    found: dict[str, tuple[str, list[str]]] = {}
    for family in [*collector.collect(), *lean.collect()]:
        name = family.name + ("_total" if family.type == "counter" else "")
        labels: list[str] = []
        for sample in family.samples:
            labels += [k for k in sample.labels if k not in labels and k != "le"]
        found.setdefault(name, (family.type, labels))
    return found


def table() -> str:
    from burstscope.collector.exporter import HELP

    families = _families()
    missing = set(HELP) - set(families)
    if missing:
        raise SystemExit(f"metrics_table.py: no synthetic series for {', '.join(sorted(missing))}")
    lines = [
        "| Metric | Type | Labels | Present | Help |",
        "|---|---|---|---|---|",
    ]
    for name, text in HELP.items():
        kind, labels = families[name]
        label_text = ", ".join(f"`{label}`" for label in labels) or "—"
        present = present_when(name, text).replace("|", "\\|")
        help_text = text.replace("|", "\\|")
        lines.append(f"| `{name}` | {kind} | {label_text} | {present} | {help_text} |")
    return "\n".join(lines) + "\n"


def section(text: str) -> str:
    start = text.index(BEGIN) + len(BEGIN)
    return text[start : text.index(END)].strip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", metavar="FILE", help="fail if FILE's table is stale")
    parser.add_argument("--write", metavar="FILE", help="replace FILE's table")
    args = parser.parse_args(argv)
    current = table()
    if args.write:
        path = Path(args.write)
        text = path.read_text()
        start = text.index(BEGIN) + len(BEGIN)
        path.write_text(text[:start] + "\n" + current + text[text.index(END) :])
        return 0
    if args.check:
        if section(Path(args.check).read_text()) != current:
            print(f"{args.check}: metric table is stale: run {WRITE_COMMAND}", file=sys.stderr)
            return 1
        return 0
    print(current, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
