"""``burstscope install-files``: the dashboards, rules, systemd unit and Slurm scripts, to disk."""

from __future__ import annotations

import argparse
import shutil
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path

from burstscope.errors import UsageError

DEFAULT_PREFIX = "/usr/local/share/burstscope"  # the unit's Documentation= points here
# What goes out: every file of these folders but the code that generates them.
PARTS = ("dashboards", "systemd")
SKIPPED_SUFFIXES = (".py", ".pyc")


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Copy the Grafana dashboards and provisioning files, the Prometheus recording and "
        "alerting rules with their tests, the example Prometheus configuration, the systemd "
        "unit, the example agent configuration and the Slurm prolog and epilog (executable) "
        "to PREFIX/dashboards and PREFIX/systemd. "
        "Existing files are left alone unless --force is given."
    )
    parser.add_argument(
        "--prefix",
        default=DEFAULT_PREFIX,
        metavar="DIR",
        help=f"where to write them (default {DEFAULT_PREFIX})",
    )
    parser.add_argument("--force", action="store_true", help="overwrite files that exist")
    parser.set_defaults(func=run)


def _files(folder: Traversable, relative: Path) -> list[tuple[Traversable, Path]]:
    found: list[tuple[Traversable, Path]] = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.startswith((".", "__")) or entry.name.endswith(SKIPPED_SUFFIXES):
            continue
        if entry.is_dir():
            found.extend(_files(entry, relative / entry.name))
        else:
            found.append((entry, relative / entry.name))
    return found


def run(args: argparse.Namespace) -> int:
    prefix = Path(args.prefix)
    share = resources.files("burstscope") / "data-files"
    files = [item for part in PARTS for item in _files(share / part, Path(part))]
    existing = [relative for _, relative in files if (prefix / relative).exists()]
    if existing and not args.force:
        raise UsageError(
            f"{str(prefix / existing[0])!r} exists ({len(existing)} of {len(files)} files "
            "do); pass --force to overwrite"
        )
    try:
        for source, relative in files:
            target = prefix / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            with source.open("rb") as reader, target.open("wb") as writer:
                shutil.copyfileobj(reader, writer)
            # A wheel's files may come out of a zip without their mode: a script (the Slurm
            # prolog and epilog, which slurmd executes) is known by its "#!".
            with target.open("rb") as written:
                if written.read(2) == b"#!":
                    target.chmod(0o755)
    except OSError as exc:
        raise UsageError(f"cannot write under {str(prefix)!r}: {exc.strerror}") from None
    print(f"wrote {len(files)} files under {prefix}:")
    for part in PARTS:
        print(f"  {prefix / part}/")
    print(f"next: see {prefix / 'systemd' / 'README.md'} and {prefix / 'dashboards' / 'README.md'}")
    return 0
