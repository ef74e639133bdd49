"""The emulated sysfs tree and SimSource: the agent's real read paths over the model."""

from __future__ import annotations

import itertools
import os
import pickle
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from burstscope.cli import main
from burstscope.collector.discovery import discover
from burstscope.collector.simulation.model import TrafficModel
from burstscope.collector.simulation.sysfs_writer import SysfsWriter
from burstscope.collector.sources import SourceOptions, build_source
from burstscope.collector.sources.base import STATUS_OK, STATUS_REBASELINE, SampleRow, SourceError
from burstscope.collector.sources.infiniband import InfiniBandSource
from burstscope.collector.sources.sim import SimSource
from burstscope.collector.tracegen import sample_times
from burstscope.detectors.analyzer import analyze

PROFILE_NAMES = ("moe", "dense", "idle-heavy")


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[SysfsWriter]:
    writer = SysfsWriter(tmp_path / "sys", TrafficModel("moe", 2))
    writer.create()
    yield writer
    writer.close()


def test_discovery_finds_the_nine_ports_with_their_rates(tree: SysfsWriter) -> None:
    found = discover(tree.root)
    assert found.skipped == ()
    assert [(p.device, p.port, p.rate_bytes_per_second) for p in found.ports] == [
        (f"mlx5_{i}", 1, 50_000_000_000) for i in range(8)
    ] + [("mlx5_8", 1, 25_000_000_000)]
    port = found.ports[0]
    assert port.state is not None and port.phys_state is not None
    assert (port.link_layer, port.state.name, port.phys_state.name, port.netdev) == (
        "Ethernet",
        "ACTIVE",
        "LinkUp",
        "ens1np0",
    )
    assert {"port_xmit_data", "port_rcv_data", "port_xmit_wait", "symbol_error"} <= set(
        port.counters
    )
    assert {"np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets"} <= set(port.hw_counters)


