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

# drivers/infiniband/core/sysfs.c rate_show: "%d%s Gb/sec (%dX%s)", e.g. "56 Gb/sec (4X FDR)".
# Kernels before 5.x printed SDR without a name ("10 Gb/sec (4X)"): speed stayed "" there.
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec(?:\s*\((\d+)X\s*([A-Z0-9]*)\))?")
_STATE = re.compile(r"^\s*(\d+)\s*:\s*(.*?)\s*$")
# Not a counter: hw_counters/lifespan is the stats cache lifetime in ms, writable by root
# (drivers/infiniband/core/sysfs.c set_stats_lifespan).
LIFESPAN = "lifespan"
# Old kernels print this instead of failing the read when the PMA query fails (procfs #687).
_NO_PMA = "N/A (no PMA)"


# Data bits per signalled bit, by the speed name rate_show prints, for InfiniBand links.
# rate_show prints the nominal lane figure (2.5, 5, 10, 14, 25, 50, 100, 200 Gb/s per
# lane: drivers/infiniband/core/sysfs.c rate_show), while the lanes signal at the rates of
# drivers/infiniband/core/verbs.c ib_rate_to_mbps (2500, 14062 for 1X FDR, 25781 for 1X
# EDR, 53125 for 1X HDR, ...):
#   SDR, DDR, QDR: 8b/10b, so 2.5/5/10 Gb/s signalled carry 2/4/8 Gb/s of data;
#   FDR: 14.0625 Gbaud per lane with 64b/66b (ib_rate_to_mbps: 14 -> 14062), i.e.
#        13.636 Gb/s of data where 14 is printed (4X: 54.545 of the printed 56);
#   FDR10 (10.3125 Gbaud, 64b/66b), EDR, HDR, NDR, XDR: the printed figure is the data rate.
_FDR_DATA_PER_PRINTED = Fraction(140625, 10000) * Fraction(64, 66) / 14
ENCODING_DATA_PER_PRINTED: dict[str, Fraction] = {
    "SDR": Fraction(8, 10),
    "DDR": Fraction(8, 10),
    "QDR": Fraction(8, 10),
    "FDR10": Fraction(1),
    "FDR": _FDR_DATA_PER_PRINTED,
    "EDR": Fraction(1),
    "HDR": Fraction(1),
    "NDR": Fraction(1),
    "XDR": Fraction(1),
}


# Ports whose bytes live only in hw_counters/ (no PMA, hence no counters/), by driver:
# (device name prefix, transmit files summed, receive files summed, bytes per unit,
# the driver's own update period in ms, where the kernel says so).
#  - efa: u64 bytes copied from the device (drivers/infiniband/hw/efa/efa_verbs.c
#    EFA_DEFINE_PORT_STATS, efa_fill_port_stats; efa_com_cmd.c efa_com_get_stats).
#  - bnxt_re: rx_ucast_bytes/tx_ucast_bytes of the RoCE function's stats context, bytes,
#    which firmware DMAs every 1000 ms (drivers/infiniband/hw/bnxt_re/hw_counters.c
#    bnxt_re_ib_get_hw_stats; main.c bnxt_re_net_stats_ctx_alloc update_period_ms).
#  - irdma: IP-layer octets of the RDMA engine, IPv4 and IPv6 apart, kept as monotonic u64
#    accumulators of 48-bit hardware counters (drivers/infiniband/hw/irdma/verbs.c
#    irdma_hw_stat_names; ctrl.c irdma_update_stats).
# rxe has no byte counter (drivers/infiniband/sw/rxe/rxe_hw_counters.c: rdma_sends and
# rdma_recvs count operations), siw has no hw_counters at all.
@dataclass(frozen=True, slots=True)
class HwByteCounters:
    driver: str
    transmit: tuple[str, ...]
    receive: tuple[str, ...]
    update_period_ms: int = 0  # beyond lifespan; 0: the driver refreshes on every read


