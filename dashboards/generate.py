"""Writes the dashboards (grafana/*.json) and the rule files (prometheus/*.rules.yml).

Run ``python dashboards/generate.py`` after editing a dashboard or a rule:
tests/test_dashboards.py and tests/test_rules.py fail when a checked-in file differs from
what this writes, and ``dashboards/check_sdk.py`` (make lint) round-trips both dashboards
through grafana-foundation-sdk. The panels are built with dashboards/builder.py, one module
per dashboard (fleet_overview.py, port_drilldown.py, each row one function); the rules are
written in recording.py and alerting.py; the panels name the recorded series they read by
level and metric (dashboards/rules.py).

``--config FILE`` reads a site's job selector and cluster label (TOML, the keys of
dashboards/job_selectors.py: burstscopeSelector, clusterLabel, showMultiCluster) and ``--out
DIR`` writes DIR/grafana/ and DIR/prometheus/ instead of the files in this directory, which
are generated from the defaults. A file that cannot be used is one line on stderr and exit
status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

if not __package__:
    # Run as a script: the repository root on sys.path, so the dashboard modules import as
    # the dashboards package (the name lint-imports and the tests know them by).
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dashboards.alerting import alerting_rules
from dashboards.builder import Json
from dashboards.fleet_overview import fleet_overview
from dashboards.job_selectors import DEFAULT, Selectors, SelectorsError, load_selectors
from dashboards.port_drilldown import port_drilldown
from dashboards.recording import recording_rules

HERE = Path(__file__).resolve().parent
GRAFANA = HERE / "grafana"

DASHBOARDS: dict[str, Callable[[Selectors], Json]] = {
    "fleet-overview.json": fleet_overview,
    "port-drilldown.json": port_drilldown,
}
RULES: dict[str, Callable[[Selectors], str]] = {
    "recording.rules.yml": recording_rules,
    "alerts.rules.yml": alerting_rules,
}


def render(name: str, selectors: Selectors = DEFAULT) -> str:
    """A dashboard's JSON, as written to grafana/``name``."""
    return json.dumps(DASHBOARDS[name](selectors), indent=2) + "\n"


def render_rules(name: str, selectors: Selectors = DEFAULT) -> str:
    """A rule file's YAML, as written to prometheus/``name``."""
    return RULES[name](selectors)


def generated(selectors: Selectors = DEFAULT) -> dict[str, str]:
    """Every generated file, by its path under dashboards/, and its text."""
    files = {f"grafana/{name}": render(name, selectors) for name in DASHBOARDS}
    files |= {f"prometheus/{name}": render_rules(name, selectors) for name in RULES}
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, help="a site's selectors (TOML)")
    parser.add_argument(
        "--out", type=Path, default=HERE, help="where grafana/ and prometheus/ are written"
    )
    options = parser.parse_args(argv)
    try:
        selectors = load_selectors(options.config) if options.config else DEFAULT
    except SelectorsError as error:
        print(f"generate: {error}", file=sys.stderr)
        return 2
    for relative, text in generated(selectors).items():
        path = options.out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
