"""Which ports a job holds: the GPU inventory, gres.conf's index rule and the PCIe rules on the
fixture trees of tests/fixtures/jobs (make_trees.py), a golden of whole resolutions, bad inputs."""

from __future__ import annotations

import atexit
import importlib.util
import logging
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from burstscope.collector.discovery import discover
from burstscope.collector.jobs.gpus import (
    Gpu,
    Problems,
    expand_hostlist,
    normalize_pci_address,
    parse_gpu_information,
    parse_gres_conf,
    slurm_index,
)
from burstscope.collector.jobs.model import (
    KUBERNETES,
    RULE_DEVICE,
    RULE_NUMA_NODE,
    RULE_PCIE_SWITCH,
    RULE_RESOURCE,
    SLURM,
    STORAGE,
    Claim,
    Holding,
    Job,
)
from burstscope.collector.jobs.topology import PciPlace, Topology
from burstscope.collector.sources.base import PortSpec
from tests.conftest import FIXTURES, compare_golden

JOBS = FIXTURES / "jobs"


def _built_trees() -> Path:
    """make_trees.py's trees, built once per test process in a temporary folder. Not checked
    in: sysfs links form cycles (class/infiniband/D/device/infiniband/D/device/...), and every
    tool that walks the repository following links (setuptools' package finder during
    ``pip install -e``, pytest's collection) would loop in them."""
    spec = importlib.util.spec_from_file_location("make_trees", JOBS / "make_trees.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    root = Path(tempfile.mkdtemp(prefix="burstscope-jobs-trees-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    module.build(root)
    return root


TREES = _built_trees()
DGX = TREES / "dgx"
NUMA = TREES / "numa"
GOLDEN = JOBS / "resolution.golden.txt"
LOGGERS = ("burstscope.collector.jobs.topology", "burstscope.collector.jobs.gpus")


def ports_of(tree: Path) -> list[PortSpec]:
    """The ports discovery finds in a tree: what the agent hands the topology."""
    return [
        PortSpec(p.device, p.port, p.data_rate_bytes_per_second or 0)
        for p in discover(tree / "sys").ports
    ]


def topology(tree: Path, **options: Any) -> Topology:
    options.setdefault("storage_devices", ("mlx5_8",) if tree.name == "dgx" else ())
    options.setdefault("hostname", "dgx-02")
    return Topology(tree / "sys", tree / "proc", ports_of(tree), **options)


def claim(job_id: str, *gpus: str, **options: Any) -> Claim:
    return Claim(Job(job_id, SLURM, user="alice", name="train"), gpus=gpus, **options)


def uuid_of(tree: Path, minor: int) -> str:
    gpus = topology(tree).gpus
    return next(gpu.uuid for gpu in gpus if gpu.minor == minor)


@pytest.fixture
def warnings(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.INFO, logger="burstscope.collector.jobs"):
        yield caplog


def said(caplog: pytest.LogCaptureFixture, level: int = logging.WARNING) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level and r.name in LOGGERS]


def copy_tree(tree: Path, tmp_path: Path) -> Path:
    target = tmp_path / tree.name
    shutil.copytree(tree, target, symlinks=True)
    return target


# --- the small parsers, table-driven ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("00000000:3B:00.0", "0000:3b:00.0"),  # nvidia-smi, NVML
        ("3b:00.0", "0000:3b:00.0"),  # no domain
        (" 0001:c1:1f.7\n", "0001:c1:1f.7"),
        ("10000:00:00.0", "10000:00:00.0"),  # a 32-bit domain (VMD) keeps its digits
        ("0000:3b:00.8", None),  # functions are 0-7
        ("GPU-8f6f0000", None),
        ("3", None),
        ("", None),
    ],
)
def test_normalize_pci_address(text: str, expected: str | None) -> None:
    assert normalize_pci_address(text) == expected


INFORMATION = (
    "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 200\nGPU UUID: \t GPU-0a1b2c3d-0000-1111-2222-"
    "333344445555\nVideo BIOS: \t 96.00.99.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
    "DMA Mask: \t 0xfffffffffffff\nBus Location: \t 0000:1B:00.0\nDevice Minor: \t 3\n"
    "GPU Firmware: \t 550.54.15\nGPU Excluded:\t No\n"
)