HW_BYTE_COUNTERS: tuple[HwByteCounters, ...] = (
    HwByteCounters("efa", ("tx_bytes",), ("rx_bytes",)),
    HwByteCounters("bnxt_re", ("tx_bytes",), ("rx_bytes",), update_period_ms=1000),
    HwByteCounters("irdma", ("ip4OutOctets", "ip6OutOctets"), ("ip4InOctets", "ip6InOctets")),
)
# Drivers known to offer no byte counter, so discover can say so rather than guess.
NO_BYTE_COUNTER = {
    "rxe": "rxe has no byte counter in hw_counters/ (rxe_hw_counters.c counts packets only)",
    "siw": "siw has neither counters/ nor hw_counters/",
}
# Why a port is kept without sampling, as an enumerated code (the label of
# burstscope_port_not_sampled; the sentence in ``not_sampled`` goes to discover and the log).
NOT_SAMPLED_REASONS = {
    "no_pma": "a data counter reads 'N/A (no PMA)' (old kernels on a device without a PMA, "
    "drivers/infiniband/core/sysfs.c show_pma_counter)",
    "unreadable": "a data counter cannot be read or is not a number",
    "missing": "counters/ lacks port_xmit_data or port_rcv_data",
    "no_counters": "neither counters/ nor hw_counters/ (a driver without a PMA, e.g. siw)",
    "no_byte_counter": "hw_counters/ holds no byte counter known for the driver",
    "rxe": "rxe counts packets, not bytes (drivers/infiniband/sw/rxe/rxe_hw_counters.c)",
}
# The hw_counters cache lifetime when the file cannot be read: RDMA_HW_STATS_DEFAULT_LIFESPAN
# (include/rdma/ib_verbs.h), which every in-tree driver passes.
DEFAULT_LIFESPAN_MS = 10

# IBA PortCounters widths in bits (drivers/infiniband/core/sysfs.c PORT_PMA_ATTR); a real
# PMA stops them at all-ones instead of wrapping (IBA 1.8 s16.1.3.5), so 2**w - 1 means
# "stuck": the value is a lower bound and no longer counts.
PORT_COUNTER_WIDTHS: dict[str, int] = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "VL15_dropped": 16,
    "port_xmit_wait": 32,
}

# Device attributes exported as node_exporter's node_infiniband_info.
DEVICE_INFO_FILES = ("board_id", "fw_ver", "hca_type")


class DiscoveryError(Exception):
    """The sysfs root itself is unusable (missing, not a directory)."""


@dataclass(frozen=True, slots=True)
class State:
    id: int
    name: str


@dataclass(frozen=True, slots=True)
class LinkRate:
    """The ``rate`` file parsed: what the kernel prints, and the data rate under it."""

    bytes_per_second: int  # the printed figure, as node_exporter exports it
    data_bytes_per_second: int  # after line encoding: the utilization denominator
    width: int | None  # lanes: 1, 2, 4, 8, 12
    speed: str | None  # SDR .. XDR; "SDR" for the old unnamed form; None if not printed


@dataclass(frozen=True, slots=True)
class ByteFiles:
    """Where a port's transmitted and received bytes are read, and how."""

    directory: str  # "counters" or "hw_counters"
    transmit: tuple[str, ...]  # files summed
    receive: tuple[str, ...]
    bytes_per_unit: int
    min_read_interval_ns: int  # the cache lifetime: reading faster repeats a value


