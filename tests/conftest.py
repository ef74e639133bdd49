"""Shared test helpers: the fixture tree, golden files, and skipping integration tests honestly."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
SYSFS = FIXTURES / "sys"
REQUIRE_INTEGRATION = os.environ.get("BURSTSCOPE_REQUIRE_INTEGRATION") == "1"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite golden files from the current output instead of comparing",
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden")) or (
        os.environ.get("BURSTSCOPE_UPDATE_GOLDEN") == "1"
    )


def compare_golden(path: Path, actual: str, update: bool) -> None:
    """Compare ``actual`` with the golden file whole; rewrite it under --update-golden."""
    if update:
        path.write_text(actual)
        return
    assert path.exists(), f"golden {path} missing: run pytest --update-golden"
    assert actual == path.read_text(), f"output differs from {path} (pytest --update-golden)"


def integration_unavailable(reason: str) -> None:
    """Skip with the reason, or fail when CI requires every integration test to run."""
    if REQUIRE_INTEGRATION:
        pytest.fail(f"integration test cannot run: {reason} (BURSTSCOPE_REQUIRE_INTEGRATION=1)")
    pytest.skip(reason)


def require_root() -> None:
    if os.geteuid() != 0:
        integration_unavailable("needs root")


def require_binary(name: str) -> str:
    found = shutil.which(name) or (
        f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None
    )
    if found is None:
        integration_unavailable(f"{name} is not installed (make test installs it as root)")
        raise AssertionError("unreachable")
    return found


@pytest.fixture
def sysfs_copy(tmp_path: Path) -> Path:
    """A writable copy of the fixture sysfs tree."""
    target = tmp_path / "sys"
    shutil.copytree(SYSFS, target)
    return target


# One Slurm cluster for the whole session, shared by every module that uses the "slurm"
# fixture (its own import of it would start a cluster per module). At the end: slurm_cluster
# imports the helpers above.
from tests.slurm_cluster import slurm_fixture as slurm_fixture  # noqa: E402