@pytest.mark.parametrize(
    ("text", "directory", "expected"),
    [
        (
            INFORMATION,
            "0000:1b:00.0",
            Gpu(
                3,
                "0000:1b:00.0",
                "GPU-0a1b2c3d-0000-1111-2222-333344445555",
                "NVIDIA H100 80GB HBM3",
            ),
        ),
        # rm_get_gpu_uuid failed: no UUID line. No Bus Location: the directory's name.
        (
            "Model: \t\t Tesla T4\nDevice Minor: \t 0\n",
            "0000:af:00.0",
            Gpu(0, "0000:af:00.0", "", "Tesla T4"),
        ),
        ("Device Minor: \t 7\nwhat is this\n::::\n", "0000:af:00.0", Gpu(7, "0000:af:00.0")),
        ("Model: \t\t Tesla T4\n", "0000:af:00.0", "no 'Device Minor:' line"),
        ("Device Minor: \t seven\n", "0000:af:00.0", "'Device Minor:' reads 'seven', not a number"),
        ("Device Minor: \t 1\n", "not-an-address", "neither 'Bus Location:' nor the directory"),
        ("\x00\x01garbage\n", "0000:af:00.0", "no 'Device Minor:' line"),
    ],
)
def test_parse_gpu_information(text: str, directory: str, expected: Gpu | str) -> None:
    if isinstance(expected, Gpu):
        assert parse_gpu_information(text, directory) == expected
    else:
        with pytest.raises(ValueError, match=expected.replace("(", r"\(").replace(")", r"\)")):
            parse_gpu_information(text, directory)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/dev/nvidia[0-3]", ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3"]),
        ("/dev/nvidia[0,2-3]", ["/dev/nvidia0", "/dev/nvidia2", "/dev/nvidia3"]),
        ("dgx-[01-03]", ["dgx-01", "dgx-02", "dgx-03"]),
        ("tux3", ["tux3"]),
        ("a[1-2]b[0-1],c", ["a1b0", "a1b1", "a2b0", "a2b1", "c"]),
        ("node[8-11]", ["node8", "node9", "node10", "node11"]),
        ("gpu-[098-101]", ["gpu-098", "gpu-099", "gpu-100", "gpu-101"]),
        ("x,y", ["x", "y"]),
    ],
)
def test_expand_hostlist(text: str, expected: list[str]) -> None:
    assert expand_hostlist(text) == expected


@pytest.mark.parametrize("text", ["node[1-2", "node1-2]", "node[a-b]", "node[[1]]", "node[1-]"])
def test_expand_hostlist_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        expand_hostlist(text)


# Four GPUs, minor numbers not in PCI order (as in the numa tree).
FOUR = (
    Gpu(0, "0000:03:00.0"),
    Gpu(1, "0000:01:00.0"),
    Gpu(2, "0000:81:00.0"),
    Gpu(3, "0000:83:00.0"),
)


@pytest.mark.parametrize(
    ("gres", "by_index"),
    [
        (None, [0, 1, 2, 3]),
        ("Name=gpu File=/dev/nvidia[0-3]", [0, 1, 2, 3]),
        ("Name=gpu File=/dev/nvidia[2-3]\nName=gpu File=/dev/nvidia[0-1]", [2, 3, 0, 1]),
        (
            "NodeName=n[1-4] Name=gpu File=/dev/nvidia3\nNodeName=n2 Name=gpu File=/dev/nvidia0",
            [3, 0, None],
        ),
        ("NodeName=other Name=gpu File=/dev/nvidia[2-3]", [0, 1, 2, 3]),  # not this node: minor i
        ("Name=mps Count=100 File=/dev/nvidia0\nName=gpu File=/dev/nvidia1", [1, None]),
        ("AutoDetect=nvml\nName=gpu File=/dev/nvidia[0-3]", [1, 0, 2, 3]),  # PCI bus order
        ("NodeName=n2 AutoDetect=nvml", [1, 0, 2, 3]),
        (
            "AutoDetect=nvml\nNodeName=n2 AutoDetect=off Name=gpu File=/dev/nvidia[3,2]",
            [3, 2, None],
        ),
        ("NAME=gpu FILE=/dev/nvidia1 # comment\n# Name=gpu File=/dev/nvidia0", [1, None]),
        ("Name=gpu MultipleFiles=/dev/nvidia2,/dev/nvidia-caps/nvidia-cap21", [2, None]),
        ("Name=gpu File=/dev/dri/renderD128", [None]),
    ],
)
def test_slurm_index(gres: str | None, by_index: list[int | None]) -> None:
    problems = Problems(logging.getLogger("test"))
    lines = None if gres is None else parse_gres_conf(gres, problems, "gres.conf")
    rule = slurm_index(lines, "n2", FOUR, "gres.conf")
    assert [rule.minor_of(i) for i in range(len(by_index))] == by_index
    assert not problems.counts


