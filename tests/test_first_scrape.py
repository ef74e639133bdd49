"""No series before its first reading: scrapes from the agent's first moment on large counters.

Prometheus takes any decrease of a counter for a reset (prometheus.io/docs/prometheus/latest/
querying/functions/#resets): a ``0`` served before the first reading, followed by the
kernel's cumulative value, makes ``rate()`` count every byte the port ever carried inside one
scrape interval. Here every counter file of a tree is set near the top of its width (the data
counters near 2^63/4 words, so their bytes still fit 64 bits), the trees stay still, and a
thread scrapes /metrics as fast as it can from before the agent binds it until every family
has appeared. Every value any scrape shows of a kernel-cumulative family must be absent or
the kernel's value; derived counters (bursts, saturated seconds) legitimately start at 0.
"""

from __future__ import annotations

import re
import shutil
import threading
import urllib.error
from collections.abc import Callable
from pathlib import Path

import numpy as np

from burstscope.collector.sources.hw_counters import hw_counter_spec
from burstscope.collector.sources.port_counters import PORT_COUNTER_SPECS
from burstscope.testing.emulated_node import EmulatedNode, agent_settings, scrape
from burstscope.testing.processes import free_port, wait_for
from tests.conftest import FIXTURES, SYSFS
from tests.test_exposition import SAMPLE

# The families that carry a kernel counter's cumulative value as the kernel shows it.
KERNEL_CUMULATIVE = (
    "burstscope_port_data_bytes_total",
    "burstscope_port_link_downed_total",
    "burstscope_port_errors_total",
    "burstscope_port_transmit_wait_total",
    "burstscope_port_congestion_packets_total",
    "burstscope_port_rdma_bytes_total",
    "burstscope_port_pfc_pause_frames_total",
    "burstscope_port_pfc_pause_seconds_total",
)
# port_{xmit,rcv}_data count 4-octet words (perfquery(8)): x4 must still fit 64 bits.
DATA_WORDS = (1 << 63) // 4 - (1 << 40)
LARGE_64 = 1 << 62


