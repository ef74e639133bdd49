"""The systemd unit, its drop-in and the example config, checked with systemd's own tools."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from burstscope.collector.config import SCHEMA, load_config
from tests.conftest import require_binary

SYSTEMD = Path(__file__).parent.parent / "systemd"
UNIT = SYSTEMD / "burstscope-agent.service"
TIMING = SYSTEMD / "burstscope-agent.service.d" / "timing.conf.example"
JOBS = SYSTEMD / "burstscope-agent.service.d" / "jobs.conf.example"
DROP_INS = {"unit": (), "unit+timing": (TIMING,), "unit+jobs": (JOBS,), "unit+both": (TIMING, JOBS)}
EXAMPLE = SYSTEMD / "agent.toml.example"
INSTALLED = "/usr/local/bin/burstscope"
MAX_EXPOSURE = 2.0


def venv_burstscope() -> str:
    found = Path(sys.executable).parent / "burstscope"
    if not found.exists():
        pytest.skip(f"{found} is missing: make setup installs the console script")
    return str(found)


def unit_copy(directory: Path, drop_ins: tuple[Path, ...] = (), extra: str = "") -> Path:
    """The unit with ExecStart on this checkout's burstscope: verify fails on a missing binary."""
    text = UNIT.read_text()
    assert f"ExecStart={INSTALLED} agent" in text
    unit = directory / UNIT.name
    unit.write_text(text.replace(INSTALLED, venv_burstscope()) + extra)
    if drop_ins:
        folder = directory / f"{UNIT.name}.d"
        folder.mkdir()
        for drop_in in drop_ins:
            shutil.copy(drop_in, folder / drop_in.name.removesuffix(".example"))
    return unit


def verify(unit: Path) -> subprocess.CompletedProcess[str]:
    # Unknown keys only warn (exit 0, systemd#11651): every stderr line counts as a failure.
    return subprocess.run(
        [require_binary("systemd-analyze"), "verify", unit.name],
        cwd=unit.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("drop_ins", DROP_INS.values(), ids=DROP_INS.keys())
def test_unit_verifies_without_any_warning(tmp_path: Path, drop_ins: tuple[Path, ...]) -> None:
    result = verify(unit_copy(tmp_path, drop_ins))
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr


def test_verify_would_catch_an_unknown_key(tmp_path: Path) -> None:
    """The check above can fail: a misspelt key is a warning on stderr."""
    result = verify(unit_copy(tmp_path, extra="\n[Service]\nProtectSystm=strict\n"))
    assert "Unknown key 'ProtectSystm'" in result.stderr


def exposure(unit: Path) -> tuple[float, str]:
    result = subprocess.run(
        [require_binary("systemd-analyze"), "security", "--offline=true", unit.name],
        cwd=unit.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert found, result.stdout + result.stderr
    return float(found.group(1)), result.stdout


@pytest.mark.parametrize("drop_ins", DROP_INS.values(), ids=DROP_INS.keys())
def test_security_exposure_at_most_two(tmp_path: Path, drop_ins: tuple[Path, ...]) -> None:
    unit = unit_copy(tmp_path, drop_ins)
    level, report = exposure(unit)
    assert level <= MAX_EXPOSURE, report
    # systemd-analyze's own gate, as CI would run it: exit 1 above the threshold.
    threshold = subprocess.run(
        [
            require_binary("systemd-analyze"),
            "security",
            "--offline=true",
            f"--threshold={round(MAX_EXPOSURE * 10)}",
            unit.name,
        ],  # tenths: 20 = 2.0
        cwd=unit.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert threshold.returncode == 0, threshold.stdout


def unit_settings(text: str) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def test_unit_keeps_what_the_agent_needs() -> None:
    unit = unit_settings(UNIT.read_text())
    assert unit["Type"] == ["notify"] and unit["NotifyAccess"] == ["main"]
    assert unit["ExecStart"] == [f"{INSTALLED} agent --config /etc/burstscope/agent.toml"]
    assert unit["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert unit["CapabilityBoundingSet"] == [""]
    assert unit["RestrictAddressFamilies"] == ["AF_UNIX AF_INET AF_INET6 AF_NETLINK"]
    assert unit["SystemCallFilter"][0] == "@system-service"
    assert unit["StateDirectory"] == ["burstscope"]
    # The shared-memory ring lives in /dev/shm: nothing may make it private or read-only.
    assert "PrivateIPC" not in unit
    assert not any(
        "/dev/shm" in v for k in ("ReadOnlyPaths", "InaccessiblePaths") for v in unit.get(k, [])
    )
    timing = unit_settings(TIMING.read_text())
    assert timing["RestrictRealtime"] == ["no"] and "CPUAffinity" in timing


def test_unit_bounds_descriptors_tasks_and_memory() -> None:
    # A leak or a flood ends in a restart of this unit, not in the node's limits.
    unit = unit_settings(UNIT.read_text())
    from burstscope.collector.http import MAX_CONNECTIONS

    assert int(unit["LimitNOFILE"][0]) > 2 * MAX_CONNECTIONS
    assert int(unit["TasksMax"][0]) > MAX_CONNECTIONS
    assert unit["MemoryMax"] == ["1G"]


def test_example_config_records_in_pieces_of_five_seconds_with_retention() -> None:
    config = load_config(str(EXAMPLE))
    assert config.get("recording", "piece_seconds") == 5.0
    assert config.get("recording", "max_bytes") == 20 * 2**30
    assert config.get("listen", "address").startswith("127.0.0.1:")


def test_example_config_is_valid_and_documents_every_key() -> None:
    config = load_config(str(EXAMPLE))
    assert config.get("source", "interval") == 1_000_000
    text = EXAMPLE.read_text()
    tables = re.split(r"^\[(\w+)\]$", text, flags=re.MULTILINE)
    sections = dict(zip(tables[1::2], tables[2::2], strict=True))
    assert set(sections) == set(SCHEMA)
    for table, keys in SCHEMA.items():
        for key in keys:
            assert re.search(rf"^#? ?{key} = ", sections[table], re.MULTILINE), f"{table}.{key}"