def test_shared_depth() -> None:
    gpu = PciPlace("0000:15:00.0", "pci0000:10", ("a", "b", "c", "d"), 0)
    assert gpu.shared_depth(PciPlace("x", "pci0000:10", ("a", "b", "c", "e"), 0)) == 3  # PIX
    assert gpu.shared_depth(PciPlace("x", "pci0000:10", ("a", "b", "f", "g"), 0)) == 2  # PXB
    assert gpu.shared_depth(PciPlace("x", "pci0000:10", ("h",), 0)) == 0  # PHB: another port
    assert gpu.shared_depth(PciPlace("x", "pci0000:30", ("a", "b"), 0)) == 0  # another host


# --- the fixture trees ------------------------------------------------------------------------


def test_discovery_finds_every_port_of_the_trees() -> None:
    assert [(p.device, p.port) for p in ports_of(DGX)] == [(f"mlx5_{i}", 1) for i in range(10)]
    assert [(p.device, p.port) for p in ports_of(NUMA)] == [(f"mlx5_{i}", 1) for i in range(5)]


def test_rails_of_the_dgx_tree_are_the_nearest_nic(warnings: pytest.LogCaptureFixture) -> None:
    """GPU i reaches mlx5_i through one switch and mlx5_(i^1) through two: NCCL's PIX wins;
    the VF beside mlx5_0 and the storage NIC are nobody's rail."""
    found = topology(DGX)
    assert {gpu.minor: found.rails(gpu) for gpu in found.gpus} == {
        i: ((f"mlx5_{i}", RULE_PCIE_SWITCH),) for i in range(8)
    }
    assert said(warnings, logging.INFO) == [
        "jobs: no gres.conf: Slurm GPU index i is /dev/nvidia<i> (minor i)"
    ]
    assert said(warnings) == []


def _render(title: str, claims: list[Claim], jobs: list[Job], holdings: list[Holding]) -> str:
    lines = [f"== {title}"]
    for one in claims:
        named = [f"gpus={','.join(one.gpus)}"] if one.gpus else []
        named += [f"device={name} ({rule})" for name, rule in one.devices]
        named += ["whole_node"] if one.whole_node else []
        lines.append(f"claim {one.job.job_id}: {' '.join(named) or '(names nothing)'}")
    lines.append("jobs: " + " ".join(job.job_id for job in jobs))
    lines += [f"  {h.job_id} {h.device} {h.port} {h.role} {h.rule}" for h in holdings]
    return "\n".join(lines) + "\n"


def test_resolution_golden(update_golden: bool) -> None:
    """Several claims on both trees, each resolution compared whole."""
    dgx = topology(DGX)
    reordered = topology(DGX, gres_conf=DGX / "gres-reordered.conf")
    numa = topology(NUMA)
    autodetect = topology(NUMA, gres_conf=NUMA / "gres-autodetect.conf")
    vf = Claim(
        Job("pods/infer-0", KUBERNETES, namespace="pods", pod="infer-0"),
        devices=(("0000:16:00.1", RULE_DEVICE),),
    )
    cases: list[tuple[str, Topology, list[Claim]]] = [
        (
            "dgx: a job that says whole node, one that names nothing",
            dgx,
            [claim("101", whole_node=True), claim("102")],
        ),
        (
            "dgx: two jobs share the node, four GPUs each",
            dgx,
            [claim("201", "0", "1", "2", "3"), claim("202", "4", "5", "6", "7")],
        ),
        ("dgx: every GPU by index is the whole node", dgx, [claim("203", *map(str, range(8)))]),
        (
            "dgx: a job by UUID, one by PCI address as nvidia-smi prints it",
            dgx,
            [claim("301", uuid_of(DGX, 5)), claim("302", "00000000:C9:00.0")],
        ),
        (
            "dgx: gres.conf lists socket 1 first, so index 0 is /dev/nvidia4",
            reordered,
            [claim("401", "0", "1")],
        ),
        (
            "dgx: an SR-IOV VF by PCI address, a shared RDMA resource by device name",
            dgx,
            [
                vf,
                Claim(
                    Job("pods/train-0", KUBERNETES),
                    gpus=(uuid_of(DGX, 2),),
                    devices=(("mlx5_2", RULE_RESOURCE), ("mlx5_3", RULE_RESOURCE)),
                ),
            ],
        ),
        (
            "numa: no shared switch, the NUMA node decides (mlx5_4 has none)",
            numa,
            [claim("601", "0"), claim("602", "1", "2")],
        ),
        (
            "numa: AutoDetect=nvml, index 0 is the first GPU by PCI bus (minor 1)",
            autodetect,
            [claim("701", "0")],
        ),
    ]
    rendered = "".join(
        _render(title, claims, *found.resolve(claims)) for title, found, claims in cases
    )
    compare_golden(GOLDEN, rendered, update_golden)


