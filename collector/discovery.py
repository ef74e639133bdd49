"""Discovery: every InfiniBand and RoCE port under <root>/class/infiniband, as typed records.

Modelled on prometheus/procfs ``sysfs/class_infiniband.go``: the tree is parsed into frozen
dataclasses, each field naming the file it comes from, and nothing here knows about
metrics. Absence is not failure: a device without ``counters/``, a port whose data counters
cannot be read, a file that fails with EINVAL, all become a ``Skipped`` entry with the
reason, and every other port carries on.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

# The running kernel's sysfs; every reader takes the root as a parameter defaulting to it.
DEFAULT_SYSFS_ROOT = "/sys"

# The two counters read every tick. 64-bit on every HCA with PortCountersExtended (mlx5
# and all ConnectX since ConnectX-3), in units of 4 octets (see DATA_COUNTER_OCTETS).
DATA_COUNTERS = ("port_xmit_data", "port_rcv_data")
# "reported as a multiple of four octets" (perfquery(8)); the ABI doc's "(lanes)" is
# misleading; prometheus/procfs class_infiniband.go multiplies by 4 for the same reason.
DATA_COUNTER_OCTETS = 4

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec")
_STATE = re.compile(r"^\s*(\d+)\s*:\s*(.*?)\s*$")
# Not a counter: hw_counters/lifespan is the stats cache lifetime in ms, writable by root
# (drivers/infiniband/core/sysfs.c set_stats_lifespan).
LIFESPAN = "lifespan"
# Old kernels print this instead of failing the read when the PMA query fails (procfs #687).
_NO_PMA = "N/A (no PMA)"


class DiscoveryError(Exception):
    """The sysfs root itself is unusable (missing, not a directory)."""


@dataclass(frozen=True, slots=True)
class State:
    id: int
    name: str


@dataclass(frozen=True, slots=True)
class InfiniBandPort:
    """One port of one RDMA device, as found in sysfs."""

    device: str
    port: int
    path: Path  # <root>/class/infiniband/<device>/ports/<port>
    link_layer: str  # link_layer: InfiniBand | Ethernet | Unknown
    state: State | None  # state: "4: ACTIVE"
    phys_state: State | None  # phys_state: "5: LinkUp"
    rate_bytes_per_second: int | None  # rate: "400 Gb/sec (4X NDR)"
    netdev: str | None  # RoCE only: gid_attrs/ndevs/<i>, else device/net/<name>
    counters: tuple[str, ...]  # readable files in counters/; () without counters/
    hw_counters: tuple[str, ...]  # files in hw_counters/, lifespan included (none read here)
    has_hw_counters: bool  # hw_counters/ is a directory (it may list nothing yet)

    def counter_path(self, name: str) -> Path:
        return self.path / "counters" / name

    @property
    def hw_counter_names(self) -> tuple[str, ...]:
        """The counters in hw_counters/: every file but lifespan."""
        return tuple(name for name in self.hw_counters if name != LIFESPAN)


@dataclass(frozen=True, slots=True)
class Skipped:
    device: str
    port: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class Discovery:
    ports: tuple[InfiniBandPort, ...] = ()  # ports whose data counters can be sampled
    skipped: tuple[Skipped, ...] = field(default=())
    # Skipped for lack of counters/ (irdma, rxe, siw), yet with hw_counters/: their RoCE
    # congestion counters can still be polled. Each is also in ``skipped``.
    hw_counter_only: tuple[InfiniBandPort, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "ports": [
                {
                    "device": p.device,
                    "port": p.port,
                    "link_layer": p.link_layer,
                    "state": p.state.name if p.state else None,
                    "phys_state": p.phys_state.name if p.phys_state else None,
                    "rate_bytes_per_second": p.rate_bytes_per_second,
                    "netdev": p.netdev,
                    "counters": list(p.counters),
                    "hw_counters": list(p.hw_counters),
                }
                for p in self.ports
            ],
            "skipped": [
                {"device": s.device, "port": s.port, "reason": s.reason} for s in self.skipped
            ],
        }


def parse_rate(text: str) -> int | None:
    """Bytes per second from the kernel's ``rate`` file (lane speed x width, in Gb/s).

    Exact for fractional lane rates: "2.5 Gb/sec (1X)" is 312,500,000 bytes/s.
    """
    match = _RATE.match(text)
    if match is None:
        return None
    return round(Fraction(match.group(1)) * 1_000_000_000 / 8)


def parse_state(text: str) -> State | None:
    """``state`` and ``phys_state`` are printed as "%d: %s" (drivers/infiniband/core/sysfs.c)."""
    match = _STATE.match(text)
    if match is None:
        return None
    return State(int(match.group(1)), match.group(2))


def read_attribute(path: Path) -> str:
    """One sysfs attribute as text. Raises OSError (EINVAL, ENODEV, ...) as the kernel does."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.pread(fd, 4096, 0).decode("ascii", "replace").strip()
    finally:
        os.close(fd)


