"""Kubernetes pods in the running agent: a served kubelet's pods become jobs on /metrics.

The kubelet is the test server of tests/test_jobs_kubernetes.py (the published
``podresources/v1`` protocol from our ``.proto``, over a Unix socket: no kubelet runs here);
the node is the DGX-like fixture tree of tests/test_jobs_topology.py, whose NVIDIA procfs
names the GPUs' UUIDs and whose PCI tree puts GPU i beside mlx5_i. The agent is the real
in-process ``Agent`` with a ``[jobs]`` configuration, as a DaemonSet would run it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from burstscope.testing.emulated_node import running_agent, scrape
from burstscope.testing.processes import wait_until
from tests.test_jobs_kubernetes import Kubelet, pod
from tests.test_jobs_kubernetes import kubelet as kubelet
from tests.test_jobs_kubernetes import socket_path as socket_path
from tests.test_jobs_topology import DGX, uuid_of

SHARED = "rdma/hca_shared_devices_a"
SRIOV = "intel.com/sriov_mlx5"


@pytest.fixture
def agent_on_kubernetes(
    tmp_path: Path,
    socket_path: Path,
    kubelet: Kubelet,
) -> Iterator[tuple[Any, str, Kubelet]]:
    config = tmp_path / "agent.toml"
    config.write_text(
        "[jobs]\n"
        f'slurm_dir = "{tmp_path / "no-slurm"}"\n'
        f'kubelet_socket = "{socket_path}"\n'
        f'proc_root = "{DGX / "proc"}"\n'
        'storage_devices = ["mlx5_8"]\n'
        f'rdma_resources = {{ "{SHARED}" = ["mlx5_2"] }}\n'
    )
    with running_agent(DGX / "sys", "--config", str(config)) as (agent, url):
        yield agent, url, kubelet


def job_lines(url: str) -> list[str]:
    return sorted(line for line in scrape(url).splitlines() if line.startswith("burstscope_job_"))


def test_pods_holding_gpus_and_devices_are_jobs_on_their_ports(
    agent_on_kubernetes: tuple[Any, str, Kubelet],
) -> None:
    agent, url, kubelet = agent_on_kubernetes
    vf = (DGX / "sys" / "class" / "infiniband" / "mlx5_9" / "device").resolve().name
    kubelet.put(
        pod("ml", "trainer-0", ("nvidia.com/gpu", [uuid_of(DGX, 0), uuid_of(DGX, 1)])),
        pod("serve", "infer-0", (SRIOV, [vf]), (SHARED, ["r7"])),
    )
    assert wait_until(lambda: len(re.findall("job_info", "\n".join(job_lines(url)))) == 2)
    expected = [
        'burstscope_job_burst_bytes_total{job_id="ml/trainer-0"} 0.0',
        'burstscope_job_burst_bytes_total{job_id="serve/infer-0"} 0.0',
        'burstscope_job_hidden_saturated_seconds_total{job_id="ml/trainer-0"} 0.0',
        'burstscope_job_hidden_saturated_seconds_total{job_id="serve/infer-0"} 0.0',
        'burstscope_job_info{compute_ports="mlx5_0/1,mlx5_1/1",job_id="ml/trainer-0",name="",'
        'namespace="ml",pod="trainer-0",scheduler="kubernetes",user=""} 1.0',
        'burstscope_job_info{compute_ports="mlx5_2/1,mlx5_9/1",job_id="serve/infer-0",name="",'
        'namespace="serve",pod="infer-0",scheduler="kubernetes",user=""} 1.0',
        # GPU 0 and 1 sit beside mlx5_0 and mlx5_1; the storage NIC shares their NUMA node.
        'burstscope_job_port{device="mlx5_0",job_id="ml/trainer-0",port="1",role="compute",'
        'rule="pcie_switch"} 1.0',
        'burstscope_job_port{device="mlx5_1",job_id="ml/trainer-0",port="1",role="compute",'
        'rule="pcie_switch"} 1.0',
        'burstscope_job_port{device="mlx5_2",job_id="serve/infer-0",port="1",role="compute",'
        'rule="resource"} 1.0',
        'burstscope_job_port{device="mlx5_8",job_id="ml/trainer-0",port="1",role="storage",'
        'rule="numa_node"} 1.0',
        'burstscope_job_port{device="mlx5_9",job_id="serve/infer-0",port="1",role="compute",'
        'rule="device"} 1.0',
        'burstscope_job_saturated_seconds_total{job_id="ml/trainer-0"} 0.0',
        'burstscope_job_saturated_seconds_total{job_id="serve/infer-0"} 0.0',
    ]
    assert job_lines(url) == expected
    # The trainer's pod goes: its series go, the other job's stay.
    del kubelet.pods[("ml", "trainer-0")]
    assert wait_until(lambda: not any("ml/trainer-0" in line for line in job_lines(url)))
    assert job_lines(url) == [line for line in expected if "ml/trainer-0" not in line]
    assert agent.jobs is not None
