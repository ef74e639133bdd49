"""When Prometheus evaluates each rule group, which groups run at the same moment, and which
file names spread them.

Prometheus runs every rule group on a schedule of its own, fixed on the wall clock: a group
with interval I starts whenever Unix time mod I equals its offset, and its offset is a hash
of the group's name and of the path it was loaded from, modulo I
(prometheus/prometheus rules/group.go: ``Group.EvalTimestamp`` takes ``g.hash() %
g.interval``; ``Group.hash`` is ``labels.New({name}, {file}).Hash()``, and
model/labels ``Labels.Hash`` is xxhash64 of each label's name and value in name order, each
followed by the byte 0xff). Groups run concurrently, each its own rules in order. Prometheus
has no setting that places a group (``query_offset``, from 2.53, moves the time a rule
queries, not the time it runs; vmalert has ``eval_offset``, Prometheus does not): what places
a group is its name and its file's path.

So heavy groups whose offsets fall within a second of each other run together, every
interval, on whatever cores the server has, and each takes longer. At 590 nodes on a 2-core
VM, 16 of the 17 evaluations over 0.6 s in one run were of nine groups that this hash put in
the same 4.4 s of each 15 s (docs/performance.md). The group names are the rules' own; the
file's name is the site's to choose: :func:`spread` tries names beside each rules file until
the groups are apart.

``tests/test_rule_placement.py`` holds :func:`prometheus_offset_s` against a real Prometheus:
every group's predicted start equals the one its ``/api/v1/rules`` reports.
"""

from __future__ import annotations

import dataclasses
import glob
import math
import posixpath
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import PurePosixPath
from typing import Any

from burstscope.errors import UsageError

# Prometheus' separator byte between label names and values in Labels.Hash (model/labels:
# `seps = []byte{'\xff'}`).
_SEP = b"\xff"
# A day: the longest cycle worth sweeping (the least common multiple of the intervals; a
# group that runs less often than that is placed within its first day).
MAX_CYCLE_MS = 86_400_000
# Names tried beside each rules file by spread(): recording-1.rules.yml ... -256.
CANDIDATES = 256
# Rounds of spread()'s search, one file at a time with the others as last chosen.
ROUNDS = 3
GLOBAL_EVALUATION_INTERVAL = "1m"  # Prometheus' default evaluation_interval
OURS = "burstscope"  # the files spread() may rename: those whose every group is burstscope*

_DURATION = re.compile(
    r"^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$"
)
_DURATION_MS = (365 * 86_400_000, 7 * 86_400_000, 86_400_000, 3_600_000, 60_000, 1000, 1)


def parse_prometheus_duration(text: str) -> float:
    """Seconds of a Prometheus duration ("15s", "1m30s", "5m", "1d"), as common/model's
    ParseDuration reads it: units y w d h m s ms, each at most once, in that order."""
    if text.strip() == "0":
        return 0.0
    match = _DURATION.match(text.strip())
    if not match or not any(match.groups()):
        raise ValueError(f"not a Prometheus duration: {text!r}")
    ms = sum(int(n) * unit for n, unit in zip(match.groups(), _DURATION_MS, strict=True) if n)
    return ms / 1000


def prometheus_offset_s(file: str, name: str, interval_s: float) -> float:
    """Seconds after each multiple of ``interval_s`` (Unix time) at which Prometheus starts
    the group ``name`` loaded from ``file`` (the path as Prometheus names it: its
    ``/api/v1/rules`` ``file``)."""
    import xxhash  # the [rules] extra; only the placement needs it

    key = b"file" + _SEP + file.encode() + _SEP + b"name" + _SEP + name.encode() + _SEP
    interval_ns = round(interval_s * 1e9)
    return (xxhash.xxh64_intdigest(key) % interval_ns) / 1e9


@dataclasses.dataclass(frozen=True)
class Group:
    """One rule group as Prometheus schedules it."""

    file: str
    name: str
    interval_s: float
    seconds: float  # how long one evaluation takes: measured, or assumed
    at_s: float  # its start within each interval
    seen: bool = False  # at_s read off the server's last evaluation, not computed

    def moved(self, file: str) -> Group:
        """The same group loaded from ``file``."""
        return dataclasses.replace(
            self, file=file, at_s=prometheus_offset_s(file, self.name, self.interval_s)
        )