@dataclass(frozen=True, slots=True)
class InfiniBandPort:
    """One port of one RDMA device, as found in sysfs."""

    device: str
    port: int
    path: Path  # <root>/class/infiniband/<device>/ports/<port>
    link_layer: str  # link_layer: InfiniBand | Ethernet | Unknown
    state: State | None  # state: "4: ACTIVE"
    phys_state: State | None  # phys_state: "5: LinkUp"
    rate_bytes_per_second: int | None  # rate: "400 Gb/sec (4X NDR)", the kernel's figure
    netdev: str | None  # RoCE only: gid_attrs/ndevs/<i>, else device/net/<name>
    counters: tuple[str, ...]  # readable files in counters/; () without counters/
    hw_counters: tuple[str, ...]  # files in hw_counters/, lifespan included (none read here)
    has_hw_counters: bool  # hw_counters/ is a directory (it may list nothing yet)
    data_rate_bytes_per_second: int | None = None  # after line encoding; None: unusable
    rate_problem: str | None = None  # why the rate is unusable, for discover and the log
    byte_files: ByteFiles | None = None  # None: not sampled
    not_sampled: str | None = None  # why the port is not sampled (byte_files is None)
    not_sampled_reason: str | None = None  # the same as a NOT_SAMPLED_REASONS key
    saturated: tuple[str, ...] = ()  # PortCounters at all-ones when discovered

    def counter_path(self, name: str) -> Path:
        return self.path / "counters" / name

    def byte_paths(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Transmit and receive files, as absolute paths."""
        assert self.byte_files is not None
        directory = self.path / self.byte_files.directory
        return (
            tuple(str(directory / name) for name in self.byte_files.transmit),
            tuple(str(directory / name) for name in self.byte_files.receive),
        )

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
class DeviceInfo:
    """Device attributes, as node_exporter's node_infiniband_info: "" where absent."""

    device: str
    board_id: str  # <device>/board_id
    fw_ver: str  # <device>/fw_ver
    hca_type: str  # <device>/hca_type


# The shape of Discovery.to_json, `discover --json` (docs/report.md#json-outputs): 1 was
# 0.1.0's, without this key, where ports without a readable byte counter were listed under
# "skipped"; 2 lists them, whole, under "not_sampled", and "skipped" keeps unreadable files
# and devices without ports.
SCHEMA_VERSION = 2


@dataclass(frozen=True, slots=True)
class Discovery:
    ports: tuple[InfiniBandPort, ...] = ()  # ports whose data bytes can be sampled
    skipped: tuple[Skipped, ...] = field(default=())
    # Ports kept though not sampled (no readable byte counter): their state, phys_state
    # and rate are still polled and exported, beside the reason (``not_sampled``).
    unsampled: tuple[InfiniBandPort, ...] = ()
    devices: tuple[DeviceInfo, ...] = ()
    # Devices the include or exclude expression left out: (device, "include" or "exclude",
    # its number of ports), so that a filter never drops ports without a word.
    filtered_out: tuple[tuple[str, str, int], ...] = ()

    @property
    def hw_counter_only(self) -> tuple[InfiniBandPort, ...]:
        """Ports without counters/ but with hw_counters/: their congestion counters can be
        polled whether or not their bytes are sampled."""
        return tuple(
            p for p in (*self.ports, *self.unsampled) if not p.counters and p.has_hw_counters
        )

    def to_json(self) -> dict[str, object]:
        """`burstscope discover --json`, whose shape is SCHEMA_VERSION."""
        return {
            "schema_version": SCHEMA_VERSION,
            "ports": [_port_json(p) for p in self.ports],
            "not_sampled": [_port_json(p) for p in self.unsampled],
            "devices": [
                {
                    "device": d.device,
                    "board_id": d.board_id,
                    "fw_ver": d.fw_ver,
                    "hca_type": d.hca_type,
                }
                for d in self.devices
            ],
            "skipped": [
                {"device": s.device, "port": s.port, "reason": s.reason} for s in self.skipped
            ],
        }


def _port_json(p: InfiniBandPort) -> dict[str, object]:
    files = p.byte_files
    return {
        "device": p.device,
        "port": p.port,
        "link_layer": p.link_layer,
        "state": p.state.name if p.state else None,
        "phys_state": p.phys_state.name if p.phys_state else None,
        "rate_bytes_per_second": p.rate_bytes_per_second,
        "data_rate_bytes_per_second": p.data_rate_bytes_per_second,
        "rate_problem": p.rate_problem,
        "netdev": p.netdev,
        "bytes_from": None
        if files is None
        else {
            "directory": files.directory,
            "transmit": list(files.transmit),
            "receive": list(files.receive),
            "bytes_per_unit": files.bytes_per_unit,
            "resolution_seconds": files.min_read_interval_ns / 1e9,
        },
        "not_sampled": p.not_sampled,
        "saturated_counters": list(p.saturated),
        "counters": list(p.counters),
        "hw_counters": list(p.hw_counters),
    }


def parse_link_rate(text: str, link_layer: str = "InfiniBand") -> LinkRate | None:
    """The ``rate`` file as printed and as data; None when it gives no usable rate.

    A zero ("0 Gb/sec": not from mainline rate_show, whose least is 2.5) or text without
    "Gb/sec" is no rate. The encoding applies only to InfiniBand: on Ethernet and EFA the
    speed name is synthesized from an Ethernet speed or a device attribute
    (drivers/infiniband/core/verbs.c ib_get_width_and_speed, hw/mlx5/main.c
    translate_eth_*_proto_oper, hw/efa/efa_verbs.c efa_query_port) and the figure is a data
    rate already.
    """
    match = _RATE.match(text)
    if match is None:
        return None
    gbits = Fraction(match.group(1))
    if gbits <= 0:
        return None
    width = int(match.group(2)) if match.group(2) else None
    speed = (match.group(3) or "SDR") if width is not None else None
    printed = gbits * 1_000_000_000 / 8
    factor = Fraction(1)
    if link_layer == "InfiniBand" and speed is not None:
        factor = ENCODING_DATA_PER_PRINTED.get(speed, Fraction(1))
    return LinkRate(round(printed), round(printed * factor), width, speed)


def parse_rate(text: str) -> int | None:
    """Bytes per second as the ``rate`` file prints it (lane speed x width, in Gb/s).

    Exact for fractional lane rates: "2.5 Gb/sec (1X)" is 312,500,000 bytes/s.
    """
    found = parse_link_rate(text, "Unknown")
    return None if found is None else found.bytes_per_second


def rate_reading(path: Path, link_layer: str) -> tuple[LinkRate | None, str | None]:
    """The port's ``rate`` file read now, or None and why not (for discover and the log)."""
    try:
        text = read_attribute(path)
    except OSError as exc:
        # EINVAL: the width is unknown (rate_show: ib_width_enum_to_int() < 0), e.g. an mlx5
        # port without a cable; other errors are ib_query_port's.
        name = errno.errorcode.get(exc.errno or 0, "error")
        return None, f"rate: {name} ({exc.strerror})"
    found = parse_link_rate(text, link_layer)
    if found is None:
        return None, f"rate reads {text[:40]!r}, no usable line rate"
    return found, None


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
    device: str,
    port: int,
    port_path: Path,
    counters: tuple[str, ...],
    byte_files: ByteFiles | None,
    not_sampled: tuple[str, str] | None,
    saturated: tuple[str, ...] = (),
) -> InfiniBandPort:
    """The attributes every port has, read the same way whatever else it offers."""
    link_layer = _optional_text(port_path / "link_layer") or "Unknown"
    rate, rate_problem = rate_reading(port_path / "rate", link_layer)
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
        rate_bytes_per_second=rate.bytes_per_second if rate else None,
        netdev=_roce_netdev(port_path) if link_layer == "Ethernet" else None,
        counters=counters,
        hw_counters=tuple(_list_names(hw_dir)),
        has_hw_counters=hw_dir.is_dir(),
        data_rate_bytes_per_second=rate.data_bytes_per_second if rate else None,
        rate_problem=rate_problem,
        byte_files=byte_files,
        not_sampled=not_sampled[1] if not_sampled else None,
        not_sampled_reason=not_sampled[0] if not_sampled else None,
        saturated=saturated,
    )


