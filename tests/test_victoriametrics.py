"""Long-term storage: every panel query answers the same from VictoriaMetrics as from Prometheus.

Three simulated nodes (burstscope/testing/simulated_fleet.py, one quiet) are scraped every
1 s by Debian's ``prometheus`` with both rule files, and its ``remote_write`` (the shipped
dashboards/prometheus/victoriametrics.example.yml, its host pointed here) sends every sample
to Debian's ``victoria-metrics``, single node, on a free loopback port with its data in tmp.
Once VictoriaMetrics holds exactly the samples Prometheus holds, both answer every target of
both dashboards at one evaluation time, variables substituted as Grafana would: the same
series (label sets), each value within the tolerance of the functions the query applies
(TOLERANCES, the table in dashboards/README.md#long-term-storage-victoriametrics). Skips
without the binaries; fails under BURSTSCOPE_REQUIRE_INTEGRATION=1.
"""

from __future__ import annotations

import contextlib
import math
import re
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from burstscope.testing.processes import free_port, wait_for
from burstscope.testing.simulated_fleet import (
    DASHBOARDS,
    Fleet,
    PanelTarget,
    Prometheus,
    capture_agent,
    dashboard_targets,
    make_fleet,
    prometheus_config,
    running_prometheus,
    substitute,
)
from tests.conftest import require_binary
from tests.test_fleet import NOT_SIMULATED

EXAMPLE = DASHBOARDS / "prometheus" / "victoriametrics.example.yml"
README = Path(__file__).resolve().parent.parent / "dashboards" / "README.md"
NODES = 3
SCRAPE_S = 1
# Grafana's $__interval on a short dashboard range, and the $__rate_interval it gives (4 s).
STEP_S = 3
RATE_INTERVAL_S = max(4 * SCRAPE_S, STEP_S + SCRAPE_S)
LONGEST_WINDOW_S = max(STEP_S, RATE_INTERVAL_S)

# A series: its labels but the metric name (MetricsQL keeps the name where PromQL drops it).
Series = frozenset[tuple[str, str]]


@dataclass(frozen=True)
class Tolerance:
    relative: float
    why: str


# Stored values: VictoriaMetrics "may reduce the precision for float values with more than 12
# significant decimal digits" (its FAQ, "Why do the same metrics have differences in
# VictoriaMetrics' and Prometheus' dashboards?", https://docs.victoriametrics.com/FAQ.html).
# Twelve digits kept, the rest cut rather than rounded, is one unit of the twelfth digit at
# worst: 1e-11 of a value whose first digit is 1 (a full run saw 688380.3832236885 stored as
# 688380.383223, 1.0e-12 apart, past a 1e-12 tolerance).
STORED_DIGITS = 1e-11
# How far VictoriaMetrics' value may be from Prometheus': a query is held to the loosest
# tolerance among the functions it applies, to EXACT when it applies none of these (the
# table in dashboards/README.md says the same). MetricsQL's differences from PromQL:
# https://docs.victoriametrics.com/metricsql/
EXACT = Tolerance(1e-9, "the same samples to 12 digits; floating-point order (a sum, a quantile)")
TOLERANCES = {
    # MetricsQL's rate and increase start from the last sample before the window and do not
    # extrapolate to its edges (the page above, and its rate section); Prometheus' take the
    # first and last samples inside it and extrapolate. On a steady counter both give its
    # slope. The simulated nodes here stamp each sample with its value's own time (Fleet's
    # timestamps), so no scrape latency tells them apart: only VictoriaMetrics' 12 digits,
    # in a difference about 1,000 windows smaller than the values (1.0e-8 measured).
    # Without the stamps, as from real agents, a scrape answered late shifts both: 0.02%
    # measured quiet, 2.2% and 14.6% (88 and 580 ms over the 4 s window) beside two CPU hogs.
    # histogram_quantile and ratios of rates carry theirs.
    "rate": Tolerance(1e-6, "no extrapolation; from the sample before the window"),
    "increase": Tolerance(1e-6, "no extrapolation; from the sample before the window"),
}
# MetricsQL keeps the metric name through functions that do not change what a series means
# (the page above); PromQL drops it. The panels' legends name their own labels.
KEEPS_NAME = re.compile(r"^\s*(max_over_time|min_over_time|round)\(")