@dataclasses.dataclass(frozen=True)
class Crowding:
    """How the groups' evaluations overlap over one cycle (the least common multiple of their
    intervals)."""

    cycle_s: float
    peak: int  # the most groups evaluating at one moment
    evaluation_s: float  # evaluation seconds in the cycle, all groups
    beside_s: float  # of which with at least one other group evaluating
    most_beside: dict[tuple[str, str], int]  # per (file, name): most others at once

    def score(self) -> tuple[int, float]:
        return self.peak, round(self.beside_s, 6)


def cycle_ms(groups: Iterable[Group]) -> int:
    cycle = 1
    for group in groups:
        cycle = math.lcm(cycle, max(1, round(group.interval_s * 1000)))
        if cycle > MAX_CYCLE_MS:
            return MAX_CYCLE_MS
    return cycle


def crowding(groups: Sequence[Group]) -> Crowding:
    """Sweep one cycle: every evaluation of every group, as [start, start + seconds)."""
    cycle = cycle_ms(groups) / 1000
    events: list[tuple[float, int, int]] = []  # (time, +1 start / -1 end, group index)
    for index, group in enumerate(groups):
        if group.interval_s <= 0:
            continue
        runs = max(1, math.floor(cycle / group.interval_s + 1e-9))
        length = min(group.seconds, cycle)
        for k in range(runs):
            start = (group.at_s + k * group.interval_s) % cycle
            end = start + length
            if end <= cycle:
                events += [(start, 1, index), (end, -1, index)]
            else:  # wraps past the cycle's end: the rest runs at its start
                events += [(start, 1, index), (cycle, -1, index)]
                events += [(0.0, 1, index), (end - cycle, -1, index)]
    # Ends before starts at the same moment: one group starting as another ends is not beside it.
    events.sort(key=lambda e: (e[0], e[1]))
    active: dict[int, int] = {}  # group index -> its evaluations running now
    running = peak = 0
    beside = 0.0
    most: dict[int, int] = dict.fromkeys(range(len(groups)), 0)
    previous = 0.0
    for time, change, index in events:
        if running >= 2:
            beside += running * (time - previous)
        previous = time
        running += change
        active[index] = active.get(index, 0) + change
        if not active[index]:
            del active[index]
        peak = max(peak, running)
        if change > 0:
            for other in active:
                most[other] = max(most[other], running - 1)
    total = sum(
        min(g.seconds, cycle) * max(1, math.floor(cycle / g.interval_s + 1e-9))
        for g in groups
        if g.interval_s > 0
    )
    return Crowding(
        cycle_s=cycle,
        peak=peak,
        evaluation_s=total,
        beside_s=beside,
        most_beside={(g.file, g.name): most[i] for i, g in enumerate(groups)},
    )


def candidate_names(file: str, count: int = CANDIDATES) -> list[str]:
    """``file`` and ``count`` names beside it: dir/recording-<k>.rules.yml for
    dir/recording.rules.yml (the suffix goes before the first dot, so a glob such as
    ``*.rules.yml`` still matches)."""
    path = PurePosixPath(file)
    stem, dot, rest = path.name.partition(".")
    return [file] + [str(path.with_name(f"{stem}-{k}{dot}{rest}")) for k in range(1, count + 1)]


def our_files(groups: Sequence[Group]) -> list[str]:
    """The files :func:`spread` may rename: those whose every group is named ``OURS``*."""
    return [
        file
        for file in dict.fromkeys(g.file for g in groups)
        if all(g.name.startswith(OURS) for g in groups if g.file == file)
    ]