def unreadable_reason(path: Path) -> str | None:
    """Why a counter file cannot be sampled, or None if it reads as an integer."""
    try:
        text = read_attribute(path)
    except OSError as exc:
        name = errno.errorcode.get(exc.errno or 0, "error")
        return f"{name} ({exc.strerror})"
    if text == _NO_PMA:
        return f"reads '{_NO_PMA}'"
    try:
        int(text)
    except ValueError:
        return f"reads {text[:40]!r}, not an integer"
    return None


def _optional_text(path: Path) -> str | None:
    try:
        return read_attribute(path)
    except OSError:
        return None


def _numeric_entries(directory: Path) -> list[Path]:
    try:
        entries = [p for p in directory.iterdir() if p.name.isdigit()]
    except OSError:
        return []
    return sorted(entries, key=lambda p: int(p.name))


def _roce_netdev(port_path: Path) -> str | None:
    # gid_attrs/ndevs/<i> names the netdev of GID i; empty entries fail with EINVAL.
    for entry in _numeric_entries(port_path / "gid_attrs" / "ndevs"):
        name = _optional_text(entry)
        if name:
            return name
    try:
        nets = sorted(p.name for p in (port_path.parent.parent / "device" / "net").iterdir())
    except OSError:
        return None
    return nets[0] if nets else None


def _list_names(directory: Path) -> list[str]:
    try:
        return sorted(p.name for p in directory.iterdir() if not p.is_dir())
    except OSError:
        return []


def _port_record(
    device: str, port: int, port_path: Path, counters: tuple[str, ...]
) -> InfiniBandPort:
    """The attributes every port has, read the same way whatever else it offers."""
    link_layer = _optional_text(port_path / "link_layer") or "Unknown"
    rate_text = _optional_text(port_path / "rate")
    state_text = _optional_text(port_path / "state")
    phys_text = _optional_text(port_path / "phys_state")
    hw_dir = port_path / "hw_counters"
    return InfiniBandPort(
        device=device,
        port=port,
        path=port_path,
        link_layer=link_layer,
        state=parse_state(state_text) if state_text else None,
        phys_state=parse_state(phys_text) if phys_text else None,
        rate_bytes_per_second=parse_rate(rate_text) if rate_text else None,
        netdev=_roce_netdev(port_path) if link_layer == "Ethernet" else None,
        counters=counters,
        hw_counters=tuple(_list_names(hw_dir)),
        has_hw_counters=hw_dir.is_dir(),
    )


def _parse_port(device: str, port_path: Path) -> tuple[InfiniBandPort | None, list[Skipped]]:
    """A port with sampleable data counters, or None; and what was skipped, with why."""
    port = int(port_path.name)
    counters_dir = port_path / "counters"
    if not counters_dir.is_dir():
        # irdma, rxe, siw and some bnxt_re have no PMA, hence no counters/: the core only
        # creates it for a device with process_mad (drivers/infiniband/core/sysfs.c).
        return None, [Skipped(device, port, "no counters/ directory (driver without a PMA)")]
    skipped: list[Skipped] = []
    readable: list[str] = []
    for name in _list_names(counters_dir):
        reason = unreadable_reason(counters_dir / name)
        if reason is None:
            readable.append(name)
        elif name in DATA_COUNTERS:
            return None, [Skipped(device, port, f"counters/{name}: {reason}")]
        else:
            skipped.append(Skipped(device, port, f"counters/{name}: {reason}"))
    missing = [name for name in DATA_COUNTERS if name not in readable]
    if missing:
        return None, [Skipped(device, port, f"counters/{missing[0]} is missing")]
    return _port_record(device, port, port_path, tuple(readable)), skipped


def compile_filter(pattern: str | None, what: str) -> re.Pattern[str] | None:
    """A device filter; raises ValueError naming the flag when the expression is invalid."""
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{what} {pattern!r} is not a valid regular expression: {exc}") from None


def discover(
    sysfs_root: Path | str = DEFAULT_SYSFS_ROOT,
    include: re.Pattern[str] | None = None,
    exclude: re.Pattern[str] | None = None,
) -> Discovery:
    """Walk <root>/class/infiniband/*/ports/*. A missing class directory means no ports."""
    root = Path(sysfs_root)
    if not root.is_dir():
        raise DiscoveryError(f"sysfs root {str(root)!r} is not a directory")
    class_dir = root / "class" / "infiniband"
    try:
        devices = sorted(p for p in class_dir.iterdir())
    except FileNotFoundError:
        return Discovery()
    ports: list[InfiniBandPort] = []
    skipped: list[Skipped] = []
    hw_counter_only: list[InfiniBandPort] = []
    for device_path in devices:
        device = device_path.name
        if include is not None and not include.search(device):
            continue
        if exclude is not None and exclude.search(device):
            continue
        port_paths = _numeric_entries(device_path / "ports")
        if not port_paths:
            skipped.append(Skipped(device, None, "no ports/ directory"))
        for port_path in port_paths:
            found, notes = _parse_port(device, port_path)
            skipped.extend(notes)
            if found is not None:
                ports.append(found)
            elif not (port_path / "counters").is_dir() and (port_path / "hw_counters").is_dir():
                hw_counter_only.append(_port_record(device, int(port_path.name), port_path, ()))
    return Discovery(tuple(ports), tuple(skipped), tuple(hw_counter_only))
