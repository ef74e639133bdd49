"""The node's NVIDIA GPUs (minor number, UUID, PCI address) and Slurm's GPU index for each.

The inventory is read from the files the NVIDIA kernel module writes, one directory per GPU:
``<proc_root>/driver/nvidia/gpus/<domain:bus:device.function>/information``, printed by
``nv_procfs_read_gpu_info`` in NVIDIA/open-gpu-kernel-modules ``kernel-open/nvidia/nv-procfs.c``
(the directory is named by ``nv_procfs_add_gpu``, "%04x:%02x:%02x.%1x"): lines such as
``Model: \\t\\t NVIDIA H100 80GB HBM3``, ``GPU UUID: \\t GPU-...`` (left out when the driver
cannot read it), ``Bus Location: \\t 0000:1b:00.0`` and ``Device Minor: \\t 0`` (the N of
/dev/nvidiaN).

Slurm names a job's GPUs by its own GRES index (SLURM_JOB_GPUS in the prolog is each device's
``gres_device->index``: SchedMD/slurm ``src/plugins/gres/common/gres_common.c``
``common_gres_prep_set_env``). Which GPU an index is depends on gres.conf (man gres.conf):

- ``AutoDetect=nvml`` for this node (on a line of its own, or with this node's NodeName):
  index i is the i-th GPU in PCI bus order, as NVML enumerates them (``gres_gpu.c``
  ``_merge_system_gres_conf`` sorts the GPUs by file, then by the links order that stands for
  the PCI bus ID order); man gres.conf: "the minor number ... is not necessarily the same as
  the device number/index".
- ``Name=gpu File=/dev/nvidia[4-7]`` lines for this node and no AutoDetect: index i is the i-th
  device file in the order the lines list them (``src/interfaces/gres.c``
  ``_foreach_fill_in_gres_devices`` numbers the files as it expands each line), and its minor
  is the file's trailing number (``_init_gres_device``'s dev_num).
- No gres.conf (or none that names this node's GPUs): index i is /dev/nvidia<i>, minor i.

The rule in force is logged once (``SlurmIndex.rule``).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# "%04x:%02x:%02x.%x" (nv-procfs.c), nvidia-smi's "00000000:1B:00.0", or no domain.
_PCI = re.compile(r"^\s*(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])\s*$")
_NVIDIA_DEVICE_FILE = re.compile(r"(?:^|/)nvidia(\d+)$")


class Problems:
    """Bad inputs of one topology: each said once (by what it is about), every kind counted."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self._said: set[str] = set()
        self.counts: Counter[str] = Counter()

    def said(self, about: str) -> bool:
        return about in self._said

    def inform(self, about: str, message: str) -> None:
        """A fact worth one line at INFO (not a fault, not counted), said once."""
        if about not in self._said:
            self._said.add(about)
            self._logger.info("jobs: %s", message)

    def report(self, kind: str, about: str, message: str) -> None:
        """One warning per distinct ``about``; a file read again at refresh is not said twice."""
        if about in self._said:
            return
        self._said.add(about)
        self.counts[kind] += 1
        self._logger.warning("jobs: %s", message)


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU as the NVIDIA driver shows it."""

    minor: int  # information: "Device Minor:" (the N of /dev/nvidiaN)
    pci_address: str  # information: "Bus Location:", normalised ("0000:1b:00.0")
    uuid: str = ""  # information: "GPU UUID:"; "" where the driver printed none
    model: str = ""  # information: "Model:"


def normalize_pci_address(text: str) -> str | None:
    """A PCI address in sysfs's form ("0000:1b:00.0", lower case); None if it is not one.

    nvidia-smi and NVML print an 8-digit domain in upper case ("00000000:1B:00.0"); the
    kernel's sysfs names print "%04x" (drivers/pci/probe.c pci_setup_device: dev_set_name).
    """
    match = _PCI.match(text)
    if match is None:
        return None
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{function}"


def pci_sort_key(address: str) -> tuple[int, ...]:
    """PCI bus order: domain, bus, device, function as numbers."""
    domain, bus, rest = address.split(":")
    device, function = rest.split(".")
    return (int(domain, 16), int(bus, 16), int(device, 16), int(function, 16))


def parse_gpu_information(text: str, directory: str) -> Gpu:
    """One ``information`` file; ValueError saying why when it names no usable GPU.

    Unknown lines (later drivers add "GPU Firmware:", "GPU Excluded:") are ignored; the
    directory's name stands in for a missing or unreadable "Bus Location:".
    """
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, colon, value = line.partition(":")
        if colon:
            fields.setdefault(key.strip(), value.strip())
    minor_text = fields.get("Device Minor")
    if minor_text is None:
        raise ValueError("no 'Device Minor:' line")
    if not minor_text.isdigit():
        raise ValueError(f"'Device Minor:' reads {minor_text[:40]!r}, not a number")
    address = normalize_pci_address(fields.get("Bus Location", "")) or normalize_pci_address(
        directory
    )
    if address is None:
        raise ValueError("neither 'Bus Location:' nor the directory name is a PCI address")
    return Gpu(int(minor_text), address, fields.get("GPU UUID", ""), fields.get("Model", ""))


def read_gpus(proc_root: Path | str, problems: Problems) -> tuple[Gpu, ...]:
    """Every GPU under <proc_root>/driver/nvidia/gpus, by minor number; () without the driver."""
    directory = Path(proc_root) / "driver" / "nvidia" / "gpus"
    try:
        entries = sorted(directory.iterdir())
    except OSError as exc:
        problems.inform(
            str(directory),
            f"no NVIDIA GPU inventory at {directory} ({exc.strerror or exc}): jobs that name "
            "GPUs hold no port here",
        )
        return ()
    by_minor: dict[int, Gpu] = {}
    for entry in entries:
        path = entry / "information"
        try:
            text = path.read_text(errors="replace")
        except OSError as exc:
            problems.report(
                "gpu_information", str(path), f"{path}: {exc.strerror or exc}; GPU skipped"
            )
            continue
        try:
            gpu = parse_gpu_information(text, entry.name)
        except ValueError as exc:
            problems.report("gpu_information", str(path), f"{path}: {exc}; GPU skipped")
            continue
        if gpu.minor in by_minor:
            problems.report(
                "gpu_information",
                str(path),
                f"{path}: minor {gpu.minor} is {by_minor[gpu.minor].pci_address}'s too; skipped",
            )
            continue
        by_minor[gpu.minor] = gpu
    return tuple(by_minor[minor] for minor in sorted(by_minor))


def expand_hostlist(text: str) -> list[str]:
    """A Slurm host list or device range ("gpu-[01-03,07]", "/dev/nvidia[0,2-3]") expanded.

    Zero padding is kept ("[01-03]" gives 01, 02, 03), as Slurm's hostlist does; several
    bracket groups multiply out. ValueError on an unbalanced bracket or a bad range.
    """
    names: list[str] = []
    depth, start = 0, 0
    for position, char in enumerate(text + ","):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            item = text[start:position].strip()
            if item:
                names.extend(_expand_one(item))
            start = position + 1
        if depth not in (0, 1):
            raise ValueError(f"unbalanced brackets in {text!r}")
    if depth != 0:
        raise ValueError(f"unbalanced brackets in {text!r}")
    return names


def _expand_one(item: str) -> list[str]:
    opening = item.find("[")
    if opening < 0:
        if "]" in item:
            raise ValueError(f"unbalanced brackets in {item!r}")
        return [item]
    closing = item.find("]", opening)
    if closing < 0:
        raise ValueError(f"unbalanced brackets in {item!r}")
    prefix, body, rest = item[:opening], item[opening + 1 : closing], item[closing + 1 :]
    tails = _expand_one(rest) if rest else [""]
    names: list[str] = []
    for part in body.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"bad range {part!r} in {item!r}")
        width = len(low) if low.startswith("0") else 0
        for number in range(int(low), int(high if dash else low) + 1):
            names.extend(f"{prefix}{number:0{width}d}{tail}" for tail in tails)
    return names


@dataclass(frozen=True, slots=True)
class GresLine:
    """One line of gres.conf, the keys this module needs (names case-insensitive)."""

    line: int  # 1-based, for log lines
    nodes: tuple[str, ...] | None  # NodeName= expanded; None: every node
    name: str  # Name= ("gpu", "mps", "shard", "nic", ...); "" on an AutoDetect-only line
    files: tuple[str, ...]  # File= or MultipleFiles= expanded
    multiple_files: bool  # MultipleFiles=: one GRES for all its files (a MIG instance)
    autodetect: str | None  # AutoDetect=


def parse_gres_conf(text: str, problems: Problems, source: str) -> list[GresLine]:
    """gres.conf's lines (man gres.conf): "#" starts a comment, each line is Key=Value
    pairs. A line that is not pairs, or whose ranges do not expand, is said once and skipped.
    """
    lines: list[GresLine] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        content = raw.split("#", 1)[0].strip()
        if not content:
            continue
        pairs: dict[str, str] = {}
        for token in content.split():
            key, equals, value = token.partition("=")
            if not equals or not key:
                pairs = {}
                break
            pairs[key.lower()] = value
        about = f"{source}:{number}"
        if not pairs:
            problems.report("gres_conf", about, f"{about}: not Key=Value pairs; line skipped")
            continue
        try:
            nodes = tuple(expand_hostlist(pairs["nodename"])) if "nodename" in pairs else None
            files_text = pairs.get("file") or pairs.get("multiplefiles") or ""
            files = tuple(expand_hostlist(files_text)) if files_text else ()
        except ValueError as exc:
            problems.report("gres_conf", about, f"{about}: {exc}; line skipped")
            continue
        autodetect = pairs.get("autodetect")
        lines.append(
            GresLine(
                number,
                nodes,
                pairs.get("name", "").lower(),
                files,
                "multiplefiles" in pairs and "file" not in pairs,
                autodetect.lower() if autodetect is not None else None,
            )
        )
    return lines


@dataclass(frozen=True, slots=True)
class SlurmIndex:
    """Which minor number each Slurm GPU index is, and the rule that says so."""

    rule: str  # a sentence for the log
    # By index: the minor number, None where the file names no /dev/nvidiaN; () with no
    # gres.conf lines for this node, where index i is minor i.
    minors: tuple[int | None, ...] = ()
    by_minor_order: bool = True  # index i is minor i

    def minor_of(self, index: int) -> int | None:
        if self.by_minor_order:
            return index
        return self.minors[index] if 0 <= index < len(self.minors) else None


def slurm_index(
    lines: list[GresLine] | None, hostname: str, gpus: tuple[Gpu, ...], source: str
) -> SlurmIndex:
    """The index rule for this node from gres.conf's lines (None: no gres.conf)."""
    if lines is None:
        return SlurmIndex("no gres.conf: Slurm GPU index i is /dev/nvidia<i> (minor i)")
    mine = [line for line in lines if line.nodes is None or hostname in line.nodes]
    # A node-specific AutoDetect trumps the global one (man gres.conf, AutoDetect).
    autodetect = None
    for line in mine:
        if line.autodetect is not None and line.nodes is None:
            autodetect = line.autodetect
    for line in mine:
        if line.autodetect is not None and line.nodes is not None:
            autodetect = line.autodetect
    if autodetect is not None and autodetect != "off":
        order = sorted(gpus, key=lambda gpu: pci_sort_key(gpu.pci_address))
        return SlurmIndex(
            f"{source}: AutoDetect={autodetect} for {hostname}: Slurm GPU index i is the "
            "i-th GPU in PCI bus order",
            tuple(gpu.minor for gpu in order),
            by_minor_order=False,
        )
    minors: list[int | None] = []
    for line in mine:
        if line.name != "gpu" or not line.files:
            continue
        found = [_device_minor(name) for name in line.files]
        if line.multiple_files:
            # One GRES index for all the files of a MIG instance: the GPU's own device file.
            minors.append(next((minor for minor in found if minor is not None), None))
        else:
            minors.extend(found)
    if not minors:
        return SlurmIndex(
            f"{source} names no GPU device file for {hostname}: Slurm GPU index i is "
            "/dev/nvidia<i> (minor i)"
        )
    listed = ",".join("?" if minor is None else str(minor) for minor in minors)
    return SlurmIndex(
        f"{source}: Slurm GPU index i is the i-th File= of its gpu lines for {hostname} "
        f"(minors by index: {listed})",
        tuple(minors),
        by_minor_order=False,
    )


def _device_minor(name: str) -> int | None:
    found = _NVIDIA_DEVICE_FILE.search(name)
    return int(found.group(1)) if found else None


def read_slurm_index(
    gres_conf: Path | str | None, hostname: str, gpus: tuple[Gpu, ...], problems: Problems
) -> SlurmIndex:
    """The index rule from the gres.conf file (None: not configured)."""
    if gres_conf is None:
        return slurm_index(None, hostname, gpus, "")
    try:
        text = Path(gres_conf).read_text(errors="replace")
    except OSError as exc:
        problems.report(
            "gres_conf",
            str(gres_conf),
            f"gres.conf {gres_conf}: {exc.strerror or exc}; Slurm GPU index i taken as minor i",
        )
        return slurm_index(None, hostname, gpus, str(gres_conf))
    return slurm_index(
        parse_gres_conf(text, problems, str(gres_conf)), hostname, gpus, str(gres_conf)
    )
