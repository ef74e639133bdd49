"""Prometheus rule files as data: the rules, their YAML, and the recorded series by name.

The rules are written in dashboards/recording.py and dashboards/alerting.py with the
job selector and cluster label as ``%(burstscopeSelector)s`` and ``%(clusterLabel)s``
(dashboards/job_selectors.py); ``rules_file`` writes them, filled in, as the groups/rules YAML of
Prometheus' rule files (https://prometheus.io/docs/prometheus/latest/configuration/
recording_rules/ and alerting_rules/), with the comments that say why each rule is what it
is. No YAML library is a dependency: the files are regular (quoted strings are JSON
strings, which are YAML double-quoted scalars; long texts are literal or folded blocks).

The dashboards name a recorded series by its level and metric, the first two parts of
Prometheus' ``level:metric:operations`` (https://prometheus.io/docs/practices/rules/), and
take the whole name from the rules: a rule whose window or aggregation changes is
followed, and one that is renamed or removed fails the build instead of leaving a panel
that draws nothing.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from dashboards.job_selectors import Selectors

RECORDING_RULES = Path(__file__).resolve().parent / "prometheus" / "recording.rules.yml"
# Every rule of the file is written "- record: NAME" on a line of its own, so a line pattern
# reads the names without a YAML parser (none is a dependency of burstscope).
_RECORD = re.compile(r"^\s*- record: (\S+)", flags=re.MULTILINE)
# The one base of every runbook_url: dashboards/README.md, "Runbook links", tells a site
# how to point it at its own copy of the runbooks (each the alert's name in lower case).
RUNBOOK_BASE = "https://runbooks.example.com/burstscope#"
# The evaluation interval of the groups whose every rule reads a window of 2 m or more (the
# 5 m shares, the alerts): such a window moves by a tenth or less between two evaluations, and
# evaluating them half as often leaves a shard's cores to the 15 s rules (bench/fleet.py).
# The test copies of the rules cut it with every other interval.
SLOW_WINDOWS_INTERVAL = "30s"
# The peak window every panel and rule reads: the longest the agent exports
# (collector.exporter.PEAK_WINDOWS), so no scrape interval up to 60 s loses a peak
# (dashboards/README.md, "Scrape intervals"). Its trailing window ends at the same newest
# sample as the 15 s one and holds it, so it is the maximum over both: a rule selecting it
# reads half the full profile's peak series that max without (window) over both would.
PEAK_WINDOW = "75s"


def recorded_names(path: Path = RECORDING_RULES) -> list[str]:
    """Every series the rules file records, in file order."""
    return _RECORD.findall(path.read_text())


@dataclass(frozen=True, slots=True)
class RecordingRules:
    """The names a rules file records, looked up by level and metric."""

    names: tuple[str, ...]
    source: str = str(RECORDING_RULES)

    @classmethod
    def read(cls, path: Path = RECORDING_RULES) -> RecordingRules:
        return cls(tuple(recorded_names(path)), str(path))

    def series(self, level: str, metric: str, operations: str = "") -> str:
        """The one recorded ``level:metric:...``; LookupError when there is none or several.
        ``operations``: the start of the third part, where one level records one metric
        twice (every port's series, and the hottest ports' under ``peak_topk20_...``)."""
        prefix = f"{level}:{metric}:{operations}"
        found = [name for name in self.names if name.startswith(prefix)]
        if len(found) != 1:
            what = ", ".join(found) if found else "none"
            raise LookupError(f"{self.source}: one rule recording {prefix}... expected, {what}")
        return found[0]


@dataclass(frozen=True, slots=True)
class Record:
    """A recording rule; ``expr`` may hold ``%(burstscopeSelector)s`` and ``%(clusterLabel)s``."""

    name: str
    expr: str
    comment: str = ""


@dataclass(frozen=True, slots=True)
class Alert:
    """An alerting rule: its expression, ``for``, severity and annotations."""

    name: str
    expr: str
    severity: str
    summary: str
    description: str
    comment: str = ""
    duration: str | None = None  # "for": absent fires at the first evaluation
    dashboard_url: str | None = None

    @property
    def runbook_url(self) -> str:
        return RUNBOOK_BASE + self.name.lower()


@dataclass(frozen=True, slots=True)
class Group:
    """A rule group: its rules run in order, groups concurrently."""

    name: str
    rules: tuple[Record | Alert, ...]
    comment: str = ""
    interval: str | None = None


def record_names(groups: Iterable[Group]) -> RecordingRules:
    """The series ``groups`` record, for the dashboards to look up by level and metric."""
    names = [rule.name for group in groups for rule in group.rules if isinstance(rule, Record)]
    return RecordingRules(tuple(names), "dashboards/recording.py")


def _text(text: str) -> list[str]:
    """A triple-quoted block as its lines: indentation and the blank first and last removed."""
    return textwrap.dedent(text).strip("\n").splitlines()


def _comment(text: str, indent: int) -> list[str]:
    pad = " " * indent
    return [f"{pad}# {line}".rstrip() for line in _text(text)] if text else []


def _expr(expr: str, selectors: Selectors, indent: int) -> list[str]:
    lines = _text(selectors.fill(expr))
    pad = " " * indent
    if len(lines) == 1:
        return [f"{pad}expr: {lines[0]}"]
    return [f"{pad}expr: |", *(f"{pad}  {line}".rstrip() for line in lines)]


def _rule(rule: Record | Alert, selectors: Selectors) -> list[str]:
    if isinstance(rule, Record):
        return [
            *_comment(rule.comment, 6),
            f"      - record: {rule.name}",
            *_expr(rule.expr, selectors, 8),
        ]
    lines = [f"      - alert: {rule.name}", *_comment(rule.comment, 8)]
    lines += _expr(rule.expr, selectors, 8)
    if rule.duration is not None:
        lines.append(f"        for: {rule.duration}")
    lines += ["        labels:", f"          severity: {rule.severity}", "        annotations:"]
    lines.append(f"          summary: {json.dumps(selectors.fill_text(rule.summary))}")
    lines.append("          description: >-")
    lines += [f"            {line}" for line in _text(selectors.fill_text(rule.description))]
    lines.append(f"          runbook_url: {json.dumps(rule.runbook_url)}")
    if rule.dashboard_url is not None:
        lines.append(f"          dashboard_url: {json.dumps(rule.dashboard_url)}")
    return lines


def rules_file(header: str, groups: Iterable[Group], selectors: Selectors) -> str:
    """The YAML of a rule file: ``header`` as comments, then every group and rule."""
    lines = [*_comment(selectors.fill_text(header), 0), "groups:"]
    for number, group in enumerate(groups):
        if number:
            lines.append("")
        lines += _comment(group.comment, 2)
        lines.append(f"  - name: {group.name}")
        if group.interval is not None:
            lines.append(f"    interval: {group.interval}")
        lines.append("    rules:")
        for index, rule in enumerate(group.rules):
            if index and (rule.comment or isinstance(rule, Alert)):
                lines.append("")
            lines += _rule(rule, selectors)
    return "\n".join(lines) + "\n"
