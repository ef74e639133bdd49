"""``burstscope rule-placement``: when Prometheus runs each rule group; names that spread them."""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import math
import os
import posixpath
import urllib.error
import urllib.request
from pathlib import Path

from burstscope.errors import UsageError
from burstscope.rule_placement import (
    OURS,
    Crowding,
    Group,
    crowding,
    groups_from_config,
    our_files,
    prometheus_offset_s,
    spread,
)

DEFAULT_SECONDS = 1.0  # the time each group should stay within (dashboards/README.md)


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Show when Prometheus starts each rule group and which groups evaluate at the same "
        "moment. Prometheus places a group by a hash of its name and of its rules file's "
        "path and has no setting to move it; --spread finds names for the burstscope rules "
        "files under which the groups run apart (dashboards/README.md, 'Where Prometheus "
        "places the groups')."
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--config",
        metavar="FILE",
        help="a Prometheus configuration, named as its --config.file names it (its "
        "rule_files are read relative to it, as Prometheus does); each evaluation is "
        "assumed to take --seconds",
    )
    where.add_argument(
        "--url",
        metavar="URL",
        help="a running Prometheus (http://host:9090): its groups as it runs them, each "
        "with its last evaluation time",
    )
    parser.add_argument(
        "--seconds",
        metavar="S",
        default=str(DEFAULT_SECONDS),
        help="how long one evaluation of a group is assumed to take, where none was "
        "measured (default %(default)s)",
    )
    parser.add_argument(
        "--spread",
        action="store_true",
        help=f"also print new names for the files whose groups are all {OURS}* under which "
        "Prometheus would run the groups least crowded",
    )
    parser.set_defaults(func=run)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise UsageError(f"--seconds must be a number of seconds above 0, not {text!r}")
    return value


def _unix_seconds(stamp: str) -> float | None:
    """Seconds of an RFC 3339 time as Go writes it (nanoseconds, "Z"); None for Go's zero
    time, which the rules API gives a group not yet evaluated."""
    if stamp.startswith("0001-01-01"):
        return None
    whole, _, rest = stamp.partition(".")
    fraction, zone = "", "Z"
    if rest:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        fraction, zone = rest[:digits], rest[digits:]
    elif whole.endswith("Z"):
        whole, zone = whole[:-1], "Z"
    zone = "+00:00" if zone == "Z" else zone
    moment = datetime.datetime.fromisoformat(whole + zone).timestamp()
    return moment + (float(f"0.{fraction}") if fraction else 0.0)


def _groups_from_url(url: str, seconds: float) -> list[Group]:
    address = url.rstrip("/") + "/api/v1/rules"
    try:
        with urllib.request.urlopen(address, timeout=30) as response:
            body = json.load(response)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UsageError(f"cannot read {address}: {reason}") from None
    try:
        listed = body["data"]["groups"]
        groups = []
        for group in listed:
            interval = float(group["interval"])
            last = _unix_seconds(str(group.get("lastEvaluation", "0001-01-01")))
            took = float(group.get("evaluationTime") or 0.0)
            file, name = str(group["file"]), str(group["name"])
            at = last % interval if last is not None else None
            groups.append(
                Group(
                    file,
                    name,
                    interval,
                    took if took > 0 else seconds,
                    at if at is not None else prometheus_offset_s(file, name, interval),
                    seen=at is not None,
                )
            )
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{address} did not answer as Prometheus' rules API: {exc!r}") from None
    return groups


def _table(groups: list[Group], found: Crowding, measured: bool) -> None:
    width_name = max(len(g.name) for g in groups)
    took = "took (s)" if measured else "assumed (s)"
    print(f"{'at (s)':>8}  {'every':>6}  {took:>11}  beside  {'group':<{width_name}}  file")
    for group in sorted(groups, key=lambda g: (g.at_s, g.name)):
        every = f"{group.interval_s:g}s"
        mark = "" if group.seen or not measured else " (not yet run: its hash)"
        print(
            f"{group.at_s:8.3f}  {every:>6}  {group.seconds:11.3f}  "
            f"{found.most_beside[(group.file, group.name)]:6d}  "
            f"{group.name:<{width_name}}  {group.file}{mark}"
        )


def _summary(found: Crowding) -> str:
    share = found.beside_s / found.evaluation_s if found.evaluation_s else 0.0
    return (
        f"at most {found.peak} groups at once; {found.beside_s:.1f} of "
        f"{found.evaluation_s:.1f} evaluation seconds per {found.cycle_s:g} s cycle "
        f"({share:.0%}) ran beside another group"
    )


def run(args: argparse.Namespace) -> int:
    seconds = _seconds(args.seconds)
    named_by: dict[str, str] = {}
    if args.config is not None:
        groups, named_by = groups_from_config(args.config, seconds)
    else:
        groups = _groups_from_url(args.url, seconds)
    if not groups:
        raise UsageError("no rule groups to place")
    found = crowding(groups)
    measured = args.url is not None
    what = "as it runs them" if measured else f"each assumed to take {seconds:g} s"
    print(f"{len(groups)} rule groups, {what}; 'at': seconds past each multiple of its interval")
    _table(groups, found, measured)
    print(_summary(found))
    if not args.spread:
        return 0
    ours = our_files(groups)
    if not ours:
        raise UsageError(f"--spread: no rules file holds only {OURS}* groups")
    # Names already on disk are another file's; a server's disk is not this machine's.
    renames, moved = spread(groups, ours) if measured else spread(groups, ours, os.path.exists)
    print()
    if not renames:
        print(f"--spread: no name tried beside {', '.join(ours)} runs the groups further apart")
        return 0
    print(f"--spread: with these names, {_summary(crowding(moved))}:")
    for old, new in renames.items():
        print(f"  mv {old} {new}")
    for old, new in renames.items():
        entry = named_by.get(old)
        if entry is not None and not glob.has_magic(entry):
            renamed = posixpath.join(posixpath.dirname(entry), Path(new).name)
            print(f"  rule_files: {entry} -> {renamed}")
    print()
    _table(moved, crowding(moved), measured)
    return 0
