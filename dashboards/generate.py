"""Writes the Grafana dashboards (dashboards/grafana/*.json) from their modules.

Run ``python dashboards/generate.py`` after editing a dashboard: tests/test_dashboards.py
fails when the checked-in JSON differs from what this writes, and ``dashboards/check_sdk.py``
(make lint) round-trips both through grafana-foundation-sdk. The panels are built with
dashboards/builder.py, one module per dashboard (fleet_overview.py, port_drilldown.py,
each row one function), and name the recorded series they read by level and metric, taking
the whole name from prometheus/recording.rules.yml (dashboards/rules.py).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

if not __package__:
    # Run as a script: the repository root on sys.path, so the dashboard modules import as
    # the dashboards package (the name lint-imports and the tests know them by).
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dashboards.builder import Json
from dashboards.fleet_overview import fleet_overview
from dashboards.port_drilldown import port_drilldown

GRAFANA = Path(__file__).resolve().parent / "grafana"

DASHBOARDS: dict[str, Callable[[], Json]] = {
    "fleet-overview.json": fleet_overview,
    "port-drilldown.json": port_drilldown,
}


def render(name: str) -> str:
    return json.dumps(DASHBOARDS[name](), indent=2) + "\n"


def main() -> int:
    for name in DASHBOARDS:
        (GRAFANA / name).write_text(render(name))
        print(f"wrote {GRAFANA / name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
