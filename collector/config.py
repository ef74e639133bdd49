"""The agent's configuration file (TOML): every key validated, every error naming file and key.

Layout (all tables and keys optional; command-line flags override the file)::

    [source]      spec, sysfs_root, include, exclude, line_rate_gbits, interval, slow_interval,
                  ethtool
    [source.line_rates]  DEVICE = GBITS (the data rate of one device's ports)
    [thresholds]  burst, saturated, idle, busy
    [listen]      address, tls_cert, tls_key, tls_client_ca, web_config_file
    [sampler]     realtime_priority, cpu, spin
    [mqtt]        url, username, password, ca_file, cert_file, key_file, spool_dir,
                  spool_messages, merge_gap, max_events_per_second
    [recording]   path, piece_seconds, max_bytes, max_age
    [jobs]        enabled, slurm_dir, slurm_max_age, silence, kubelet_socket, kubernetes_api,
                  kubernetes_token_file, kubernetes_ca_file, gpu_resources,
                  sriov_resources, shared_rdma_resources, storage_devices, gres_conf,
                  proc_root
    [jobs.rdma_resources]  RESOURCE = [DEVICE, ...] (a shared RDMA resource's devices)
    [collectives] dirs, map, clock_offset, label_delay
    [throttle]    xmit_wait_tick_ns
    [pfc_watchdog] enabled, interval, window, threshold, end_threshold
    [steps]       publish, quiet, floor
    [metrics]     profile

``parse_config`` checks each value on its own (types, finite numbers, ranges, durations,
URLs); what depends on several values or on the machine (the source SPEC and its ports, the
spin against the interval, TLS files) is checked where the agent builds its settings, and
``--check-config`` runs that same code (burstscope.agent.settings_from_args).
``check_offline`` adds to ``parse_config`` what needs no machine (the name of the source,
the spin against the interval): ``--check-config FILE --offline``, for configuration
management on a host without RDMA ports.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from burstscope.collector.http import DEFAULT_LISTEN, HttpError, parse_listen
from burstscope.collector.mqtt.settings import MqttSettingsError, parse_broker_url
from burstscope.collector.recording import parse_age, parse_size
from burstscope.collector.sampler import parse_interval
from burstscope.collector.sources import SOURCE_NAMES


class ConfigError(Exception):
    """One line: the file, the key and what is wrong with it."""


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, not {type(value).__name__}")
    return value


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, not {value!r}")
    return value


def _ratio(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be a number, not {type(value).__name__}")
    if not 0.0 < float(value) <= 1.0:
        raise ValueError(f"must be in (0, 1], not {value}")
    return float(value)


def _positive(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"must be a positive number, not {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"must be a finite number, not {value!r}")
    return float(value)


def _number(low: float, high: float, unit: str = "") -> Callable[[Any], float]:
    """A finite number in [low, high]: nan, inf and 1e308 are refused here, not at start."""

    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"must be a number, not {type(value).__name__}")
        if not math.isfinite(value) or not low <= value <= high:
            raise ValueError(f"must be between {low:g}{unit} and {high:g}{unit}, not {value!r}")
        return float(value)

    return check


def _mqtt_url(value: Any) -> str:
    text = _string(value)
    try:
        parse_broker_url(text)
    except MqttSettingsError as exc:
        raise ValueError(str(exc).removeprefix("--mqtt ")) from None
    return text


def _size(value: Any) -> int:
    if not isinstance(value, int | str):
        raise ValueError(f"must be a size like 512MB, not {type(value).__name__}")
    return parse_size(value)


def _age(value: Any) -> float:
    return parse_age(_string(value))


def _integer(low: int, high: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"must be an integer, not {type(value).__name__}")
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}, not {value}")
        return value

    return check


def _line_rates(value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        raise ValueError("must be a table of DEVICE = GBITS ([source.line_rates])")
    rates = {}
    for device, gbits in value.items():
        try:
            rates[device] = _positive(gbits)
        except ValueError as exc:
            raise ValueError(f"{device} {exc}") from None
    return rates


def _interval(value: Any) -> int:
    return parse_interval(_string(value))


def _duration(value: Any) -> int:
    """Like an interval, but 0 is allowed (spin) and the range is not the sampler's."""
    text = _string(value)
    if text.strip() in ("0", "0s", "0us", "0ms"):
        return 0
    return parse_interval(text) if text else 0


def _listen(value: Any) -> str:
    text = _string(value)
    try:
        parse_listen(text)
    except HttpError as exc:
        raise ValueError(str(exc).removeprefix("--listen ")) from None
    return text


def _regex(value: Any) -> str:
    import re

    text = _string(value)
    try:
        re.compile(text)
    except re.error as exc:
        raise ValueError(f"is not a valid regular expression: {exc}") from None
    return text