def test_storage_goes_with_the_gpus_of_its_numa_node() -> None:
    jobs, holdings = topology(DGX).resolve([claim("1", "3"), claim("2", "4")])
    assert [job.job_id for job in jobs] == ["1", "2"]
    assert holdings == [
        Holding("1", "mlx5_3", 1, "compute", RULE_PCIE_SWITCH),
        Holding("1", "mlx5_8", 1, STORAGE, RULE_NUMA_NODE),
        Holding("2", "mlx5_4", 1, "compute", RULE_PCIE_SWITCH),
    ]


def test_the_strongest_rule_is_the_one_reported() -> None:
    """A port given by a GPU's switch and by name is one row, with the device rule."""
    _, holdings = topology(DGX).resolve([claim("1", "0", devices=(("mlx5_0", RULE_DEVICE),))])
    assert holdings[0] == Holding("1", "mlx5_0", 1, "compute", RULE_DEVICE)
    assert [h.device for h in holdings] == ["mlx5_0", "mlx5_8"]


def test_a_job_from_two_sources_is_listed_once() -> None:
    jobs, holdings = topology(DGX).resolve([claim("1", "0"), claim("1", "1")])
    assert [job.job_id for job in jobs] == ["1"]
    assert [h.device for h in holdings] == ["mlx5_0", "mlx5_1", "mlx5_8"]


# --- bad inputs: one log line each, counted, never a crash ------------------------------------


def test_unknown_gpu_is_listed_and_holds_nothing(warnings: pytest.LogCaptureFixture) -> None:
    found = topology(DGX)
    claims = [claim("9", "1", "GPU-00000000-dead-beef-0000-000000000000", "12")]
    for _ in range(3):  # the watcher resolves again whenever any claim changes
        jobs, holdings = found.resolve(claims)
        assert [job.job_id for job in jobs] == ["9"]
        assert [h.device for h in holdings] == ["mlx5_1", "mlx5_8"]
    rule = "no gres.conf: Slurm GPU index i is /dev/nvidia<i> (minor i)"
    assert said(warnings) == [
        "jobs: job 9 names GPU 'GPU-00000000-dead-beef-0000-000000000000', which is not on this "
        f"node (8 GPUs; {rule}): the job is listed, that GPU holds no port",
        f"jobs: job 9 names GPU '12', which is not on this node (8 GPUs; {rule}): the job is "
        "listed, that GPU holds no port",
    ]
    assert found.problems.counts == {"unknown_gpu": 2}


def test_unknown_device_is_one_line(warnings: pytest.LogCaptureFixture) -> None:
    found = topology(DGX)
    for _ in range(2):
        _, holdings = found.resolve([claim("9", devices=(("mlx5_77", RULE_DEVICE),))])
        assert holdings == []
    assert said(warnings) == [
        "jobs: job 9 names RDMA device 'mlx5_77', which has no sampled port here: it holds "
        "nothing by it"
    ]
    assert found.problems.counts == {"unknown_device": 1}


def test_missing_information_file(tmp_path: Path, warnings: pytest.LogCaptureFixture) -> None:
    tree = copy_tree(DGX, tmp_path)
    information = tree / "proc/driver/nvidia/gpus/0000:45:00.0/information"
    information.unlink()
    found = topology(tree)
    assert [gpu.minor for gpu in found.gpus] == [0, 1, 3, 4, 5, 6, 7]
    assert said(warnings) == [f"jobs: {information}: No such file or directory; GPU skipped"]
    # Seven GPUs named are not the whole node: the job holds the rails of those it has.
    _, holdings = found.resolve([claim("1", "0", "1", "3")])
    assert [h.device for h in holdings] == ["mlx5_0", "mlx5_1", "mlx5_3", "mlx5_8"]
    assert found.problems.counts == {"gpu_information": 1}


