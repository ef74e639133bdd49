"""Every port the kernel shows, read the way its ABI says, on trees built for it.

tests/fixtures/hardware/sys (written by tests/fixtures/hardware/build.py) holds one device
per case: a QDR port with a 32-bit port_xmit_wait stuck at all-ones, an FDR port, a zero
and a missing rate, an i40iw port reading "N/A (no PMA)", an EFA device, bnxt_re and rxe.
The agent and discover run as real processes on it; the renegotiation runs on the
emulated sysfs writer. Regenerate goldens: ``pytest tests/test_hardware.py --update-golden``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from burstscope.collector.discovery import parse_link_rate
from burstscope.collector.simulation.model import TrafficModel
from burstscope.collector.simulation.sysfs_writer import SysfsWriter
from burstscope.testing.emulated_node import CounterWriter, EmulatedNode, Load
from burstscope.testing.processes import AgentProcess, wait_until
from tests.conftest import FIXTURES, compare_golden
from tests.test_exposition import normalize

TREE = FIXTURES / "hardware" / "sys"
DISCOVERY_GOLDEN = FIXTURES / "hardware" / "discovery.golden.json"
EXPOSITION_GOLDEN = FIXTURES / "hardware" / "exposition.golden.prom"
# What the exposition golden waits for (here and in the container image's test): the slow
# poll landed (state of every port, sampled or not), every port's samples drained,
# hw_counters ones included, and a sample of each port read at every tick in a peak window
# (a port's first reading gives its bytes, its second its first utilization sample).
GOLDEN_READY = (
    'burstscope_port_state{device="rxe0",port="1"}',
    'burstscope_port_physical_state{device="i40iw0",port="1"}',
    'burstscope_port_stuck_at_all_ones{counter="port_xmit_wait",device="mlx4_0",port="1"}',
    'burstscope_port_data_bytes_total{device="mlx5_5",direction="receive",port="1"} 800000.0',
    'burstscope_port_data_bytes_total{device="bnxt_re0",direction="receive",port="1"} 6000.0',
    'burstscope_port_data_bytes_total{device="efa_0",direction="receive",port="1"} 9.87654321e+08',
    *(
        f'burstscope_port_peak_utilization_ratio{{device="{device}",direction="receive",'
        'port="1",window="75s"}'
        for device in ("mlx4_0", "mlx4_1", "efa_0")
    ),
)
GBIT = Fraction(1_000_000_000, 8)  # bytes per second in one Gb/s

# drivers/infiniband/core/sysfs.c rate_show: per-lane deci-Gb/s 25, 50, 100, 100, 140, 250,
# 500, 1000, 2000 for SDR .. XDR, times the width; data rate per lane after line encoding:
# SDR/DDR/QDR 8b/10b (x 0.8); FDR 14.0625 Gbaud 64b/66b (ib_rate_to_mbps: 14 -> 14062);
# FDR10, EDR, HDR, NDR, XDR: the printed figure is the data rate.
SPEEDS = {
    # name: (printed Gb/s per lane, data Gb/s per lane, kernel source of the figure)
    "SDR": (Fraction(5, 2), Fraction(2), "sysfs.c rate_show IB_SPEED_SDR 25; 8b/10b"),
    "DDR": (Fraction(5), Fraction(4), "sysfs.c rate_show IB_SPEED_DDR 50; 8b/10b"),
    "QDR": (Fraction(10), Fraction(8), "sysfs.c rate_show IB_SPEED_QDR 100; 8b/10b"),
    "FDR10": (Fraction(10), Fraction(10), "sysfs.c rate_show IB_SPEED_FDR10 100; 64b/66b"),
    "FDR": (
        Fraction(14),
        Fraction(140625, 10000) * Fraction(64, 66),
        "sysfs.c rate_show IB_SPEED_FDR 140; verbs.c ib_rate_to_mbps 14062; 64b/66b",
    ),
    "EDR": (Fraction(25), Fraction(25), "sysfs.c rate_show IB_SPEED_EDR 250"),
    "HDR": (Fraction(50), Fraction(50), "sysfs.c rate_show IB_SPEED_HDR 500"),
    "NDR": (Fraction(100), Fraction(100), "sysfs.c rate_show IB_SPEED_NDR 1000"),
    "XDR": (Fraction(200), Fraction(200), "sysfs.c rate_show IB_SPEED_XDR 2000"),
}
WIDTHS = (1, 2, 4, 8, 12)  # include/rdma/ib_verbs.h ib_width_enum_to_int


def _printed(gbits: Fraction) -> str:
    # rate_show prints "%d%s" with ".5" for the one fractional case (2.5, 1X SDR).
    return f"{int(gbits)}.5" if gbits.denominator == 2 else str(int(gbits))


RATE_TABLE = [
    pytest.param(
        f"{_printed(lane * width)} Gb/sec ({width}X {speed})",
        round(lane * width * GBIT),
        round(data * width * GBIT),
        id=f"{width}X-{speed} ({source})",
    )
    for speed, (lane, data, source) in SPEEDS.items()
    for width in WIDTHS
] + [
    # Kernels before 5.x printed SDR without its name (old sysfs.c rate_show: speed "").
    pytest.param(
        f"{_printed(Fraction(5, 2) * width)} Gb/sec ({width}X)",
        round(Fraction(5, 2) * width * GBIT),
        round(2 * width * GBIT),
        id=f"{width}X-unnamed-SDR (pre-5.x sysfs.c rate_show)",
    )
    for width in WIDTHS
]


@pytest.mark.parametrize(("text", "printed", "data"), RATE_TABLE)
def test_every_rate_the_kernel_prints_and_its_data_rate(text: str, printed: int, data: int) -> None:
    found = parse_link_rate(text, "InfiniBand")
    assert found is not None
    assert (found.bytes_per_second, found.data_bytes_per_second) == (printed, data)
    # On Ethernet and EFA the name is synthesized from an Ethernet speed or a device
    # attribute (verbs.c ib_get_width_and_speed, efa_verbs.c efa_query_port): as printed.
    for link_layer in ("Ethernet", "Unknown"):
        other = parse_link_rate(text, link_layer)
        assert other is not None and other.data_bytes_per_second == printed


def test_qdr_and_fdr_data_rates_after_line_encoding() -> None:
    qdr = parse_link_rate("40 Gb/sec (4X QDR)")
    fdr = parse_link_rate("56 Gb/sec (4X FDR)")
    assert qdr is not None and qdr.data_bytes_per_second * 8 == 32_000_000_000
    assert fdr is not None and round(fdr.data_bytes_per_second * 8 / 1e6) == 54_545


@pytest.mark.parametrize("text", ["0 GB/sec", "0 Gb/sec", "", "Unknown", "N/A"])
def test_no_usable_rate(text: str) -> None:
    assert parse_link_rate(text) is None


def burstscope(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "burstscope", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "400"},  # a table row per port, unwrapped
    )


def test_discover_json_golden(update_golden: bool) -> None:
    result = burstscope("discover", "--sysfs-root", str(TREE), "--json")
    assert result.returncode == 0, result.stderr
    compare_golden(DISCOVERY_GOLDEN, result.stdout, update_golden)
    found = json.loads(result.stdout)
    ports = {p["device"]: p for p in found["ports"]}
    kept = {p["device"]: p for p in found["not_sampled"]}
    assert ports["mlx4_0"]["saturated_counters"] == ["port_xmit_wait"]
    assert ports["mlx5_4"]["rate_problem"] == "rate reads '0 GB/sec', no usable line rate"
    assert ports["mlx5_5"]["data_rate_bytes_per_second"] is None
    assert ports["efa_0"]["bytes_from"]["transmit"] == ["tx_bytes"]
    assert ports["bnxt_re0"]["bytes_from"]["resolution_seconds"] == 1.0
    assert set(kept) == {"i40iw0", "rxe0"}
    assert kept["i40iw0"]["state"] == "ACTIVE" and kept["i40iw0"]["rate_bytes_per_second"]


def test_discover_table_says_why() -> None:
    result = burstscope("discover", "--sysfs-root", str(TREE))
    assert result.returncode == 0, result.stderr
    rows = {line.split()[1]: line for line in result.stdout.splitlines() if line.count("│") > 2}
    # Each port's notes follow the table as lines of their own ("DEVICE/PORT: note").
    for line in result.stdout.splitlines():
        device = line.split("/", 1)[0]
        if device in rows and not line.startswith("│"):
            rows[device] += " " + line
    assert "stuck at all-ones: port_xmit_wait" in rows["mlx4_0"]
    assert "54.5455 Gb/s" in rows["mlx4_1"]
    assert "no usable line rate" in rows["mlx5_4"] and "--line-rate-for" in rows["mlx5_4"]
    assert "not sampled: counters/" in rows["i40iw0"]
    assert "resolution 1000 ms" in rows["bnxt_re0"]


@pytest.fixture
def agent_on_tree() -> Iterator[AgentProcess]:
    agent = AgentProcess("--sysfs-root", str(TREE))
    try:
        yield agent
    finally:
        assert agent.run.stop() == 0, agent.run.stderr


def test_no_port_stops_the_agent_and_the_exposition_golden(
    agent_on_tree: AgentProcess, update_golden: bool
) -> None:
    body = agent_on_tree.scrape_when(*GOLDEN_READY)
    compare_golden(EXPOSITION_GOLDEN, normalize(body), update_golden)
    # Bytes sampled and exported for the zero and the missing rate; no utilization there.
    for device in ("mlx5_4", "mlx5_5"):
        assert f'burstscope_port_data_bytes_total{{device="{device}",direction="transmit"' in body
        assert f'burstscope_port_utilization_ratio_count{{device="{device}"' not in body
        assert f'burstscope_port_line_rate_bytes_per_second{{device="{device}"' not in body
    # Data rate after encoding: QDR 32 Gb/s, FDR 54.545 Gb/s.
    assert 'burstscope_port_line_rate_bytes_per_second{device="mlx4_0",port="1"} 4e+09' in body
    assert (
        'burstscope_port_line_rate_bytes_per_second{device="mlx4_1",port="1"} 6.818181818e+09'
        in body
    )
    # i40iw0 is not sampled, yet its line rate (Ethernet: as printed) is exported.
    assert 'burstscope_port_line_rate_bytes_per_second{device="i40iw0",port="1"} 5e+09' in body
    # Slow counters as the kernel shows them, stuck one flagged.
    assert 'burstscope_port_transmit_wait_total{device="mlx4_0",port="1"} 4.294967295e+09' in body
    # EFA bytes, in bytes, at the lifespan's resolution; its RDMA byte counters.
    assert (
        'burstscope_port_data_bytes_total{device="efa_0",direction="transmit",port="1"} '
        "1.23456789e+08" in body
    )
    assert 'burstscope_port_resolution_seconds{device="efa_0",port="1"} 0.01' in body
    assert 'burstscope_port_resolution_seconds{device="bnxt_re0",port="1"} 1.0' in body
    assert (
        'burstscope_port_rdma_bytes_total{counter="rdma_write_bytes",device="efa_0",port="1"} 5e+06'
        in body
    )
    # Kept, not sampled, with why: an enumerated reason; the sentence is in the log.
    assert 'burstscope_port_not_sampled{device="i40iw0",port="1",reason="no_pma"} 1.0' in body
    assert 'burstscope_port_not_sampled{device="rxe0",port="1",reason="rxe"} 1.0' in body
    assert (
        'burstscope_device_info{board_id="MT_1090120019",device="mlx4_0",fw_ver="2.42.5000",'
        'hca_type="MT4099"} 1.0' in body
    )
    log = agent_on_tree.run
    note = log.wait_log("mlx5_4 port 1: line rate unknown")
    assert "--line-rate-for DEVICE=GBITS" in note and "[source.line_rates]" in note
    log.wait_log("efa_0 port 1: the kernel caches its counters for 10 ms")
    log.wait_log("rxe0 port 1: not sampled: rxe has no byte counter")


def test_line_rate_override_in_the_file_and_on_the_command_line(tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text("[source.line_rates]\nmlx5_4 = 100\nmlx4_0 = 1\n")
    agent = AgentProcess(
        "--sysfs-root", str(TREE), "--config", str(config), "--line-rate-for", "mlx4_0=40"
    )
    try:
        body = agent.scrape_when(
            'burstscope_port_line_rate_bytes_per_second{device="mlx5_4",port="1"} 1.25e+10',
            'burstscope_port_state{device="mlx5_4",port="1"}',
        )
        # The command line wins over the file, device by device.
        assert 'burstscope_port_line_rate_bytes_per_second{device="mlx4_0",port="1"} 5e+09' in body
        assert 'burstscope_port_utilization_ratio_count{device="mlx5_4",direction="receive"' in body
    finally:
        assert agent.run.stop() == 0, agent.run.stderr
    bad = burstscope("agent", "--sysfs-root", str(TREE), "--line-rate-for", "mlx5_4")
    assert bad.returncode == 2 and "DEVICE=GBITS" in bad.stderr


def gauge(body: str, name: str, device: str) -> float | None:
    match = re.search(rf'^{name}\{{device="{device}",port="1"\}} (\S+)$', body, re.MULTILINE)
    return float(match.group(1)) if match else None


def mean_utilization(agent: AgentProcess, device: str, samples: int = 1500) -> float:
    """Mean per-sample transmit utilization over the next ``samples`` samples, from the
    histogram's sum and count (what a rate() of both would give)."""

    def read() -> tuple[float, float]:
        try:
            body = agent.scrape()
        except OSError:
            body = ""
        values = []
        for part in ("sum", "count"):
            name = f"burstscope_port_utilization_ratio_{part}"
            match = re.search(
                rf'^{name}\{{device="{device}",direction="transmit",port="1"\}} (\S+)$',
                body,
                re.MULTILINE,
            )
            values.append(float(match.group(1)) if match else 0.0)
        return values[0], values[1]

    first = read()
    last: list[tuple[float, float]] = [first]

    def enough() -> bool:
        last[0] = read()
        return last[0][1] - first[1] >= samples

    assert wait_until(enough)
    return (last[0][0] - first[0]) / (last[0][1] - first[1])