def _readable_file(value: Any) -> str:
    text = _string(value)
    if not Path(text).is_file():
        raise ValueError(f"file {text!r} does not exist")
    return text


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ValueError("must be a list of names")
    return tuple(value)


def _rdma_resources(value: Any) -> dict[str, tuple[str, ...]]:
    if not isinstance(value, dict):
        raise ValueError("must be a table of RESOURCE = [DEVICE, ...] ([jobs.rdma_resources])")
    resources = {}
    for name, devices in value.items():
        try:
            resources[name] = _strings(devices)
        except ValueError as exc:
            raise ValueError(f"{name} {exc}") from None
    return resources


def _collective_map(value: Any) -> str:
    from burstscope.collector.collectives.join import MappingError, read_mapping

    text = _readable_file(value)
    try:
        read_mapping(text)
    except MappingError as exc:
        raise ValueError(str(exc)) from None
    return text


def _profile(value: Any) -> str:
    from burstscope.collector.exporter import PROFILES

    text = _string(value)
    if text not in PROFILES:
        raise ValueError(f"must be one of {', '.join(PROFILES)}, not {text!r}")
    return text


def _clock_offset(value: Any) -> int:
    from burstscope.collector.collectives.live import parse_clock_offset

    return parse_clock_offset(_string(value))


# table -> key -> validator. Unknown tables and keys are errors: a typo must not be ignored.
SCHEMA: dict[str, dict[str, Callable[[Any], Any]]] = {
    "source": {
        "spec": _string,
        "sysfs_root": _string,
        "include": _regex,
        "exclude": _regex,
        "line_rate_gbits": _positive,
        "line_rates": _line_rates,
        "interval": _interval,
        # Every slow read is a firmware command on mlx5: at most once a second.
        "slow_interval": _number(1.0, 3600.0, " s"),
        # SIOCETHTOOL asks the running kernel: by default read only with sysfs_root "/sys".
        "ethtool": _boolean,
    },
    "thresholds": {"burst": _ratio, "saturated": _ratio, "idle": _ratio, "busy": _ratio},
    "listen": {
        "address": _listen,
        "tls_cert": _readable_file,
        "tls_key": _readable_file,
        "tls_client_ca": _readable_file,
        # exporter-toolkit's web configuration (YAML), instead of the tls_* keys.
        "web_config_file": _readable_file,
    },
    "sampler": {
        "realtime_priority": _integer(0, 99),
        "cpu": _integer(-1, 4095),
        "spin": _duration,
    },
    "mqtt": {
        "url": _mqtt_url,
        "username": _string,
        "password": _string,
        "ca_file": _readable_file,
        "cert_file": _readable_file,
        "key_file": _readable_file,
        "spool_dir": _string,
        "spool_messages": _integer(1, 10_000_000),
        "merge_gap": _interval,
        "max_events_per_second": _number(0.001, 1_000_000, ""),
    },
    "recording": {
        "path": _string,
        # The loss bound on SIGKILL, and the unit of retention.
        "piece_seconds": _number(0.1, 3600.0, " s"),
        "max_bytes": _size,
        "max_age": _age,
    },
    "jobs": {
        "enabled": _boolean,
        # Where the shipped Slurm prolog writes one file per job (systemd/slurm/).
        "slurm_dir": _string,
        # A job file older than this is taken as ended when Slurm cannot be asked.
        "slurm_max_age": _age,
        # A port that carried a running job's traffic and has moved nothing this long is
        # silent under the job (detectors.silence): a hung job or a dead path.
        "silence": _age,
        "kubelet_socket": _string,
        "kubernetes_api": _string,
        "kubernetes_token_file": _readable_file,
        "kubernetes_ca_file": _readable_file,
        "rdma_resources": _rdma_resources,
        # Which kubelet resource names (fnmatch patterns) are GPUs, SR-IOV VFs, shared RDMA.
        "gpu_resources": _strings,
        "sriov_resources": _strings,
        "shared_rdma_resources": _strings,
        # Ports of these devices are held by the jobs but reported apart (storage NICs).
        "storage_devices": _strings,
        "gres_conf": _readable_file,
        "proc_root": _string,
    },
    # NCCL Inspector dumps tailed for the collectives' classes (collector.collectives.live).
    "collectives": {
        "dirs": _strings,  # NCCL_INSPECTOR_DUMP_DIR of the jobs on this node
        "map": _collective_map,  # "communicator id or group name" = "EP" | "PP" | "DP" | "other"
        "clock_offset": _clock_offset,  # added to every record's time
        # How long samples and burst events wait for the records of their collectives.
        "label_delay": _interval,
    },
    # Why a saturated second was throttled (collector.throttle_live): the one limit a site
    # must tell, since sysfs does not (docs/report.md, "Why a saturated second was throttled").
    "throttle": {
        # port_xmit_wait's tick (IBA PortSamplesControl.Tick, as the switch or SM set it):
        # with it, credit wait is stalled time; without, presence only.
        "xmit_wait_tick_ns": _number(1.0, 1e9, " ns"),
    },
    # The PFC storm watchdog (collector.pfc_watchdog): pause counters only, at 10 Hz.
    "pfc_watchdog": {
        "enabled": _boolean,
        "interval": _number(0.01, 1.0, " s"),  # 10 Hz by default; a window needs 2 polls
        "window": _number(0.02, 60.0, " s"),  # SONiC's 400 ms
        "threshold": _ratio,  # paused share of the window that starts a storm (0.8)
        "end_threshold": _number(0.0, 0.99, ""),  # and ends it (0.2), below threshold
    },
    # One summary per step of the training rails on MQTT (collector.step_summaries), for the
    # fleet consumer's stragglers and slow rails (burstscope stragglers).
    "steps": {
        "publish": _boolean,  # on by default when MQTT is
        "quiet": _interval,  # silence that ends a step (30 ms), as the consumer's --quiet
        "floor": _number(0.001, 0.5, ""),  # share of line rate that makes a sample active
    },
    # What /metrics serves (collector.exporter.PROFILES): full, or lean for large fleets.
    "metrics": {"profile": _profile},
}


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """Validated values by table and key; absent keys are simply absent."""

    path: str | None = None
    values: dict[str, dict[str, Any]] = field(default_factory=dict)

    def get(self, table: str, key: str, default: Any = None) -> Any:
        return self.values.get(table, {}).get(key, default)

    @property
    def listen(self) -> str:
        return str(self.get("listen", "address", DEFAULT_LISTEN))


