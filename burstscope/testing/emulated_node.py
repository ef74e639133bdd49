"""An emulated RoCE node for the exporter tests and benchmark: sysfs-shaped counters moving.

A writer process rewrites the data counters of a sysfs-shaped tree every millisecond
with line-rate bursts; ``running_agent`` starts the real Agent on it. Shared by
tests/test_exposition.py, tests/test_prometheus_integration.py and bench/exporter.py.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from burstscope.testing.processes import free_port

DATA_FILES = {"transmit": "port_xmit_data", "receive": "port_rcv_data"}
# IB PortCounters port_{xmit,rcv}_data count 4-octet words (perfquery(8)).
WORD_BYTES = 4
SLOW_COUNTERS = (
    "link_downed",
    "port_xmit_wait",
    "symbol_error",
    "link_error_recovery",
    "port_rcv_errors",
    "port_xmit_discards",
    "port_xmit_packets",
    "port_rcv_packets",
)
HW_COUNTERS = ("np_cnp_sent", "np_ecn_marked_roce_packets", "rp_cnp_handled", "rp_cnp_ignored")


class StopFlag(Protocol):
    def is_set(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Load:
    """Traffic on one port direction: ``fraction`` of line rate while on.

    On for ``duty`` of every ``period_s`` (duty 1: continuous). Cumulative bytes are a pure
    function of elapsed time, so a writer that wakes late still writes the right counter.
    """

    fraction: float
    period_s: float = 1.0
    duty: float = 1.0

    def on_seconds(self, elapsed: float) -> float:
        if self.duty >= 1.0:
            return elapsed
        whole, part = divmod(elapsed, self.period_s)
        return whole * self.period_s * self.duty + min(part, self.period_s * self.duty)


@dataclass
class EmulatedNode:
    """A sysfs-shaped tree of RoCE ports under ``root`` (class/infiniband/<dev>/ports/1).

    Ethernet link layer with hw_counters/ (so the agent polls CNP/ECN counters) and no
    netdev (so it runs no ethtool against the real kernel). Counter files are rewritten in
    place (pwrite at 0 + ftruncate), never renamed: the agent keeps its descriptors open.
    """

    root: Path
    devices: Sequence[str]
    rate_gbits: int = 400
    paths: dict[tuple[str, str], Path] = field(default_factory=dict)

    @property
    def line_rate_bytes_per_second(self) -> int:
        return self.rate_gbits * 1_000_000_000 // 8

    def build(self) -> EmulatedNode:
        for device in self.devices:
            port = self.root / "class" / "infiniband" / device / "ports" / "1"
            counters = port / "counters"
            hw = port / "hw_counters"
            counters.mkdir(parents=True, exist_ok=True)
            hw.mkdir(exist_ok=True)
            (port / "rate").write_text(f"{self.rate_gbits} Gb/sec (4X NDR)\n")
            (port / "state").write_text("4: ACTIVE\n")
            (port / "phys_state").write_text("5: LinkUp\n")
            (port / "link_layer").write_text("Ethernet\n")
            (hw / "lifespan").write_text("10\n")
            for name in (*DATA_FILES.values(), *SLOW_COUNTERS):
                (counters / name).write_text("0\n")
                self.paths[(device, name)] = counters / name
            for name in HW_COUNTERS:
                (hw / name).write_text("0\n")
                self.paths[(device, name)] = hw / name
            self.paths[(device, "state")] = port / "state"
        return self

    def write(self, device: str, name: str, text: str) -> None:
        """Rewrite one attribute in place, as sysfs would show a new value."""
        fd = os.open(self.paths[(device, name)], os.O_WRONLY)
        try:
            data = text.encode()
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)


class CounterWriter:
    """Advances data counters by their loads every ``period_s``; run() in a thread or process."""

    def __init__(self, node: EmulatedNode, period_s: float = 0.0005) -> None:
        self.node = node
        self.period_s = period_s
        self.loads: dict[tuple[str, str], Load] = {}
        self._lock = threading.Lock()
        # (device, direction) -> (bytes carried before the current load, its start time)
        self._base: dict[tuple[str, str], tuple[float, float]] = {}

    def set_load(self, device: str, direction: str, load: Load | None, now: float = -1.0) -> None:
        now = time.monotonic() if now < 0 else now
        with self._lock:
            key = (device, direction)
            carried = self._carried(key, now)
            if load is None:
                self.loads.pop(key, None)
            else:
                self.loads[key] = load
            self._base[key] = (carried, now)

    def _carried(self, key: tuple[str, str], now: float) -> float:
        base, started = self._base.get(key, (0.0, now))
        load = self.loads.get(key)
        if load is None:
            return base
        rate = self.node.line_rate_bytes_per_second * load.fraction
        return base + rate * load.on_seconds(now - started)

    def run(self, stop: StopFlag) -> None:
        fds = {
            (device, direction): os.open(self.node.paths[(device, name)], os.O_WRONLY)
            for device in self.node.devices
            for direction, name in DATA_FILES.items()
        }
        last: dict[tuple[str, str], int] = {}
        try:
            while not stop.is_set():
                now = time.monotonic()
                with self._lock:
                    words = {
                        key: int(self._carried(key, now)) // WORD_BYTES for key in list(self._base)
                    }
                for key, value in words.items():
                    if last.get(key) == value:
                        continue
                    data = f"{value}\n".encode()
                    os.pwrite(fds[key], data, 0)
                    os.ftruncate(fds[key], len(data))
                    last[key] = value
                time.sleep(self.period_s)
        finally:
            for fd in fds.values():
                os.close(fd)

    @contextlib.contextmanager
    def running_in_thread(self) -> Iterator[CounterWriter]:
        stop = threading.Event()
        thread = threading.Thread(target=self.run, args=(stop,), name="counter-writer")
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join(5)


def agent_settings(arguments: Sequence[str]) -> Any:
    """AgentSettings from command-line arguments, through the agent's own parser."""
    from burstscope.agent import settings_from_args
    from burstscope.arguments import add_source_arguments
    from burstscope.commands.agent import add_agent_arguments

    parser = argparse.ArgumentParser(prog="burstscope agent")
    add_source_arguments(parser, defaults=False)
    add_agent_arguments(parser)
    return settings_from_args(parser.parse_args(list(arguments)))


@contextlib.contextmanager
def running_agent(sysfs_root: Path, *extra: str) -> Iterator[tuple[Any, str]]:
    """A started in-process Agent on a free loopback port; yields (agent, metrics URL)."""
    from burstscope.agent import Agent
    from burstscope.collector.pipeline import wait_for_first_sample
    from burstscope.errors import UsageError

    for attempt in range(5):
        port = free_port()
        args = ["--source", "sysfs", "--sysfs-root", str(sysfs_root), *extra]
        agent = Agent(agent_settings([*args, "--listen", f"127.0.0.1:{port}"]))
        try:
            agent.start()
        except UsageError:
            agent.pipeline.close()
            if attempt == 4:
                raise
            continue
        break
    try:
        if not wait_for_first_sample(agent.pipeline):
            raise RuntimeError("the sampler did not tick within 10 s")
        yield agent, f"http://127.0.0.1:{port}/metrics"
    finally:
        agent.stop()


def scrape(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body: bytes = response.read()
        return body.decode()
