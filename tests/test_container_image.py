"""The agent's container image, built here and run as the DaemonSet runs it.

deploy/container/build.sh builds deploy/container/Dockerfile with buildah on a Debian
bookworm base that mmdebstrap makes from Debian's packages (no image registry is reachable
here), then podman runs it with the runc runtime (crun, and podman's default limits, are
refused on these VMs, so the limits are given) the way deploy/kubernetes/base/daemonset.yaml
does: read-only root file system, every capability dropped but CAP_SYS_NICE, no privilege
escalation, the host's network, and a node's /sys read-only: here the fixture tree of
tests/fixtures/hardware/sys. Its /metrics must be the in-process agent's golden exposition
of that tree, whole (tests/test_hardware.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from burstscope.testing.processes import AgentProcess, LoggedProcess, free_port
from tests.conftest import FIXTURES, compare_golden, require_binary, require_root
from tests.test_exposition import normalize
from tests.test_hardware import GOLDEN_READY

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "deploy" / "container" / "build.sh"
TREE = FIXTURES / "hardware" / "sys"
GOLDEN = FIXTURES / "hardware" / "exposition.golden.prom"
SIZE_LIMIT = 400_000_000  # bytes, the bound on the image

# runc as the runtime and limits given: crun and podman's default limits are refused on these
# VMs, and a limit above the one podman's monitor (conmon) runs under is refused too (it is
# 32768 processes here). A DaemonSet's pods take the container runtime's.
LIMITS = ("--runtime", "runc", "--ulimit", "nofile=8192:8192", "--ulimit", "nproc=8192:8192")


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check)


@pytest.fixture(scope="module")
def image() -> Iterator[tuple[str, int]]:
    require_root()
    for tool in ("podman", "buildah", "mmdebstrap", "runc"):
        require_binary(tool)
    tag = f"localhost/burstscope-test-{uuid.uuid4().hex[:8]}:test"
    # The wheels are built by this interpreter's pip: a Python 3.11, as bookworm's.
    built = subprocess.run(
        [str(BUILD), "--mmdebstrap", "--tag", tag],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    try:
        assert built.returncode == 0, built.stderr[-4000:]
        line = json.loads(built.stdout.strip().splitlines()[-1])
        assert line["image"] == tag
        yield tag, int(line["size_bytes"])
    finally:
        base = tag.split(":")[0] + "-base:bookworm"
        podman("rmi", "--force", tag, base, check=False)


class ContainerAgent(AgentProcess):
    """``burstscope agent`` in the image, under podman in the foreground (its stderr is the
    agent's; SIGTERM to podman reaches the agent through --sig-proxy)."""

    def __init__(self, tag: str, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.name = f"burstscope-test-{uuid.uuid4().hex[:8]}"
        self.run = LoggedProcess(
            [
                "podman",
                "run",
                "--rm",
                "--name",
                self.name,
                *LIMITS,
                "--network",
                "host",
                "--read-only",
                "--cap-drop",
                "all",
                "--cap-add",
                "SYS_NICE",
                "--security-opt",
                "no-new-privileges",
                "--volume",
                f"{TREE}:/host/sys:ro",
                tag,
                "agent",
                "--sysfs-root",
                "/host/sys",
                "--listen",
                f"127.0.0.1:{self.port}",
                *args,
            ],
            stdout=subprocess.DEVNULL,
        )


def test_the_image_is_under_400_mb_and_runs_the_agent_as_its_entry_point(
    image: tuple[str, int],
) -> None:
    tag, size = image
    assert 0 < size < SIZE_LIMIT, f"image is {size / 1e6:.0f} MB"
    config = json.loads(podman("image", "inspect", tag).stdout)[0]["Config"]
    assert config["Entrypoint"] == ["burstscope"] and config["Cmd"] == ["agent"]
    version = podman("run", "--rm", *LIMITS, tag, "--version")
    assert version.stdout.startswith("burstscope "), version


def test_the_image_serves_the_fixture_trees_counters_as_the_daemonset_runs_it(
    image: tuple[str, int], update_golden: bool
) -> None:
    agent = ContainerAgent(image[0])
    try:
        body = agent.scrape_when(*GOLDEN_READY)
        # The same exposition as the agent outside the image on the same tree.
        compare_golden(GOLDEN, normalize(body), update_golden)
        # What the pod's privileges give: SCHED_FIFO where the cgroup grants real-time runtime,
        # else one line saying it is the cgroup, not the capability, that refuses.
        if "burstscope_sampler_realtime 1.0" not in body:
            agent.run.wait_log("the process has CAP_SYS_NICE, so its cgroup is what refuses")
    finally:
        status = agent.stop()
    assert status == 0, agent.stderr


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--base", "debian:bookworm", "--mmdebstrap"], "--base or --mmdebstrap"),
        (["--tag"], "--tag needs a name"),
        (["--nonsense"], "unknown argument: --nonsense"),
    ],
)
def test_build_sh_refuses_bad_arguments_in_one_line_with_status_2(
    args: list[str], named: str
) -> None:
    """Refused before any builder is looked for, so this runs anywhere."""
    result = subprocess.run([str(BUILD), *args], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], result.stderr
