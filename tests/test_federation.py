"""Sharded Prometheus servers and a global one, as shipped, against one server scraping all.

A small simulated fleet (burstscope/testing/simulated_fleet.py: 8 nodes, two quiet, every
odd node on the lean metrics profile) is scraped by two shards written from the shipped
dashboards/prometheus/shard.example.yml (hashmod share, both rule files, every ``for:`` cut
to 2 s and every 1 m and 5 m window to 5 s) and by a reference server with the
single-server configuration; a global server written from global.example.yml federates
from the shards. Everything at 1 s. Checks: the shards' targets are the hashmod split of the
nodes; every fleet overview panel answers on the global with the reference's series and
values; BurstscopeBurstSaturation's ALERTS reach the global for the saturating nodes only;
the drill-down answers for a node on its shard only; the match[] list follows the recording
rules and the fleet overview.

A fourth server, the reference, rather than the union of the shards' answers: a panel's
aggregation across nodes (max, quantile, topk, sum by job) is what federation must not
change, and only a server holding every node computes it independently of the shards.
Waits on conditions; skips without the binary, fails under BURSTSCOPE_REQUIRE_INTEGRATION=1.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from burstscope.straggler_watch import HELP as STRAGGLER_CONSUMER_HELP
from burstscope.testing.processes import free_port, wait_for, wait_until
from burstscope.testing.simulated_fleet import (
    DASHBOARDS,
    Fleet,
    Prometheus,
    capture_agent,
    dashboard_targets,
    global_config,
    make_fleet,
    prometheus_config,
    running_prometheus,
    shard_configs,
    substitute,
)
from dashboards.rules import recorded_names
from tests.conftest import require_binary
from tests.test_fleet import NOT_SIMULATED

NODES = 8  # 0 and 4 quiet; every odd node lean
SHARDS = 2
# Relative difference allowed between the global's and the reference's values. The fleet
# computes each counter when it serves a scrape, Prometheus stamps the scrape's start: the
# few milliseconds between differ per server, and the 15 s average is an irate over two
# 1 s scrapes, so a 20 ms difference moves it by 2%. Everything else agrees far closer.
TOLERANCE = 0.05
# The fleet overview's variable that lists per-port series: on the global it lists nothing,
# and its "All" (.*) filters nothing (dashboards/README.md, "Sharding").
PER_PORT_VARIABLES = {"device"}
# The levels of the recording rules (level:metric:operations) the global federates, and the
# operations of the per-port ones it federates too (each shard's hottest ports). Any other
# level stays on the shards; a new level fails test_match_list_follows_the_rules.
FEDERATED_LEVELS = {"instance", "instance_job_id", "instance_cause"}
FEDERATED_PER_PORT = ("topk20_", "peak_topk20_")
SHARD_ONLY_LEVELS = {"instance_device_port_direction", "instance_device_port", "global"}
METRIC = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{")


def hashmod(address: str, modulus: int) -> int:
    """Prometheus' hashmod relabelling (model/relabel): the last 8 bytes of the MD5 of the
    value, big-endian, modulo ``modulus``."""
    return int.from_bytes(hashlib.md5(address.encode()).digest()[8:], "big") % modulus


def split(port: int) -> list[int]:
    """Each node's shard, for the fleet served on ``port``."""
    return [hashmod(f"127.0.{1 + i // 250}.{1 + i % 250}:{port}", SHARDS) for i in range(NODES)]


@dataclass
class Federation:
    fleet: Fleet
    shards: list[Prometheus]
    top: Prometheus  # the global server
    reference: Prometheus

    def instance(self, index: int) -> str:
        return f"{self.fleet.nodes[index].address}:{self.fleet.port}"

    def shard_of(self, instance: str) -> int:
        return hashmod(instance, SHARDS)


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    binary = require_binary("prometheus")
    full, lean = capture_agent(seconds=1.0), capture_agent(seconds=1.0, profile="lean")
    port = free_port()
    while len(set(split(port))) < SHARDS:  # about 1 port in 128 leaves a shard empty
        port = free_port()
    fleet = make_fleet(full, NODES, quiet_every=4, port=port, lean=lean)
    tmp: Path = tmp_path_factory.mktemp("federation")
    (tmp / "reference").mkdir()
    reference_config = prometheus_config(tmp / "reference", fleet, "1s", shorten_for=True)
    configs = shard_configs(tmp, fleet, SHARDS, "1s", shorten_for=True)
    # Every 1 m and 5 m window cut to 5 s, as every for: to 2 s. A rate over a window its
    # series does not fill yet grows with the series' age (Prometheus extrapolates to the
    # window's start by half an interval at most), so two servers that started a second
    # apart disagree by that second over the series' age until the window is full: 5 m.
    for rules in tmp.glob("*/*.rules.yml"):
        rules.write_text(re.sub(r"\[(1m|5m)\]", "[5s]", rules.read_text()))
    with contextlib.ExitStack() as stack:
        stack.enter_context(fleet.running())
        shards = [
            stack.enter_context(running_prometheus(binary, c, c.parent / "data", free_port()))
            for c in configs
        ]
        config = global_config(tmp, [s.url for s in shards], "1s")
        top = stack.enter_context(running_prometheus(binary, config, tmp / "data", free_port()))
        reference = stack.enter_context(
            running_prometheus(binary, reference_config, tmp / "reference" / "data", free_port())
        )
        federation = Federation(fleet, shards, top, reference)
        wait_for(
            lambda: (
                top.value("count(instance:burstscope_agent_up:min == 1)") == NODES
                and reference.value('count(up{job="burstscope"} == 1)') == NODES
            ),
            30,
            "every node's up on the global and the reference",
        )
        yield federation


