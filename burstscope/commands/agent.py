"""``burstscope agent``: sample continuously, detect bursts, serve /metrics until stopped."""

from __future__ import annotations

import argparse
import sys

from burstscope.agent import serve, settings_from_args, setup_logging
from burstscope.arguments import (
    add_collective_arguments,
    add_job_arguments,
    add_pfc_watchdog_arguments,
    add_source_arguments,
)
from burstscope.collector.config import ConfigError, check_offline, load_config
from burstscope.collector.http import DEFAULT_LISTEN
from burstscope.collector.sampler import set_process_title
from burstscope.errors import UsageError
from burstscope.logging_journal import LEVELS
from burstscope.mqtt_arguments import add_mqtt_arguments


def register(parser: argparse.ArgumentParser) -> None:
    add_source_arguments(parser, defaults=False)
    add_agent_arguments(parser)
    parser.add_argument(
        "--check-config",
        metavar="FILE",
        help="validate a configuration file as a start would (it discovers this host's "
        "ports) and exit",
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="with --check-config: check the file's syntax and values only, not this host's "
        "ports or sysfs (for configuration management on a host without RDMA)",
    )
    parser.add_argument(
        "--log-level", choices=LEVELS, default="info", help="least severe level logged"
    )
    parser.set_defaults(func=run)


def add_agent_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--listen",
        metavar="ADDR:PORT",
        help=f"where to serve /metrics (default {DEFAULT_LISTEN}); :PORT is every IPv4 "
        "interface, port 0 a free port: the log names the address bound",
    )
    parser.add_argument("--config", metavar="FILE", help="agent configuration (TOML)")
    parser.add_argument(
        "--web.config.file",
        dest="web_config_file",
        metavar="FILE",
        help="exporter-toolkit web configuration (YAML, as node_exporter reads): TLS, client "
        "certificates, basic_auth_users with bcrypt hashes; instead of the --tls-* flags "
        "(which are shorthand for its tls_server_config); /-/healthy and /-/ready skip basic auth",
    )
    parser.add_argument(
        "--tls-cert",
        metavar="FILE",
        help="serve HTTPS with this certificate (shorthand for a web configuration's "
        "tls_server_config; not with --web.config.file)",
    )
    parser.add_argument("--tls-key", metavar="FILE", help="private key of --tls-cert")
    parser.add_argument(
        "--tls-client-ca", metavar="FILE", help="require client certificates signed by this CA"
    )
    parser.add_argument(
        "--record",
        metavar="DIR",
        help="also record every sample: one trace per run in DIR/<start time>/",
    )
    parser.add_argument(
        "--metrics-profile",
        metavar="PROFILE",
        help="what /metrics serves: full (default: every family, about 56 series per port) or "
        "lean (at most 15 per port: what the fleet dashboard, the rules and the alerts read; "
        "for fleets of thousands of nodes; [metrics] profile; docs/metrics.md, Profiles)",
    )
    add_job_arguments(parser)
    add_collective_arguments(parser)
    add_pfc_watchdog_arguments(parser)
    add_mqtt_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if args.offline and args.check_config is None:
        raise UsageError("--offline goes with --check-config FILE")
    if args.check_config is not None and args.offline:
        try:
            check_offline(load_config(args.check_config))
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
        print(f"{args.check_config}: configuration is valid (offline: syntax and values)")
        return 0
    if args.check_config is not None:
        # Exactly what a start validates (settings_from_args), without starting anything
        # or creating anything on disk: a file that passes here starts.
        args.config = args.check_config
        settings_from_args(args)
        print(f"{args.check_config}: configuration is valid")
        return 0
    setup_logging(args.log_level)
    # "burstscope: agent --config ..." in ps, beside its child "burstscope: sampler".
    set_process_title(" ".join(["burstscope:", "agent", *_flags(sys.argv)]))
    return serve(args)


def _flags(argv: list[str]) -> list[str]:
    """The words after the command name, as given."""
    return argv[argv.index("agent") + 1 :] if "agent" in argv else []
