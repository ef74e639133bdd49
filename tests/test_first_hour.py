"""A new user's first hour: the README agrees with --help, hints work as printed, files install."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from burstscope.cli import COMMANDS, build_parser
from burstscope.commands.install_files import DEFAULT_PREFIX
from tests.test_cli_core import assert_usage_error, burstscope

REPO = Path(__file__).resolve().parents[1]
SHIPPED = ("dashboards", "systemd")


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (action,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def readme_commands() -> dict[str, str]:
    """The README's command table: each row's command name and its synopsis."""
    rows = re.findall(r"^\| `burstscope ([a-z-]+)(.*?)` \|", (REPO / "README.md").read_text(), re.M)
    return {name: synopsis.replace("\\|", "|") for name, synopsis in rows}


def test_readme_lists_every_command_and_nothing_else() -> None:
    assert sorted(readme_commands()) == sorted(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_readme_synopsis_matches_the_parser(name: str) -> None:
    """Every flag the README shows exists; shown bare it is required, in [...] optional."""
    synopsis = readme_commands()[name]
    options = {
        option: action
        for action in subcommands()[name]._actions
        for option in action.option_strings
    }
    depth = 0  # inside [...] or (...): optional, or one of alternatives
    for token in re.findall(r"[\[\]()]|--?[a-z][a-z-]*", synopsis):
        if token in "[(":
            depth += 1
        elif token in "])":
            depth -= 1
        else:
            assert token in options, f"README shows {name} {token}, which --help does not know"
            if depth == 0:
                assert options[token].required, f"README shows {name} {token} as required"
            else:
                assert not options[token].required, f"{name} {token} is required, README: [...]"


def test_a_mistyped_flag_shows_the_commands_usage() -> None:
    result = burstscope("record", "--duraton", "3", "-o", "x")
    assert result.returncode == 2
    assert result.stderr.startswith("usage: burstscope record ")
    assert "burstscope record: error: unrecognized arguments: --duraton 3" in result.stderr


def test_version_and_help_load_no_command() -> None:
    probe = (
        "import sys; from burstscope.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('numpy', 'pyarrow', 'rich', 'prometheus_client') if m in sys.modules]"
        "\nloaded = [m for m in sys.modules if m.startswith('burstscope.commands.')]\n"
        "print(heavy, loaded, file=sys.stderr)"
    )
    for flag in ("--version", "--help"):
        result = subprocess.run(
            [sys.executable, "-c", probe, flag], capture_output=True, text=True, check=False
        )
        assert result.stderr.strip().splitlines()[-1] == "[] []", result.stderr
    result = burstscope("--version")
    assert result.returncode == 0 and result.stdout.startswith("burstscope ")


def test_install_files_writes_what_the_repository_has(tmp_path: Path) -> None:
    tracked = subprocess.run(
        ["git", "ls-files", *SHIPPED], capture_output=True, text=True, cwd=REPO, check=True
    ).stdout.split()
    expected = sorted(path for path in tracked if not path.endswith(".py"))
    prefix = tmp_path / "share"
    result = burstscope("install-files", "--prefix", str(prefix))
    assert result.returncode == 0, result.stderr
    written = sorted(str(p.relative_to(prefix)) for p in prefix.rglob("*") if p.is_file())
    assert written == expected
    for path in expected:
        assert (prefix / path).read_bytes() == (REPO / path).read_bytes()
    # Nothing is overwritten by surprise.
    assert_usage_error(
        burstscope("install-files", "--prefix", str(prefix)), "exists", "pass --force"
    )
    assert burstscope("install-files", "--prefix", str(prefix), "--force").returncode == 0
    assert_usage_error(burstscope("install-files", "--prefix", "/proc/bs"), "cannot write")


def test_the_unit_documents_where_install_files_writes() -> None:
    unit = (REPO / "systemd/burstscope-agent.service").read_text()
    assert f"Documentation=file://{DEFAULT_PREFIX}/systemd/README.md" in unit


def test_the_wheel_carries_the_files_and_the_license(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    assert "deprecated" not in built.stderr.lower(), built.stderr
    (wheel,) = tmp_path.glob("burstscope-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for part in SHIPPED:
        assert any(n.startswith(f"burstscope/data-files/{part}/") for n in names), part
    assert "burstscope/data-files/systemd/burstscope-agent.service" in names
    # The dashboards' generator and checks build the data; they are not shipped.
    assert [n for n in names if n.startswith("burstscope/data-files/") and n.endswith(".py")] == []
    for package in ("capture", "testing"):  # a link and a folder, both installed
        assert f"burstscope/{package}/__init__.py" in names, package
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    assert "License-Expression: Apache-2.0" in zipfile.ZipFile(wheel).read(metadata).decode()


def test_a_closed_pipe_ends_quietly() -> None:
    """`burstscope top | head -1`: no BrokenPipeError traceback when the reader goes."""
    process = subprocess.Popen(
        [sys.executable, "-m", "burstscope", "top", "--source", "sim:moe", "--every", "0.1",
         "--duration", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None and process.stdout.readline()
    process.stdout.close()  # the reader is gone; the next lines hit EPIPE
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1
    assert b"Traceback" not in stderr and b"BrokenPipe" not in stderr, stderr