def matchers() -> list[str]:
    config = yaml.safe_load((DASHBOARDS / "prometheus" / "global.example.yml").read_text())
    (job,) = [j for j in config["scrape_configs"] if j.get("metrics_path") == "/federate"]
    found: list[str] = job["params"]["match[]"]
    return found


def federated(name: str, selectors: list[str]) -> bool:
    """Whether one of the match[] selectors (each one __name__ matcher) selects ``name``."""
    for selector in selectors:
        match = re.fullmatch(r'\{__name__(=~?)"([^"]+)"\}', selector)
        assert match is not None, f"{selector}: one __name__ matcher expected"
        if (match[1] == "=" and match[2] == name) or (
            match[1] == "=~" and re.fullmatch(match[2], name)
        ):
            return True
    return False


def test_match_list_follows_the_rules_and_the_fleet_overview() -> None:
    """global.example.yml's match[] carries every series a fleet panel or variable reads
    (the consumer's aside: the global scrapes it), every per-node recorded series and each
    shard's hottest ports, and no other per-port series."""
    selectors = matchers()
    fleet = [t for t in dashboard_targets() if t.dashboard == "fleet-overview"]
    read = {name for t in fleet for name in METRIC.findall(t.expr)}
    overview = json.loads((DASHBOARDS / "grafana" / "fleet-overview.json").read_text())
    for variable in overview["templating"]["list"]:
        if variable["type"] == "query" and variable["name"] not in PER_PORT_VARIABLES:
            read.update(METRIC.findall(variable["definition"]))
    consumer = read & set(STRAGGLER_CONSUMER_HELP)
    assert consumer, "the fleet overview reads the consumer's series"
    assert sorted(n for n in read - consumer if not federated(n, selectors)) == []
    for name in recorded_names(DASHBOARDS / "prometheus" / "recording.rules.yml"):
        level, _, operations = name.split(":")
        assert level in FEDERATED_LEVELS | SHARD_ONLY_LEVELS, f"{name}: federate it or not?"
        expected = level in FEDERATED_LEVELS or operations.startswith(FEDERATED_PER_PORT)
        assert federated(name, selectors) == expected, name


def test_each_node_is_scraped_by_exactly_one_shard(federation: Federation) -> None:
    """The hashmod split: the shards' targets are disjoint and together every node."""
    scraped = [
        {t["labels"]["instance"] for t in shard.get("/api/v1/targets")["data"]["activeTargets"]}
        for shard in federation.shards
    ]
    instances = [federation.instance(i) for i in range(NODES)]
    expected = [{i for i in instances if federation.shard_of(i) == s} for s in range(SHARDS)]
    assert scraped == expected
    assert all(scraped) and set.union(*scraped) == set(instances)
    assert sum(len(s) for s in scraped) == NODES


def answer(prometheus: Prometheus, query: str) -> list[tuple[dict[str, str], float]]:
    """The query's series (labels without the shards' external label) and values."""
    reply = prometheus.get("/api/v1/query", query=query)
    assert reply.get("status") == "success", (query, reply.get("error"))
    return [
        ({k: v for k, v in r["metric"].items() if k != "shard"}, float(r["value"][1]))
        for r in reply["data"]["result"]
    ]


def close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=1e-9)


def difference(query: str, top: Prometheus, reference: Prometheus) -> str | None:
    """How the global's answer differs from the reference's; None when it does not. topk
    keeps k of several equal series (every saturating node serves the same peaks), so a
    topk's answer is compared by its values, every other by its series and their values."""
    got, expected = answer(top, query), answer(reference, query)
    if "topk(" in query:
        values = sorted(v for _, v in got), sorted(v for _, v in expected)
        same = len(values[0]) == len(values[1]) and all(map(close, *values))
        return None if same else f"values {values[0]} != {values[1]}"
    got_by = {json.dumps(labels, sort_keys=True): v for labels, v in got}
    expected_by = {json.dumps(labels, sort_keys=True): v for labels, v in expected}
    if got_by.keys() != expected_by.keys():
        return f"series {sorted(got_by)} != {sorted(expected_by)}"
    far = {k: (got_by[k], expected_by[k]) for k in got_by if not close(got_by[k], expected_by[k])}
    return f"values (global, reference) {far}" if far else None


