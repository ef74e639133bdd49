"""The wheel installs one top-level name, and the installed wheel runs the demo on its own."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from burstscope.testing.processes import free_port

REPOSITORY = Path(__file__).resolve().parent.parent


def _checkout_copy(into: Path) -> Path:
    """The files git would commit, links kept as links: setuptools builds in the source tree
    (build/), and a stale build/lib there would put removed modules back into the wheel."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPOSITORY,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPOSITORY / name
        if not source.is_symlink() and not source.exists():
            continue  # deleted in the work tree, not yet in the index
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
    return into


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel pip builds from a copy of this checkout (no build isolation: setuptools comes
    with the test extra, so nothing is fetched)."""
    source = _checkout_copy(tmp_path_factory.mktemp("source"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"),
            *("--no-build-isolation", "--disable-pip-version-check", "-w", str(out)),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("burstscope-*.whl")
    return built


def test_the_wheel_installs_burstscope_alone(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (top_level,) = (name for name in names if name.endswith(".dist-info/top_level.txt"))
        assert archive.read(top_level).decode().split() == ["burstscope"]
    tops = {name.split("/", 1)[0] for name in names}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"burstscope"}
    assert "burstscope/collector/pipeline.py" in names
    assert "burstscope/detectors/analyzer.py" in names


def test_the_wheel_ships_the_dashboards_data_without_their_scripts(wheel: Path) -> None:
    """dashboards/generate.py and friends build the JSON; the wheel carries the JSON only
    ([tool.setuptools.exclude-package-data] alone did not keep them out: found as a
    namespace package, data-files/dashboards shipped its .py files as modules)."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    shipped = [n for n in names if n.startswith("burstscope/data-files/")]
    assert "burstscope/data-files/dashboards/grafana/fleet-overview.json" in shipped
    assert "burstscope/data-files/systemd/agent.toml.example" in shipped
    assert [n for n in shipped if n.endswith((".py", ".pyc"))] == []


def test_the_installed_wheel_runs_the_demo(wheel: Path, tmp_path: Path) -> None:
    """A fresh virtual environment holding the unpacked wheel (what pip install writes, less
    the console script) and, as a plain path, this environment's dependencies: not the
    editable install, whose .pth files a plain path does not run."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(purelib)
    Path(purelib, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    where = subprocess.run(
        [str(python), "-c", "import burstscope.collector.pipeline as p; print(p.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout
    assert where.startswith(purelib), where
    lone = subprocess.run(
        [str(python), "-c", "import collector"], capture_output=True, text=True, cwd=tmp_path
    )
    assert "No module named 'collector'" in lone.stderr
    demo = subprocess.run(
        [
            *(str(python), "-m", "burstscope", "demo", "--duration", "3"),
            *("--listen", f"127.0.0.1:{free_port()}", "-o", str(tmp_path / "run")),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert demo.returncode == 0, demo.stderr
    assert "1-ms peak" in demo.stdout
