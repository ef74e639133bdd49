"""The lean and the full metrics profile side by side in one real Prometheus.

Four simulated nodes (burstscope/testing/simulated_fleet.py): the even ones serve a real
``agent --source sim``'s full exposition, the odd ones a lean one's (``--metrics-profile
lean``), one quiet and one saturated of each. Debian's ``prometheus`` scrapes them every 1 s
with both shipped rule files, every ``for:`` cut to 2 s and every group evaluated every 1 s.
Shown: a lean port serves at most 15 series; every recording rule records for a lean node
what it records for the full node in the same state; every fleet-overview panel returns data
over the lean nodes alone and over the full nodes alone; the drill-down of a lean node
returns data on every panel but those marked full profile only, of a full node on every
panel; BurstscopeBurstSaturation fires for the saturated node of each profile and for no
other. Waits on conditions; skips without the binary, fails under
BURSTSCOPE_REQUIRE_INTEGRATION=1.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from burstscope.testing.processes import free_port, wait_for, wait_until
from burstscope.testing.simulated_fleet import (
    Exposition,
    Fleet,
    Prometheus,
    capture_agent,
    dashboard_targets,
    make_fleet,
    prometheus_config,
    running_prometheus,
    substitute,
)
from dashboards.port_drilldown import FULL_PROFILE_ONLY
from dashboards.rules import recorded_names
from tests.conftest import require_binary
from tests.test_exposition import series_per_port
from tests.test_fleet import NOT_SIMULATED
from tests.test_victoriametrics import topk_arguments

LEAN_SERIES_PER_PORT = 15
NODES = 4  # 0 quiet full, 1 saturated lean, 2 saturated full, 3 quiet lean
RULES = Path(__file__).resolve().parent.parent / "dashboards" / "prometheus"
# Recording rules the simulated nodes never feed: no port congested while saturated, silent
# under its job or below its peers, no PFC storm.
NOT_FED = ("congested", "silent_under_job", "below_peers", "pfc_storms")


@dataclass
class Profiles:
    fleet: Fleet
    prometheus: Prometheus
    lean: list[str]  # instances
    full: list[str]

    def instance(self, index: int) -> str:
        return f"{self.fleet.nodes[index].address}:{self.fleet.port}"


@pytest.fixture(scope="module")
def lean_exposition() -> Exposition:
    return capture_agent(seconds=1.0, profile="lean")


@pytest.fixture(scope="module")
def profiles(
    tmp_path_factory: pytest.TempPathFactory, lean_exposition: Exposition
) -> Iterator[Profiles]:
    binary = require_binary("prometheus")
    full = capture_agent(seconds=1.0)
    fleet = make_fleet(full, NODES, quiet_every=3, port=free_port(), lean=lean_exposition)
    tmp: Path = tmp_path_factory.mktemp("profiles")
    config = prometheus_config(tmp, fleet, "1s", shorten_for=True)
    instances = [f"{n.address}:{fleet.port}" for n in fleet.nodes]
    with fleet.running(), running_prometheus(binary, config, tmp / "data", free_port()) as prom:
        wait_for(lambda: prom.value('count(up{job="burstscope"} == 1)') == NODES, 30, "every node")
        yield Profiles(fleet, prom, instances[1::2], instances[0::2])


def test_an_unknown_profile_is_one_line_and_status_2() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "burstscope",
            "agent",
            "--source",
            "sim",
            "--metrics-profile",
            "slim",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "burstscope agent: error: --metrics-profile must be one of full, lean, not 'slim'"
    ]


@pytest.mark.integration
def test_a_lean_port_serves_at_most_15_series(lean_exposition: Exposition) -> None:
    counts = series_per_port("\n".join(lean_exposition.prefixes))
    assert len(counts) == 9
    assert max(counts.values()) <= LEAN_SERIES_PER_PORT, counts


@pytest.mark.integration
def test_every_rule_records_for_a_lean_node_as_for_a_full_one(profiles: Profiles) -> None:
    """Node 1 (lean) against node 2 (full), both saturated; node 3 against node 0, quiet."""
    prom = profiles.prometheus
    names = recorded_names(RULES / "recording.rules.yml")
    pairs = {profiles.instance(1): profiles.instance(2), profiles.instance(3): profiles.instance(0)}
    # A topk rule keeps k of the series tied at its cut (the quiet nodes' ports, all at 0),
    # and which ones is Prometheus' choice: its argument is compared instead, what each node
    # feeds the rule with.
    ranked = {
        rule["record"]: argument
        for group in yaml.safe_load((RULES / "recording.rules.yml").read_text())["groups"]
        for rule in group["rules"]
        if "record" in rule
        for _, argument in topk_arguments(rule["expr"])
    }

    def recorded(name: str) -> set[str]:
        result = prom.get("/api/v1/query", query=name)["data"]["result"]
        return {r["metric"].get("instance", "") for r in result}

    def differences() -> list[str]:
        found = []
        for name in names:
            if name.startswith("global:"):
                continue
            has = recorded(ranked.get(name, name))
            found += [
                f"{name}: lean {lean} {lean in has}, full {full} {full in has}"
                for lean, full in pairs.items()
                if (lean in has) != (full in has)
            ]
        return found

    def unrecorded() -> list[str]:
        # Every rule the full nodes feed, recorded for one of them: the 5 m windows have
        # their first rates.
        return [
            n
            for n in names
            if not n.startswith("global:")
            and not any(part in n for part in NOT_FED)
            and not recorded(ranked.get(n, n)) & set(pairs.values())
        ]

    assert wait_until(lambda: not unrecorded() and not differences(), 60), (
        unrecorded(),
        differences(),
    )


def _empty_panels(prom: Prometheus, dashboard: str, instances: str) -> list[str]:
    empty = []
    for t in dashboard_targets():
        if t.dashboard != dashboard or any(name in t.expr for name in NOT_SIMULATED):
            continue
        query = substitute(t.expr, instances, 15, 1)
        answer = prom.get("/api/v1/query", query=query)
        if answer.get("status") != "success" or not answer["data"]["result"]:
            empty.append(t.title)
    return empty


@pytest.mark.integration
def test_the_dashboards_draw_on_both_profiles(profiles: Profiles) -> None:
    prom = profiles.prometheus
    lean, full = "|".join(profiles.lean), "|".join(profiles.full)
    saturated_lean, saturated_full = profiles.instance(1), profiles.instance(2)
    found: dict[str, list[str]] = {}

    def every_panel_answers() -> bool:
        found["fleet lean"] = _empty_panels(prom, "fleet-overview", lean)
        found["fleet full"] = _empty_panels(prom, "fleet-overview", full)
        found["drill-down lean"] = sorted(
            set(_empty_panels(prom, "port-drilldown", saturated_lean)) - FULL_PROFILE_ONLY
        )
        found["drill-down full"] = _empty_panels(prom, "port-drilldown", saturated_full)
        return not any(found.values())

    wait_until(every_panel_answers, 30)
    assert found == {
        "fleet lean": [],
        "fleet full": [],
        "drill-down lean": [],
        "drill-down full": [],
    }
    # What the full profile only serves is indeed absent on the lean node (the error
    # PortCounters are on no simulated node).
    simulated = {
        t.title
        for t in dashboard_targets()
        if t.title in FULL_PROFILE_ONLY and not any(name in t.expr for name in NOT_SIMULATED)
    }
    assert set(_empty_panels(prom, "port-drilldown", saturated_lean)) == simulated
    assert len(simulated) == len(FULL_PROFILE_ONLY) - 1


@pytest.mark.integration
def test_burst_saturation_fires_for_the_saturated_node_of_each_profile(
    profiles: Profiles,
) -> None:
    prom = profiles.prometheus
    saturated = {profiles.instance(1), profiles.instance(2)}

    def firing() -> set[str]:
        alerts = prom.get("/api/v1/alerts")["data"]["alerts"]
        return {
            a["labels"]["instance"]
            for a in alerts
            if a["labels"]["alertname"] == "BurstscopeBurstSaturation" and a["state"] == "firing"
        }

    wait_for(lambda: firing() >= saturated, 30, "BurstscopeBurstSaturation on both profiles")
    assert firing() == saturated
