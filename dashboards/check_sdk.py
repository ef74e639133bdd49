"""Round-trips both dashboards through grafana-foundation-sdk, Grafana's own types (make lint).

``Dashboard.from_json`` decodes every panel with its plugin's options and field-config
types (cog's plugin registry), and ``to_json`` encodes it back with the SDK's defaults for
anything required. A key in our JSON that does not come back is a field the SDK does not
know (dropped: Grafana would ignore or discard it); a key that appears only after the
round trip is a required option we left implicit (Grafana would fill it in). Both fail.
Pinned flavour: schemaVersion 41 is Grafana 11.6's (pyproject.toml, lint extra).
https://github.com/grafana/grafana-foundation-sdk
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

GRAFANA = Path(__file__).resolve().parent / "grafana"
FILES = ("fleet-overview.json", "port-drilldown.json")
# Keys the SDK's classic dashboard type does not model though Grafana reads them: a query
# variable's "definition" is the text its editor shows (and tests/test_dashboards.py
# checks); the variable works from "query" alone.
KNOWN_UNMODELLED = {"definition"}


def differences(ours: Any, theirs: Any, path: str = "") -> list[str]:
    found: list[str] = []
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for key in ours.keys() - theirs.keys():
            if f"{path}.{key}".split(".")[-1] not in KNOWN_UNMODELLED:
                found.append(f"dropped by the SDK: {path}.{key}")
        for key in theirs.keys() - ours.keys():
            found.append(f"implicit (the SDK fills it in): {path}.{key} = {theirs[key]!r}")
        for key in ours.keys() & theirs.keys():
            found += differences(ours[key], theirs[key], f"{path}.{key}")
    elif isinstance(ours, list) and isinstance(theirs, list):
        if len(ours) != len(theirs):
            found.append(f"{path}: {len(ours)} items became {len(theirs)}")
        for index, (a, b) in enumerate(zip(ours, theirs, strict=False)):
            found += differences(a, b, f"{path}[{index}]")
    elif ours != theirs and not (
        isinstance(ours, int | float) and isinstance(theirs, int | float) and ours == theirs
    ):
        found.append(f"changed by the SDK: {path}: {ours!r} -> {theirs!r}")
    return found


def round_trip(data: dict[str, Any]) -> Any:
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()
    return json.loads(json.dumps(Dashboard.from_json(data), cls=JSONEncoder))


def main() -> int:
    try:
        import grafana_foundation_sdk  # noqa: F401
    except ImportError:
        print("grafana-foundation-sdk is not installed: pip install -e '.[lint]'", file=sys.stderr)
        return 1
    problems: list[str] = []
    for name in FILES:
        data = json.loads((GRAFANA / name).read_text())
        problems += [f"{name}: {p}" for p in differences(data, round_trip(data))]
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"check_sdk: {len(FILES)} dashboards, {len(problems)} problems", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
