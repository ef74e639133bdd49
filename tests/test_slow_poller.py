"""The slow poller end to end: real files rewritten between polls, one background thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from burstscope.collector.discovery import discover
from burstscope.collector.slow_poller import (
    CounterState,
    SlowPoller,
    SlowSnapshot,
)
from burstscope.collector.sources.base import SlowReading, SlowSource
from burstscope.collector.sources.ethtool import EthtoolSource
from burstscope.collector.sources.hw_counters import HwCountersSysfsSource
from burstscope.collector.sources.infiniband import InfiniBandSource
from burstscope.collector.sources.netdev import NetdevSource
from burstscope.collector.sources.port_counters import PortCounterSource
from burstscope.collector.sources.rdma_netlink import RdmaNetlinkSource
from burstscope.detectors.counters import RESETTING_64
from tests.conftest import SYSFS

FAST = 0.02  # seconds between polls in tests; production never goes below 1 s


def wait_for(poller: SlowPoller, done: Callable[[SlowSnapshot], bool]) -> SlowSnapshot:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        snapshot = poller.snapshot()
        if done(snapshot):
            return snapshot
        time.sleep(0.005)
    raise AssertionError(f"condition not reached: {poller.snapshot()}")


def polls_at_least(count: int) -> Callable[[SlowSnapshot], bool]:
    return lambda s: all(h.polls >= count for h in s.sources)


def test_intervals_below_the_minimum_are_refused() -> None:
    source = PortCounterSource(discover(SYSFS).ports)
    with pytest.raises(ValueError, match=r"below the minimum of 1\.0 s"):
        SlowPoller([source], interval_seconds=0.5)
    with pytest.raises(ValueError, match="'port_slow'"):
        SlowPoller([source], intervals={"port_slow": 0.1})
    SlowPoller([source], interval_seconds=FAST, minimum_interval_seconds=FAST)


def test_saturation_reset_and_wrap_through_the_thread(sysfs_copy: Path) -> None:
    discovered = discover(sysfs_copy).ports
    roce = [p for p in discovered if p.device == "mlx5_1"]
    sources: list[SlowSource] = [PortCounterSource(discovered), HwCountersSysfsSource(roce)]
    counters = sysfs_copy / "class/infiniband/mlx5_0/ports/1/counters"
    hw = sysfs_copy / "class/infiniband/mlx5_1/ports/1/hw_counters"
    (hw / "out_of_buffer").write_text("4294967290\n")

    # One step of file rewrites per poll, then the expected state after all of them.
    steps: list[dict[Path, str]] = [
        {counters / "symbol_error": "65530", hw / "out_of_buffer": "5", hw / "np_cnp_sent": "1600"},
        {counters / "symbol_error": "65535", counters / "port_xmit_wait": "4294967295"},
        {counters / "symbol_error": "65535", hw / "np_cnp_sent": "4"},  # stuck; PerfMgr-style reset
    ]
    poller = SlowPoller(sources, interval_seconds=FAST, minimum_interval_seconds=FAST)
    with poller:
        polls = 1
        wait_for(poller, polls_at_least(polls))
        for step in steps:
            for path, text in step.items():
                path.write_text(text + "\n")
            polls += 1
            # Two more polls: the rewrite may land while a poll is running.
            wait_for(poller, polls_at_least(polls + 1))
            polls += 1
        snapshot = poller.snapshot()

    got = snapshot.counters
    symbol = got[("mlx5_0", 1, "symbol_error")]
    # 0 -> 65530 -> 65535 (saturated: a lower bound) -> 65535: no increment invented.
    assert (symbol.value, symbol.increment, symbol.saturated, symbol.resets) == (
        65535,
        65535,
        True,
        0,
    )
    wait_counter = got[("mlx5_0", 1, "port_xmit_wait")]
    assert wait_counter.saturated and wait_counter.value == 2**32 - 1
    wrapped = got[("mlx5_1", 1, "out_of_buffer")]
    # A 32-bit Q counter: 4294967290 -> 5 is 11 events, not a reset.
    assert (wrapped.increment, wrapped.resets) == (11, 0)
    cnp = got[("mlx5_1", 1, "np_cnp_sent")]
    # 1520 -> 1600 (+80), then 4: a 64-bit counter went backwards, re-baselined.
    assert (cnp.value, cnp.increment, cnp.resets) == (4, 80, 1)
    assert got[("mlx5_0", 1, "state")].increment is None
    assert cnp.source == "hw_counters" and symbol.source == "port_slow"

    health = {h.name: h for h in snapshot.sources}
    for h in health.values():
        assert h.polls == h.read_seconds_count >= 7
        assert h.last_read_seconds is not None and 0 < h.last_read_seconds < 1
        assert h.read_buckets[-1] == h.polls  # +Inf holds every poll
        assert list(h.read_buckets) == sorted(h.read_buckets)  # cumulative
    # mlx5_2's symbol_error reads "N/A (no PMA)" on every poll: counted, never fatal.
    assert health["port_slow"].errors == health["port_slow"].polls
    assert health["hw_counters"].errors == 0


def test_timestamps_are_read_midpoints(sysfs_copy: Path) -> None:
    poller = SlowPoller([PortCounterSource(discover(sysfs_copy).ports)])
    before = time.monotonic_ns()
    poller.poll_once()
    after = time.monotonic_ns()
    stamps = {c.timestamp_ns for c in poller.snapshot().counters.values()}
    assert len(stamps) == 1 and before < stamps.pop() < after
    poller.close()


class FlakySource:
    """A source that fails its second poll, as an interface that vanishes and returns would."""

    def __init__(self) -> None:
        self.name = "flaky"
        self.opens = 0
        self.polls = 0
        self.values = iter([10, 500, 510, 530])

    def open(self) -> None:
        self.opens += 1

    def poll(self) -> list[SlowReading]:
        self.polls += 1
        if self.polls == 2:
            raise OSError(19, "No such device")
        return [SlowReading("veth0", 1, "rx_prio3_pause", next(self.values), RESETTING_64)]

    def close(self) -> None:
        pass


class BrokenSource:
    name = "broken"

    def open(self) -> None:
        raise PermissionError("nope")

    def poll(self) -> list[SlowReading]:
        raise AssertionError("never opened")

    def close(self) -> None:
        raise AssertionError("never opened")


def test_a_failing_source_is_reopened_and_rebaselined_without_stopping_others() -> None:
    flaky = FlakySource()
    poller = SlowPoller([BrokenSource(), flaky])
    for _ in range(5):
        poller.poll_once()
    snapshot = poller.snapshot()
    pause = snapshot.counters[("veth0", 1, "rx_prio3_pause")]
    # 10 (first: unknown); poll 2 failed; reopened: 500 is a re-baseline, not +490; then
    # 510 (+10) and 530 (+20).
    assert (pause.value, pause.increment, pause.resets) == (530, 30, 0)
    assert flaky.opens == 2
    broken, healthy = snapshot.sources
    assert (broken.polls, broken.errors) == (0, 5)
    assert broken.last_error == "open: PermissionError: nope"
    assert (healthy.polls, healthy.errors) == (4, 1)
    assert healthy.last_error == "poll: OSError: [Errno 19] No such device"


def test_snapshot_is_safe_while_the_thread_polls(sysfs_copy: Path) -> None:
    poller = SlowPoller(
        [PortCounterSource(discover(sysfs_copy).ports)],
        interval_seconds=0.001,
        minimum_interval_seconds=0.001,
    )
    seen: list[int] = []
    with poller:
        stop = time.monotonic() + 0.2
        while time.monotonic() < stop or (
            poller.snapshot().sources[0].polls < 20 and time.monotonic() < stop + 5
        ):
            snapshot = poller.snapshot()
            seen.append(len(snapshot.counters))
            assert all(isinstance(c, CounterState) for c in snapshot.counters.values())
    # 17 for mlx5_0, 10 for mlx5_1, 6 for mlx5_2 (data rate beside the rest), 4 for irdma0
    # (state, phys_state, rate, data rate: it has no counters/)
    assert max(seen) == 37
    assert not any(t.name == "burstscope-slow-poller" for t in threading.enumerate())


def test_the_infiniband_source_names_its_slow_sources() -> None:
    fast = InfiniBandSource(str(SYSFS))
    sources = fast.slow_sources(probe=lambda _: "no RDMA netlink here")
    assert [s.name for s in sources] == ["port_slow", "hw_counters", "ethtool:ens1f1np1"]
    port_slow, hw, ethtool = sources
    assert isinstance(port_slow, PortCounterSource)
    # Every port, mlx5_3 (N/A (no PMA)) too: its state and rate are exported.
    assert [p.device for p in port_slow.ports] == ["irdma0", "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    # RoCE ports: irdma0 (bytes and congestion counters in hw_counters/) and mlx5_1.
    assert isinstance(hw, HwCountersSysfsSource)
    assert [(p.device, p.port) for p in hw.ports] == [("irdma0", 1), ("mlx5_1", 1)]
    assert isinstance(ethtool, EthtoolSource) and ethtool.interface == "ens1f1np1"

    without_ethtool = InfiniBandSource(str(SYSFS), ethtool=False)
    with_netlink = without_ethtool.slow_sources(probe=lambda _: None)
    assert [s.name for s in with_netlink] == ["port_slow", "rdma_netlink"]
    assert isinstance(with_netlink[1], RdmaNetlinkSource)
    assert list(with_netlink[1].ports) == [("irdma0", 1), ("mlx5_1", 1)]


def test_the_netdev_source_names_ethtool_and_it_reads_lo_for_real() -> None:
    fast = NetdevSource(("lo",))
    # The interface's speed, re-read every poll, is the line rate's one road.
    without_ethtool = NetdevSource(("lo",), ethtool=False)
    assert [s.name for s in without_ethtool.slow_sources()] == ["netdev_rate"]
    sources = fast.slow_sources()
    assert [s.name for s in sources] == ["netdev_rate", "ethtool:lo"]
    poller = SlowPoller(sources)
    poller.poll_once()
    _, health = poller.snapshot().sources
    assert (health.polls, health.errors) == (1, 0)  # lo has no driver stats: empty, not an error
    poller.close()


def test_a_replacing_poller_carries_the_totals_on(sysfs_copy: Path) -> None:
    """A port-filter reload replaces the poller; kept counters must not go back to zero."""
    ports = discover(sysfs_copy).ports
    wait_file = sysfs_copy / "class/infiniband/mlx5_0/ports/1/counters/port_xmit_wait"
    key = ("mlx5_0", 1, "port_xmit_wait")
    first = SlowPoller([PortCounterSource(ports)], minimum_interval_seconds=0)
    first.poll_once()
    wait_file.write_text("5831\n")  # +1000
    first.poll_once()
    assert first.snapshot().counters[key].increment == 1000
    second = SlowPoller([PortCounterSource(ports)], minimum_interval_seconds=0)
    second.adopt(first)
    second.poll_once()  # re-baselines: the interval across the swap is not counted
    wait_file.write_text("6831\n")  # +1000
    second.poll_once()
    assert second.snapshot().counters[key].increment == 2000
    first.close()
    second.close()


def test_recording_keeps_each_poll_for_the_trace_and_polls_once_more_at_stop() -> None:
    flaky = FlakySource()
    poller = SlowPoller([flaky], minimum_interval_seconds=0, record=True)
    before = time.monotonic_ns()
    poller.poll_once()
    poller.poll_once()  # fails: nothing recorded
    poller.poll_once()  # reopened: a re-baseline
    after = time.monotonic_ns()
    rows = poller.take_rows(wall_offset_ns=10**18)
    assert [(r.device, r.name, r.value, r.spec, r.rebaseline) for r in rows] == [
        ("veth0", "rx_prio3_pause", 10, RESETTING_64, True),
        ("veth0", "rx_prio3_pause", 500, RESETTING_64, True),
    ]
    # Poll midpoints on CLOCK_MONOTONIC, moved by the samples' wall offset.
    assert all(before + 10**18 <= r.timestamp_ns <= after + 10**18 for r in rows)
    assert poller.take_rows(0) == []
    # A replacing poller takes over what was not yet in the trace, ahead of its own polls.
    poller.poll_once()  # 510
    successor = SlowPoller([flaky], minimum_interval_seconds=0, record=True)
    successor.adopt(poller)
    successor.start()
    successor.stop(final_poll=True)  # the start poll and the last: every source read twice
    values = [r.value for r in successor.take_rows(0)]
    assert values[0] == 510 and len(values) >= 2


def test_not_recording_keeps_nothing() -> None:
    poller = SlowPoller([FlakySource()], minimum_interval_seconds=0)
    poller.poll_once()
    assert poller.take_rows(0) == []


def test_a_poller_thread_that_ends_or_hangs_is_restarted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Supervision of the slow poller: a thread that died, or one stuck in a read."""
    import threading

    from burstscope.collector import supervisor
    from burstscope.collector.pipeline import Pipeline
    from burstscope.collector.sampler import SamplerConfig
    from burstscope.collector.slow_poller import SlowPoller
    from burstscope.collector.sources import build_source
    from burstscope.testing.processes import wait_until

    release = threading.Event()

    class Misbehaving:
        name = "misbehaving"
        polls = 0

        def open(self) -> None:
            pass

        def poll(self) -> list[SlowReading]:
            Misbehaving.polls += 1
            if Misbehaving.polls == 1:
                raise SystemExit("a source that ends its thread")  # not an Exception
            if Misbehaving.polls == 2:
                release.wait(60)  # a read that hangs (a wedged firmware command)
            return []

        def close(self) -> None:
            pass

    monkeypatch.setattr(supervisor, "SLOW_STALL_SECONDS", 0.5)
    monkeypatch.setattr(supervisor, "HEALTHY_SECONDS", 0.0)
    monkeypatch.setattr(SlowPoller, "interval_seconds", property(lambda self: 0.01))
    pipeline = Pipeline(
        build_source("sim"),
        SamplerConfig(interval_ns=10_000_000, realtime_priority=None, cpu=-1),
        slow_sources=[Misbehaving()],
        slow_interval_seconds=1.0,
    )
    pipeline.start()
    try:
        assert wait_until(lambda: pipeline.snapshot().health.restarts["slow_poller"] >= 2)
        assert wait_until(lambda: Misbehaving.polls >= 3)
    finally:
        release.set()
        pipeline.close()