def tolerance(expr: str) -> Tolerance:
    applied = [t for name, t in TOLERANCES.items() if re.search(rf"\b{name}\(", expr)]
    return max(applied, key=lambda t: t.relative, default=EXACT)


class VictoriaMetrics(Prometheus):
    """The query API Prometheus' client speaks, and what VictoriaMetrics adds to it."""

    def force_flush(self) -> None:
        """Makes every sample received so far searchable now, not at the next periodic flush."""
        with urllib.request.urlopen(f"{self.url}/internal/force_flush", timeout=30) as r:
            r.read()

    def healthy(self) -> bool:
        assert self.process.poll() is None, "victoria-metrics exited"
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False


@contextlib.contextmanager
def running_victoriametrics(binary: str, tmp: Path) -> Iterator[VictoriaMetrics]:
    port = free_port()
    with (tmp / "victoria-metrics.log").open("wb") as log:
        process = subprocess.Popen(
            [
                binary,
                f"-httpListenAddr=127.0.0.1:{port}",
                f"-storageDataPath={tmp / 'victoria-metrics-data'}",
                "-retentionPeriod=1d",
                # By default a query for a time less than 30 s ago is answered for 30 s ago,
                # so that not every target's newest sample has to have arrived yet.
                "-search.latencyOffset=0s",
                "-search.disableCache",
                "-loggerLevel=WARN",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        server = VictoriaMetrics(f"http://127.0.0.1:{port}", process)
        try:
            wait_for(server.healthy, 60, "VictoriaMetrics' /health", poll=0.1)
            yield server
        finally:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def remote_write_config(tmp: Path, fleet: Fleet, victoriametrics: VictoriaMetrics) -> Path:
    """The fleet's Prometheus configuration with the example's remote_write, sent here."""
    config = prometheus_config(tmp, fleet, f"{SCRAPE_S}s", shorten_for=True)
    (remote,) = yaml.safe_load(EXAMPLE.read_text())["remote_write"]
    here = urllib.parse.urlparse(victoriametrics.url).netloc
    remote["url"] = urllib.parse.urlparse(remote["url"])._replace(netloc=here).geturl()
    # Batches sent within 0.2 s rather than 5 s, so the test waits less.
    remote["queue_config"] = {"batch_send_deadline": "200ms"}
    with config.open("a") as out:
        out.write(yaml.safe_dump({"remote_write": [remote]}))
    return config


@pytest.fixture(scope="module")
def servers(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Fleet, Prometheus, VictoriaMetrics]]:
    prometheus = require_binary("prometheus")
    victoria_metrics = require_binary("victoria-metrics")
    tmp = tmp_path_factory.mktemp("victoriametrics")
    fleet = make_fleet(
        capture_agent(seconds=1.0), NODES, quiet_every=NODES, port=free_port(), timestamps=True
    )
    with fleet.running(), running_victoriametrics(victoria_metrics, tmp) as vm:
        config = remote_write_config(tmp, fleet, vm)
        with running_prometheus(prometheus, config, tmp / "prometheus-data", free_port()) as prom:
            yield fleet, prom, vm


def steady_evaluation_time(prometheus: Prometheus) -> float | None:
    """A time about 2 s ago, once every node's first scrape lies a window and a scrape before
    it (so every rate has its whole window and MetricsQL the sample before it). Its
    millisecond phase lies midway in the widest gap between the phases of every series'
    samples (each target and rule group keeps one), so no sample sits on the edge of a range:
    Prometheus 2's ranges include their start, MetricsQL's exclude it
    (https://prometheus.io/docs/prometheus/latest/migration/ says Prometheus 3 excludes it)."""
    # A range selector answers with the raw samples, each with its own timestamp.
    recent = prometheus.get("/api/v1/query", query='{__name__=~".+"}[3s]')["data"]["result"]
    phases = sorted({round(float(t) * 1000) % 1000 for r in recent for t, _ in r["values"]})
    if not phases:
        return None
    gaps = [
        (following - phase) % 1000 or 1000
        for phase, following in zip(phases, phases[1:] + phases[:1], strict=True)
    ]
    widest = max(range(len(gaps)), key=gaps.__getitem__)
    at = math.floor(time.time()) - 2 + ((phases[widest] + gaps[widest] // 2) % 1000) / 1000
    scrapes = prometheus.get("/api/v1/query", query='up{job="burstscope"}[1h]')["data"]["result"]
    if len(scrapes) < NODES:
        return None
    started = max(float(r["values"][0][0]) for r in scrapes)
    return at if at - started > LONGEST_WINDOW_S + SCRAPE_S + 0.5 else None


def raw_samples(server: Prometheus, at: float) -> dict[Series, list[tuple[int, float]]]:
    """Every series' samples (millisecond timestamp, value) up to ``at``. A staleness marker
    is no sample: Prometheus leaves it out, VictoriaMetrics stores and returns it as NaN."""
    reply = server.get("/api/v1/query", query='{__name__=~".+"}[1h]', time=f"{at:.3f}")
    return {
        frozenset(r["metric"].items()): [
            (round(float(t) * 1000), float(v)) for t, v in r["values"] if v != "NaN"
        ]
        for r in reply["data"]["result"]
    }


def holds_every_sample(prometheus: Prometheus, vm: VictoriaMetrics, at: float) -> bool:
    """Whether VictoriaMetrics holds as many samples of every series as Prometheus; once it
    does, they must be the same samples."""
    vm.force_flush()
    want, got = raw_samples(prometheus, at), raw_samples(vm, at)
    if {s: len(v) for s, v in want.items()} != {s: len(v) for s, v in got.items()}:
        return False
    different = [
        (dict(series), samples[:2], got[series][:2])
        for series, samples in want.items()
        if not all(
            t == vm_t and math.isclose(v, vm_v, rel_tol=STORED_DIGITS)
            for (t, v), (vm_t, vm_v) in zip(samples, got[series], strict=True)
        )
    ]
    assert different == [], f"{len(different)} series' samples differ, first {different[0]}"
    return True


def shorten(query: str) -> str:
    """Fixed windows of minutes or hours ([5m], [1h]) cut to the rate interval, which this
    test's history fills: over a series younger than its window Prometheus spreads the
    increase over the whole window, MetricsQL over the samples' own span."""
    return re.sub(r"\[\d+[mh]\]", f"[{RATE_INTERVAL_S}s]", query)


@dataclass(frozen=True)
class Answer:
    """One server's answer: each series with its metric name, if any, and value; or an error."""

    series: dict[Series, tuple[str | None, float]]
    error: str | None = None


def answer(server: Prometheus, query: str, at: float) -> Answer:
    """NaN is left out: MetricsQL returns no series where PromQL returns NaN (a burst
    duration of 0 s / 0 bursts), and Grafana draws neither."""
    reply = server.get("/api/v1/query", query=query, time=f"{at:.3f}")
    if reply.get("status") != "success":
        return Answer({}, str(reply.get("error")))
    found: dict[Series, tuple[str | None, float]] = {}
    for result in reply["data"]["result"]:
        labels = dict(result["metric"])
        name = labels.pop("__name__", None)
        value = float(result["value"][1])
        if not math.isnan(value):
            series = frozenset(labels.items())
            assert series not in found, f"two series differ only by name: {labels}: {query}"
            found[series] = (name, value)
    return Answer(found)


def topk_arguments(query: str) -> list[tuple[int, str]]:
    """k and the argument of each ``topk [by (...)] (k, ...)`` in the query."""
    found = []
    for match in re.finditer(r"\btopk\s*(?:by\s*\([^)]*\)\s*)?\(\s*(\d+)\s*,\s*", query):
        depth = 1
        for index in range(match.end(), len(query)):
            depth += {"(": 1, ")": -1}.get(query[index], 0)
            if depth == 0:
                found.append((int(match[1]), query[match.end() : index]))
                break
    return found


def tied_at_the_cut(prometheus: Prometheus, query: str, at: float) -> list[Series]:
    """The series tied with the k-th of each topk in the query. topk keeps k of them, and
    which is each engine's own choice (the order it reads series in), so there the two may
    differ and both be right: every saturated port peaks at 1.0."""
    tied: list[Series] = []
    for k, argument in topk_arguments(query):
        values = answer(prometheus, argument, at).series
        if len(values) <= k:
            continue
        cut = sorted((value for _, value in values.values()), reverse=True)[k - 1]
        allowed = tolerance(argument).relative
        tied += [s for s, (_, v) in values.items() if math.isclose(v, cut, rel_tol=allowed)]
    return tied


def among(series: Series, tied: list[Series]) -> bool:
    """Whether the series is one of the tied ones, or joins one (a topk under ``and on``)."""
    labels = dict(series)
    return any(all(labels[n] == v for n, v in other if n in labels) for other in tied)


def differences(
    target: PanelTarget, query: str, want: Answer, got: Answer, tied: list[Series]
) -> list[str]:
    where = f"{target.dashboard}: {target.title}"
    if want.error or got.error:
        return [f"{where}: Prometheus {want.error!r}, VictoriaMetrics {got.error!r}: {query}"]
    problems = []
    only_prometheus = [s for s in want.series.keys() - got.series.keys() if not among(s, tied)]
    only_vm = [s for s in got.series.keys() - want.series.keys() if not among(s, tied)]
    if only_prometheus or only_vm or len(want.series) != len(got.series):
        problems.append(
            f"{where}: {len(want.series)} series from Prometheus, {len(got.series)} from "
            f"VictoriaMetrics; only in Prometheus {[dict(s) for s in only_prometheus[:2]]}, "
            f"only in VictoriaMetrics {[dict(s) for s in only_vm[:2]]}: {query}"
        )
    allowed = tolerance(target.expr)
    for series in want.series.keys() & got.series.keys():
        (name, value), (vm_name, vm_value) = want.series[series], got.series[series]
        if vm_name != name and (name is not None or not KEEPS_NAME.match(query)):
            problems.append(f"{where}: {dict(series)} named {name!r}, {vm_name!r}: {query}")
        if not math.isclose(value, vm_value, rel_tol=allowed.relative):
            problems.append(
                f"{where}: {dict(series)} Prometheus {value!r}, VictoriaMetrics {vm_value!r} "
                f"(allowed {allowed.relative:g} relative: {allowed.why}): {query}"
            )
    return problems


@pytest.mark.integration
def test_the_example_is_a_valid_prometheus_configuration() -> None:
    result = subprocess.run(
        [require_binary("promtool"), "check", "config", str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (remote,) = yaml.safe_load(EXAMPLE.read_text())["remote_write"]
    # The single node's Prometheus remote write endpoint on its default port.
    assert remote["url"].endswith(":8428/api/v1/write")


@pytest.mark.integration
def test_every_panel_query_answers_the_same_from_victoriametrics(
    servers: tuple[Fleet, Prometheus, VictoriaMetrics],
) -> None:
    fleet, prometheus, vm = servers
    at = wait_for(
        lambda: steady_evaluation_time(prometheus), 60, f"{LONGEST_WINDOW_S} s of scrapes"
    )
    wait_for(lambda: holds_every_sample(prometheus, vm, at), 30, "every sample in VictoriaMetrics")
    node = f"{fleet.nodes[1].address}:{fleet.port}"
    problems: list[str] = []
    without_data: list[str] = []
    for target in dashboard_targets():
        drilled = node if target.dashboard == "port-drilldown" else ""
        query = shorten(substitute(target.expr, drilled, STEP_S, SCRAPE_S))
        want, got = answer(prometheus, query, at), answer(vm, query, at)
        problems += differences(target, query, want, got, tied_at_the_cut(prometheus, query, at))
        if not want.series and not want.error:
            without_data.append(target.expr)
    assert problems == [], "\n".join(problems)
    # Compared on data: only the families the sim source does not produce answer nothing.
    assert all(any(name in expr for name in NOT_SIMULATED) for expr in without_data)
    assert len(without_data) <= 6


def test_the_documented_tolerances_are_the_tested_ones() -> None:
    section = README.read_text().split("## Long-term storage: VictoriaMetrics", 1)[1]
    section = section.split("\n## ", 1)[0]
    for name, allowed in TOLERANCES.items():
        assert f"`{name}`" in section, name
        assert f"{allowed.relative:g} relative" in section, (name, allowed.relative)
    assert f"{EXACT.relative:g}" in section
