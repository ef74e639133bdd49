"""Agent configuration: every key validated, every error naming file, key and problem."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from burstscope.collector.config import ConfigError, load_config, parse_config

EXAMPLE = """
[source]
spec = "netdev:lo"
sysfs_root = "/host/sys"
include = "^mlx5_"
line_rate_gbits = 400
interval = "1ms"
slow_interval = 1.0

[thresholds]
burst = 0.5
saturated = 0.9
idle = 0.01
busy = 0.25

[listen]
address = "127.0.0.1:9847"

[sampler]
realtime_priority = 10
cpu = -1
spin = "0us"
"""


def test_a_full_config_parses() -> None:
    config = parse_config(EXAMPLE, "agent.toml")
    assert config.get("source", "interval") == 1_000_000
    assert config.get("thresholds", "saturated") == 0.9
    assert config.listen == "127.0.0.1:9847"
    assert config.get("mqtt", "url") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[sorce]\nspec = 'sysfs'", "agent.toml: unknown table [sorce]"),
        ("[source]\nspecc = 'sysfs'", "agent.toml: unknown key source.specc"),
        ("[source]\nspec = 3", "agent.toml: source.spec must be a string, not int"),
        ("[source]\ninterval = '10us'", "agent.toml: source.interval interval '10us' is outside"),
        ("[source]\ninterval = 5", "agent.toml: source.interval must be a string, not int"),
        ("[source]\ninclude = '('", "agent.toml: source.include is not a valid regular"),
        ("[source]\nline_rate_gbits = -4", "agent.toml: source.line_rate_gbits must be a positive"),
        ("[thresholds]\nburst = 1.5", "agent.toml: thresholds.burst must be in (0, 1], not 1.5"),
        ("[thresholds]\nburst = 'half'", "agent.toml: thresholds.burst must be a number, not str"),
        ("[thresholds]\nburst = true", "agent.toml: thresholds.burst must be a number, not bool"),
        ("[thresholds]\nburst = 0.95", "thresholds.burst must not exceed thresholds.saturated"),
        ("[thresholds]\nidle = 0.6", "thresholds.idle must be below thresholds.burst"),
        ("[listen]\naddress = 'nowhere'", "agent.toml: listen.address 'nowhere' is not ADDR:PORT"),
        ("[listen]\naddress = ':70000'", "agent.toml: listen.address ':70000' is not ADDR:PORT"),
        ("[listen]\ntls_cert = '/nonexistent.pem'", "listen.tls_cert file '/nonexistent.pem'"),
        ("[sampler]\nrealtime_priority = 100", "sampler.realtime_priority must be between 0 and"),
        ("[sampler]\ncpu = 1.5", "agent.toml: sampler.cpu must be an integer, not float"),
        ("[jobs]\nenabled = 'yes'", "agent.toml: jobs.enabled must be true or false, not 'yes'"),
        ("[jobs]\nslurm_max_age = 'soon'", "agent.toml: jobs.slurm_max_age"),
        ("[jobs]\nstorage_devices = 'mlx5_4'", "agent.toml: jobs.storage_devices must be a list"),
        ("[jobs]\ngpu_resources = ['']", "agent.toml: jobs.gpu_resources must be a list of names"),
        (
            "[jobs]\nrdma_resources = { 'rdma/a' = 'mlx5_0' }",
            "agent.toml: jobs.rdma_resources rdma/a must be a list of names",
        ),
        ("[jobs]\ngres_conf = '/nonexistent/gres.conf'", "jobs.gres_conf file '/nonexistent"),
        ("source = 1", "agent.toml: source must be a table"),
        ("[source\n", "agent.toml: not valid TOML"),
    ],
)
def test_bad_config_names_file_key_and_problem(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(text, "agent.toml")
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_tls_cert_and_key_go_together(tmp_path: Path) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    with pytest.raises(ConfigError, match=r"tls_cert and listen\.tls_key go together"):
        parse_config(f"[listen]\ntls_cert = '{cert}'", "agent.toml")


def test_missing_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"absent.toml: cannot read: No such file"):
        load_config(str(tmp_path / "absent.toml"))
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match=r"binary\.toml: not a text file"):
        load_config(str(binary))


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "burstscope", "agent", "--check-config", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


# A host without RDMA: discovery finds no sysfs tree there.
NO_RDMA = '[source]\nspec = "sysfs"\nsysfs_root = "/nonexistent-sysfs"\ninterval = "1ms"\n'


def test_offline_check_needs_no_rdma_ports(tmp_path: Path) -> None:
    """--check-config runs discovery, so it fails on a host without RDMA; --offline checks
    the syntax and values only, for configuration management."""
    config = tmp_path / "agent.toml"
    config.write_text(NO_RDMA)
    online = _check(str(config))
    assert online.returncode == 2 and "/nonexistent-sysfs" in online.stderr
    offline = _check(str(config), "--offline")
    assert offline.returncode == 0, offline.stderr
    assert "configuration is valid" in offline.stdout


def test_the_example_configuration_passes_offline() -> None:
    example = Path(__file__).resolve().parent.parent / "systemd" / "agent.toml.example"
    result = _check(str(example), "--offline")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[source]\ninterval = "10us"', "source.interval interval '10us' is outside"),
        ('[source]\nspec = "sims"', "source.spec unknown source 'sims'"),
        ('[source]\ninterval = "1ms"\n[sampler]\nspin = "2ms"', "sampler.spin 2 ms must be"),
        ("[source\n", "not valid TOML"),
        ('[metrics]\nprofile = "slim"', "metrics.profile must be one of full, lean, not 'slim'"),
    ],
)
def test_offline_check_still_refuses_bad_values(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "agent.toml"
    config.write_text(text)
    result = _check(str(config), "--offline")
    assert result.returncode == 2, result
    (line,) = result.stderr.strip().splitlines()
    assert message in line and str(config) in line and "Traceback" not in result.stderr


def test_offline_alone_is_a_usage_error() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "burstscope", "agent", "--offline"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--offline goes with --check-config" in result.stderr