def test_garbage_information_file(tmp_path: Path, warnings: pytest.LogCaptureFixture) -> None:
    tree = copy_tree(DGX, tmp_path)
    information = tree / "proc/driver/nvidia/gpus/0000:45:00.0/information"
    information.write_bytes(b"\xff\xfe garbage\nno colon here\nDevice Minor: two\n")
    found = topology(tree)
    found.refresh()  # read again: still one line
    assert len(found.gpus) == 7
    assert said(warnings) == [
        f"jobs: {information}: 'Device Minor:' reads 'two', not a number; GPU skipped"
    ]
    assert found.problems.counts == {"gpu_information": 1}


def test_dangling_nic_link(tmp_path: Path, warnings: pytest.LogCaptureFixture) -> None:
    """mlx5_3's device link leads nowhere: whole-node jobs still hold it, GPU 3 falls back to
    the NIC one switch further (PXB), and the log says so once."""
    tree = copy_tree(DGX, tmp_path)
    device = tree / "sys/class/infiniband/mlx5_3/device"
    device.unlink()
    device.symlink_to("../../../0000:99:99.9")
    found = topology(tree)
    assert [h.device for h in found.resolve([claim("1", "3")])[1]] == ["mlx5_2", "mlx5_8"]
    assert "mlx5_3" in [h.device for h in found.resolve([claim("2")])[1]]
    [line] = said(warnings)
    assert line.startswith(f"jobs: mlx5_3: {device} is a dangling link (to ")
    assert line.endswith("; only whole-node jobs and claims naming it hold its ports")
    assert found.problems.counts == {"sysfs": 1}


def test_dangling_gpu_link(tmp_path: Path, warnings: pytest.LogCaptureFixture) -> None:
    tree = copy_tree(DGX, tmp_path)
    gpu = tree / "sys/bus/pci/devices/0000:15:00.0"
    gpu.unlink()
    gpu.symlink_to("../../../devices/pci0000:10/gone")
    found = topology(tree)
    assert [h.device for h in found.resolve([claim("1", "0")])[1]] == []
    [line] = said(warnings)
    assert line.startswith(f"jobs: GPU 0000:15:00.0 (minor 0): {gpu} is a dangling link")
    assert line.endswith("; it holds no NIC")


def test_bad_gres_conf(tmp_path: Path, warnings: pytest.LogCaptureFixture) -> None:
    gres = tmp_path / "gres.conf"
    gres.write_text(
        "this is not gres\nName=gpu File=/dev/nvidia[3-\nName=gpu File=/dev/nvidia[7,6]\n"
    )
    found = topology(DGX, gres_conf=gres)
    assert [found.slurm_index.minor_of(i) for i in range(3)] == [7, 6, None]
    assert said(warnings) == [
        f"jobs: {gres}:1: not Key=Value pairs; line skipped",
        f"jobs: {gres}:2: unbalanced brackets in '/dev/nvidia[3-'; line skipped",
    ]
    missing = topology(DGX, gres_conf=tmp_path / "absent.conf")
    assert missing.slurm_index.minor_of(5) == 5
    assert said(warnings)[-1] == (
        f"jobs: gres.conf {tmp_path / 'absent.conf'}: No such file or directory; Slurm GPU "
        "index i taken as minor i"
    )


def test_storage_device_without_a_port(warnings: pytest.LogCaptureFixture) -> None:
    topology(NUMA, storage_devices=("mlx5_8",))
    assert said(warnings) == ["jobs: storage device mlx5_8 is configured but has no sampled port"]


def test_no_driver_then_the_driver_loads(
    tmp_path: Path, warnings: pytest.LogCaptureFixture
) -> None:
    """Without the NVIDIA procfs (driver not loaded yet) GPU jobs hold nothing; the first claim
    naming a GPU not found reads the inventory again, and finds it once the driver is there."""
    tree = copy_tree(DGX, tmp_path)
    shutil.move(tree / "proc", tmp_path / "later")
    found = topology(tree)
    assert found.gpus == ()
    assert [h.device for h in found.resolve([claim("1", "2")])[1]] == []
    shutil.move(tmp_path / "later", tree / "proc")
    assert [h.device for h in found.resolve([claim("2", "2")])[1]] == ["mlx5_2", "mlx5_8"]
    gpus = tree / "proc/driver/nvidia/gpus"
    assert said(warnings, logging.INFO) == [
        f"jobs: no NVIDIA GPU inventory at {gpus} (No such file or directory): jobs that name "
        "GPUs hold no port here",
        "jobs: no gres.conf: Slurm GPU index i is /dev/nvidia<i> (minor i)",
    ]
    assert found.problems.counts == {"unknown_gpu": 1}