def test_values_read_through_the_infiniband_source_equal_the_model(tree: SysfsWriter) -> None:
    source = InfiniBandSource(str(tree.root))
    source.open()
    row = SampleRow.for_ports(9)
    reference = TrafficModel("moe", 2)
    try:
        for t in (1_000_000, 250_000_000, 1_700_000_000, 9_000_000_000):
            tree.update_fast(t)
            source.read_into(row)
            xmit, rcv = reference.counters_at([t])
            assert row.xmit_bytes == (xmit[:, 0] // 4 * 4).tolist()
            assert row.rcv_bytes == (rcv[:, 0] // 4 * 4).tolist()
    finally:
        source.close()


def test_congestion_counters_rise_only_with_saturation(tree: SysfsWriter) -> None:
    def read(name: str) -> int:
        return int((tree.port_path(0) / name).read_text())

    for t in range(0, 30_000_000_000, 1_000_000):
        tree.update_fast(t)
    tree.update_slow(30_000_000_000)
    assert read("counters/port_xmit_wait") > 0
    assert read("hw_counters/np_ecn_marked_roce_packets") > read("hw_counters/np_cnp_sent") > 0
    assert read("counters/port_xmit_packets") > 0
    assert read("counters/symbol_error") == 0


def test_a_reader_on_an_open_descriptor_never_sees_a_torn_value(tmp_path: Path) -> None:
    writer = SysfsWriter(tmp_path / "sys", TrafficModel("moe", 1))
    writer.create()
    path = writer.port_path(0) / "counters" / "port_xmit_data"
    # Rising values that cross a decimal length (the risky case), written as fast as possible.
    current = int(path.read_text())
    power = 10 ** len(str(current))
    first = max(current + 1, power - 7 * 10_000)
    written = [first + 7 * i for i in range(20_000)] + [10 * power + i for i in range(20_000)]
    assert written[0] < power < written[-1]
    seen: list[bytes] = []
    done = threading.Event()

    def reader() -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            while not done.is_set():
                seen.append(os.pread(fd, 32, 0))
        finally:
            os.close(fd)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for value in written:
            writer._put(0, "counters/port_xmit_data", value)  # the writer's one write path
    finally:
        done.set()
        thread.join()
        writer.close()
    values = [int(text) for text in seen]  # every read parses
    allowed = set(written) | {values[0]}
    assert all(v in allowed for v in values)
    assert all(b >= a for a, b in itertools.pairwise(values))
    assert len(seen) > 100


def test_a_shrinking_value_is_padded_not_truncated(tree: SysfsWriter) -> None:
    tree._put(0, "hw_counters/np_cnp_sent", 123_456)
    tree._put(0, "hw_counters/np_cnp_sent", 7)  # a 32-bit counter wrapped
    text = (tree.port_path(0) / "hw_counters" / "np_cnp_sent").read_bytes()
    assert text == b"     7\n" and int(text) == 7  # same length as "123456\n"


def test_simulate_sysfs_runs_in_real_time_and_the_agent_reads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "live"
    assert main(["simulate", "--sysfs", str(root), "--duration", "0.3"]) == 0
    out = capsys.readouterr().out
    assert "emulated sysfs under" in out and "stopped after" in out
    assert len(discover(root).ports) == 9
    status = main(["simulate", "--sysfs", str(root), "--duration", "0.1"])
    assert status == 2 and "not empty" in capsys.readouterr().err


def test_sim_source_is_picklable_and_reads_the_model_at_the_sample_time() -> None:
    source = pickle.loads(pickle.dumps(build_source("sim:dense:4", SourceOptions())))
    assert isinstance(source, SimSource)
    assert source.name == "sim:dense" and len(source.ports) == 9
    assert source.ports[8].line_rate_bytes_per_second == 25_000_000_000
    source.open()
    row = SampleRow.for_ports(9)
    reference = TrafficModel("dense", 4)
    try:
        for tick in range(50):
            source.read_into(row)
            assert row.status == [STATUS_REBASELINE if tick == 0 else STATUS_OK] * 9
            model_time = np.array(row.timestamp_ns) - source.zero_monotonic_ns
            xmit, rcv = reference.counters_at(model_time)
            assert row.xmit_bytes == (np.diag(xmit) // 4 * 4).tolist()
            assert row.rcv_bytes == (np.diag(rcv) // 4 * 4).tolist()
            assert all(0 <= d < 1_000_000 for d in row.read_ns)
            time.sleep(0.001)
    finally:
        source.close()
    schedule = source.schedule(source.zero_monotonic_ns, source.zero_monotonic_ns + 10**10)
    assert len(schedule) > 0 and schedule.start_ns.min() >= source.zero_monotonic_ns


def test_sim_source_rejects_bad_specs() -> None:
    with pytest.raises(SourceError, match="unknown profile 'sparse'"):
        build_source("sim:sparse", SourceOptions())
    with pytest.raises(SourceError, match="seed 'x' is not an integer"):
        build_source("sim:moe:x", SourceOptions())


# -- ground truth: the detectors recover the schedule --------------------------------------


def sample_grid(seconds: int, seed: int) -> np.ndarray:
    return sample_times(0, seconds * 1000 + 1, 1_000_000, 9, seed).midpoint_ns


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_detected_bursts_match_the_schedule(profile: str) -> None:
    seconds = 200 if profile == "idle-heavy" else 40
    model = TrafficModel(profile, 11)
    times = sample_grid(seconds, 11)
    xmit, rcv = model.counters_at(times)
    schedule = TrafficModel(profile, 11).schedule(0, seconds * 10**9)
    scheduled = detected = 0
    for port, spec in enumerate(model.ports):
        for direction, values in enumerate((xmit, rcv)):
            stamps = times[port]
            _, bursts = analyze(stamps, values[port] // 4 * 4, spec.line_rate_bytes_per_second)
            truth = schedule.select(port, direction)
            # Bursts cut by the ends of the trace are not comparable.
            lo, hi = stamps[0] + 2_000_000, stamps[-1] - 2_000_000
            truth_starts = truth.start_ns[(truth.start_ns > lo) & (truth.end_ns < hi)]
            found = bursts.start_ns[(bursts.start_ns > lo) & (bursts.end_ns < hi)]
            scheduled += len(truth_starts)
            detected += len(found)
            if len(found) == 0 or len(truth_starts) == 0:
                assert len(found) == len(truth_starts)
                continue
            nearest = np.clip(np.searchsorted(truth_starts, found), 1, len(truth_starts) - 1)
            distance = np.minimum(
                np.abs(found - truth_starts[nearest - 1]), np.abs(found - truth_starts[nearest])
            )
            assert distance.max() <= 2_000_000
    assert scheduled > 500
    assert abs(detected - scheduled) <= 0.02 * scheduled


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_emulated_sysfs_gives_the_same_bursts_as_the_direct_path(
    profile: str, tmp_path: Path
) -> None:
    seconds = 4
    times = sample_grid(seconds, 12)
    # One update per sample, read back through the InfiniBand source's own pread path.
    writer = SysfsWriter(tmp_path / "sys", TrafficModel(profile, 12))
    writer.create()
    source = InfiniBandSource(str(writer.root))
    source.open()
    row = SampleRow.for_ports(9)
    through_files = np.empty((2, 9, times.shape[1]), dtype=np.int64)
    try:
        for tick in range(times.shape[1]):
            # A sysfs file holds one value: sample one port at a time, at its own time.
            for port in range(9):
                writer.update_fast(int(times[port, tick]))
                source.read_into(row)
                through_files[0, port, tick] = row.xmit_bytes[port]
                through_files[1, port, tick] = row.rcv_bytes[port]
    finally:
        source.close()
        writer.close()
    direct = TrafficModel(profile, 12).counters_at(times)
    for port, spec in enumerate(writer.model.ports):
        for direction in range(2):
            rate = spec.line_rate_bytes_per_second
            _, expected = analyze(times[port], direct[direction][port] // 4 * 4, rate)
            _, actual = analyze(times[port], through_files[direction, port], rate)
            assert actual == expected
            assert len(expected) > 0 or port == 8


NDR_BYTES, HDR_BYTES = 50_000_000_000, 25_000_000_000  # 4X NDR and 4X HDR data rates
# The slow poller reads the rate file once a second: a row sampled this long after the
# change comes after the first poll that saw it, however the poll and the change fell.
RATE_SETTLE_NS = 2_500_000_000


def _rates_by_time(trace: Path) -> tuple[list[int], list[int]]:
    """mlx5_0's (timestamps in ns, line rates) of every row of a trace, in time order."""
    import pyarrow.parquet as pq

    table = pq.read_table(trace, columns=["timestamp_us", "line_rate_bytes_per_second"])
    table = table.sort_by("timestamp_us")
    stamps = [us * 1000 for us in table.column("timestamp_us").to_pylist()]
    return stamps, table.column("line_rate_bytes_per_second").to_pylist()


def test_record_and_agent_record_state_the_new_rate_from_a_renegotiation_on(
    tmp_path: Path,
) -> None:
    """The writer retrains mlx5_0 from 4X NDR to 4X HDR while `record` and `agent --record`
    both sample it: in both traces every row up to the change states 400 Gb/s, and from
    the first row stating 200 Gb/s (at most a slow poll after the change) every row does."""
    import signal
    import subprocess
    import sys

    from burstscope.testing.processes import AgentProcess, LoggedProcess

    writer = SysfsWriter(tmp_path / "sys", TrafficModel("dense", 3))
    writer.create()
    stop = threading.Event()
    thread = threading.Thread(target=writer.run, kwargs={"stop": stop}, daemon=True)
    thread.start()
    ports = ("--sysfs-root", str(writer.root), "--include", "^mlx5_0$")
    agent = AgentProcess(*ports, "--record", str(tmp_path / "agent"))
    recorder = LoggedProcess(
        [sys.executable, "-m", "burstscope", "record", *ports, "-o", str(tmp_path / "record")],
        stdout=subprocess.DEVNULL,
    )
    try:
        recorder.wait_log("sampling 1 port(s)")
        agent.scrape_when(
            'burstscope_port_line_rate_bytes_per_second{device="mlx5_0",port="1"} 5e+10'
        )
        time.sleep(1.0)  # rows at 400 Gb/s in both traces
        changed_ns = time.time_ns()
        writer.set_rate(0, "200 Gb/sec (4X HDR)")
        agent.scrape_when(
            'burstscope_port_line_rate_bytes_per_second{device="mlx5_0",port="1"} 2.5e+10'
        )
        # Rows well past the settling time, for the recording whose poll came last too.
        time.sleep((RATE_SETTLE_NS + 1_500_000_000) / 1e9)
    finally:
        assert recorder.stop(signal.SIGTERM) == 0, recorder.stderr
        assert agent.run.stop() == 0, agent.run.stderr
        stop.set()
        thread.join(5)
        writer.close()
    (agent_trace,) = (tmp_path / "agent").iterdir()
    for trace in (tmp_path / "record", agent_trace):
        stamps, rates = _rates_by_time(trace)
        assert stamps[-1] > changed_ns + RATE_SETTLE_NS, trace
        first_new = rates.index(HDR_BYTES) if HDR_BYTES in rates else len(rates)
        assert stamps[first_new - 1] < changed_ns + RATE_SETTLE_NS, (trace, "new rate late")
        assert stamps[first_new] >= changed_ns, (trace, "new rate before the change")
        assert set(rates[:first_new]) == {NDR_BYTES}, trace
        assert set(rates[first_new:]) == {HDR_BYTES}, trace