def spread(
    groups: Sequence[Group],
    files: Sequence[str],
    taken: Callable[[str], bool] = lambda _path: False,
    count: int = CANDIDATES,
) -> tuple[dict[str, str], list[Group]]:
    """New names for ``files`` (a file each) under which Prometheus would run ``groups``
    least crowded: fewest at once, then fewest evaluation seconds beside another. Searched
    one file at a time over :func:`candidate_names`, the other files as last chosen, for
    ``ROUNDS`` rounds; a name for which ``taken`` is true (another file's) is skipped. Gives
    {old: new} for the files whose name changes, and the groups as they would then run."""
    chosen = {file: file for file in files}
    current = list(groups)
    best = crowding(current).score()
    for _round in range(ROUNDS):
        changed = False
        for file in files:
            mine = [i for i, g in enumerate(groups) if g.file == file]
            for candidate in candidate_names(file, count)[1:]:
                if candidate == chosen[file] or taken(candidate):
                    continue
                trial = list(current)
                for i in mine:
                    trial[i] = groups[i].moved(candidate)
                score = crowding(trial).score()
                if score < best:
                    best, current, chosen[file], changed = score, trial, candidate, True
        if not changed:
            break
    return {old: new for old, new in chosen.items() if old != new}, current


def _yaml(path: str) -> Any:
    import yaml  # the [rules] extra

    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.safe_load(handle)
    except OSError as exc:
        raise UsageError(f"cannot read {path!r}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path!r} is not a text file") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" line {where.line + 1}" if where is not None else ""
        raise UsageError(f"{path!r}{line} is not YAML: {getattr(exc, 'problem', exc)}") from None


def _rule_files(config_path: str) -> tuple[list[str], dict[str, str], float]:
    """The rules files Prometheus would load for ``config_path``, as it names them (each
    rule_files entry joined to the configuration's folder and globbed: config.SetDirectory
    and main.go's reloader in prometheus/prometheus), which entry names each, and the global
    evaluation interval in seconds."""
    config = _yaml(config_path)
    if not isinstance(config, dict):
        raise UsageError(f"{config_path!r} is not a Prometheus configuration (no mapping)")
    try:
        interval = parse_prometheus_duration(
            str((config.get("global") or {}).get("evaluation_interval", GLOBAL_EVALUATION_INTERVAL))
        )
    except (ValueError, AttributeError) as exc:
        raise UsageError(f"{config_path!r}: global.evaluation_interval: {exc}") from None
    entries = config.get("rule_files") or []
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise UsageError(f"{config_path!r}: rule_files is not a list of paths")
    folder = posixpath.dirname(config_path)
    files: list[str] = []
    named_by: dict[str, str] = {}
    for entry in entries:
        pattern = (
            entry if posixpath.isabs(entry) else posixpath.normpath(posixpath.join(folder, entry))
        )
        for found in sorted(glob.glob(pattern)):
            if found not in named_by:
                files.append(found)
                named_by[found] = entry
    if not files:
        raise UsageError(f"{config_path!r}: rule_files names no file that exists")
    return files, named_by, interval


def groups_from_config(config_path: str, seconds: float) -> tuple[list[Group], dict[str, str]]:
    """Every rule group Prometheus would load for the configuration ``config_path`` (named
    as its --config.file names it), each assumed to take ``seconds``, placed by
    :func:`prometheus_offset_s`; and which rule_files entry names each file."""
    files, named_by, default_interval = _rule_files(config_path)
    groups = []
    for file in files:
        loaded = _yaml(file)
        listed = loaded.get("groups") if isinstance(loaded, dict) else None
        if not isinstance(listed, list):
            raise UsageError(f"{file!r} is not a rules file (no list of groups)")
        for group in listed:
            if not isinstance(group, dict) or not isinstance(group.get("name"), str):
                raise UsageError(f"{file!r}: a group without a name")
            try:
                interval = (
                    parse_prometheus_duration(str(group["interval"]))
                    if "interval" in group
                    else default_interval
                )
            except ValueError as exc:
                raise UsageError(f"{file!r}: group {group['name']!r}: {exc}") from None
            if interval <= 0:
                raise UsageError(f"{file!r}: group {group['name']!r}: interval 0")
            name = group["name"]
            groups.append(
                Group(file, name, interval, seconds, prometheus_offset_s(file, name, interval))
            )
    return groups, named_by