def test_a_renegotiated_link_is_divided_by_its_new_rate(tmp_path: Path) -> None:
    """400 Gb/s carrying 80 Gb/s (20%); the link drops to 200 Gb/s: 40% from then on."""
    node = EmulatedNode(tmp_path / "sys", ["mlx5_0"]).build()
    writer = CounterWriter(node)
    writer.set_load("mlx5_0", "transmit", Load(0.2))
    with writer.running_in_thread():
        agent = AgentProcess("--sysfs-root", str(node.root), "--record", str(tmp_path / "trace"))
        try:
            body = agent.scrape_when(
                'burstscope_port_line_rate_bytes_per_second{device="mlx5_0",port="1"} 5e+10'
            )
            assert "burstscope_port_rate_changes_total" not in body  # from the first change
            assert 0.15 < mean_utilization(agent, "mlx5_0") < 0.25
            (node.root / "class/infiniband/mlx5_0/ports/1/rate").write_text("200 Gb/sec (2X NDR)\n")
            agent.scrape_when(
                'burstscope_port_rate_changes_total{device="mlx5_0",port="1"} 1.0',
                'burstscope_port_line_rate_bytes_per_second{device="mlx5_0",port="1"} 2.5e+10',
            )
            # Every sample from now on divides by 200 Gb/s: 80/200.
            assert 0.33 < mean_utilization(agent, "mlx5_0") < 0.47
            agent.run.wait_log("mlx5_0 port 1: line rate 400 Gb/s -> 200 Gb/s")
        finally:
            assert agent.run.stop() == 0, agent.run.stderr
    # The trace records the rate in force per row, in time order: 400 then 200 Gb/s.
    (run,) = (tmp_path / "trace").iterdir()
    table = pq.read_table(run, columns=["timestamp_us", "line_rate_bytes_per_second"])
    rates = table.sort_by("timestamp_us").column("line_rate_bytes_per_second").to_pylist()
    first_low = rates.index(25_000_000_000)
    assert set(rates[:first_low]) == {50_000_000_000} and set(rates[first_low:]) == {25_000_000_000}
    # The report divides each interval by the rate in force and says so.
    report = burstscope("report", str(run), "--json")
    assert report.returncode == 0, report.stderr
    assert "line rate changed from 400 to 200 Gb/s" in report.stdout


