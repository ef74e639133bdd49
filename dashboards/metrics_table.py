"""Prints docs/metrics.md's metric table from collector/exporter.py, so the table stays true.

``python dashboards/metrics_table.py`` prints the Markdown table; ``--check FILE`` exits 1
when the table between the markers in FILE differs (tests/test_dashboards.py runs it);
``--write FILE`` replaces it. Types and labels come from a scrape of the exporter over a
hand-built snapshot with one port, every slow counter and every source, so they are the
exporter's own, not a second list.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

WRITE_COMMAND = "python dashboards/metrics_table.py --write docs/metrics.md"
BEGIN = f"<!-- metrics-table:begin ({WRITE_COMMAND}) -->"
END = "<!-- metrics-table:end -->"
ROOT = Path(__file__).resolve().parent.parent


def _families() -> dict[str, tuple[str, list[str]]]:
    """name -> (type, labels) as the exporter emits them, from one synthetic snapshot."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import numpy as np

    from burstscope.collector.exporter import BurstscopeCollector
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
        Snapshot,
    )
    from burstscope.collector.sources.base import PortSpec
    from burstscope.detectors.config import Thresholds
    from burstscope.detectors.live import LiveDirection

    spec = PortSpec("mlx5_0", 1, 50_000_000_000)
    view = DirectionView(
        bytes_total=0,
        live=LiveDirection(),
        saturated_seconds=0.0,
        hidden_saturated_seconds=0.0,
        resets=0,
        p99=None,
    )
    port = PortView(spec, {"transmit": view, "receive": view}, 0)
    timing = np.zeros(len(TIMING_BUCKETS_SECONDS) + 1, dtype=np.int64)
    # This process stands in for the sampler, so its cost families appear in the table.
    health = Health(
        0, 0, 0, False, 0, 1_000_000, True, timing, 0.0, timing, 0.0, 0, sampler_pid=os.getpid()
    )
    names = [
        "state",
        "link_downed",
        "port_xmit_wait",
        "symbol_error",
        "np_cnp_sent",
        "rx_prio3_pause",
    ]
    counters = {
        ("mlx5_0", 1, name): CounterState("port_slow", "mlx5_0", 1, name, 0, 0, 0, False, 0)
        for name in names
    }
    read_buckets = (0,) * (len(READ_BUCKETS_SECONDS) + 1)
    sources = (SourceHealth("port_slow", 0, 0, None, None, 0.0, 0, read_buckets),)
    slow = SlowSnapshot(counters, sources)
    snapshot = Snapshot("infiniband", 0, (port,), health, slow, Thresholds())
    found: dict[str, tuple[str, list[str]]] = {}
    for family in BurstscopeCollector(lambda: snapshot, version="0").collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        labels: list[str] = []
        for sample in family.samples:
            labels += [k for k in sample.labels if k not in labels and k != "le"]
        found[name] = (family.type, labels)
    return found


def table() -> str:
    from burstscope.collector.exporter import HELP

    families = _families()
    lines = [
        "| Metric | Type | Labels | Help |",
        "|---|---|---|---|",
    ]
    for name, text in HELP.items():
        help_text = text.replace("|", "\\|")
        if name in families:
            kind, labels = families[name]
        else:
            # Families of optional outputs (MQTT) are added by their own hook only when the
            # output is configured; their type follows from the name (_total: counter).
            kind, labels = ("counter" if name.endswith("_total") else "gauge"), []
            help_text += " (optional output: only when configured)"
        label_text = ", ".join(f"`{label}`" for label in labels) or "—"
        lines.append(f"| `{name}` | {kind} | {label_text} | {help_text} |")
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
