"""PortCounters, state and rate gauges, sysfs hw_counters: the fixture tree and a writable copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from burstscope.collector.discovery import InfiniBandPort, discover
from burstscope.collector.sources.base import SlowReading
from burstscope.collector.sources.hw_counters import (
    HW_COUNTER_SPECS,
    HwCountersSysfsSource,
    hw_counter_spec,
)
from burstscope.collector.sources.port_counters import PORT_COUNTER_SPECS, PortCounterSource
from burstscope.detectors.counters import RESETTING_64, WRAPPING_32, CounterKind, CounterSpec
from tests.conftest import SYSFS


def sat(width: int) -> CounterSpec:
    return CounterSpec(CounterKind.SATURATING, width)


def ports(root: Path, *devices: str) -> list[InfiniBandPort]:
    return [p for p in discover(root).ports if p.device in devices]


def poll(source: PortCounterSource | HwCountersSysfsSource) -> list[SlowReading]:
    source.open()
    try:
        return source.poll()
    finally:
        source.close()


@pytest.mark.parametrize(
    ("name", "width"),
    [
        # drivers/infiniband/core/sysfs.c PORT_PMA_ATTR
        ("symbol_error", 16),
        ("link_error_recovery", 8),
        ("link_downed", 8),
        ("port_rcv_errors", 16),
        ("port_rcv_remote_physical_errors", 16),
        ("port_rcv_switch_relay_errors", 16),
        ("port_xmit_discards", 16),
        ("port_xmit_constraint_errors", 8),
        ("port_rcv_constraint_errors", 8),
        ("local_link_integrity_errors", 4),
        ("excessive_buffer_overrun_errors", 4),
        ("VL15_dropped", 16),
        ("port_xmit_wait", 32),
    ],
)
def test_port_counter_widths(name: str, width: int) -> None:
    assert PORT_COUNTER_SPECS[name] == sat(width)


def test_data_counters_are_not_slow() -> None:
    assert not {"port_xmit_data", "port_rcv_data"} & PORT_COUNTER_SPECS.keys()


def test_port_slow_on_the_infiniband_fixture_port() -> None:
    readings = poll(PortCounterSource(ports(SYSFS, "mlx5_0")))
    dev = ("mlx5_0", 1)
    expected = [
        SlowReading(*dev, "symbol_error", 0, sat(16)),
        SlowReading(*dev, "link_error_recovery", 0, sat(8)),
        SlowReading(*dev, "link_downed", 1, sat(8)),
        SlowReading(*dev, "port_rcv_errors", 0, sat(16)),
        SlowReading(*dev, "port_rcv_remote_physical_errors", 0, sat(16)),
        SlowReading(*dev, "port_rcv_switch_relay_errors", 0, sat(16)),
        SlowReading(*dev, "port_xmit_discards", 3, sat(16)),
        SlowReading(*dev, "port_xmit_constraint_errors", 0, sat(8)),
        SlowReading(*dev, "port_rcv_constraint_errors", 0, sat(8)),
        SlowReading(*dev, "local_link_integrity_errors", 0, sat(4)),
        SlowReading(*dev, "excessive_buffer_overrun_errors", 0, sat(4)),
        SlowReading(*dev, "VL15_dropped", 0, sat(16)),
        SlowReading(*dev, "port_xmit_wait", 4831, sat(32)),
        SlowReading(*dev, "state", 4, None),
        SlowReading(*dev, "phys_state", 5, None),
        SlowReading(*dev, "rate_bytes_per_second", 50_000_000_000, None),  # 400 Gb/sec
        SlowReading(*dev, "data_rate_bytes_per_second", 50_000_000_000, None),  # NDR: as printed
    ]
    assert readings == expected


def test_a_counter_reading_no_pma_is_skipped_and_counted() -> None:
    source = PortCounterSource(ports(SYSFS, "mlx5_2"))
    source.open()
    try:
        first = source.poll()
        second = source.poll()
    finally:
        source.close()
    dev = ("mlx5_2", 1)
    # symbol_error reads "N/A (no PMA)"; the port is DOWN (1) and Disabled (3) at 10 Gb/s.
    assert (
        first
        == second
        == [
            SlowReading(*dev, "link_downed", 0, sat(8)),
            SlowReading(*dev, "port_xmit_wait", 0, sat(32)),
            SlowReading(*dev, "state", 1, None),
            SlowReading(*dev, "phys_state", 3, None),
            SlowReading(*dev, "rate_bytes_per_second", 1_250_000_000, None),
            # "10 Gb/sec (4X)": the old unnamed SDR, 8b/10b, so 8 Gb/s of data.
            SlowReading(*dev, "data_rate_bytes_per_second", 1_000_000_000, None),
        ]
    )
    assert source.read_errors == 2
    assert source.last_error == "mlx5_2/1 symbol_error: reads 'N/A (no PMA)'"


def test_rewritten_files_are_seen_on_the_open_descriptors(sysfs_copy: Path) -> None:
    source = PortCounterSource(ports(sysfs_copy, "mlx5_0"))
    source.open()
    try:
        port = sysfs_copy / "class/infiniband/mlx5_0/ports/1"
        (port / "counters/symbol_error").write_text("65535\n")
        (port / "state").write_text("1: DOWN\n")
        (port / "rate").write_text("200 Gb/sec (4X HDR)\n")
        values = {r.name: r.value for r in source.poll()}
        # A file that starts failing mid-run is skipped, the rest carry on.
        (port / "counters/port_xmit_wait").write_text("N/A (no PMA)\n")
        later = {r.name: r.value for r in source.poll()}
    finally:
        source.close()
    assert (values["symbol_error"], values["state"]) == (65535, 1)
    assert values["rate_bytes_per_second"] == 25_000_000_000
    assert "port_xmit_wait" not in later and later["symbol_error"] == 65535
    assert source.read_errors == 1


@pytest.mark.parametrize(
    ("name", "spec"),
    [
        ("out_of_buffer", WRAPPING_32),
        ("out_of_sequence", WRAPPING_32),
        ("duplicate_request", WRAPPING_32),
        ("local_ack_timeout_err", WRAPPING_32),
        ("rx_write_requests", WRAPPING_32),
        ("np_cnp_sent", RESETTING_64),
        ("rp_cnp_handled", RESETTING_64),
        ("rp_cnp_ignored", RESETTING_64),
        ("np_ecn_marked_roce_packets", RESETTING_64),
        ("rx_icrc_encapsulated", RESETTING_64),
        ("ip4InOctets", RESETTING_64),  # not mlx5: the safe 64-bit default
        ("sent_pkts", RESETTING_64),  # rxe atomic64
    ],
)
def test_hw_counter_specs(name: str, spec: CounterSpec) -> None:
    assert hw_counter_spec(name) == spec


def test_hw_counter_table_has_no_gauges_or_lifespan() -> None:
    assert "lifespan" not in HW_COUNTER_SPECS


def test_hw_counters_on_the_roce_fixture_port() -> None:
    readings = poll(HwCountersSysfsSource(ports(SYSFS, "mlx5_1")))
    dev = ("mlx5_1", 1)
    assert readings == [
        SlowReading(*dev, "duplicate_request", 0, WRAPPING_32),
        SlowReading(*dev, "local_ack_timeout_err", 0, WRAPPING_32),
        SlowReading(*dev, "np_cnp_sent", 1520, RESETTING_64),
        SlowReading(*dev, "np_ecn_marked_roce_packets", 1533, RESETTING_64),
        SlowReading(*dev, "out_of_buffer", 0, WRAPPING_32),
        SlowReading(*dev, "out_of_sequence", 12, WRAPPING_32),
        SlowReading(*dev, "packet_seq_err", 0, WRAPPING_32),
        SlowReading(*dev, "rp_cnp_handled", 1498, RESETTING_64),
        SlowReading(*dev, "rp_cnp_ignored", 0, RESETTING_64),
        SlowReading(*dev, "rx_icrc_encapsulated", 0, RESETTING_64),
    ]


def test_hw_counters_of_a_port_without_counters_dir() -> None:
    # irdma0 has no counters/ (so discovery skips it) but does have hw_counters/.
    (irdma,) = discover(SYSFS).hw_counter_only
    assert (irdma.device, irdma.counters, irdma.hw_counter_names) == (
        "irdma0",
        (),
        ("ip4InOctets", "ip4OutOctets"),
    )
    assert poll(HwCountersSysfsSource([irdma])) == [
        SlowReading("irdma0", 1, "ip4InOctets", 123456, RESETTING_64),
        SlowReading("irdma0", 1, "ip4OutOctets", 654321, RESETTING_64),
    ]


def test_hw_counter_files_that_fail_are_skipped_and_counted(sysfs_copy: Path) -> None:
    hw = sysfs_copy / "class/infiniband/mlx5_1/ports/1/hw_counters"
    source = HwCountersSysfsSource(ports(sysfs_copy, "mlx5_1"))
    source.open()
    try:
        (hw / "out_of_buffer").write_text("garbage\n")
        names = [r.name for r in source.poll()]
    finally:
        source.close()
    assert "out_of_buffer" not in names and "np_cnp_sent" in names
    assert source.read_errors == 1
    assert source.last_error is not None and "out_of_buffer" in source.last_error


def test_a_missing_hw_counters_directory_is_counted() -> None:
    # mlx5_0 is an InfiniBand port: no hw_counters/ at all.
    source = HwCountersSysfsSource(ports(SYSFS, "mlx5_0"))
    assert poll(source) == []
    assert source.read_errors == 1