def large_value(path: Path) -> int:
    """A value near the top of the file's counter width (not all-ones: not stuck)."""
    name = path.name
    if name in ("port_xmit_data", "port_rcv_data"):
        return DATA_WORDS
    if path.parent.name == "counters" and name in PORT_COUNTER_SPECS:
        return PORT_COUNTER_SPECS[name].maximum * 3 // 4
    if path.parent.name == "hw_counters":
        return min(hw_counter_spec(name).maximum * 3 // 4, LARGE_64)
    return LARGE_64  # 64-bit: counters/ packets, netdev statistics/*_bytes


def enlarge(root: Path) -> dict[Path, int]:
    """Every counter file under ``root`` set large; returns what each now reads."""
    written = {}
    for path in sorted(root.rglob("*")):
        in_counters = path.parent.name in ("counters", "hw_counters", "statistics")
        if not path.is_file() or not in_counters or path.name == "lifespan":
            continue
        if not path.read_text().strip().isdigit():
            continue  # "N/A (no PMA)": the port's reason to stay unsampled, kept
        value = large_value(path)
        path.write_text(f"{value}\n")
        written[path] = value
    return written


def scrapes_from_start(
    arguments: list[str], complete: Callable[[str], bool], timeout: float = 60.0
) -> list[str]:
    """Every /metrics body a tight loop got, from before the agent binds to ``complete``."""
    from burstscope.agent import Agent

    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    bodies: list[str] = []
    done = threading.Event()

    def scraper() -> None:
        while not done.is_set():
            try:
                bodies.append(scrape(url, timeout=5))
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                continue  # not bound yet: the next try is the first possible moment

    thread = threading.Thread(target=scraper, name="first-scrapes")
    thread.start()
    agent = Agent(agent_settings([*arguments, "--listen", f"127.0.0.1:{port}"]))
    try:
        agent.start()
        wait_for(lambda: bodies and complete(bodies[-1]), timeout, "every family scraped", 0.05)
    finally:
        done.set()
        thread.join(10)
        agent.stop()
    return bodies


def cumulative_values(body: str) -> dict[str, float]:
    values = {}
    for line in body.splitlines():
        match = SAMPLE.match(line)
        if match and match.group("name").startswith(KERNEL_CUMULATIVE):
            values[match.group("series")] = float(match.group("value"))
    return values


def assert_absent_or_final(bodies: list[str]) -> dict[str, float]:
    """Every value seen equals the last scrape's (the trees are still): none is 0 first."""
    final = cumulative_values(bodies[-1])
    wrong = {
        (index, series): (value, final.get(series))
        for index, body in enumerate(bodies)
        for series, value in cumulative_values(body).items()
        if value != final.get(series)
    }
    assert wrong == {}
    # The scrapes began before the first drain (1 s after start), so the test saw the
    # moment the data counters appear.
    assert not [s for s in cumulative_values(bodies[0]) if "_data_bytes_" in s]
    # A 1 ms peak only of a port direction already read: before its first reading no
    # sample falls in any window, and a peak of 0 there would be a guess.
    guessed = [
        (index, direction)
        for index, body in enumerate(bodies)
        for direction in _directions(body, "burstscope_port_peak_utilization_ratio")
        - _directions(body, "burstscope_port_data_bytes_total")
    ]
    assert guessed == []
    assert _directions(bodies[-1], "burstscope_port_peak_utilization_ratio")
    return final


def _directions(body: str, name: str) -> set[str]:
    """The device, port and direction labels of every ``name`` series in ``body``."""
    return {
        ",".join(re.findall(r'(?:device|port|direction)="[^"]*"', line))
        for line in body.splitlines()
        if line.startswith(name + "{")
    }


def has(*fragments: str) -> Callable[[str], bool]:
    return lambda body: all(fragment in body for fragment in fragments)


def test_emulated_roce_node_from_the_first_scrape(tmp_path: Path) -> None:
    node = EmulatedNode(tmp_path, ["mlx5_0", "mlx5_1"]).build()
    written = enlarge(tmp_path)
    bodies = scrapes_from_start(
        ["--source", "sysfs", "--sysfs-root", str(node.root)],
        has(
            *(f'data_bytes_total{{device="{d}",direction="receive"' for d in node.devices),
            *(
                f'congestion_packets_total{{counter="rp_cnp_ignored",device="{d}"'
                for d in node.devices
            ),
            'burstscope_port_link_downed_total{device="mlx5_1"',
            'burstscope_port_transmit_wait_total{device="mlx5_1"',
            'burstscope_port_errors_total{counter="symbol_error",device="mlx5_1"',
        ),
    )
    final = assert_absent_or_final(bodies)
    counters = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "counters"
    hw = counters.parent / "hw_counters"
    # The final values are the kernel's: x4 for the data words, as read for the rest.
    expected = {
        'burstscope_port_data_bytes_total{device="mlx5_0",direction="transmit",port="1"}': 4
        * written[counters / "port_xmit_data"],
        'burstscope_port_link_downed_total{device="mlx5_0",port="1"}': written[
            counters / "link_downed"
        ],
        'burstscope_port_transmit_wait_total{device="mlx5_0",port="1"}': written[
            counters / "port_xmit_wait"
        ],
        'burstscope_port_errors_total{counter="symbol_error",device="mlx5_0",port="1"}': written[
            counters / "symbol_error"
        ],
        'burstscope_port_congestion_packets_total{counter="np_cnp_sent",device="mlx5_0",'
        'port="1"}': written[hw / "np_cnp_sent"],
    }
    assert {series: final.get(series) for series in expected} == {
        series: float(value) for series, value in expected.items()
    }


def test_hw_counters_devices_from_the_first_scrape(tmp_path: Path) -> None:
    """EFA and bnxt_re bytes from hw_counters/, EFA's RDMA bytes, mlx4's PortCounters."""
    root = tmp_path / "sys"
    shutil.copytree(FIXTURES / "hardware" / "sys", root)
    enlarge(root)
    bodies = scrapes_from_start(
        ["--source", "sysfs", "--sysfs-root", str(root)],
        has(
            'data_bytes_total{device="efa_0",direction="receive"',
            'data_bytes_total{device="bnxt_re0",direction="receive"',
            'data_bytes_total{device="mlx4_0",direction="receive"',
            'burstscope_port_rdma_bytes_total{counter="rdma_write_bytes",device="efa_0"',
            'burstscope_port_errors_total{counter="symbol_error",device="mlx4_0"',
        ),
    )
    assert_absent_or_final(bodies)


def test_netdev_source_from_the_first_scrape(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    shutil.copytree(SYSFS, root)
    statistics = root / "class" / "net" / "ens1f1np1" / "statistics"
    written = enlarge(statistics)
    assert written
    bodies = scrapes_from_start(
        ["--source", "netdev:ens1f1np1", "--sysfs-root", str(root), "--no-ethtool"],
        has('data_bytes_total{device="ens1f1np1",direction="receive"'),
    )
    final = assert_absent_or_final(bodies)
    series = 'burstscope_port_data_bytes_total{device="ens1f1np1",direction="transmit",port="1"}'
    assert final[series] == float(written[statistics / "tx_bytes"])


def test_pfc_counters_from_the_first_scrape(tmp_path: Path) -> None:
    """PFC comes from ethtool on a real mlx5 netdev; here from a trace played back
    (replay:PATH), whose pause counters start where a long-running port's would be."""
    from burstscope.collector.trace import PortColumns, SlowRow, TraceWriter
    from burstscope.detectors.counters import RESETTING_64

    trace = tmp_path / "trace"
    trace.mkdir()
    writer = TraceWriter(trace)
    start = 1_700_000_000_000_000_000
    rows = 3000
    stamps = start + np.arange(1, rows + 1, dtype=np.int64) * 1_000_000
    carried = np.uint64(LARGE_64) + np.arange(1, rows + 1, dtype=np.uint64) * np.uint64(1000)
    zeros = np.zeros(rows, dtype=np.int64)
    writer.append(
        [PortColumns("mlx5_0", 1, 50_000_000_000, stamps, carried, carried, zeros, zeros != 0)]
    )
    pause = LARGE_64 + 7
    writer.append_slow(
        [
            SlowRow(start + second * 1_000_000_000, "mlx5_0", 1, name, value, RESETTING_64, False)
            for second in range(3)
            for name, value in (("rx_prio3_pause", pause), ("rx_prio3_pause_duration", pause))
        ]
    )
    writer.close()
    bodies = scrapes_from_start(
        ["--source", f"replay:{trace}"],
        has(
            'burstscope_port_pfc_pause_frames_total{device="mlx5_0",direction="receive"',
            'burstscope_port_pfc_pause_seconds_total{device="mlx5_0"',
        ),
    )
    seen = [cumulative_values(body) for body in bodies]
    frames = (
        'burstscope_port_pfc_pause_frames_total{device="mlx5_0",direction="receive",port="1",'
        'priority="3"}'
    )
    assert {values[frames] for values in seen if frames in values} == {float(pause)}
    # Played back, the data counter moves; it must never read below where the trace began.
    data = 'burstscope_port_data_bytes_total{device="mlx5_0",direction="transmit",port="1"}'
    assert all(values[data] >= float(LARGE_64) for values in seen if data in values)
