"""Which ports a job holds: claims mapped through the node's PCIe topology to ``Holding`` rows.

A claim (whole node, GPUs, RDMA devices) becomes one row per held port, saying which rule
decided. The rules, strongest first (a port given twice keeps the strongest):

- ``RULE_WHOLE_NODE``: a claim that says so, names neither GPUs nor devices, or names every GPU
  of the node holds every sampled port; storage ports with role STORAGE.
- ``RULE_DEVICE`` / ``RULE_RESOURCE``: a device the claim names (``mlx5_3``, or an SR-IOV
  virtual function's PCI address, ``<sysfs>/bus/pci/devices/<addr>/infiniband/<dev>``) gives
  that device's ports, with the rule the source gave.
- ``RULE_PCIE_SWITCH``: a GPU's rails are the compute NICs that share a PCIe switch with it,
  the nearest first. NCCL ranks a GPU's path to a NIC as PIX (at most one PCIe bridge), PXB
  (several bridges, not through the host bridge), PHB (through the host bridge, the CPU) or SYS
  (across the NUMA interconnect) (NVIDIA/nccl ``src/include/graph.h`` PATH_*; the paths are
  computed in ``src/graph/paths.cc`` ncclTopoComputePaths) and uses the NICs of the best path
  type (``src/graph/topo.cc`` ncclTopoGetLocal). Here PIX/PXB is a PCI bridge both devices sit
  below, under the same host bridge: the NICs below the deepest such bridge win, so a NIC behind
  the GPU's own switch beats one reached through the switch above it. (A root port has one
  link: two devices below one root port are behind a switch.)
- ``RULE_NUMA_NODE``: a GPU with no NIC under a shared switch (PHB or NODE in ``nvidia-smi topo
  -m``'s words) gets the compute NICs on its NUMA node (``<pci device>/numa_node``; -1, no NUMA
  information, matches nothing).
- Storage devices (configuration: Acme's fifth NIC) are never a GPU's rail; on a shared node
  a storage NIC goes, role STORAGE, to the jobs whose GPUs share its switch (the nearest), else
  to those whose GPUs are on its NUMA node.
- An SR-IOV virtual function (``physfn`` link, drivers/pci/iov.c) is never a GPU's rail by
  place: a device plugin hands it to one pod, which names it in its claim, and its PF's port
  counts the physical link.

A GPU the claim names but this node does not have (an unknown index, UUID or address): the job
is still listed, that GPU holds no port, and the log says so once per job and name (after one
re-read of the inventory, in case the driver loaded after the agent). A port no job holds
belongs to none.

The sysfs and procfs walk happens at construction and on ``refresh()``; ``resolve`` (run by the
watcher whenever the claims change) only looks up what was read. sysfs layout: Documentation/
ABI/testing/sysfs-bus-pci (``numa_node``) and sysfs-class-infiniband (``device``) in the kernel.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from burstscope.collector.jobs.gpus import (
    Gpu,
    Problems,
    SlurmIndex,
    normalize_pci_address,
    read_gpus,
    read_slurm_index,
)
from burstscope.collector.jobs.model import (
    COMPUTE,
    RULE_DEVICE,
    RULE_NUMA_NODE,
    RULE_PCIE_SWITCH,
    RULE_RESOURCE,
    RULE_WHOLE_NODE,
    STORAGE,
    Claim,
    Holding,
    Job,
)
from burstscope.collector.sources.base import PortSpec

_LOG = logging.getLogger(__name__)

# The strongest rule that gives a job a port is the one reported.
_RULE_STRENGTH = {
    RULE_WHOLE_NODE: 0,
    RULE_DEVICE: 1,
    RULE_RESOURCE: 2,
    RULE_PCIE_SWITCH: 3,
    RULE_NUMA_NODE: 4,
}


@dataclass(frozen=True, slots=True)
class PciPlace:
    """Where a PCI device sits: <sysfs>/devices/<host bridge>/<bridge>/.../<address>."""

    address: str  # the device's own directory name, "0000:1b:00.0"
    host_bridge: (
        str  # "pci0000:10": the root complex (drivers/pci/probe.c pci_register_host_bridge)
    )
    bridges: tuple[str, ...]  # PCI bridges from the root port down to the device's parent
    numa_node: int | None  # numa_node; None where it reads -1 or is absent (no CONFIG_NUMA)
    virtual_function: bool = False  # physfn: an SR-IOV VF (drivers/pci/iov.c)

    def shared_depth(self, other: PciPlace) -> int:
        """How many bridges both sit below: 0 when no PCIe switch is shared."""
        if self.host_bridge != other.host_bridge:
            return 0
        depth = 0
        for mine, theirs in zip(self.bridges, other.bridges, strict=False):
            if mine != theirs:
                break
            depth += 1
        return depth


def pci_place(sysfs_root: Path, link: Path) -> PciPlace:
    """The PCI device a sysfs link leads to (class/infiniband/<dev>/device, bus/pci/devices/
    <addr>); ValueError saying why when it leads to no PCI device."""
    if not os.path.lexists(link):
        raise ValueError(f"{link} is missing")
    target = Path(os.path.realpath(link))
    if not target.exists():
        raise ValueError(f"{link} is a dangling link (to {target})")
    devices = Path(os.path.realpath(sysfs_root / "devices"))
    try:
        parts = target.relative_to(devices).parts
    except ValueError:
        raise ValueError(f"{link} leads outside {devices} (to {target})") from None
    if len(parts) < 2 or not parts[0].startswith("pci"):
        raise ValueError(f"{link} leads to {target}, not a PCI device")
    addresses = parts[1:]
    if any(normalize_pci_address(part) != part for part in addresses):
        raise ValueError(f"{link} leads to {target}, not a PCI device")
    return PciPlace(
        addresses[-1],
        parts[0],
        addresses[:-1],
        _numa_node(target / "numa_node"),
        os.path.lexists(target / "physfn"),
    )


def _numa_node(path: Path) -> int | None:
    try:
        node = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


@dataclass(frozen=True, slots=True)
class _Layout:
    """What one walk of sysfs and procfs found; replaced whole by refresh()."""

    gpus: tuple[Gpu, ...]
    slurm: SlurmIndex
    # GPU references a claim may use, lower case: UUID, PCI address; index goes via slurm.
    gpu_by_name: dict[str, Gpu]
    gpu_by_minor: dict[int, Gpu]
    # Per GPU (PCI address): its compute NICs and the rule that gave each.
    rails: dict[str, tuple[tuple[str, str], ...]]
    # Per storage device: the GPUs (PCI address) it goes with and the rule.
    storage_gpus: dict[str, tuple[tuple[str, str], ...]]
    # PCI address of a device (an SR-IOV VF, a PF) -> the RDMA devices on it.
    devices_by_address: dict[str, tuple[str, ...]]


class Topology:
    """The node's GPUs, NICs and their PCIe places; ``resolve`` maps claims to held ports.

    ``ports`` are the sampled ports (the source's PortSpec list): only these can be held.
    ``storage_devices`` names the configured storage NICs. ``gres_conf`` is Slurm's gres.conf
    for the index rule (collector.jobs.gpus); ``hostname`` is this node's name in it (default:
    the short host name, as slurmd uses).
    """

    def __init__(
        self,
        sysfs_root: Path | str,
        proc_root: Path | str,
        ports: Sequence[PortSpec],
        storage_devices: Sequence[str] = (),
        gres_conf: Path | str | None = None,
        hostname: str | None = None,
    ) -> None:
        self.sysfs_root = Path(sysfs_root)
        self.proc_root = Path(proc_root)
        self.gres_conf = gres_conf
        self.hostname = hostname or socket.gethostname().split(".", 1)[0]
        self.storage_devices = frozenset(storage_devices)
        self._ports: dict[str, tuple[int, ...]] = {}
        for spec in ports:
            self._ports[spec.device] = (*self._ports.get(spec.device, ()), spec.port)
        self.problems = Problems(_LOG)
        self._rule = ""
        self._unplaced: dict[str, str] = {}  # port device -> why it has no PCI place
        for device in sorted(self.storage_devices - set(self._ports)):
            self.problems.report(
                "storage_device",
                f"storage:{device}",
                f"storage device {device} is configured but has no sampled port",
            )
        self._layout = self._read()

    @property
    def gpus(self) -> tuple[Gpu, ...]:
        return self._layout.gpus

    @property
    def slurm_index(self) -> SlurmIndex:
        return self._layout.slurm

    def rails(self, gpu: Gpu) -> tuple[tuple[str, str], ...]:
        """A GPU's compute NICs (its rails) and the rule that gave each."""
        return self._layout.rails.get(gpu.pci_address, ())

    def refresh(self) -> None:
        """Read the inventory, gres.conf and sysfs again (a GPU or VF that came later)."""
        self._layout = self._read()

    def _read(self) -> _Layout:
        gpus = read_gpus(self.proc_root, self.problems)
        slurm = read_slurm_index(self.gres_conf, self.hostname, gpus, self.problems)
        if slurm.rule != self._rule:
            _LOG.info("jobs: %s", slurm.rule)
            self._rule = slurm.rule
        nics: dict[str, PciPlace] = {}
        # Said only when a claim needs the places (one naming GPUs): a whole-node job, the
        # common case, and a source without PCI devices (sim, netdev) do not need them.
        self._unplaced.clear()
        for device in sorted(self._ports):
            link = self.sysfs_root / "class" / "infiniband" / device / "device"
            try:
                nics[device] = pci_place(self.sysfs_root, link)
            except ValueError as exc:
                self._unplaced[device] = str(exc)
        places: dict[str, PciPlace] = {}
        for gpu in gpus:
            link = self.sysfs_root / "bus" / "pci" / "devices" / gpu.pci_address
            try:
                places[gpu.pci_address] = pci_place(self.sysfs_root, link)
            except ValueError as exc:
                self.problems.report(
                    "sysfs",
                    f"gpu:{gpu.pci_address}:{exc}",
                    f"GPU {gpu.pci_address} (minor {gpu.minor}): {exc}; it holds no NIC",
                )
        # A VF is handed to one pod or VM by a device plugin, which names it in the claim; its
        # PF's port counts the physical link. So a VF is never a GPU's rail by place.
        physical = {d: p for d, p in nics.items() if not p.virtual_function}
        compute = {d: p for d, p in physical.items() if d not in self.storage_devices}
        storage = {d: p for d, p in physical.items() if d in self.storage_devices}
        by_address: dict[str, tuple[str, ...]] = {}
        for device, place in nics.items():
            by_address[place.address] = (*by_address.get(place.address, ()), device)
        names: dict[str, Gpu] = {}
        for gpu in gpus:
            names[gpu.pci_address] = gpu
            if gpu.uuid:
                names[gpu.uuid.lower()] = gpu
        return _Layout(
            gpus=gpus,
            slurm=slurm,
            gpu_by_name=names,
            gpu_by_minor={gpu.minor: gpu for gpu in gpus},
            rails={address: _nearest(place, compute) for address, place in places.items()},
            storage_gpus={device: _nearest(place, places) for device, place in storage.items()},
            devices_by_address=by_address,
        )

    def resolve(self, claims: Sequence[Claim]) -> tuple[list[Job], list[Holding]]:
        """The jobs (one per job id, in claim order) and the ports each holds."""
        jobs: dict[str, Job] = {}
        held: dict[tuple[str, str, int], Holding] = {}
        for claim in claims:
            job_id = claim.job.job_id
            jobs.setdefault(job_id, claim.job)
            for device, rule in self._devices_of(claim):
                role = STORAGE if device in self.storage_devices else COMPUTE
                for port in self._ports.get(device, ()):
                    key = (job_id, device, port)
                    known = held.get(key)
                    if known is None or _strength(rule) < _strength(known.rule):
                        held[key] = Holding(job_id, device, port, role, rule)
        return list(jobs.values()), [held[key] for key in sorted(held)]

    def _devices_of(self, claim: Claim) -> list[tuple[str, str]]:
        """The devices a claim holds, each with the rule that gave it (repeats allowed)."""
        if claim.whole_node or (not claim.gpus and not claim.devices):
            return [(device, RULE_WHOLE_NODE) for device in self._ports]
        self._say_unplaced()
        gpus = self._gpus_of(claim)
        layout = self._layout
        if layout.gpus and {gpu.minor for gpu in gpus} == set(layout.gpu_by_minor):
            return [(device, RULE_WHOLE_NODE) for device in self._ports]
        found: list[tuple[str, str]] = []
        addresses = {gpu.pci_address for gpu in gpus}
        for address in sorted(addresses):
            found.extend(layout.rails.get(address, ()))
        for device, partners in layout.storage_gpus.items():
            found.extend((device, rule) for gpu, rule in partners if gpu in addresses)
        for name, rule in claim.devices:
            devices = self._named_devices(claim.job.job_id, name)
            found.extend((device, rule) for device in devices)
        return found

    def _say_unplaced(self) -> None:
        """One line for every port device without a PCI place, once per distinct set."""
        for device, reason in self._unplaced.items():
            self.problems.report(
                "sysfs",
                f"nic:{device}:{reason}",
                f"{device}: {reason}; only whole-node jobs and claims naming it hold its ports",
            )

    def _named_devices(self, job_id: str, name: str) -> tuple[str, ...]:
        if name in self._ports:
            return (name,)
        address = normalize_pci_address(name)
        if address is not None and address in self._layout.devices_by_address:
            return self._layout.devices_by_address[address]
        self.problems.report(
            "unknown_device",
            f"device:{job_id}:{name}",
            f"job {job_id} names RDMA device {name!r}, which has no sampled port here: "
            "it holds nothing by it",
        )
        return ()

    def _gpus_of(self, claim: Claim) -> list[Gpu]:
        gpus: list[Gpu] = []
        unknown: list[str] = []
        for name in claim.gpus:
            gpu = self._find_gpu(name)
            if gpu is None:
                unknown.append(name)
            else:
                gpus.append(gpu)
        job_id = claim.job.job_id
        if any(not self.problems.said(f"gpu:{job_id}:{name}") for name in unknown):
            # The first time a name is not found, read again: the driver may have come later.
            self.refresh()
        for name in unknown:
            gpu = self._find_gpu(name)
            if gpu is not None:
                gpus.append(gpu)
                continue
            self.problems.report(
                "unknown_gpu",
                f"gpu:{job_id}:{name}",
                f"job {job_id} names GPU {name!r}, which is not on this node "
                f"({len(self._layout.gpus)} GPUs; {self._layout.slurm.rule}): the job is "
                "listed, that GPU holds no port",
            )
        return gpus

    def _find_gpu(self, name: str) -> Gpu | None:
        layout = self._layout
        text = name.strip()
        if text.isdigit():
            minor = layout.slurm.minor_of(int(text))
            return None if minor is None else layout.gpu_by_minor.get(minor)
        address = normalize_pci_address(text)
        if address is not None:
            return layout.gpu_by_name.get(address)
        return layout.gpu_by_name.get(text.lower())


def _strength(rule: str) -> int:
    return _RULE_STRENGTH.get(rule, len(_RULE_STRENGTH))


def _nearest(place: PciPlace, others: dict[str, PciPlace]) -> tuple[tuple[str, str], ...]:
    """The devices nearest ``place``: below the deepest shared bridge, else on its NUMA node."""
    depths = {name: place.shared_depth(other) for name, other in others.items()}
    best = max(depths.values(), default=0)
    if best > 0:
        return tuple((name, RULE_PCIE_SWITCH) for name in sorted(depths) if depths[name] == best)
    if place.numa_node is None:
        return ()
    return tuple(
        (name, RULE_NUMA_NODE)
        for name in sorted(others)
        if others[name].numa_node == place.numa_node
    )
