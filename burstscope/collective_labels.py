"""The agent's collective labels: their settings, and the tail wired into a pipeline.

An agent given NCCL Inspector dump directories (``--nccl-inspector-dir``, ``[collectives]
dirs``) tails them (collector.collectives.tail), labels each saturated sample and burst with
the classes of the collectives running on the host then (collector.collectives.live), exports
per-class totals of the node and tags burst events with what they ran under. Without a
directory nothing of this runs and nothing changes: no thread, no families, no delay on the
bus.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from burstscope.collector.collectives.live import DEFAULT_LABEL_DELAY_NS, parse_clock_offset
from burstscope.errors import UsageError

if TYPE_CHECKING:
    from burstscope.collector.collectives.live import CollectiveTail
    from burstscope.collector.exporter import BurstscopeCollector
    from burstscope.collector.pipeline import Pipeline
    from burstscope.collector.sources.base import PortSpec
    from burstscope.detectors.analyzer import Chunk


@dataclass(frozen=True, slots=True)
class CollectiveSettings:
    """[collectives] in the configuration file, with --nccl-inspector-dir and friends."""

    dirs: tuple[str, ...] = ()  # NCCL_INSPECTOR_DUMP_DIR of this node's jobs; () is off
    map_file: str | None = None
    mapping: tuple[tuple[str, str], ...] = ()  # the map file's entries, read at start
    clock_offset_ns: int = 0  # added to every record's time
    label_delay_ns: int = DEFAULT_LABEL_DELAY_NS

    @property
    def enabled(self) -> bool:
        return bool(self.dirs)


def collective_settings(config_get: Any, args: Any) -> CollectiveSettings:
    """Flags over the file's [collectives] over defaults; UsageError (one line) for a bad
    flag or map file."""
    from burstscope.collector.collectives.join import MappingError, read_mapping

    flagged = getattr(args, "nccl_inspector_dir", None)
    dirs = tuple(flagged) if flagged else tuple(config_get("collectives", "dirs", ()))
    map_file = getattr(args, "collective_map", None) or config_get("collectives", "map", None)
    mapping: Mapping[str, str] = {}
    if map_file is not None:
        try:
            mapping = read_mapping(map_file)
        except MappingError as exc:
            raise UsageError(f"--collective-map {exc}") from None
    offset = config_get("collectives", "clock_offset", 0)
    flag = getattr(args, "collective_clock_offset", None)
    if flag is not None:
        try:
            offset = parse_clock_offset(flag)
        except ValueError as exc:
            raise UsageError(f"--collective-clock-offset {exc}") from None
    return CollectiveSettings(
        dirs=dirs,
        map_file=None if map_file is None else str(map_file),
        mapping=tuple(sorted(mapping.items())),
        clock_offset_ns=offset,
        label_delay_ns=config_get("collectives", "label_delay", DEFAULT_LABEL_DELAY_NS),
    )


def build_collectives(
    settings: CollectiveSettings, hostname: str | None = None
) -> CollectiveTail | None:
    """The tail and labels for these settings, not started; None when no directory is set."""
    if not settings.enabled:
        return None
    from burstscope.collector.collectives.live import CollectiveLabels, CollectiveTail, SpanStore
    from burstscope.collector.collectives.tail import DumpDirectoryTail

    store = SpanStore(dict(settings.mapping), settings.clock_offset_ns)
    return CollectiveTail(
        DumpDirectoryTail(settings.dirs, hostname),
        store,
        CollectiveLabels(store, settings.label_delay_ns),
    )


def attach_collectives(
    tail: CollectiveTail, pipeline: Pipeline, collector: BurstscopeCollector
) -> None:
    """Feed the labels every drained chunk and export their totals; then start the tail."""
    from burstscope.collector.exporter import collective_families

    labels = tail.labels

    def on_chunk(spec: PortSpec, direction: str, chunk: Chunk) -> None:
        labels.on_chunk((spec.device, spec.port, direction), chunk, pipeline.thresholds)

    pipeline.chunk_listeners.append(on_chunk)
    collector.extra_families.append(lambda: collective_families(tail.figures()))
    tail.start()