def read_lifespan_ms(hw_dir: Path) -> int:
    """hw_counters/lifespan: the core's cache lifetime in ms (sysfs.c show_stats_lifespan)."""
    try:
        value = int(read_attribute(hw_dir / LIFESPAN))
    except (OSError, ValueError):
        return DEFAULT_LIFESPAN_MS
    return max(value, 0)


def _hw_byte_files(device: str, hw_dir: Path) -> tuple[ByteFiles | None, tuple[str, str] | None]:
    """The hw_counters files that hold this port's bytes, or None and why not (the
    NOT_SAMPLED_REASONS code, the sentence)."""
    names = set(_list_names(hw_dir))
    for known in HW_BYTE_COUNTERS:
        if not device.startswith(known.driver):
            continue
        transmit = tuple(n for n in known.transmit if n in names)
        receive = tuple(n for n in known.receive if n in names)
        if not transmit or not receive:
            wanted = ", ".join((*known.transmit, *known.receive))
            return None, (
                "no_byte_counter",
                f"hw_counters/ has none of {known.driver}'s byte counters ({wanted})",
            )
        unreadable = [
            _data_counter_problem(f"hw_counters/{n}", why)
            for n in (*transmit, *receive)
            if (why := unreadable_reason(hw_dir / n)) is not None
        ]
        if unreadable:
            return None, unreadable[0]
        # Reading faster than the cache lifetime repeats a value, then carries the whole
        # interval's bytes in one sample: no resolution finer than this is honest.
        period_ms = max(read_lifespan_ms(hw_dir), known.update_period_ms)
        return ByteFiles("hw_counters", transmit, receive, 1, period_ms * 1_000_000), None
    for driver, reason in NO_BYTE_COUNTER.items():
        if device.startswith(driver):
            return None, (driver if driver in NOT_SAMPLED_REASONS else "no_counters", reason)
    return None, (
        "no_byte_counter",
        "no counters/ directory and no known byte counter in hw_counters/",
    )


def _data_counter_problem(file: str, reason: str) -> tuple[str, str]:
    """An unreadable data counter as (NOT_SAMPLED_REASONS code, sentence)."""
    code = "no_pma" if _NO_PMA in reason else "unreadable"
    return code, f"{file}: {reason}"


