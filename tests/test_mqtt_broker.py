"""MQTT against a real Mosquitto started here: payloads, a 10 s outage, TLS, passwords."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from burstscope.testing.processes import (
    DEADLINE_SECONDS,
    AgentProcess,
    fetch,
    free_port,
    metric,
    wait_until,
)
from tests.conftest import require_binary
from tests.test_agent import make_certificates
from tests.test_cli_core import assert_usage_error

pytestmark = pytest.mark.integration
WORDS_PER_SECOND = 400e9 / 8 / 4  # 400 Gb/s in 4-octet port_xmit_data units


class Broker:
    """mosquitto on a free loopback port, config and persistence in a temporary directory."""

    def __init__(self, directory: Path, extra: str = "", anonymous: bool = True) -> None:
        self.binary = require_binary("mosquitto")
        self.directory = directory
        self.port = free_port()
        self.config = directory / "mosquitto.conf"
        self.config.write_text(
            f"listener {self.port} 127.0.0.1\n"
            f"allow_anonymous {'true' if anonymous else 'false'}\n"
            f"persistence true\npersistence_location {directory}/\n"
            # Save after every change, not once a second: a subscriber's persistent session
            # must outlive a SIGKILL that comes right after it subscribed (the outage test
            # kills the broker; with timed saves the session was sometimes never on disk).
            "autosave_on_changes true\nautosave_interval 1\n"
            + ("user root\n" if os.geteuid() == 0 else "")
            + extra
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = (self.directory / "mosquitto.log").open("ab")
        self.process = subprocess.Popen(
            [self.binary, "-c", str(self.config)], stdout=log, stderr=log
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 0.2),
            ):
                return
            time.sleep(0.05)
        raise AssertionError(
            f"mosquitto did not listen: {(self.directory / 'mosquitto.log').read_text()}"
        )

    def log(self) -> str:
        path = self.directory / "mosquitto.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    running = Broker(tmp_path)
    running.start()
    yield running
    running.kill()


class Subscriber:
    """``burstscope events --json`` in a subprocess, its lines collected by a thread."""

    def __init__(self, url: str, *args: str) -> None:
        self.lines: list[dict[str, Any]] = []
        self.schema_versions: set[Any] = set()  # each line's, taken out of the line
        self.stderr_lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "burstscope", "events", "--mqtt", url, "--json", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.subscribed = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._watch_stderr, daemon=True).start()
        assert self.subscribed.wait(15), "events did not subscribe"

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            document = json.loads(line)
            self.schema_versions.add(document.pop("schema_version", None))
            self.lines.append(document)

    def _watch_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr_lines.append(line)
            if "subscribed" in line:
                self.subscribed.set()

    def stderr_text(self) -> str:
        return "".join(self.stderr_lines)

    def events(self) -> list[dict[str, Any]]:
        return [line for line in list(self.lines) if "seq" in line and "gap" not in line]

    def wait_for(self, predicate: Any, timeout: float) -> bool:
        """Whether ``predicate`` came true. ``timeout`` is what a quiet machine needs; a
        loaded one gets at least DEADLINE_SECONDS (a reconnecting subscriber backs off)."""
        return wait_until(predicate, max(timeout, DEADLINE_SECONDS))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(5)


class EmulatedPort:
    """Writes mlx5_0 port 1's data counters in place every ~0.5 ms: a 20 ms line-rate burst
    every 200 ms on transmit, receive idle."""

    def __init__(self, root: Path, period: float = 0.2, burst: float = 0.02) -> None:
        counters = root / "class/infiniband/mlx5_0/ports/1/counters"
        self.fds = [os.open(counters / name, os.O_RDWR) for name in ("port_xmit_data",)]
        self.period, self.burst = period, burst
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.start = time.monotonic()
        self.thread.start()

    def words(self, elapsed: float) -> int:
        cycles, into = divmod(elapsed, self.period)
        busy = cycles * self.burst + min(into, self.burst)
        return 1_000_000 + round(busy * WORDS_PER_SECOND)

    def _run(self) -> None:
        while not self.stop_event.is_set():
            text = f"{self.words(time.monotonic() - self.start)}\n".encode()
            for fd in self.fds:
                os.pwrite(fd, text, 0)  # in place, like sysfs: never a rename
                os.ftruncate(fd, len(text))
            time.sleep(0.0005)

    def close(self) -> None:
        self.stop_event.set()
        self.thread.join(2)
        for fd in self.fds:
            os.close(fd)


def wait_metric(url: str, prefix: str, wanted: Any, timeout: float = DEADLINE_SECONDS) -> str:
    """The first scrape where ``prefix`` reads ``wanted`` (any value when None; a callable
    is asked about the value).

    The agent serves /metrics and samples before its MQTT publisher has attached and
    tried the broker (that takes up to connect_check_seconds), so a scrape right after
    the first tick may not carry the publisher's series yet.
    """
    deadline = time.monotonic() + timeout
    body = ""
    while time.monotonic() < deadline:
        body = fetch(url + "/metrics")
        for line in body.splitlines():
            if not line.startswith(prefix):
                continue
            value = float(line.split()[-1])
            if wanted is None or (wanted(value) if callable(wanted) else value == wanted):
                return body
        time.sleep(0.1)
    raise AssertionError(f"{prefix!r} never read {wanted!r}")


def agent_args(root: Path, url: str, *extra: str) -> list[str]:
    return ["--sysfs-root", str(root), "--include", "mlx5_0", "--mqtt", url, *extra]


def test_outage_of_ten_seconds_loses_nothing(
    tmp_path: Path, sysfs_copy: Path, broker: Broker
) -> None:
    url = f"mqtt://127.0.0.1:{broker.port}"
    subscriber = Subscriber(url, "--session", "outage-test")
    port = EmulatedPort(sysfs_copy)
    agent = AgentProcess(*agent_args(sysfs_copy, url))
    try:
        agent.wait_ready()
        assert subscriber.wait_for(lambda: len(subscriber.events()) >= 5, 15)
        killed_ns = time.time_ns()
        broker.kill()
        time.sleep(5)
        during = fetch(agent.url + "/metrics")
        assert metric(during, "burstscope_mqtt_connected ") == 0
        depth_then = metric(during, "burstscope_mqtt_spool_messages ")
        time.sleep(5)
        restarted_ns = time.time_ns()
        assert metric(fetch(agent.url + "/metrics"), "burstscope_mqtt_spool_messages ") > (
            depth_then > 0
        )
        broker.start()

        def drained() -> bool:
            body = fetch(agent.url + "/metrics")
            return (
                metric(body, "burstscope_mqtt_connected ") == 1
                and metric(body, "burstscope_mqtt_spool_messages ") == 0
            )

        assert subscriber.wait_for(drained, 25), "agent did not reconnect and drain"
        status, stderr = agent.stop(), agent.stderr
        assert status == 0, stderr
        assert subscriber.wait_for(
            lambda: any(line.get("online") is False for line in subscriber.lines), 10
        )
    finally:
        port.close()
        agent.stop()
        subscriber.stop()
    offline = [line for line in subscriber.lines if line.get("online") is False][-1]
    events = subscriber.events()
    seqs = [event["seq"] for event in events]
    assert seqs == list(range(1, offline["last_seq"] + 1)), (
        f"out of order or missing; broker log:\n{broker.log()}\nsubscriber stderr:\n"
        f"{subscriber.stderr_text()}"
    )
    assert not [line for line in subscriber.lines if "gap" in line]
    bursts = [e for e in events if e["kind"] == "burst"]
    meanwhile = [e for e in bursts if killed_ns <= e["end_ns"] <= restarted_ns]
    assert len(meanwhile) >= 30, len(meanwhile)  # ~50 bursts in 10 s
    first = bursts[0]
    assert {k: first[k] for k in ("host", "device", "port", "direction", "threshold")} == {
        "host": socket.gethostname(),
        "device": "mlx5_0",
        "port": 1,
        "direction": "transmit",
        "threshold": 0.5,
    }
    durations = np.array([e["duration_seconds"] for e in bursts])
    assert 0.015 < float(np.median(durations)) < 0.03
    assert all(e["peak_utilization"] > 0.5 and e["bytes"] > 0 for e in bursts)
    assert "dropped" not in stderr
    report = (
        f"outage: {len(meanwhile)} bursts generated while the broker was down, "
        f"{len(events)} events delivered in order, seq 1..{offline['last_seq']}, no gaps"
    )
    print(report)
    (tmp_path / "outage-report.txt").write_text(report + "\n")


def test_payloads_of_constructed_bursts(broker: Broker) -> None:
    """The publisher driven directly: every field of a burst, a window summary and a job's
    start; each burst names the job holding its port in the table in force at its drain."""
    from burstscope import __version__
    from burstscope.collector.jobs.model import EMPTY_TABLE, Holding, Job, JobTable
    from burstscope.collector.mqtt import attach_mqtt, build_settings
    from burstscope.collector.mqtt.policy import BurstRecord
    from burstscope.collector.sources.base import PortSpec
    from burstscope.detectors.bursts import Bursts

    job = Job("4242", "slurm", "alice", "llama", nodes="gpu-[1-2]", start_time=1.5)
    table = JobTable.build([job], [Holding("4242", "mlx5_0", 1, "compute", "pcie_switch")])
    in_force = [table]
    pipeline = SimpleNamespace(
        source=SimpleNamespace(ports=(PortSpec("mlx5_0", 1, 50_000_000_000),)),
        thresholds=SimpleNamespace(burst=0.5),
        listeners=[],
        jobs=lambda: in_force[0],
        snapshot=lambda: SimpleNamespace(
            ports=(), slow=None, recording=None, jobs=table, silent_since={}, devices=()
        ),
    )
    url = f"mqtt://127.0.0.1:{broker.port}"
    subscriber = Subscriber(url)
    settings = build_settings(url, hostname="node7", max_events_per_second=2.0)
    handle = attach_mqtt(pipeline, settings, version=__version__)  # type: ignore[arg-type]
    handle.start()
    try:
        # The job running when publishing starts is said to start (job events follow the
        # table the watcher swaps in, within JOB_POLL_SECONDS).
        assert subscriber.wait_for(
            lambda: any(e.get("kind") == "job_started" for e in subscriber.events()), 10
        )
        second = (time.time_ns() // 1_000_000_000 - 5) * 1_000_000_000
        ms = 1_000_000
        bursts = Bursts(
            np.array([second, second + 12 * ms, second + 100 * ms, second + 200 * ms]),
            np.array([second + 10 * ms, second + 20 * ms, second + 110 * ms, second + 210 * ms]),
            np.array([400_000_000, 300_000_000, 1, 2]),
            np.array([0.9, 1.0, 0.6, 0.7]),
            np.array([0.8, 0.75, 0.55, 0.65]),
        )
        pipeline.listeners[0](PortSpec("mlx5_0", 1, 0), "transmit", bursts)
        in_force[0] = EMPTY_TABLE  # the job ended after that drain: its bursts keep it
        handle.submit("mlx5_0", 1, "receive", [BurstRecord(second, second + ms, 5, 0.5, 0.5)])
        assert subscriber.wait_for(lambda: len(subscriber.events()) >= 6, 10)
    finally:
        handle.stop()
        # The offline status goes out as the handle stops; the subscriber stays until it is in
        # (checked below): stopped at once, it could miss it (seen on a fresh-clone run).
        subscriber.wait_for(
            lambda: any(line.get("online") is False for line in list(subscriber.lines)), 10
        )
        subscriber.stop()
    run = handle.identity.run
    topic = "burstscope/node7/mlx5_0/1/burst"
    common = {"host": "node7", "device": "mlx5_0", "port": 1, "threshold": 0.5, "run": run}
    held = [{"job_id": "4242", "scheduler": "slurm", "user": "alice", "name": "llama",
             "role": "compute"}]  # fmt: skip
    expected = [
        {"topic": topic, **common, "kind": "burst", "direction": "receive",
         "start_ns": second, "end_ns": second + ms, "duration_seconds": 0.001, "bytes": 5,
         "peak_utilization": 0.5, "mean_utilization": 0.5, "merged": 1, "jobs": []},
        {"topic": topic, **common, "kind": "burst", "direction": "transmit",
         "start_ns": second, "end_ns": second + 20 * ms, "duration_seconds": 0.02,
         "bytes": 700_000_000, "peak_utilization": 1.0,
         "mean_utilization": pytest.approx((0.8 * 10 + 0.75 * 8) / 18), "merged": 2,
         "jobs": held},
        {"topic": topic, **common, "kind": "burst", "direction": "transmit",
         "start_ns": second + 100 * ms, "end_ns": second + 110 * ms, "duration_seconds": 0.01,
         "bytes": 1, "peak_utilization": 0.6, "mean_utilization": 0.55, "merged": 1,
         "jobs": held},
        {"topic": topic, **common, "kind": "summary", "direction": "transmit",
         "start_ns": second, "end_ns": second + 1_000_000_000, "bursts": 1, "bytes": 2,
         "bursts_per_second": 1.0, "bytes_per_second": 2.0, "peak_utilization": 0.7,
         "first_start_ns": second + 200 * ms, "last_end_ns": second + 210 * ms,
         "jobs": held},
    ]  # fmt: skip
    events = subscriber.events()
    assert sorted(e["seq"] for e in events) == [1, 2, 3, 4, 5, 6]  # one sequence, both topics
    seen = [{k: v for k, v in e.items() if k != "seq"} for e in events if e["topic"] == topic]
    assert seen == expected
    started, ended = [e for e in events if e["topic"] == "burstscope/node7/event"]
    assert (ended["kind"], ended["job_id"]) == ("job_ended", "4242")
    assert {k: v for k, v in started.items() if k not in ("seq", "time_ns")} == {
        "topic": "burstscope/node7/event", "kind": "job_started", "host": "node7", "run": run,
        "job_id": "4242", "scheduler": "slurm", "user": "alice", "name": "llama", "step": "",
        "nodes": "gpu-[1-2]", "start_time": 1.5, "namespace": "", "pod": "",
        "ports": [{"device": "mlx5_0", "port": 1, "role": "compute", "rule": "pcie_switch"}],
    }  # fmt: skip
    assert subscriber.schema_versions == {1}
    statuses = [line for line in subscriber.lines if line["topic"].endswith("/status")]
    assert statuses[-1] == {
        "topic": "burstscope/node7/status",
        "host": "node7",
        "online": False,
        "reason": "stopped",
        "version": handle.identity.version,
        "ports": ["mlx5_0/1"],
        "start_time": run / 1e9,
        "run": run,
        "last_seq": 6,
    }


def password_line(user: str, password: str) -> str:
    """A mosquitto password file entry ($6$: salted SHA-512), without mosquitto_passwd."""
    salt = os.urandom(12)
    digest = hashlib.sha512(password.encode() + salt).digest()
    return f"{user}:$6${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}\n"


def test_username_password_and_bad_credentials(tmp_path: Path, sysfs_copy: Path) -> None:
    (tmp_path / "passwords").write_text(password_line("agent", "s3cret"))
    broker = Broker(tmp_path, f"password_file {tmp_path / 'passwords'}\n", anonymous=False)
    broker.start()
    try:
        good = f"mqtt://agent:s3cret@127.0.0.1:{broker.port}"
        subscriber = Subscriber(good)
        agent = AgentProcess(*agent_args(sysfs_copy, good))
        try:
            agent.wait_ready()
            wait_metric(agent.url, "burstscope_mqtt_connected ", 1)
            assert subscriber.wait_for(lambda: any(x.get("online") for x in subscriber.lines), 15)
        finally:
            agent.stop()
            subscriber.stop()
        bad = f"mqtt://agent:wrong@127.0.0.1:{broker.port}"
        listen = f"127.0.0.1:{free_port()}"
        result = subprocess.run(
            [sys.executable, "-m", "burstscope", "agent", "--listen", listen,
             *agent_args(sysfs_copy, bad)],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert_usage_error(result, "refused us: not authorized")  # mosquitto 2 says so
        events = subprocess.run(
            [sys.executable, "-m", "burstscope", "events", "--mqtt", bad, "--json"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert_usage_error(events, "refused us: not authorized")
    finally:
        broker.kill()


def test_tls_with_client_certificates(tmp_path: Path, sysfs_copy: Path) -> None:
    certs = make_certificates(tmp_path)
    broker = Broker(
        tmp_path,
        f"cafile {certs['ca']}\ncertfile {certs['server']}\nkeyfile {certs['server-key']}\n"
        "require_certificate true\n",
    )
    broker.start()
    url = f"mqtts://127.0.0.1:{broker.port}"
    tls = ["--mqtt-ca", str(certs["ca"]), "--mqtt-cert", str(certs["client"]),
           "--mqtt-key", str(certs["client-key"])]  # fmt: skip
    try:
        subscriber = Subscriber(url, *tls)
        agent = AgentProcess(*agent_args(sysfs_copy, url, *tls))
        try:
            agent.wait_ready()
            assert subscriber.wait_for(lambda: any(x.get("online") for x in subscriber.lines), 15)
        finally:
            agent.stop()
            subscriber.stop()
        no_client_cert = subprocess.run(
            [sys.executable, "-m", "burstscope", "events", "--mqtt", url, "--json",
             "--mqtt-ca", str(tmp_path / "missing-ca.pem")],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert_usage_error(no_client_cert, "missing-ca.pem")
    finally:
        broker.kill()


def test_unreachable_broker_at_start_keeps_serving_and_spools(sysfs_copy: Path) -> None:
    url = f"mqtt://127.0.0.1:{free_port()}"
    port = EmulatedPort(sysfs_copy)
    agent = AgentProcess(*agent_args(sysfs_copy, url))
    try:
        agent.wait_ready()
        depth = "burstscope_mqtt_spool_messages "
        first = wait_metric(agent.url, depth, None)
        wait_metric(agent.url, depth, lambda value: value > metric(first, depth))
        second = fetch(agent.url + "/metrics")
        assert metric(second, "burstscope_mqtt_connected ") == 0
        assert metric(second, depth) > metric(first, depth) >= 0
        assert metric(second, "burstscope_sampler_up ") == 1
        status, stderr = agent.stop(), agent.stderr
    finally:
        port.close()
    assert status == 0
    assert stderr.count("unreachable") >= 1 and "Traceback" not in stderr


def test_disk_spool_survives_an_agent_restart(tmp_path: Path, sysfs_copy: Path) -> None:
    """Messages spooled while the broker was away reach it from the next agent run."""
    (tmp_path / "broker").mkdir()
    broker = Broker(tmp_path / "broker")
    url = f"mqtt://127.0.0.1:{broker.port}"  # nothing listens there yet
    spool = tmp_path / "spool"
    port = EmulatedPort(sysfs_copy)
    subscriber = None
    try:
        first = AgentProcess(*agent_args(sysfs_copy, url, "--mqtt-spool-dir", str(spool)))
        first.wait_ready()
        depth = "burstscope_mqtt_spool_messages "
        spooled = metric(wait_metric(first.url, depth, lambda value: value >= 5), depth)
        status, stderr = first.stop(), first.stderr
        assert status == 0, stderr
        broker.start()
        subscriber = Subscriber(url, "--session", "restart-test")
        second = AgentProcess(*agent_args(sysfs_copy, url, "--mqtt-spool-dir", str(spool)))
        second.wait_ready()
        runs = lambda: sorted({e["run"] for e in subscriber.events()})  # noqa: E731
        assert subscriber.wait_for(lambda: len(runs()) >= 2, 20), runs()
        status, stderr = second.stop(), second.stderr
        assert status == 0, stderr
    finally:
        port.close()
        if subscriber is not None:
            subscriber.stop()
        broker.kill()
    earlier = [e["seq"] for e in subscriber.events() if e["run"] == runs()[0]]
    # The first run's messages, in order from its first: none lost to the restart.
    assert len(earlier) >= spooled
    assert earlier[: int(spooled)] == list(range(1, int(spooled) + 1))


def reload_config(root: Path, listen: int, mqtt: str | None, extra: str = "") -> str:
    text = (
        f'[source]\nspec = "sysfs"\nsysfs_root = "{root}"\ninclude = "^mlx5_0$"\n'
        f'[listen]\naddress = "127.0.0.1:{listen}"\n'
    )
    return text + (f'[mqtt]\nurl = "{mqtt}"\n{extra}' if mqtt else "")


def test_sighup_moves_publishing_to_another_broker_and_keeps_the_sequence(
    tmp_path: Path, sysfs_copy: Path, broker: Broker
) -> None:
    from tests.test_reload import ConfiguredAgent

    (tmp_path / "b").mkdir()
    other = Broker(tmp_path / "b")
    other.start()
    (tmp_path / "locked").mkdir()
    (tmp_path / "passwords").write_text(password_line("agent", "s3cret"))
    locked = Broker(
        tmp_path / "locked", f"password_file {tmp_path / 'passwords'}\n", anonymous=False
    )
    locked.start()
    first_url, second_url = (f"mqtt://127.0.0.1:{b.port}" for b in (broker, other))
    on_first, on_second = Subscriber(first_url), Subscriber(second_url)
    port = EmulatedPort(sysfs_copy)
    listen = free_port()
    config = tmp_path / "agent.toml"
    config.write_text(reload_config(sysfs_copy, listen, first_url))
    agent = ConfiguredAgent(config)
    try:
        assert on_first.wait_for(lambda: len(on_first.events()) >= 3, 20), agent.lines
        # The rate policy alone changes in place: no reconnect, no offline status.
        agent.reload(reload_config(sysfs_copy, listen, first_url, "max_events_per_second = 20\n"))
        agent.wait_log(f"reload: mqtt settings applied: publishing to {first_url}")
        count = len(on_first.events())
        assert on_first.wait_for(lambda: len(on_first.events()) >= count + 3, 20)
        assert not [line for line in on_first.lines if line.get("online") is False]
        # To the other broker: the old one hears why this node went offline.
        agent.reload(reload_config(sysfs_copy, listen, second_url))
        agent.wait_log(f"reload: mqtt settings applied: publishing to {second_url}")
        assert on_second.wait_for(lambda: len(on_second.events()) >= 3, 20), agent.lines
        assert on_first.wait_for(
            lambda: any(line.get("reason") == "reconfigured" for line in on_first.lines), 10
        )
        # A broker that refuses us: nothing changes, publishing goes on where it was.
        agent.reload(reload_config(sysfs_copy, listen, f"mqtt://127.0.0.1:{locked.port}"))
        refused = agent.wait_log("reload: mqtt settings not applied, keeping the previous ones")
        assert "refused us" in refused
        count = len(on_second.events())
        assert on_second.wait_for(lambda: len(on_second.events()) >= count + 3, 20)
        # No [mqtt] any more: publishing stops, the status goes offline as at a stop.
        agent.reload(reload_config(sysfs_copy, listen, None))
        agent.wait_log("reload: mqtt publishing stopped")
        assert on_second.wait_for(
            lambda: any(line.get("reason") == "stopped" for line in on_second.lines), 10
        )
        assert "burstscope_mqtt_connected" not in fetch(f"http://127.0.0.1:{listen}/metrics")
    finally:
        port.close()
        agent.process.terminate()
        status = agent.process.wait(10)
        on_first.stop()
        on_second.stop()
        other.kill()
        locked.kill()
    assert status == 0, agent.lines
    first, second = on_first.events(), on_second.events()
    assert {e["run"] for e in first} == {e["run"] for e in second}  # one run throughout
    seqs = sorted({e["seq"] for e in first} | {e["seq"] for e in second})
    assert seqs == list(range(1, seqs[-1] + 1)), "the sequence went on across brokers"
    assert min(e["seq"] for e in second) > 1
    offline = [line for line in on_second.lines if line.get("reason") == "stopped"][-1]
    assert offline["last_seq"] == seqs[-1]