def test_renegotiation_on_the_emulated_sysfs_writer(tmp_path: Path) -> None:
    """The simulated training node's writer retrains mlx5_0 from 4X NDR to 4X HDR."""
    writer = SysfsWriter(tmp_path / "sys", TrafficModel("dense", 3))
    writer.create()
    stop = threading.Event()
    thread = threading.Thread(target=writer.run, kwargs={"stop": stop}, daemon=True)
    thread.start()
    agent = AgentProcess("--sysfs-root", str(writer.root))
    try:
        agent.scrape_when(
            'burstscope_port_line_rate_bytes_per_second{device="mlx5_0",port="1"} 5e+10'
        )
        writer.set_rate(0, "200 Gb/sec (4X HDR)")
        body = agent.scrape_when(
            'burstscope_port_line_rate_bytes_per_second{device="mlx5_0",port="1"} 2.5e+10',
            'burstscope_port_rate_changes_total{device="mlx5_0",port="1"} 1.0',
        )
        assert gauge(body, "burstscope_port_rate_changes_total", "mlx5_1") is None
        assert gauge(body, "burstscope_port_line_rate_bytes_per_second", "mlx5_1") == 5e10
    finally:
        assert agent.run.stop() == 0, agent.run.stderr
        stop.set()
        thread.join(5)
        writer.close()