def test_every_fleet_panel_answers_on_the_global_as_on_one_server(
    federation: Federation,
) -> None:
    queries = [
        (t.title, substitute(t.expr, "", 15, 1))
        for t in dashboard_targets()
        if t.dashboard == "fleet-overview"
    ]
    differences: dict[str, str] = {}
    asking = list(queries)

    def alike() -> bool:
        # Each server evaluates its rule groups on its own schedule, and the global sees a
        # shard's evaluation one federation scrape later; the two servers scrape a node at
        # different moments too, so a rate's two answers differ by their scrapes' jitter
        # (up to a tenth of the interval on a loaded machine): ask each query again until
        # it agrees once, with data unless the simulation lacks what it reads (the fleet
        # consumer's panels, none here).
        differences.clear()
        for title, query in list(asking):
            found = difference(query, federation.top, federation.reference)
            simulated = not any(name in query for name in NOT_SIMULATED)
            if found is None and simulated and not answer(federation.reference, query):
                found = "empty on both"
            if found is None:
                asking.remove((title, query))
            else:
                differences[title] = found
        return not differences

    wait_until(alike, 20)
    assert differences == {}
    # The global's top 20s are the shards' current ones, none left over from an earlier
    # evaluation (every saturating node serves the same peaks: the ties change places).
    hottest = "instance_device_port_direction:burstscope_port_peak_utilization_ratio:topk20_max"
    assert federation.top.value(f"count({hottest})") <= 20 * SHARDS


def test_burst_saturation_alerts_reach_the_global_for_the_saturating_nodes_only(
    federation: Federation,
) -> None:
    saturating = {
        federation.instance(i) for i, n in enumerate(federation.fleet.nodes) if not n.quiet
    }
    query = 'ALERTS{alertname="BurstscopeBurstSaturation", alertstate="firing"}'

    def firing() -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for r in federation.top.get("/api/v1/query", query=query)["data"]["result"]:
            found.setdefault(r["metric"]["instance"], set()).add(r["metric"]["shard"])
        return found

    wait_until(lambda: set(firing()) >= saturating, 15)
    alerts = firing()
    assert set(alerts) == saturating
    # Each from the shard that scrapes the node, under its external label.
    assert alerts == {i: {str(federation.shard_of(i))} for i in saturating}


def test_drilldown_answers_for_a_node_on_its_shard_and_not_on_the_other(
    federation: Federation,
) -> None:
    node = federation.instance(2)  # full profile, saturating
    own = federation.shards[federation.shard_of(node)]
    (other,) = [s for i, s in enumerate(federation.shards) if i != federation.shard_of(node)]
    queries = [
        (t.title, substitute(t.expr, node, 15, 1))
        for t in dashboard_targets()
        if t.dashboard == "port-drilldown"
    ]
    assert len(queries) > 20
    silent: list[str] = []

    def answers_on_its_shard() -> bool:
        silent[:] = [
            title
            for title, query in queries
            if not answer(own, query) and not any(name in query for name in NOT_SIMULATED)
        ]
        return not silent

    wait_until(answers_on_its_shard, 15)
    assert silent == []
    # On the other shard: nothing of the node (a panel's "or vector(0)" has no instance).
    elsewhere = {
        title: labels
        for title, query in queries
        for labels, _ in answer(other, query)
        if labels.get("instance") == node
    }
    assert elsewhere == {}


def test_fleet_variables_list_the_nodes_on_the_global(federation: Federation) -> None:
    overview = json.loads((DASHBOARDS / "grafana" / "fleet-overview.json").read_text())
    listed: dict[str, list[str]] = {}
    for variable in overview["templating"]["list"]:
        if variable["type"] != "query" or variable["name"] in PER_PORT_VARIABLES:
            continue
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["definition"])
        assert match is not None, variable["definition"]
        selector, label = substitute(match[1], "", 15, 1), match[2]
        found = answer(federation.top, f"count by ({label}) ({selector})")
        listed[variable["name"]] = sorted(labels[label] for labels, _ in found if label in labels)
    instances = sorted(federation.instance(i) for i in range(NODES))
    assert listed["instance"] == instances
    assert listed["job"] == ["burstscope"]
    assert listed["job_id"] and listed["cluster"] == []  # no cluster label in this fleet


def test_the_global_holds_a_few_dozen_series_per_node(federation: Federation) -> None:
    """What federation costs the global per node, beside its alerts and its ports among a
    shard's hottest: dashboards/README.md, "Sharding", quotes it."""
    per_node = answer(
        federation.top,
        'count by (instance) ({job="burstscope", __name__!~"ALERTS|.+:(peak_)?topk20_.+"})',
    )
    # At most 32 for a node with one job on 9 ports: 13 per node (the counts only while not
    # 0), one per throttling cause judged (4), 4 per job, burstscope_info,
    # burstscope_job_info and a burstscope_job_port per port the job holds; 3 more at most
    # while ports are silent, below their peers or storming, none of which the simulated
    # nodes are.
    assert len(per_node) == NODES and max(v for _, v in per_node) <= 32, per_node
