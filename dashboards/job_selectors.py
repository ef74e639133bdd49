"""Which series are burstscope's: the job selector and cluster label every rule and panel uses.

The monitoring-mixin convention (https://monitoring.mixins.dev, e.g. node-mixin's
``nodeExporterSelector`` and ``clusterLabel`` in its config.libsonnet): one configuration
object names the scrape job's selector and the cluster label, and every rule expression and
dashboard query is written with ``%(burstscopeSelector)s`` and ``%(clusterLabel)s`` in it.
``dashboards/generate.py --config FILE`` reads a site's TOML file with the same keys; the
checked-in files are generated from the defaults below.

The default job selector, ``job=~".*burstscope.*"``, is any job whose name contains
``burstscope``, because the job name is not ours to choose:

- the static configuration (prometheus/prometheus.example.yml) calls its job ``burstscope``;
- prometheus-operator names the job of a ServiceMonitor's targets after the Service
  (``burstscope-agent``), and of a PodMonitor's targets ``<namespace>/<PodMonitor name>``
  (``monitoring/burstscope-agent``), unless ``jobLabel`` names a label to take it from
  (https://prometheus-operator.dev/docs/api-reference/api/#monitoring.coreos.com/v1.ServiceMonitorSpec,
  ``jobLabel``; the same field of PodMonitorSpec);
- a kustomize overlay's ``namePrefix`` or a Helm release prefixes the name
  (``prod-burstscope-agent``).

A narrower default (``(.+/)?burstscope``) would miss the last two. What the broad one can
catch by mistake is another job with ``burstscope`` in its name that is not the agent; a
site with one, or with an agent job named otherwise, sets ``burstscopeSelector`` to its own
(``job="gpu-telemetry"``) and regenerates. Every burstscope_* series comes only from agents,
so the selector matters most where a metric is not ours: ``up`` (BurstscopeAgentDown, the
agents-down panels) and ``process_*`` (the agent's own CPU and memory).

The cluster label is ``cluster`` by default, the name kubernetes-mixin and node-mixin use.
The rules aggregate with ``without()``, so the label, when a site adds it (external or
target labels, relabelling), is kept on every recorded series and alert; joins name it in
``on (...)``, so two clusters with the same instance names never collide. Without the label
everything still works: ``cluster=~".*"`` (the dashboards' "All") matches series that have no
cluster label, and ``on (cluster, ...)`` matches the empty value on both sides.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

# A PromQL label matcher list: label, operator, double-quoted value, comma-separated
# (https://prometheus.io/docs/prometheus/latest/querying/basics/#time-series-selectors).
_MATCHER = r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*'
MATCHERS = re.compile(rf"{_MATCHER}(?:,{_MATCHER})*")
# A Prometheus label name (https://prometheus.io/docs/concepts/data_model/).
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# Labels the rules and dashboards already use for something else: a cluster label of one of
# these names would join or filter on the wrong thing.
TAKEN_LABELS = frozenset(
    {"job", "instance", "device", "port", "direction", "job_id", "le", "window", "__name__"}
)


class SelectorsError(ValueError):
    """A selectors file that cannot be used; the message says which file and why, in one line."""


@dataclass(frozen=True, slots=True)
class Selectors:
    """The job selector and cluster label, as the mixin convention names them."""

    # Matchers (without braces) that select the agents' series, ``up`` included.
    burstscope_selector: str = 'job=~".*burstscope.*"'
    # The label that tells clusters apart, where a site has one.
    cluster_label: str = "cluster"
    # Whether the dashboards show the cluster variable (hidden, at "All", otherwise).
    show_multi_cluster: bool = False

    def mapping(self) -> dict[str, str]:
        """The ``%(name)s`` placeholders of rule expressions and dashboard queries."""
        return {
            "burstscopeSelector": self.burstscope_selector,
            "clusterLabel": self.cluster_label,
        }

    def fill(self, template: str) -> str:
        """``template`` with every ``%(burstscopeSelector)s`` and ``%(clusterLabel)s`` filled."""
        return template % self.mapping()

    def fill_text(self, text: str) -> str:
        """``text`` (an annotation, a comment) with the placeholders filled, and nothing else:
        alert templates hold ``%q`` and percentages, which ``fill`` would read as its own."""
        for name, value in self.mapping().items():
            text = text.replace(f"%({name})s", value)
        return text


DEFAULT = Selectors()

# The file's keys, as the mixins spell them, and the field each sets.
_KEYS = {
    "burstscopeSelector": "burstscope_selector",
    "clusterLabel": "cluster_label",
    "showMultiCluster": "show_multi_cluster",
}


def parse_selectors(data: dict[str, object], source: str) -> Selectors:
    """Selectors from a TOML table's keys; SelectorsError on an unknown key or a bad value."""
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        raise SelectorsError(
            f"{source}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_KEYS))})"
        )
    selector = data.get("burstscopeSelector", DEFAULT.burstscope_selector)
    if not isinstance(selector, str) or MATCHERS.fullmatch(selector) is None:
        raise SelectorsError(
            f"{source}: burstscopeSelector must be PromQL label matchers without braces, "
            f'such as job="burstscope", not {selector!r}'
        )
    label = data.get("clusterLabel", DEFAULT.cluster_label)
    if not isinstance(label, str) or LABEL_NAME.fullmatch(label) is None:
        raise SelectorsError(f"{source}: clusterLabel must be a label name, not {label!r}")
    if label in TAKEN_LABELS:
        raise SelectorsError(f"{source}: clusterLabel {label!r} is a label burstscope uses")
    show = data.get("showMultiCluster", DEFAULT.show_multi_cluster)
    if not isinstance(show, bool):
        raise SelectorsError(f"{source}: showMultiCluster must be true or false, not {show!r}")
    return Selectors(selector.strip(), label, show)


def load_selectors(path: Path) -> Selectors:
    """A site's selectors file (TOML); SelectorsError when it cannot be read or used."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as error:
        raise SelectorsError(f"{path}: cannot read: {error.strerror or error}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise SelectorsError(f"{path}: not TOML: {error}") from None
    return parse_selectors(data, str(path))