def test_pfc_pause_time_is_exported_in_seconds_for_priorities_that_paused(
    tmp_path: Path,
) -> None:
    """ethtool's rx_prio<N>_pause_duration (microseconds) through a real agent: no RoCE NIC
    here, so the readings come from a recorded trace played back (replay:PATH)."""
    import numpy as np

    from burstscope.collector.trace import PortColumns, SlowRow, TraceWriter
    from burstscope.detectors.counters import RESETTING_64

    trace = tmp_path / "trace"
    trace.mkdir()
    writer = TraceWriter(trace)
    start = 1_700_000_000_000_000_000
    stamps = start + np.arange(1, 4001, dtype=np.int64) * 1_000_000
    bytes_ = np.arange(1, 4001, dtype=np.uint64) * np.uint64(1000)
    writer.append(
        [
            PortColumns(
                "mlx5_0", 1, 50_000_000_000, stamps, bytes_, bytes_,
                np.zeros(4000, dtype=np.int64), np.zeros(4000, dtype=np.bool_),
            )
        ]
    )  # fmt: skip
    writer.append_slow(
        [
            SlowRow(start + second * 1_000_000_000, "mlx5_0", 1, name, value, RESETTING_64, False)
            for second in range(4)
            for name, value in (
                ("rx_prio3_pause_duration", 250_000 * second),  # microseconds
                ("rx_prio3_pause", 40 * second),
                ("rx_prio5_pause_duration", 0),  # never paused: no series
            )
        ]
    )
    writer.close()
    agent = AgentProcess("--source", f"replay:{trace}")
    try:
        # 750,000 us after three seconds of playback: 0.75 s paused on priority 3.
        body = agent.scrape_when(
            'burstscope_port_pfc_pause_seconds_total{device="mlx5_0",port="1",priority="3"} 0.75'
        )
        assert 'pfc_pause_seconds_total{device="mlx5_0",port="1",priority="5"}' not in body
    finally:
        assert agent.run.stop() == 0, agent.run.stderr