def parse_config(text: str, path: str = "<config>") -> AgentConfig:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    values: dict[str, dict[str, Any]] = {}
    for table, entries in raw.items():
        keys = SCHEMA.get(table)
        if keys is None:
            raise ConfigError(f"{path}: unknown table [{table}] (known: {', '.join(SCHEMA)})")
        if not isinstance(entries, dict):
            raise ConfigError(f"{path}: {table} must be a table ([{table}])")
        checked: dict[str, Any] = {}
        for key, value in entries.items():
            validate = keys.get(key)
            if validate is None:
                raise ConfigError(f"{path}: unknown key {table}.{key} (known: {', '.join(keys)})")
            try:
                checked[key] = validate(value)
            except ValueError as exc:
                raise ConfigError(f"{path}: {table}.{key} {exc}") from None
        values[table] = checked
    tls = values.get("listen", {})
    if ("tls_cert" in tls) != ("tls_key" in tls):
        raise ConfigError(f"{path}: listen.tls_cert and listen.tls_key go together")
    if "web_config_file" in tls and any(key.startswith("tls_") for key in tls):
        raise ConfigError(
            f"{path}: listen.web_config_file and listen.tls_* exclude each other: put the "
            "certificate in the web configuration's tls_server_config"
        )
    thresholds = values.get("thresholds", {})
    if thresholds.get("idle", 0.01) >= thresholds.get("burst", 0.5):
        raise ConfigError(f"{path}: thresholds.idle must be below thresholds.burst")
    if thresholds.get("burst", 0.5) > thresholds.get("saturated", 0.9):
        raise ConfigError(f"{path}: thresholds.burst must not exceed thresholds.saturated")
    return AgentConfig(path, values)


def load_config(path: str) -> AgentConfig:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file") from None
    return parse_config(text, path)


def spin_problem(spin_ns: int, interval_ns: int) -> str | None:
    """Spinning a whole interval or more busy-waits every tick: a core burnt for nothing."""
    if spin_ns < interval_ns:
        return None
    return (
        f"sampler.spin {spin_ns / 1e6:g} ms must be shorter than the sampling interval "
        f"({interval_ns / 1e6:g} ms)"
    )


def check_offline(config: AgentConfig) -> None:
    """What a start checks beyond ``parse_config`` that needs no machine: the source's name
    (not its ports: discovery reads this host's sysfs) and the spin against the interval.
    ConfigError naming the file and the key."""
    spec = config.get("source", "spec")
    if spec is not None and spec.partition(":")[0] not in SOURCE_NAMES:
        raise ConfigError(
            f"{config.path}: source.spec unknown source {spec!r} (known: {', '.join(SOURCE_NAMES)})"
        )
    problem = spin_problem(
        config.get("sampler", "spin", 0), config.get("source", "interval", 1_000_000)
    )
    if problem is not None:
        raise ConfigError(f"{config.path}: {problem}")
