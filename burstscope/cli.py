"""The ``burstscope`` command: one sub-command per module in burstscope/commands.

Only the module of the command being run is imported (numpy and pyarrow take most of a
second to load), so ``burstscope --version`` and ``burstscope -h`` start at once.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

import burstscope
from burstscope.errors import UsageError
from burstscope.logging_journal import stderr_is_journal

# Adding a command touches its module (which defines ``register(parser)`` and sets
# ``func``) and this table: name and the one line ``burstscope -h`` shows.
COMMANDS = {
    "discover": "list InfiniBand and RoCE ports",
    "record": "record a source into a Parquet trace",
    "report": "millisecond bursts beside 15-second averages, from a trace or CSV",
    "agent": "sample continuously and serve Prometheus metrics",
    "simulate": "simulate a GPU node's NICs: write a trace (-o) or a live sysfs tree (--sysfs)",
    "top": "live view of every port's bursts",
    "demo": "run the simulated GPU node through the agent and report on it",
    "events": "show the fleet's burst and link events from an MQTT broker",
    "stragglers": "judge the fleet's steps per job: stragglers and slow rails, as metrics",
    "export": "a trace's bursts as Chrome trace events, merged into a PyTorch trace if asked",
    "capture": "RoCEv2 packets per QP and traffic class, CNP/ECN, coflow collisions",
    "install-files": "copy the dashboards, alert rules and systemd unit to a directory",
    "rule-placement": "when Prometheus runs each rule group; rules-file names that spread them",
}


class _PrintVersion(argparse.Action):
    """``--version``, reading the package metadata only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS) -> None:
        super().__init__(
            option_strings,
            dest,
            nargs=0,
            default=argparse.SUPPRESS,
            help="show program's version number and exit",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(f"burstscope {burstscope.__version__}")
        parser.exit()


def _chosen(argv: Sequence[str]) -> str | None:
    """The command named on the command line (the first word that is not an option)."""
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(load: str | None = "*") -> argparse.ArgumentParser:
    """The parser, with the real arguments of the command ``load`` ("*": every command;
    None: none, which is enough for --version and the summary of -h)."""
    parser = argparse.ArgumentParser(
        prog="burstscope",
        description="Millisecond InfiniBand and RoCE port telemetry: "
        "the bursts that 15-second averages hide.",
    )
    parser.add_argument("--version", action=_PrintVersion)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, summary in COMMANDS.items():
        sub = subparsers.add_parser(name, help=summary, description=summary)
        if load in ("*", name):
            module = importlib.import_module(f"burstscope.commands.{name.replace('-', '_')}")
            module.register(sub)
            sub.set_defaults(parser=sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    # --version, -h or no command need no command's module: the summary table is enough.
    parser = build_parser(_chosen(words))
    args, unknown = parser.parse_known_args(words)
    if unknown:
        # A mistyped flag: the command's own usage, not the top-level one.
        getattr(args, "parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        status: int = args.func(args)
    except UsageError as exc:
        # One clear line naming the problem, status 2, never a traceback.
        # Under systemd the line goes to the journal as an error (sd-daemon(3) prefix).
        priority = "<3>" if stderr_is_journal() else ""
        print(f"{priority}burstscope {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as the docs of the signal module
        # advise, pointing stdout at /dev/null so the flush at exit cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
