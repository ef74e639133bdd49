"""Settings decided once: whether ethtool is read, the demo's settings, the version."""

from __future__ import annotations

import ast
import importlib.metadata
import subprocess
import sys
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

import burstscope
from burstscope.agent import AgentSettings, settings_from_args
from burstscope.arguments import source_from_args
from burstscope.cli import build_parser
from burstscope.collector.simulation.profiles import DEFAULT_PROFILE
from burstscope.collector.sources.base import CounterSource
from burstscope.commands.demo import demo_settings
from tests.conftest import SYSFS

REPOSITORY = Path(__file__).resolve().parents[1]

FIXTURE = ["--source", "sysfs", "--sysfs-root", str(SYSFS)]
# netdev:lo over the running kernel's own /sys: ethtool asks that same kernel.
LOOPBACK = ["--source", "netdev:lo"]
SIM = f"sim:{DEFAULT_PROFILE}"  # the demo's source by default


def source_of(command: str, arguments: list[str]) -> CounterSource:
    """The source ``command`` would sample, built by the code that command runs."""
    extra = ["-o", "unused"] if command == "record" else []
    args = build_parser(command).parse_args([command, *arguments, *extra])
    if command == "record":
        return source_from_args(args)
    return settings_from_args(args).source


def reads_ethtool(source: CounterSource) -> bool:
    return any(slow.name.startswith("ethtool:") for slow in source.slow_sources())


@pytest.mark.parametrize("command", ["agent", "top", "record"])
@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (FIXTURE, False),  # a fixture tree: the running kernel's netdevs are not its own
        ([*FIXTURE, "--ethtool"], True),
        (LOOPBACK, True),
        ([*LOOPBACK, "--no-ethtool"], False),
    ],
)
def test_every_command_decides_ethtool_the_same_way(
    command: str, arguments: list[str], expected: bool
) -> None:
    assert reads_ethtool(source_of(command, arguments)) is expected


@pytest.mark.parametrize("command", ["agent", "top"])
@pytest.mark.parametrize(
    ("source", "flags", "expected"),
    [
        # Each the other way from what the sysfs root alone would decide.
        (f'spec = "sysfs"\nsysfs_root = "{SYSFS}"\nethtool = true', [], True),
        ('spec = "netdev:lo"\nethtool = false', [], False),
        (f'spec = "sysfs"\nsysfs_root = "{SYSFS}"\nethtool = true', ["--no-ethtool"], False),
    ],
)
def test_the_configuration_file_decides_ethtool_under_the_flag(
    tmp_path: Path, command: str, source: str, flags: list[str], expected: bool
) -> None:
    config = tmp_path / "agent.toml"
    config.write_text(f"[source]\n{source}\n")
    assert reads_ethtool(source_of(command, ["--config", str(config), *flags])) is expected


def test_no_runtime_module_of_collector_parses_a_command_line() -> None:
    """argparse belongs to burstscope/: collector/ holds settings and their validation."""
    # The test tools' own command lines (traffic generator, veth testbed) are the exception.
    tools = {"rocegen.py", "testbed.py"}
    parsing = set()
    for path in (REPOSITORY / "collector").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            if "argparse" in names:
                parsing.add(str(path.relative_to(REPOSITORY)))
    assert {name for name in parsing if Path(name).name not in tools} == set()


def without_source(settings: AgentSettings) -> tuple[AgentSettings, tuple[object, ...]]:
    """The settings with the source apart, as what identifies it (a SimSource also holds
    the monotonic time it was built at)."""
    source = settings.source
    described = (type(source), source.name, source.ports, getattr(source, "seed", None))
    return replace(settings, source=None), described  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("demo", "agent"),
    [
        ([], ["--source", SIM]),
        (
            ["--profile", "moe", "--seed", "3", "--listen", "127.0.0.1:19999"],
            ["--source", "sim:moe:3", "--listen", "127.0.0.1:19999"],
        ),
        (
            ["--mqtt", "mqtt://me@broker:1884", "--mqtt-spool-dir", "/tmp/spool"],
            ["--source", SIM, "--mqtt", "mqtt://me@broker:1884", "--mqtt-spool-dir", "/tmp/spool"],
        ),
    ],
)
def test_the_demo_runs_with_the_agents_settings(demo: list[str], agent: list[str]) -> None:
    """What the demo changes on purpose: --profile and --seed name the agent's sim source,
    and there is no --config. Everything else is the agent builder's, defaults included."""
    ours = demo_settings(build_parser("demo").parse_args(["demo", *demo]))
    theirs = settings_from_args(build_parser("agent").parse_args(["agent", *agent]))
    assert without_source(ours) == without_source(theirs)


def test_the_version_is_written_once_and_read_from_the_package_metadata() -> None:
    written = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]["version"]
    assert burstscope.__version__ == importlib.metadata.version("burstscope") == written
    printed = subprocess.run(
        [sys.executable, "-m", "burstscope", "--version"], capture_output=True, text=True
    )
    assert (printed.returncode, printed.stdout) == (0, f"burstscope {written}\n")
    # What exports it (burstscope_info, the MQTT status) takes burstscope.__version__.
    spelled = {
        str(path.relative_to(REPOSITORY))
        for folder in ("burstscope", "collector", "detectors", "dashboards", "bench")
        for path in (REPOSITORY / folder).rglob("*.py")
        if f'"{written}"' in path.read_text()
    }
    assert spelled == set()


def test_without_package_metadata_the_version_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    cached = vars(burstscope).pop("__version__", None)
    try:
        assert burstscope.__version__ == burstscope.UNKNOWN_VERSION == "0+unknown"
    finally:
        vars(burstscope).pop("__version__", None)
        if cached is not None:
            vars(burstscope)["__version__"] = cached


def test_help_does_not_read_the_package_metadata() -> None:
    probe = (
        "import sys\nfrom burstscope.cli import main\n"
        "try:\n    main(['-h'])\nexcept SystemExit:\n    pass\n"
        "print('importlib.metadata' in sys.modules, file=sys.stderr)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.stderr.strip().splitlines()[-1] == "False", result.stderr