def _parse_port(device: str, port_path: Path) -> tuple[InfiniBandPort, list[Skipped]]:
    """Every port, sampled or with the reason it is not; and unreadable files, with why."""
    port = int(port_path.name)
    counters_dir = port_path / "counters"
    if not counters_dir.is_dir():
        # efa, irdma, rxe, siw and bnxt_re (before its 2025 PMA) have no process_mad, hence
        # no counters/ (drivers/infiniband/core/sysfs.c add_port creates it only with one).
        hw_dir = port_path / "hw_counters"
        if hw_dir.is_dir():
            files, why = _hw_byte_files(device, hw_dir)
        else:
            files, why = (
                None,
                (
                    "no_counters",
                    "no counters/ or hw_counters/ directory (driver without a PMA)",
                ),
            )
        return _port_record(device, port, port_path, (), files, why), []
    skipped: list[Skipped] = []
    readable: list[str] = []
    problem: tuple[str, str] | None = None
    for name in _list_names(counters_dir):
        reason = unreadable_reason(counters_dir / name)
        if reason is None:
            readable.append(name)
        elif name in DATA_COUNTERS:
            problem = problem or _data_counter_problem(f"counters/{name}", reason)
        else:
            skipped.append(Skipped(device, port, f"counters/{name}: {reason}"))
    saturated = tuple(
        name
        for name in readable
        if name in PORT_COUNTER_WIDTHS
        and _optional_text(counters_dir / name) == str((1 << PORT_COUNTER_WIDTHS[name]) - 1)
    )
    missing = [name for name in DATA_COUNTERS if name not in readable]
    if problem is None and missing:
        problem = ("missing", f"counters/{missing[0]} is missing")
    if problem is not None:
        # Old kernels print "N/A (no PMA)" in every file of a PMA-less device (i40iw): the
        # port is still there, with its state and rate (sysfs.c show_pma_counter, pre-5.x).
        record = _port_record(device, port, port_path, tuple(readable), None, problem, saturated)
        return record, skipped
    files = ByteFiles("counters", ("port_xmit_data",), ("port_rcv_data",), DATA_COUNTER_OCTETS, 0)
    record = _port_record(device, port, port_path, tuple(readable), files, None, saturated)
    return record, skipped


def _device_info(device: str, device_path: Path) -> DeviceInfo:
    values = [_optional_text(device_path / name) or "" for name in DEVICE_INFO_FILES]
    return DeviceInfo(device, *values)


def compile_filter(pattern: str | None, what: str) -> re.Pattern[str] | None:
    """A device filter; raises ValueError naming the flag when the expression is invalid."""
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{what} {pattern!r} is not a valid regular expression: {exc}") from None


def filter_summary(
    found: Discovery, include: re.Pattern[str] | None, exclude: re.Pattern[str] | None
) -> str | None:
    """One line: how many ports (of which devices) each expression left out; None without
    expressions."""
    parts = []
    for name, pattern in (("include", include), ("exclude", exclude)):
        if pattern is None:
            continue
        removed = [(device, count) for device, by, count in found.filtered_out if by == name]
        devices = ", ".join(device for device, _ in removed)
        parts.append(
            f"{name} {pattern.pattern!r} left out {sum(c for _, c in removed)} port(s)"
            + (f" of {len(removed)} device(s) ({devices})" if removed else "")
        )
    return "; ".join(parts) if parts else None


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
    unsampled: list[InfiniBandPort] = []
    infos: list[DeviceInfo] = []
    filtered_out: list[tuple[str, str, int]] = []
    for device_path in devices:
        device = device_path.name
        removed_by = (
            "include"
            if include is not None and not include.search(device)
            else "exclude"
            if exclude is not None and exclude.search(device)
            else None
        )
        if removed_by is not None:
            filtered_out.append((device, removed_by, len(_numeric_entries(device_path / "ports"))))
            continue
        infos.append(_device_info(device, device_path))
        port_paths = _numeric_entries(device_path / "ports")
        if not port_paths:
            skipped.append(Skipped(device, None, "no ports/ directory"))
        for port_path in port_paths:
            found, notes = _parse_port(device, port_path)
            skipped.extend(notes)
            (ports if found.byte_files is not None else unsampled).append(found)
    return Discovery(
        tuple(ports), tuple(skipped), tuple(unsampled), tuple(infos), tuple(filtered_out)
    )
